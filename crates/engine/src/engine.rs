//! The engine: the dispatch loop that owns partitions, offset trackers, backpressure, commits,
//! handover and shutdown, and the worker tasks it feeds.

use std::collections::HashMap;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::EngineConfig;
use crate::dedup::{DedupStores, RecentIdsStores};
use crate::handler::{DeadLetterSink, Handler};
use crate::handoff::control::PartShared;
use crate::handoff::recycle::Pools;
use crate::handoff::work::{BATCH_MAX, Completion, Work, WorkerMsg};
use crate::hash::{jump_consistent_hash, session_hash};
use crate::metadata;
use crate::parked::ParkedSessions;
use crate::record::TopicPartition;
use crate::reply::ReplySink;
use crate::source::{
    Assignment, CommitPoint, LostAck, RevokeAck, Source, SourceError, SourceEvent,
};
use crate::stats::{EngineStats, PartitionStats};
use crate::tracker::{Admit, OffsetTracker};
use crate::worker::{self, Ctx, Metrics};

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

/// Stops a running engine without waiting for its records in flight: an operator's second
/// Ctrl-C. Get it with [`Engine::stop_handle`] before [`Engine::run`]; clones share one state.
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
        let ctx = Arc::new(Ctx {
            handler: self.handler.clone(),
            dlq: self.dlq,
            replies: self.replies,
            config: cfg.clone(),
            jitter_seed,
            stats: stats.clone(),
            dedup: self.dedup,
            parked: self.parked,
            metrics: Metrics::new(),
            pools: Arc::new(Pools::new(cfg.workers)),
        });
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let mut workers = Vec::with_capacity(cfg.workers);
        let mut handles = WorkerTasks(Vec::with_capacity(cfg.workers));
        for _ in 0..cfg.workers {
            let (tx, rx) = mpsc::unbounded_channel();
            workers.push(tx);
            handles
                .0
                .push(tokio::spawn(worker::run(ctx.clone(), rx, done_tx.clone())));
        }
        // Only workers hold senders now, so `done_rx` ends exactly when they all have.
        drop(done_tx);
        let pools = ctx.pools.clone();
        drop(ctx);
        let handler = self.handler.clone();
        let mut core = Core::new(cfg, workers, done_rx, pools, stats.clone(), self.stop);
        core.available = Box::new(move || handler.available());
        core.metrics.handler_available.set(1.0);
        let result = core.main_loop(&mut source, shutdown).await;
        let stopped = matches!(result, Ok(Ended::Shutdown));
        let finished = core.finish(&mut source, &mut handles, stopped).await;
        result
            .map(|_| ())
            .map_err(EngineError::from)
            .and(finished)
            .map(|()| stats)
    }
}

/// Why the dispatch loop ended.
enum Ended {
    /// The shutdown future completed (or a stop-now): stop starting records, let running
    /// attempts finish within `drain_timeout`, commit.
    Shutdown,
    /// The source has no more events (a bounded input): drain everything admitted.
    SourceDone,
}

/// The spawned worker tasks. If `Engine::run` is dropped before it finished (the caller cancelled
/// it: an abrupt stop), the workers are aborted with it, so no handler keeps running for an engine
/// that can no longer commit. After a normal finish every task has ended and the abort is a no-op.
struct WorkerTasks(Vec<JoinHandle<()>>);

