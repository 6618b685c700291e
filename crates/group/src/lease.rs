//! The member's lease on its partitions: until when the group coordinator cannot have given them
//! to another member without this one hearing of it first.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Until when the member's ownership of its partitions holds: four fifths of the session
/// timeout after the send time of the last request the coordinator answered as a member of the
/// group (a heartbeat, JoinGroup, SyncGroup; in KIP-848 mode a ConsumerGroupHeartbeat). Only
/// answers extend it: a request that is sent and never answered (a poisoned connection, a
/// stalled proxy) proves nothing, and a coordinator that does not hear from the member expires
/// it a session timeout after the last request it did hear. An answer that says the member is
/// gone or fenced ends it at once. After that the coordinator may have moved the partitions
/// without this process knowing (it was frozen, it lost its coordinator while rejoining); a
/// reader checks the lease before it starts work on them rather than waiting for the member to
/// learn it. Cheap to clone; lock-free to read.
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

    /// The lease ends now (an answer said the member is gone, fenced, or failed fatally).
    pub(crate) fn end(&self) {
        self.inner.until.store(0, Ordering::Release);
    }

    fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.inner.base).as_nanos()).unwrap_or(u64::MAX)
    }
}

/// How long an answered request keeps the lease: the session timeout less a fifth of it. The
/// coordinator expires a member a session timeout after the last request it heard, which it
/// received after this process sent it; the fifth left over is the time a handler call started
/// just before the lease ended has to finish before another member can be given its partition
/// (2 s of a 10 s session, 9 s of the default 45 s).
pub(crate) fn lease_length(session_timeout: Duration) -> Duration {
    session_timeout - session_timeout / 5
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
        lease.renew(t0, Duration::from_secs(10));
        lease.end();
        assert!(!lease.holds(t0), "ended");
    }

    #[test]
    fn an_answer_keeps_the_lease_for_four_fifths_of_the_session() {
        assert_eq!(
            lease_length(Duration::from_secs(10)),
            Duration::from_secs(8)
        );
        assert_eq!(
            lease_length(Duration::from_secs(45)),
            Duration::from_secs(36)
        );
        assert_eq!(
            lease_length(Duration::from_secs(6)),
            Duration::from_millis(4800)
        );
    }
}
