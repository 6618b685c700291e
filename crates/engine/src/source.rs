//! The contract between the engine and whatever feeds it records (a Kafka driver, or `mem`).

use std::future::Future;
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::record::{Record, TopicPartition};

/// Where a newly assigned partition starts, as read from the group's committed offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The partition.
    pub partition: TopicPartition,
    /// The committed offset (the next offset to read), i.e. where fetching starts.
    pub next_offset: i64,
    /// The commit metadata string stored with that offset (empty if none). The engine decodes
    /// the completed offsets above `next_offset` from it and skips them.
    pub metadata: String,
    /// Whether the group holds `next_offset` as a committed offset. `false` when it came from
    /// the offset-reset policy: the engine then commits it at its next commit even if no record
    /// arrives, so every assigned partition has a committed offset (as the Java consumer's
    /// periodic commit gives it): lag tools see it, and a record fetched there but not finished
    /// before a crash is not skipped by a next owner that would reset to the end.
    pub committed: bool,
}

/// A commit the engine asks the source to perform: Kafka semantics, `offset` is the next offset
/// to read; `metadata` carries the completed offsets above it (see [`crate::metadata`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitPoint {
    /// Next offset to read after a restart.
    pub offset: i64,
    /// Encoded completed offsets above `offset`.
    pub metadata: String,
}

/// Acknowledges a revoke: the engine sends on it after committing the revoked partitions.
pub type RevokeAck = oneshot::Sender<()>;

/// Acknowledges a loss: the engine sends on it once it dropped the partitions' work and no
/// commit that names them is in flight any more.
pub type LostAck = oneshot::Sender<()>;

/// What the source tells the engine.
#[derive(Debug)]
pub enum SourceEvent {
    /// Partitions now owned by this consumer.
    Assigned(Vec<Assignment>),
    /// Fetched records of one partition, in offset order. `high_watermark` is the partition's
    /// log end offset as of the fetch, for lag metrics.
    Records {
        /// The partition.
        partition: TopicPartition,
        /// The records, ascending offsets.
        records: Vec<Record>,
        /// The partition's high watermark, if known.
        high_watermark: Option<i64>,
    },
    /// A fresh high watermark for a partition, sent while it is paused so lag stays current.
    HighWatermark(TopicPartition, i64),
    /// Partitions being taken away in an orderly rebalance. The source must stop delivering their
    /// records; the engine waits for their in-flight records (bounded by
    /// [`EngineConfig::revoke_timeout`](crate::EngineConfig::revoke_timeout)), commits their
    /// watermark through [`Source::commit`], then sends on `ack`. The driver should hold the
    /// rebalance callback until then. The engine keeps reading events meanwhile: records of other
    /// partitions flow on, and further revokes, losses and assignments may arrive (an assignment
    /// of a partition still draining starts once the drain is committed).
    Revoked(Vec<TopicPartition>, RevokeAck),
    /// Partitions lost without a handover (session timeout, fencing): the engine drops their
    /// work and commits nothing for them. It sends on the ack once that is done and a commit it
    /// had in flight (which may name them) has finished, so a driver that holds the group member
    /// until then can never see such a commit land under the member's next generation.
    Lost(Vec<TopicPartition>, LostAck),
    /// The source cannot currently confirm that this consumer still owns its partitions (for
    /// Kafka: no group heartbeat succeeded for a session timeout, typically because the group
    /// coordinator's broker died). Another consumer may own them now, so the engine starts no
    /// handler call (first attempt, retry or dead-letter write) for any partition until
    /// [`SourceEvent::OwnershipConfirmed`], but keeps their state: nothing is dropped or
    /// redelivered if ownership is confirmed. Handler calls already running finish; commits go on
    /// (the source must refuse them if it no longer owns the partitions, as Kafka's coordinator
    /// does). If the partitions turn out to be gone, [`SourceEvent::Lost`] follows, and a revoke
    /// or shutdown abandons the records waiting (they were not started; the next owner handles
    /// them). Partitions assigned while in doubt are held too.
    OwnershipInDoubt,
    /// Ownership is confirmed again: records held since [`SourceEvent::OwnershipInDoubt`] start.
    OwnershipConfirmed,
}

/// A source failed in a way the engine cannot continue from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// Fatal: the engine drains and returns this error.
    #[error("source failed: {0}")]
    Fatal(String),
    /// A commit failed; the engine logs it, counts it (`orderly_commit_failures_total`) and
    /// commits again with backoff. A final commit (revoke, shutdown) is retried up to
    /// [`EngineConfig::final_commit_timeout`](crate::EngineConfig::final_commit_timeout).
    #[error("commit failed: {0}")]
    Commit(String),
    /// The broker refused the commit metadata as too large (OFFSET_METADATA_TOO_LARGE, or the
    /// driver's own limit): the engine halves its metadata limit and commits again at once.
    #[error("commit metadata too large: {0}")]
    MetadataTooLarge(String),
}

/// A record source: the engine pulls events from it and tells it to pause, resume and commit.
///
/// # For a Kafka driver
///
/// Run fetching and the group protocol in the driver's own tasks and hand the engine events over
/// a channel, so `next_event` is a channel receive. `Assigned` carries the committed offset and
/// metadata from OffsetFetch. `pause`/`resume` must be cheap and non-blocking (flip a flag the
/// fetcher reads); records of a paused partition that were already in flight may still be
/// delivered, the engine accepts them. While a partition is paused, keep sending
/// `HighWatermark` so lag stays visible. `commit` is an OffsetCommit with the given metadata.
/// Its future must not borrow the source (`'static`): the engine keeps dispatching records while a
/// commit waits (for example on a rebalance in progress), and has at most one commit in flight.
pub trait Source: Send + 'static {
    /// The next event; `Ok(None)` means the source is finished (the engine drains and returns).
    ///
    /// Must be cancel safe: the engine drops this future when another branch of its loop wins,
    /// and no event may be lost by that.
    fn next_event(
        &mut self,
    ) -> impl Future<Output = Result<Option<SourceEvent>, SourceError>> + Send;

    /// Stop fetching `partition` (its buffer is full). Nothing already fetched is dropped.
    fn pause(&mut self, partition: &TopicPartition);

    /// Resume fetching `partition`.
    fn resume(&mut self, partition: &TopicPartition);

    /// Commits offsets (with metadata). The future completes once the broker acknowledged; it is
    /// polled alongside [`Source::next_event`], so it owns what it needs.
    fn commit(
        &mut self,
        offsets: Vec<(TopicPartition, CommitPoint)>,
    ) -> impl Future<Output = Result<(), SourceError>> + Send + 'static;

    /// How long the source's ownership of its partitions is known to hold ([`Lease`]); `None`
    /// (the default): for as long as the source says nothing else.
    fn lease(&self) -> Option<Arc<dyn Lease>> {
        None
    }
}

/// Until when the source's ownership of its partitions is known to hold: for Kafka, a session
/// timeout after the last heartbeat the group coordinator answered (it may give the partitions
/// to another member after that). Read before every handler call starts (first attempt, retry,
/// dead-letter or reply write): once it lapsed no call starts until it holds again or the
/// partition stops, like [`SourceEvent::OwnershipInDoubt`] but without waiting for the source's
/// event. That closes the window in which a process that was frozen (SIGSTOP, a VM pause, a
/// long stall) wakes and starts calls from its old state before its driver learned that the
/// partitions moved.
pub trait Lease: Send + Sync + std::fmt::Debug + 'static {
    /// Whether the ownership holds at `now`.
    fn holds(&self, now: tokio::time::Instant) -> bool;
}
