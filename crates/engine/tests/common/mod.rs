//! Shared test support: a scripted, recording handler and dead-letter sink, and a source wrapper
//! that checks every commit against what was really finished.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use orderly_engine::mem::{MemDeadLetters, MemSource};
use orderly_engine::metadata;
use orderly_engine::{
    Attempt, CommitPoint, DeadLetter, DeadLetterSink, DlqError, Engine, EngineConfig, EngineError,
    EngineStats, Handler, HandlerError, Record, RetryPolicy, Source, SourceError, SourceEvent,
    TopicPartition,
};

/// What one handler attempt does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Ok,
    Transient,
    Permanent,
    /// Never returns (until cancelled).
    Hang,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ev {
    Start {
        part: i32,
        offset: i64,
        attempt: u32,
        /// The backoff the engine reported for this attempt.
        backoff: Duration,
        seq: u64,
        at: tokio::time::Instant,
    },
    End {
        part: i32,
        offset: i64,
        attempt: u32,
        step: Step,
        seq: u64,
        at: tokio::time::Instant,
    },
    Dlq {
        part: i32,
        offset: i64,
        reason: String,
        seq: u64,
    },
    Commit {
        part: i32,
        offset: i64,
        seq: u64,
    },
}

#[derive(Default)]
pub struct Log {
    seq: AtomicU64,
    pub events: Mutex<Vec<Ev>>,
    pub violations: Mutex<Vec<String>>,
}

impl Log {
    pub fn push(&self, f: impl FnOnce(u64) -> Ev) {
        let mut ev = self.events.lock().unwrap();
        let seq = self.seq.fetch_add(1, SeqCst);
        ev.push(f(seq));
    }

    pub fn events(&self) -> Vec<Ev> {
        self.events.lock().unwrap().clone()
    }

    /// Terminal sequence number of each finished (partition, offset).
    pub fn terminal(&self) -> HashMap<(i32, i64), u64> {
        let mut t = HashMap::new();
        for e in self.events() {
            match e {
                Ev::End {
                    part,
                    offset,
                    step: Step::Ok,
                    seq,
                    ..
                }
                | Ev::Dlq {
                    part, offset, seq, ..
                } => {
                    t.entry((part, offset)).or_insert(seq);
                }
                _ => {}
            }
        }
        t
    }
}

/// A scripted handler: per (partition, offset) a list of steps, one per attempt (the last one
/// repeats), and a duration per attempt.
pub struct Scripted {
    pub log: Arc<Log>,
    pub steps: HashMap<(i32, i64), Vec<Step>>,
    pub durations: HashMap<(i32, i64), Duration>,
    pub default_duration: Duration,
}

impl Scripted {
    pub fn new(log: Arc<Log>) -> Self {
        Self {
            log,
            steps: HashMap::new(),
            durations: HashMap::new(),
            default_duration: Duration::from_millis(1),
        }
    }
}

impl Handler for Scripted {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        let (part, offset) = (record.partition.partition, record.offset);
        self.log.push(|seq| Ev::Start {
            part,
            offset,
            attempt: attempt.number,
            backoff: attempt.backoff,
            seq,
            at: tokio::time::Instant::now(),
        });
        let steps = self.steps.get(&(part, offset));
        let step = steps.map_or(Step::Ok, |s| {
            s[(attempt.number as usize - 1).min(s.len() - 1)]
        });
        let d = self
            .durations
            .get(&(part, offset))
            .copied()
            .unwrap_or(self.default_duration);
        if step == Step::Hang {
            tokio::time::sleep(Duration::from_secs(86_400 * 365)).await;
        }
        // A zero duration does not touch the timer: the handler finishes on its first poll (the
        // worker's fast path; any other duration takes the path through `FuturesUnordered`).
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
        self.log.push(|seq| Ev::End {
            part,
            offset,
            attempt: attempt.number,
            step,
            seq,
            at: tokio::time::Instant::now(),
        });
        match step {
            Step::Ok => Ok(()),
            Step::Transient | Step::Hang => Err(HandlerError::transient("scripted")),
            Step::Permanent => Err(HandlerError::permanent("scripted permanent")),
        }
    }
}

/// A dead-letter sink that logs acknowledged writes.
pub struct LoggingDlq {
    pub log: Arc<Log>,
    pub inner: MemDeadLetters,
}

impl DeadLetterSink for LoggingDlq {
    async fn send(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        self.inner.send(letter).await?;
        let (part, offset) = (letter.record.partition.partition, letter.record.offset);
        let reason = letter.reason.code().to_owned();
        self.log.push(|seq| Ev::Dlq {
            part,
            offset,
            reason,
            seq,
        });
        Ok(())
    }
}

/// Wraps the in-memory source and checks, at every commit, that everything below the commit
/// point and everything named in the metadata is terminal.
pub struct Checking {
    pub inner: MemSource,
    pub log: Arc<Log>,
}

