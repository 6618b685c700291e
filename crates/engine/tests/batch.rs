//! Batches of one session's records per handler call (`EngineConfig::batch_max`): order, partial success, retries of the rest, dead letters per record, parking, and every commit checked against what was really finished.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use orderly_engine::mem::{MemDeadLetters, MemSource};
use orderly_engine::{
    Attempt, BatchOutcome, DlqMode, Engine, EngineConfig, Handler, HandlerError, Record,
};
use proptest::prelude::*;

/// Offsets of each handler call, in call order.
type Calls = Arc<Mutex<Vec<Vec<i64>>>>;

/// A batch-aware handler over the scripted one: each record of a call goes through the script
/// in turn; the first failure ends the call. With `silent`, a transient failure is answered
/// without naming the error (the engine must treat it as transient).
struct Batching {
    inner: Scripted,
    silent: bool,
    calls: Calls,
}

impl Handler for Batching {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        self.calls.lock().unwrap().push(vec![record.offset]);
        self.inner.handle(record, attempt).await
    }

    async fn handle_batch(&self, records: &[&Record], attempt: Attempt) -> BatchOutcome {
        self.calls
            .lock()
            .unwrap()
            .push(records.iter().map(|r| r.offset).collect());
        for (i, r) in records.iter().enumerate() {
            let at = if i == 0 { attempt } else { Attempt::FIRST };
            if let Err(e) = self.inner.handle(r, at).await {
                let silent = self.silent && e.is_transient();
                return BatchOutcome {
                    done: i,
                    error: (!silent).then_some(e),
                };
            }
        }
        BatchOutcome::all(records.len())
    }
}

fn batching(silent: bool) -> (Arc<Log>, Batching, LoggingDlq, Calls) {
    let log = Arc::new(Log::default());
    let calls = Arc::new(Mutex::new(Vec::new()));
    let handler = Batching {
        inner: Scripted::new(log.clone()),
        silent,
        calls: calls.clone(),
    };
    let dlq = LoggingDlq {
        log: log.clone(),
        inner: MemDeadLetters::new(),
    };
    (log, handler, dlq, calls)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Random sessions, failures, durations, batch sizes, lingers and worker counts: each session's
    /// records start in order and reach one terminal state each, no commit passes unfinished
    /// work, and no call mixes sessions or skips a record of its session.
    #[test]
    fn random_batches_keep_every_promise(
        workers in 1usize..3,
        batch_max in 2usize..6,
        linger_ms in prop_oneof![Just(0u64), 1u64..30],
        silent in any::<bool>(),
        park in any::<bool>(),
        records in prop::collection::vec((0u8..4, 0u8..2, prop_oneof![Just(0u64), 0u64..20], prop::collection::vec(0u8..10, 1..4)), 1..100),
    ) {
        let (log, mut handler, dlq, calls) = batching(silent);
        let (source, handle) = MemSource::new(7);
        let mut produced = Vec::new();
        let mut next = [0i64; 2];
        for (session, p, ms, plan) in records {
            let p = i32::from(p);
            let off = next[p as usize];
            next[p as usize] += 1;
            let key = (session > 0).then(|| format!("s{session}"));
            handler.inner.durations.insert((p, off), Duration::from_millis(ms));
            let steps = plan.iter().map(|x| match x { 0 => Step::Permanent, 1..=2 => Step::Transient, _ => Step::Ok }).collect();
            handler.inner.steps.insert((p, off), steps);
            produced.push(rec(p, off, key.as_deref()));
        }
        for p in 0..2 {
            handle.produce(&tp(p), produced.iter().filter(|r| r.partition.partition == p).cloned());
        }
        handle.assign(&[tp(0), tp(1)]);
        handle.finish_when_drained();
        let cfg = EngineConfig {
            workers,
            batch_max,
            batch_linger: Duration::from_millis(linger_ms),
            dlq_mode: if park { DlqMode::ParkSession } else { DlqMode::Continue },
            ..config()
        };
        let engine = Engine::new(cfg, handler, dlq);
        let stats = engine.stats();
        paused_runtime().block_on(run_checked(engine, source, log.clone())).unwrap();
        prop_assert!(log.violations.lock().unwrap().is_empty(), "{:?}", log.violations.lock().unwrap());
        assert_each_once(&log, &produced);
        assert_session_order(&log, &produced);
        prop_assert_eq!(stats.handled() + stats.dead_lettered(), produced.len() as u64);
        for p in 0..2 {
            prop_assert_eq!(handle.committed(&tp(p)).map(|c| c.offset), Some(next[p as usize]));
        }
        // Every call holds consecutive records of one session, at most `batch_max`.
        let key_of = |p: i32, o: i64| produced.iter().find(|r| r.partition.partition == p && r.offset == o).and_then(|r| r.key.clone());
        for call in calls.lock().unwrap().iter() {
            prop_assert!(call.len() <= batch_max);
            prop_assert!(call.windows(2).all(|w| w[0] < w[1]));
            if call.len() > 1 {
                // Records of a batch share a partition (the offsets say which is not known here,
                // but both partitions use distinct session keys per offset list): same key.
                let keys: Vec<_> = [0, 1].iter().filter_map(|p| {
                    let ks: Vec<_> = call.iter().map(|o| key_of(*p, *o)).collect();
                    ks.iter().all(|k| k.is_some() && *k == ks[0]).then_some(ks[0].clone())
                }).collect();
                prop_assert!(!keys.is_empty(), "call {call:?} mixes sessions");
            }
        }
    }
}

