//! A transactional producer: records to many partitions and a consumer group's offsets, committed
//! or aborted as one (Kafka transactions), with zombies fenced by transactional id and by group
//! generation (KIP-447).
//!
//! # Use
//! ```text
//! init(transactional_id, timeout)            once, and again after ProducerFenced
//! loop {
//!     begin()
//!     send(..) / send_batch(..)               any number, from any number of tasks
//!     send_offsets(group, offsets)            the consumed input's next offsets
//!     commit()                                or abort(); abort() after any abortable error
//! }
//! ```
//!
//! # State machine
//! ```text
//!                 init                begin                 commit ok
//!  Uninitialized ──────► Ready ───────────────► InTransaction ─────────► Ready
//!                          ▲  ▲                 │   │  send, send_offsets
//!                          │  │      abort ok   │   │
//!                          │  └─────────────────┘   │ abortable error (GroupFenced included)
//!                          │         abort ok       ▼
//!                          └────────────────── AbortableError
//!
//!  commit / abort whose EndTxn did not complete in time ─► Committing / Aborting: only the same
//!                                                           call again (the outcome is unknown)
//!  PRODUCER_FENCED, INVALID_PRODUCER_EPOCH anywhere ──────► Fenced   (every call but init refused)
//!  a fatal error (authorization, unsupported broker) ─────► Fatal    (every call but init refused)
//!  init from any state ───────────────────────────────────► Ready    (a new epoch)
//! ```
//!
//! - `init` finds the transaction coordinator of the transactional id (FindCoordinator, key type
//!   transaction) and sends InitProducerId with the id and the transaction timeout. The
//!   coordinator then aborts whatever the id had open and bumps the epoch, which fences every
//!   older producer with that id: its next request is refused with PRODUCER_FENCED or
//!   INVALID_PRODUCER_EPOCH, and its open transaction never commits.
//! - `begin` is local; nothing is sent until the first `send` or `send_offsets`.
//! - `send` adds a partition the transaction does not have yet with AddPartitionsToTxn, then
//!   produces a batch with the transactional flag, stamped like the idempotent producer's
//!   ([`crate::producer`]): per-partition sequences that advance only on an acknowledgement, one
//!   batch in flight per partition, retries with the same sequence. Sequences run on across
//!   transactions under one producer id and epoch.
//! - `send_offsets` sends AddOffsetsToTxn (once per group and transaction) to the transaction
//!   coordinator, then TxnOffsetCommit to the group's coordinator with the member's generation,
//!   member id and instance id: a member the group has moved past is refused (ILLEGAL_GENERATION,
//!   UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID), reported as [`TxnError::GroupFenced`].
//! - `commit` and `abort` wait for the sends in flight, then send EndTxn. A transaction to which
//!   nothing was added ends without a request. After an abort that follows a batch of unknown
//!   outcome (timed out, cancelled, OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID) the producer
//!   bumps its epoch (InitProducerId with its current id and epoch, KIP-360) so its sequences start
//!   again at 0 (a broker before Kafka 2.5 gets InitProducerId without them, which bumps the
//!   epoch just the same).
//!
//! # Errors and retries
//! Every call retries, with backoff and within [`TransactionalConfig::operation_timeout`], what a
//! retry can fix: COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS (the previous transaction's
//! markers are still being written), NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE (found again),
//! leader moves, broken connections. What is left reaches the caller as a [`TxnError`]:
//! - [`TxnError::ProducerFenced`]: another producer owns the transactional id now (or the
//!   coordinator aborted this transaction at its timeout, which bumps the epoch the same way).
//!   This producer's transaction will not commit; `init` again only once the work is this
//!   process's again.
//! - [`TxnError::GroupFenced`]: the group refused the offsets: its partitions may belong to
//!   another member. Abort, and rejoin before consuming on.
//! - [`TxnError::Abortable`]: the transaction cannot commit (a produce failed, a batch's outcome
//!   is unknown, TRANSACTION_ABORTABLE); abort it and begin again.
//! - [`TxnError::Retriable`]: the call did not complete in its time budget and changed nothing
//!   that a repeat of the call would not redo: call it again (or abort).
//! - [`TxnError::Fatal`], [`TxnError::State`]: unusable, or a call out of order.
//!
//! # Protocol
//! Transaction protocol 1: AddPartitionsToTxn v1-v3, AddOffsetsToTxn v1-v4, TxnOffsetCommit v2-v4,
//! EndTxn v1-v4 and Produce up to v11, so Apache Kafka 2.1 through 4.x serve it (KIP-447's group
//! fencing from Kafka 2.5, TxnOffsetCommit v3). With ACLs the principal needs `Write` on the
//! transactional id and the topics, and `Read` on the group.
//!
//! # Cancellation
//! A `send`, `send_batch` or `send_offsets` future dropped while its Produce, AddPartitionsToTxn
//! or AddOffsetsToTxn is in flight (or whose request went unanswered until the operation
//! timeout) leaves that request's outcome unknown: the transaction becomes abortable, and the
//! abort ends with a new epoch, which also aborts a transaction the coordinator opened for a
//! registration this producer never saw answered. A `commit` or `abort` dropped after its EndTxn
//! went out leaves the producer in `Committing` or `Aborting`: call the same method again.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::connection::{BrokerConnection, ConnectionKind, ConnectionPool, backoff_delay};
use crate::data::{BatchSequence, TxnStamp};
use crate::error::{Context, Error, ErrorCode};
use crate::messages::Request;
use crate::messages::add_offsets_to_txn::AddOffsetsToTxnRequest;
use crate::messages::add_partitions_to_txn::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, AddPartitionsToTxnTopic,
};
use crate::messages::end_txn::EndTxnRequest;
use crate::messages::init_producer_id::InitProducerIdRequest;
use crate::messages::txn_offset_commit::{
    TxnOffsetCommitPartition, TxnOffsetCommitRequest, TxnOffsetCommitResponse, TxnOffsetCommitTopic,
};
use crate::partitioner::partition_for_key;
use crate::producer::{Producer, ProducerConfig, leader_unreachable};
use crate::records::{Compression, ProduceRecord};

