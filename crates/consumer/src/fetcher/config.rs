//! The fetch settings ([`FetchConfig`], part of [`crate::ConsumerConfig`]) and the hook that may
//! prepare each record before it is handed over ([`RecordHook`]).

use std::sync::Arc;
use std::time::Duration;

use orderly_engine::Record;
use orderly_protocol::records::IsolationLevel;

/// Fetch settings (part of [`crate::ConsumerConfig`]).
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// Long-poll wait per fetch. Default 500 ms.
    pub max_wait: Duration,
    /// Long-poll wait per fetch to a broker that also leads a paused partition (paused for the
    /// engine's memory budget). A broker answers one fetch per connection at a time, so a
    /// partition that resumes waits for the fetch in flight, which long-polls up to `max_wait`
    /// when the other partitions are caught up; this bounds that wait, so a small partition
    /// budget does not turn every pause into a long poll. Default 20 ms.
    pub paused_max_wait: Duration,
    /// Response byte limit per fetch. Default 50 MiB (Java `fetch.max.bytes`).
    pub max_bytes: i32,
    /// Byte limit per partition per fetch. Default 1 MiB (Java `max.partition.fetch.bytes`).
    pub partition_max_bytes: i32,
    /// Isolation. Default read_committed (aborted transactions are never handled).
    pub isolation: IsolationLevel,
    /// How often paused partitions' high watermarks are read, so lag stays current: one
    /// ListOffsets per leader broker for all its paused partitions, off the fetch path. Default 1 s.
    ///
    /// (Where a position that is out of range goes is not a fetch setting: the group's
    /// `auto_offset_reset` decides it, see the module docs.)
    pub paused_lag_interval: Duration,
    /// A corrupt batch (CRC, bad compression) is re-fetched this many times before the driver
    /// fails with an error naming topic, partition and offset. Default 3.
    pub corrupt_batch_retries: u32,
    /// Runs on every fetched record before the engine sees it (e.g. to write a session id the
    /// engine can read into a header). Default none.
    pub prepare: Option<RecordHook>,
}

/// A function applied to each fetched record before the engine routes it.
#[derive(Clone)]
pub struct RecordHook(pub Arc<dyn Fn(&mut Record) + Send + Sync>);

impl std::fmt::Debug for RecordHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordHook")
    }
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            max_wait: Duration::from_millis(500),
            paused_max_wait: Duration::from_millis(20),
            max_bytes: 50 * 1024 * 1024,
            partition_max_bytes: 1024 * 1024,
            isolation: IsolationLevel::ReadCommitted,
            paused_lag_interval: Duration::from_secs(1),
            corrupt_batch_retries: 3,
            prepare: None,
        }
    }
}
