//! Engine behaviour under paused tokio time: ordering, watermark safety, retries, DLQ, backpressure,
//! eviction, handover, stuck gaps, dedup, sequence checking, restart from commit metadata.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use orderly_engine::mem::{MemDeadLetters, MemSource};
use orderly_engine::{
    Attempt, Engine, EngineConfig, Handler, HandlerError, Header, Record, RetryPolicy,
};
use proptest::prelude::*;

struct Setup {
    log: Arc<Log>,
    handler: Scripted,
    dlq: LoggingDlq,
}

fn setup() -> Setup {
    let log = Arc::new(Log::default());
    Setup {
        handler: Scripted::new(log.clone()),
        dlq: LoggingDlq {
            log: log.clone(),
            inner: MemDeadLetters::new(),
        },
        log,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Random sessions, failures, durations (so random completion orders) and worker counts.
    /// About half the attempts take no time: they finish on their first poll, the rest later.
    #[test]
    fn random_schedules_keep_every_promise(
        workers in 1usize..4,
        partitions in 1i32..3,
        records in prop::collection::vec((0u8..6, 0u8..10, prop_oneof![Just(0u64), 0u64..40], prop::collection::vec(0u8..10, 1..4)), 1..120),
        dlq_failures in 0u32..3,
        budget in prop::sample::select(vec![1usize, 600, 1 << 20]),
    ) {
        let s = setup();
        let Setup { log, mut handler, dlq } = s;
        let (source, handle) = MemSource::new(7);
        let mut produced = Vec::new();
        let mut next = vec![0i64; partitions as usize];
        for (i, (session, p, ms, plan)) in records.into_iter().enumerate() {
            let p = i32::from(p) % partitions;
            let off = next[p as usize];
            next[p as usize] += 1;
            // Session number 0 stands for "no session id": the unordered lane.
            let key = (session > 0).then(|| format!("s{session}"));
            let r = rec(p, off, key.as_deref());
            handler.durations.insert((p, off), Duration::from_millis(ms));
            let steps = plan.iter().map(|x| match x { 0 => Step::Permanent, 1..=2 => Step::Transient, _ => Step::Ok }).collect();
            handler.steps.insert((p, off), steps);
            let _ = i;
            produced.push(r);
        }
        for p in 0..partitions {
            handle.produce(&tp(p), produced.iter().filter(|r| r.partition.partition == p).cloned());
        }
        handle.assign(&(0..partitions).map(tp).collect::<Vec<_>>());
        handle.finish_when_drained();
        dlq.inner.fail_next(dlq_failures);
        let cfg = EngineConfig { workers, partition_budget_bytes: budget, global_budget_bytes: budget * 2, ..config() };
        let engine = Engine::new(cfg, handler, dlq);
        let stats = engine.stats();
        paused_runtime().block_on(run_checked(engine, source, log.clone())).unwrap();
        assert_each_once(&log, &produced);
        assert_session_order(&log, &produced);
        for p in 0..partitions {
            // A partition without records is committed at its start position too.
            prop_assert_eq!(handle.committed(&tp(p)).map(|c| c.offset), Some(next[p as usize]));
        }
        prop_assert_eq!(stats.handled() + stats.dead_lettered(), produced.len() as u64);
        prop_assert_eq!(stats.active_sessions(), 0);
    }
}

/// One fetch of several thousand records reaches a worker as several batches (the dispatch loop sends a
/// batch once it holds `BATCH_MAX` = 1,024 records): each session still sees its records in
/// order, each exactly once, and the commit covers them all. Half the records finish on their
/// first poll, every tenth fails once.
#[test]
fn a_large_fetch_split_into_batches_keeps_order() {
    for workers in [1usize, 2] {
        let Setup {
            log,
            mut handler,
            dlq,
        } = setup();
        let (source, handle) = MemSource::new(5_000);
        let produced: Vec<orderly_engine::Record> = (0..5_000i64)
            .map(|off| {
                let key = format!("s{}", off % 7);
                handler
                    .durations
                    .insert((0, off), Duration::from_millis(u64::from(off % 2 == 1)));
                if off % 10 == 3 {
                    handler
                        .steps
                        .insert((0, off), vec![Step::Transient, Step::Ok]);
                }
                rec(0, off, Some(&key))
            })
            .collect();
        handle.produce(&tp(0), produced.iter().cloned());
        handle.assign(&[tp(0)]);
        handle.finish_when_drained();
        let engine = Engine::new(
            EngineConfig {
                workers,
                ..config()
            },
            handler,
            dlq,
        );
        let stats = engine.stats();
        paused_runtime()
            .block_on(run_checked(engine, source, log.clone()))
            .unwrap();
        assert_each_once(&log, &produced);
        assert_session_order(&log, &produced);
        assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(5_000));
        assert_eq!(stats.handled(), 5_000, "workers {workers}");
        assert!(log.violations.lock().unwrap().is_empty());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A revoke or a loss of partition 0 at a random moment (often while paused by a tiny
    /// budget), then reassignment, while partition 1 carries the same session keys: commits never
    /// pass unfinished work (checked at every commit), session order holds per partition, and
    /// every record of both partitions ends up finished and committed.
    #[test]
    fn random_handover_loses_nothing(
        records in prop::collection::vec((0u8..6, any::<bool>(), 0u64..40, prop::collection::vec(0u8..10, 1..3)), 1..80),
        at_ms in 0u64..400,
        lose in any::<bool>(),
        workers in 1usize..3,
        budget in prop::sample::select(vec![1usize, 600, 1 << 20]),
    ) {
        let Setup { log, mut handler, dlq } = setup();
        let (source, handle) = MemSource::new(5);
        let mut produced = Vec::new();
        let mut next = [0i64; 2];
        for (session, on_p1, ms, plan) in records {
            let p = i32::from(on_p1);
            let off = next[p as usize];
            next[p as usize] += 1;
            let key = (session > 0).then(|| format!("s{session}"));
            handler.durations.insert((p, off), Duration::from_millis(ms));
            handler.steps.insert((p, off), plan.iter().map(|x| match x { 0 => Step::Permanent, 1..=2 => Step::Transient, _ => Step::Ok }).collect());
            produced.push(rec(p, off, key.as_deref()));
        }
        for p in 0..2 {
            handle.produce(&tp(p), produced.iter().filter(|r| r.partition.partition == p).cloned());
        }
        handle.assign(&[tp(0), tp(1)]);
        let cfg = EngineConfig {
            workers,
            revoke_timeout: Duration::from_millis(20),
            partition_budget_bytes: budget,
            global_budget_bytes: budget * 2,
            ..config()
        };
        let engine = Engine::new(cfg, handler, dlq);
        let log2 = log.clone();
        let h = handle.clone();
        paused_runtime().block_on(async move {
            let run = tokio::spawn(run_checked(engine, source, log2));
            tokio::time::sleep(Duration::from_millis(at_ms)).await;
            if lose {
                h.lose(&[tp(0)]).await.unwrap();
            } else {
                h.revoke(&[tp(0)]).await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            h.assign(&[tp(0)]);
            h.finish_when_drained();
            run.await.unwrap().unwrap();
        });
        prop_assert!(log.violations.lock().unwrap().is_empty(), "{:?}", log.violations.lock().unwrap());
        assert_session_order(&log, &produced);
        let terminal = log.terminal();
        for r in &produced {
            prop_assert!(terminal.contains_key(&(r.partition.partition, r.offset)), "{}:{} never finished", r.partition, r.offset);
        }
        for p in 0..2 {
            // A partition without records is committed at its start position too.
            prop_assert_eq!(handle.committed(&tp(p)).map(|c| c.offset), Some(next[p as usize]));
        }
    }
}

#[test]
fn backoff_in_one_session_does_not_delay_others() {
    let Setup {
        log,
        mut handler,
        dlq,
    } = setup();
    let (source, handle) = MemSource::new(100);
    let mut produced = vec![rec(0, 0, Some("slow")), rec(0, 1, Some("slow"))];
    for i in 2..202 {
        produced.push(rec(0, i, Some(&format!("fast{}", i % 20))));
    }
    // The slow session fails twice with a 10 s backoff floor.
    handler
        .steps
        .insert((0, 0), vec![Step::Transient, Step::Transient, Step::Ok]);
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let cfg = EngineConfig {
        retry: RetryPolicy {
            base: Duration::from_secs(10),
            factor: 1.0,
            cap: Duration::from_secs(10),
            max_attempts: None,
        },
        ..config()
    };
    let rt = paused_runtime();
    let t0 = rt.block_on(async { tokio::time::Instant::now() });
    rt.block_on(Engine::new(cfg, handler, dlq).run(
        Checking {
            inner: source,
            log: log.clone(),
        },
        std::future::pending(),
    ))
    .unwrap();
    assert_each_once(&log, &produced);
    assert_session_order(&log, &produced);
    let mut slow_end = None;
    let mut fast_max = Duration::ZERO;
    for e in log.events() {
        if let common::Ev::End {
            offset,
            step: Step::Ok,
            at,
            ..
        } = e
        {
            if offset <= 1 {
                slow_end = Some(at - t0);
            } else {
                fast_max = fast_max.max(at - t0);
            }
        }
    }
    // 200 records over 20 sessions, 1 ms each, 10 at a time per session: about 10 ms.
    assert!(
        fast_max < Duration::from_millis(100),
        "fast sessions took {fast_max:?}"
    );
    assert!(
        slow_end.is_some_and(|d| d > Duration::from_millis(500)),
        "slow session ended at {slow_end:?}"
    );
}

/// Each attempt carries the backoff the policy drew before it: zero on the first, within the
/// ceiling of its retry on the others, and the record waited at least that long (paused clock:
/// the wait is the drawn backoff rounded up to tokio's 1 ms tick). A fixed seed draws the same
/// backoffs again; another record draws others.
#[test]
fn each_attempt_reports_the_backoff_drawn_before_it() {
    let run = || {
        let Setup {
            log,
            mut handler,
            dlq,
        } = setup();
        let (source, handle) = MemSource::new(100);
        let produced = vec![rec(0, 0, Some("a")), rec(0, 1, Some("b"))];
        for off in 0..2 {
            handler.steps.insert(
                (0, off),
                vec![Step::Transient, Step::Transient, Step::Transient, Step::Ok],
            );
        }
        handle.produce(&tp(0), produced.clone());
        handle.assign(&[tp(0)]);
        handle.finish_when_drained();
        let engine = Engine::new(config(), handler, dlq);
        paused_runtime()
            .block_on(run_checked(engine, source, log.clone()))
            .unwrap();
        assert_each_once(&log, &produced);
        let mut per_record: std::collections::BTreeMap<
            i64,
            Vec<(u32, Duration, tokio::time::Instant)>,
        > = Default::default();
        let mut ends: std::collections::HashMap<(i64, u32), tokio::time::Instant> =
            Default::default();
        for e in log.events() {
            match e {
                common::Ev::Start {
                    offset,
                    attempt,
                    backoff,
                    at,
                    ..
                } => per_record
                    .entry(offset)
                    .or_default()
                    .push((attempt, backoff, at)),
                common::Ev::End {
                    offset,
                    attempt,
                    at,
                    ..
                } => {
                    ends.insert((offset, attempt), at);
                }
                _ => {}
            }
        }
        let policy = config().retry;
        for (offset, starts) in &per_record {
            let numbers: Vec<u32> = starts.iter().map(|s| s.0).collect();
            assert_eq!(numbers, [1, 2, 3, 4], "record {offset}");
            assert_eq!(starts[0].1, Duration::ZERO, "first attempt of {offset}");
            for &(n, backoff, at) in &starts[1..] {
                assert!(
                    !backoff.is_zero() && backoff <= policy.ceiling(n - 1),
                    "record {offset} attempt {n}: backoff {backoff:?}, ceiling {:?}",
                    policy.ceiling(n - 1)
                );
                let waited = at - ends[&(*offset, n - 1)];
                assert!(
                    waited >= backoff && waited <= backoff + Duration::from_millis(2),
                    "record {offset} attempt {n}: waited {waited:?} after drawing {backoff:?}"
                );
            }
        }
        per_record
            .into_values()
            .map(|s| s.into_iter().map(|(_, b, _)| b).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    let first = run();
    assert_ne!(first[0], first[1], "two records drew the same backoffs");
    assert_eq!(run(), first, "the same seed drew other backoffs");
}

/// The handler's answers in the retry-after tests: a transient failure asking for 5 s (well above
/// the policy's 10-20 ms), then one asking for 1 ms (below what the policy draws), then success.
/// Record 1 fails permanently with a source and a hint (which a permanent error does not keep).
struct Hinting {
    log: Arc<Log>,
}

impl Handler for Hinting {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        let (part, offset) = (record.partition.partition, record.offset);
        self.log.push(|seq| common::Ev::Start {
            part,
            offset,
            attempt: attempt.number,
            backoff: attempt.backoff,
            seq,
            at: tokio::time::Instant::now(),
        });
        let (step, result) = match (offset, attempt.number) {
            (1, _) => (
                Step::Permanent,
                Err(HandlerError::permanent("refused")
                    .with_source(std::io::Error::other("schema v9 unknown"))
                    .retry_after(Duration::from_secs(60))),
            ),
            (_, 1) => (
                Step::Transient,
                Err(HandlerError::transient("busy").retry_after(Duration::from_secs(5))),
            ),
            (_, 2) => (
                Step::Transient,
                Err(HandlerError::transient("busy").retry_after(Duration::from_millis(1))),
            ),
            _ => (Step::Ok, Ok(())),
        };
        self.log.push(|seq| common::Ev::End {
            part,
            offset,
            attempt: attempt.number,
            step,
            seq,
            at: tokio::time::Instant::now(),
        });
        result
    }
}

/// A transient error's retry-after hint is the least wait before the next attempt: the engine
/// waits the hint when it is longer than the backoff the policy draws (and reports it as the
/// attempt's backoff), the drawn backoff when that is longer; on the single-record path and on
/// the batch path alike. A permanent error is dead-lettered at once, its source's text in the
/// dead letter.
#[test]
fn a_transient_errors_retry_after_is_the_least_wait_before_its_next_attempt() {
    for batch_max in [1, 4] {
        let log = Arc::new(Log::default());
        let dlq = Arc::new(LoggingDlq {
            log: log.clone(),
            inner: MemDeadLetters::new(),
        });
        let (source, handle) = MemSource::new(100);
        let produced = vec![rec(0, 0, Some("a")), rec(0, 1, Some("b"))];
        handle.produce(&tp(0), produced.clone());
        handle.assign(&[tp(0)]);
        handle.finish_when_drained();
        let cfg = EngineConfig {
            batch_max,
            ..config()
        };
        let engine = Engine::from_arcs(cfg, Arc::new(Hinting { log: log.clone() }), dlq.clone());
        paused_runtime()
            .block_on(run_checked(engine, source, log.clone()))
            .unwrap();
        assert_each_once(&log, &produced);
        let events = log.events();
        let start = |n: u32| {
            events.iter().find_map(|e| match *e {
                common::Ev::Start {
                    offset: 0,
                    attempt,
                    backoff,
                    at,
                    ..
                } if attempt == n => Some((backoff, at)),
                _ => None,
            })
        };
        let end = |n: u32| {
            events.iter().find_map(|e| match *e {
                common::Ev::End {
                    offset: 0,
                    attempt,
                    at,
                    ..
                } if attempt == n => Some(at),
                _ => None,
            })
        };
        let (b2, s2) = start(2).unwrap();
        let waited = s2 - end(1).unwrap();
        assert_eq!(
            b2,
            Duration::from_secs(5),
            "batch_max {batch_max}: backoff of attempt 2"
        );
        assert!(
            waited >= Duration::from_secs(5)
                && waited <= Duration::from_secs(5) + Duration::from_millis(2),
            "batch_max {batch_max}: attempt 2 started {waited:?} after attempt 1 failed"
        );
        let (b3, s3) = start(3).unwrap();
        let waited = s3 - end(2).unwrap();
        let policy = config().retry;
        assert!(
            b3 > Duration::from_millis(1) && b3 <= policy.ceiling(2),
            "batch_max {batch_max}: backoff of attempt 3 is {b3:?}, the policy's ceiling {:?}",
            policy.ceiling(2)
        );
        assert!(
            waited >= b3 && waited <= b3 + Duration::from_millis(2),
            "batch_max {batch_max}: attempt 3 started {waited:?} after attempt 2 failed, backoff {b3:?}"
        );
        assert!(start(4).is_none());
        let letters = dlq.inner.letters();
        assert_eq!(letters.len(), 1, "batch_max {batch_max}");
        assert_eq!(letters[0].record.offset, 1);
        assert_eq!(letters[0].attempts, 1, "a permanent error is not retried");
        assert_eq!(letters[0].reason.code(), "permanent");
        assert_eq!(letters[0].reason.text(), "refused: schema v9 unknown");
    }
}

#[test]
fn idle_sessions_are_evicted() {
    let Setup { log, handler, dlq } = setup();
    let (source, handle) = MemSource::new(100);
    handle.produce(&tp(0), (0..300).map(|i| rec(0, i, Some(&format!("k{i}")))));
    handle.assign(&[tp(0)]);
    let cfg = EngineConfig {
        session_idle_timeout: Duration::from_secs(2),
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let stats = engine.stats();
    paused_runtime().block_on(async move {
        let run = tokio::spawn(run_checked(engine, source, log));
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(stats.handled(), 300);
        assert_eq!(stats.active_sessions(), 300);
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(stats.active_sessions(), 0);
        handle.close();
        run.await.unwrap().unwrap();
    });
}

#[test]
fn tiny_budget_pauses_and_resumes_without_loss() {
    let Setup { log, handler, dlq } = setup();
    let (source, handle) = MemSource::new(50);
    let produced: Vec<_> = (0..500)
        .map(|i| rec(0, i, Some(&format!("k{}", i % 7))))
        .collect();
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let cfg = EngineConfig {
        partition_budget_bytes: 1,
        global_budget_bytes: 1,
        ..config()
    };
    paused_runtime()
        .block_on(Engine::new(cfg, handler, dlq).run(
            Checking {
                inner: source,
                log: log.clone(),
            },
            std::future::pending(),
        ))
        .unwrap();
    assert_each_once(&log, &produced);
    assert_session_order(&log, &produced);
    let (pauses, resumes) = handle.pause_resume_counts();
    assert!(
        pauses >= 10 && resumes >= 9,
        "pauses {pauses} resumes {resumes}"
    );
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(500));
}

#[test]
fn revoke_commits_only_what_finished_before_the_ack_and_lost_commits_nothing() {
    let Setup {
        log,
        mut handler,
        dlq,
    } = setup();
    handler.default_duration = Duration::from_millis(100);
    let (source, handle) = MemSource::new(10);
    let p0: Vec<_> = (0..100)
        .map(|i| rec(0, i, Some(&format!("k{}", i % 5))))
        .collect();
    let p1: Vec<_> = (0..100)
        .map(|i| rec(1, i, Some(&format!("k{}", i % 5))))
        .collect();
    handle.produce(&tp(0), p0.clone());
    handle.produce(&tp(1), p1.clone());
    handle.assign(&[tp(0), tp(1)]);
    let cfg = EngineConfig {
        revoke_timeout: Duration::from_millis(50),
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let log2 = log.clone();
    let log3 = log.clone();
    let handle2 = handle.clone();
    paused_runtime().block_on(async move {
        let (log, handle) = (log3, handle2);
        let run = tokio::spawn(run_checked(engine, source, log2));
        tokio::time::sleep(Duration::from_millis(1050)).await;
        // Revoke partition 0 while sessions are mid-record (timeout shorter than a record).
        handle.revoke(&[tp(0)]).await.unwrap();
        let at_ack = log.events().len();
        let committed = handle.committed(&tp(0)).unwrap().offset;
        assert!(committed > 0 && committed < 100, "committed {committed}");
        // Lose partition 1 a bit later: nothing more may be committed for it.
        tokio::time::sleep(Duration::from_millis(300)).await;
        handle.lose(&[tp(1)]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let p1_commits = handle
            .commits()
            .iter()
            .filter(|(t, _)| t.partition == 1)
            .count();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            handle
                .commits()
                .iter()
                .filter(|(t, _)| t.partition == 1)
                .count(),
            p1_commits
        );
        // No commit of partition 0 after the ack, and nothing finished after the ack is counted.
        let after: Vec<_> = log.events()[at_ack..]
            .iter()
            .filter(|e| matches!(e, common::Ev::Commit { part: 0, .. }))
            .cloned()
            .collect();
        assert!(after.is_empty(), "{after:?}");
        // The new owner (us again) continues from the commit and metadata: everything is handled.
        handle.assign(&[tp(0), tp(1)]);
        handle.finish_when_drained();
        run.await.unwrap().unwrap();
    });
    assert!(
        log.violations.lock().unwrap().is_empty(),
        "{:?}",
        log.violations.lock().unwrap()
    );
    let terminal = log.terminal();
    for r in p0.iter().chain(&p1) {
        assert!(
            terminal.contains_key(&(r.partition.partition, r.offset)),
            "{}:{} lost",
            r.partition,
            r.offset
        );
    }
}

#[test]
fn stuck_record_is_dead_lettered_and_the_partition_moves_on() {
    let Setup {
        log,
        mut handler,
        dlq,
    } = setup();
    handler.steps.insert((0, 3), vec![Step::Hang]);
    let (source, handle) = MemSource::new(100);
    let produced: Vec<_> = (0..20)
        .map(|i| rec(0, i, Some(&format!("k{}", i % 3))))
        .collect();
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let cfg = EngineConfig {
        stuck_timeout: Some(Duration::from_secs(5)),
        attempt_timeout: None,
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let stats = engine.stats();
    paused_runtime()
        .block_on(run_checked(engine, source, log.clone()))
        .unwrap();
    assert_each_once(&log, &produced);
    assert_session_order(&log, &produced);
    assert_eq!(stats.stuck(), 1);
    let dlq_reasons: Vec<_> = log
        .events()
        .into_iter()
        .filter_map(|e| {
            if let common::Ev::Dlq { offset, reason, .. } = e {
                Some((offset, reason))
            } else {
                None
            }
        })
        .collect();
    assert_eq!(dlq_reasons, vec![(3, "stuck".to_owned())]);
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(20));
}

/// A handler whose whole endpoint is down: every attempt waits until the endpoint is back
/// (`down_for` after the start). `reports` says whether it tells the engine so through
/// `Handler::available`.
struct Outage {
    inner: Scripted,
    until: tokio::time::Instant,
    reports: bool,
}

impl orderly_engine::Handler for Outage {
    async fn handle(
        &self,
        record: &orderly_engine::Record,
        attempt: orderly_engine::Attempt,
    ) -> Result<(), orderly_engine::HandlerError> {
        tokio::time::sleep_until(self.until).await;
        self.inner.handle(record, attempt).await
    }

    fn available(&self) -> bool {
        !self.reports || tokio::time::Instant::now() >= self.until
    }
}

/// Runs 30 records of 6 sessions through a handler that is down for 20 s with a 5 s stuck-gap
/// timeout; returns how many records were dead-lettered and the final commit.
fn outage_run(reports: bool) -> (u64, Option<i64>, Arc<Log>, Vec<orderly_engine::Record>) {
    let Setup { log, handler, dlq } = setup();
    let (source, handle) = MemSource::new(100);
    let produced: Vec<_> = (0..30)
        .map(|i| rec(0, i, Some(&format!("k{}", i % 6))))
        .collect();
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let cfg = EngineConfig {
        stuck_timeout: Some(Duration::from_secs(5)),
        attempt_timeout: None,
        ..config()
    };
    let rt = paused_runtime();
    let until = rt.block_on(async { tokio::time::Instant::now() + Duration::from_secs(20) });
    let h = Outage {
        inner: handler,
        until,
        reports,
    };
    let engine = Engine::new(cfg, h, dlq);
    let stats = engine.stats();
    rt.block_on(run_checked(engine, source, log.clone()))
        .unwrap();
    (
        stats.dead_lettered(),
        handle.committed(&tp(0)).map(|c| c.offset),
        log,
        produced,
    )
}

/// While the handler reports its endpoint unavailable, the stuck-gap rule does not fire: an
/// outage longer than the stuck timeout dead-letters nothing, and every record is handled in
/// order once the endpoint is back. The control run (the same outage, not reported) shows the
/// rule would otherwise have fired.
#[test]
fn an_unavailable_handler_suspends_the_stuck_rule() {
    let (dead, committed, log, produced) = outage_run(true);
    assert_eq!(
        dead, 0,
        "nothing is dead-lettered while the endpoint is down"
    );
    assert_eq!(committed, Some(30));
    assert_each_once(&log, &produced);
    assert_session_order(&log, &produced);

    let (dead, committed, _, _) = outage_run(false);
    assert!(
        dead >= 1,
        "control: the stuck rule fires when the outage is not reported"
    );
    assert_eq!(committed, Some(30));
}

#[test]
fn failing_dead_letter_writes_are_retried_not_dropped() {
    let Setup {
        log,
        mut handler,
        dlq,
    } = setup();
    handler.steps.insert((0, 1), vec![Step::Permanent]);
    handler.steps.insert((0, 2), vec![Step::Transient]);
    dlq.inner.fail_next(5);
    let (source, handle) = MemSource::new(100);
    let mut produced: Vec<_> = (0..10).map(|i| rec(0, i, Some("one-session"))).collect();
    produced[2].headers.push(Header::new(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ));
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let dlq_log = Arc::new(dlq);
    let engine = Engine::from_arcs(config(), Arc::new(handler), dlq_log.clone());
    let stats = engine.stats();
    paused_runtime()
        .block_on(run_checked(engine, source, log.clone()))
        .unwrap();
    assert_each_once(&log, &produced);
    assert_session_order(&log, &produced);
    assert_eq!(dlq_log.inner.failures(), 5);
    let letters = dlq_log.inner.letters();
    assert_eq!(
        letters
            .iter()
            .map(|l| (l.record.offset, l.reason.code(), l.attempts))
            .collect::<Vec<_>>(),
        vec![(1, "permanent", 1), (2, "retries-exhausted", 4)]
    );
    // The trace context travels with the dead letter, and the DLQ headers name the source.
    let h = letters[1].headers();
    assert!(h.iter().any(|h| h.key == "traceparent"));
    assert!(
        h.iter()
            .any(|h| h.key == "orderly-dlq-offset" && h.value.as_deref() == Some(&b"2"[..]))
    );
    assert_eq!(stats.dead_lettered(), 2);
    assert_eq!(stats.retried(), 3);
}

#[test]
fn restart_skips_offsets_completed_above_the_watermark() {
    let (source, handle) = MemSource::new(100);
    let produced: Vec<_> = (0..10).map(|i| rec(0, i, Some(&format!("k{i}")))).collect();
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    // Run 1: offset 0 hangs, 1..9 finish; shutdown with a short drain cancels 0.
    let Setup {
        log,
        mut handler,
        dlq,
    } = setup();
    handler.steps.insert((0, 0), vec![Step::Hang]);
    let cfg = EngineConfig {
        drain_timeout: Duration::from_millis(100),
        attempt_timeout: None,
        stuck_timeout: None,
        ..config()
    };
    let rt = paused_runtime();
    rt.block_on(Engine::new(cfg.clone(), handler, dlq).run(
        Checking {
            inner: source,
            log: log.clone(),
        },
        async { tokio::time::sleep(Duration::from_secs(1)).await },
    ))
    .unwrap();
    let cp = handle.committed(&tp(0)).unwrap();
    assert_eq!((cp.offset, cp.metadata.as_str()), (0, "o1:1,9"));
    // Run 2 (a new process on the same "broker"): only offset 0 is handled again.
    let Setup {
        log: log2,
        handler: handler2,
        dlq: dlq2,
    } = setup();
    let source = handle.reopen(100);
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    rt.block_on(Engine::new(cfg, handler2, dlq2).run(
        Checking {
            inner: source,
            log: log2.clone(),
        },
        std::future::pending(),
    ))
    .unwrap();
    let handled: Vec<i64> = log2
        .events()
        .into_iter()
        .filter_map(|e| {
            if let common::Ev::End {
                offset,
                step: Step::Ok,
                ..
            } = e
            {
                Some(offset)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(handled, vec![0]);
    assert_eq!(
        handle.committed(&tp(0)).map(|c| (c.offset, c.metadata)),
        Some((10, String::new()))
    );
}

#[test]
fn event_id_dedup_and_sequence_checker() {
    let Setup { log, handler, dlq } = setup();
    let (source, handle) = MemSource::new(100);
    let mut produced = Vec::new();
    for (i, (eid, seq)) in [("a", 1), ("b", 2), ("a", 3), ("c", 3), ("d", 2), ("e", 9)]
        .into_iter()
        .enumerate()
    {
        let mut r = rec(0, i as i64, Some("s"));
        r.headers
            .push(Header::new("event-id", Bytes::from_static(eid.as_bytes())));
        r.headers.push(Header::new("seq", seq.to_string()));
        produced.push(r);
    }
    handle.produce(&tp(0), produced);
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let cfg = EngineConfig {
        seq_header: Some("seq".into()),
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let stats = engine.stats();
    paused_runtime()
        .block_on(run_checked(engine, source, log.clone()))
        .unwrap();
    assert_eq!(stats.deduplicated(), 1);
    assert_eq!(stats.handled(), 5);
    // The duplicate (a, 3) is skipped before the checker; then 3 after 2 is fine and 2 after 3
    // is the one violation.
    assert_eq!(stats.ordering_violations(), 1);
    assert_eq!(
        stats.violations_by_session().get(&Bytes::from_static(b"s")),
        Some(&1)
    );
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(6));
}

/// A lost partition's sessions forget the event ids they handled: the records come back from
/// the last commit (nothing since was durable; in the exactly-once mode their output was
/// aborted) and reach the handler again, instead of being skipped as duplicates.
#[test]
fn records_handled_again_after_a_loss_are_not_deduplicated() {
    let Setup {
        log,
        mut handler,
        dlq,
    } = setup();
    let (source, handle) = MemSource::new(100);
    let mut produced = Vec::new();
    for i in 0..4 {
        let mut r = rec(0, i, Some("s"));
        r.headers
            .push(Header::new("event-id", Bytes::from(format!("e-{i}"))));
        produced.push(r);
    }
    // Records 0 and 1 are handled at once; record 2 is still running when the partition is lost.
    handler.durations.insert((0, 2), Duration::from_millis(500));
    handle.produce(&tp(0), produced);
    handle.assign(&[tp(0)]);
    let cfg = EngineConfig {
        commit_interval: Duration::from_secs(3600),
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let stats = engine.stats();
    let h = handle.clone();
    paused_runtime().block_on(async move {
        let run = tokio::spawn(run_checked(engine, source, log.clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(stats.handled(), 2);
        h.lose(&[tp(0)]).await.unwrap();
        h.assign(&[tp(0)]);
        h.finish_when_drained();
        run.await.unwrap().unwrap();
        assert_eq!(stats.deduplicated(), 0, "nothing skipped as seen");
        assert_eq!(stats.handled(), 6, "records 0 and 1 handled twice");
        assert_eq!(h.committed(&tp(0)).map(|c| c.offset), Some(4));
    });
}

/// A revoked partition's sessions forget the event ids they handled, as a lost one's do: what
/// they handled may not be durable when the partition leaves (here the revoke's commit fails
/// until it is given up; in the exactly-once mode the revoke's transaction may abort), so the
/// records a later assignment to the same engine brings back reach the handler again instead of
/// being finished unhandled as duplicates.
#[test]
fn records_handled_again_after_a_revoke_are_not_deduplicated() {
    let Setup { log, handler, dlq } = setup();
    let (source, handle) = MemSource::new(100);
    let mut produced = Vec::new();
    for i in 0..3 {
        let mut r = rec(0, i, Some("s"));
        r.headers
            .push(Header::new("event-id", Bytes::from(format!("e-{i}"))));
        produced.push(r);
    }
    handle.produce(&tp(0), produced);
    handle.assign(&[tp(0)]);
    let cfg = EngineConfig {
        commit_interval: Duration::from_secs(3600),
        session_idle_timeout: Duration::from_secs(3600),
        final_commit_timeout: Duration::from_secs(5),
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let stats = engine.stats();
    let h = handle.clone();
    paused_runtime().block_on(async move {
        let run = tokio::spawn(run_checked(engine, source, log.clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(stats.handled(), 3);
        h.fail_commits(u32::MAX);
        h.revoke(&[tp(0)]).await.unwrap();
        assert_eq!(
            h.committed(&tp(0)),
            None,
            "the revoke's commit was given up"
        );
        h.fail_commits(0);
        h.assign(&[tp(0)]);
        h.finish_when_drained();
        run.await.unwrap().unwrap();
        assert_eq!(stats.deduplicated(), 0, "nothing skipped as seen");
        assert_eq!(stats.handled(), 6, "every record handled again");
        assert_eq!(h.committed(&tp(0)).map(|c| c.offset), Some(3));
    });
}

/// A dead-lettered record's event id is not "seen": a replay of it (the same event id again,
/// as `orderly dlq replay` writes it) reaches the handler instead of being skipped as a duplicate.
#[test]
fn a_replayed_dead_letter_is_handled_not_deduplicated() {
    let Setup {
        log,
        mut handler,
        dlq,
    } = setup();
    handler.steps.insert((0, 0), vec![Step::Permanent]);
    let (source, handle) = MemSource::new(100);
    let mut produced = Vec::new();
    for i in 0..2 {
        let mut r = rec(0, i, Some("s"));
        r.headers
            .push(Header::new("event-id", Bytes::from_static(b"e-1")));
        produced.push(r);
    }
    handle.produce(&tp(0), produced);
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let engine = Engine::new(config(), handler, dlq);
    let stats = engine.stats();
    paused_runtime()
        .block_on(run_checked(engine, source, log.clone()))
        .unwrap();
    assert_eq!(stats.dead_lettered(), 1);
    assert_eq!(stats.deduplicated(), 0);
    assert_eq!(stats.handled(), 1);
    let started: Vec<i64> = log
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Ev::Start { offset, .. } => Some(offset),
            _ => None,
        })
        .collect();
    assert_eq!(started, vec![0, 1]);
}

#[test]
fn unordered_lane_runs_concurrently_and_shutdown_waits_for_tasks() {
    let Setup {
        log,
        mut handler,
        dlq,
    } = setup();
    handler.default_duration = Duration::from_secs(1);
    let (source, handle) = MemSource::new(100);
    let produced: Vec<_> = (0..50).map(|i| rec(0, i, None)).collect();
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let rt = paused_runtime();
    let t0 = rt.block_on(async { tokio::time::Instant::now() });
    rt.block_on(Engine::new(config(), handler, dlq).run(
        Checking {
            inner: source,
            log: log.clone(),
        },
        std::future::pending(),
    ))
    .unwrap();
    let elapsed = rt.block_on(async { tokio::time::Instant::now() }) - t0;
    assert_each_once(&log, &produced);
    assert!(
        elapsed < Duration::from_secs(3),
        "50 one-second records took {elapsed:?}"
    );
}

/// A shutdown (SIGTERM) stops as a revoke does: queued records do not start, a record waiting
/// for a retry is abandoned at once, the attempts already running finish, the done prefix is
/// committed, and `run` returns after about one attempt's time, not after the admitted backlog
/// (1,000 records of 100 sessions, one second each). The next owner resumes from the commit.
#[test]
fn shutdown_finishes_running_attempts_only_and_commits() {
    let Setup {
        log,
        mut handler,
        dlq,
    } = setup();
    handler.default_duration = Duration::from_secs(1);
    // Offset 0 fails once and then waits a minute for its retry.
    handler
        .steps
        .insert((0, 0), vec![Step::Transient, Step::Ok]);
    let (source, handle) = MemSource::new(1000);
    let produced: Vec<_> = (0..1000)
        .map(|i| rec(0, i, Some(&format!("s{}", i % 100))))
        .collect();
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    let cfg = EngineConfig {
        retry: RetryPolicy {
            base: Duration::from_secs(60),
            factor: 1.0,
            cap: Duration::from_secs(60),
            max_attempts: None,
        },
        jitter_seed: Some(7),
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let stats = engine.stats();
    let rt = paused_runtime();
    let t0 = rt.block_on(async { tokio::time::Instant::now() });
    rt.block_on(async {
        engine
            .run(
                Checking {
                    inner: source,
                    log: log.clone(),
                },
                tokio::time::sleep(Duration::from_millis(1500)),
            )
            .await
    })
    .unwrap();
    let elapsed = rt.block_on(async { tokio::time::Instant::now() }) - t0;
    assert!(
        elapsed < Duration::from_secs(3),
        "the shutdown waited for the backlog: {elapsed:?}"
    );
    assert!(
        log.violations.lock().unwrap().is_empty(),
        "{:?}",
        log.violations.lock().unwrap()
    );
    // Two rounds of one record per session at most (the second round was running at the
    // signal); offset 0 is in its backoff and abandoned, so the watermark stays at 0 and the
    // finished records above it travel in the commit metadata.
    assert!(stats.handled() <= 200, "handled {}", stats.handled());
    assert!(stats.handled() >= 99, "handled {}", stats.handled());
    let c = handle.committed(&tp(0)).expect("committed at shutdown");
    assert_eq!(c.offset, 0);
    let done: usize = orderly_engine::metadata::decode(c.offset, &c.metadata)
        .unwrap()
        .into_iter()
        .map(|r| r.count())
        .sum();
    assert_eq!(done as u64, stats.handled());
}

/// A partition assigned at its offset-reset position (no commit in the group) is committed
/// even though no record ever arrives there; one the group already holds is not re-committed.
#[test]
fn an_assigned_partition_without_records_gets_its_position_committed() {
    let Setup { log, handler, dlq } = setup();
    let (source, handle) = MemSource::new(100);
    handle.produce(&tp(0), (0..10).map(|i| rec(0, i, Some("k"))));
    handle.assign(&[tp(0), tp(1)]);
    handle.finish_when_drained();
    let engine = Engine::new(config(), handler, dlq);
    paused_runtime()
        .block_on(run_checked(engine, source, log.clone()))
        .unwrap();
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(10));
    assert_eq!(handle.committed(&tp(1)).map(|c| c.offset), Some(0));
    // A second owner gets both from the group's commits and has nothing new to commit.
    let commits = handle.commits().len();
    let Setup { log, handler, dlq } = setup();
    let source = handle.reopen(100);
    handle.assign(&[tp(0), tp(1)]);
    handle.finish_when_drained();
    paused_runtime()
        .block_on(run_checked(
            Engine::new(config(), handler, dlq),
            source,
            log,
        ))
        .unwrap();
    assert_eq!(handle.commits().len(), commits);
}

#[test]
fn commit_failures_are_retried() {
    let Setup { log, handler, dlq } = setup();
    let (source, handle) = MemSource::new(100);
    handle.produce(&tp(0), (0..10).map(|i| rec(0, i, Some("k"))));
    handle.assign(&[tp(0)]);
    handle.fail_commits(3);
    let engine = Engine::new(config(), handler, dlq);
    paused_runtime().block_on(async move {
        let run = tokio::spawn(run_checked(engine, source, log));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(10));
        handle.close();
        run.await.unwrap().unwrap();
    });
}

#[test]
fn attempt_timeout_counts_as_transient() {
    let Setup {
        log,
        mut handler,
        dlq,
    } = setup();
    handler.steps.insert((0, 0), vec![Step::Hang]);
    let (source, handle) = MemSource::new(100);
    let produced: Vec<_> = (0..3).map(|i| rec(0, i, Some("k"))).collect();
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let cfg = EngineConfig {
        attempt_timeout: Some(Duration::from_secs(1)),
        retry: RetryPolicy {
            max_attempts: Some(2),
            ..config().retry
        },
        ..config()
    };
    let dlq = Arc::new(dlq);
    let engine = Engine::from_arcs(cfg, Arc::new(handler), dlq.clone());
    paused_runtime()
        .block_on(run_checked(engine, source, log.clone()))
        .unwrap();
    assert_each_once(&log, &produced);
    assert_session_order(&log, &produced);
    let letters = dlq.inner.letters();
    assert_eq!(letters.len(), 1);
    assert_eq!(
        (
            letters[0].record.offset,
            letters[0].reason.code(),
            letters[0].attempts
        ),
        (0, "retries-exhausted", 2)
    );
    assert!(letters[0].reason.text().contains("timed out"));
}

#[test]
fn metadata_overflow_replays_instead_of_skipping() {
    let (source, handle) = MemSource::new(100);
    // Offsets 0, 2, 4, ... hang; the odd ones finish: many one-offset runs above the watermark.
    let produced: Vec<_> = (0..40).map(|i| rec(0, i, Some(&format!("k{i}")))).collect();
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    let Setup {
        log,
        mut handler,
        dlq,
    } = setup();
    for i in (0..40).step_by(2) {
        handler.steps.insert((0, i), vec![Step::Hang]);
    }
    let cfg = EngineConfig {
        metadata_limit: 20,
        drain_timeout: Duration::from_millis(100),
        attempt_timeout: None,
        stuck_timeout: None,
        ..config()
    };
    let rt = paused_runtime();
    rt.block_on(Engine::new(cfg.clone(), handler, dlq).run(
        Checking {
            inner: source,
            log: log.clone(),
        },
        async { tokio::time::sleep(Duration::from_secs(1)).await },
    ))
    .unwrap();
    let cp = handle.committed(&tp(0)).unwrap();
    assert_eq!(cp.offset, 0);
    assert!(cp.metadata.len() <= 20, "{}", cp.metadata);
    let kept: Vec<i64> = orderly_engine::metadata::decode(0, &cp.metadata)
        .unwrap()
        .into_iter()
        .flatten()
        .collect();
    assert!(!kept.is_empty() && kept.len() < 20, "kept {kept:?}");
    // Restart: everything not named in the metadata is handled again, nothing named is.
    let Setup {
        log: log2,
        handler: handler2,
        dlq: dlq2,
    } = setup();
    let source = handle.reopen(100);
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    rt.block_on(Engine::new(cfg, handler2, dlq2).run(
        Checking {
            inner: source,
            log: log2.clone(),
        },
        std::future::pending(),
    ))
    .unwrap();
    let handled: std::collections::BTreeSet<i64> = log2
        .events()
        .into_iter()
        .filter_map(|e| {
            if let common::Ev::End {
                offset,
                step: Step::Ok,
                ..
            } = e
            {
                Some(offset)
            } else {
                None
            }
        })
        .collect();
    let expected: std::collections::BTreeSet<i64> = (0..40).filter(|o| !kept.contains(o)).collect();
    assert_eq!(handled, expected);
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(40));
}

#[test]
fn lag_stays_current_while_paused() {
    let Setup {
        log,
        mut handler,
        dlq,
    } = setup();
    handler.default_duration = Duration::from_secs(3600);
    let (source, handle) = MemSource::new(10);
    handle.produce(&tp(0), (0..10).map(|i| rec(0, i, Some("one"))));
    handle.assign(&[tp(0)]);
    let cfg = EngineConfig {
        partition_budget_bytes: 1,
        attempt_timeout: None,
        stuck_timeout: None,
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let stats = engine.stats();
    paused_runtime().block_on(async move {
        let run = tokio::spawn(run_checked(engine, source, log));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(handle.is_paused(&tp(0)));
        handle.produce(&tp(0), (10..500).map(|i| rec(0, i, Some("one"))));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let p = stats.partitions();
        assert_eq!(p.len(), 1);
        assert_eq!(
            (p[0].high_watermark, p[0].lag, p[0].paused),
            (Some(500), Some(500), true)
        );
        let oldest = p[0].oldest_in_flight.unwrap();
        assert_eq!(oldest.offset, 0);
        assert!(oldest.age >= Duration::from_secs(1));
        handle.close();
        run.await.unwrap().unwrap();
    });
}

struct Panicky;

impl orderly_engine::Handler for Panicky {
    async fn handle(
        &self,
        record: &orderly_engine::Record,
        _: orderly_engine::Attempt,
    ) -> Result<(), orderly_engine::HandlerError> {
        if record.offset == 1 {
            panic!("boom at {}", record.offset);
        }
        Ok(())
    }
}

#[test]
fn a_panicking_handler_dead_letters_the_record_and_keeps_going() {
    let (source, handle) = MemSource::new(100);
    handle.produce(&tp(0), (0..5).map(|i| rec(0, i, Some("k"))));
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let dlq = Arc::new(MemDeadLetters::new());
    let engine = Engine::from_arcs(config(), Arc::new(Panicky), dlq.clone());
    let stats = engine.stats();
    paused_runtime()
        .block_on(engine.run(source, std::future::pending()))
        .unwrap();
    assert_eq!((stats.handled(), stats.dead_lettered()), (4, 1));
    let letters = dlq.letters();
    assert_eq!(letters[0].reason.text(), "handler panicked: boom at 1");
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(5));
}

/// Dropping `Engine::run` (an abrupt stop) aborts the workers: no handler starts afterwards.
#[tokio::test(start_paused = true)]
async fn dropping_run_stops_every_handler() {
    use std::sync::atomic::{AtomicU64, Ordering};
    struct Slow(Arc<AtomicU64>);
    impl orderly_engine::Handler for Slow {
        async fn handle(
            &self,
            _record: &orderly_engine::Record,
            _attempt: orderly_engine::Attempt,
        ) -> Result<(), orderly_engine::HandlerError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            Ok(())
        }
    }
    let started = Arc::new(AtomicU64::new(0));
    let (source, handle) = orderly_engine::mem::MemSource::new(64);
    let tp = orderly_engine::TopicPartition::new("t", 0);
    // Many sessions, so several handlers run at once when the drop comes.
    handle.produce(
        &tp,
        (0..1_000).map(|i| {
            orderly_engine::Record::new(
                tp.clone(),
                i,
                Some(Bytes::from(format!("s-{}", i % 50))),
                None,
            )
        }),
    );
    handle.assign(std::slice::from_ref(&tp));
    let engine = orderly_engine::Engine::new(
        orderly_engine::EngineConfig::default(),
        Slow(started.clone()),
        orderly_engine::mem::MemDeadLetters::new(),
    );
    let run = tokio::spawn(engine.run(source, std::future::pending()));
    tokio::time::sleep(std::time::Duration::from_millis(55)).await;
    run.abort();
    let _ = run.await;
    let at_drop = started.load(Ordering::SeqCst);
    assert!(
        at_drop > 0 && at_drop < 1_000,
        "the run was mid-way: {at_drop}"
    );
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert_eq!(
        started.load(Ordering::SeqCst),
        at_drop,
        "no handler started after the drop"
    );
}

/// Counts the polls of its handler futures: each waits 5 ms, then does 50 tokio operations that
/// are ready at once (`consume_budget`, like reads from a buffered socket).
struct PollCounting {
    polls: Arc<std::sync::atomic::AtomicUsize>,
}

impl orderly_engine::Handler for PollCounting {
    async fn handle(
        &self,
        _: &orderly_engine::Record,
        _: orderly_engine::Attempt,
    ) -> Result<(), orderly_engine::HandlerError> {
        let work = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            for _ in 0..50 {
                tokio::task::consume_budget().await;
            }
        };
        let mut work = std::pin::pin!(work);
        std::future::poll_fn(|cx| {
            self.polls
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            work.as_mut().poll(cx)
        })
        .await;
        Ok(())
    }
}

/// Records of many sessions whose handlers wake at the same time are not polled again and again.
/// A worker drives thousands of record futures inside one tokio task, and tokio's cooperative
/// budget (128 operations per task poll) is per task: once spent, every tokio operation of every
/// other record returned `Pending` and woke its future again, so each worker turn finished a
/// couple of records and re-polled the rest (futures-rs#2053; 29 polls per record in an
/// S3-100us run). The worker polls each record's future with the budget off, as its own task.
#[test]
fn handlers_that_wake_together_are_each_polled_a_bounded_number_of_times() {
    const N: usize = 2_000;
    let (source, handle) = MemSource::new(N);
    let keys: Vec<String> = (0..N).map(|i| format!("s{i}")).collect();
    let produced: Vec<_> = (0..N).map(|i| rec(0, i as i64, Some(&keys[i]))).collect();
    handle.produce(&tp(0), produced);
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let handler = PollCounting {
        polls: polls.clone(),
    };
    let cfg = EngineConfig {
        workers: 1,
        ..config()
    };
    let engine = Engine::new(cfg, handler, MemDeadLetters::new());
    let stats = engine.stats();
    paused_runtime()
        .block_on(engine.run(source, std::future::pending()))
        .unwrap();
    assert_eq!(stats.handled(), N as u64);
    let polls = polls.load(std::sync::atomic::Ordering::Relaxed);
    // Each record: polled when it starts (the sleep is pending), at most a few more times until
    // it is registered where its wake-up lands, and once after the wake-up, when it completes.
    assert!(polls <= 4 * N, "{polls} polls for {N} records");
}

/// `EngineStats::last_commit` is when the final commit was acknowledged: none before the run, and
/// after a clean shutdown a time after the last record finished and after the failed attempts of
/// the final commit (two injected failures, retried 100 ms then 200 ms later), before `run`
/// returned. Real time: the wall clock is what the figure reports.
#[test]
fn last_commit_is_when_the_final_commit_was_acknowledged() {
    use std::sync::Mutex;
    use std::time::SystemTime;
    struct Stamping(Arc<Mutex<Option<SystemTime>>>);
    impl orderly_engine::Handler for Stamping {
        async fn handle(
            &self,
            _record: &orderly_engine::Record,
            _attempt: orderly_engine::Attempt,
        ) -> Result<(), orderly_engine::HandlerError> {
            *self.0.lock().unwrap() = Some(SystemTime::now());
            Ok(())
        }
    }
    let last_done = Arc::new(Mutex::new(None));
    let (source, handle) = MemSource::new(16);
    handle.produce(
        &tp(0),
        (0..300).map(|i| rec(0, i, Some(&format!("k{}", i % 7)))),
    );
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    handle.fail_commits(2);
    let cfg = EngineConfig {
        // No interval commit: the final commit is the only one.
        commit_interval: Duration::from_secs(3600),
        ..config()
    };
    let engine = Engine::new(cfg, Stamping(last_done.clone()), MemDeadLetters::new());
    let stats = engine.stats();
    assert_eq!(stats.last_commit(), None);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(engine.run(source, std::future::pending()))
        .unwrap();
    let returned = SystemTime::now();
    assert_eq!(stats.handled(), 300);
    assert_eq!((stats.commits(), stats.commit_failures()), (1, 2));
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(300));
    let last_done = last_done.lock().unwrap().expect("records were handled");
    let committed = stats.last_commit().expect("the final commit succeeded");
    let after_done = committed
        .duration_since(last_done)
        .expect("acknowledged after the last record finished");
    assert!(
        after_done >= Duration::from_millis(300),
        "the two failed attempts and their backoffs come first: {after_done:?}"
    );
    assert!(committed <= returned, "{committed:?} after run returned");
}

/// Waits for its endpoint for `held`, then works for `work`, on every attempt.
struct HeldThenWorks {
    held: Duration,
    work: Duration,
    attempts: std::sync::Mutex<Vec<u32>>,
}

impl Handler for HeldThenWorks {
    async fn handle(&self, _: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        self.attempts.lock().unwrap().push(attempt.number);
        orderly_engine::waiting_for_endpoint(tokio::time::sleep(self.held)).await;
        tokio::time::sleep(self.work).await;
        Ok(())
    }
}

/// Runs one record through `handler` with a 1 s attempt timeout and two attempts at most; the
/// dead letters' reasons and the attempts' numbers.
fn held_run(handler: HeldThenWorks) -> (Vec<String>, Vec<u32>) {
    held_run_with(
        handler,
        EngineConfig {
            attempt_timeout: Some(Duration::from_secs(1)),
            stuck_timeout: None,
            ..config()
        },
    )
}

/// [`held_run`] with `cfg` (two attempts at most, a 10-minute drain).
fn held_run_with(handler: HeldThenWorks, cfg: EngineConfig) -> (Vec<String>, Vec<u32>) {
    let (source, handle) = MemSource::new(100);
    handle.produce(&tp(0), [rec(0, 0, Some("k"))]);
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let cfg = EngineConfig {
        drain_timeout: Duration::from_secs(600),
        retry: RetryPolicy {
            max_attempts: Some(2),
            ..config().retry
        },
        ..cfg
    };
    let handler = Arc::new(handler);
    let dlq = Arc::new(MemDeadLetters::new());
    let engine = Engine::from_arcs(cfg, handler.clone(), dlq.clone());
    paused_runtime()
        .block_on(engine.run(source, std::future::pending()))
        .unwrap();
    let reasons = dlq
        .letters()
        .iter()
        .map(|l| l.reason.text().to_owned())
        .collect();
    let attempts = handler.attempts.lock().unwrap().clone();
    (reasons, attempts)
}

#[test]
fn a_wait_for_the_endpoint_is_not_counted_by_the_stuck_rule() {
    // A record held a minute for its endpoint (a circuit, a `Retry-After`, a queue for a
    // connection) with a 5 s stuck-gap timeout: not stuck, handled once.
    let stuck_only = || EngineConfig {
        attempt_timeout: None,
        stuck_timeout: Some(Duration::from_secs(5)),
        ..config()
    };
    let (letters, attempts) = held_run_with(
        HeldThenWorks {
            held: Duration::from_secs(60),
            work: Duration::from_millis(100),
            attempts: Default::default(),
        },
        stuck_only(),
    );
    assert!(letters.is_empty(), "{letters:?}");
    assert_eq!(attempts, [1]);
    // The rule applies again once the call works on the record: a hang after the wait is stuck.
    let (letters, attempts) = held_run_with(
        HeldThenWorks {
            held: Duration::from_secs(60),
            work: Duration::from_secs(3600),
            attempts: Default::default(),
        },
        stuck_only(),
    );
    assert_eq!(attempts, [1]);
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert!(letters[0].contains("stuck"), "{letters:?}");
}

#[test]
fn a_wait_for_the_endpoint_is_not_counted_by_the_attempt_timeout() {
    // Held for a minute, then 100 ms of work: one attempt, done.
    let (letters, attempts) = held_run(HeldThenWorks {
        held: Duration::from_secs(60),
        work: Duration::from_millis(100),
        attempts: Default::default(),
    });
    assert!(letters.is_empty(), "{letters:?}");
    assert_eq!(attempts, [1]);
    // The limit starts afresh after the wait: 5 s of work still times out.
    let (letters, attempts) = held_run(HeldThenWorks {
        held: Duration::from_secs(60),
        work: Duration::from_secs(5),
        attempts: Default::default(),
    });
    assert_eq!(attempts, [1, 2]);
    assert_eq!(letters.len(), 1);
    assert!(letters[0].contains("timed out"), "{letters:?}");
}
