//! [`FetchState`]: the positions the fetch loop fetches from, one per owned partition with the
//! epoch of its assignment, shared with the rebalance bridge and the source; a partition's
//! position never moves backwards within an epoch.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use orderly_engine::TopicPartition;
use tokio::sync::Notify;

/// A partition to fetch: where, from which offset, under which assignment epoch.
pub(super) type Fetchable = (TopicPartition, i64, u64);

#[derive(Debug)]
pub(super) struct PartState {
    pub(super) epoch: u64,
    pub(super) position: i64,
    pub(super) paused: bool,
    pub(super) corrupt_seen: u32,
    /// The last fetch response that answered for this partition without an error, or when it
    /// became fetchable (assigned, resumed): the start of the wait for the next response.
    pub(super) answered: Instant,
}

/// A partition that is being fetched (assigned, not paused) but got no answer lately
/// ([`FetchState::unanswered`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unanswered {
    /// The partition.
    pub partition: TopicPartition,
    /// Time since its last fetch response (or since it became fetchable).
    pub since: Duration,
}

/// Positions of the owned partitions, shared by the fetch loop, the rebalance bridge and the
/// source (pause/resume). Never held across an await. An application reads it through
/// [`Consumer::fetch_state`](crate::Consumer::fetch_state) (readiness: in the group, owning
/// partitions, answered lately); only the consumer changes it.
#[derive(Debug, Default)]
pub struct FetchState {
    pub(super) parts: Mutex<HashMap<TopicPartition, PartState>>,
    pub(super) next_epoch: std::sync::atomic::AtomicU64,
    pub(super) wake: Notify,
    /// Set once the member's latest rebalance gave it an assignment (possibly empty), cleared
    /// when it loses its partitions (out of the group until it rejoins).
    pub(super) in_group: std::sync::atomic::AtomicBool,
}

impl FetchState {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TopicPartition, PartState>> {
        // Only plain data lives under this lock; a panic elsewhere leaves it consistent.
        self.parts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new epoch for an assignment.
    pub(crate) fn new_epoch(&self) -> u64 {
        self.next_epoch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
    }

    /// Starts fetching `tp` at `position` under `epoch`.
    #[cfg(test)]
    pub(crate) fn add(&self, tp: TopicPartition, position: i64, epoch: u64) {
        self.add_all([(tp, position, epoch)]);
    }

    /// Starts fetching each `(partition, position, epoch)`, all at once: the fetch loop, which
    /// runs on its own thread, sees either none or all of them. Added one by one, an assignment's
    /// first fetch could name only the partitions added before the loop woke, and the rest waited
    /// for that fetch to come back (up to the long-poll wait when the first ones had no data).
    pub(crate) fn add_all(&self, parts: impl IntoIterator<Item = (TopicPartition, i64, u64)>) {
        let now = Instant::now();
        let mut map = self.lock();
        let mut added = false;
        for (tp, position, epoch) in parts {
            added = true;
            map.insert(
                tp,
                PartState {
                    epoch,
                    position,
                    paused: false,
                    corrupt_seen: 0,
                    answered: now,
                },
            );
        }
        drop(map);
        if added {
            self.wake.notify_one();
        }
    }

    /// Stops fetching `tp`.
    pub(crate) fn remove(&self, tp: &TopicPartition) {
        self.lock().remove(tp);
    }

    /// Pauses or resumes `tp` (no-op if not owned).
    pub(crate) fn set_paused(&self, tp: &TopicPartition, paused: bool) {
        if let Some(p) = self.lock().get_mut(tp) {
            if p.paused && !paused {
                p.answered = Instant::now();
            }
            p.paused = paused;
        }
        if !paused {
            self.wake.notify_one();
        }
    }

    /// Records whether the member is in the group with an assignment (see [`FetchState::in_group`]).
    pub(crate) fn set_in_group(&self, yes: bool) {
        self.in_group
            .store(yes, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the member joined the group and received its assignment, which may be empty: a
    /// member beyond the partition count is a standby in the group, not a failure. False before
    /// the first assignment and after a loss until the member's next assignment.
    pub fn in_group(&self) -> bool {
        self.in_group.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether any partition is owned (assigned to this member and not yet revoked).
    pub fn owns_any(&self) -> bool {
        !self.lock().is_empty()
    }

    /// The partitions being fetched (owned, not paused for backpressure) whose last fetch
    /// response is older than `bound`, the longest first: what a readiness probe reports as "not
    /// fetching". A paused partition is not fetched on purpose, so it never counts; one that
    /// became fetchable gets `bound` from that moment.
    pub fn unanswered(&self, bound: Duration) -> Vec<Unanswered> {
        let now = Instant::now();
        let mut out: Vec<Unanswered> = self
            .lock()
            .iter()
            .filter(|(_, p)| !p.paused)
            .map(|(tp, p)| Unanswered {
                partition: tp.clone(),
                since: now.saturating_duration_since(p.answered),
            })
            .filter(|u| u.since > bound)
            .collect();
        out.sort_by_key(|u| std::cmp::Reverse(u.since));
        out
    }

    /// Notes a fetch response without error for `tp` under `epoch`.
    pub(super) fn note_answered(&self, tp: &TopicPartition, epoch: u64) {
        if let Some(p) = self.lock().get_mut(tp) {
            if p.epoch == epoch {
                p.answered = Instant::now();
            }
        }
    }

    /// The fetchable partitions `(tp, position, epoch)`.
    pub(super) fn plan(&self) -> Vec<Fetchable> {
        self.lock()
            .iter()
            .filter(|(_, p)| !p.paused)
            .map(|(tp, p)| (tp.clone(), p.position, p.epoch))
            .collect()
    }

    /// The paused partitions `(tp, epoch)`.
    pub(super) fn paused(&self) -> Vec<(TopicPartition, u64)> {
        self.lock()
            .iter()
            .filter(|(_, p)| p.paused)
            .map(|(tp, p)| (tp.clone(), p.epoch))
            .collect()
    }

    /// Moves `tp` to `next` if it is still at `from` under `epoch` (a rebalance or a reset in
    /// between wins). Returns whether it moved.
    pub(super) fn advance(&self, tp: &TopicPartition, epoch: u64, from: i64, next: i64) -> bool {
        match self.lock().get_mut(tp) {
            Some(p) if p.epoch == epoch && p.position == from => {
                p.position = next;
                p.corrupt_seen = 0;
                true
            }
            _ => false,
        }
    }

    pub(super) fn note_corrupt(&self, tp: &TopicPartition, epoch: u64) -> u32 {
        match self.lock().get_mut(tp) {
            Some(p) if p.epoch == epoch => {
                p.corrupt_seen += 1;
                p.corrupt_seen
            }
            _ => 0,
        }
    }
}
