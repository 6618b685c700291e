//! Revokes as a state of the dispatch loop, under paused (deterministic) time: a revoke
//! drains its partitions while every other partition keeps flowing, its ack comes only after the
//! drain and the commit, an assignment of a partition still draining waits for the drain, and
//! revokes, losses and assignments interleaved with traffic lose nothing and keep order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use futures::FutureExt;
use orderly_engine::mem::MemSource;
use orderly_engine::{
    CommitPoint, Engine, EngineConfig, Source, SourceError, SourceEvent, TopicPartition,
};
use proptest::prelude::*;
use tokio::sync::oneshot::error::TryRecvError;
use tokio::time::Instant;

/// When (partition, offset) first ended successfully, if it did.
fn ended_at(log: &Log, part: i32, offset: i64) -> Option<Instant> {
    log.events().iter().find_map(|e| match e {
        Ev::End {
            part: p,
            offset: o,
            step: Step::Ok,
            at,
            ..
        } if *p == part && *o == offset => Some(*at),
        _ => None,
    })
}

fn starts_of(log: &Log, part: i32, offset: i64) -> usize {
    log.events()
        .iter()
        .filter(|e| matches!(e, Ev::Start { part: p, offset: o, .. } if *p == part && *o == offset))
        .count()
}

/// A partition that is not moving never pauses. P0's record 0 runs 10 s
/// when P0 is revoked; a record of the kept partition P1 that arrives during that drain must be
/// handled at once, not after the slow revoked record (a dispatch loop that waited for the
/// drain inline would take no record from the source meanwhile). The revoke is
/// acknowledged only after the drain and the commit of P0's watermark.
#[test]
fn a_revoke_drains_while_the_kept_partitions_keep_flowing() {
    let (log, mut handler, dlq) = logged();
    handler.durations.insert((0, 0), Duration::from_secs(10));
    let (source, handle) = MemSource::new(10);
    // P0: record 0 of session "a" is slow; 1..=3 queue behind it (skipped by the revoke);
    // 4 is another session and finishes at once.
    handle.produce(&tp(0), (0..4).map(|i| rec(0, i, Some("a"))));
    handle.produce(&tp(0), [rec(0, 4, Some("b"))]);
    handle.produce(&tp(1), (0..5).map(|i| rec(1, i, Some(&format!("k{i}")))));
    handle.assign(&[tp(0), tp(1)]);
    let engine = Engine::new(config(), handler, dlq);
    let log2 = log.clone();
    paused_runtime().block_on(async {
        let t0 = Instant::now();
        let run = tokio::spawn(run_checked(engine, source, log2));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(starts_of(&log, 0, 0), 1, "P0:0 should be running");
        assert!(ended_at(&log, 0, 0).is_none());
        let mut ack = handle.revoke(&[tp(0)]);
        tokio::time::sleep(Duration::from_millis(100)).await;
        // New records of the kept partition arrive while P0:0 still runs.
        handle.produce(&tp(1), (5..10).map(|i| rec(1, i, Some(&format!("k{i}")))));
        tokio::time::sleep(Duration::from_secs(1)).await;
        for o in 0..10 {
            let at = ended_at(&log, 1, o);
            assert!(
                at.is_some_and(|at| at < t0 + Duration::from_secs(3)),
                "P1:{o} waited for the revoked partition's drain (ended at {:?})",
                at.map(|a| a - t0)
            );
        }
        assert!(
            matches!(ack.try_recv(), Err(TryRecvError::Empty)),
            "the revoke was acknowledged before its running record finished"
        );
        ack.await.unwrap();
        let acked = Instant::now();
        let p0_done = ended_at(&log, 0, 0).expect("P0:0 must finish within the revoke timeout");
        assert!(p0_done <= acked && acked >= t0 + Duration::from_secs(10));
        // Committed before the ack: 0 done, 1..=3 skipped, 4 done (in the metadata).
        let committed = handle.committed(&tp(0)).unwrap();
        assert_eq!(committed.offset, 1, "{committed:?}");
        let at_ack = log.events().len();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let late: Vec<_> = log.events()[at_ack..]
            .iter()
            .filter(|e| matches!(e, Ev::Commit { part: 0, .. }))
            .cloned()
            .collect();
        assert!(late.is_empty(), "P0 committed after its ack: {late:?}");
        handle.close();
        run.await.unwrap().unwrap();
    });
    assert!(
        log.violations.lock().unwrap().is_empty(),
        "{:?}",
        log.violations.lock().unwrap()
    );
    assert_eq!(handle.committed(&tp(1)).map(|c| c.offset), Some(10));
}

