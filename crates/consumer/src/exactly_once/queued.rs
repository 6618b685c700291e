//! What waits in the open transaction's queues: a queued record, its share of the gate and of
//! the queues' room, and the bound on that room.

use std::collections::VecDeque;
use std::sync::Arc;

use orderly_engine::TopicPartition;
use orderly_protocol::ProduceRecord;
use tokio::sync::{OwnedRwLockReadGuard, OwnedSemaphorePermit, oneshot};

/// The open transaction's queues, one per output topic. A consumer writes to one or two (its
/// reply topic, its dead-letter topic), so a queue is found by comparing names.
#[derive(Debug, Default)]
pub(super) struct Queues(Vec<Queue>);

impl Queues {
    pub(super) fn get_mut(&mut self, topic: &str) -> Option<&mut Queue> {
        self.0.iter_mut().find(|q| q.topic == topic)
    }

    /// `topic`'s queue, a new empty one if it has none.
    pub(super) fn entry(&mut self, topic: &str) -> &mut Queue {
        let i = match self.0.iter().position(|q| q.topic == topic) {
            Some(i) => i,
            None => {
                self.0.push(Queue {
                    topic: topic.to_owned(),
                    waiting: Vec::new(),
                    sending: false,
                });
                self.0.len() - 1
            }
        };
        &mut self.0[i]
    }
}

/// The records waiting for one output topic, per partition, and whether a task is sending them.
#[derive(Debug)]
pub(super) struct Queue {
    topic: String,
    /// One entry per partition written to (few: a topic's partitions), kept with its capacity.
    pub(super) waiting: Vec<Waiting>,
    pub(super) sending: bool,
}

impl Queue {
    /// Queues `record` for `partition`, `waiter` beside it.
    pub(super) fn push(&mut self, partition: i32, record: ProduceRecord, waiter: Waiter) {
        let w = match self.waiting.iter().position(|w| w.partition == partition) {
            Some(i) => &mut self.waiting[i],
            None => {
                self.waiting.push(Waiting {
                    partition,
                    records: VecDeque::new(),
                    waiters: VecDeque::new(),
                });
                let last = self.waiting.len() - 1;
                &mut self.waiting[last]
            }
        };
        w.records.push_back(record);
        w.waiters.push_back(waiter);
    }

    /// Whether no record waits.
    pub(super) fn is_empty(&self) -> bool {
        self.waiting.iter().all(|w| w.records.is_empty())
    }
}

/// One output partition's queued records and, side by side, who waits for each: a round takes
/// the records as the request's batch and the waiters as they are, without regrouping.
#[derive(Debug)]
pub(super) struct Waiting {
    pub(super) partition: i32,
    pub(super) records: VecDeque<ProduceRecord>,
    pub(super) waiters: VecDeque<Waiter>,
}

/// What a queued record holds until its request was answered: its write's share of the gate
/// (no commit until then) and of the queues' room. The records of one write share one; a
/// write of one record (a reply's usual case) holds it alone, without an allocation.
#[derive(Debug)]
pub(super) enum Share {
    Alone {
        _held: (OwnedRwLockReadGuard<()>, OwnedSemaphorePermit),
    },
    Shared {
        _held: Arc<(OwnedRwLockReadGuard<()>, OwnedSemaphorePermit)>,
    },
}

impl Share {
    /// The shares of a write of `n` records.
    pub(super) fn split(
        gate: OwnedRwLockReadGuard<()>,
        room: OwnedSemaphorePermit,
        n: usize,
    ) -> impl Iterator<Item = Share> {
        let (alone, shared) = if n == 1 {
            (
                Some(Share::Alone {
                    _held: (gate, room),
                }),
                None,
            )
        } else {
            (None, Some(Arc::new((gate, room))))
        };
        alone.into_iter().chain(
            shared
                .into_iter()
                .flat_map(move |s| std::iter::repeat_n(s, n).map(|_held| Share::Shared { _held })),
        )
    }
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

/// What waits on a queued record: its origin, who learns the outcome, its share.
#[derive(Debug)]
pub(super) struct Waiter {
    /// The partition and offset of the record whose output this is.
    pub(super) origin: (TopicPartition, i64),
    /// Told the outcome, if its write waits for it.
    pub(super) ack: Option<oneshot::Sender<Result<(), String>>>,
    /// Held until the request was answered.
    pub(super) _share: Share,
}
