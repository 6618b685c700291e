//! orderly-engine: per-session ordering with parallelism across sessions.
//!
//! The engine takes records from a [`Source`], routes each to its **session** (the record key by
//! default, or a header), and runs a [`Handler`] on one record of a session at a time, in arrival
//! order, while thousands of sessions run in parallel. It retries transient errors in place,
//! dead-letters permanent ones through a [`DeadLetterSink`], and commits per partition only up to
//! the highest contiguous finished offset.
//!
//! **Architecture invariant:** the engine knows nothing about Kafka's wire format. It is generic
//! over a source and a handler, so it runs under deterministic (paused) time in tests with
//! [`mem::MemSource`]. A Kafka driver implements [`Source`] on top of `orderly-protocol` and
//! `orderly-group`.
//!
//! # Using it
//!
//! ```no_run
//! use orderly_engine::{Attempt, Engine, EngineConfig, Handler, HandlerError, Record};
//! use orderly_engine::mem::{MemDeadLetters, MemSource};
//!
//! struct Print;
//! impl Handler for Print {
//!     async fn handle(&self, record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
//!         tracing::info!(offset = record.offset, "handled");
//!         Ok(())
//!     }
//! }
//!
//! # async fn demo() -> Result<(), orderly_engine::EngineError> {
//! let (source, _handle) = MemSource::new(500);
//! let engine = Engine::new(EngineConfig::default(), Print, MemDeadLetters::new());
//! let stats = engine.stats();
//! engine.run(source, async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! println!("handled {}", stats.handled());
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! - [`record`]: `TopicPartition`, `Record`, `Header`, `Headers` (up to two kept inline),
//!   `SharedBuffer`.
//! - [`handler`]: the `Handler` and `DeadLetterSink` contracts and `DeadLetter`.
//! - [`reply`]: `Reply`, the records a handler returns, and the `ReplySink` that writes them
//!   before their record counts as done.
//! - [`source`]: the `Source` contract and its events (assigned, records, revoked, lost).
//! - `engine` (re-exported): the dispatch loop: trackers, backpressure, commits, handover,
//!   shutdown.
//! - `worker` (private): session tables and the per-record future (handle, retry, dead-letter).
//! - [`tracker`]: per-partition in-flight/completed offsets and the commit point.
//! - [`metadata`]: the commit-metadata codec for completed offsets above the commit point.
//! - [`metric_specs`]: every metric the engine emits, described, and the `MetricSpec` type.
//! - [`hash`]: session routing (seeded hash + jump consistent hash).
//! - [`parked`]: sessions parked after a dead letter (`DlqMode::ParkSession`), their store and
//!   replay rounds.
//! - [`retry`], [`dedup`], [`trace`], [`config`], [`stats`]: what their names say.
//! - [`mem`]: an in-memory source and dead-letter sink.
//!
//! # How work flows
//!
//! One **dispatch loop** (the task that calls [`Engine::run`]) owns all partition state: it
//! admits fetched records into each partition's [`tracker`] (charging their bytes to the
//! budgets), hashes the session id onto one of N **workers** and hands records over in batches
//! (one channel send per worker per fetch, not per record). Workers report completions back in
//! batches. The loop advances watermarks, pauses and resumes partitions, commits, detects stuck
//! gaps, and handles revoke/loss/shutdown. No lock guards partition state: it has one owner.
//!
//! Each worker keeps a table of **active sessions**. A session exists while it has a record
//! running or queued, and for `session_idle_timeout` after; then it is dropped with its queue,
//! sequence state and dedup store, so memory follows active sessions. The "task per session" is
//! the session's current record future inside the worker's `FuturesUnordered`, plus its queue:
//! at most one future per session exists, so records of a session run strictly one after the
//! other, while futures of different sessions interleave freely. We chose this over a tokio
//! task per session because a spawned task costs an allocation, a scheduler hop per record and a
//! `JoinHandle`, and needs `'static` captures (an `Arc` clone per record); the worker's futures
//! instead borrow the shared context, and an idle session costs only its table entry and id
//! (`benches/src/bin/engine.rs` counts the bytes), a session with a record in flight that plus
//! its record and future, an evicted one nothing (the table shrinks when it empties).
//!
//! The per-record future is kept small on purpose: it is written whole into its box for every
//! record, so timers, cancellation guards, retries and the dead-letter path are boxed and
//! allocated only when a record actually waits or fails. A worker polls each cleared record's
//! future once as it starts it, in a box kept from the last record that finished on its first
//! poll: a handler that does not wait costs no allocation and never enters the
//! `FuturesUnordered`; only a record still pending moves there, with its box.
//!
//! Records **without a session id** go to an unordered lane: spread round-robin over workers and
//! started at once, concurrently, still tracked by the watermark.
//!
//! # Guarantees (tested in `tests/`)
//!
//! - A **session** is one session id within one topic-partition: the same key on two partitions
//!   (or topics) is two sessions, with their own order, retries, dedup store and `seq` check.
//! - For two records of one session, the handler for the later one starts only after the
//!   earlier one is terminal (handled, or its dead-letter write acknowledged).
//! - A record whose handler returned replies is terminal only once the [`ReplySink`] has
//!   acknowledged all of them; so a session's replies are written in its order, and a failed
//!   write is retried (never skipped) while the session waits.
//! - A commit never passes an offset that is not terminal. Completed offsets above the commit
//!   point travel in the commit metadata (see [`metadata`] for the overflow rule) and are
//!   skipped on reassignment, but only once the partition's high watermark shows they can be
//!   real (metadata claiming offsets at or above it is ignored: a replay, never a skip).
//! - Commits run beside dispatch: at most one is in flight, and a slow one (a rebalance holds
//!   it back) never stops records from being dispatched and completed. A failed commit is
//!   retried with backoff; metadata refused as too large is halved; a final commit (revoke,
//!   shutdown) is retried for `final_commit_timeout`, and `run` returns
//!   [`EngineError::Commit`] if shutdown's never succeeded.
//! - On revoke, records not started are skipped, records running are awaited up to
//!   `revoke_timeout` then cancelled, the watermark is committed, and only then is the revoke
//!   acknowledged; nothing that finishes later is committed by this engine. The revoke is a state
//!   of the dispatch loop, not a wait: partitions that keep their owner go on being dispatched
//!   and completed meanwhile, revokes and losses may overlap, and a partition assigned again
//!   while it drains starts after the drain. A loss is acknowledged once its work is dropped and
//!   no commit naming it is in flight.
//! - Shutdown drains for `drain_timeout`; [`StopHandle::stop_now`] cuts that short: records
//!   still running are cancelled and the contiguous done watermark is committed.
//! - A record blocking its partition's watermark longer than `stuck_timeout` is cancelled (its
//!   handler future dropped) and then dead-lettered with reason `stuck`. A dead-letter write
//!   still failing past that timeout is reported (`orderly_dlq_stalled_total`), never skipped.
//! - Backpressure pauses a partition's fetching when its held bytes (or the global total) pass
//!   the budget and resumes it below half after any release of budget (completion, revoke,
//!   loss); no record is ever dropped. Every tracker entry between the watermark and the fetch
//!   position is charged too, so a held watermark pauses fetching instead of growing memory.
//! - With [`DlqMode::ParkSession`], a dead letter parks its session: its later records follow
//!   it to the DLQ in order (reason `parked`) until [`ParkedSessions::release`] or a replay
//!   round releases it in order. With a [`ParkedStore`], the parked set is written before the
//!   record that changed it counts as done, and loaded for assigned partitions before any of
//!   their records is dispatched, so every owner of a partition honours it.
//!
//! # Writing a Kafka driver
//!
//! A driver implements [`Source`]: it runs the group protocol and fetching in its own tasks and
//! hands the engine [`SourceEvent`]s over a channel (so `next_event` is a cancel-safe receive).
//! `Assigned` carries each partition's committed offset and metadata from OffsetFetch; the
//! engine decodes the metadata and skips what was completed. `Revoked` and `Lost` carry an ack
//! sender: hold the rebalance callback (and the member's next join) until the engine sends on it
//! (it has committed, or dropped the partitions and finished its commit in flight, by then).
//! `pause`/`resume` flip flags the fetcher reads; keep sending `HighWatermark` for paused
//! partitions. `commit` returns an owned (`'static`) future of an OffsetCommit with the given
//! metadata, completing on the broker's answer; map a refusal of the metadata as too large to
//! [`SourceError::MetadataTooLarge`]. Leaving the group is the driver's job once [`Engine::run`]
//! has returned.
//!
//! The library installs no tracing subscriber and no metrics recorder; install a recorder before
//! `run` (metric handles are resolved when it starts). Metric names start with `orderly_`.

