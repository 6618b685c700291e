//! The member's lease on its partitions: until when the group coordinator cannot have given them
//! to another member without this one hearing of it first.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Until when the member's ownership of its partitions holds: a session timeout after the last
/// heartbeat (or SyncGroup) the coordinator answered was sent, or a rebalance timeout after a
/// JoinGroup was sent (a coordinator keeps a member that is rejoining until the rebalance ends).
/// After that the coordinator may have moved the partitions without this process knowing, for
/// instance while it was frozen; a reader checks the lease before it starts work on them rather
/// than waiting for the member's next heartbeat to tell it. Cheap to clone; lock-free to read.
#[derive(Clone)]
pub struct OwnershipLease {
    inner: Arc<Inner>,
}

struct Inner {
    base: Instant,
    /// Nanoseconds after `base` at which the lease ends (0: never held).
    until: AtomicU64,
}

impl std::fmt::Debug for OwnershipLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let now = Instant::now();
        f.debug_struct("OwnershipLease")
            .field("holds", &self.holds(now))
            .finish()
    }
}

impl Default for OwnershipLease {
    fn default() -> Self {
        OwnershipLease {
            inner: Arc::new(Inner {
                base: Instant::now(),
                until: AtomicU64::new(0),
            }),
        }
    }
}

impl OwnershipLease {
    /// Whether the ownership holds at `now`.
    pub fn holds(&self, now: Instant) -> bool {
        self.nanos(now) < self.inner.until.load(Ordering::Acquire)
    }

    /// The lease now ends `length` after `from` (the send time of the request the coordinator
    /// answered), earlier or later than before.
    pub(crate) fn renew(&self, from: Instant, length: Duration) {
        let until = self
            .nanos(from)
            .saturating_add(u64::try_from(length.as_nanos()).unwrap_or(u64::MAX));
        self.inner.until.store(until, Ordering::Release);
    }

    fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.inner.base).as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_from_a_renewal_until_its_length_passed() {
        let lease = OwnershipLease::default();
        let t0 = Instant::now();
        assert!(!lease.holds(t0), "never renewed");
        lease.renew(t0, Duration::from_secs(10));
        assert!(lease.holds(t0 + Duration::from_secs(9)));
        assert!(!lease.holds(t0 + Duration::from_secs(10)));
        // A shorter renewal shortens it.
        lease.renew(t0, Duration::from_secs(2));
        assert!(!lease.holds(t0 + Duration::from_secs(3)));
    }
}