/// An assignment of a partition that is still draining (a source may send it before the revoke
/// is acknowledged) starts only once the drain and its commit are done, from that commit: the
/// old instance's running record is never run a second time, and the session keeps its order.
#[test]
fn an_assignment_of_a_draining_partition_starts_after_the_drain() {
    let (log, mut handler, dlq) = logged();
    handler.durations.insert((0, 0), Duration::from_secs(5));
    let (source, handle) = MemSource::new(10);
    let produced: Vec<_> = (0..5).map(|i| rec(0, i, Some("a"))).collect();
    handle.produce(&tp(0), produced.clone());
    handle.produce(&tp(1), (0..3).map(|i| rec(1, i, Some("a"))));
    handle.assign(&[tp(0), tp(1)]);
    let engine = Engine::new(config(), handler, dlq);
    let log2 = log.clone();
    let h = handle.clone();
    paused_runtime().block_on(async {
        let t0 = Instant::now();
        let run = tokio::spawn(run_checked(engine, source, log2));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let ack = h.revoke(&[tp(0)]);
        // Assigned again at once: the source starts it from the commit it knows (offset 0).
        h.assign(&[tp(0)]);
        h.produce(&tp(1), (3..6).map(|i| rec(1, i, Some("a"))));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            ended_at(&log, 1, 5).map(|a| a < t0 + Duration::from_secs(3)),
            Some(true),
            "P1 waited for P0's drain"
        );
        ack.await.unwrap();
        assert!(Instant::now() >= t0 + Duration::from_secs(5));
        h.finish_when_drained();
        run.await.unwrap().unwrap();
    });
    assert!(
        log.violations.lock().unwrap().is_empty(),
        "{:?}",
        log.violations.lock().unwrap()
    );
    assert_eq!(
        starts_of(&log, 0, 0),
        1,
        "P0:0 ran again after the handover"
    );
    assert_session_order(&log, &produced);
    assert_each_once(&log, &produced);
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(5));
    assert_eq!(handle.committed(&tp(1)).map(|c| c.offset), Some(6));
}

/// A source that reads up to `ahead` events before the engine asks for them, as a Kafka fetch
/// in flight does: records already fetched for a partition still arrive after the engine paused
/// it (the engine must accept them).
struct ReadAhead<S> {
    inner: S,
    ahead: usize,
    queue: VecDeque<SourceEvent>,
}

impl<S: Source> Source for ReadAhead<S> {
    async fn next_event(&mut self) -> Result<Option<SourceEvent>, SourceError> {
        if self.queue.is_empty() {
            // Cancel safe: the only await is the inner source's (cancel safe) `next_event`.
            match self.inner.next_event().await? {
                Some(ev) => self.queue.push_back(ev),
                None => return Ok(None),
            }
        }
        // What else is ready now is fetched along with it.
        while self.queue.len() <= self.ahead {
            match self.inner.next_event().now_or_never() {
                Some(Ok(Some(ev))) => self.queue.push_back(ev),
                _ => break,
            }
        }
        Ok(self.queue.pop_front())
    }
    fn pause(&mut self, tp: &TopicPartition) {
        self.inner.pause(tp);
    }
    fn resume(&mut self, tp: &TopicPartition) {
        self.inner.resume(tp);
    }
    fn commit(
        &mut self,
        offsets: Vec<(TopicPartition, CommitPoint)>,
    ) -> impl std::future::Future<Output = Result<(), SourceError>> + Send + 'static {
        self.inner.commit(offsets)
    }
}

/// One step of [`revokes_interleaved_with_traffic_lose_nothing`].
#[derive(Debug, Clone)]
enum Op {
    Revoke(u8),
    Lose(u8),
    Assign(u8),
    /// More records (sessions, duration ms) spread over the partitions.
    Produce(Vec<(u8, u64)>),
}

fn op() -> impl Strategy<Value = (u64, Op)> {
    let op = prop_oneof![
        (1u8..8).prop_map(Op::Revoke),
        (1u8..8).prop_map(Op::Lose),
        (1u8..8).prop_map(Op::Assign),
        prop::collection::vec((0u8..6, 0u64..80), 1..12).prop_map(Op::Produce),
    ];
    (0u64..120, op)
}

