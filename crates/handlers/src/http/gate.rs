//! The HTTP/2 request body, and the gate between the attempt and hyper's connection task.
//!
//! hyper's HTTP/2 client writes a request from the connection's own task, after the attempt
//! handed it over, and the attempt may wait before that: for a connection, its TLS and HTTP/2
//! handshakes. Until the connection task takes the request (its first look at the body), the
//! attempt asks at each poll whether its partition's ownership still holds
//! ([`orderly_engine::ownership_holds`]) and withdraws the request once it lapsed. The gate
//! settles a race between the two: a request taken is the connection task's to send; one
//! withdrawn first is never sent whole (its body fails, so the stream is reset before it ends).
//! A request taken can still wait inside the connection task (for a stream the server allows,
//! for flow-control window); that wait is not watched.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};

const FRESH: u8 = 0;
const TAKEN: u8 = 1;
const WITHDRAWN: u8 = 2;

/// Who has a request: nobody yet, the connection task, or nobody ever (withdrawn).
#[derive(Debug, Default)]
pub(super) struct Gate(AtomicU8);

impl Gate {
    /// Whether neither side has decided yet.
    pub(super) fn is_fresh(&self) -> bool {
        self.0.load(Ordering::Acquire) == FRESH
    }

    /// The attempt withdraws the request: `false` when the connection task took it first.
    pub(super) fn withdraw(&self) -> bool {
        self.0
            .compare_exchange(FRESH, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The connection task takes the request: `false` when it was withdrawn first.
    fn take(&self) -> bool {
        match self
            .0
            .compare_exchange(FRESH, TAKEN, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state == TAKEN,
        }
    }
}

/// A request's body, behind its [`Gate`]: one data frame, none once withdrawn (an error
/// instead, and never the end of the stream).
#[derive(Debug)]
pub(super) struct GatedBody {
    data: Option<Bytes>,
    len: u64,
    gate: Arc<Gate>,
}

impl GatedBody {
    pub(super) fn new(data: Bytes, gate: Arc<Gate>) -> Self {
        GatedBody {
            len: data.len() as u64,
            data: (!data.is_empty()).then_some(data),
            gate,
        }
    }
}

/// The error of a withdrawn request's body.
#[derive(Debug)]
pub(super) struct Withdrawn;

impl std::fmt::Display for Withdrawn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request was withdrawn: its partition's ownership lapsed")
    }
}

impl std::error::Error for Withdrawn {}

impl hyper::body::Body for GatedBody {
    type Data = Bytes;
    type Error = Withdrawn;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Withdrawn>>> {
        let this = self.get_mut();
        if !this.gate.take() {
            return Poll::Ready(Some(Err(Withdrawn)));
        }
        Poll::Ready(this.data.take().map(|d| Ok(Frame::data(d))))
    }

    fn is_end_stream(&self) -> bool {
        self.gate.take() && self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        self.gate.take();
        SizeHint::with_exact(self.len)
    }
}

#[cfg(test)]
mod tests {
    use hyper::body::Body as _;

    use super::*;

    #[test]
    fn a_body_taken_first_cannot_be_withdrawn_and_one_withdrawn_first_never_ends() {
        let gate = Arc::new(Gate::default());
        let body = GatedBody::new(Bytes::from_static(b"x"), gate.clone());
        assert!(gate.is_fresh());
        assert!(!body.is_end_stream());
        assert!(!gate.is_fresh());
        assert!(!gate.withdraw(), "taken");

        let gate = Arc::new(Gate::default());
        let mut body = GatedBody::new(Bytes::new(), gate.clone());
        assert!(gate.withdraw());
        assert!(
            !body.is_end_stream(),
            "an empty body withdrawn does not end"
        );
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(matches!(
            Pin::new(&mut body).poll_frame(&mut cx),
            Poll::Ready(Some(Err(Withdrawn)))
        ));
    }
}
