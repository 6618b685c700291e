//! Shared pieces of the consumer's broker tests: a seed-style producer, an order-checking handler.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orderly_consumer::ConsumerConfig;
use orderly_group::AutoOffsetReset;

use orderly_engine::{Attempt, Handler, HandlerError, Record, RetryPolicy};

pub use orderly_consumer::__private::synthetic::fnv1a as fnv;

/// Produces the seed records (see [`orderly_consumer::__private::synthetic::produce_seed`]).
pub async fn produce_seed(
    bootstrap: &str,
    topic: &str,
    _partitions: i32,
    records: usize,
    sessions: usize,
) {
    orderly_consumer::__private::synthetic::produce_seed(
        &[bootstrap.to_string()],
        topic,
        records,
        sessions,
    )
    .await
    .expect("produce");
}

/// The failure rules: transient on the first attempt when `fnv(event-id) % 10 == 0`; permanent
/// when `fnv(event-id) % 1000 == 999` (a second bucket, disjoint from the first).
pub fn injected(record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
    let id = record.header("event-id").cloned().unwrap_or_default();
    let h = fnv(&id);
    if h % 1000 == 999 {
        return Err(HandlerError::permanent(format!(
            "invalid data in {}",
            String::from_utf8_lossy(&id)
        )));
    }
    if h % 10 == 0 && attempt.number == 1 {
        return Err(HandlerError::transient("dependency timed out"));
    }
    Ok(())
}

/// One attempt start, or one terminal attempt end (handled, or failed permanently: the record goes
/// to the DLQ next), as the handler saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub consumer: u32,
    pub session: String,
    pub seq: u64,
    pub attempt: u32,
    /// False for a start, true for a terminal end.
    pub end: bool,
}

/// A handler that logs every attempt start and terminal end (in one global order) and applies
/// [`injected`].
#[derive(Clone)]
pub struct Recording {
    pub id: u32,
    pub log: Arc<Mutex<Vec<Seen>>>,
    pub work: Duration,
}

impl Handler for Recording {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        let session =
            String::from_utf8_lossy(record.key.as_deref().unwrap_or_default()).into_owned();
        let seq = record
            .header("seq")
            .and_then(|v| std::str::from_utf8(v).ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        self.log.lock().unwrap().push(Seen {
            consumer: self.id,
            session: session.clone(),
            seq,
            attempt: attempt.number,
            end: false,
        });
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        let result = injected(record, attempt);
        if !matches!(result, Err(HandlerError::Transient { .. })) {
            self.log.lock().unwrap().push(Seen {
                consumer: self.id,
                session,
                seq,
                attempt: attempt.number,
                end: true,
            });
        }
        result
    }
}

/// What the attempt log says about order, loss and duplicates.
#[derive(Debug, Default)]
pub struct Verdict {
    /// A record started before its predecessor in the session was terminal.
    pub violations: Vec<String>,
    /// Distinct (session, seq) started at least once.
    pub distinct: usize,
    /// First attempts of a (session, seq) seen before (replays after a handover).
    pub replays: usize,
}

/// Checks the global attempt log against the ordering promise: per session (the seed's sessions
/// live on one partition each), the first attempt of `seq` starts only after `seq - 1` reached a
/// terminal end, in any consumer. Replays after a handover (restarting at the committed watermark)
/// satisfy this and are counted; retries (attempt > 1) are not order events.
pub fn verdict(log: &[Seen]) -> Verdict {
    let mut v = Verdict::default();
    let mut started: HashSet<(&str, u64)> = HashSet::new();
    let mut terminal: HashSet<(&str, u64)> = HashSet::new();
    for s in log {
        let key = (s.session.as_str(), s.seq);
        if s.end {
            terminal.insert(key);
            continue;
        }
        if s.attempt != 1 {
            continue;
        }
        if s.seq > 1 && !terminal.contains(&(s.session.as_str(), s.seq - 1)) {
            v.violations.push(format!(
                "{}: consumer {} started seq {} before seq {} was terminal",
                s.session,
                s.consumer,
                s.seq,
                s.seq - 1
            ));
        }
        if started.insert(key) {
            v.distinct += 1;
        } else {
            v.replays += 1;
        }
    }
    v
}

/// A retry policy like the benchmark rules (base 1 ms, factor 2, cap 100 ms, full jitter).
pub fn bench_retry() -> RetryPolicy {
    RetryPolicy {
        base: Duration::from_millis(1),
        factor: 2.0,
        cap: Duration::from_millis(100),
        max_attempts: None,
    }
}

/// A consumer of `topic` for the broker tests: start at the earliest offset, the benchmark's retry
/// policy, short heartbeats and frequent commits.
pub fn config(bootstrap: &str, group: &str, topic: &str, dlq: &str) -> ConsumerConfig {
    let mut c = ConsumerConfig::new([bootstrap], group, [topic]);
    c.dlq_topic = dlq.to_string();
    c.group.auto_offset_reset = AutoOffsetReset::Earliest;
    c.group.session_timeout = Duration::from_secs(10);
    c.group.heartbeat_interval = Duration::from_millis(500);
    c.engine.retry = bench_retry();
    c.engine.commit_interval = Duration::from_millis(100);
    c
}

/// Waits until `done()` or panics after `limit`.
pub async fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(
            t0.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A consumer running on its own task until [`Running::stop`].
pub struct Running {
    /// The engine's live counters.
    pub stats: orderly_engine::EngineStats,
    stop: tokio::sync::oneshot::Sender<()>,
    /// The task running `Consumer::run`.
    pub task:
        tokio::task::JoinHandle<Result<orderly_engine::EngineStats, orderly_consumer::DriverError>>,
}

/// Spawns `consumer.run` with a shutdown signal that [`Running::stop`] fires.
pub fn start<H: Handler>(consumer: orderly_consumer::Consumer<H>) -> Running {
    let stats = consumer.stats();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(consumer.run(async move {
        let _ = stopped.await;
    }));
    Running { stats, stop, task }
}

impl Running {
    /// Signals shutdown and waits for `run` to return; panics if it failed.
    pub async fn stop(self) -> orderly_engine::EngineStats {
        let _ = self.stop.send(());
        self.task.await.expect("run task").expect("run succeeded")
    }

    /// Signals shutdown and waits up to `limit` for `run` to return, whatever it returns.
    pub async fn end_within(self, limit: Duration) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(limit, self.task).await;
    }
}
