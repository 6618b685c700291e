//! `RuntimeThread`: a named thread running a single-threaded tokio runtime until it is stopped.
//! The consumer's fetch thread and output thread are two of them (see the crate docs,
//! "Threads"): each opens its connections and spawns its tasks on the thread's [`Handle`].

use tokio::runtime::{Handle, Runtime};
use tokio::sync::oneshot;

/// A thread running a single-threaded tokio runtime. Work reaches it through
/// [`RuntimeThread::handle`]: tasks spawned there and connections opened there run on this
/// thread only. It runs until [`RuntimeThread::stop`], or until the value is dropped; the tasks
/// still spawned then are cancelled.
#[derive(Debug)]
pub(crate) struct RuntimeThread {
    handle: Handle,
    stop: oneshot::Sender<()>,
    ended: oneshot::Receiver<()>,
}

/// Why a [`RuntimeThread`] did not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// The runtime could not be built (its I/O or time driver).
    #[error("cannot build the runtime: {0}")]
    Runtime(std::io::Error),
    /// The operating system refused the thread.
    #[error("cannot start the thread: {0}")]
    Thread(std::io::Error),
}

impl RuntimeThread {
    /// Builds the runtime and starts the thread `name` that runs it. Returns at once: the
    /// caller (on a runtime or not) never waits for the thread.
    pub(crate) fn start(name: &str) -> Result<Self, StartError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(StartError::Runtime)?;
        let handle = rt.handle().clone();
        let (stop, stop_rx) = oneshot::channel::<()>();
        let (ended_tx, ended) = oneshot::channel::<()>();
        // The runtime goes to the thread once it has started; if it cannot start, the runtime
        // is still here, to be shut down without blocking (dropping it would block, which a
        // caller on a runtime must not).
        let (rt_tx, rt_rx) = std::sync::mpsc::channel::<Runtime>();
        let started = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                if let Ok(rt) = rt_rx.recv() {
                    rt.block_on(async {
                        let _ = stop_rx.await;
                    });
                    // Dropping the runtime cancels whatever is still spawned on it.
                    drop(rt);
                }
                let _ = ended_tx.send(());
            });
        match started {
            Ok(_) => {
                // The thread only ends before receiving if it panicked; `ended` then reports it.
                if let Err(std::sync::mpsc::SendError(rt)) = rt_tx.send(rt) {
                    rt.shutdown_background();
                }
                Ok(RuntimeThread {
                    handle,
                    stop,
                    ended,
                })
            }
            Err(e) => {
                rt.shutdown_background();
                Err(StartError::Thread(e))
            }
        }
    }

    /// The thread's runtime.
    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Stops the thread: the tasks still spawned on it are cancelled and the connections opened
    /// there closed. Returns when the thread has ended.
    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.ended.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spawned work runs on the named thread, and `stop` cancels what is still spawned there
    /// before it returns.
    #[tokio::test]
    async fn work_runs_on_the_named_thread_and_stop_cancels_the_rest() {
        let thread = RuntimeThread::start("orderly-test-rt").unwrap();
        let name = thread
            .handle()
            .spawn(async { std::thread::current().name().map(str::to_owned) })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("orderly-test-rt"));

        /// Sends when dropped: the task holding it was cancelled.
        struct Dropped(Option<std::sync::mpsc::Sender<()>>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                if let Some(tx) = self.0.take() {
                    let _ = tx.send(());
                }
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let (running_tx, running) = oneshot::channel();
        thread.handle().spawn(async move {
            let _guard = Dropped(Some(tx));
            let _ = running_tx.send(());
            std::future::pending::<()>().await;
        });
        running.await.unwrap();
        thread.stop().await;
        assert_eq!(
            rx.try_recv(),
            Ok(()),
            "the pending task was cancelled by then"
        );
    }

    /// A value dropped without `stop` ends its thread too (as the consumer's future dropped
    /// mid-run leaves no thread behind).
    #[tokio::test]
    async fn a_dropped_thread_ends() {
        let thread = RuntimeThread::start("orderly-test-rt").unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        thread.handle().spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        drop(thread);
        // The task's sender is dropped with it when the thread's runtime goes.
        assert!(
            tokio::time::timeout(std::time::Duration::from_secs(10), rx)
                .await
                .unwrap()
                .is_err()
        );
    }
}