/// One session's backlog goes in calls of up to `batch_max` records once the first call is
/// out; a transient failure in the middle of a call retries that record with the ones after
/// it, never the ones answered done; a permanent one dead-letters only that record.
#[test]
fn partial_success_retries_the_rest_and_never_resends_done_records() {
    let (log, mut handler, dlq, calls) = batching(false);
    handler
        .inner
        .steps
        .insert((0, 6), vec![Step::Transient, Step::Ok]);
    handler.inner.steps.insert((0, 11), vec![Step::Permanent]);
    let (source, handle) = MemSource::new(100);
    let produced: Vec<_> = (0..14).map(|i| rec(0, i, Some("one"))).collect();
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let cfg = EngineConfig {
        workers: 1,
        batch_max: 4,
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let stats = engine.stats();
    paused_runtime()
        .block_on(run_checked(engine, source, log.clone()))
        .unwrap();
    assert_each_once(&log, &produced);
    assert_session_order(&log, &produced);
    assert_eq!(stats.handled(), 13);
    assert_eq!(stats.dead_lettered(), 1);
    assert_eq!(
        *calls.lock().unwrap(),
        vec![
            vec![0],
            vec![1, 2, 3, 4],
            vec![5, 6, 7, 8],
            // 5 was answered done; 6 failed and goes again with what follows it.
            vec![6, 7, 8],
            vec![9, 10, 11, 12],
            // 11 was dead-lettered: the rest of that batch goes on, then the last record.
            vec![12],
            vec![13],
        ]
    );
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(14));
}