/// Settings of a [`TransactionalProducer`]. `Default`: no compression, 30 s produce timeout, 60 s
/// per operation.
#[derive(Debug, Clone, Copy)]
pub struct TransactionalConfig {
    /// Batch compression.
    pub compression: Compression,
    /// Server-side produce timeout (replication wait for acks=all).
    pub timeout: Duration,
    /// Upper bound on one call (`init`, `send`, `send_offsets`, `commit`, `abort`), its retries
    /// included (Java's `max.block.ms` and `delivery.timeout.ms`).
    pub operation_timeout: Duration,
}

impl Default for TransactionalConfig {
    fn default() -> Self {
        Self {
            compression: Compression::None,
            timeout: Duration::from_secs(30),
            operation_timeout: Duration::from_secs(60),
        }
    }
}

/// Where a [`TransactionalProducer`] is in its state machine (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxnState {
    /// `init` has not succeeded yet.
    Uninitialized,
    /// No transaction open: `begin` starts one.
    Ready,
    /// A transaction is open: `send`, `send_offsets`, `commit`, `abort`.
    InTransaction,
    /// A commit was sent and its outcome is not known yet: only `commit` again.
    Committing,
    /// An abort was sent and its outcome is not known yet: only `abort` again.
    Aborting,
    /// The open transaction cannot commit: only `abort`.
    AbortableError,
    /// Another producer owns the transactional id: only `init`.
    Fenced,
    /// Unusable: only `init`.
    Fatal,
}

/// A consumer group member whose offsets a transaction commits: what the group coordinator checks
/// to fence a zombie (KIP-447).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    /// The group id.
    pub group_id: String,
    /// The member's generation (classic protocol) or member epoch (KIP-848); -1 skips the check.
    pub generation_id: i32,
    /// The member id; "" skips the check.
    pub member_id: String,
    /// The static member's instance id.
    pub group_instance_id: Option<String>,
}

/// One partition's offset committed by a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffset {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The next offset to consume.
    pub offset: i64,
    /// Leader epoch of the last consumed record, -1 if unknown.
    pub leader_epoch: i32,
    /// Commit metadata.
    pub metadata: Option<String>,
}

/// Why a [`TransactionalProducer`] call failed; the variant says what the caller does next.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TxnError {
    /// Another producer with this transactional id has a newer epoch (PRODUCER_FENCED,
    /// INVALID_PRODUCER_EPOCH): this producer's transaction will not commit. Only `init` is
    /// accepted from now on.
    #[error("producer fenced for transactional id {transactional_id}: {source}")]
    ProducerFenced {
        /// The transactional id.
        transactional_id: String,
        /// The refusal.
        source: Box<Error>,
    },
    /// The group coordinator refused the transaction's offsets because the member is no longer
    /// in the group's generation (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID;
    /// STALE_MEMBER_EPOCH, FENCED_MEMBER_EPOCH for a KIP-848 member). The transaction must be
    /// aborted.
    #[error("group {group_id} fenced the transaction's offsets: {source}")]
    GroupFenced {
        /// The group.
        group_id: String,
        /// The refusal.
        source: Box<Error>,
    },
    /// The transaction cannot commit: `abort`, then `begin` again.
    #[error("the transaction must be aborted: {source}")]
    Abortable {
        /// What went wrong.
        source: Box<Error>,
    },
    /// `op` did not complete within the operation timeout; calling it again continues it.
    #[error("{op} did not complete in time (call it again): {source}")]
    Retriable {
        /// The call.
        op: &'static str,
        /// The last attempt's error.
        source: Box<Error>,
    },
    /// The producer cannot go on (authorization, a broker without transactions, a broken
    /// invariant). Only `init` is accepted.
    #[error("transactional producer failed: {source}")]
    Fatal {
        /// What went wrong.
        source: Box<Error>,
    },
    /// The call is not allowed in the producer's state.
    #[error("{op} is not allowed in state {state:?}")]
    State {
        /// The call.
        op: &'static str,
        /// The state it found.
        state: TxnState,
    },
}

impl TxnError {
    /// True for [`TxnError::ProducerFenced`] and [`TxnError::GroupFenced`]: this process is a
    /// zombie for the work at hand.
    pub fn is_fenced(&self) -> bool {
        matches!(
            self,
            TxnError::ProducerFenced { .. } | TxnError::GroupFenced { .. }
        )
    }

    /// True if `abort` recovers: [`TxnError::Abortable`] and [`TxnError::GroupFenced`].
    pub fn is_abortable(&self) -> bool {
        matches!(
            self,
            TxnError::Abortable { .. } | TxnError::GroupFenced { .. }
        )
    }

    /// True for [`TxnError::Retriable`]: the same call again may succeed.
    pub fn is_retriable(&self) -> bool {
        matches!(self, TxnError::Retriable { .. })
    }
}

/// A producer id and epoch from InitProducerId.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProducerId {
    id: i64,
    epoch: i16,
}

/// What one error code asks of a coordinator call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Back off and send again.
    Retry,
    /// Find the coordinator again, then send again.
    Rediscover,
    /// The producer is fenced.
    Fenced,
    /// The group member is fenced (TxnOffsetCommit only).
    GroupFenced,
    /// The transaction must be aborted.
    Abort,
    /// Nothing helps.
    Fatal,
}

