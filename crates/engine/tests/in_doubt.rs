//! Ownership in doubt, under paused (deterministic) time: while the source cannot
//! confirm it owns its partitions no handler call starts (first attempt, retry or dead-letter
//! write) but nothing is dropped; confirmation resumes every record where it stood, with nothing
//! redelivered; a loss after the doubt drops the work as before, and a revoke or a shutdown does
//! not wait for held records.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use orderly_engine::mem::MemSource;
use orderly_engine::{Engine, EngineConfig};
use tokio::time::Instant;

/// Every handler start (partition, offset, attempt, when).
fn starts(log: &Log) -> Vec<(i32, i64, u32, Instant)> {
    log.events()
        .into_iter()
        .filter_map(|e| match e {
            Ev::Start {
                part,
                offset,
                attempt,
                at,
                ..
            } => Some((part, offset, attempt, at)),
            _ => None,
        })
        .collect()
}

fn dead_letters(log: &Log) -> Vec<(i32, i64)> {
    log.events()
        .into_iter()
        .filter_map(|e| match e {
            Ev::Dlq { part, offset, .. } => Some((part, offset)),
            _ => None,
        })
        .collect()
}

/// In doubt for 10 s (longer than the 3 s stuck-gap timeout): the record already running
/// finishes and is committed, nothing else starts (not the next record of its session, not a
/// retry, not a dead-letter write, not a record fetched meanwhile, not a record of a partition
/// assigned meanwhile), and nothing is mistaken for stuck. Confirmed: everything runs, each
/// record exactly once, in session order.
#[test]
fn in_doubt_holds_every_start_and_confirmation_resumes_without_redelivery() {
    let (log, mut handler, dlq) = logged();
    handler.default_duration = Duration::from_millis(50);
    // P0, session "a": 0 is running when the doubt starts and ends during it.
    handler.durations.insert((0, 0), Duration::from_secs(2));
    // P1: 0 fails transiently once (its retry falls into the doubt); 1 fails permanently
    // (its dead-letter write falls into the doubt).
    handler
        .steps
        .insert((1, 0), vec![Step::Transient, Step::Ok]);
    handler
        .durations
        .insert((1, 0), Duration::from_millis(1500));
    handler.steps.insert((1, 1), vec![Step::Permanent]);
    handler
        .durations
        .insert((1, 1), Duration::from_millis(1500));
    let (source, handle) = MemSource::new(10);
    let mut produced = Vec::new();
    let p0: Vec<_> = (0..5).map(|i| rec(0, i, Some("a"))).collect();
    let p1: Vec<_> = (0..2).map(|i| rec(1, i, Some(&format!("k{i}")))).collect();
    handle.produce(&tp(0), p0.clone());
    handle.produce(&tp(1), p1.clone());
    produced.extend(p0);
    produced.extend(p1);
    handle.assign(&[tp(0), tp(1)]);
    let cfg = EngineConfig {
        stuck_timeout: Some(Duration::from_secs(3)),
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let log2 = log.clone();
    let produced2 = produced.clone();
    let handle2 = handle.clone();
    paused_runtime().block_on(async move {
        let (handle, mut produced) = (handle2, produced2);
        let run = tokio::spawn(run_checked(engine, source, log2));
        tokio::time::sleep(Duration::from_secs(1)).await;
        handle.ownership_in_doubt();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let doubt_from = Instant::now();
        // Fetched and assigned while in doubt.
        let more: Vec<_> = (2..6).map(|i| rec(1, i, Some(&format!("k{i}")))).collect();
        handle.produce(&tp(1), more.clone());
        produced.extend(more);
        let p2: Vec<_> = (0..3).map(|i| rec(2, i, Some("b"))).collect();
        handle.produce(&tp(2), p2.clone());
        produced.extend(p2);
        handle.assign(&[tp(2)]);
        tokio::time::sleep(Duration::from_secs(10)).await;
        let during: Vec<_> = starts(&log)
            .into_iter()
            .filter(|s| s.3 >= doubt_from)
            .collect();
        assert!(during.is_empty(), "started while in doubt: {during:?}");
        assert!(
            dead_letters(&log).is_empty(),
            "a dead-letter write started while in doubt (or a held record was taken for stuck)"
        );
        // The running record finished during the doubt and was committed.
        assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(1));
        handle.ownership_confirmed();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(5));
        assert_eq!(handle.committed(&tp(1)).map(|c| c.offset), Some(6));
        assert_eq!(handle.committed(&tp(2)).map(|c| c.offset), Some(3));
        assert_eq!(dead_letters(&log), vec![(1, 1)]);
        handle.close();
        run.await.unwrap().unwrap();
        assert_each_once(&log, &produced);
        assert_session_order(&log, &produced);
        // Nothing redelivered: each record started once, except P1:0's retry.
        for r in &produced {
            let n = starts(&log)
                .iter()
                .filter(|s| s.0 == r.partition.partition && s.1 == r.offset)
                .count();
            let want = if (r.partition.partition, r.offset) == (1, 0) {
                2
            } else {
                1
            };
            assert_eq!(n, want, "{}:{} started {n} times", r.partition, r.offset);
        }
    });
}

