//! What waits in the open transaction's queues: a queued record, its share of the gate and of
//! the queues' room, and the bound on that room.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use orderly_engine::TopicPartition;
use orderly_protocol::ProduceRecord;
use tokio::sync::{OwnedRwLockReadGuard, OwnedSemaphorePermit, oneshot};

/// The records waiting for one output topic, per partition, and whether a task is sending them.
#[derive(Debug, Default)]
pub(super) struct Queue {
    pub(super) waiting: HashMap<i32, VecDeque<Queued>>,
    pub(super) sending: bool,
}

/// A record of a write, queued for its output partition.
#[derive(Debug)]
pub(super) struct Queued {
    pub(super) record: ProduceRecord,
    /// The partition and offset of the record whose output this is.
    pub(super) origin: (TopicPartition, i64),
    /// Told the outcome, if its write waits for it.
    pub(super) ack: Option<oneshot::Sender<Result<(), String>>>,
    /// Held until the request was answered.
    pub(super) share: Share,
}

/// What a queued record holds until its request was answered: its write's share of the gate
/// (no commit until then) and of the queues' room.
#[derive(Debug)]
pub(super) struct Share {
    pub(super) _gate: Arc<OwnedRwLockReadGuard<()>>,
    pub(super) _room: Arc<OwnedSemaphorePermit>,
}

/// When a write returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ack {
    /// Once its records are queued in the open transaction: the transaction cannot commit
    /// without them, and rewinds if one fails.
    Queued,
    /// Once the broker acknowledged every record.
    Written,
}

/// Bytes of output queued and unanswered at most (as `record_bytes` counts them); a write
/// waits for room beyond that.
pub(super) const QUEUED_BYTES: usize = 16 * 1024 * 1024;

/// The permits of the queues' room a write of `bytes` takes (a larger write takes all of it).
pub(super) fn room_permits(bytes: usize) -> u32 {
    u32::try_from(bytes.min(QUEUED_BYTES)).unwrap_or(u32::MAX)
}

/// A queued record once taken for a request: its origin, who learns the outcome, its share.
pub(super) type Waiter = (
    (TopicPartition, i64),
    Option<oneshot::Sender<Result<(), String>>>,
    Share,
);
