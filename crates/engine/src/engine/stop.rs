//! [`StopHandle`]: an operator's second signal. It ends the dispatch loop without the drain:
//! running records are cancelled and only what is done is committed.

use std::sync::Arc;

/// Stops a running engine without waiting for its records in flight: an operator's second
/// Ctrl-C. Get it with [`Engine::stop_handle`](crate::Engine::stop_handle) before
/// [`Engine::run`](crate::Engine::run); clones share one state.
///
/// After [`StopHandle::stop_now`], `run` stops taking records (as on shutdown) and, instead of
/// draining for up to `drain_timeout`, cancels the records still running (their handler futures
/// are dropped), commits each partition's contiguous done watermark (with the completed offsets
/// above it in the metadata), answers pending revokes and returns. Records that were cancelled
/// are not committed: the next owner handles them again. Calling it during a normal drain cuts
/// that drain short the same way.
#[derive(Debug, Clone, Default)]
pub struct StopHandle(Arc<StopState>);

#[derive(Debug, Default)]
struct StopState {
    stopped: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl StopHandle {
    /// Stops the engine now (see the type's docs). Idempotent; never blocks.
    pub fn stop_now(&self) {
        self.0
            .stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    /// Whether [`StopHandle::stop_now`] was called.
    pub fn is_stopped(&self) -> bool {
        self.0.stopped.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Completes once [`StopHandle::stop_now`] was called. Cancel safe.
    pub async fn stopped(&self) {
        loop {
            // Created before the check, so a `stop_now` between the check and the wait wakes it.
            let notified = self.0.notify.notified();
            if self.is_stopped() {
                return;
            }
            notified.await;
        }
    }
}
