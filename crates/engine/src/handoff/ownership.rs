//! The lease a handler call can read just before its side effect ([`ownership_holds`], or an
//! [`Ownership`] handed to the task that acts for the call).
//!
//! The engine checks its source's lease before a handler call starts; a call may then wait
//! inside the handler (for a connection, a concurrency permit, a child's queue) before it acts.
//! A process frozen in that wait (SIGSTOP, a VM pause) wakes with the call about to act on a
//! record another member may own by now. While the engine polls a call's future, the call's
//! partition lease is this thread's current one, so the handler can ask at the last moment.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::source::Lease;

thread_local! {
    /// Whether a handler call with a lease is being polled on this thread (its lease in `LEASE`).
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
    /// The lease of the call being polled, kept after the poll: a source's partitions share one
    /// lease, so the next call on this thread finds it in place and clones nothing.
    static LEASE: RefCell<Option<Arc<dyn Lease>>> = const { RefCell::new(None) };
}

/// Whether the source's ownership of the partition whose record the calling handler is handling
/// still holds now: `false` once its lease lapsed (the member missed its session timeout, e.g.
/// while frozen), so a handler that waited can refrain from a side effect and fail the attempt
/// transiently instead (the engine starts no retry until the ownership holds again or the
/// partition moves). `true` outside a handler call and for sources without a lease. Only the
/// call's own future reads its lease here: a task the handler hands the record to reads
/// `true`, so a handler whose side effect happens in another task hands it an [`Ownership`].
pub fn ownership_holds() -> bool {
    !ACTIVE.get() || LEASE.with(|l| lease_holds(l.borrow().as_ref()))
}

/// Whether `lease` (none: no lease, nothing to lapse) holds now.
pub(crate) fn lease_holds(lease: Option<&Arc<dyn Lease>>) -> bool {
    lease.is_none_or(|l| l.holds(tokio::time::Instant::now()))
}

/// The ownership a handler call runs under, for a task that acts for the call away from its
/// future (a writer task that feeds a child's stdin): taken with [`Ownership::current`] inside
/// the call, asked with [`Ownership::holds`] right before the side effect, wherever that runs.
/// Cheap to clone (one reference count).
#[derive(Clone, Debug, Default)]
pub struct Ownership(Option<Arc<dyn Lease>>);

impl Ownership {
    /// The ownership of the partition whose record the calling handler is handling; outside a
    /// handler call, and for sources without a lease, one that always holds.
    pub fn current() -> Self {
        Ownership(if ACTIVE.get() {
            LEASE.with(|l| l.borrow().clone())
        } else {
            None
        })
    }

    /// Whether it still holds now, as [`ownership_holds`] says for the call itself.
    pub fn holds(&self) -> bool {
        lease_holds(self.0.as_ref())
    }
}

/// A handler call's future, polled with its partition's lease as this thread's current one.
pub(crate) struct WithLease<'a, F: ?Sized> {
    lease: Option<&'a Arc<dyn Lease>>,
    fut: Pin<&'a mut F>,
}

impl<'a, F: ?Sized> WithLease<'a, F> {
    pub(crate) fn new(lease: Option<&'a Arc<dyn Lease>>, fut: Pin<&'a mut F>) -> Self {
        WithLease { lease, fut }
    }
}

/// Puts back what a poll replaced, also when the poll unwinds.
struct Restore {
    active: bool,
    lease: Option<Option<Arc<dyn Lease>>>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        ACTIVE.set(self.active);
        if let Some(previous) = self.lease.take() {
            LEASE.with(|l| *l.borrow_mut() = previous);
        }
    }
}

impl<F: Future + ?Sized> Future for WithLease<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let mut restore = Restore {
            active: ACTIVE.replace(this.lease.is_some()),
            lease: None,
        };
        if let Some(ours) = this.lease {
            LEASE.with(|l| {
                let mut l = l.borrow_mut();
                if !l.as_ref().is_some_and(|cur| Arc::ptr_eq(cur, ours)) {
                    let previous = l.replace(Arc::clone(ours));
                    // Put back only what a call on this thread is still polling.
                    if restore.active {
                        restore.lease = Some(previous);
                    }
                }
            });
        }
        this.fut.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::pin;
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

    #[derive(Debug)]
    struct Flag(AtomicBool);

    impl Lease for Flag {
        fn holds(&self, _now: tokio::time::Instant) -> bool {
            self.0.load(Relaxed)
        }
    }

    fn lease(holds: bool) -> Arc<dyn Lease> {
        Arc::new(Flag(AtomicBool::new(holds)))
    }

    /// A call polled inside another call's poll (a handler driving another handler) reads its
    /// own lease, the outer call reads its own again once the inner poll returned, and a call
    /// without a lease, like code outside any call, reads `true`.
    #[tokio::test]
    async fn each_call_reads_the_lease_of_its_own_partition() {
        let lapsed = lease(false);
        let holding = lease(true);
        let outer = async {
            let before = ownership_holds();
            let inner = pin!(async { ownership_holds() });
            let inner = WithLease::new(Some(&holding), inner).await;
            let unleased = pin!(async { ownership_holds() });
            let unleased = WithLease::new(None, unleased).await;
            (before, inner, unleased, ownership_holds())
        };
        let outer = pin!(outer);
        let seen = WithLease::new(Some(&lapsed), outer).await;
        assert_eq!(seen, (false, true, true, false));
        assert!(ownership_holds(), "outside a call");
        // The next call on this thread with the other lease reads that one.
        let again = pin!(async { ownership_holds() });
        assert!(!WithLease::new(Some(&lapsed), again).await);
        let again = pin!(async { ownership_holds() });
        assert!(WithLease::new(Some(&holding), again).await);
    }

    /// An `Ownership` taken in a call reads that call's lease wherever it is asked; one taken
    /// outside a call, or in a call without a lease, holds, though the thread keeps the last
    /// call's lease in place.
    #[tokio::test]
    async fn an_ownership_taken_in_a_call_reads_its_lease_anywhere() {
        let lapsed = lease(false);
        let taken = pin!(async { Ownership::current() });
        let taken = WithLease::new(Some(&lapsed), taken).await;
        assert!(!taken.holds());
        assert!(Ownership::current().holds(), "outside a call");
        let unleased = pin!(async { Ownership::current() });
        assert!(WithLease::new(None, unleased).await.holds());
        let elsewhere = tokio::spawn(async move { taken.holds() });
        assert!(!elsewhere.await.unwrap());
    }
}