fn action(code: ErrorCode) -> Action {
    match code {
        ErrorCode::NOT_COORDINATOR | ErrorCode::COORDINATOR_NOT_AVAILABLE => Action::Rediscover,
        ErrorCode::PRODUCER_FENCED | ErrorCode::INVALID_PRODUCER_EPOCH => Action::Fenced,
        // The consumer protocol (KIP-848) answers a member epoch that is not the member's
        // current one with the last two.
        ErrorCode::ILLEGAL_GENERATION
        | ErrorCode::UNKNOWN_MEMBER_ID
        | ErrorCode::FENCED_INSTANCE_ID
        | ErrorCode::STALE_MEMBER_EPOCH
        | ErrorCode::FENCED_MEMBER_EPOCH => Action::GroupFenced,
        ErrorCode::CONCURRENT_TRANSACTIONS | ErrorCode::OPERATION_NOT_ATTEMPTED => Action::Retry,
        c if c.is_retriable() => Action::Retry,
        ErrorCode::TRANSACTION_ABORTABLE
        | ErrorCode::UNKNOWN_PRODUCER_ID
        | ErrorCode::INVALID_PRODUCER_ID_MAPPING
        | ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER
        | ErrorCode::REBALANCE_IN_PROGRESS
        | ErrorCode::TOPIC_AUTHORIZATION_FAILED
        | ErrorCode::GROUP_AUTHORIZATION_FAILED
        | ErrorCode::OFFSET_METADATA_TOO_LARGE
        | ErrorCode::MESSAGE_TOO_LARGE
        | ErrorCode::RECORD_LIST_TOO_LARGE
        | ErrorCode::INVALID_RECORD
        | ErrorCode::UNKNOWN_SERVER_ERROR => Action::Abort,
        _ => Action::Fatal,
    }
}

/// The action for a failed request: its Kafka code's, or retry for a transport failure.
fn error_action(e: &Error) -> Action {
    match e {
        Error::Kafka { code, .. } => action(*code),
        e if e.is_retriable() || leader_unreachable(e) => Action::Rediscover,
        _ => Action::Fatal,
    }
}

/// Whose coordinator a request goes to.
#[derive(Debug, Clone, Copy)]
enum Target<'a> {
    /// The transactional id's transaction coordinator.
    Transaction,
    /// A consumer group's coordinator.
    Group(&'a str),
}

fn partition_context(topic: &str, partition: i32) -> Context {
    Context {
        topic: Some(topic.to_string()),
        partition: Some(partition),
        offset: None,
    }
}

/// One partition's sequence state; its mutex is held while a batch is in flight.
#[derive(Debug, Default)]
struct Sequence {
    /// The producer id and epoch `next` counts for.
    owner: Option<ProducerId>,
    /// Base sequence of the partition's next batch under `owner`.
    next: i32,
}

/// Held while a batch for one partition is in flight.
type SequenceLock = Arc<tokio::sync::Mutex<Sequence>>;

#[derive(Debug)]
struct Inner {
    state: TxnState,
    transactional_id: String,
    transaction_timeout_ms: i32,
    pid: Option<ProducerId>,
    /// The transaction coordinator's address, once found.
    coordinator: Option<String>,
    /// Group coordinators' addresses by group id.
    group_coordinators: HashMap<String, String>,
    /// Partitions added to the open transaction.
    partitions: HashSet<(String, i32)>,
    /// Groups added to the open transaction (AddOffsetsToTxn).
    groups: HashSet<String>,
    /// Why the producer is in `AbortableError`, `Fenced` or `Fatal`.
    cause: Option<Error>,
    /// A batch's outcome is unknown: take a new epoch after the abort.
    bump_epoch: bool,
}

impl Inner {
    /// The open transaction has something on the coordinator's side to end.
    fn has_work(&self) -> bool {
        !self.partitions.is_empty() || !self.groups.is_empty()
    }
}

/// Produces records and commits consumer offsets in Kafka transactions (see the module doc).
///
/// All methods take `&self`: sends may run concurrently from many tasks; `commit`, `abort` and
/// `init` wait for the sends in flight.
#[derive(Debug)]
pub struct TransactionalProducer {
    pool: Arc<ConnectionPool>,
    config: TransactionalConfig,
    /// Metadata and leader connections (its own send path is not used).
    leaders: Producer,
    /// Held shared by `send` and `send_offsets`, exclusively by `init`, `commit` and `abort`.
    gate: tokio::sync::RwLock<()>,
    inner: std::sync::Mutex<Inner>,
    /// Serialises AddPartitionsToTxn and AddOffsetsToTxn.
    registration: tokio::sync::Mutex<()>,
    sequences: std::sync::Mutex<HashMap<(String, i32), SequenceLock>>,
    round_robin: std::sync::atomic::AtomicU32,
}

/// Marks the transaction abortable, with a new epoch due after the abort, if dropped while
/// armed: a batch or a registration cancelled in flight may or may not have reached the broker.
struct InFlight<'a> {
    producer: &'a TransactionalProducer,
    what: &'static str,
    armed: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.producer.to_abortable(
                Error::Config(format!("a {} was cancelled in flight", self.what)),
                true,
            );
        }
    }
}

