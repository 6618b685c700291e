//! What the dispatch loop owns: one task holds all partition state, so none of it is locked.
//! The loop's behaviour is in `dispatch` (records in, completions back), `handback` (revokes),
//! `commit` and `shutdown`, each an `impl DispatchLoop` over this state.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::stop::StopHandle;
use crate::config::EngineConfig;
use crate::handoff::control::PartitionControl;
use crate::handoff::recycle::Pools;
use crate::handoff::work::{Completion, Work, WorkerMsg};
use crate::record::TopicPartition;
use crate::source::{Assignment, CommitPoint, LostAck, RevokeAck, SourceError};
use crate::stats::EngineStats;
use crate::tracker::OffsetTracker;

/// Why the dispatch loop ended.
pub(super) enum Ended {
    /// The shutdown future completed (or a stop-now): stop starting records, let running
    /// attempts finish within `drain_timeout`, commit.
    Shutdown,
    /// The source has no more events (a bounded input): drain everything admitted.
    SourceDone,
}

/// The spawned worker tasks. If `Engine::run` is dropped before it finished (the caller cancelled
/// it: an abrupt stop), the workers are aborted with it, so no handler keeps running for an engine
/// that can no longer commit. After a normal finish every task has ended and the abort is a no-op.
pub(super) struct WorkerTasks(pub(super) Vec<JoinHandle<()>>);

