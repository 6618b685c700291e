//! `Transactions`: the exactly-once mode. Replies, dead letters and the group's offsets commit in
//! one Kafka transaction per engine commit.
//!
//! One [`TransactionalProducer`] per consumer instance writes every reply and dead letter and,
//! at each [`Source::commit`](orderly_engine::Source::commit) of the engine, adds the group's
//! offsets (watermark + completed-offset metadata) with the member's generation and member id
//! (KIP-447: the group coordinator refuses them from a member it has moved past) and commits.
//!
//! - A write holds a shared gate for every reply of one record, so a record's output is in one
//!   transaction. Its records queue per output partition. One produce round per output topic is
//!   in flight at a time: a batch from every partition with records waiting, all in one Produce
//!   request per leader, and the next round carries what queued meanwhile, from all sessions, so
//!   a partition's records keep their order. A queued record holds the gate too, until its
//!   request was answered: a write dropped meanwhile (a revoke, a shutdown deadline) cannot let
//!   a commit slip between its records and their acknowledgement. Once the broker acknowledged
//!   a record, its origin's offset joins the transaction's *pending* set. A reply write answers
//!   the engine once its records are queued (the record counts as done in memory and its session
//!   goes on): the commit waits for every queued record and rewinds instead if one failed.
//!   Queued, unanswered output is bounded (16 MiB); a write waits for room before it
//!   takes the gate. A dead letter's write answers once the broker acknowledged it.
//! - A commit holds the gate exclusively: writes in flight finish first, later ones wait for the
//!   next transaction. It commits, per partition, the union of the engine's commit point, the
//!   last point committed here (or the assignment's) and the pending offsets. The engine built
//!   its point from records whose writes had ended before the commit started, so every record
//!   the commit counts as done has its output in this transaction or an earlier committed one,
//!   and every record with output in this transaction is counted.
//! - A failure this producer can recover from (a write or a commit the transaction cannot
//!   survive, offsets refused under a generation a rebalance just replaced, or a fence the
//!   coordinator raised itself by aborting the transaction at its timeout, overcome with a new
//!   epoch) aborts the transaction and *rewinds*: every partition
//!   with output in it (or a write that failed in it) is handed back to the rebalance bridge,
//!   which takes it from the engine as lost and assigns it again at the point last committed
//!   here, so exactly the records whose output was aborted are handled again, in order, in
//!   this process. Until then the partition's writes are refused and its offsets left out of
//!   commits.
//! - A zombie's failure (the group refused the offsets of a member it no longer has, a partition
//!   was lost with output in the open transaction, another producer took the transactional id)
//!   or an unusable producer
//!   aborts it and marks the mode failed: every later write and commit is refused, and
//!   [`Transactions::failed`] tells the consumer to stop at once. The next owner of the
//!   partitions starts from the committed offsets.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use orderly_engine::{
    Assignment, CommitPoint, DeadLetter, Record, Reply, ReplyError, ReplyFuture, ReplySink,
    SourceError, TopicPartition, metadata,
};
use orderly_group::GroupHandle;
use orderly_protocol::partitioner::partition_for_key;
use orderly_protocol::{
    ConnectionPool, GroupMetadata, ProduceRecord, TransactionalConfig, TransactionalProducer,
    TxnError, TxnOffset, TxnState, WireHeader,
};
use tokio::sync::{
    OwnedRwLockReadGuard, OwnedSemaphorePermit, RwLock, Semaphore, mpsc, oneshot, watch,
};

use crate::replies::{record_bytes, take_batch};

/// The exactly-once mode's shared state: the transactional producer, the open transaction's
/// pending offsets and the points last committed. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Transactions {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    producer: TransactionalProducer,
    transactional_id: String,
    timeout: Duration,
    group_id: String,
    instance_id: Option<String>,
    metadata_limit: usize,
    group: OnceLock<GroupHandle>,
    /// Shared by the writes of one record and their queued records, exclusive for a commit.
    gate: Arc<RwLock<()>>,
    state: Mutex<State>,
    /// Records waiting for their output topic's next produce round, per topic.
    queues: Mutex<HashMap<String, Queue>>,
    /// Room for queued, unanswered output ([`QUEUED_BYTES`]).
    room: Arc<Semaphore>,
    failed: watch::Sender<Option<String>>,
    /// Partitions to rewind, with the points they start again from, to the rebalance bridge.
    rewind_tx: mpsc::UnboundedSender<Vec<Assignment>>,
    rewind_rx: Mutex<Option<mpsc::UnboundedReceiver<Vec<Assignment>>>>,
    /// Transactions aborted and rewound.
    rewinds: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// A transaction was begun and not yet ended.
    open: bool,
    /// Offsets of records whose output is in the open transaction.
    pending: HashMap<TopicPartition, BTreeSet<i64>>,
    /// Per partition, the done set last committed here or read at assignment.
    base: HashMap<TopicPartition, Done>,
    /// Partitions lost since they were assigned.
    lost: HashSet<TopicPartition>,
    /// Partitions handed to the bridge to rewind, until it assigns them again.
    rewinding: HashSet<TopicPartition>,
    /// Partitions with a write that failed in the open transaction.
    failed_writes: HashSet<TopicPartition>,
    /// Partitions whose base is a reset position, not a committed offset.
    uncommitted: HashSet<TopicPartition>,
    /// A rewind is scheduled and has not run yet.
    rewind_due: bool,
}

