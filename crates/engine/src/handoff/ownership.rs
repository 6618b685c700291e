//! The lease a handler call can read just before its side effect ([`ownership_holds`]).
//!
//! The engine checks its source's lease before a handler call starts; a call may then wait
//! inside the handler (for a connection, a concurrency permit) before it acts. A process frozen
//! in that wait (SIGSTOP, a VM pause) wakes with the call about to act on a record another
//! member may own by now. While the engine polls a call's future, the call's partition lease is
//! this thread's current one, so the handler can ask at the last moment.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::source::Lease;

thread_local! {
    static CURRENT: RefCell<Option<Arc<dyn Lease>>> = const { RefCell::new(None) };
}

/// Whether the source's ownership of the partition whose record the calling handler is handling
/// still holds now: `false` once its lease lapsed (the member missed its session timeout, e.g.
/// while frozen), so a handler that waited can refrain from a side effect and fail the attempt
/// transiently instead (the engine starts no retry until the ownership holds again or the
/// partition moves). `true` outside a handler call and for sources without a lease.
pub fn ownership_holds() -> bool {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .is_none_or(|l| l.holds(tokio::time::Instant::now()))
    })
}

/// A handler call's future, polled with its partition's lease as this thread's current one.
pub(crate) struct WithLease<'a, F: ?Sized> {
    lease: Option<Arc<dyn Lease>>,
    fut: Pin<&'a mut F>,
}

impl<'a, F: ?Sized> WithLease<'a, F> {
    pub(crate) fn new(lease: Option<Arc<dyn Lease>>, fut: Pin<&'a mut F>) -> Self {
        WithLease { lease, fut }
    }
}

impl<F: Future + ?Sized> Future for WithLease<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let outer = CURRENT.with(|c| c.replace(this.lease.take()));
        let polled = this.fut.as_mut().poll(cx);
        this.lease = CURRENT.with(|c| c.replace(outer));
        polled
    }
}