impl Drop for WorkerTasks {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

pub(super) struct PartGauges {
    pub(super) watermark: metrics::Gauge,
    pub(super) high_watermark: metrics::Gauge,
    pub(super) lag: metrics::Gauge,
    pub(super) pending: metrics::Gauge,
    pub(super) oldest_age: metrics::Gauge,
}

impl PartGauges {
    pub(super) fn new(tp: &TopicPartition) -> Self {
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

pub(super) struct Partition {
    pub(super) tp: TopicPartition,
    pub(super) slot: u32,
    pub(super) epoch: u32,
    /// Hash of topic and partition: mixed into session hashes (a session lives in one partition).
    pub(super) salt: u64,
    /// One control block per worker (see [`PartitionControl`]).
    pub(super) controls: Vec<Arc<PartitionControl>>,
    pub(super) tracker: OffsetTracker,
    pub(super) paused: bool,
    /// Set while a revoke hands this partition back (see [`Handback`]).
    pub(super) handback: Option<Handback>,
    pub(super) high_watermark: Option<i64>,
    /// What the group holds for this partition (assigned or last committed by us).
    pub(super) committed: CommitPoint,
    /// The group holds `committed` (false while the position came from the offset reset and
    /// we have not committed it yet: then it is committed at the next commit).
    pub(super) stored: bool,
    pub(super) gauges: PartGauges,
}

/// A revoked partition on its way out. The dispatch loop keeps running meanwhile: other
/// partitions dispatch and complete as usual, and this one only waits.
///
/// Draining: no record of it is admitted or started any more (queued ones were skipped), the
/// running ones may finish until `drain_deadline`. Frozen (`commit_deadline` set): its running
/// records were cancelled and completions no longer count, so its commit point is final; it is
/// committed (retried until `commit_deadline`) and removed once every revoke naming it is
/// acknowledged.
pub(super) struct Handback {
    pub(super) drain_deadline: Instant,
    pub(super) commit_deadline: Option<Instant>,
    /// The commit kept failing past `commit_deadline`: the revoke is acknowledged anyway.
    pub(super) gave_up: bool,
    /// The partition was assigned to us again while it drained. The new assignment starts when
    /// the old one is gone, so a session never has records of both in flight.
    pub(super) reassigned: Option<Reassigned>,
}

/// An assignment waiting for its partition's previous handback to finish, with the records the
/// source delivered for it meanwhile (the source is paused for it, so they are few).
pub(super) struct Reassigned {
    pub(super) assignment: Assignment,
    pub(super) held: Vec<(Vec<crate::record::Record>, Option<i64>)>,
}

/// A revoke not acknowledged yet: acknowledged once each of its partitions (slot, epoch) is
/// frozen and committed, gave up committing, or is gone (lost meanwhile).
pub(super) struct PendingRevoke {
    pub(super) tps: Vec<TopicPartition>,
    pub(super) parts: Vec<(u32, u32)>,
    pub(super) ack: RevokeAck,
}

pub(super) struct EngineMetrics {
    pub(super) in_flight: metrics::Gauge,
    pub(super) buffered: metrics::Gauge,
    pub(super) paused: metrics::Gauge,
    pub(super) commit_latency: metrics::Histogram,
    pub(super) commit_failures: metrics::Counter,
    pub(super) final_commit_failures: metrics::Counter,
    pub(super) metadata_truncated: metrics::Counter,
    pub(super) metadata_rejected: metrics::Counter,
    pub(super) restored: metrics::Counter,
    pub(super) in_doubt: metrics::Gauge,
    pub(super) handler_available: metrics::Gauge,
}

/// The one commit the engine has in flight. Its future owns what it needs, so the dispatch loop
/// keeps running while it waits (a group rebalance can hold a commit back for seconds).
pub(super) struct PendingCommit {
    pub(super) fut: Pin<Box<dyn Future<Output = Result<(), SourceError>> + Send>>,
    /// What it commits: (slot, epoch, point), applied to `Partition::committed` on success.
    pub(super) points: Vec<(u32, u32, CommitPoint)>,
    pub(super) started: Instant,
    /// Losses to acknowledge once this commit (which may name their partitions) has finished.
    pub(super) lost_acks: Vec<LostAck>,
}

/// The dispatch loop's state. Single-threaded by design: it is the only writer of partition
/// state, so no locks guard trackers or budgets.
pub(super) struct DispatchLoop {
    pub(super) cfg: EngineConfig,
    pub(super) parts: Vec<Option<Partition>>,
    pub(super) by_tp: HashMap<TopicPartition, u32>,
    pub(super) free_slots: Vec<u32>,
    pub(super) next_epoch: u32,
    pub(super) workers: Vec<mpsc::UnboundedSender<WorkerMsg>>,
    pub(super) batches: Vec<Vec<Work>>,
    /// Batch buffers shared with the workers (see `recycle`).
    pub(super) pools: Arc<Pools>,
    pub(super) done_rx: mpsc::UnboundedReceiver<Vec<Completion>>,
    pub(super) global_bytes: usize,
    pub(super) paused_count: usize,
    /// Budget was released since the last resume check (completion, revoke, loss).
    pub(super) released: bool,
    pub(super) unordered_rr: u32,
    pub(super) commit: Option<PendingCommit>,
    pub(super) next_commit: Instant,
    pub(super) commit_retry: std::time::Duration,
    /// A revoke's commit starts no earlier than this (after a failed commit, the backoff).
    pub(super) retry_at: Instant,
    /// Revokes in progress, in arrival order.
    pub(super) revokes: Vec<PendingRevoke>,
    /// The source said its ownership is in doubt ([`SourceEvent::OwnershipInDoubt`](crate::SourceEvent::OwnershipInDoubt)): every
    /// partition is held (no handler call starts) until it is confirmed.
    pub(super) in_doubt: bool,
    /// The source's lease on its partitions ([`Source::lease`](crate::Source::lease)), given to
    /// every partition's control blocks.
    pub(super) lease: Option<std::sync::Arc<dyn crate::source::Lease>>,
    /// [`Handler::available`](crate::Handler::available) of the engine's handler, read at every tick.
    pub(super) available: Box<dyn Fn() -> bool + Send + Sync>,
    /// The handler said it is unavailable at the last tick: the stuck-gap rule is suspended.
    pub(super) handler_down: bool,
    pub(super) stop: StopHandle,
    /// The metadata limit in force: the configured one, halved after each refusal by the broker.
    pub(super) metadata_limit: usize,
    pub(super) stats: EngineStats,
    pub(super) metrics: EngineMetrics,
}
