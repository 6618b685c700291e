//! The member's shutdown signal: the caller's future or [`crate::GroupHandle::close`], whichever first.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::watch;

/// The shutdown signal: the caller's future or [`GroupHandle::close`], whichever first.
pub(crate) struct Shutdown {
    fut: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    close: watch::Receiver<bool>,
    fired: bool,
}

impl Shutdown {
    /// Fires when `fut` completes or `close` turns `true`.
    pub(crate) fn new(
        fut: impl Future<Output = ()> + Send + 'static,
        close: watch::Receiver<bool>,
    ) -> Self {
        Self {
            fut: Some(Box::pin(fut)),
            close,
            fired: false,
        }
    }

    /// Whether [`Shutdown::wait`] has seen the request.
    pub(crate) fn fired(&self) -> bool {
        self.fired
    }

    /// Completes once shutdown was requested (immediately if it already was). Cancel safe.
    pub(crate) async fn wait(&mut self) {
        if self.fired || *self.close.borrow() {
            self.fired = true;
            return;
        }
        let close = &mut self.close;
        let closed = async {
            // Err = every handle dropped; that is not a close request.
            while close.changed().await.is_ok() {
                if *close.borrow() {
                    return;
                }
            }
            std::future::pending::<()>().await;
        };
        match self.fut.as_mut() {
            Some(f) => tokio::select! {
                _ = f => {}
                _ = closed => {}
            },
            None => closed.await,
        }
        self.fut = None;
        self.fired = true;
    }
}
