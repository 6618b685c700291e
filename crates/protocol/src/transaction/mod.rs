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
//!   nothing was added ends without a request. After an abort that follows a failed or cancelled
//!   batch (whether the broker holds it is not certain: a refusal it logged anyway, a lost
//!   answer, OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_PRODUCER_ID) the producer bumps its epoch (InitProducerId with its current id and epoch, KIP-360) so its sequences start
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
//! - [`TxnError::MetadataTooLarge`]: the group refused the offsets' metadata as longer than its
//!   `offset.metadata.max.bytes`; the transaction is still open: send the offsets again with
//!   shorter metadata.
//! - [`TxnError::Abortable`]: the transaction cannot commit (a produce failed, a batch's or a
//!   TxnOffsetCommit's outcome is unknown, TRANSACTION_ABORTABLE); abort it and begin again.
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

mod coordinator;
mod end;
mod epoch;
mod error;
mod offsets;
mod producer;
mod registration;
mod send;
mod state;

pub use error::TxnError;
pub use offsets::{CommittedOffset, GroupMetadata, TxnOffset};
pub use producer::{TransactionalConfig, TransactionalProducer};
pub use state::TxnState;
