//! Engine configuration with documented defaults.

use std::time::Duration;

use crate::retry::RetryPolicy;

/// Where the session id of a record comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SessionIdFrom {
    /// The record key (default). A record without a key goes to the unordered lane.
    #[default]
    Key,
    /// The first header with this name. A record without it (or with a null value) goes to the
    /// unordered lane.
    Header(String),
}

/// What happens to a session after one of its records went to the dead-letter queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DlqMode {
    /// The session carries on with its next record (default).
    #[default]
    Continue,
    /// The session is **parked**: its later records go to the DLQ behind the first one, in order,
    /// with reason `parked`, until an operator releases it
    /// ([`crate::ParkedSessions::release`]), or a replay round releases it in order (see
    /// [`crate::parked`]). For chats and tasks whose later steps assume the earlier ones
    /// happened. The parked set lives in the process unless a [`crate::ParkedStore`] is set
    /// ([`crate::ParkedSessions::set_store`]); then every owner of the partition honours it.
    ParkSession,
}

/// Everything the engine can be tuned with. `EngineConfig::default()` is a sound production
/// starting point; each field names its default.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Worker tasks that session ids are hashed onto. Default: available parallelism.
    pub workers: usize,
    /// Where session ids come from. Default: the record key.
    pub session_id: SessionIdFrom,
    /// Most records of one session handed to the handler in one call
    /// ([`Handler::handle_batch`](crate::Handler::handle_batch)): when a session's next record
    /// starts and more of its records are already queued, up to this many consecutive ones go
    /// together. A session still has one call in flight at a time, so order holds as with single
    /// records. Default 1: one record per call ([`Handler::handle`](crate::Handler::handle)).
    pub batch_max: usize,
    /// Most bytes (keys, values and headers) of one batch; the first record always goes, however
    /// large. Default 1 MiB.
    pub batch_max_bytes: usize,
    /// How long a session's next record may wait for more of the session's records to join its
    /// batch (with `batch_max` above 1): it goes when `batch_max` records are queued or when
    /// it has waited this long, whichever is first. Like a producer's `linger.ms`: fewer, fuller
    /// calls for sessions whose records trickle in, at up to this much added latency. Default
    /// zero: never wait, send what is already queued.
    pub batch_linger: Duration,
    /// A session task with no record for this long is removed. Default 30 s.
    pub session_idle_timeout: Duration,
    /// Limit for one handler attempt; hitting it counts as a transient error. Default 30 s.
    pub attempt_timeout: Option<Duration>,
    /// Retry schedule for transient handler errors. Default: [`RetryPolicy::default`].
    pub retry: RetryPolicy,
    /// Backoff for failing dead-letter writes (its `max_attempts` is ignored: a dead letter is
    /// never dropped). Default: 100 ms base, factor 2, 10 s cap.
    pub dlq_retry: RetryPolicy,
    /// Seed for the backoff jitter; `None` draws one at start. Default `None`.
    pub jitter_seed: Option<u64>,
    /// A record holding its partition's watermark back for this long is cancelled and
    /// dead-lettered with reason `stuck`. `None` disables it. Default 5 min.
    pub stuck_timeout: Option<Duration>,
    /// Periodic commit interval. Default 1 s: it bounds the work a crash makes the next owner
    /// redo (finished records above the watermark travel in the commit metadata). A failed
    /// periodic commit is retried sooner, with backoff from 100 ms up to this interval.
    pub commit_interval: Duration,
    /// How long a revoke's or shutdown's commit is retried when it fails. Default 10 s. After it,
    /// a revoke is acknowledged anyway (logged as an error: the new owner handles the records
    /// above the last successful commit again), and [`crate::Engine::run`] returns
    /// [`crate::EngineError::Commit`].
    pub final_commit_timeout: Duration,
    /// Limit for the commit metadata (broker's `offset.metadata.max.bytes`). Default 4096. 0 turns
    /// the completed offsets in the metadata off: a new owner handles every record above the
    /// commit point again.
    pub metadata_limit: usize,
    /// Memory budget for records held (fetched, not yet finished) per partition; above it the
    /// partition is paused. Default 16 MiB.
    pub partition_budget_bytes: usize,
    /// Memory budget for records held across all partitions. Default 256 MiB.
    pub global_budget_bytes: usize,
    /// How long a revoke waits for in-flight records before cancelling them. Default 30 s.
    pub revoke_timeout: Duration,
    /// Shutdown (the `shutdown` future of [`crate::Engine::run`] completed): how long the
    /// attempts already running may finish before they are cancelled. Queued records and records
    /// waiting for a retry stop at once and stay above the commit (the next owner handles them).
    /// When the source ends instead (a bounded input), everything admitted is drained, bounded
    /// by this too. Default 10 s: with the final commit (`final_commit_timeout`) a stop fits
    /// Kubernetes' default 30 s grace period.
    pub drain_timeout: Duration,
    /// Header carrying an immutable event id for dedup; `None` disables dedup.
    /// Default `Some("event-id")`. Dedup is per session (the store lives and dies with the
    /// session task); records of the unordered lane are not deduplicated.
    pub event_id_header: Option<String>,
    /// Header carrying a per-session sequence number (decimal) to check for ordering violations;
    /// `None` disables the checker. Default `None` (`Some("seq")` to enable).
    pub seq_header: Option<String>,
    /// Seed of the session routing hash. Default [`crate::hash::DEFAULT_SEED`].
    pub hash_seed: u64,
    /// Housekeeping period (stuck detection, resume checks, gauges). Default 100 ms.
    pub tick: Duration,
    /// What a dead letter does to its session. Default [`DlqMode::Continue`].
    pub dlq_mode: DlqMode,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            workers: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            session_id: SessionIdFrom::Key,
            batch_max: 1,
            batch_max_bytes: 1 << 20,
            batch_linger: Duration::ZERO,
            session_idle_timeout: Duration::from_secs(30),
            attempt_timeout: Some(Duration::from_secs(30)),
            retry: RetryPolicy::default(),
            dlq_retry: RetryPolicy {
                base: Duration::from_millis(100),
                factor: 2.0,
                cap: Duration::from_secs(10),
                max_attempts: None,
            },
            jitter_seed: None,
            stuck_timeout: Some(Duration::from_secs(300)),
            commit_interval: Duration::from_secs(1),
            final_commit_timeout: Duration::from_secs(10),
            metadata_limit: crate::metadata::DEFAULT_LIMIT,
            partition_budget_bytes: 16 << 20,
            global_budget_bytes: 256 << 20,
            revoke_timeout: Duration::from_secs(30),
            drain_timeout: Duration::from_secs(10),
            event_id_header: Some("event-id".to_owned()),
            seq_header: None,
            hash_seed: crate::hash::DEFAULT_SEED,
            tick: Duration::from_millis(100),
            dlq_mode: DlqMode::Continue,
        }
    }
}
