//! Replies: a record's replies are written in session order, each once in a run without
//! cancellations, before the record counts as done; a failed write is retried and never
//! overtaken, and every commit is checked against the replies really acknowledged.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use orderly_engine::mem::{MemDeadLetters, MemReplies, MemSource};
use orderly_engine::{
    Attempt, BatchOutcome, BatchReplies, Engine, EngineConfig, Handler, HandlerError, Record,
    Reply, ReplyError, ReplyFuture, ReplySink,
};
use proptest::prelude::*;

/// Replies of record `offset`: `offset % 3` of them (so some records have none), values
/// `<partition>/<offset>/<index>`.
fn replies_of(record: &Record) -> Vec<Reply> {
    let (p, o) = (record.partition.partition, record.offset);
    (0..(o % 3))
        .map(|i| Reply::new(format!("{p}/{o}/{i}")))
        .collect()
}

/// A scripted handler that replies: per (partition, offset) one step per attempt (the last
/// repeats). It logs each start and each failure; a success is logged by the reply sink when
/// the record's replies are acknowledged ([`LoggingReplies`]), so the log's terminal event of a
/// record is the moment it may count as done.
struct Replying {
    log: Arc<Log>,
    steps: HashMap<(i32, i64), Vec<Step>>,
    durations: HashMap<(i32, i64), Duration>,
}

impl Replying {
    fn new(log: Arc<Log>) -> Self {
        Self {
            log,
            steps: HashMap::new(),
            durations: HashMap::new(),
        }
    }
}

impl Handler for Replying {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        self.handle_replying(record, attempt).await.map(drop)
    }

    async fn handle_replying(
        &self,
        record: &Record,
        attempt: Attempt,
    ) -> Result<Vec<Reply>, HandlerError> {
        let (part, offset) = (record.partition.partition, record.offset);
        self.log.push(|seq| Ev::Start {
            part,
            offset,
            attempt: attempt.number,
            backoff: attempt.backoff,
            seq,
            at: tokio::time::Instant::now(),
        });
        let step = self.steps.get(&(part, offset)).map_or(Step::Ok, |s| {
            s[(attempt.number as usize - 1).min(s.len() - 1)]
        });
        let d = self
            .durations
            .get(&(part, offset))
            .copied()
            .unwrap_or_default();
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
        if step != Step::Ok {
            self.log.push(|seq| Ev::End {
                part,
                offset,
                attempt: attempt.number,
                step,
                seq,
                at: tokio::time::Instant::now(),
            });
        }
        match step {
            Step::Ok => Ok(replies_of(record)),
            Step::Transient | Step::Hang => Err(HandlerError::transient("scripted")),
            Step::Permanent => Err(HandlerError::permanent("scripted permanent")),
        }
    }
}

/// The same handler with its own `handle_batch_replying` (the engine must write each record's
/// replies in record order and take the batch's answer as it is).
struct BatchReplying(Replying);

impl Handler for BatchReplying {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        self.0.handle(record, attempt).await
    }

    async fn handle_replying(
        &self,
        record: &Record,
        attempt: Attempt,
    ) -> Result<Vec<Reply>, HandlerError> {
        self.0.handle_replying(record, attempt).await
    }

    async fn handle_batch_replying(&self, records: &[&Record], attempt: Attempt) -> BatchReplies {
        let mut replies = Vec::new();
        for (i, r) in records.iter().enumerate() {
            let at = if i == 0 { attempt } else { Attempt::FIRST };
            match self.0.handle_replying(r, at).await {
                Ok(rs) => replies.push(rs),
                Err(e) => {
                    return BatchReplies {
                        outcome: BatchOutcome {
                            done: i,
                            error: Some(e),
                        },
                        replies,
                    };
                }
            }
        }
        BatchReplies {
            outcome: BatchOutcome::all(records.len()),
            replies,
        }
    }
}

/// What one write of the reply sink does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Fails after writing the first `n` replies of the call.
    Fail(usize),
    /// Discards whatever was written of the record's replies (as an aborted transaction
    /// would) and says so: the record is handled again.
    Discard,
    /// Refuses the replies: the record is dead-lettered.
    Refuse,
}

