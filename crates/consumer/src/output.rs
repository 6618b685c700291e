//! `OutputThread`: the thread replies are sent from.
//!
//! Handlers run on the caller's runtime and can keep every one of its threads busy for as long
//! as records are ready. A produce round spawned there waits for a free worker before it starts,
//! and its answer waits again before it is read: replies queue up behind the very handlers that
//! made them, and the commit that needs them waits too. The output thread runs a runtime of its
//! own, on which the consumer opens its produce and coordination connections (their readers
//! take answers off the sockets there) and the reply sinks spawn the tasks that send their
//! batches, so the operating system shares the cores between the handlers and the output as it
//! does with the fetch thread.

use std::future::Future;

use tokio::runtime::Handle;

use crate::runtime_thread::RuntimeThread;

/// The thread (`orderly-output`) output is sent from (see the module doc), or the caller's
/// runtime where it could not start.
#[derive(Debug)]
pub(crate) struct OutputThread {
    handle: Handle,
    thread: Option<RuntimeThread>,
}

impl OutputThread {
    /// Starts the thread, or, if it cannot start, uses the caller's runtime (logged).
    pub(crate) fn start() -> Self {
        match RuntimeThread::start("orderly-output") {
            Ok(thread) => OutputThread {
                handle: thread.handle().clone(),
                thread: Some(thread),
            },
            Err(e) => {
                tracing::warn!(%e, "cannot start the output thread; sending output on the caller's runtime");
                OutputThread {
                    handle: Handle::current(),
                    thread: None,
                }
            }
        }
    }

    /// The runtime output is sent on.
    pub(crate) fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// Stops the thread once the caller is done with its output: tasks still spawned on it are
    /// cancelled and its connections closed. Returns when the thread has ended.
    pub(crate) async fn close(self) {
        if let Some(thread) = self.thread {
            thread.stop().await;
        }
    }
}

/// Where a sink spawns its sending tasks: the output thread once the consumer set one, else the
/// caller's runtime (a sink used on its own, as in tests).
#[derive(Debug, Default)]
pub(crate) struct Spawner(std::sync::OnceLock<Handle>);

impl Spawner {
    /// Spawns the sink's tasks on `handle` from now on (the first call wins).
    pub(crate) fn set(&self, handle: Handle) {
        let _ = self.0.set(handle);
    }

    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match self.0.get() {
            Some(h) => {
                h.spawn(task);
            }
            None => {
                tokio::spawn(task);
            }
        }
    }
}
