//! Event-id deduplication: a bounded store per session behind a trait.

/// One session's memory of event ids it already handled. It lives as long as the session
/// task: an evicted session forgets, so memory follows active sessions.
pub trait DedupStore: Send + 'static {
    /// True if `event_id` was already handled by this session (the record is skipped).
    fn seen(&self, event_id: &[u8]) -> bool;
    /// Remembers `event_id` as handled. Dead-lettered records are not remembered: their replay
    /// (the same event id, written back by `orderly dlq replay`) must reach the handler.
    fn insert(&mut self, event_id: &[u8]);
}

/// Creates the per-session stores.
pub trait DedupStores: Send + Sync + 'static {
    /// A fresh, empty store for a new session.
    fn create(&self) -> Box<dyn DedupStore>;
}

/// The default store: the last `capacity` event ids of the session (FIFO). Linear search is the
/// fastest choice at the small capacities that fit a per-session memory budget; each id is kept
/// with a 64-bit hash of it, so a lookup compares integers and reads an id's bytes only when its
/// hash matches (the bytes comparison keeps the answer exact). An id pushed out by a new one of
/// the same length lends it its allocation.
#[derive(Debug, Clone, Default)]
pub struct RecentIds {
    ids: std::collections::VecDeque<(u64, Box<[u8]>)>,
    capacity: usize,
}

impl RecentIds {
    /// A store that keeps the last `capacity` ids.
    pub fn new(capacity: usize) -> Self {
        Self {
            ids: std::collections::VecDeque::new(),
            capacity,
        }
    }

    fn contains(&self, hash: u64, event_id: &[u8]) -> bool {
        self.ids.iter().any(|(h, i)| *h == hash && **i == *event_id)
    }
}

fn id_hash(event_id: &[u8]) -> u64 {
    crate::hash::hash64(crate::hash::DEFAULT_SEED, event_id)
}

impl DedupStore for RecentIds {
    fn seen(&self, event_id: &[u8]) -> bool {
        !self.ids.is_empty() && self.contains(id_hash(event_id), event_id)
    }

    fn insert(&mut self, event_id: &[u8]) {
        if self.capacity == 0 {
            return;
        }
        let hash = id_hash(event_id);
        if self.contains(hash, event_id) {
            return;
        }
        let spare = if self.ids.len() >= self.capacity {
            self.ids.pop_front().map(|(_, b)| b)
        } else {
            None
        };
        let id = match spare {
            Some(mut b) if b.len() == event_id.len() => {
                b.copy_from_slice(event_id);
                b
            }
            _ => event_id.into(),
        };
        self.ids.push_back((hash, id));
    }
}

/// Factory for [`RecentIds`] stores of a fixed capacity (default 8). Each remembered id costs its
/// length plus about 32 bytes while its session is active; duplicates from producer retries and
/// redelivery arrive close together, so a short memory catches them.
#[derive(Debug, Clone, Copy)]
pub struct RecentIdsStores {
    /// Ids kept per session.
    pub capacity: usize,
}

impl Default for RecentIdsStores {
    fn default() -> Self {
        Self { capacity: 8 }
    }
}

impl DedupStores for RecentIdsStores {
    fn create(&self) -> Box<dyn DedupStore> {
        Box::new(RecentIds::new(self.capacity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_fifo() {
        let mut s = RecentIdsStores { capacity: 2 }.create();
        s.insert(b"a");
        s.insert(b"b");
        assert!(s.seen(b"a") && s.seen(b"b"));
        s.insert(b"c");
        assert!(!s.seen(b"a") && s.seen(b"c"));
    }

    proptest::proptest! {
        /// Against a plain FIFO of the last `capacity` distinct ids: short ids from a small
        /// alphabet, so repeats, same-length replacements (the reused allocation) and ids that
        /// differ only in length all occur.
        #[test]
        fn matches_a_fifo_of_the_last_ids(
            capacity in 0usize..5,
            ops in proptest::collection::vec(
                (proptest::bool::ANY, proptest::collection::vec(0u8..3, 0..4)),
                0..200,
            ),
        ) {
            let mut store = RecentIds::new(capacity);
            let mut model: std::collections::VecDeque<Vec<u8>> = Default::default();
            for (insert, id) in ops {
                if insert {
                    store.insert(&id);
                    if capacity > 0 && !model.contains(&id) {
                        if model.len() >= capacity {
                            model.pop_front();
                        }
                        model.push_back(id.clone());
                    }
                }
                proptest::prop_assert_eq!(store.seen(&id), model.contains(&id));
                for m in &model {
                    proptest::prop_assert!(store.seen(m));
                }
            }
        }
    }
}