/// In doubt, then lost: the held records are dropped without a commit (as for any loss) and never
/// started; a revoke during the doubt and a shutdown during the doubt do not wait for held
/// records (they would wait for ever).
#[test]
fn in_doubt_then_lost_revoked_or_shut_down_never_starts_held_records() {
    let (log, mut handler, dlq) = logged();
    handler.default_duration = Duration::from_millis(50);
    handler.durations.insert((0, 0), Duration::from_millis(500));
    handler.durations.insert((1, 0), Duration::from_millis(500));
    handler.durations.insert((2, 0), Duration::from_millis(500));
    let (source, handle) = MemSource::new(10);
    for p in 0..3 {
        handle.produce(&tp(p), (0..4).map(|i| rec(p, i, Some("s"))));
    }
    handle.assign(&[tp(0), tp(1), tp(2)]);
    let cfg = EngineConfig {
        revoke_timeout: Duration::from_secs(60),
        drain_timeout: Duration::from_secs(60),
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let log2 = log.clone();
    let log3 = log.clone();
    let handle2 = handle.clone();
    paused_runtime().block_on(async move {
        let (handle, log) = (handle2, log3);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(engine.run(
            Checking {
                inner: source,
                log: log2,
            },
            async {
                let _ = stop_rx.await;
            },
        ));
        tokio::time::sleep(Duration::from_millis(100)).await;
        handle.ownership_in_doubt();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let t = Instant::now();
        handle.lose(&[tp(0)]).await.unwrap();
        handle.revoke(&[tp(1)]).await.unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "the revoke waited {:?} for held records",
            t.elapsed()
        );
        // The running records finished before the revoke's commit.
        assert_eq!(handle.committed(&tp(1)).map(|c| c.offset), Some(1));
        assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(1));
        let t = Instant::now();
        stop_tx.send(()).unwrap();
        run.await.unwrap().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "the shutdown waited {:?} for held records",
            t.elapsed()
        );
        assert_eq!(handle.committed(&tp(2)).map(|c| c.offset), Some(1));
        let mut started: Vec<_> = starts(&log).iter().map(|s| (s.0, s.1)).collect();
        started.sort_unstable();
        assert_eq!(started, vec![(0, 0), (1, 0), (2, 0)], "{started:?}");
    });
    assert!(
        log.violations.lock().unwrap().is_empty(),
        "{:?}",
        log.violations.lock().unwrap()
    );
}

/// A lease the test sets: ownership holds until `until`.
#[derive(Debug)]
struct TestLease {
    until: std::sync::Mutex<Instant>,
}

impl orderly_engine::Lease for TestLease {
    fn holds(&self, now: Instant) -> bool {
        now < *self.until.lock().unwrap()
    }
}