/// In park-session mode a dead letter inside a batch parks the session: the records after it in
/// the batch are not handled but follow it to the DLQ, in order.
#[test]
fn a_dead_letter_in_a_batch_parks_the_rest_of_the_session() {
    let (log, mut handler, dlq, _calls) = batching(false);
    handler.inner.steps.insert((0, 2), vec![Step::Permanent]);
    let (source, handle) = MemSource::new(100);
    let produced: Vec<_> = (0..8).map(|i| rec(0, i, Some("one"))).collect();
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let cfg = EngineConfig {
        workers: 1,
        batch_max: 4,
        dlq_mode: DlqMode::ParkSession,
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let stats = engine.stats();
    paused_runtime()
        .block_on(run_checked(engine, source, log.clone()))
        .unwrap();
    assert_eq!(stats.handled(), 2);
    assert_eq!(stats.dead_lettered(), 6);
    let dlq: Vec<(i64, String)> = log
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Ev::Dlq { offset, reason, .. } => Some((offset, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(dlq[0], (2, "permanent".to_owned()));
    assert_eq!(
        dlq[1..].iter().map(|d| d.0).collect::<Vec<_>>(),
        vec![3, 4, 5, 6, 7]
    );
    assert!(dlq[1..].iter().all(|d| d.1 == "parked"));
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(8));
}

/// Each handler call's offsets and when it was made (the paused clock, from the run's start).
type TimedCalls = Arc<Mutex<Vec<(Vec<i64>, Duration)>>>;

/// Answers every record done at once and records its calls with their time.
struct Timed {
    start: tokio::time::Instant,
    calls: TimedCalls,
}

impl Handler for Timed {
    async fn handle(&self, record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        self.calls
            .lock()
            .unwrap()
            .push((vec![record.offset], self.start.elapsed()));
        Ok(())
    }

    async fn handle_batch(&self, records: &[&Record], _attempt: Attempt) -> BatchOutcome {
        self.calls.lock().unwrap().push((
            records.iter().map(|r| r.offset).collect(),
            self.start.elapsed(),
        ));
        BatchOutcome::all(records.len())
    }
}

/// One session's records produced one by one at `at` (from the start), handled with
/// `batch_max` and `linger`: the calls the handler saw, and the final commit.
fn trickle(at: &[u64], batch_max: usize, linger: Duration) -> (Vec<(Vec<i64>, Duration)>, i64) {
    let rt = paused_runtime();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (source, handle) = MemSource::new(100);
    handle.assign(&[tp(0)]);
    let cfg = EngineConfig {
        workers: 1,
        batch_max,
        batch_linger: linger,
        ..config()
    };
    let at = at.to_vec();
    let committed = rt.block_on(async {
        let handler = Timed {
            start: tokio::time::Instant::now(),
            calls: calls.clone(),
        };
        let engine = Engine::new(cfg, handler, MemDeadLetters::new());
        let producer = {
            let handle = handle.clone();
            async move {
                let start = tokio::time::Instant::now();
                for (i, ms) in at.iter().enumerate() {
                    tokio::time::sleep_until(start + Duration::from_millis(*ms)).await;
                    handle.produce(&tp(0), [rec(0, i as i64, Some("one"))]);
                }
                handle.finish_when_drained();
            }
        };
        let (run, ()) = tokio::join!(engine.run(source, std::future::pending()), producer);
        run.unwrap();
        handle.committed(&tp(0)).map(|c| c.offset)
    });
    let calls = calls.lock().unwrap().clone();
    (calls, committed.unwrap_or(-1))
}

/// With a linger, a session's next record waits for the records that arrive within it and
/// goes with them in one call; without one (the default), each goes as soon as it can.
#[test]
fn a_linger_gathers_records_that_arrive_within_it() {
    let at = [0, 2, 4, 6, 8, 10];
    let (calls, committed) = trickle(&at, 8, Duration::from_millis(20));
    assert_eq!(committed, 6);
    let offsets: Vec<Vec<i64>> = calls.iter().map(|c| c.0.clone()).collect();
    assert_eq!(offsets, vec![vec![0, 1, 2, 3, 4, 5]], "{calls:?}");
    // It waited the linger, no longer.
    assert!(
        calls[0].1 >= Duration::from_millis(20) && calls[0].1 < Duration::from_millis(25),
        "{calls:?}"
    );

    let (calls, committed) = trickle(&at, 8, Duration::ZERO);
    assert_eq!(committed, 6);
    assert_eq!(
        calls.len(),
        6,
        "without a linger every record went alone: {calls:?}"
    );
}

/// A batch that fills up goes at once, without waiting out the linger; the records after it
/// start a wait of their own.
#[test]
fn a_full_batch_does_not_wait_for_the_linger() {
    let (calls, committed) = trickle(&[0, 5, 5, 5, 6], 4, Duration::from_secs(1));
    assert_eq!(committed, 5);
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0].0, vec![0, 1, 2, 3]);
    assert!(calls[0].1 < Duration::from_millis(10), "{calls:?}");
    assert_eq!(calls[1].0, vec![4]);
    assert!(calls[1].1 >= Duration::from_secs(1), "{calls:?}");
}
