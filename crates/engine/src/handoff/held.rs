//! A handler call's waits for its endpoint ([`waiting_for_endpoint`]), which the attempt timeout
//! does not count.
//!
//! The attempt timeout polls the call with a flag of this thread cleared; a wait for the endpoint
//! that stays pending sets it, so the timeout learns, after each poll, whether the call is pending
//! on such a wait ([`poll_held`]).

use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::task::Poll;

thread_local! {
    /// Set while a wait for the endpoint, polled on this thread, stays pending.
    static HELD: Cell<bool> = const { Cell::new(false) };
}

/// Marks `wait` as a wait for the handler's endpoint, not work on the record: a circuit that
/// holds requests while the endpoint is down, a `Retry-After` the service asked for, a queue
/// for one of the endpoint's request slots. While the call is pending on such a wait, the
/// engine's attempt timeout
/// ([`EngineConfig::attempt_timeout`](crate::EngineConfig::attempt_timeout)) does not run; it
/// starts afresh once the call waits on anything else. Nor does the stuck-gap rule
/// ([`EngineConfig::stuck_timeout`](crate::EngineConfig::stuck_timeout)) stop such a call: once
/// the wait ends, the record's stuck clock starts again. A call should not wait on other work
/// beside it (in a `join!`): that work would go untimed meanwhile. Outside a handler call it is
/// `wait`.
pub async fn waiting_for_endpoint<F: Future>(wait: F) -> F::Output {
    let mut wait = pin!(wait);
    std::future::poll_fn(|cx| {
        let poll = wait.as_mut().poll(cx);
        if poll.is_pending() {
            HELD.set(true);
        }
        poll
    })
    .await
}

/// Polls a handler call through `poll`; with its result, whether the call is pending on a wait
/// for its endpoint.
pub(crate) fn poll_held<T>(poll: impl FnOnce() -> Poll<T>) -> (Poll<T>, bool) {
    let outer = HELD.replace(false);
    let polled = poll();
    let held = HELD.get() && polled.is_pending();
    // An enclosing `poll_held` (the stuck-gap guard around the attempt timeout) learns it too.
    HELD.set(outer || held);
    (polled, held)
}