impl Drop for WorkerTasks {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

struct PartGauges {
    watermark: metrics::Gauge,
    high_watermark: metrics::Gauge,
    lag: metrics::Gauge,
    pending: metrics::Gauge,
    oldest_age: metrics::Gauge,
}

impl PartGauges {
    fn new(tp: &TopicPartition) -> Self {
        let labels = [
            ("topic", tp.topic.to_string()),
            ("partition", tp.partition.to_string()),
        ];
        Self {
            watermark: metrics::gauge!("orderly_partition_watermark", &labels),
            high_watermark: metrics::gauge!("orderly_partition_high_watermark", &labels),
            lag: metrics::gauge!("orderly_partition_lag", &labels),
            pending: metrics::gauge!("orderly_partition_pending_records", &labels),
            oldest_age: metrics::gauge!("orderly_partition_oldest_in_flight_seconds", &labels),
        }
    }
}

struct Partition {
    tp: TopicPartition,
    slot: u32,
    epoch: u32,
    /// Hash of topic and partition: mixed into session hashes (a session lives in one partition).
    salt: u64,
    /// One control block per worker (see [`PartShared`]).
    shared: Vec<Arc<PartShared>>,
    tracker: OffsetTracker,
    paused: bool,
    /// Set while a revoke hands this partition back (see [`Handback`]).
    handback: Option<Handback>,
    high_watermark: Option<i64>,
    /// What the group holds for this partition (assigned or last committed by us).
    committed: CommitPoint,
    /// The group holds `committed` (false while the position came from the offset reset and
    /// we have not committed it yet: then it is committed at the next commit).
    stored: bool,
    gauges: PartGauges,
}

/// A revoked partition on its way out. The dispatch loop keeps running meanwhile: other
/// partitions dispatch and complete as usual, and this one only waits.
///
/// Draining: no record of it is admitted or started any more (queued ones were skipped), the
/// running ones may finish until `drain_deadline`. Frozen (`commit_deadline` set): its running
/// records were cancelled and completions no longer count, so its commit point is final; it is
/// committed (retried until `commit_deadline`) and removed once every revoke naming it is
/// acknowledged.
struct Handback {
    drain_deadline: Instant,
    commit_deadline: Option<Instant>,
    /// The commit kept failing past `commit_deadline`: the revoke is acknowledged anyway.
    gave_up: bool,
    /// The partition was assigned to us again while it drained. The new assignment starts when
    /// the old one is gone, so a session never has records of both in flight.
    reassigned: Option<Reassigned>,
}

/// An assignment waiting for its partition's previous handback to finish, with the records the
/// source delivered for it meanwhile (the source is paused for it, so they are few).
struct Reassigned {
    assignment: Assignment,
    held: Vec<(Vec<crate::record::Record>, Option<i64>)>,
}

/// A revoke not acknowledged yet: acknowledged once each of its partitions (slot, epoch) is
/// frozen and committed, gave up committing, or is gone (lost meanwhile).
struct PendingRevoke {
    tps: Vec<TopicPartition>,
    parts: Vec<(u32, u32)>,
    ack: RevokeAck,
}

struct EngineMetrics {
    in_flight: metrics::Gauge,
    buffered: metrics::Gauge,
    paused: metrics::Gauge,
    commit_latency: metrics::Histogram,
    commit_failures: metrics::Counter,
    final_commit_failures: metrics::Counter,
    metadata_truncated: metrics::Counter,
    metadata_rejected: metrics::Counter,
    restored: metrics::Counter,
    in_doubt: metrics::Gauge,
    handler_available: metrics::Gauge,
}

/// The one commit the engine has in flight. Its future owns what it needs, so the dispatch loop
/// keeps running while it waits (a group rebalance can hold a commit back for seconds).
struct PendingCommit {
    fut: Pin<Box<dyn Future<Output = Result<(), SourceError>> + Send>>,
    /// What it commits: (slot, epoch, point), applied to `Partition::committed` on success.
    points: Vec<(u32, u32, CommitPoint)>,
    started: Instant,
    /// Losses to acknowledge once this commit (which may name their partitions) has finished.
    lost_acks: Vec<LostAck>,
}

/// Completes when the pending commit does; pending forever without one.
async fn commit_done(c: &mut Option<PendingCommit>) -> Result<(), SourceError> {
    match c {
        Some(pc) => pc.fut.as_mut().await,
        None => std::future::pending().await,
    }
}

/// Completes at `at`; pending forever without it.
async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// What a commit of `p` would store now, and whether its metadata had to be truncated.
/// Whether the partition's commit point differs from what the group holds (or the group holds
/// none yet).
fn needs_commit(p: &Partition, metadata_limit: usize) -> bool {
    !p.stored || commit_point(p, metadata_limit).0 != p.committed
}

fn commit_point(p: &Partition, metadata_limit: usize) -> (CommitPoint, bool) {
    let offset = p.tracker.commit_offset();
    // A limit of 0 turns the metadata off (configured so, or halved to nothing by the broker's
    // refusals): nothing to encode, and nothing truncated worth counting.
    let enc = if metadata_limit == 0 {
        metadata::Encoded {
            text: String::new(),
            runs_encoded: 0,
            truncated: false,
        }
    } else {
        metadata::encode(offset, p.tracker.completed_runs(), metadata_limit)
    };
    (
        CommitPoint {
            offset,
            metadata: enc.text,
        },
        enc.truncated,
    )
}

/// First delay after a failed periodic commit; it doubles up to the commit interval.
const COMMIT_RETRY_BASE: std::time::Duration = std::time::Duration::from_millis(100);

/// The dispatch loop's state. Single-threaded by design: it is the only writer of partition
/// state, so no locks guard trackers or budgets.
struct Core {
    cfg: EngineConfig,
    parts: Vec<Option<Partition>>,
    by_tp: HashMap<TopicPartition, u32>,
    free_slots: Vec<u32>,
    next_epoch: u32,
    workers: Vec<mpsc::UnboundedSender<WorkerMsg>>,
    batches: Vec<Vec<Work>>,
    /// Batch buffers shared with the workers (see `recycle`).
    pools: Arc<Pools>,
    done_rx: mpsc::UnboundedReceiver<Vec<Completion>>,
    global_bytes: usize,
    paused_count: usize,
    /// Budget was released since the last resume check (completion, revoke, loss).
    released: bool,
    unordered_rr: u32,
    commit: Option<PendingCommit>,
    next_commit: Instant,
    commit_retry: std::time::Duration,
    /// A revoke's commit starts no earlier than this (after a failed commit, the backoff).
    retry_at: Instant,
    /// Revokes in progress, in arrival order.
    revokes: Vec<PendingRevoke>,
    /// The source said its ownership is in doubt ([`SourceEvent::OwnershipInDoubt`]): every
    /// partition is held (no handler call starts) until it is confirmed.
    in_doubt: bool,
    /// [`Handler::available`] of the engine's handler, read at every tick.
    available: Box<dyn Fn() -> bool + Send + Sync>,
    /// The handler said it is unavailable at the last tick: the stuck-gap rule is suspended.
    handler_down: bool,
    stop: StopHandle,
    /// The metadata limit in force: the configured one, halved after each refusal by the broker.
    metadata_limit: usize,
    stats: EngineStats,
    metrics: EngineMetrics,
}

impl Core {
    fn new(
        cfg: EngineConfig,
        workers: Vec<mpsc::UnboundedSender<WorkerMsg>>,
        done_rx: mpsc::UnboundedReceiver<Vec<Completion>>,
        pools: Arc<Pools>,
        stats: EngineStats,
        stop: StopHandle,
    ) -> Self {
        let n = workers.len();
        Self {
            next_commit: Instant::now() + cfg.commit_interval,
            commit_retry: COMMIT_RETRY_BASE,
            retry_at: Instant::now(),
            revokes: Vec::new(),
            in_doubt: false,
            available: Box::new(|| true),
            handler_down: false,
            stop,
            metadata_limit: cfg.metadata_limit,
            commit: None,
            released: false,
            cfg,
            parts: Vec::new(),
            by_tp: HashMap::new(),
            free_slots: Vec::new(),
            next_epoch: 0,
            workers,
            batches: (0..n).map(|_| Vec::new()).collect(),
            done_rx,
            pools,
            global_bytes: 0,
            paused_count: 0,
            unordered_rr: 0,
            stats,
            metrics: EngineMetrics {
                in_flight: metrics::gauge!("orderly_records_in_flight"),
                buffered: metrics::gauge!("orderly_buffered_bytes"),
                paused: metrics::gauge!("orderly_paused_partitions"),
                commit_latency: metrics::histogram!("orderly_commit_duration_seconds"),
                commit_failures: metrics::counter!("orderly_commit_failures_total"),
                final_commit_failures: metrics::counter!("orderly_final_commit_failures_total"),
                metadata_truncated: metrics::counter!("orderly_commit_metadata_truncated_total"),
                metadata_rejected: metrics::counter!("orderly_commit_metadata_rejected_total"),
                restored: metrics::counter!("orderly_records_restored_total"),
                in_doubt: metrics::gauge!("orderly_ownership_in_doubt"),
                handler_available: metrics::gauge!("orderly_handler_available"),
            },
        }
    }