/// A reply sink that keeps what it wrote, in order, logs each record's acknowledgement as the
/// record's successful end, and fails as scripted per record (one fault per write, in turn).
struct LoggingReplies {
    log: Arc<Log>,
    faults: Mutex<HashMap<(i32, i64), VecDeque<Fault>>>,
    /// (partition, offset, session, value) in write order.
    written: Mutex<Vec<Written>>,
    /// Records without replies that a batch answered done after a record with replies: done
    /// once that record's replies are acknowledged (see [`EndWithoutReplies`]).
    after: Pending,
}

type Pending = Arc<Mutex<HashMap<(i32, i64), Vec<i64>>>>;

/// (partition, offset, session, value) of a written reply.
type Written = (i32, i64, Option<Bytes>, Bytes);

impl LoggingReplies {
    fn new(log: Arc<Log>) -> Self {
        Self {
            log,
            faults: Mutex::new(HashMap::new()),
            written: Mutex::new(Vec::new()),
            after: Pending::default(),
        }
    }

    /// (partition, session, value) in write order.
    fn written(&self) -> Vec<(i32, Option<Bytes>, Bytes)> {
        self.written
            .lock()
            .unwrap()
            .iter()
            .map(|(p, _, s, v)| (*p, s.clone(), v.clone()))
            .collect()
    }
}

impl ReplySink for LoggingReplies {
    fn send<'a>(
        &'a self,
        origin: &'a Record,
        session: Option<&'a [u8]>,
        replies: &'a [Reply],
    ) -> ReplyFuture<'a> {
        Box::pin(async move {
            // A write takes time, so writes of different sessions interleave.
            tokio::time::sleep(Duration::from_millis(1)).await;
            let (part, offset) = (origin.partition.partition, origin.offset);
            let fault = self
                .faults
                .lock()
                .unwrap()
                .get_mut(&(part, offset))
                .and_then(VecDeque::pop_front);
            let n = match fault {
                Some(Fault::Fail(n)) => n.min(replies.len()),
                Some(Fault::Discard) => {
                    self.written
                        .lock()
                        .unwrap()
                        .retain(|w| (w.0, w.1) != (part, offset));
                    return Err(ReplyError::Discarded("scripted".into()));
                }
                Some(Fault::Refuse) => return Err(ReplyError::Invalid("scripted".into())),
                None => replies.len(),
            };
            self.written
                .lock()
                .unwrap()
                .extend(replies[..n].iter().map(|r| {
                    (
                        part,
                        offset,
                        session.map(Bytes::copy_from_slice),
                        r.value.clone().unwrap(),
                    )
                }));
            if fault.is_some() {
                return Err(ReplyError::Write {
                    delivered: n,
                    reason: "scripted".into(),
                });
            }
            log_end(&self.log, part, offset);
            let after = self.after.lock().unwrap().remove(&(part, offset));
            for o in after.unwrap_or_default() {
                log_end(&self.log, part, o);
            }
            Ok(())
        })
    }
}

/// Logs the end of records without replies, which the engine does not hand to the sink: at
/// once on their own or when no record before them in a batch answer has replies; else once
/// the last such record's replies are acknowledged (a record of a batch is done only when the
/// records before it are: a write discarded sends it again).
struct EndWithoutReplies<H>(H, Arc<Log>, Pending);

impl<H: Handler> Handler for EndWithoutReplies<H> {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        self.handle_replying(record, attempt).await.map(drop)
    }

    async fn handle_replying(
        &self,
        record: &Record,
        attempt: Attempt,
    ) -> Result<Vec<Reply>, HandlerError> {
        let replies = self.0.handle_replying(record, attempt).await?;
        if replies.is_empty() {
            log_end(&self.1, record.partition.partition, record.offset);
        }
        Ok(replies)
    }

    async fn handle_batch_replying(&self, records: &[&Record], attempt: Attempt) -> BatchReplies {
        let answer = self.0.handle_batch_replying(records, attempt).await;
        let mut last_replying = None;
        let mut pending = self.2.lock().unwrap();
        for (i, r) in records.iter().enumerate().take(answer.outcome.done) {
            let (p, o) = (r.partition.partition, r.offset);
            if answer.replies.get(i).is_none_or(Vec::is_empty) {
                match last_replying {
                    None => log_end(&self.1, p, o),
                    Some(k) => pending.entry((p, k)).or_default().push(o),
                }
            } else {
                pending.insert((p, o), Vec::new());
                last_replying = Some(o);
            }
        }
        drop(pending);
        answer
    }
}

