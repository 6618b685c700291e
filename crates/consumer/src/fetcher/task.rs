//! The fetch thread (`orderly-fetch`): its runtime, the fetch loop and the lag poller beside it,
//! and the handle that stops them.

use std::sync::Arc;

use orderly_group::AutoOffsetReset;
use orderly_protocol::ConnectionKind;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::config::FetchConfig;
use super::fetch_loop::fetch_loop;
use super::lag::lag_loop;
use super::state::FetchState;
use crate::handoff::Internal;
use crate::metadata_cache::MetadataCache;
use crate::runtime_thread::{RuntimeThread, StartError};

/// Runs the fetch loop and the lag poller of paused partitions until `stop` turns true or the
/// source side is gone. `reset` is the group's `auto_offset_reset`, applied to positions the
/// broker reports out of range.
///
/// Each leader broker has at most one fetch in flight, and brokers are independent: a long poll
/// waiting on an idle broker never holds back the fetches of a busy one. A broker whose fetch
/// failed is left alone for a backoff that grows with its consecutive failures.
pub(crate) async fn run(
    cluster: MetadataCache,
    state: Arc<FetchState>,
    config: FetchConfig,
    reset: AutoOffsetReset,
    tx: mpsc::Sender<Internal>,
    stop: watch::Receiver<bool>,
) {
    // Two futures of one task: the fetch loop never awaits the lag poller, and `run` returns only
    // when both have ended.
    tokio::join!(
        fetch_loop(&cluster, &state, &config, reset, &tx, stop.clone()),
        lag_loop(&cluster, &state, &config, &tx, stop),
    );
}

/// The fetch loop running on its own thread, or as a task where no thread could be started
/// ([`spawn`]).
pub(crate) enum FetchTask {
    /// The loop as a task of the fetch thread, which is stopped once the loop has ended.
    Thread {
        /// The fetch thread.
        thread: RuntimeThread,
        /// The loop on it.
        task: JoinHandle<()>,
    },
    /// The loop as a task of the caller's runtime.
    Task(JoinHandle<()>),
    /// The fetch thread's runtime could not be built: the loop never ran (the source was told,
    /// `Internal::Fatal`).
    Failed,
}

impl FetchTask {
    /// Waits until the fetch loop has ended (after `stop`, or once the source side is gone), and
    /// its thread with it.
    pub(crate) async fn wait(self) {
        match self {
            FetchTask::Thread { thread, task } => {
                // An error is a loop that panicked: it has ended all the same.
                let _ = task.await;
                thread.stop().await;
            }
            FetchTask::Task(task) => {
                let _ = task.await;
            }
            FetchTask::Failed => {}
        }
    }
}

/// Starts [`run`] on a thread of its own (`orderly-fetch`, a single-threaded tokio runtime),
/// where the fetch connections are opened too (`ConnectionPool::open_on`). The other kinds stay
/// where the caller opens them (the consumer: on its output thread, which outlives the final
/// commit and the LeaveGroup; the fetch loop refreshes metadata and reads offsets over
/// coordination connections, and this thread ends at shutdown before both).
///
/// Why a thread: the fetch loop is I/O and decoding, the engine's workers are the handlers' CPU.
/// On one runtime, a response waits to be read until a runtime thread is free to poll its I/O
/// driver, which a runtime busy with handlers does only between task polls, and the fetch loop
/// (one fetch in flight per broker) stalls behind it; a handler that blocks its thread stops
/// fetching altogether (test `fetching_goes_on_while_a_handler_blocks_the_runtime_thread`). The
/// operating system shares the cores among threads, and a thread woken by its socket runs soon.
/// If the thread cannot be started, the loop runs as a task of the caller's runtime; if its
/// runtime cannot be built, the consumer stops with the error.
pub(crate) fn spawn(
    cluster: MetadataCache,
    state: Arc<FetchState>,
    config: FetchConfig,
    reset: AutoOffsetReset,
    tx: mpsc::Sender<Internal>,
    stop: watch::Receiver<bool>,
) -> FetchTask {
    match RuntimeThread::start("orderly-fetch") {
        Ok(thread) => {
            cluster
                .pool()
                .open_on(ConnectionKind::Fetch, thread.handle().clone());
            let task = thread
                .handle()
                .spawn(run(cluster, state, config, reset, tx, stop));
            FetchTask::Thread { thread, task }
        }
        Err(StartError::Runtime(e)) => {
            tracing::error!(%e, "cannot start the fetch thread's runtime");
            let _ = tx.try_send(Internal::Fatal(format!(
                "cannot start the fetch thread's runtime: {e}"
            )));
            FetchTask::Failed
        }
        Err(StartError::Thread(e)) => {
            tracing::warn!(%e, "cannot start the fetch thread; fetching on the caller's runtime");
            FetchTask::Task(tokio::spawn(run(cluster, state, config, reset, tx, stop)))
        }
    }
}