/// The records waiting for one output topic, per partition, and whether a task is sending them.
#[derive(Debug, Default)]
struct Queue {
    waiting: HashMap<i32, VecDeque<Queued>>,
    sending: bool,
}

/// A record of a write, queued for its output partition.
#[derive(Debug)]
struct Queued {
    record: ProduceRecord,
    /// The partition and offset of the record whose output this is.
    origin: (TopicPartition, i64),
    /// Told the outcome.
    ack: oneshot::Sender<Result<(), String>>,
    /// Held until the request was answered.
    share: Share,
}

/// What a queued record holds until its request was answered: its write's share of the gate
/// (no commit until then) and of the queues' room.
#[derive(Debug)]
struct Share {
    _gate: Arc<OwnedRwLockReadGuard<()>>,
    _room: Arc<OwnedSemaphorePermit>,
}

/// When a write returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ack {
    /// Once its records are queued in the open transaction: the transaction cannot commit
    /// without them, and rewinds if one fails.
    Queued,
    /// Once the broker acknowledged every record.
    Written,
}

/// Bytes of output queued and unanswered at most (as [`record_bytes`] counts them); a write
/// waits for room beyond that.
const QUEUED_BYTES: usize = 16 * 1024 * 1024;

/// The permits of the queues' room a write of `bytes` takes (a larger write takes all of it).
fn room_permits(bytes: usize) -> u32 {
    u32::try_from(bytes.min(QUEUED_BYTES)).unwrap_or(u32::MAX)
}

/// A queued record once taken for a request: its origin, who learns the outcome, its share.
type Waiter = (
    (TopicPartition, i64),
    oneshot::Sender<Result<(), String>>,
    Share,
);

/// What a failure of the transaction leads to (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Abort (recovering the epoch first if fenced) and rewind the partitions with output in it.
    Rewind,
    /// Abort and stop the consumer.
    Stop,
}

/// How a failed call of the transactional producer is met: an abortable error, a producer
/// fence (possibly the coordinator's own, at the transaction timeout; [`Transactions`] tries to
/// recover the epoch and stops if another producer holds the id) and the group's refusal of a
/// generation it has just moved past while the member is still in it (a rebalance during the
/// transaction: ILLEGAL_GENERATION, STALE_MEMBER_EPOCH; no other member gets the partitions
/// before this one released them) rewind; a refusal that says the member is no longer in the
/// group (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, FENCED_MEMBER_EPOCH: a zombie) and anything
/// else stop.
fn outcome(e: &TxnError) -> Outcome {
    use orderly_protocol::ErrorCode;
    match e {
        TxnError::Abortable { .. } | TxnError::ProducerFenced { .. } => Outcome::Rewind,
        TxnError::GroupFenced { source, .. }
            if matches!(
                source.code(),
                Some(ErrorCode::ILLEGAL_GENERATION | ErrorCode::STALE_MEMBER_EPOCH)
            ) =>
        {
            Outcome::Rewind
        }
        _ => Outcome::Stop,
    }
}

/// A done set: every offset below `offset`, and the `runs` above it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Done {
    offset: i64,
    runs: Vec<Range<i64>>,
}

impl Done {
    fn from_point(offset: i64, text: &str) -> Self {
        let runs = metadata::decode(offset, text).unwrap_or_default();
        Done { offset, runs }.normalized()
    }

    fn union(&self, other: &Done) -> Done {
        let mut runs = self.runs.clone();
        runs.extend(other.runs.iter().cloned());
        Done {
            offset: self.offset.max(other.offset),
            runs,
        }
        .normalized()
    }

    fn with_offsets(&self, offsets: impl IntoIterator<Item = i64>) -> Done {
        let mut runs = self.runs.clone();
        runs.extend(offsets.into_iter().map(|o| o..o.saturating_add(1)));
        Done {
            offset: self.offset,
            runs,
        }
        .normalized()
    }

