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
//! - A failure this producer can recover from aborts the transaction and *rewinds*: a write or
//!   a commit the transaction cannot survive, a call the coordinator did not answer in time
//!   (an EndTxn is sent again first: its outcome is unknown until answered), the group's
//!   refusal of the member's generation (a rebalance during the transaction, or a member the
//!   group dropped, which rejoins), a member without a generation at commit time (its offsets
//!   would go unchecked), a partition lost while the transaction holds output of its records,
//!   or a fence the coordinator raised itself by aborting the transaction at its timeout,
//!   overcome with a new epoch. Every partition with output in it (or a write that failed in
//!   it) that is still owned is handed back to the rebalance bridge, which takes it from the
//!   engine as lost and assigns it again at the point last committed here, so exactly the
//!   records whose output was aborted are handled again, in order, in this process. Until then
//!   the partition's writes are refused and its offsets left out of commits. Offsets whose
//!   metadata the group coordinator refuses as too large are sent again, in the same
//!   transaction, with the metadata limit halved.
//! - A fence that cannot be lifted (another producer took the transactional id, another
//!   process the static member's instance id) or an unusable producer aborts the transaction
//!   and marks the mode failed: every later write and commit is refused, and
//!   [`Transactions::failed`] tells the consumer to stop at once. The next owner of the
//!   partitions starts from the committed offsets.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    TxnError, TxnOffset, TxnState,
};
use tokio::sync::{RwLock, Semaphore, mpsc, oneshot, watch};

use crate::output::Spawner;

mod commit;
mod done;
mod handback;
mod queue;
mod queued;
mod replies;
#[cfg(test)]
mod tests;

use done::Done;
use queued::{QUEUED_BYTES, Queues};
pub(crate) use replies::TxnReplies;

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
    /// The commit metadata's limit for the group coordinator: `metadata_limit`, halved each time
    /// the broker refuses it as too large.
    offsets_limit: AtomicUsize,
    group: OnceLock<GroupHandle>,
    /// Shared by the writes of one record and their queued records, exclusive for a commit.
    gate: Arc<RwLock<()>>,
    state: Mutex<State>,
    /// Records waiting for their output topic's next produce round, per topic.
    queues: Mutex<Queues>,
    /// Room for queued, unanswered output ([`QUEUED_BYTES`]).
    room: Arc<Semaphore>,
    /// Where the produce rounds run.
    output: Spawner,
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
    /// Per partition with output in the open transaction (from its first write on, acknowledged
    /// or not), the offsets of its records whose output the broker acknowledged (unordered,
    /// possibly repeated: a commit sorts and merges them).
    pending: HashMap<TopicPartition, Vec<i64>>,
    /// Per partition, the done set last committed here or read at assignment.
    base: HashMap<TopicPartition, Done>,
    /// Partitions lost since they were assigned.
    lost: HashSet<TopicPartition>,
    /// Partitions handed to the bridge to rewind, until it assigns them again.
    rewinding: HashSet<TopicPartition>,
    /// Partitions the engine handed back (revoked), until they are assigned again.
    handed_back: HashSet<TopicPartition>,
    /// Partitions with a write that failed in the open transaction.
    failed_writes: HashSet<TopicPartition>,
    /// Partitions whose base is a reset position, not a committed offset.
    uncommitted: HashSet<TopicPartition>,
    /// A rewind is scheduled and has not run yet.
    rewind_due: bool,
}

/// What a failure of the transaction leads to (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Abort (recovering the epoch first if fenced) and rewind the partitions with output in it.
    Rewind,
    /// Abort and stop the consumer.
    Stop,
}

/// How a failed call of the transactional producer is met. Rewound: an abortable error, a call
/// not answered in time, a producer fence (possibly the coordinator's own, at the transaction
/// timeout; [`Transactions`] tries to recover the epoch and stops if another producer holds the
/// id) and the group's refusal of the member's generation (a rebalance during the transaction,
/// or a member the group dropped: it rejoins, and the transaction's offsets never commit).
/// Stopped: a static member whose instance id another process took (FENCED_INSTANCE_ID: the
/// group member stops too), an unusable producer, a call out of order.
fn outcome(e: &TxnError) -> Outcome {
    use orderly_protocol::ErrorCode;
    match e {
        TxnError::Abortable { .. }
        | TxnError::ProducerFenced { .. }
        | TxnError::Retriable { .. }
        | TxnError::MetadataTooLarge { .. } => Outcome::Rewind,
        TxnError::GroupFenced { source, .. }
            if source.code() != Some(ErrorCode::FENCED_INSTANCE_ID) =>
        {
            Outcome::Rewind
        }
        _ => Outcome::Stop,
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
        // A call of the transaction that outlasts its timeout is pointless: the coordinator
        // aborts the transaction by then.
        let defaults = TransactionalConfig::default();
        let config = TransactionalConfig {
            operation_timeout: defaults.operation_timeout.min(settings.timeout),
            ..defaults
        };
        let producer = TransactionalProducer::new(pool, config);
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
                offsets_limit: AtomicUsize::new(settings.metadata_limit),
                group: OnceLock::new(),
                gate: Arc::new(RwLock::new(())),
                state: Mutex::new(State::default()),
                queues: Mutex::new(Queues::default()),
                room: Arc::new(Semaphore::new(QUEUED_BYTES)),
                output: Spawner::default(),
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

    /// Runs the produce rounds on `output` (the consumer's output thread) from now on.
    pub(crate) fn set_output(&self, output: tokio::runtime::Handle) {
        self.inner.output.set(output);
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
        st.handed_back.remove(&a.partition);
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
    /// owner handles those records again), so the transaction is aborted once the writes in
    /// flight ended, and the partitions with output in it that are still owned are rewound.
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
            self.schedule_rewind(
                "partitions lost while the open transaction holds output of theirs".into(),
            );
        }
    }

    /// Aborts and rewinds the open transaction on a task of its own, once the writes in flight
    /// ended (unless a rewind is already due). No commit ends the transaction meanwhile.
    fn schedule_rewind(&self, reason: String) {
        if std::mem::replace(&mut self.inner.lock().rewind_due, true) {
            return;
        }
        let txn = self.clone();
        tokio::spawn(async move {
            let _gate = txn.inner.gate.write().await;
            // A commit may have rewound meanwhile.
            if txn.inner.lock().rewind_due {
                txn.rewind(reason).await;
            }
        });
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

    /// `fail` plus clearing the open transaction's bookkeeping (the gate is held).
    fn fail_locked(&self, reason: String) {
        self.fail(reason);
        let mut st = self.inner.lock();
        st.open = false;
        st.pending.clear();
        st.failed_writes.clear();
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
