//! An in-memory [`Source`], dead-letter sink and reply sink, for tests, benchmarks and demos
//! without a broker.
//!
//! It models what the engine relies on from Kafka: a log per partition, a fetch position set by
//! the assignment's committed offset, pause/resume, commits with metadata, and rebalance events.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, oneshot};

use crate::handler::{DeadLetter, DeadLetterSink, DlqError};
use crate::record::{Record, TopicPartition};
use crate::reply::{Reply, ReplyError, ReplyFuture, ReplySink};
use crate::source::{Assignment, CommitPoint, Source, SourceError, SourceEvent};

type Generator = Box<dyn FnMut(i64) -> Record + Send>;

enum Log {
    /// Stored records (tests): can be read again from any offset after a reassignment.
    Stored(Vec<Record>),
    /// Records made on the fly for offsets `0..end` (benchmarks): no memory per record.
    Generated { make: Generator, end: i64 },
}

struct Part {
    log: Log,
    /// Index (stored) or offset (generated) of the next record to deliver.
    pos: i64,
    assigned: bool,
    paused: bool,
}

impl Part {
    fn high_watermark(&self) -> i64 {
        match &self.log {
            Log::Stored(v) => v.last().map_or(0, |r| r.offset + 1),
            Log::Generated { end, .. } => *end,
        }
    }

    fn remaining(&self) -> bool {
        match &self.log {
            Log::Stored(v) => (self.pos as usize) < v.len(),
            Log::Generated { end, .. } => self.pos < *end,
        }
    }

    fn seek(&mut self, offset: i64) {
        self.pos = match &self.log {
            Log::Stored(v) => v.partition_point(|r| r.offset < offset) as i64,
            Log::Generated { .. } => offset.max(0),
        };
    }

    fn take(&mut self, max: usize) -> Vec<Record> {
        let mut out = Vec::with_capacity(max);
        match &mut self.log {
            Log::Stored(v) => {
                let start = self.pos as usize;
                let end = (start + max).min(v.len());
                out.extend_from_slice(&v[start..end]);
                self.pos = end as i64;
            }
            Log::Generated { make, end } => {
                while self.pos < *end && out.len() < max {
                    out.push(make(self.pos));
                    self.pos += 1;
                }
            }
        }
        out
    }
}

#[derive(Default)]
struct State {
    control: VecDeque<SourceEvent>,
    parts: BTreeMap<TopicPartition, Part>,
    cursor: usize,
    commits: Vec<(TopicPartition, CommitPoint)>,
    committed: HashMap<TopicPartition, CommitPoint>,
    pauses: u64,
    resumes: u64,
    finish_when_drained: bool,
    closed: bool,
    fail_commits: u32,
    metadata_limit: Option<usize>,
}

struct Shared {
    state: Mutex<State>,
    notify: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock can only come from a bug in this module; the state is
        // still usable (plain data), so recover it rather than propagate the poison.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The engine's side of the in-memory source.
pub struct MemSource {
    shared: Arc<Shared>,
    batch: usize,
    lease: Option<Arc<dyn crate::source::Lease>>,
}

/// The test's side of the in-memory source: produce records, drive rebalances, read commits.
#[derive(Clone)]
pub struct MemHandle {
    shared: Arc<Shared>,
}

impl MemSource {
    /// A source delivering up to `batch` records per event (at least 1).
    pub fn new(batch: usize) -> (Self, MemHandle) {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            notify: Notify::new(),
        });
        (
            Self {
                shared: shared.clone(),
                batch: batch.max(1),
                lease: None,
            },
            MemHandle { shared },
        )
    }

    /// The source with `lease` as its ownership lease ([`Source::lease`]).
    pub fn with_lease(mut self, lease: Arc<dyn crate::source::Lease>) -> Self {
        self.lease = Some(lease);
        self
    }
}