/// `engine` over `source` until the source ends, every commit checked against `log`
/// ([`Checking`]).
pub fn run_checked<H: Handler, D: DeadLetterSink>(
    engine: Engine<H, D>,
    source: MemSource,
    log: Arc<Log>,
) -> impl Future<Output = Result<EngineStats, EngineError>> {
    engine.run(Checking { inner: source, log }, std::future::pending())
}

impl Source for Checking {
    async fn next_event(&mut self) -> Result<Option<SourceEvent>, SourceError> {
        self.inner.next_event().await
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
        // Checked when the commit is sent: everything it names must be terminal by then.
        let done = self.log.terminal();
        for (tp, cp) in &offsets {
            for o in 0..cp.offset {
                if !done.contains_key(&(tp.partition, o)) {
                    self.log
                        .violations
                        .lock()
                        .unwrap()
                        .push(format!("commit {tp} {} passes unfinished {o}", cp.offset));
                }
            }
            for r in metadata::decode(cp.offset, &cp.metadata).unwrap() {
                for o in r {
                    if !done.contains_key(&(tp.partition, o)) {
                        self.log
                            .violations
                            .lock()
                            .unwrap()
                            .push(format!("metadata of {tp} claims unfinished {o}"));
                    }
                }
            }
            let (part, offset) = (tp.partition, cp.offset);
            self.log.push(|seq| Ev::Commit { part, offset, seq });
        }
        self.inner.commit(offsets)
    }
    fn lease(&self) -> Option<std::sync::Arc<dyn orderly_engine::Lease>> {
        self.inner.lease()
    }
}

pub fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

pub fn rec(p: i32, offset: i64, key: Option<&str>) -> Record {
    Record::new(
        tp(p),
        offset,
        key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
        Some(Bytes::from_static(b"v")),
    )
}

/// Asserts per-session order within each partition: the first start of a later record comes
/// after the terminal event of the earlier one.
pub fn assert_session_order(log: &Log, produced: &[Record]) {
    let ev = log.events();
    let mut first_start: HashMap<(i32, i64), u64> = HashMap::new();
    for e in &ev {
        if let Ev::Start {
            part, offset, seq, ..
        } = e
        {
            first_start.entry((*part, *offset)).or_insert(*seq);
        }
    }
    let terminal = log.terminal();
    let mut by_session: BTreeMap<(i32, Vec<u8>), Vec<i64>> = BTreeMap::new();
    for r in produced {
        if let Some(k) = &r.key {
            by_session
                .entry((r.partition.partition, k.to_vec()))
                .or_default()
                .push(r.offset);
        }
    }
    for ((part, key), offsets) in by_session {
        for w in offsets.windows(2) {
            let (a, b) = (w[0], w[1]);
            if let (Some(ta), Some(sb)) = (terminal.get(&(part, a)), first_start.get(&(part, b))) {
                assert!(
                    sb > ta,
                    "session {:?} partition {part}: {b} started before {a} was terminal",
                    String::from_utf8_lossy(&key)
                );
            }
            if first_start.contains_key(&(part, b)) {
                assert!(
                    terminal.contains_key(&(part, a)),
                    "session {:?}: {b} started but {a} never finished",
                    String::from_utf8_lossy(&key)
                );
            }
        }
    }
}

/// Asserts every produced record ended handled or dead-lettered exactly once.
pub fn assert_each_once(log: &Log, produced: &[Record]) {
    let mut count: HashMap<(i32, i64), u32> = HashMap::new();
    for e in log.events() {
        match e {
            Ev::End {
                part,
                offset,
                step: Step::Ok,
                ..
            }
            | Ev::Dlq { part, offset, .. } => *count.entry((part, offset)).or_default() += 1,
            _ => {}
        }
    }
    for r in produced {
        let c = count
            .get(&(r.partition.partition, r.offset))
            .copied()
            .unwrap_or(0);
        assert_eq!(
            c, 1,
            "record {}:{} finished {c} times",
            r.partition, r.offset
        );
    }
    assert!(
        log.violations.lock().unwrap().is_empty(),
        "{:?}",
        log.violations.lock().unwrap()
    );
}

pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

/// The engine configuration of the deterministic tests: 2 workers, a fixed jitter seed, retries
/// from 10 ms (at most 4 attempts), commits every 200 ms, 30 s to drain a finished input.
pub fn config() -> EngineConfig {
    EngineConfig {
        workers: 2,
        jitter_seed: Some(7),
        retry: RetryPolicy {
            base: Duration::from_millis(10),
            factor: 2.0,
            cap: Duration::from_secs(1),
            max_attempts: Some(4),
        },
        commit_interval: Duration::from_millis(200),
        // The tests' bounded inputs drain whole; their longest runs need more than the default.
        drain_timeout: Duration::from_secs(30),
        ..EngineConfig::default()
    }
}

/// A recording log with the scripted handler and the logging dead-letter sink that write to it.
pub fn logged() -> (Arc<Log>, Scripted, LoggingDlq) {
    let log = Arc::new(Log::default());
    let handler = Scripted::new(log.clone());
    let dlq = LoggingDlq {
        log: log.clone(),
        inner: MemDeadLetters::new(),
    };
    (log, handler, dlq)
}