    async fn main_loop<S: Source>(
        &mut self,
        source: &mut S,
        shutdown: impl Future<Output = ()>,
    ) -> Result<Ended, SourceError> {
        let stop = self.stop.clone();
        // A stop-now ends the loop like a shutdown; `finish` then skips the drain.
        let shutdown = async {
            tokio::select! {
                () = shutdown => {}
                () = stop.stopped() => {}
            }
        };
        let mut shutdown = pin!(shutdown);
        let mut tick =
            tokio::time::interval(self.cfg.tick.max(std::time::Duration::from_millis(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.next_commit = Instant::now() + self.cfg.commit_interval;
        loop {
            // Only while a revoke is in progress: its next deadline or commit retry.
            let wake = if self.revokes.is_empty() {
                None
            } else {
                self.revoke_wake()
            };
            // Biased: shutdown first; the tick (ready once per period) cannot starve anything;
            // completions before new records, so memory is released before more is admitted.
            // A commit in flight is polled here too: it never stalls dispatch. A revoke is no
            // branch of its own: it is state the loop advances after every event (see
            // `advance_revokes`), so records of other partitions keep flowing while it drains.
            tokio::select! {
                biased;
                () = &mut shutdown => return Ok(Ended::Shutdown),
                _ = tick.tick() => {
                    let now = Instant::now();
                    self.housekeeping(now);
                    if now >= self.next_commit && self.commit.is_none() {
                        self.start_commit(source, false);
                        self.next_commit = now + self.cfg.commit_interval;
                    }
                }
                r = commit_done(&mut self.commit) => {
                    if let Some(pc) = self.commit.take() {
                        let now = Instant::now();
                        match self.on_commit_result(pc, r) {
                            Ok(()) => {
                                self.commit_retry = COMMIT_RETRY_BASE;
                                self.retry_at = now;
                            }
                            // Retried at once with the halved limit.
                            Err(SourceError::MetadataTooLarge(_)) => {
                                self.next_commit = now;
                                self.retry_at = now;
                            }
                            Err(_) => {
                                self.next_commit = now + self.commit_retry;
                                self.retry_at = self.next_commit;
                                self.commit_retry = (self.commit_retry * 2).min(self.cfg.commit_interval);
                            }
                        }
                    }
                }
                Some(batch) = self.done_rx.recv() => {
                    self.apply(&batch);
                    self.pools.done.give(batch);
                    self.apply_queued();
                }
                ev = source.next_event() => match ev? {
                    Some(ev) => self.on_event(ev, source),
                    None => return Ok(Ended::SourceDone),
                },
                () = sleep_until_opt(wake) => {}
            }
            if !self.revokes.is_empty() {
                self.advance_revokes(source);
            }
            self.send_batches();
            self.resume_drained(source);
        }
    }

    fn send_batches(&mut self) {
        for (tx, batch) in self.workers.iter().zip(self.batches.iter_mut()) {
            if !batch.is_empty() {
                // A send fails only if the worker died (panicked); `finish` reports that.
                let next = self.pools.works.take();
                let _ = tx.send(WorkerMsg::Batch(std::mem::replace(batch, next)));
            }
        }
    }

    /// Sends a control message to every worker, after any pending records so the per-worker
    /// channel order matches the order the engine decided things in.
    fn broadcast(&mut self, make: impl Fn(usize) -> WorkerMsg) {
        self.send_batches();
        for (i, tx) in self.workers.iter().enumerate() {
            let _ = tx.send(make(i));
        }
    }

    fn apply(&mut self, batch: &[Completion]) {
        let now = Instant::now();
        for c in batch {
            if let Some(Some(p)) = self.parts.get_mut(c.slot as usize) {
                if p.epoch == c.epoch {
                    // A frozen handback's commit point is final: a late completion (a record
                    // that finished after the drain ended) only frees its entry.
                    let frozen = p
                        .handback
                        .as_ref()
                        .is_some_and(|h| h.commit_deadline.is_some());
                    let freed = p.tracker.finish(c.offset, c.done && !frozen, now);
                    self.global_bytes -= freed;
                    self.released |= freed > 0;
                }
            }
        }
    }

    fn apply_queued(&mut self) {
        while let Ok(b) = self.done_rx.try_recv() {
            self.apply(&b);
            self.pools.done.give(b);
        }
    }

    /// Resumes paused partitions that fell below half their budget, once the global total is
    /// below half too. Runs after every release of budget (completions, a revoke's drain, a
    /// removed partition), so a partition paused by the global budget resumes whichever
    /// partition freed it.
    fn resume_drained<S: Source>(&mut self, source: &mut S) {
        if !std::mem::take(&mut self.released)
            || self.paused_count == 0
            || self.global_bytes > self.cfg.global_budget_bytes / 2
        {
            return;
        }
        let low = self.cfg.partition_budget_bytes / 2;
        for p in self.parts.iter_mut().flatten() {
            if p.paused && p.handback.is_none() && p.tracker.bytes() <= low {
                p.paused = false;
                self.paused_count -= 1;
                source.resume(&p.tp);
                tracing::debug!(partition = %p.tp, "resumed fetching");
            }
        }
        self.metrics.paused.set(self.paused_count as f64);
    }

    fn on_event<S: Source>(&mut self, ev: SourceEvent, source: &mut S) {
        match ev {
            SourceEvent::Assigned(list) => {
                for a in list {
                    self.on_assigned(a, source);
                }
            }
            SourceEvent::Records {
                partition,
                records,
                high_watermark,
            } => {
                self.admit(&partition, records, high_watermark, source);
            }
            SourceEvent::HighWatermark(tp, hw) => {
                if let Some(p) = self
                    .by_tp
                    .get(&tp)
                    .and_then(|s| self.parts[*s as usize].as_mut())
                {
                    p.high_watermark = Some(hw);
                }
            }
            SourceEvent::Revoked(tps, ack) => self.on_revoked(tps, ack),
            SourceEvent::OwnershipInDoubt => self.set_in_doubt(true),
            SourceEvent::OwnershipConfirmed => self.set_in_doubt(false),
            SourceEvent::Lost(tps, ack) => {
                for tp in &tps {
                    if let Some(slot) = self.by_tp.get(tp).copied() {
                        tracing::warn!(partition = %tp, "partition lost: dropping its work without committing");
                        self.remove(slot);
                    }
                }
                // A commit sent before the loss may name these partitions: the ack waits for it
                // (the member has already given up its generation, so it is refused), so it
                // cannot land under a new generation the ack lets the member join.
                match self.commit.as_mut() {
                    Some(pc) => pc.lost_acks.push(ack),
                    None => {
                        let _ = ack.send(());
                    }
                }
            }
        }
    }

    /// Holds (or releases) the start of every handler call: records keep being admitted and
    /// queued, running calls finish, commits go on; only new starts wait. The stuck-gap rule is
    /// suspended meanwhile (see `housekeeping`) and its clock restarts on confirmation, so waiting
    /// is never mistaken for a stuck record.
    fn set_in_doubt(&mut self, doubt: bool) {
        if self.in_doubt == doubt {
            return;
        }
        self.in_doubt = doubt;
        self.metrics.in_doubt.set(if doubt { 1.0 } else { 0.0 });
        if doubt {
            tracing::warn!(
                partitions = self.by_tp.len(),
                "ownership in doubt: holding the start of every record (their state is kept)"
            );
        } else {
            tracing::info!(
                partitions = self.by_tp.len(),
                "ownership confirmed: records start again"
            );
        }
        let now = Instant::now();
        for p in self.parts.iter_mut().flatten() {
            if !doubt {
                p.tracker.restart_stuck_clock(now);
            }
            for s in &p.shared {
                s.hold(doubt);
            }
        }
    }

    fn on_assigned<S: Source>(&mut self, a: Assignment, source: &mut S) {
        let Some(slot) = self.by_tp.get(&a.partition).copied() else {
            self.assign(a);
            return;
        };
        let Some(h) = self.parts[slot as usize]
            .as_mut()
            .and_then(|p| p.handback.as_mut())
        else {
            tracing::debug!(partition = %a.partition, "assigned while already owned; ignored");
            return;
        };
        // The previous assignment still drains: its running records may belong to the same
        // sessions. The new one starts when the handback is done; until then the source is
        // paused for it and what it already delivered is held.
        tracing::debug!(partition = %a.partition, "assigned again while its revoke drains; it starts once the drain is committed");
        source.pause(&a.partition);
        h.reassigned = Some(Reassigned {
            assignment: a,
            held: Vec::new(),
        });
    }

    /// Starts handing partitions back. Nothing is awaited here: the loop advances the revoke
    /// after every event ([`Core::advance_revokes`]) and acknowledges it when it is done.
    fn on_revoked(&mut self, tps: Vec<TopicPartition>, ack: RevokeAck) {
        let now = Instant::now();
        let mut parts = Vec::with_capacity(tps.len());
        for tp in &tps {
            let Some(slot) = self.by_tp.get(tp).copied() else {
                continue;
            };
            let Some(p) = self.parts[slot as usize].as_mut() else {
                continue;
            };
            let epoch = p.epoch;
            parts.push((slot, epoch));
            if let Some(h) = p.handback.as_mut() {
                // Revoked again before the previous revoke finished: the assignment in between
                // never started (it waited for the drain), so it is dropped with what it held,
                // and this revoke waits for the same drain and commit.
                h.reassigned = None;
                continue;
            }
            p.handback = Some(Handback {
                drain_deadline: now + self.cfg.revoke_timeout,
                commit_deadline: None,
                gave_up: false,
                reassigned: None,
            });
            for s in &p.shared {
                s.drain();
            }
            // Records queued but not started are skipped, so the drain waits only for records
            // whose handler already runs.
            self.broadcast(|_| WorkerMsg::Purge { slot, epoch });
        }
        tracing::debug!(partitions = ?tps, "revoke: draining");
        self.revokes.push(PendingRevoke { tps, parts, ack });
    }

    /// Moves revokes along: freezes partitions whose running records are done (or whose drain
    /// timed out, cancelling the rest), commits frozen partitions (retried with backoff until
    /// `final_commit_timeout`), acknowledges revokes whose partitions are all committed, and then
    /// removes those partitions (starting an assignment that waited for one).
    fn advance_revokes<S: Source>(&mut self, source: &mut S) {
        let now = Instant::now();
        let (limit, idle) = (self.metadata_limit, self.commit.is_none());
        let mut want_commit = false;
        for p in self.parts.iter_mut().flatten() {
            // Taken out and put back, so `p` can be read while `h` changes.
            let Some(mut h) = p.handback.take() else {
                continue;
            };
            let commit_deadline = match h.commit_deadline {
                Some(d) => d,
                None => {
                    let left = p.tracker.in_flight();
                    if left > 0 && now < h.drain_deadline {
                        p.handback = Some(h);
                        continue;
                    }
                    if left > 0 {
                        tracing::warn!(partition = %p.tp, in_flight = left,
                            "revoke timeout: cancelling records still running; they will be redelivered to the new owner");
                    }
                    // From here on nothing of this partition counts as completed: whatever
                    // finishes later is ignored, so the old owner never commits a record that
                    // finished after the drain ended.
                    for s in &p.shared {
                        s.cancel();
                    }
                    let d = now + self.cfg.final_commit_timeout;
                    h.commit_deadline = Some(d);
                    d
                }
            };
            if !h.gave_up && needs_commit(p, limit) {
                if idle && now >= commit_deadline {
                    h.gave_up = true;
                    self.metrics.final_commit_failures.increment(1);
                    tracing::error!(partition = %p.tp,
                        "revoke: the commit kept failing; acknowledging anyway (the rebalance cannot wait longer): the new owner handles the records above the last successful commit again");
                } else {
                    want_commit = true;
                }
            }
            p.handback = Some(h);
        }
        if want_commit && idle && now >= self.retry_at {
            // Only the handed-back partitions, as a revoke always did: a kept partition's
            // commit never delays (or fails) a handover.
            self.start_commit(source, true);
        }
        let mut i = 0;
        while i < self.revokes.len() {
            if !self.revokes[i]
                .parts
                .iter()
                .all(|&(slot, epoch)| self.handed_back(slot, epoch))
            {
                i += 1;
                continue;
            }
            let r = self.revokes.remove(i);
            tracing::debug!(partitions = ?r.tps, "revoke: drained and committed; acknowledging");
            // The driver may have given up waiting; then nobody needs the ack.
            let _ = r.ack.send(());
            for (slot, epoch) in r.parts {
                if !self
                    .revokes
                    .iter()
                    .any(|o| o.parts.contains(&(slot, epoch)))
                {
                    self.finish_handback(slot, epoch, source);
                }
            }
        }
    }

    /// Whether the partition a revoke named is handed back: frozen and committed (or the commit
    /// was given up), or gone (lost meanwhile).
    fn handed_back(&self, slot: u32, epoch: u32) -> bool {
        match self.parts[slot as usize].as_ref() {
            Some(p) if p.epoch == epoch => p.handback.as_ref().is_some_and(|h| {
                h.commit_deadline.is_some() && (h.gave_up || !needs_commit(p, self.metadata_limit))
            }),
            _ => true,
        }
    }

    /// Removes a handed-back partition and starts the assignment that waited for it, if any.
    fn finish_handback<S: Source>(&mut self, slot: u32, epoch: u32, source: &mut S) {
        let Some(p) = self.parts[slot as usize]
            .as_mut()
            .filter(|p| p.epoch == epoch)
        else {
            return;
        };
        let reassigned = p.handback.as_mut().and_then(|h| h.reassigned.take());
        let ours = p.committed.clone();
        let ours_stored = p.stored;
        self.remove(slot);
        let Some(Reassigned {
            mut assignment,
            held,
        }) = reassigned
        else {
            return;
        };
        // Nobody else owned the partition since our commit (the revoke was not acknowledged),
        // so the group's commit point is ours unless the assignment names a later one.
        if ours.offset >= assignment.next_offset {
            assignment.next_offset = ours.offset;
            assignment.metadata = ours.metadata;
            assignment.committed = ours_stored;
        }
        let tp = assignment.partition.clone();
        self.assign(assignment);
        source.resume(&tp);
        for (records, hw) in held {
            self.admit(&tp, records, hw, source);
        }
    }

    /// The next moment a revoke needs the loop without any event: a drain deadline, a commit
    /// retry or a commit deadline. `None` when only events can move it.
    fn revoke_wake(&self) -> Option<Instant> {
        let mut wake: Option<Instant> = None;
        for p in self.parts.iter().flatten() {
            let Some(h) = p.handback.as_ref() else {
                continue;
            };
            let t = match h.commit_deadline {
                None => h.drain_deadline,
                // A commit in flight wakes the loop by finishing.
                Some(d)
                    if !h.gave_up
                        && self.commit.is_none()
                        && needs_commit(p, self.metadata_limit) =>
                {
                    d.min(self.retry_at)
                }
                Some(_) => continue,
            };
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
        wake
    }

    fn assign(&mut self, a: Assignment) {
        if self.by_tp.contains_key(&a.partition) {
            return;
        }
        let restored = metadata::decode(a.next_offset, &a.metadata).unwrap_or_else(|e| {
            tracing::warn!(partition = %a.partition, error = %e, "ignoring commit metadata; records above the commit point will be handled again");
            Vec::new()
        });
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.parts.push(None);
            (self.parts.len() - 1) as u32
        });
        self.next_epoch = self.next_epoch.wrapping_add(1);
        let epoch = self.next_epoch;
        let salt = worker::partition_salt(
            self.cfg.hash_seed,
            &a.partition.topic,
            a.partition.partition,
        );
        let shared: Vec<Arc<PartShared>> = (0..self.workers.len())
            .map(|_| {
                let s = PartShared::new(slot, epoch, salt);
                // Assigned while the ownership is in doubt: held like the others.
                s.hold(self.in_doubt);
                Arc::new(s)
            })
            .collect();
        self.broadcast(|i| WorkerMsg::AddPartition(shared[i].clone()));
        tracing::info!(partition = %a.partition, next_offset = a.next_offset, restored_runs = restored.len(), "partition assigned");
        let p = Partition {
            gauges: PartGauges::new(&a.partition),
            tp: a.partition.clone(),
            slot,
            epoch,
            salt,
            shared,
            tracker: OffsetTracker::new(a.next_offset, restored, Instant::now()),
            paused: false,
            handback: None,
            high_watermark: None,
            committed: CommitPoint {
                offset: a.next_offset,
                metadata: a.metadata,
            },
            stored: a.committed,
        };
        self.parts[slot as usize] = Some(p);
        self.by_tp.insert(a.partition, slot);
    }

    fn admit<S: Source>(
        &mut self,
        tp: &TopicPartition,
        records: Vec<crate::record::Record>,
        hw: Option<i64>,
        source: &mut S,
    ) {
        let Some(slot) = self.by_tp.get(tp).copied() else {
            tracing::debug!(partition = %tp, n = records.len(), "records for a partition not owned; ignored");
            return;
        };
        let Some(p) = self.parts[slot as usize].as_mut() else {
            return;
        };
        if let Some(h) = p.handback.as_mut() {
            // Records of a reassignment wait for the drain; the old assignment's are dropped
            // (the source stopped delivering them; their owner fetches them again).
            if let Some(r) = h.reassigned.as_mut() {
                r.held.push((records, hw));
            }
            return;
        }
        if hw.is_some() {
            p.high_watermark = hw;
        }
        let rejected = p.tracker.check_restored(p.high_watermark);
        if rejected > 0 {
            self.metrics.metadata_rejected.increment(1);
            tracing::warn!(partition = %tp, high_watermark = ?p.high_watermark, claimed = rejected,
                "commit metadata claims completed offsets at or above the high watermark (or it is unknown); ignoring it: those records are handled again");
        }
        let now = Instant::now();
        let n = self.workers.len() as u32;
        let (seed, from, salt) = (self.cfg.hash_seed, &self.cfg.session_id, p.salt);
        let before = p.tracker.bytes();
        let mut restored = 0u64;
        let total = records.len();
        for (i, record) in records.into_iter().enumerate() {
            let sid = worker::session_id(from, &record);
            let hash = sid.map_or(0, |s| session_hash(seed, salt, s));
            let bytes = u32::try_from(record.charged_bytes()).unwrap_or(u32::MAX);
            match p
                .tracker
                .admit(record.offset, bytes, record.shared, hash, now)
            {
                Admit::Dispatch => {}
                Admit::Duplicate => continue,
                Admit::Restored => {
                    restored += 1;
                    continue;
                }
            }
            let w = if sid.is_some() {
                jump_consistent_hash(hash, n)
            } else {
                // The unordered lane has no order to keep: spread it round-robin.
                self.unordered_rr = self.unordered_rr.wrapping_add(1);
                self.unordered_rr % n
            };
            let batch = &mut self.batches[w as usize];
            if batch.capacity() == 0 {
                // A fresh buffer (the pool had none): sized once, not grown by doubling.
                batch.reserve((total - i).min(BATCH_MAX));
            }
            batch.push(Work {
                slot,
                epoch: p.epoch,
                hash,
                session: sid.is_some(),
                parked: None,
                record,
                batch: Vec::new(),
            });
            if batch.len() >= BATCH_MAX {
                // Sent now, so batch buffers stay small enough for the pool to keep (see
                // `BATCH_MAX`). A send fails only if the worker died; `finish` reports that.
                let next = self.pools.works.take();
                let full = std::mem::replace(batch, next);
                let _ = self.workers[w as usize].send(WorkerMsg::Batch(full));
            }
        }
        if restored > 0 {
            self.metrics.restored.increment(restored);
        }
        self.global_bytes += p.tracker.bytes() - before;
        if !p.paused
            && (p.tracker.bytes() >= self.cfg.partition_budget_bytes
                || self.global_bytes >= self.cfg.global_budget_bytes)
        {
            p.paused = true;
            self.paused_count += 1;
            source.pause(tp);
            self.metrics.paused.set(self.paused_count as f64);
            tracing::debug!(partition = %tp, bytes = p.tracker.bytes(), global = self.global_bytes, "paused fetching");
        }
    }

    fn in_flight(&self) -> usize {
        self.parts
            .iter()
            .flatten()
            .map(|p| p.tracker.in_flight())
            .sum()
    }

    /// Waits until nothing is in flight, `deadline`, or a stop-now. Housekeeping keeps running
    /// meanwhile, so a stuck record cannot hold a drain to its deadline, and budget freed by the
    /// drain resumes paused partitions. Returns true if drained.
    async fn wait_drained<S: Source>(&mut self, source: &mut S, deadline: Instant) -> bool {
        let period = self.cfg.tick.max(std::time::Duration::from_millis(1));
        let mut next_tick = Instant::now() + period;
        let stop = self.stop.clone();
        loop {
            self.apply_queued();
            self.resume_drained(source);
            if self.in_flight() == 0 {
                return true;
            }
            if stop.is_stopped() {
                return false;
            }
            let wake = next_tick.min(deadline);
            tokio::select! {
                biased;
                () = stop.stopped() => return false,
                r = tokio::time::timeout_at(wake, self.done_rx.recv()) => match r {
                    Ok(Some(b)) => self.apply(&b),
                    Ok(None) => return self.in_flight() == 0,
                    Err(_) if wake >= deadline => return self.in_flight() == 0,
                    Err(_) => {
                        let now = Instant::now();
                        self.housekeeping(now);
                        next_tick = now + period;
                    }
                },
            }
        }
    }

    /// Forgets a partition: cancels its records and frees its slot. Commits nothing.
    fn remove(&mut self, slot: u32) {
        let Some(p) = self.parts[slot as usize].take() else {
            return;
        };
        for s in &p.shared {
            s.cancel();
        }
        // Its work is another member's now: a sum over members must not count it here too.
        p.gauges.pending.set(0.0);
        let epoch = p.epoch;
        self.broadcast(|_| WorkerMsg::Purge { slot, epoch });
        self.broadcast(|_| WorkerMsg::RemovePartition { slot, epoch });
        self.global_bytes -= p.tracker.bytes();
        self.released = true;
        if p.paused {
            self.paused_count -= 1;
            self.metrics.paused.set(self.paused_count as f64);
        }
        self.by_tp.remove(&p.tp);
        self.free_slots.push(slot);
    }

    /// Reads [`Handler::available`]. While the handler is unavailable the stuck-gap rule is
    /// suspended (see `housekeeping`); when it is available again every partition's stuck clock
    /// restarts, so time spent waiting for the service is never mistaken for a stuck record.
    fn check_handler(&mut self, now: Instant) {
        let down = !(self.available)();
        if down == self.handler_down {
            return;
        }
        self.handler_down = down;
        self.metrics
            .handler_available
            .set(if down { 0.0 } else { 1.0 });
        if down {
            tracing::warn!(
                "handler unavailable: records wait for it; the stuck-gap rule is suspended"
            );
        } else {
            tracing::info!("handler available again");
            for p in self.parts.iter_mut().flatten() {
                p.tracker.restart_stuck_clock(now);
            }
        }
    }

    fn housekeeping(&mut self, now: Instant) {
        self.check_handler(now);
        let mut snapshot = Vec::with_capacity(self.by_tp.len());
        let mut in_flight = 0;
        for p in self.parts.iter_mut().flatten() {
            // Not while the ownership is in doubt or the handler is unavailable: records wait
            // for those, not for a stuck handler.
            if let Some(timeout) = self
                .cfg
                .stuck_timeout
                .filter(|_| !self.in_doubt && !self.handler_down)
            {
                if let Some(offset) = p.tracker.take_stuck(timeout, now) {
                    // The worker running it logs the session id and dead-letters it.
                    for s in &p.shared {
                        s.flag_stuck(offset);
                    }
                }
            }
            let commit_offset = p.tracker.commit_offset();
            let lag = p.high_watermark.map(|hw| (hw - commit_offset).max(0));
            let oldest = p.tracker.oldest_in_flight(now);
            p.gauges.watermark.set(commit_offset as f64);
            if let Some(hw) = p.high_watermark {
                p.gauges.high_watermark.set(hw as f64);
            }
            if let Some(l) = lag {
                p.gauges.lag.set(l as f64);
            }
            if let Some(n) = p.tracker.pending(p.high_watermark) {
                p.gauges.pending.set(n as f64);
            }
            p.gauges
                .oldest_age
                .set(oldest.map_or(0.0, |o| o.age.as_secs_f64()));
            in_flight += p.tracker.in_flight();
            snapshot.push(PartitionStats {
                partition: p.tp.clone(),
                commit_offset,
                high_watermark: p.high_watermark,
                lag,
                in_flight: p.tracker.in_flight(),
                buffered_bytes: p.tracker.bytes(),
                paused: p.paused,
                oldest_in_flight: oldest,
            });
        }
        self.metrics.in_flight.set(in_flight as f64);
        self.metrics.buffered.set(self.global_bytes as f64);
        if let Ok(mut s) = self.stats.0.partitions.lock() {
            *s = snapshot;
        }
    }

    /// Starts a commit of every partition (only those a revoke froze if `handed_back`) whose
    /// commit point or metadata changed. Returns false when there is nothing to commit. At most
    /// one commit is in flight.
    fn start_commit<S: Source>(&mut self, source: &mut S, handed_back: bool) -> bool {
        debug_assert!(self.commit.is_none());
        let mut offsets = Vec::new();
        let mut points = Vec::new();
        for p in self.parts.iter().flatten() {
            if handed_back
                && p.handback
                    .as_ref()
                    .is_none_or(|h| h.commit_deadline.is_none())
            {
                continue;
            }
            let (cp, truncated) = commit_point(p, self.metadata_limit);
            if truncated {
                // Not an error: the records left out are handled again after a restart.
                self.metrics.metadata_truncated.increment(1);
                tracing::debug!(partition = %p.tp, "commit metadata truncated to its limit");
            }
            if cp != p.committed || !p.stored {
                points.push((p.slot, p.epoch, cp.clone()));
                offsets.push((p.tp.clone(), cp));
            }
        }
        if offsets.is_empty() {
            return false;
        }
        self.commit = Some(PendingCommit {
            fut: Box::pin(source.commit(offsets)),
            points,
            started: Instant::now(),
            lost_acks: Vec::new(),
        });
        true
    }

    /// Books a finished commit: on success each partition (still of the same epoch) remembers
    /// what it committed; a failure is counted and logged, and the caller retries.
    fn on_commit_result(
        &mut self,
        pc: PendingCommit,
        result: Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        for ack in pc.lost_acks {
            let _ = ack.send(());
        }
        match result {
            Ok(()) => {
                self.metrics
                    .commit_latency
                    .record(pc.started.elapsed().as_secs_f64());
                self.stats.0.commits.fetch_add(1, Relaxed);
                self.stats.set_last_commit(std::time::SystemTime::now());
                for (slot, epoch, cp) in pc.points {
                    if let Some(p) = self.parts[slot as usize]
                        .as_mut()
                        .filter(|p| p.epoch == epoch)
                    {
                        p.committed = cp;
                        p.stored = true;
                    }
                }
                Ok(())
            }
            Err(e) => {
                self.metrics.commit_failures.increment(1);
                self.stats.0.commit_failures.fetch_add(1, Relaxed);
                if matches!(e, SourceError::MetadataTooLarge(_)) {
                    self.metadata_limit /= 2;
                    tracing::warn!(error = %e, limit = self.metadata_limit,
                        "commit metadata refused as too large; halving the metadata limit (records it leaves out are handled again after a restart)");
                } else {
                    tracing::warn!(error = %e, "commit failed; will commit again");
                }
                Err(e)
            }
        }
    }

    /// Waits for the commit in flight, if any, and books it.
    async fn finish_pending_commit(&mut self) {
        if let Some(mut pc) = self.commit.take() {
            let r = pc.fut.as_mut().await;
            let _ = self.on_commit_result(pc, r);
        }
    }

    /// Commits every partition now (shutdown): after the commit in flight, retried
    /// with backoff until it succeeds or `final_commit_timeout` passes.
    async fn commit_final<S: Source>(&mut self, source: &mut S) -> Result<(), SourceError> {
        self.finish_pending_commit().await;
        let deadline = Instant::now() + self.cfg.final_commit_timeout;
        let mut delay = COMMIT_RETRY_BASE;
        loop {
            if !self.start_commit(source, false) {
                return Ok(());
            }
            let Some(mut pc) = self.commit.take() else {
                return Ok(());
            };
            let r = pc.fut.as_mut().await;
            let Err(e) = self.on_commit_result(pc, r) else {
                return Ok(());
            };
            if matches!(e, SourceError::MetadataTooLarge(_)) && self.metadata_limit > 0 {
                continue;
            }
            if Instant::now() + delay >= deadline {
                self.metrics.final_commit_failures.increment(1);
                return Err(e);
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(std::time::Duration::from_secs(5));
        }
    }

    async fn finish<S: Source>(
        &mut self,
        source: &mut S,
        handles: &mut WorkerTasks,
        stopped: bool,
    ) -> Result<(), EngineError> {
        self.send_batches();
        if stopped {
            // A shutdown (SIGTERM) stops as a revoke does: no queued record starts any more
            // (they are skipped and stay above the watermark), records waiting for a retry are
            // abandoned, and only attempts already running get until `drain_timeout`. The
            // backlog a budget admitted is not worked off: the next owner resumes from the
            // commit.
            for p in self.parts.iter().flatten() {
                for s in &p.shared {
                    s.drain();
                }
            }
            let live: Vec<(u32, u32)> = self
                .parts
                .iter()
                .flatten()
                .map(|p| (p.slot, p.epoch))
                .collect();
            for (slot, epoch) in live {
                self.broadcast(|_| WorkerMsg::Purge { slot, epoch });
            }
        } else if self.in_doubt {
            // Held records cannot start (the partitions may belong to someone else now), so
            // they are abandoned at once instead of holding the drain to its deadline; the
            // records already running still finish.
            for p in self.parts.iter().flatten() {
                for s in &p.shared {
                    s.drain();
                }
            }
        }
        let deadline = Instant::now() + self.cfg.drain_timeout;
        if !self.wait_drained(source, deadline).await {
            if self.stop.is_stopped() {
                tracing::warn!(
                    in_flight = self.in_flight(),
                    "stopping now: cancelling records still running; they will be redelivered"
                );
            } else {
                tracing::warn!(
                    in_flight = self.in_flight(),
                    "drain timeout: cancelling records still running; they will be redelivered"
                );
            }
        }
        for p in self.parts.iter().flatten() {
            for s in &p.shared {
                s.cancel();
            }
        }
        let committed = self.commit_final(source).await;
        if let Err(e) = &committed {
            tracing::error!(error = %e, "final commit failed; records above the last successful commit will be handled again by the next owner");
        }
        // Revokes still in progress are answered now: their partitions drained (or were
        // cancelled) and were committed with the rest.
        for r in self.revokes.drain(..) {
            let _ = r.ack.send(());
        }
        self.housekeeping(Instant::now());
        // Closing the channels ends the workers once their (cancelled) futures are done.
        self.workers.clear();
        while self.done_rx.recv().await.is_some() {}
        let mut result = committed.map_err(|e| EngineError::Commit(e.to_string()));
        for h in handles.0.iter_mut() {
            if let Err(e) = h.await {
                tracing::error!(error = %e, "worker task failed");
                result = result.and(Err(EngineError::Worker(e.to_string())));
            }
        }
        result
    }
}
