//! The fetcher: one multi-partition Fetch per leader broker (`fetch_loop.rs`), positions per owned
//! partition (`state.rs`), pause and resume, the lag of paused partitions (`lag.rs`), out-of-range
//! resets (`reset.rs`), on a thread of its own (`task.rs`); its settings in `config.rs`. This file
//! only wires.
//!
//! It runs on a thread of its own, `orderly-fetch`, which also owns the fetch connections (see the
//! crate docs, "Threads").
//!
//! # Ordering with rebalances
//!
//! Every assignment of a partition gets a fresh **epoch**. The fetch loop tags the records it
//! sends with the epoch it fetched under, and [`crate::source::KafkaSource`] drops records whose
//! epoch is not the partition's current one. Events travel through one FIFO channel, and the
//! rebalance bridge sends `Assigned` *before* it adds a partition here, and removes a partition
//! here *before* it sends `Revoked`. So the engine sees a partition's records only between its
//! `Assigned` and its `Revoked`/`Lost`, whatever the interleaving of the two tasks.
//!
//! # Hand-off to the engine
//!
//! A new assignment becomes fetchable in one step ([`FetchState::add_all`]), so its first fetch
//! names every partition. A response is handed to the engine in turns of at most 512 records per
//! partition (`HANDOFF_CHUNK`): every partition's first records before any partition's next
//! ones, so the sessions of the partitions at the end of a large response start as soon as those
//! at its start, instead of after every record before theirs was routed.
//!
//! # Lag of paused partitions
//!
//! A paused partition is not fetched, so its high watermark would go stale. A separate lag poller
//! (a future beside the fetch loop, never awaited by it) reads the high watermarks of all paused
//! partitions every `paused_lag_interval`: one ListOffsets request per leader broker for all of
//! that broker's paused partitions, the brokers concurrently. A slow ListOffsets delays only the
//! next lag reading, never a fetch.
//!
//! # Out-of-range positions
//!
//! When the broker says a position is out of range, the log moved under it: retention or
//! DeleteRecords removed the records below its new start, or an unclean leader election cut the log
//! below the position. The fetcher reads the log's bounds and moves the position as the group's
//! `auto_offset_reset` says (one setting for both the no-commit case and this one). Records that
//! will never be handled because of the move are never skipped silently: an error names the range,
//! and `orderly_offset_reset_skipped_records_total` counts them (see `plan_reset`).

mod config;
mod fetch_loop;
mod lag;
mod reset;
mod state;
mod task;

pub use config::{FetchConfig, RecordHook};
pub use state::{FetchState, Unanswered};
pub(crate) use task::spawn;

#[cfg(test)]
mod tests;
