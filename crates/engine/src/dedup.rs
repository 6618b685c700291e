//! Event-id deduplication: a bounded store per session behind a trait.

/// One session's memory of event ids it already finished. It lives as long as the session
/// task: an evicted session forgets, so memory follows active sessions.
pub trait DedupStore: Send + 'static {
    /// True if `event_id` was already finished by this session (the record is skipped).
    fn seen(&self, event_id: &[u8]) -> bool;
    /// Remembers `event_id` as finished (handled or dead-lettered).
    fn insert(&mut self, event_id: &[u8]);
}

/// Creates the per-session stores.
pub trait DedupStores: Send + Sync + 'static {
    /// A fresh, empty store for a new session.
    fn create(&self) -> Box<dyn DedupStore>;
}

/// The default store: the last `capacity` event ids of the session (FIFO). Linear search is the
/// fastest choice at the small capacities that fit a per-session memory budget.
#[derive(Debug, Clone, Default)]
pub struct RecentIds {
    ids: std::collections::VecDeque<Box<[u8]>>,
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
}

impl DedupStore for RecentIds {
    fn seen(&self, event_id: &[u8]) -> bool {
        self.ids.iter().any(|i| &**i == event_id)
    }

    fn insert(&mut self, event_id: &[u8]) {
        if self.capacity == 0 || self.seen(event_id) {
            return;
        }
        if self.ids.len() >= self.capacity {
            self.ids.pop_front();
        }
        self.ids.push_back(event_id.into());
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
}
