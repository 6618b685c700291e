//! Operator tools as library functions: what `orderly produce`, `orderly dlq` and `orderly status`
//! do, callable by an embedding program too (the CLI only parses flags and prints).
//!
//! - [`produce`]: [`produce::Batcher`] (batches, one in flight per partition, partitions in
//!   parallel, idempotent acks=all), [`produce::SessionWorkload`] (the generated session workload)
//!   [`produce::read_topic`] (a whole topic up to its end) and [`produce::TopicReader`] (in chunks).
//! - [`dlq`]: reading (streamed) and selecting dead letters, replaying them to their source topic in
//!   source order with replay markers.
//! - [`MetadataCache`]: the metadata cache (leaders, partition counts, ListOffsets) the tools read
//!   topics through; `MetadataCache::new` over a `ConnectionPool` of the protocol crate.
//! - [`status`]: a group's members, assignments, committed offsets, decoded commit metadata, lag and
//!   oldest unfinished offset.

pub use crate::metadata_cache::MetadataCache;

pub mod dlq;
pub mod produce;
pub mod status;