const PARTS: i32 = 3;

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Revokes, losses and assignments of three partitions at random moments, overlapping (a
    /// revoke's ack is not awaited before the next step), while records keep arriving. Checked:
    /// no commit ever passes an unfinished offset (at every commit), per-session order holds in
    /// each partition, every record is finished and committed in the end, and every revoke and
    /// loss is acknowledged.
    #[test]
    fn revokes_interleaved_with_traffic_lose_nothing(
        first in prop::collection::vec((0u8..6, 0u64..80), 1..30),
        ops in prop::collection::vec(op(), 1..12),
        workers in 1usize..3,
        budget in prop::sample::select(vec![600usize, 1 << 20]),
        revoke_ms in prop::sample::select(vec![30u64, 10_000]),
        ahead in 0usize..4,
    ) {
        let (log, mut handler, dlq) = logged();
        let (source, handle) = MemSource::new(4);
        let mut produced = Vec::new();
        let mut next = [0i64; PARTS as usize];
        let mut batches = vec![first];
        for (_, op) in &ops {
            if let Op::Produce(b) = op {
                batches.push(b.clone());
            }
        }
        // Every record is made up front (so the handler knows its duration); batch 0 is in the
        // log at the start, the others are appended by their `Produce` step.
        let mut by_batch: Vec<Vec<orderly_engine::Record>> = Vec::new();
        for (i, batch) in batches.iter().enumerate() {
            let mut out = Vec::new();
            for (j, (session, ms)) in batch.iter().enumerate() {
                let p = ((i + j) % PARTS as usize) as i32;
                let off = next[p as usize];
                next[p as usize] += 1;
                handler.durations.insert((p, off), Duration::from_millis(*ms));
                if ms % 7 == 0 {
                    handler.steps.insert((p, off), vec![Step::Transient, Step::Ok]);
                }
                let key = (*session > 0).then(|| format!("s{session}"));
                let r = rec(p, off, key.as_deref());
                produced.push(r.clone());
                out.push(r);
            }
            by_batch.push(out);
        }
        let produce = |h: &orderly_engine::mem::MemHandle, recs: &[orderly_engine::Record]| {
            for p in 0..PARTS {
                h.produce(&tp(p), recs.iter().filter(|r| r.partition.partition == p).cloned());
            }
        };
        produce(&handle, &by_batch[0]);
        let all: Vec<_> = (0..PARTS).map(tp).collect();
        handle.assign(&all);
        let cfg = EngineConfig {
            workers,
            revoke_timeout: Duration::from_millis(revoke_ms),
            partition_budget_bytes: budget,
            global_budget_bytes: budget * 2,
            ..config()
        };
        let engine = Engine::new(cfg, handler, dlq);
        let log2 = log.clone();
        let h = handle.clone();
        let acks = paused_runtime().block_on(async move {
            let source = ReadAhead { inner: Checking { inner: source, log: log2 }, ahead, queue: VecDeque::new() };
            let run = tokio::spawn(engine.run(source, std::future::pending()));
            let mut owned: BTreeSet<i32> = (0..PARTS).collect();
            let mut acks = Vec::new();
            let mut batch = 1;
            for (ms, op) in ops {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let pick = |mask: u8, want_owned: bool, owned: &BTreeSet<i32>| -> Vec<i32> {
                    (0..PARTS).filter(|p| mask & (1 << p) != 0 && owned.contains(p) == want_owned).collect()
                };
                match op {
                    Op::Revoke(m) | Op::Lose(m) => {
                        let ps = pick(m, true, &owned);
                        if ps.is_empty() {
                            continue;
                        }
                        let tps: Vec<_> = ps.iter().map(|p| tp(*p)).collect();
                        for p in &ps {
                            owned.remove(p);
                        }
                        acks.push(if matches!(op, Op::Revoke(_)) { h.revoke(&tps) } else { h.lose(&tps) });
                    }
                    Op::Assign(m) => {
                        let ps = pick(m, false, &owned);
                        let tps: Vec<_> = ps.iter().map(|p| tp(*p)).collect();
                        owned.extend(ps);
                        h.assign(&tps);
                    }
                    Op::Produce(_) => {
                        produce(&h, &by_batch[batch]);
                        batch += 1;
                    }
                }
            }
            // Every revoke and loss is answered while the engine runs. (Ending the source
            // before would be a shutdown: an assignment still waiting for its drain is then
            // dropped uncommitted, for the next owner.)
            let issued = acks.len();
            let mut answered = 0;
            for a in acks {
                answered += usize::from(a.await.is_ok());
            }
            let rest: Vec<_> = (0..PARTS).filter(|p| !owned.contains(p)).map(tp).collect();
            if !rest.is_empty() {
                h.assign(&rest);
            }
            h.finish_when_drained();
            run.await.unwrap().unwrap();
            (issued, answered)
        });
        prop_assert_eq!(acks.0, acks.1, "revokes/losses never acknowledged");
        prop_assert!(log.violations.lock().unwrap().is_empty(), "{:?}", log.violations.lock().unwrap());
        assert_session_order(&log, &produced);
        let terminal = log.terminal();
        for r in &produced {
            prop_assert!(terminal.contains_key(&(r.partition.partition, r.offset)), "{}:{} never finished", r.partition, r.offset);
        }
        for p in 0..PARTS {
            // A partition without records has its start position committed, or was never
            // assigned at the end.
            prop_assert_eq!(handle.committed(&tp(p)).map_or(0, |c| c.offset), next[p as usize]);
        }
    }
}