impl MemHandle {
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let out = f(&mut self.shared.lock());
        self.shared.notify.notify_waiters();
        out
    }

    /// Appends records (ascending offsets) to a partition's log.
    pub fn produce(&self, tp: &TopicPartition, records: impl IntoIterator<Item = Record>) {
        self.with(|s| {
            let part = s.parts.entry(tp.clone()).or_insert_with(|| Part {
                log: Log::Stored(Vec::new()),
                pos: 0,
                assigned: false,
                paused: false,
            });
            if let Log::Stored(v) = &mut part.log {
                v.extend(records);
            }
            if part.assigned && part.paused {
                // Keep lag current while fetching is paused, as a Kafka driver must.
                let hw = part.high_watermark();
                s.control
                    .push_back(SourceEvent::HighWatermark(tp.clone(), hw));
            }
        });
    }

    /// Gives a partition a generated log of offsets `0..count`.
    pub fn generate(
        &self,
        tp: &TopicPartition,
        count: i64,
        make: impl FnMut(i64) -> Record + Send + 'static,
    ) {
        self.with(|s| {
            s.parts.insert(
                tp.clone(),
                Part {
                    log: Log::Generated {
                        make: Box::new(make),
                        end: count,
                    },
                    pos: 0,
                    assigned: false,
                    paused: false,
                },
            );
        });
    }

    /// Assigns partitions starting at their last commit here (or 0), as a group coordinator
    /// would: the engine receives the committed offset and metadata.
    pub fn assign(&self, tps: &[TopicPartition]) {
        self.with(|s| {
            let mut list = Vec::new();
            for tp in tps {
                let stored = s.committed.get(tp).cloned();
                let committed = stored.is_some();
                let cp = stored.unwrap_or(CommitPoint {
                    offset: 0,
                    metadata: String::new(),
                });
                let part = s.parts.entry(tp.clone()).or_insert_with(|| Part {
                    log: Log::Stored(Vec::new()),
                    pos: 0,
                    assigned: false,
                    paused: false,
                });
                part.seek(cp.offset);
                part.assigned = true;
                part.paused = false;
                list.push(Assignment {
                    partition: tp.clone(),
                    next_offset: cp.offset,
                    metadata: cp.metadata,
                    committed,
                });
            }
            s.control.push_back(SourceEvent::Assigned(list));
        });
    }

    /// Revokes partitions; the receiver completes when the engine acknowledged (after its
    /// commit). Delivery of their records stops at once.
    pub fn revoke(&self, tps: &[TopicPartition]) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.with(|s| {
            for tp in tps {
                if let Some(p) = s.parts.get_mut(tp) {
                    p.assigned = false;
                }
            }
            s.control.push_back(SourceEvent::Revoked(tps.to_vec(), tx));
        });
        rx
    }

    /// Loses partitions (no handover). The receiver completes when the engine acknowledged.
    pub fn lose(&self, tps: &[TopicPartition]) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.with(|s| {
            for tp in tps {
                if let Some(p) = s.parts.get_mut(tp) {
                    p.assigned = false;
                }
            }
            s.control.push_back(SourceEvent::Lost(tps.to_vec(), tx));
        });
        rx
    }

    /// Tells the engine its ownership is in doubt ([`SourceEvent::OwnershipInDoubt`]), as a Kafka
    /// driver does when its group member could not heartbeat for a session timeout.
    pub fn ownership_in_doubt(&self) {
        self.with(|s| s.control.push_back(SourceEvent::OwnershipInDoubt));
    }

    /// Tells the engine its ownership is confirmed again ([`SourceEvent::OwnershipConfirmed`]).
    pub fn ownership_confirmed(&self) {
        self.with(|s| s.control.push_back(SourceEvent::OwnershipConfirmed));
    }

    /// Makes the source end (the engine then drains and returns) once every assigned,
    /// non-paused partition is fully delivered and no control event is pending.
    pub fn finish_when_drained(&self) {
        self.with(|s| s.finish_when_drained = true);
    }

    /// Makes the source end at its next event.
    pub fn close(&self) {
        self.with(|s| s.closed = true);
    }

    /// A fresh source on the same logs and commits, as a restarted process would get: pending
    /// events are dropped and every partition is unassigned until [`MemHandle::assign`].
    pub fn reopen(&self, batch: usize) -> MemSource {
        self.with(|s| {
            s.control.clear();
            s.closed = false;
            s.finish_when_drained = false;
            for p in s.parts.values_mut() {
                p.assigned = false;
                p.paused = false;
            }
        });
        MemSource {
            shared: self.shared.clone(),
            batch: batch.max(1),
            lease: None,
        }
    }

    /// Makes the next `n` commits fail.
    pub fn fail_commits(&self, n: u32) {
        self.with(|s| s.fail_commits = n);
    }

    /// Refuses commits whose metadata is longer than `limit` (as a broker with a smaller
    /// `offset.metadata.max.bytes` would), with [`SourceError::MetadataTooLarge`].
    pub fn limit_metadata(&self, limit: usize) {
        self.with(|s| s.metadata_limit = Some(limit));
    }

    /// Every successful commit, in order.
    pub fn commits(&self) -> Vec<(TopicPartition, CommitPoint)> {
        self.shared.lock().commits.clone()
    }

    /// The last committed point of a partition.
    pub fn committed(&self, tp: &TopicPartition) -> Option<CommitPoint> {
        self.shared.lock().committed.get(tp).cloned()
    }

    /// Whether a partition is paused now.
    pub fn is_paused(&self, tp: &TopicPartition) -> bool {
        self.shared.lock().parts.get(tp).is_some_and(|p| p.paused)
    }

    /// How many times the engine paused and resumed partitions.
    pub fn pause_resume_counts(&self) -> (u64, u64) {
        let s = self.shared.lock();
        (s.pauses, s.resumes)
    }
}