    /// Sorts and merges the runs and moves the watermark over those that touch it.
    fn normalized(mut self) -> Done {
        self.runs.retain(|r| r.start < r.end);
        self.runs.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<i64>> = Vec::with_capacity(self.runs.len());
        for r in self.runs {
            if r.end <= self.offset {
                continue;
            }
            if r.start <= self.offset {
                self.offset = r.end;
                continue;
            }
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        // A watermark moved by a later run may now reach earlier merged runs.
        let mut out = Vec::with_capacity(merged.len());
        for r in merged {
            if r.start <= self.offset {
                self.offset = self.offset.max(r.end);
            } else {
                out.push(r);
            }
        }
        self.runs = out;
        self
    }
}

/// What [`Transactions::new`] needs.
#[derive(Debug, Clone)]
pub(crate) struct TxnSettings {
    pub transactional_id: String,
    pub timeout: Duration,
    pub group_id: String,
    pub instance_id: Option<String>,
    pub metadata_limit: usize,
}

impl Transactions {
    pub(crate) fn new(pool: Arc<ConnectionPool>, settings: TxnSettings) -> Self {
        let producer = TransactionalProducer::new(pool, TransactionalConfig::default());
        let (failed, _) = watch::channel(None);
        let (rewind_tx, rewind_rx) = mpsc::unbounded_channel();
        Transactions {
            inner: Arc::new(Inner {
                producer,
                transactional_id: settings.transactional_id,
                timeout: settings.timeout,
                group_id: settings.group_id,
                instance_id: settings.instance_id,
                metadata_limit: settings.metadata_limit,
                group: OnceLock::new(),
                gate: Arc::new(RwLock::new(())),
                state: Mutex::new(State::default()),
                queues: Mutex::new(HashMap::new()),
                room: Arc::new(Semaphore::new(QUEUED_BYTES)),
                failed,
                rewind_tx,
                rewind_rx: Mutex::new(Some(rewind_rx)),
                rewinds: AtomicU64::new(0),
            }),
        }
    }

    /// The transactional id.
    pub fn transactional_id(&self) -> &str {
        &self.inner.transactional_id
    }

    /// Registers the producer's transactional id (InitProducerId), which aborts whatever a
    /// previous producer with this id left open and fences it.
    pub(crate) async fn init(&self) -> Result<(), TxnError> {
        self.inner
            .producer
            .init(&self.inner.transactional_id, self.inner.timeout)
            .await
    }

    /// Readies the producer for output to `topic` before the first write (its metadata and
    /// leader connections).
    pub(crate) async fn prepare(&self, topic: &str) {
        let _ = self.inner.producer.prepare(topic).await;
    }

    /// The group member whose generation the offsets are committed under.
    pub(crate) fn set_group(&self, group: GroupHandle) {
        let _ = self.inner.group.set(group);
    }

    /// `Some(reason)` once the transactions failed: the consumer must stop.
    pub fn failed(&self) -> watch::Receiver<Option<String>> {
        self.inner.failed.subscribe()
    }

    /// How many transactions were aborted and their partitions rewound in this process.
    pub fn rewinds(&self) -> u64 {
        self.inner.rewinds.load(Ordering::Relaxed)
    }