fn log_end(log: &Log, part: i32, offset: i64) {
    log.push(|seq| Ev::End {
        part,
        offset,
        attempt: 0,
        step: Step::Ok,
        seq,
        at: tokio::time::Instant::now(),
    });
}

/// Asserts the replies written are, per (partition, session), exactly the replies of the
/// session's handled records in offset order: none missing, none twice, none out of order.
fn assert_replies_in_session_order(
    written: &[(i32, Option<Bytes>, Bytes)],
    produced: &[Record],
    dead: &[(i32, i64)],
) {
    let mut expected: BTreeMap<(i32, Option<Bytes>), Vec<Bytes>> = BTreeMap::new();
    for r in produced {
        if dead.contains(&(r.partition.partition, r.offset)) {
            continue;
        }
        let e = expected
            .entry((r.partition.partition, r.key.clone()))
            .or_default();
        e.extend(replies_of(r).into_iter().map(|r| r.value.unwrap()));
    }
    let mut got: BTreeMap<(i32, Option<Bytes>), Vec<Bytes>> = BTreeMap::new();
    for (p, s, v) in written {
        got.entry((*p, s.clone())).or_default().push(v.clone());
    }
    expected.retain(|_, v| !v.is_empty());
    // The unordered lane has no order to keep: compare it as a set.
    for m in [&mut expected, &mut got] {
        for ((_, s), v) in m.iter_mut() {
            if s.is_none() {
                v.sort();
            }
        }
    }
    assert_eq!(got, expected);
}

fn dead_lettered(log: &Log) -> Vec<(i32, i64)> {
    log.events()
        .into_iter()
        .filter_map(|e| match e {
            Ev::Dlq { part, offset, .. } => Some((part, offset)),
            _ => None,
        })
        .collect()
}