fn next_records(s: &mut State, batch: usize) -> Option<SourceEvent> {
    let n = s.parts.len();
    for i in 0..n {
        let idx = (s.cursor + i) % n;
        let Some((tp, part)) = s.parts.iter_mut().nth(idx) else {
            continue;
        };
        if part.assigned && !part.paused && part.remaining() {
            let records = part.take(batch);
            let ev = SourceEvent::Records {
                partition: tp.clone(),
                records,
                high_watermark: Some(part.high_watermark()),
            };
            s.cursor = idx + 1;
            return Some(ev);
        }
    }
    None
}

impl Source for MemSource {
    async fn next_event(&mut self) -> Result<Option<SourceEvent>, SourceError> {
        loop {
            // Created before looking, so a produce between the look and the wait wakes us.
            let notified = self.shared.notify.notified();
            {
                let mut s = self.shared.lock();
                if s.closed {
                    return Ok(None);
                }
                if let Some(ev) = s.control.pop_front() {
                    return Ok(Some(ev));
                }
                if let Some(ev) = next_records(&mut s, self.batch) {
                    return Ok(Some(ev));
                }
                if s.finish_when_drained && !s.parts.values().any(|p| p.assigned && p.remaining()) {
                    return Ok(None);
                }
            }
            notified.await;
        }
    }

    fn pause(&mut self, tp: &TopicPartition) {
        let mut s = self.shared.lock();
        if let Some(p) = s.parts.get_mut(tp) {
            p.paused = true;
        }
        s.pauses += 1;
    }

    fn resume(&mut self, tp: &TopicPartition) {
        let mut s = self.shared.lock();
        if let Some(p) = s.parts.get_mut(tp) {
            p.paused = false;
        }
        s.resumes += 1;
    }

