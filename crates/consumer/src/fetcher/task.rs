//! The fetch thread (`orderly-fetch`): its runtime, the fetch loop and the lag poller beside it,
//! and the handle that stops them.

use std::sync::Arc;

use orderly_group::AutoOffsetReset;
use orderly_protocol::ConnectionKind;
use tokio::sync::{mpsc, watch};

use super::config::FetchConfig;
use super::fetch_loop::fetch_loop;
use super::lag::lag_loop;
use super::state::FetchState;
use crate::handoff::Internal;
use crate::metadata_cache::MetadataCache;

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
    /// Answered (or dropped, if the thread panicked) when the thread's loop has ended.
    Thread(tokio::sync::oneshot::Receiver<()>),
    /// The loop as a task of the caller's runtime.
    Task(tokio::task::JoinHandle<()>),
}

impl FetchTask {
    /// Waits until the fetch loop has ended (after `stop`, or once the source side is gone).
    pub(crate) async fn wait(self) {
        match self {
            FetchTask::Thread(done) => {
                let _ = done.await;
            }
            FetchTask::Task(task) => {
                let _ = task.await;
            }
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
/// If the thread cannot be started, the loop runs as a task of the caller's runtime.
pub(crate) fn spawn(
    cluster: MetadataCache,
    state: Arc<FetchState>,
    config: FetchConfig,
    reset: AutoOffsetReset,
    tx: mpsc::Sender<Internal>,
    stop: watch::Receiver<bool>,
) -> FetchTask {
    let (done_tx, done) = tokio::sync::oneshot::channel();
    // The loop's arguments go to the thread once it has started; if it cannot start, they are
    // still here for the fallback.
    type Args = (
        MetadataCache,
        Arc<FetchState>,
        FetchConfig,
        mpsc::Sender<Internal>,
        watch::Receiver<bool>,
    );
    let (args_tx, args_rx) = std::sync::mpsc::channel::<Args>();
    let thread = std::thread::Builder::new()
        .name("orderly-fetch".into())
        .spawn(move || {
            let Ok((cluster, state, config, tx, stop)) = args_rx.recv() else {
                return;
            };
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => {
                    cluster
                        .pool()
                        .open_on(ConnectionKind::Fetch, rt.handle().clone());
                    rt.block_on(run(cluster, state, config, reset, tx, stop));
                }
                Err(e) => {
                    tracing::error!(%e, "cannot start the fetch thread's runtime");
                    let _ = tx.try_send(Internal::Fatal(format!(
                        "cannot start the fetch thread's runtime: {e}"
                    )));
                }
            }
            let _ = done_tx.send(());
        });
    match thread {
        Ok(_) => {
            // The thread only ends before receiving if it panicked; `done` then reports it ended.
            let _ = args_tx.send((cluster, state, config, tx, stop));
            FetchTask::Thread(done)
        }
        Err(e) => {
            tracing::warn!(%e, "cannot start the fetch thread; fetching on the caller's runtime");
            FetchTask::Task(tokio::spawn(run(cluster, state, config, reset, tx, stop)))
        }
    }
}
