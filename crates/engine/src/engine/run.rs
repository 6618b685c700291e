//! [`Engine`]: its configuration and [`Engine::run`], which starts the workers and the dispatch
//! loop and returns only after every task it spawned has ended.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::state::{DispatchLoop, Ended, WorkerTasks};
use super::stop::StopHandle;
use crate::config::EngineConfig;
use crate::dedup::{DedupStores, RecentIdsStores};
use crate::handler::{DeadLetterSink, Handler};
use crate::handoff::recycle::Pools;
use crate::parked::ParkedSessions;
use crate::reply::ReplySink;
use crate::source::{Source, SourceError};
use crate::stats::EngineStats;
use crate::worker::{self, Ctx, Deadlines, Metrics};

/// Why [`Engine::run`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The source failed fatally. The engine still drained, committed and stopped its tasks.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// The configuration cannot work (e.g. zero workers).
    #[error("invalid engine configuration: {0}")]
    Config(String),
    /// A worker task panicked (a handler or sink panic). Its records were not committed.
    #[error("worker task failed: {0}")]
    Worker(String),
    /// The final commit at shutdown kept failing for
    /// [`EngineConfig::final_commit_timeout`]: records above the last successful commit will be
    /// handled again by the next owner (nothing is lost, but the operator should know).
    #[error("final commit failed: {0}")]
    Commit(String),
}

/// The ordering engine. Build it with [`Engine::new`], then call [`Engine::run`] with a source
/// and a shutdown future.
pub struct Engine<H, D> {
    config: EngineConfig,
    handler: Arc<H>,
    dlq: Arc<D>,
    replies: Option<Arc<dyn ReplySink>>,
    dedup: Arc<dyn DedupStores>,
    stats: EngineStats,
    parked: ParkedSessions,
    stop: StopHandle,
}

impl<H: Handler, D: DeadLetterSink> Engine<H, D> {
    /// An engine with this configuration, handler and dead-letter sink. Dedup uses
    /// [`RecentIdsStores::default`] unless replaced with [`Engine::with_dedup`].
    pub fn new(config: EngineConfig, handler: H, dlq: D) -> Self {
        Self::from_arcs(config, Arc::new(handler), Arc::new(dlq))
    }

    /// Like [`Engine::new`] for a handler and sink the caller keeps a handle to.
    pub fn from_arcs(config: EngineConfig, handler: Arc<H>, dlq: Arc<D>) -> Self {
        Self {
            config,
            handler,
            dlq,
            replies: None,
            dedup: Arc::new(RecentIdsStores::default()),
            stats: EngineStats::default(),
            parked: ParkedSessions::default(),
            stop: StopHandle::default(),
        }
    }

    /// A handle that stops [`Engine::run`] without waiting for records in flight (see
    /// [`StopHandle`]).
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Writes the replies the handler returns ([`Handler::handle_replying`]) through `sink`,
    /// each record's before it counts as done (see [`crate::reply`]). Without a sink, a record
    /// whose handler returns replies is dead-lettered (a permanent error naming the cause):
    /// replies are never dropped silently.
    pub fn with_replies(mut self, sink: impl ReplySink) -> Self {
        self.replies = Some(Arc::new(sink));
        self
    }

    /// Replaces the per-session dedup store factory.
    pub fn with_dedup(mut self, stores: impl DedupStores) -> Self {
        self.dedup = Arc::new(stores);
        self
    }

    /// Live counters; valid before, during and after `run`.
    pub fn stats(&self) -> EngineStats {
        self.stats.clone()
    }

    /// The sessions parked by [`crate::DlqMode::ParkSession`], to list and release while the
    /// engine runs.
    pub fn parked(&self) -> ParkedSessions {
        self.parked.clone()
    }

    /// Runs until `shutdown` completes, the source ends, or the source fails. Then it stops
    /// taking records, drains what it holds (bounded by `drain_timeout`; whatever is left is
    /// cancelled and not committed), flushes dead-letter writes, commits, and returns only after
    /// every task it spawned has ended. Must be called within a tokio runtime.
    ///
    /// Cancellation: dropping the future is an abrupt stop. The worker tasks are aborted (running
    /// handler futures are dropped) and nothing more is committed; records above the last commit
    /// are redelivered to the next owner (at-least-once).
    pub async fn run<S: Source>(
        self,
        source: S,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<EngineStats, EngineError> {
        // With a parked-session store, an assignment reaches the loop only once its partitions'
        // parked sessions are loaded (see `parked`).
        let mut source = crate::parked::LoadingSource::new(source, self.parked.clone());
        let cfg = self.config;
        if cfg.workers == 0 {
            return Err(EngineError::Config("workers must be at least 1".into()));
        }
        let stats = self.stats;
        let jitter_seed = cfg.jitter_seed.unwrap_or_else(rand::random);
        let pools = Arc::new(Pools::new(cfg.workers));
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let mut workers = Vec::with_capacity(cfg.workers);
        let mut handles = WorkerTasks(Vec::with_capacity(cfg.workers));
        for _ in 0..cfg.workers {
            let ctx = Arc::new(Ctx {
                handler: self.handler.clone(),
                dlq: self.dlq.clone(),
                replies: self.replies.clone(),
                config: cfg.clone(),
                jitter_seed,
                stats: stats.clone(),
                dedup: self.dedup.clone(),
                parked: self.parked.clone(),
                metrics: Metrics::new(),
                pools: pools.clone(),
                deadlines: Deadlines::default(),
            });
            let (tx, rx) = mpsc::unbounded_channel();
            workers.push(tx);
            handles
                .0
                .push(tokio::spawn(worker::run(ctx, rx, done_tx.clone())));
        }
        // Only workers hold senders now, so `done_rx` ends exactly when they all have.
        drop(done_tx);
        let handler = self.handler.clone();
        let mut dispatch =
            DispatchLoop::new(cfg, workers, done_rx, pools, stats.clone(), self.stop);
        dispatch.available = Box::new(move || handler.available());
        dispatch.lease = source.lease();
        dispatch.metrics.handler_available.set(1.0);
        let result = dispatch.main_loop(&mut source, shutdown).await;
        let stopped = matches!(result, Ok(Ended::Shutdown));
        let finished = dispatch.finish(&mut source, &mut handles, stopped).await;
        result
            .map(|_| ())
            .map_err(EngineError::from)
            .and(finished)
            .map(|()| stats)
    }
}