pub mod config;
pub mod dedup;
mod engine;
pub mod handler;
mod handoff;
pub mod hash;
pub mod mem;
pub mod metadata;
pub mod metric_specs;
pub mod parked;
pub mod record;
pub mod reply;
pub mod retry;
pub mod source;
pub mod stats;
mod timer;
pub mod trace;
pub mod tracker;
mod worker;

pub use config::{DlqMode, EngineConfig, SessionIdFrom};
pub use dedup::{DedupStore, DedupStores, RecentIds, RecentIdsStores};
pub use engine::{Engine, EngineError, StopHandle};
pub use handler::{
    Attempt, BatchOutcome, DeadLetter, DeadLetterReason, DeadLetterSink, DlqError, ErrorSource,
    Handler, HandlerError,
};
pub use handoff::held::waiting_for_endpoint;
pub use handoff::ownership::{Ownership, ownership_holds};
pub use parked::{
    MemParkedStore, ParkedSession, ParkedSessions, ParkedStore, ParkedStoreError, StoreFuture,
};
pub use record::{Header, Headers, Record, SharedBuffer, TopicPartition};
pub use reply::{BatchReplies, Reply, ReplyError, ReplyFuture, ReplySink};
pub use retry::RetryPolicy;
pub use source::{
    Assignment, CommitPoint, Lease, LostAck, RevokeAck, Source, SourceError, SourceEvent,
};
pub use stats::{EngineStats, PartitionStats};
pub use trace::TraceParent;
pub use tracker::OldestInFlight;