fn dlq(log: &Arc<Log>) -> LoggingDlq {
    LoggingDlq {
        log: log.clone(),
        inner: MemDeadLetters::new(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random sessions (and the unordered lane), handler failures, durations, reply-write
    /// faults, batch sizes and worker counts: each session's replies are written in its order,
    /// each once; a record's session successor starts only after its replies are acknowledged;
    /// no commit passes a record whose replies are not acknowledged.
    #[test]
    fn random_schedules_write_replies_in_session_order(
        workers in 1usize..3,
        batch in prop_oneof![Just(1usize), 2usize..5],
        own_batch in any::<bool>(),
        records in prop::collection::vec((0u8..5, 0u8..2, prop_oneof![Just(0u64), 0u64..20], prop::collection::vec(0u8..12, 1..3), prop::collection::vec(0u8..4, 0..3)), 1..80),
    ) {
        let log = Arc::new(Log::default());
        let mut handler = Replying::new(log.clone());
        let sink = Arc::new(LoggingReplies::new(log.clone()));
        let (source, handle) = MemSource::new(5);
        let mut produced = Vec::new();
        let mut next = [0i64; 2];
        for (session, p, ms, plan, faults) in records {
            let p = i32::from(p);
            let off = next[p as usize];
            next[p as usize] += 1;
            let key = (session > 0).then(|| format!("s{session}"));
            produced.push(rec(p, off, key.as_deref()));
            handler.durations.insert((p, off), Duration::from_millis(ms));
            let steps = plan.iter().map(|x| match x { 0 => Step::Permanent, 1..=2 => Step::Transient, _ => Step::Ok }).collect();
            handler.steps.insert((p, off), steps);
            let faults = faults.iter().map(|f| match f { 0 => Fault::Discard, n => Fault::Fail(usize::from(*n) - 1) }).collect();
            sink.faults.lock().unwrap().insert((p, off), faults);
        }
        for p in 0..2 {
            handle.produce(&tp(p), produced.iter().filter(|r| r.partition.partition == p).cloned());
        }
        handle.assign(&[tp(0), tp(1)]);
        handle.finish_when_drained();
        let cfg = EngineConfig { workers, batch_max: batch, ..config() };
        let stats = if own_batch {
            let engine = Engine::new(cfg, EndWithoutReplies(BatchReplying(handler), log.clone(), sink.after.clone()), dlq(&log))
                .with_replies(sink.clone());
            let stats = engine.stats();
            paused_runtime().block_on(run_checked(engine, source, log.clone())).unwrap();
            stats
        } else {
            let engine = Engine::new(cfg, EndWithoutReplies(handler, log.clone(), sink.after.clone()), dlq(&log))
                .with_replies(sink.clone());
            let stats = engine.stats();
            paused_runtime().block_on(run_checked(engine, source, log.clone())).unwrap();
            stats
        };
        assert_each_once(&log, &produced);
        // A batch call hands the handler later records of the session before the earlier
        // ones' replies are written (they are written in order after the call), so the start
        // order is the single-record rule only.
        if batch == 1 {
            assert_session_order(&log, &produced);
        }
        assert_replies_in_session_order(&sink.written(), &produced, &dead_lettered(&log));
        for p in 0..2 {
            prop_assert_eq!(handle.committed(&tp(p)).map(|c| c.offset), Some(next[p as usize]));
        }
        prop_assert!(stats.replies() >= sink.written().len() as u64);
    }
}

/// One session whose reply writes fail, partly and wholly: the writes are retried from the
/// first reply not acknowledged (no reply twice), the handler runs once per record (a failed
/// write is not a handler failure), and the session's next record starts only after the
/// failing record's replies are all acknowledged.
#[test]
fn a_failed_reply_write_is_retried_and_never_overtaken() {
    let log = Arc::new(Log::default());
    let handler = Replying::new(log.clone());
    let sink = Arc::new(LoggingReplies::new(log.clone()));
    // Record 2 has two replies: the first write of it acknowledges one, then two writes fail.
    sink.faults.lock().unwrap().insert(
        (0, 2),
        VecDeque::from([Fault::Fail(1), Fault::Fail(0), Fault::Fail(0)]),
    );
    // Record 5 (two replies) fails once before anything is written.
    sink.faults
        .lock()
        .unwrap()
        .insert((0, 5), VecDeque::from([Fault::Fail(0)]));
    let (source, handle) = MemSource::new(100);
    let produced: Vec<_> = (0..9).map(|i| rec(0, i, Some("one"))).collect();
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let engine = Engine::new(
        config(),
        EndWithoutReplies(handler, log.clone(), sink.after.clone()),
        dlq(&log),
    )
    .with_replies(sink.clone());
    let stats = engine.stats();
    paused_runtime()
        .block_on(run_checked(engine, source, log.clone()))
        .unwrap();
    assert_each_once(&log, &produced);
    assert_session_order(&log, &produced);
    assert_replies_in_session_order(&sink.written(), &produced, &[]);
    let starts = log
        .events()
        .iter()
        .filter(|e| matches!(e, Ev::Start { .. }))
        .count();
    assert_eq!(starts, produced.len(), "a failed write re-ran the handler");
    assert_eq!(stats.reply_failures(), 4);
    assert_eq!(stats.retried(), 0);
    assert_eq!(stats.dead_lettered(), 0);
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(9));
}

/// Replies the sink discards (an aborted transaction) send their record back to the handler,
/// in place: it runs again, its new replies are written, and the session's later records wait.
#[test]
fn discarded_replies_handle_the_record_again_in_place() {
    let log = Arc::new(Log::default());
    let handler = Replying::new(log.clone());
    let sink = Arc::new(LoggingReplies::new(log.clone()));
    sink.faults
        .lock()
        .unwrap()
        .insert((0, 1), VecDeque::from([Fault::Discard, Fault::Discard]));
    let (source, handle) = MemSource::new(100);
    let produced: Vec<_> = (0..6).map(|i| rec(0, i, Some("one"))).collect();
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let engine = Engine::new(
        config(),
        EndWithoutReplies(handler, log.clone(), sink.after.clone()),
        dlq(&log),
    )
    .with_replies(sink.clone());
    let stats = engine.stats();
    paused_runtime()
        .block_on(run_checked(engine, source, log.clone()))
        .unwrap();
    assert_each_once(&log, &produced);
    assert_session_order(&log, &produced);
    assert_replies_in_session_order(&sink.written(), &produced, &[]);
    let attempts_of_1: Vec<u32> = log
        .events()
        .iter()
        .filter_map(|e| match e {
            Ev::Start {
                offset: 1, attempt, ..
            } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(attempts_of_1, vec![1, 2, 3]);
    assert_eq!(stats.retried(), 2);
}

/// A reply the sink refuses dead-letters its record (a permanent error), and without a reply
/// sink a record with replies is dead-lettered too: replies are never dropped silently.
#[test]
fn refused_replies_and_a_missing_sink_dead_letter_the_record() {
    for with_sink in [true, false] {
        let log = Arc::new(Log::default());
        let handler = Replying::new(log.clone());
        let sink = Arc::new(LoggingReplies::new(log.clone()));
        sink.faults
            .lock()
            .unwrap()
            .insert((0, 2), VecDeque::from([Fault::Refuse]));
        let (source, handle) = MemSource::new(100);
        let produced: Vec<_> = (0..4).map(|i| rec(0, i, Some("one"))).collect();
        handle.produce(&tp(0), produced.clone());
        handle.assign(&[tp(0)]);
        handle.finish_when_drained();
        let dlq = Arc::new(dlq(&log));
        let engine = Engine::from_arcs(
            config(),
            Arc::new(EndWithoutReplies(handler, log.clone(), sink.after.clone())),
            dlq.clone(),
        );
        let engine = if with_sink {
            engine.with_replies(sink.clone())
        } else {
            engine
        };
        paused_runtime()
            .block_on(run_checked(engine, source, log.clone()))
            .unwrap();
        assert_each_once(&log, &produced);
        assert_session_order(&log, &produced);
        let letters: Vec<(i64, String)> = dlq
            .inner
            .letters()
            .iter()
            .map(|l| (l.record.offset, l.reason.text().to_owned()))
            .collect();
        if with_sink {
            assert_eq!(letters, vec![(2, "reply refused: scripted".to_owned())]);
            assert_replies_in_session_order(&sink.written(), &produced, &[(0, 2)]);
        } else {
            // Offsets 1 and 2 have replies (offset % 3), 0 and 3 none.
            assert_eq!(
                letters.iter().map(|l| l.0).collect::<Vec<_>>(),
                vec![1, 2],
                "{letters:?}"
            );
            assert!(letters[0].1.contains("no reply sink"), "{letters:?}");
        }
    }
}

/// A reply write that keeps failing past the stuck-gap timeout is reported, never skipped:
/// nothing is dead-lettered, the commit stays below the record, and once the sink recovers the
/// replies are written and the session goes on in order.
#[test]
fn a_stalled_reply_write_holds_the_watermark_and_is_never_skipped() {
    let log = Arc::new(Log::default());
    let handler = Replying::new(log.clone());
    let sink = Arc::new(MemReplies::new());
    // 12 failures with a backoff capped at 10 s: far past the 2 s stuck timeout.
    sink.fail_next(12);
    let (source, handle) = MemSource::new(100);
    let produced: Vec<_> = (0..4).map(|i| rec(0, i, Some("one"))).collect();
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let cfg = EngineConfig {
        stuck_timeout: Some(Duration::from_secs(2)),
        drain_timeout: Duration::from_secs(600),
        ..config()
    };
    let dlq = Arc::new(dlq(&log));
    let engine = Engine::from_arcs(cfg, Arc::new(handler), dlq.clone()).with_replies(sink.clone());
    let stats = engine.stats();
    let rt = paused_runtime();
    rt.block_on(async {
        let run = tokio::spawn(engine.run(source, std::future::pending()));
        // Record 1 (the first with replies) is failing its writes: the commit stays at 1.
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(sink.failures() > 3);
        assert!(
            handle.committed(&tp(0)).is_none_or(|c| c.offset <= 1),
            "{:?}",
            handle.committed(&tp(0))
        );
        run.await.unwrap().unwrap();
    });
    assert!(dlq.inner.letters().is_empty());
    assert_eq!(stats.stuck(), 0);
    assert_eq!(stats.reply_failures(), 12);
    let written: Vec<(i64, Bytes)> = sink
        .written()
        .into_iter()
        .map(|w| (w.offset, w.reply.value.unwrap()))
        .collect();
    assert_eq!(
        written,
        vec![
            (1, Bytes::from("0/1/0")),
            (2, Bytes::from("0/2/0")),
            (2, Bytes::from("0/2/1")),
        ]
    );
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(4));
    assert_eq!(
        sink.written()[0].session.as_deref(),
        Some(&b"one"[..]),
        "the session id goes to the sink"
    );
}