impl TransactionalProducer {
    /// A producer on `pool`; call [`TransactionalProducer::init`] before anything else.
    pub fn new(pool: Arc<ConnectionPool>, config: TransactionalConfig) -> Self {
        let leaders = Producer::new(
            Arc::clone(&pool),
            ProducerConfig {
                idempotent: false,
                // Bounds its wait for a new topic's metadata.
                delivery_timeout: config.operation_timeout,
                ..ProducerConfig::default()
            },
        );
        Self {
            pool,
            config,
            leaders,
            gate: tokio::sync::RwLock::new(()),
            inner: std::sync::Mutex::new(Inner {
                state: TxnState::Uninitialized,
                transactional_id: String::new(),
                transaction_timeout_ms: 60_000,
                pid: None,
                coordinator: None,
                group_coordinators: HashMap::new(),
                partitions: HashSet::new(),
                groups: HashSet::new(),
                cause: None,
                bump_epoch: false,
            }),
            registration: tokio::sync::Mutex::new(()),
            sequences: std::sync::Mutex::new(HashMap::new()),
            round_robin: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// The current state.
    pub fn state(&self) -> TxnState {
        self.lock().state
    }

    /// The producer id and epoch in use, once `init` succeeded.
    pub fn producer_id(&self) -> Option<(i64, i16)> {
        self.lock().pid.map(|p| (p.id, p.epoch))
    }

    /// Takes the transactional id (InitProducerId at its transaction coordinator) with
    /// `transaction_timeout`, after which the coordinator aborts a transaction left open. Fences
    /// every other producer with the same id and aborts what it had open. Accepted in every state;
    /// on success the producer is `Ready`.
    pub async fn init(
        &self,
        transactional_id: &str,
        transaction_timeout: Duration,
    ) -> Result<(), TxnError> {
        let _gate = self.gate.write().await;
        let deadline = Instant::now() + self.config.operation_timeout;
        let timeout_ms = i32::try_from(transaction_timeout.as_millis()).unwrap_or(i32::MAX);
        {
            let mut inner = self.lock();
            if inner.transactional_id != transactional_id {
                inner.coordinator = None;
            }
            inner.transactional_id = transactional_id.to_string();
            inner.transaction_timeout_ms = timeout_ms;
        }
        let req = InitProducerIdRequest {
            transactional_id: Some(transactional_id.to_string()),
            transaction_timeout_ms: timeout_ms,
            producer_id: -1,
            producer_epoch: -1,
        };
        let pid = self.init_producer_id(&req, "init", deadline).await?;
        let mut inner = self.lock();
        inner.pid = Some(pid);
        inner.partitions.clear();
        inner.groups.clear();
        inner.cause = None;
        inner.bump_epoch = false;
        inner.state = TxnState::Ready;
        tracing::debug!(
            transactional_id,
            producer_id = pid.id,
            epoch = pid.epoch,
            "transactional producer ready"
        );
        Ok(())
    }

    /// After [`TxnError::ProducerFenced`]: asks the transaction coordinator to go on under this
    /// producer's id with a new epoch, naming the id and epoch it holds (InitProducerId with
    /// them, KIP-360). The coordinator grants it only while no other producer took the
    /// transactional id since this one's last epoch: a fence it raised itself (a transaction it
    /// aborted at its timeout) is overcome, a fence by another producer with the id is not, and
    /// the producer stays [`TxnState::Fenced`] with [`TxnError::ProducerFenced`]. A coordinator
    /// without InitProducerId v3 (before Apache Kafka 2.5) cannot tell the two apart: the
    /// producer stays fenced there too. On success the producer is `Ready`.
    pub async fn recover_epoch(&self) -> Result<(), TxnError> {
        let _gate = self.gate.write().await;
        let deadline = Instant::now() + self.config.operation_timeout;
        let (pid, transactional_id, timeout_ms) = {
            let inner = self.lock();
            let Some(pid) = inner.pid else {
                return Err(Self::refusal("recover_epoch", inner.state, &inner));
            };
            (
                pid,
                inner.transactional_id.clone(),
                inner.transaction_timeout_ms,
            )
        };
        let v3 = match self.coordinator(Target::Transaction).await {
            Ok(conn) => conn
                .version_for::<InitProducerIdRequest>()
                .is_ok_and(|v| v >= 3),
            Err(e) => {
                return Err(TxnError::Retriable {
                    op: "recover_epoch",
                    source: Box::new(e),
                });
            }
        };
        if !v3 {
            let mut inner = self.lock();
            inner.state = TxnState::Fenced;
            return Err(Self::refusal("recover_epoch", TxnState::Fenced, &inner));
        }
        let req = InitProducerIdRequest {
            transactional_id: Some(transactional_id.clone()),
            transaction_timeout_ms: timeout_ms,
            producer_id: pid.id,
            producer_epoch: pid.epoch,
        };
        let new = self
            .init_producer_id(&req, "recover_epoch", deadline)
            .await?;
        let mut inner = self.lock();
        inner.pid = Some(new);
        inner.partitions.clear();
        inner.groups.clear();
        inner.cause = None;
        inner.bump_epoch = false;
        inner.state = TxnState::Ready;
        tracing::info!(
            transactional_id,
            producer_id = new.id,
            epoch = new.epoch,
            "transactional producer goes on with a new epoch after the coordinator fenced it"
        );
        Ok(())
    }

    /// Starts a transaction (locally: the coordinator learns of it with the first send).
    pub fn begin(&self) -> Result<(), TxnError> {
        let mut inner = self.lock();
        match inner.state {
            TxnState::Ready => {
                inner.state = TxnState::InTransaction;
                Ok(())
            }
            state => Err(Self::refusal("begin", state, &inner)),
        }
    }

    /// Sends one record to the partition Java would choose for its key (round robin without a
    /// key) in the open transaction. Returns `(partition, offset)`.
    pub async fn send(&self, topic: &str, record: ProduceRecord) -> Result<(i32, i64), TxnError> {
        self.open_transaction("send")?;
        let n = match self.leaders.partitions(topic).await {
            Ok(n) => n,
            // Nothing was sent: the transaction is as it was.
            Err(e) if e.is_retriable() || matches!(e, Error::DeliveryTimeout { .. }) => {
                return Err(TxnError::Retriable {
                    op: "send",
                    source: Box::new(e),
                });
            }
            Err(e) => return Err(self.send_failed(e, false)),
        };
        let partition = match record.key.as_deref() {
            Some(k) => partition_for_key(k, n),
            None => {
                let r = self
                    .round_robin
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                i32::try_from(r % u32::try_from(n.max(1)).unwrap_or(1)).unwrap_or(0)
            }
        };
        let offset = self
            .send_batch(topic, partition, std::slice::from_ref(&record))
            .await?;
        Ok((partition, offset))
    }

    /// Sends one batch to one partition in the open transaction, adding the partition to the
    /// transaction first if it is new to it. Returns the batch's base offset (-1 when the broker
    /// reported the batch as an already-written duplicate). Waits while another batch for the
    /// same partition is in flight.
    pub async fn send_batch(
        &self,
        topic: &str,
        partition: i32,
        records: &[ProduceRecord],
    ) -> Result<i64, TxnError> {
        let _gate = self.gate.read().await;
        let deadline = Instant::now() + self.config.operation_timeout;
        let (pid, transactional_id) = self.open_transaction("send")?;
        self.add_partition(topic, partition, pid, &transactional_id, deadline)
            .await?;
        let lock = {
            let mut seqs = self
                .sequences
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            Arc::clone(seqs.entry((topic.to_string(), partition)).or_default())
        };
        let mut seq = lock.lock().await;
        if seq.owner != Some(pid) {
            seq.owner = Some(pid);
            seq.next = 0;
        }
        let stamp = BatchSequence {
            producer_id: pid.id,
            producer_epoch: pid.epoch,
            base_sequence: seq.next,
        };
        let mut guard = InFlight {
            producer: self,
            what: "Produce",
            armed: true,
        };
        let mut attempt: u32 = 0;
        let mut outcome_unknown = false;
        loop {
            let result = match tokio::time::timeout_at(
                deadline,
                self.produce(topic, partition, records, &transactional_id, stamp),
            )
            .await
            {
                Ok(r) => r,
                Err(_) => Err(Error::RequestTimeout {
                    broker: String::new(),
                    api: "Produce",
                    after: self.config.operation_timeout,
                }),
            };
            let e = match result {
                Ok(offset) => {
                    guard.armed = false;
                    seq.next = stamp.next_base(records.len());
                    return Ok(offset);
                }
                Err(e) if e.code() == Some(ErrorCode::DUPLICATE_SEQUENCE_NUMBER) => {
                    // The broker holds this batch already: written once, which is the point.
                    guard.armed = false;
                    seq.next = stamp.next_base(records.len());
                    return Ok(-1);
                }
                Err(e) => e,
            };
            outcome_unknown |= e.breaks_connection() || matches!(e, Error::RequestTimeout { .. });
            let code = e.code();
            if matches!(code.map(action), Some(Action::Fenced)) {
                guard.armed = false;
                return Err(self.fenced(e));
            }
            if matches!(
                code,
                Some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                    | Some(ErrorCode::CLUSTER_AUTHORIZATION_FAILED)
            ) || matches!(e, Error::UnsupportedVersion { .. })
            {
                guard.armed = false;
                return Err(self.fatal(e));
            }
            let retriable = e.is_retriable() || leader_unreachable(&e);
            if retriable && Instant::now() < deadline {
                if code.is_some_and(ErrorCode::needs_metadata_refresh)
                    || e.breaks_connection()
                    || leader_unreachable(&e)
                {
                    let _ = tokio::time::timeout_at(deadline, self.leaders.refresh(topic)).await;
                }
                let cfg = self.pool.config();
                let wait = backoff_delay(cfg.backoff_initial, cfg.backoff_max, attempt);
                tokio::time::sleep_until((Instant::now() + wait).min(deadline)).await;
                if Instant::now() < deadline {
                    attempt = attempt.saturating_add(1);
                    continue;
                }
            }
            // The sequence is unknown to us now if the batch may have been written, or if the
            // broker lost or rejected this producer's sequence state: a new epoch restarts it.
            let bump = outcome_unknown
                || matches!(
                    code,
                    Some(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER | ErrorCode::UNKNOWN_PRODUCER_ID)
                );
            guard.armed = false;
            return Err(self.send_failed(e, bump));
        }
    }

    /// Adds a consumer group's offsets to the open transaction: AddOffsetsToTxn (once per group
    /// and transaction) at the transaction coordinator, then TxnOffsetCommit at the group's
    /// coordinator with `group`'s generation, member id and instance id. The offsets become the
    /// group's committed offsets when the transaction commits, and never if it aborts.
    pub async fn send_offsets(
        &self,
        group: &GroupMetadata,
        offsets: &[TxnOffset],
    ) -> Result<(), TxnError> {
        let _gate = self.gate.read().await;
        let deadline = Instant::now() + self.config.operation_timeout;
        let (pid, transactional_id) = self.open_transaction("send_offsets")?;
        self.add_offsets(group, pid, &transactional_id, deadline)
            .await?;
        let mut topics: Vec<TxnOffsetCommitTopic> = Vec::new();
        for o in offsets {
            let p = TxnOffsetCommitPartition {
                partition_index: o.partition,
                committed_offset: o.offset,
                committed_leader_epoch: o.leader_epoch,
                committed_metadata: o.metadata.clone(),
            };
            match topics.iter_mut().find(|t| t.name == o.topic) {
                Some(t) => t.partitions.push(p),
                None => topics.push(TxnOffsetCommitTopic {
                    name: o.topic.clone(),
                    partitions: vec![p],
                }),
            }
        }
        let req = TxnOffsetCommitRequest {
            transactional_id: transactional_id.clone(),
            group_id: group.group_id.clone(),
            producer_id: pid.id,
            producer_epoch: pid.epoch,
            generation_id: group.generation_id,
            member_id: group.member_id.clone(),
            group_instance_id: group.group_instance_id.clone(),
            topics,
        };
        let code = |resp: &TxnOffsetCommitResponse| {
            resp.topics
                .iter()
                .find_map(|t| {
                    t.partitions
                        .iter()
                        .find(|p| p.error_code != ErrorCode::NONE)
                        .map(|p| (p.error_code, partition_context(&t.name, p.partition_index)))
                })
                .unwrap_or((ErrorCode::NONE, Context::default()))
        };
        match self
            .request(Target::Group(&group.group_id), &req, code, deadline)
            .await
        {
            Ok(_) => Ok(()),
            // TxnOffsetCommit may be sent again: the last one before EndTxn counts.
            Err((Action::Retry, e)) => Err(TxnError::Retriable {
                op: "send_offsets",
                source: Box::new(e),
            }),
            Err((Action::Fenced, e)) => Err(self.fenced(e)),
            Err((Action::GroupFenced, e)) => {
                self.to_abortable(copy_error(&e), false);
                Err(TxnError::GroupFenced {
                    group_id: group.group_id.clone(),
                    source: Box::new(e),
                })
            }
            Err((Action::Abort, e)) => Err(self.send_failed(e, false)),
            Err((_, e)) => Err(self.fatal(e)),
        }
    }

    /// Commits the open transaction (EndTxn): its records become visible to read_committed
    /// consumers and its offsets become the groups' committed offsets. Waits for the sends in
    /// flight first. After [`TxnError::Retriable`] the state is `Committing`: call `commit` again.
    pub async fn commit(&self) -> Result<(), TxnError> {
        self.end("commit", true).await
    }

    /// Aborts the open transaction (EndTxn): its records are never visible to read_committed
    /// consumers and its offsets are dropped. Waits for the sends in flight first. In `Ready`
    /// there is nothing to abort and it returns at once. After [`TxnError::Retriable`] the state
    /// is `Aborting`: call `abort` again.
    pub async fn abort(&self) -> Result<(), TxnError> {
        self.end("abort", false).await
    }

    async fn end(&self, op: &'static str, commit: bool) -> Result<(), TxnError> {
        let _gate = self.gate.write().await;
        let deadline = Instant::now() + self.config.operation_timeout;
        let (pid, transactional_id, send_end, bump) = {
            let mut inner = self.lock();
            let allowed = match (inner.state, commit) {
                (TxnState::InTransaction, _)
                | (TxnState::Committing, true)
                | (TxnState::Aborting | TxnState::AbortableError, false) => true,
                (TxnState::Ready, false) => return Ok(()),
                _ => false,
            };
            let Some(pid) = inner.pid.filter(|_| allowed) else {
                return Err(Self::refusal(op, inner.state, &inner));
            };
            // Partitions and groups are forgotten only once EndTxn succeeded: with none, nothing
            // reached the coordinator and there is no transaction there to end.
            let send_end = inner.has_work();
            let bump = !commit && inner.bump_epoch;
            if !send_end && !bump {
                inner.state = TxnState::Ready;
                inner.cause = None;
                return Ok(());
            }
            inner.state = if commit {
                TxnState::Committing
            } else {
                TxnState::Aborting
            };
            (pid, inner.transactional_id.clone(), send_end, bump)
        };
        if send_end {
            let req = EndTxnRequest {
                transactional_id: transactional_id.clone(),
                producer_id: pid.id,
                producer_epoch: pid.epoch,
                committed: commit,
            };
            match self
                .request(
                    Target::Transaction,
                    &req,
                    |r| (r.error_code, Context::default()),
                    deadline,
                )
                .await
            {
                Ok(_) => {}
                Err((Action::Retry, e)) => {
                    return Err(TxnError::Retriable {
                        op,
                        source: Box::new(e),
                    });
                }
                Err((Action::Fenced, e)) => return Err(self.fenced(e)),
                Err((Action::Abort | Action::GroupFenced, e)) if commit => {
                    return Err(self.send_failed(e, false));
                }
                Err((_, e)) => return Err(self.fatal(e)),
            }
            let mut inner = self.lock();
            inner.partitions.clear();
            inner.groups.clear();
        }
        if bump {
            // KIP-360: the same id with a new epoch, so every partition's sequence restarts.
            let req = InitProducerIdRequest {
                transactional_id: Some(transactional_id),
                transaction_timeout_ms: self.lock().transaction_timeout_ms,
                producer_id: pid.id,
                producer_epoch: pid.epoch,
            };
            let new = self.init_producer_id(&req, op, deadline).await?;
            tracing::debug!(
                producer_id = new.id,
                epoch = new.epoch,
                "new epoch after a batch of unknown outcome"
            );
            let mut inner = self.lock();
            inner.pid = Some(new);
            inner.bump_epoch = false;
        }
        let mut inner = self.lock();
        inner.state = TxnState::Ready;
        inner.cause = None;
        Ok(())
    }

    /// InitProducerId at the transaction coordinator, retried until `deadline`.
    async fn init_producer_id(
        &self,
        req: &InitProducerIdRequest,
        op: &'static str,
        deadline: Instant,
    ) -> Result<ProducerId, TxnError> {
        match self
            .request(
                Target::Transaction,
                req,
                |r| (r.error_code, Context::default()),
                deadline,
            )
            .await
        {
            Ok(r) => Ok(ProducerId {
                id: r.producer_id,
                epoch: r.producer_epoch,
            }),
            Err((Action::Retry, e)) => Err(TxnError::Retriable {
                op,
                source: Box::new(e),
            }),
            Err((Action::Fenced, e)) => Err(self.fenced(e)),
            Err((_, e)) => Err(self.fatal(e)),
        }
    }

    /// AddPartitionsToTxn for `topic`/`partition` unless the open transaction has it already.
    async fn add_partition(
        &self,
        topic: &str,
        partition: i32,
        pid: ProducerId,
        transactional_id: &str,
        deadline: Instant,
    ) -> Result<(), TxnError> {
        let key = (topic.to_string(), partition);
        if self.lock().partitions.contains(&key) {
            return Ok(());
        }
        let _one = self.registration.lock().await;
        if self.lock().partitions.contains(&key) {
            return Ok(());
        }
        let req = AddPartitionsToTxnRequest {
            transactional_id: transactional_id.to_string(),
            producer_id: pid.id,
            producer_epoch: pid.epoch,
            topics: vec![AddPartitionsToTxnTopic {
                name: topic.to_string(),
                partitions: vec![partition],
            }],
        };
        let code = |resp: &AddPartitionsToTxnResponse| {
            let code = resp
                .topics
                .iter()
                .filter(|t| t.name == topic)
                .flat_map(|t| t.partitions.iter())
                .find(|p| p.partition_index == partition)
                .map_or(ErrorCode::UNKNOWN_SERVER_ERROR, |p| p.error_code);
            (code, partition_context(topic, partition))
        };
        let mut guard = InFlight {
            producer: self,
            what: AddPartitionsToTxnRequest::NAME,
            armed: true,
        };
        let result = self
            .request(Target::Transaction, &req, code, deadline)
            .await;
        guard.armed = false;
        match result {
            Ok(_) => {
                self.lock().partitions.insert(key);
                Ok(())
            }
            // Refused with a retriable code: the partition is not in the transaction and nothing
            // was produced.
            Err((Action::Retry, e)) if e.code().is_some() => Err(TxnError::Retriable {
                op: "send",
                source: Box::new(e),
            }),
            // Unanswered: the coordinator may have added it (see `Cancellation`).
            Err((Action::Retry, e)) => Err(self.send_failed(e, true)),
            Err((Action::Fenced, e)) => Err(self.fenced(e)),
            Err((Action::Abort | Action::GroupFenced, e)) => Err(self.send_failed(e, false)),
            Err((_, e)) => Err(self.fatal(e)),
        }
    }

    /// AddOffsetsToTxn for `group` unless the open transaction has it already.
    async fn add_offsets(
        &self,
        group: &GroupMetadata,
        pid: ProducerId,
        transactional_id: &str,
        deadline: Instant,
    ) -> Result<(), TxnError> {
        if self.lock().groups.contains(&group.group_id) {
            return Ok(());
        }
        let _one = self.registration.lock().await;
        if self.lock().groups.contains(&group.group_id) {
            return Ok(());
        }
        let req = AddOffsetsToTxnRequest {
            transactional_id: transactional_id.to_string(),
            producer_id: pid.id,
            producer_epoch: pid.epoch,
            group_id: group.group_id.clone(),
        };
        let mut guard = InFlight {
            producer: self,
            what: AddOffsetsToTxnRequest::NAME,
            armed: true,
        };
        let result = self
            .request(
                Target::Transaction,
                &req,
                |r| (r.error_code, Context::default()),
                deadline,
            )
            .await;
        guard.armed = false;
        match result {
            Ok(_) => {
                self.lock().groups.insert(group.group_id.clone());
                Ok(())
            }
            Err((Action::Retry, e)) if e.code().is_some() => Err(TxnError::Retriable {
                op: "send_offsets",
                source: Box::new(e),
            }),
            // Unanswered: the coordinator may have added the group (see `Cancellation`).
            Err((Action::Retry, e)) => Err(self.send_failed(e, true)),
            Err((Action::Fenced, e)) => Err(self.fenced(e)),
            Err((Action::Abort | Action::GroupFenced, e)) => Err(self.send_failed(e, false)),
            Err((_, e)) => Err(self.fatal(e)),
        }
    }

    /// Sends `req` to `target`'s coordinator until it is answered without error (`code` reads
    /// the answer's error and where it belongs), retrying with backoff what [`action`] says a
    /// retry or a new coordinator fixes. Returns the answer, or the action for the last error
    /// ([`Action::Retry`] once `deadline` has passed).
    async fn request<R: Request>(
        &self,
        target: Target<'_>,
        req: &R,
        code: impl Fn(&R::Response) -> (ErrorCode, Context),
        deadline: Instant,
    ) -> Result<R::Response, (Action, Error)> {
        let mut attempt = 0;
        loop {
            let e = match self.coordinator(target).await {
                Ok(conn) => match conn.send(req).await {
                    Ok(resp) => {
                        let (c, context) = code(&resp);
                        if c == ErrorCode::NONE {
                            return Ok(resp);
                        }
                        conn.kafka_error(R::NAME, c, context, None)
                    }
                    Err(e) => e,
                },
                Err(e) => e,
            };
            let act = error_action(&e);
            if !matches!(act, Action::Retry | Action::Rediscover) {
                return Err((act, e));
            }
            if act == Action::Rediscover {
                self.forget_coordinator(target);
            }
            let cfg = self.pool.config();
            let wait = backoff_delay(cfg.backoff_initial, cfg.backoff_max, attempt);
            attempt = attempt.saturating_add(1);
            if Instant::now() + wait >= deadline {
                return Err((Action::Retry, e));
            }
            tracing::debug!(api = R::NAME, error = %e, ?wait, "retrying");
            tokio::time::sleep(wait).await;
        }
    }

    /// One transactional Produce to the partition's leader.
    async fn produce(
        &self,
        topic: &str,
        partition: i32,
        records: &[ProduceRecord],
        transactional_id: &str,
        stamp: BatchSequence,
    ) -> Result<i64, Error> {
        let conn = self.leaders.leader_connection(topic, partition).await?;
        conn.produce_transactional(
            topic,
            partition,
            records,
            self.config.compression,
            self.config.timeout,
            TxnStamp {
                transactional_id,
                sequence: stamp,
            },
        )
        .await
    }

    /// A coordination connection to `target`'s coordinator, found (FindCoordinator) if not known.
    async fn coordinator(&self, target: Target<'_>) -> Result<Arc<BrokerConnection>, Error> {
        let (known, transactional_id) = {
            let inner = self.lock();
            let known = match target {
                Target::Transaction => inner.coordinator.clone(),
                Target::Group(g) => inner.group_coordinators.get(g).cloned(),
            };
            (known, inner.transactional_id.clone())
        };
        let addr = match known {
            Some(a) => a,
            None => {
                let any = self.pool.any().await?;
                let c = match target {
                    Target::Transaction => {
                        any.find_transaction_coordinator(&transactional_id).await?
                    }
                    Target::Group(g) => any.find_coordinator(g).await?,
                };
                let addr = c.addr();
                self.pool.set_broker(c.node_id, addr.clone());
                let mut inner = self.lock();
                match target {
                    Target::Transaction => inner.coordinator = Some(addr.clone()),
                    Target::Group(g) => {
                        inner.group_coordinators.insert(g.to_string(), addr.clone());
                    }
                }
                addr
            }
        };
        let conn = self.pool.get(&addr, ConnectionKind::Coordination).await;
        if conn.is_err() {
            self.forget_coordinator(target);
        }
        conn
    }

    fn forget_coordinator(&self, target: Target<'_>) {
        let mut inner = self.lock();
        match target {
            Target::Transaction => inner.coordinator = None,
            Target::Group(g) => {
                inner.group_coordinators.remove(g);
            }
        }
    }

    /// The producer id and transactional id of the open transaction, or the refusal.
    fn open_transaction(&self, op: &'static str) -> Result<(ProducerId, String), TxnError> {
        let inner = self.lock();
        match (inner.state, inner.pid) {
            (TxnState::InTransaction, Some(pid)) => Ok((pid, inner.transactional_id.clone())),
            (state, _) => Err(Self::refusal(op, state, &inner)),
        }
    }

    /// The error for `op` refused in `state`: the standing cause for a fenced, failed or
    /// abortable producer, so a caller sees the same kind of error on every call.
    fn refusal(op: &'static str, state: TxnState, inner: &Inner) -> TxnError {
        let cause = || {
            inner.cause.as_ref().map_or_else(
                || Error::Config(format!("{op} refused in state {state:?}")),
                copy_error,
            )
        };
        match state {
            TxnState::Fenced => TxnError::ProducerFenced {
                transactional_id: inner.transactional_id.clone(),
                source: Box::new(cause()),
            },
            TxnState::AbortableError => TxnError::Abortable {
                source: Box::new(cause()),
            },
            TxnState::Fatal => TxnError::Fatal {
                source: Box::new(cause()),
            },
            state => TxnError::State { op, state },
        }
    }

    /// The transaction becomes abortable (unless the producer is already worse off).
    fn to_abortable(&self, cause: Error, bump_epoch: bool) {
        let mut inner = self.lock();
        inner.bump_epoch |= bump_epoch;
        if matches!(inner.state, TxnState::InTransaction | TxnState::Committing) {
            inner.state = TxnState::AbortableError;
            inner.cause = Some(cause);
        }
    }

    /// A send or offsets call failed for good: the transaction must be aborted.
    fn send_failed(&self, e: Error, bump_epoch: bool) -> TxnError {
        self.to_abortable(copy_error(&e), bump_epoch);
        match self.state() {
            TxnState::Fenced | TxnState::Fatal => {
                let inner = self.lock();
                Self::refusal("send", inner.state, &inner)
            }
            _ => TxnError::Abortable {
                source: Box::new(e),
            },
        }
    }

    fn fenced(&self, e: Error) -> TxnError {
        let mut inner = self.lock();
        tracing::warn!(transactional_id = %inner.transactional_id, error = %e, "transactional producer fenced");
        inner.state = TxnState::Fenced;
        inner.cause = Some(copy_error(&e));
        TxnError::ProducerFenced {
            transactional_id: inner.transactional_id.clone(),
            source: Box::new(e),
        }
    }

    fn fatal(&self, e: Error) -> TxnError {
        let mut inner = self.lock();
        inner.state = TxnState::Fatal;
        inner.cause = Some(copy_error(&e));
        TxnError::Fatal {
            source: Box::new(e),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The state is plain data changed in single assignments: a panic elsewhere cannot leave
        // it half-written, so a poisoned lock's data is still sound.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A copy of `e` to keep as a standing cause (Kafka errors exactly, others by their text).
fn copy_error(e: &Error) -> Error {
    match e {
        Error::Kafka {
            broker,
            api,
            code,
            context,
            message,
        } => Error::Kafka {
            broker: broker.clone(),
            api,
            code: *code,
            context: context.clone(),
            message: message.clone(),
        },
        other => Error::Config(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_map_to_the_documented_actions() {
        assert_eq!(action(ErrorCode::PRODUCER_FENCED), Action::Fenced);
        assert_eq!(action(ErrorCode::INVALID_PRODUCER_EPOCH), Action::Fenced);
        for c in [
            ErrorCode::ILLEGAL_GENERATION,
            ErrorCode::UNKNOWN_MEMBER_ID,
            ErrorCode::FENCED_INSTANCE_ID,
            ErrorCode::STALE_MEMBER_EPOCH,
            ErrorCode::FENCED_MEMBER_EPOCH,
        ] {
            assert_eq!(action(c), Action::GroupFenced, "{c}");
        }
        for c in [
            ErrorCode::CONCURRENT_TRANSACTIONS,
            ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
            ErrorCode::OPERATION_NOT_ATTEMPTED,
        ] {
            assert_eq!(action(c), Action::Retry, "{c}");
        }
        assert_eq!(action(ErrorCode::NOT_COORDINATOR), Action::Rediscover);
        assert_eq!(action(ErrorCode::TRANSACTION_ABORTABLE), Action::Abort);
        assert_eq!(
            action(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            Action::Fatal
        );
        assert_eq!(action(ErrorCode::INVALID_TXN_STATE), Action::Fatal);
    }

    fn producer() -> TransactionalProducer {
        TransactionalProducer::new(
            Arc::new(ConnectionPool::new(
                vec!["127.0.0.1:1".into()],
                Default::default(),
            )),
            TransactionalConfig::default(),
        )
    }

    #[tokio::test]
    async fn calls_out_of_order_are_refused_without_a_request() {
        let p = producer();
        assert_eq!(p.state(), TxnState::Uninitialized);
        assert!(matches!(
            p.begin(),
            Err(TxnError::State {
                op: "begin",
                state: TxnState::Uninitialized
            })
        ));
        let err = p.send_batch("t", 0, &[]).await.err();
        assert!(
            matches!(
                err,
                Some(TxnError::State {
                    op: "send",
                    state: TxnState::Uninitialized
                })
            ),
            "{err:?}"
        );
        assert!(matches!(
            p.commit().await,
            Err(TxnError::State { op: "commit", .. })
        ));
    }

    /// A fenced producer answers every later call with the fenced error, not a state error.
    #[tokio::test]
    async fn a_fenced_producer_keeps_saying_so() {
        let p = producer();
        {
            let mut inner = p.lock();
            inner.pid = Some(ProducerId { id: 1, epoch: 0 });
            inner.state = TxnState::InTransaction;
            inner.transactional_id = "tx".into();
        }
        let e = p.fenced(Error::Kafka {
            broker: "b".into(),
            api: "Produce",
            code: ErrorCode::PRODUCER_FENCED,
            context: Context::default(),
            message: None,
        });
        assert!(e.is_fenced() && !e.is_abortable());
        assert!(p.begin().is_err_and(|e| e.is_fenced()));
        assert!(
            p.send_batch("t", 0, &[])
                .await
                .is_err_and(|e| e.is_fenced())
        );
        assert!(p.commit().await.is_err_and(|e| e.is_fenced()));
        assert!(p.abort().await.is_err_and(|e| e.is_fenced()));
        let code = match p.commit().await {
            Err(TxnError::ProducerFenced { source, .. }) => source.code(),
            other => panic!("{other:?}"),
        };
        assert_eq!(code, Some(ErrorCode::PRODUCER_FENCED));
    }
}
