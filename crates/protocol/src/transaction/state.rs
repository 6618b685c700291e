//! The producer's state: where it is in its state machine, its producer id and epoch, what the
//! open transaction has registered at its coordinators, and each partition's sequence.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::error::Error;

/// Where a [`TransactionalProducer`](super::TransactionalProducer) is in its state machine (see the
/// [`transaction`](super) module doc).
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

/// A producer id and epoch from InitProducerId.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ProducerId {
    pub(super) id: i64,
    pub(super) epoch: i16,
}

/// One partition's sequence state; its mutex is held while a batch is in flight.
#[derive(Debug, Default)]
pub(super) struct Sequence {
    /// The producer id and epoch `next` counts for.
    pub(super) owner: Option<ProducerId>,
    /// Base sequence of the partition's next batch under `owner`.
    pub(super) next: i32,
}

/// Held while a batch for one partition is in flight.
pub(super) type SequenceLock = Arc<tokio::sync::Mutex<Sequence>>;

/// The producer's state, behind its mutex.
#[derive(Debug)]
pub(super) struct Inner {
    pub(super) state: TxnState,
    pub(super) transactional_id: String,
    pub(super) transaction_timeout_ms: i32,
    pub(super) pid: Option<ProducerId>,
    /// The transaction coordinator's address, once found.
    pub(super) coordinator: Option<String>,
    /// Group coordinators' addresses by group id.
    pub(super) group_coordinators: HashMap<String, String>,
    /// Partitions added to the open transaction.
    pub(super) partitions: HashSet<(String, i32)>,
    /// Groups added to the open transaction (AddOffsetsToTxn).
    pub(super) groups: HashSet<String>,
    /// Why the producer is in `AbortableError`, `Fenced` or `Fatal`.
    pub(super) cause: Option<Error>,
    /// A batch's outcome is unknown: take a new epoch after the abort.
    pub(super) bump_epoch: bool,
}

impl Inner {
    /// The open transaction has something on the coordinator's side to end.
    pub(super) fn has_work(&self) -> bool {
        !self.partitions.is_empty() || !self.groups.is_empty()
    }
}