/// The source's lease lapses (a process frozen past its session timeout wakes) and no event
/// about it has arrived: no handler call starts from then on, not the next record of the running
/// session nor a retry, though nothing told the engine to hold; the running call finishes. A
/// renewed lease resumes every record where it stood, each once, in session order.
#[test]
fn a_lapsed_lease_holds_every_start_without_an_event_and_a_renewal_resumes() {
    let (log, mut handler, dlq) = logged();
    handler.default_duration = Duration::from_millis(500);
    // P1:0 fails once; its retry falls into the lapse.
    handler
        .steps
        .insert((1, 0), vec![Step::Transient, Step::Ok]);
    handler
        .durations
        .insert((1, 0), Duration::from_millis(1200));
    let (source, handle) = MemSource::new(10);
    let lease = std::sync::Arc::new(TestLease {
        until: std::sync::Mutex::new(Instant::now() + Duration::from_secs(3600)),
    });
    let source = source.with_lease(lease.clone());
    let mut produced: Vec<_> = (0..5).map(|i| rec(0, i, Some("a"))).collect();
    produced.extend((0..2).map(|i| rec(1, i, Some("b"))));
    handle.produce(&tp(0), produced[..5].to_vec());
    handle.produce(&tp(1), produced[5..].to_vec());
    handle.assign(&[tp(0), tp(1)]);
    let engine = Engine::new(config(), handler, dlq);
    let log2 = log.clone();
    let produced2 = produced.clone();
    paused_runtime().block_on(async move {
        let run = tokio::spawn(run_checked(engine, source, log2));
        tokio::time::sleep(Duration::from_millis(1300)).await;
        let lapsed_at = Instant::now();
        *lease.until.lock().unwrap() = lapsed_at;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let during: Vec<_> = starts(&log)
            .into_iter()
            .filter(|s| s.3 >= lapsed_at)
            .collect();
        assert!(
            during.is_empty(),
            "started while the lease lapsed: {during:?}"
        );
        let before = starts(&log).len();
        assert!(before >= 3, "records ran before the lapse: {before}");
        *lease.until.lock().unwrap() = Instant::now() + Duration::from_secs(3600);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(5));
        assert_eq!(handle.committed(&tp(1)).map(|c| c.offset), Some(2));
        handle.close();
        run.await.unwrap().unwrap();
        assert_each_once(&log, &produced2);
        assert_session_order(&log, &produced2);
    });
}

/// A handler that, like the webhook handler waiting for a connection, waits 2 s after its call
/// started and notes whether the ownership held at the start and after the wait, in the call
/// and, through the `Ownership` it took, in a task it handed the record to (with what
/// `ownership_holds` says there).
#[derive(Clone, Default)]
struct WaitsThenActs {
    seen: std::sync::Arc<std::sync::Mutex<Vec<[bool; 4]>>>,
}

impl orderly_engine::Handler for WaitsThenActs {
    async fn handle(
        &self,
        _record: &orderly_engine::Record,
        _attempt: orderly_engine::Attempt,
    ) -> Result<(), orderly_engine::HandlerError> {
        let at_start = orderly_engine::ownership_holds();
        let handed = orderly_engine::Ownership::current();
        let elsewhere = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            (handed.holds(), orderly_engine::ownership_holds())
        });
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = orderly_engine::ownership_holds();
        let (handed, bare) = elsewhere.await.unwrap();
        self.seen
            .lock()
            .unwrap()
            .push([at_start, after, handed, bare]);
        Ok(())
    }
}

/// A call that started while the lease held and waited inside the handler across its lapse (a
/// process frozen while the call waited for a connection) sees the lapse before it acts:
/// `ownership_holds` reads the lease of the partition whose record the call handles, and so
/// does the `Ownership` the call hands to another task. Outside a handler call (in that task
/// too) there is nothing to hold, so `ownership_holds` says yes.
#[test]
fn a_waiting_call_sees_its_lease_lapse_before_it_acts() {
    let (source, handle) = MemSource::new(10);
    let lease = std::sync::Arc::new(TestLease {
        until: std::sync::Mutex::new(Instant::now() + Duration::from_secs(3600)),
    });
    let source = source.with_lease(lease.clone());
    handle.produce(&tp(0), vec![rec(0, 0, Some("a"))]);
    handle.assign(&[tp(0)]);
    let handler = WaitsThenActs::default();
    let seen = handler.seen.clone();
    let engine = Engine::new(
        config(),
        handler,
        orderly_engine::mem::MemDeadLetters::default(),
    );
    paused_runtime().block_on(async move {
        let run = tokio::spawn(engine.run(source, std::future::pending()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        *lease.until.lock().unwrap() = Instant::now();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(*seen.lock().unwrap(), vec![[true, false, false, true]]);
        assert!(orderly_engine::ownership_holds(), "outside a handler call");
        assert!(orderly_engine::Ownership::current().holds());
        *lease.until.lock().unwrap() = Instant::now() + Duration::from_secs(3600);
        handle.close();
        run.await.unwrap().unwrap();
    });
}
