//! What every record future of a worker shares (`Ctx`, `Metrics`) and what it reports when it
//! ends (`Finished`, `Outcome`).

use std::sync::Arc;

use tokio::time::Instant;

use super::deadline::Deadlines;
use crate::config::EngineConfig;
use crate::dedup::DedupStores;
use crate::handoff::work::Work;
use crate::hash::hash64;
use crate::parked::ParkedSessions;
use crate::reply::ReplySink;
use crate::stats::EngineStats;

/// Metric handles resolved once, so the hot path does not look names up per record.
pub(crate) struct Metrics {
    pub(super) handled: metrics::Counter,
    pub(super) failed_transient: metrics::Counter,
    pub(super) failed_permanent: metrics::Counter,
    pub(super) retried: metrics::Counter,
    pub(super) dead_lettered: metrics::Counter,
    pub(super) deduplicated: metrics::Counter,
    pub(super) stuck: metrics::Counter,
    pub(super) abandoned: metrics::Counter,
    pub(super) dlq_failures: metrics::Counter,
    pub(super) dlq_stalled: metrics::Counter,
    pub(super) replies: metrics::Counter,
    pub(super) reply_failures: metrics::Counter,
    pub(super) reply_stalled: metrics::Counter,
    pub(super) violations: metrics::Counter,
    pub(super) active_sessions: metrics::Gauge,
    pub(super) handler_latency: metrics::Histogram,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        Self {
            handled: metrics::counter!("orderly_records_handled_total"),
            failed_transient: metrics::counter!("orderly_records_failed_total", "kind" => "transient"),
            failed_permanent: metrics::counter!("orderly_records_failed_total", "kind" => "permanent"),
            retried: metrics::counter!("orderly_records_retried_total"),
            dead_lettered: metrics::counter!("orderly_records_dead_lettered_total"),
            deduplicated: metrics::counter!("orderly_records_deduplicated_total"),
            stuck: metrics::counter!("orderly_records_stuck_total"),
            abandoned: metrics::counter!("orderly_records_abandoned_total"),
            dlq_failures: metrics::counter!("orderly_dlq_send_failures_total"),
            dlq_stalled: metrics::counter!("orderly_dlq_stalled_total"),
            replies: metrics::counter!("orderly_replies_total"),
            reply_failures: metrics::counter!("orderly_reply_send_failures_total"),
            reply_stalled: metrics::counter!("orderly_reply_stalled_total"),
            violations: metrics::counter!("orderly_ordering_violations_total"),
            active_sessions: metrics::gauge!("orderly_active_sessions"),
            handler_latency: metrics::histogram!("orderly_handler_duration_seconds"),
        }
    }
}

/// What a worker's record futures share: the engine's handler, sinks, configuration and
/// stores (behind `Arc`s, the same for every worker), and the worker's own attempt deadlines.
pub(crate) struct Ctx<H, D> {
    pub(crate) handler: Arc<H>,
    pub(crate) dlq: Arc<D>,
    /// Where handlers' replies go; `None`: a record with replies is dead-lettered.
    pub(crate) replies: Option<Arc<dyn ReplySink>>,
    pub(crate) config: EngineConfig,
    pub(crate) jitter_seed: u64,
    pub(crate) stats: EngineStats,
    pub(crate) dedup: Arc<dyn DedupStores>,
    pub(crate) parked: ParkedSessions,
    pub(crate) metrics: Metrics,
    /// Batch buffers shared with the dispatch loop.
    pub(crate) pools: Arc<crate::handoff::recycle::Pools>,
    /// This worker's waiting attempts, for `EngineConfig::attempt_timeout`.
    pub(crate) deadlines: Deadlines,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    Handled,
    DeadLettered,
    Abandoned,
}

pub(super) struct Finished {
    pub(super) work: Box<Work>,
    pub(super) outcome: Outcome,
    /// For a batch (`work.batch` not empty): the outcome of each follower, in order; the
    /// followers past its end were not processed (the session was parked meanwhile) and go back
    /// to the front of the session's queue.
    pub(super) followers: Vec<Outcome>,
    /// When it finished (the clock reading the latency metric took, reused by the worker loop).
    pub(super) at: Instant,
}

pub(super) fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Salt for a partition's jitter: independent of the slot number, which is reused.
pub(crate) fn partition_salt(seed: u64, topic: &str, partition: i32) -> u64 {
    hash64(seed, topic.as_bytes()) ^ (u64::from(partition as u32) << 40)
}