    /// The partitions to rewind, for the rebalance bridge (once).
    pub(crate) fn take_rewinds(&self) -> Option<mpsc::UnboundedReceiver<Vec<Assignment>>> {
        self.inner
            .rewind_rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// The reason the transactions failed, if they did.
    pub fn failure(&self) -> Option<String> {
        self.inner.failed.borrow().clone()
    }

    /// Notes where an assigned partition starts, the base of its commits.
    pub(crate) fn assigned(&self, a: &Assignment) {
        let mut st = self.inner.lock();
        st.lost.remove(&a.partition);
        st.rewinding.remove(&a.partition);
        if a.committed {
            st.uncommitted.remove(&a.partition);
        } else {
            st.uncommitted.insert(a.partition.clone());
        }
        st.base.insert(
            a.partition.clone(),
            Done::from_point(a.next_offset, &a.metadata),
        );
    }

    /// Notes lost partitions. Output of theirs in the open transaction must not commit (the next
    /// owner handles those records again), so the transaction fails.
    pub(crate) fn lost(&self, partitions: &[TopicPartition]) {
        let pending = {
            let mut st = self.inner.lock();
            for tp in partitions {
                st.lost.insert(tp.clone());
                st.base.remove(tp);
                st.rewinding.remove(tp);
            }
            partitions.iter().any(|tp| st.pending.contains_key(tp))
        };
        if pending {
            self.fail("partitions lost while the open transaction holds output of theirs".into());
        }
    }

    fn fail(&self, reason: String) {
        self.inner.failed.send_if_modified(|f| {
            if f.is_none() {
                tracing::error!(transactional_id = %self.inner.transactional_id, %reason,
                    "transaction failed: stopping; the records of the aborted transaction are handled again by the next owner");
                metrics::counter!("orderly_transactions_failed_total").increment(1);
                *f = Some(reason);
                true
            } else {
                false
            }
        });
    }

    fn refused(&self) -> Option<String> {
        self.failure()
            .map(|r| format!("transactions stopped after a failure: {r}"))
    }

    /// Aborts the open transaction, if any (after a failure, or a shutdown whose final commit
    /// did not complete). Errors are logged: the broker aborts it at its timeout anyway.
    pub(crate) async fn abort_open(&self) {
        let _gate = self.inner.gate.write().await;
        let state = self.inner.producer.state();
        if matches!(
            state,
            TxnState::InTransaction | TxnState::AbortableError | TxnState::Aborting
        ) {
            if let Err(e) = self.inner.producer.abort().await {
                tracing::warn!(error = %e, "aborting the open transaction failed");
            }
        }
        let mut st = self.inner.lock();
        st.open = false;
        st.pending.clear();
        st.failed_writes.clear();
    }

    /// Opens a transaction if none is open.
    fn ensure_open(&self) -> Result<(), TxnError> {
        let mut st = self.inner.lock();
        if !st.open {
            self.inner.producer.begin()?;
            st.open = true;
        }
        Ok(())
    }

    /// Writes `records` (each with its topic and partition) in the open transaction as the
    /// output of the record at `origin`: queues them for their partitions' next produce requests
    /// and waits until the broker acknowledged every one. All or nothing for the transaction: a
    /// failure after the first write rewinds it or fails the transactions, also when nobody
    /// waits for it any more.
    async fn write(
        &self,
        origin: (&TopicPartition, i64),
        records: Vec<(String, i32, ProduceRecord)>,
        ack: Ack,
    ) -> Result<(), String> {
        // Room in the queues first (never while holding the gate: a commit waiting for the gate
        // must not wait for room that only its own end would make).
        let bytes: usize = records.iter().map(|(_, _, r)| record_bytes(r)).sum();
        let room = Arc::clone(&self.inner.room)
            .acquire_many_owned(room_permits(bytes))
            .await
            .map_err(|_| "the transaction's queues are closed".to_owned())?;
        let room = Arc::new(room);
        let gate = Arc::new(Arc::clone(&self.inner.gate).read_owned().await);
        if let Some(r) = self.refused() {
            return Err(r);
        }
        {
            let st = self.inner.lock();
            if st.lost.contains(origin.0) {
                return Err(format!(
                    "{}/{} is lost: its records are not ours to answer",
                    origin.0.topic, origin.0.partition
                ));
            }
            if st.rewinding.contains(origin.0) {
                return Err(format!(
                    "{}/{} is being rewound after an aborted transaction",
                    origin.0.topic, origin.0.partition
                ));
            }
        }
        if let Err(e) = self.ensure_open() {
            return Err(self.write_failed(origin.0, format!("beginning a transaction: {e}"), &e));
        }
        if records.is_empty() {
            self.inner
                .lock()
                .pending
                .entry(origin.0.clone())
                .or_default()
                .insert(origin.1);
            return Ok(());
        }
        let acks: Vec<_> = records
            .into_iter()
            .map(|(topic, partition, record)| {
                let origin = (origin.0.clone(), origin.1);
                let share = Share {
                    _gate: Arc::clone(&gate),
                    _room: Arc::clone(&room),
                };
                self.enqueue(topic, partition, record, origin, share)
            })
            .collect();
        drop(gate);
        if ack == Ack::Queued {
            return Ok(());
        }
        for ack in acks {
            ack.await
                .unwrap_or_else(|_| Err("the transaction's sending task ended".to_owned()))?;
        }
        Ok(())
    }

    /// Queues `record` for `topic`/`partition` and starts the partition's sending task if none
    /// runs. The receiver learns the outcome.
    fn enqueue(
        &self,
        topic: String,
        partition: i32,
        record: ProduceRecord,
        origin: (TopicPartition, i64),
        share: Share,
    ) -> oneshot::Receiver<Result<(), String>> {
        let (ack, rx) = oneshot::channel();
        let queued = Queued {
            record,
            origin,
            ack,
            share,
        };
        let start = {
            let mut queues = self
                .inner
                .queues
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let q = match queues.get_mut(topic.as_str()) {
                Some(q) => q,
                None => queues.entry(topic.clone()).or_default(),
            };
            q.waiting.entry(partition).or_default().push_back(queued);
            !std::mem::replace(&mut q.sending, true)
        };
        if start {
            let txn = self.clone();
            tokio::spawn(async move { txn.send_queued(topic).await });
        }
        rx
    }

    /// Sends the topic's queued records until its queue is empty: each round takes a batch from
    /// every partition with records waiting and sends them together (one Produce request per
    /// leader, [`TransactionalProducer::send_batches`]); the next round takes what queued
    /// meanwhile. A batch's origins join the pending set before their writes learn of the
    /// acknowledgement; a failed batch rewinds the transaction or fails the mode.
    async fn send_queued(&self, topic: String) {
        loop {
            let round: Vec<(i32, Vec<Queued>)> = {
                let mut queues = self
                    .inner
                    .queues
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let Some(q) = queues.get_mut(topic.as_str()) else {
                    return;
                };
                q.waiting.retain(|_, w| !w.is_empty());
                if q.waiting.is_empty() {
                    queues.remove(topic.as_str());
                    return;
                }
                q.waiting
                    .iter_mut()
                    .map(|(p, w)| (*p, take_batch(w, |q| &q.record)))
                    .collect()
            };
            let mut records: Vec<Vec<ProduceRecord>> = Vec::with_capacity(round.len());
            let mut waiters: Vec<Vec<Waiter>> = Vec::with_capacity(round.len());
            let partitions: Vec<i32> = round.iter().map(|(p, _)| *p).collect();
            for (_, batch) in round {
                let (r, w): (Vec<ProduceRecord>, Vec<Waiter>) = batch
                    .into_iter()
                    .map(|q| (q.record, (q.origin, q.ack, q.share)))
                    .unzip();
                records.push(r);
                waiters.push(w);
            }
            let batches: Vec<(i32, &[ProduceRecord])> = partitions
                .iter()
                .zip(&records)
                .map(|(p, r)| (*p, r.as_slice()))
                .collect();
            let started = std::time::Instant::now();
            let answers = self.inner.producer.send_batches(&topic, &batches).await;
            tracing::debug!(%topic, partitions = batches.len(),
                records = records.iter().map(Vec::len).sum::<usize>(),
                took_us = started.elapsed().as_micros() as u64, "produce round");
            let answers: Vec<Result<(), TxnError>> = match answers {
                Ok(per) => per.into_iter().map(|r| r.map(|_| ())).collect(),
                Err(e) => {
                    let reason = format!("writing to {topic} in a transaction: {e}");
                    let origins: HashSet<&TopicPartition> =
                        waiters.iter().flatten().map(|((tp, _), _, _)| tp).collect();
                    for tp in origins {
                        self.write_failed(tp, reason.clone(), &e);
                    }
                    for (_, ack, _share) in waiters.into_iter().flatten() {
                        let _ = ack.send(Err(reason.clone()));
                    }
                    continue;
                }
            };
            for ((partition, answer), waiters) in partitions.iter().zip(answers).zip(waiters) {
                match answer {
                    Ok(()) => {
                        {
                            let mut st = self.inner.lock();
                            for ((tp, offset), _, _) in &waiters {
                                st.pending.entry(tp.clone()).or_default().insert(*offset);
                            }
                        }
                        for (_, ack, _share) in waiters {
                            let _ = ack.send(Ok(()));
                        }
                    }
                    Err(e) => {
                        let reason =
                            format!("writing to {topic}/{partition} in a transaction: {e}");
                        let origins: HashSet<&TopicPartition> =
                            waiters.iter().map(|((tp, _), _, _)| tp).collect();
                        for tp in origins {
                            self.write_failed(tp, reason.clone(), &e);
                        }
                        for (_, ack, _share) in waiters {
                            let _ = ack.send(Err(reason.clone()));
                        }
                    }
                }
            }
        }
    }

    /// A write of `origin`'s output failed with `e`: the transaction is rewound (the rewind runs
    /// on its own task once the writes in flight ended) or the mode fails. Returns `reason`.
    fn write_failed(&self, origin: &TopicPartition, reason: String, e: &TxnError) -> String {
        if outcome(e) == Outcome::Stop {
            self.fail(reason.clone());
            return reason;
        }
        let spawn = {
            let mut st = self.inner.lock();
            st.failed_writes.insert(origin.clone());
            !std::mem::replace(&mut st.rewind_due, true)
        };
        if spawn {
            let txn = self.clone();
            let why = reason.clone();
            tokio::spawn(async move {
                let _gate = txn.inner.gate.write().await;
                // A commit may have rewound meanwhile.
                if txn.inner.lock().rewind_due {
                    txn.rewind(why).await;
                }
            });
        }
        reason
    }

    /// Aborts the open transaction after a failure it cannot survive, recovering the producer's
    /// epoch if it was fenced, and hands every partition with output in it (or a failed write)
    /// to the bridge to rewind to its last committed point. Fails the mode if the producer
    /// cannot go on. The caller holds the gate exclusively.
    async fn rewind(&self, reason: String) {
        self.inner.lock().rewind_due = false;
        if self.failure().is_some() {
            return;
        }
        let producer = &self.inner.producer;
        let mut fenced = producer.state() == TxnState::Fenced;
        if matches!(
            producer.state(),
            TxnState::InTransaction | TxnState::AbortableError | TxnState::Aborting
        ) {
            match producer.abort().await {
                Ok(()) => {}
                Err(e) if e.is_fenced() => fenced = true,
                Err(e) => {
                    self.fail_locked(format!("{reason}; aborting the transaction: {e}"));
                    return;
                }
            }
        }
        if fenced {
            if let Err(e) = producer.recover_epoch().await {
                self.fail_locked(format!(
                    "{reason}; another producer holds transactional id {}: {e}",
                    self.inner.transactional_id
                ));
                return;
            }
        }
        if producer.state() != TxnState::Ready {
            self.fail_locked(format!(
                "{reason}; the producer is {:?} after the abort",
                producer.state()
            ));
            return;
        }
        let list = {
            let mut st = self.inner.lock();
            st.open = false;
            let mut affected: HashSet<TopicPartition> =
                st.pending.drain().map(|(tp, _)| tp).collect();
            affected.extend(st.failed_writes.drain());
            let mut list = Vec::new();
            for tp in affected {
                if st.lost.contains(&tp) {
                    continue;
                }
                let Some(base) = st.base.get(&tp) else {
                    continue;
                };
                let enc = metadata::encode(
                    base.offset,
                    base.runs.iter().cloned(),
                    self.inner.metadata_limit,
                );
                list.push(Assignment {
                    partition: tp.clone(),
                    next_offset: base.offset,
                    metadata: enc.text,
                    committed: !st.uncommitted.contains(&tp),
                });
                st.rewinding.insert(tp);
            }
            list
        };
        self.inner.rewinds.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("orderly_transactions_rewound_total").increment(1);
        tracing::warn!(transactional_id = %self.inner.transactional_id, %reason, partitions = list.len(),
            "transaction aborted: its partitions are rewound to their committed offsets and their records handled again");
        if !list.is_empty() && self.inner.rewind_tx.send(list).is_err() {
            self.fail("the consumer is stopping: an aborted transaction's records are left to the next owner".into());
        }
    }

    /// `fail` plus clearing the open transaction's bookkeeping (the gate is held).
    fn fail_locked(&self, reason: String) {
        self.fail(reason);
        let mut st = self.inner.lock();
        st.open = false;
        st.pending.clear();
        st.failed_writes.clear();
    }

    async fn partition_of(&self, topic: &str, key: Option<&[u8]>) -> Result<i32, String> {
        let n = self
            .inner
            .producer
            .partitions(topic)
            .await
            .map_err(|e| format!("output topic {topic}: {e}"))?;
        Ok(match key {
            Some(k) => partition_for_key(k, n),
            None => 0,
        })
    }

    /// Writes a dead letter (already built as a record for `topic`, partitioned by `session`
    /// or its key) in the open transaction.
    pub(crate) async fn write_dead_letter(
        &self,
        letter: &DeadLetter,
        topic: &str,
        session: Option<&[u8]>,
        record: ProduceRecord,
    ) -> Result<(i32, i64), String> {
        let key = session.or(record.key.as_deref()).map(<[u8]>::to_vec);
        let partition = self.partition_of(topic, key.as_deref()).await?;
        self.write(
            (&letter.record.partition, letter.record.offset),
            vec![(topic.to_owned(), partition, record)],
            Ack::Written,
        )
        .await?;
        Ok((partition, -1))
    }

    /// Commits the open transaction with the group's offsets: the engine's `offsets`, extended
    /// by the records whose output the transaction holds (see the module doc).
    pub(crate) async fn commit(
        &self,
        offsets: Vec<(TopicPartition, CommitPoint)>,
    ) -> Result<(), SourceError> {
        let started = std::time::Instant::now();
        let _gate = self.inner.gate.write().await;
        tracing::debug!(
            waited_us = started.elapsed().as_micros() as u64,
            "commit: the gate"
        );
        if let Some(r) = self.refused() {
            return Err(SourceError::Commit(r));
        }
        let (list, finals) = match self.offsets_to_commit(offsets) {
            Ok(x) => x,
            Err(reason) => return Err(self.fail_and_abort(reason).await),
        };
        if self.inner.lock().rewind_due {
            // A write failed since the last commit: this transaction cannot commit.
            let reason = "a write failed in this transaction".to_owned();
            self.rewind(reason.clone()).await;
            return Err(SourceError::Commit(reason));
        }
        if list.is_empty() && !self.inner.lock().open {
            return Ok(());
        }
        if let Err(e) = self.ensure_open() {
            let reason = format!("beginning a transaction: {e}");
            return Err(match outcome(&e) {
                Outcome::Rewind => {
                    self.rewind(reason.clone()).await;
                    SourceError::Commit(reason)
                }
                Outcome::Stop => self.fail_and_abort(reason).await,
            });
        }
        let group = match self.inner.group.get() {
            Some(g) => g.generation(),
            None => {
                return Err(self
                    .fail_and_abort("no group member to commit under".into())
                    .await);
            }
        };
        let meta = GroupMetadata {
            group_id: self.inner.group_id.clone(),
            generation_id: group.generation_id,
            member_id: group.member_id,
            group_instance_id: self.inner.instance_id.clone(),
        };
        let result = async {
            if !list.is_empty() {
                self.inner.producer.send_offsets(&meta, &list).await?;
            }
            self.inner.producer.commit().await
        }
        .await;
        tracing::debug!(
            took_us = started.elapsed().as_micros() as u64,
            partitions = list.len(),
            "commit: transaction ended"
        );
        match result {
            Ok(()) => {
                let mut st = self.inner.lock();
                st.open = false;
                st.pending.clear();
                for (tp, d) in finals {
                    st.base.insert(tp, d);
                }
                metrics::counter!("orderly_transactions_committed_total").increment(1);
                Ok(())
            }
            Err(e) => {
                let reason = format!("committing the transaction: {e}");
                Err(match outcome(&e) {
                    Outcome::Rewind => {
                        self.rewind(reason.clone()).await;
                        SourceError::Commit(reason)
                    }
                    Outcome::Stop => self.fail_and_abort(reason).await,
                })
            }
        }
    }

    /// The offsets the open transaction commits (see the module doc), and the done sets they
    /// stand for; an error if the transaction must not commit.
    #[allow(clippy::type_complexity)]
    fn offsets_to_commit(
        &self,
        offsets: Vec<(TopicPartition, CommitPoint)>,
    ) -> Result<(Vec<TxnOffset>, HashMap<TopicPartition, Done>), String> {
        let st = self.inner.lock();
        if let Some(tp) = st.pending.keys().find(|tp| st.lost.contains(*tp)) {
            return Err(format!(
                "{}/{} was lost while the open transaction holds output of its records",
                tp.topic, tp.partition
            ));
        }
        let mut points: HashMap<TopicPartition, Done> = HashMap::new();
        for (tp, cp) in offsets {
            // The engine's point for a partition being rewound counts records whose output was
            // aborted.
            if st.lost.contains(&tp) || st.rewinding.contains(&tp) {
                continue;
            }
            let d = Done::from_point(cp.offset, &cp.metadata);
            let d = match st.base.get(&tp) {
                Some(b) => d.union(b),
                None => d,
            };
            points.insert(tp, d);
        }
        for (tp, pending) in &st.pending {
            let Some(d) = points.get(tp).or_else(|| st.base.get(tp)) else {
                return Err(format!(
                    "no committed point known for {}/{}, which has output in the transaction",
                    tp.topic, tp.partition
                ));
            };
            let d = d.with_offsets(pending.iter().copied());
            points.insert(tp.clone(), d);
        }
        let mut list = Vec::with_capacity(points.len());
        for (tp, d) in &points {
            let enc = metadata::encode(d.offset, d.runs.iter().cloned(), self.inner.metadata_limit);
            if enc.truncated {
                tracing::warn!(topic = %tp.topic, partition = tp.partition, offset = d.offset,
                    runs = d.runs.len(), kept = enc.runs_encoded,
                    "completed offsets above the watermark exceed the metadata limit: those left out are handled again after a restart");
            }
            list.push(TxnOffset {
                topic: tp.topic.to_string(),
                partition: tp.partition,
                offset: d.offset,
                leader_epoch: -1,
                metadata: (!enc.text.is_empty()).then_some(enc.text),
            });
        }
        Ok((list, points))
    }

    /// Marks the transactions failed, aborts the open transaction (the gate is held by the
    /// caller) and returns the commit error for the engine.
    async fn fail_and_abort(&self, reason: String) -> SourceError {
        self.fail(reason.clone());
        if matches!(
            self.inner.producer.state(),
            TxnState::InTransaction | TxnState::AbortableError | TxnState::Aborting
        ) {
            if let Err(e) = self.inner.producer.abort().await {
                tracing::warn!(error = %e, "aborting the failed transaction failed");
            }
        }
        let mut st = self.inner.lock();
        st.open = false;
        st.pending.clear();
        st.failed_writes.clear();
        SourceError::Commit(reason)
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The engine's [`ReplySink`] in exactly-once mode: replies in the open transaction, keyed and
/// routed as [`crate::KafkaReplies`] routes them (own topic or the default one, own key or the
/// session id, murmur2), answered once queued in the open transaction; they become visible to
/// read_committed readers when the transaction holding them commits.
#[derive(Debug, Clone)]
pub(crate) struct TxnReplies {
    txn: Transactions,
    default_topic: Option<String>,
}

impl TxnReplies {
    pub(crate) fn new(txn: Transactions, default_topic: Option<String>) -> Self {
        TxnReplies { txn, default_topic }
    }

    async fn write(
        &self,
        origin: &Record,
        session: Option<&[u8]>,
        replies: &[Reply],
    ) -> Result<(), ReplyError> {
        let mut records = Vec::with_capacity(replies.len());
        for reply in replies {
            let topic = match reply.topic.as_deref().or(self.default_topic.as_deref()) {
                Some(t) if !t.is_empty() => t.to_owned(),
                _ => {
                    return Err(ReplyError::Invalid(
                        "the reply names no topic and no default reply topic is set".into(),
                    ));
                }
            };
            let key = reply
                .key
                .clone()
                .or_else(|| session.map(bytes::Bytes::copy_from_slice));
            // Nothing is written before every partition is known, so a failed lookup leaves
            // the transaction untouched and the engine simply writes again.
            let partition = self
                .txn
                .partition_of(&topic, key.as_deref())
                .await
                .map_err(|reason| ReplyError::Write {
                    delivered: 0,
                    reason,
                })?;
            records.push((
                topic,
                partition,
                ProduceRecord {
                    key,
                    value: reply.value.clone(),
                    headers: reply
                        .headers
                        .iter()
                        .map(|h| WireHeader {
                            key: h.key.clone(),
                            value: h.value.clone(),
                        })
                        .collect(),
                    timestamp: None,
                },
            ));
        }
        self.txn
            .write((&origin.partition, origin.offset), records, Ack::Queued)
            .await
            .map_err(|reason| ReplyError::Write {
                delivered: 0,
                reason,
            })
    }
}

impl ReplySink for TxnReplies {
    fn send<'a>(
        &'a self,
        origin: &'a Record,
        session: Option<&'a [u8]>,
        replies: &'a [Reply],
    ) -> ReplyFuture<'a> {
        Box::pin(self.write(origin, session, replies))
    }
}

/// The default transactional id: `<group>.<instance id>` for a static member, else
/// `<group>.<random>`.
pub(crate) fn default_transactional_id(group: &str, instance_id: Option<&str>) -> String {
    match instance_id {
        Some(i) => format!("{group}.{i}"),
        None => {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            format!("{group}.{:016x}", h.finish())
        }
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::Done;

    #[test]
    fn union_moves_the_watermark_over_touching_runs() {
        let a = Done {
            offset: 10,
            runs: vec![12..14, 20..21],
        };
        let d = a.with_offsets([10, 11, 14, 30]);
        assert_eq!(
            d,
            Done {
                offset: 15,
                runs: vec![20..21, 30..31]
            }
        );
        let b = Done {
            offset: 21,
            runs: vec![25..26],
        };
        assert_eq!(
            d.union(&b),
            Done {
                offset: 21,
                runs: vec![25..26, 30..31]
            }
        );
    }

    #[test]
    fn a_point_round_trips_through_the_metadata() {
        let d = Done {
            offset: 5,
            runs: vec![7..9, 11..12],
        };
        let enc = orderly_engine::metadata::encode(d.offset, d.runs.iter().cloned(), 4096);
        assert_eq!(Done::from_point(5, &enc.text), d);
    }
}