/// A second signal: [`orderly_engine::StopHandle::stop_now`] during a shutdown drain
/// stops waiting for the record that hangs, commits the contiguous done watermark (with the done
/// offsets above it in the metadata) and returns at once, not after `drain_timeout`.
#[test]
fn stop_now_cuts_the_drain_short_and_commits_what_is_done() {
    let (log, mut handler, dlq) = logged();
    handler.steps.insert((0, 1), vec![Step::Hang]);
    let (source, handle) = MemSource::new(10);
    // Offset 1 (session "a") hangs; 0 and 2 (other sessions) finish; 3 waits behind 1.
    handle.produce(
        &tp(0),
        [
            rec(0, 0, Some("x")),
            rec(0, 1, Some("a")),
            rec(0, 2, Some("y")),
            rec(0, 3, Some("a")),
        ],
    );
    handle.assign(&[tp(0)]);
    let cfg = EngineConfig {
        drain_timeout: Duration::from_secs(60),
        stuck_timeout: None,
        attempt_timeout: None,
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let stop = engine.stop_handle();
    let log2 = log.clone();
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
    paused_runtime().block_on(async {
        let run = tokio::spawn(engine.run(
            Checking {
                inner: source,
                log: log2,
            },
            async {
                let _ = shutdown_rx.await;
            },
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        shutdown_tx.send(()).unwrap();
        // The drain would wait 60 s for offset 1.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            !run.is_finished(),
            "the drain should still wait for the hanging record"
        );
        let t = Instant::now();
        stop.stop_now();
        run.await.unwrap().unwrap();
        assert!(
            Instant::now() - t < Duration::from_secs(1),
            "stop_now did not cut the drain short"
        );
    });
    assert!(
        log.violations.lock().unwrap().is_empty(),
        "{:?}",
        log.violations.lock().unwrap()
    );
    let committed = handle.committed(&tp(0)).unwrap();
    assert_eq!(committed.offset, 1, "{committed:?}");
    let done: Vec<i64> = orderly_engine::metadata::decode(committed.offset, &committed.metadata)
        .unwrap()
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(
        done,
        vec![2],
        "the metadata should name the done offset 2 only"
    );
    assert_eq!(starts_of(&log, 0, 3), 0);
}

/// A handler whose call never ends; dropping the call takes a while and then marks it ended.
struct Endless {
    started: Arc<AtomicBool>,
    ended: Arc<AtomicBool>,
}

/// Marks a call ended once it has been dropped (after a pause, as a slow drop would).
struct EndMark(Arc<AtomicBool>);

impl Drop for EndMark {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(30));
        self.0.store(true, Ordering::SeqCst);
    }
}

impl orderly_engine::Handler for Endless {
    async fn handle(
        &self,
        _record: &orderly_engine::Record,
        _attempt: orderly_engine::Attempt,
    ) -> Result<(), orderly_engine::HandlerError> {
        let _mark = EndMark(self.ended.clone());
        self.started.store(true, Ordering::SeqCst);
        std::future::pending::<()>().await;
        Ok(())
    }
}

/// A loss is acknowledged only once every call of the lost partition has ended: a source that
/// hands the partition out again right after the acknowledgement (an exactly-once rewind does)
/// must not meet a call of the old ownership that is still running and may still write output.
#[test]
fn a_loss_is_acknowledged_only_after_the_lost_partitions_calls_ended() {
    let started = Arc::new(AtomicBool::new(false));
    let ended = Arc::new(AtomicBool::new(false));
    let handler = Endless {
        started: started.clone(),
        ended: ended.clone(),
    };
    let (_log, _, dlq) = logged();
    let (source, handle) = MemSource::new(10);
    handle.produce(&tp(0), [rec(0, 0, Some("a"))]);
    handle.assign(&[tp(0)]);
    let engine = Engine::new(config(), handler, dlq);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(engine.run(source, async move {
            let _ = stop_rx.await;
        }));
        while !started.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        handle.lose(&[tp(0)]).await.unwrap();
        assert!(
            ended.load(Ordering::SeqCst),
            "the loss was acknowledged while a call of the lost partition was still running"
        );
        let _ = stop_tx.send(());
        run.await.unwrap().unwrap();
    });
}