    fn commit(
        &mut self,
        offsets: Vec<(TopicPartition, CommitPoint)>,
    ) -> impl std::future::Future<Output = Result<(), SourceError>> + Send + 'static {
        let shared = self.shared.clone();
        async move {
            let mut s = shared.lock();
            if s.fail_commits > 0 {
                s.fail_commits -= 1;
                return Err(SourceError::Commit("injected commit failure".into()));
            }
            if let Some(limit) = s.metadata_limit {
                if let Some((tp, cp)) = offsets.iter().find(|(_, cp)| cp.metadata.len() > limit) {
                    return Err(SourceError::MetadataTooLarge(format!(
                        "{tp}: {} > {limit} characters",
                        cp.metadata.len()
                    )));
                }
            }
            for (tp, cp) in offsets {
                s.committed.insert(tp.clone(), cp.clone());
                s.commits.push((tp, cp));
            }
            Ok(())
        }
    }

    fn lease(&self) -> Option<Arc<dyn crate::source::Lease>> {
        self.lease.clone()
    }
}

/// A dead-letter sink that keeps letters in memory and can be told to fail.
#[derive(Default)]
pub struct MemDeadLetters {
    letters: Mutex<Vec<DeadLetter>>,
    fail_next: AtomicU32,
    failures: AtomicU32,
}

impl MemDeadLetters {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next `n` sends fail.
    pub fn fail_next(&self, n: u32) {
        self.fail_next.store(n, Relaxed);
    }

    /// Failed sends so far.
    pub fn failures(&self) -> u32 {
        self.failures.load(Relaxed)
    }

    /// Letters acknowledged so far, in order.
    pub fn letters(&self) -> Vec<DeadLetter> {
        self.letters.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl DeadLetterSink for MemDeadLetters {
    async fn send(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        if self
            .fail_next
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            self.failures.fetch_add(1, Relaxed);
            return Err(DlqError("injected dead-letter failure".into()));
        }
        self.letters
            .lock()
            .map_err(|_| DlqError("poisoned".into()))?
            .push(letter.clone());
        Ok(())
    }
}

/// A reply written to [`MemReplies`]: the reply and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenReply {
    /// The partition of the record that produced it.
    pub partition: TopicPartition,
    /// The offset of the record that produced it.
    pub offset: i64,
    /// The session id of that record (`None` in the unordered lane).
    pub session: Option<bytes::Bytes>,
    /// The reply as the handler returned it.
    pub reply: Reply,
}

/// A reply sink that keeps replies in memory, in the order acknowledged, and can be told to fail.
#[derive(Debug, Default)]
pub struct MemReplies {
    written: Mutex<Vec<WrittenReply>>,
    fail_next: AtomicU32,
    failures: AtomicU32,
}

impl MemReplies {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next `n` writes fail (nothing of them written).
    pub fn fail_next(&self, n: u32) {
        self.fail_next.store(n, Relaxed);
    }

    /// Failed writes so far.
    pub fn failures(&self) -> u32 {
        self.failures.load(Relaxed)
    }

    /// Replies acknowledged so far, in order.
    pub fn written(&self) -> Vec<WrittenReply> {
        self.written.lock().map(|w| w.clone()).unwrap_or_default()
    }
}

impl ReplySink for MemReplies {
    fn send<'a>(
        &'a self,
        origin: &'a Record,
        session: Option<&'a [u8]>,
        replies: &'a [Reply],
    ) -> ReplyFuture<'a> {
        let result = if self
            .fail_next
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            self.failures.fetch_add(1, Relaxed);
            Err(ReplyError::Write {
                delivered: 0,
                reason: "injected reply failure".into(),
            })
        } else {
            match self.written.lock() {
                Ok(mut w) => {
                    w.extend(replies.iter().map(|r| WrittenReply {
                        partition: origin.partition.clone(),
                        offset: origin.offset,
                        session: session.map(bytes::Bytes::copy_from_slice),
                        reply: r.clone(),
                    }));
                    Ok(())
                }
                Err(_) => Err(ReplyError::Write {
                    delivered: 0,
                    reason: "poisoned".into(),
                }),
            }
        };
        Box::pin(std::future::ready(result))
    }
}
