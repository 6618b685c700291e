//! orderly-protocol: the only crate in orderly that speaks Kafka's wire format.
//!
//! It is built on [rskafka]'s framing, correlation and SASL (its `Messenger`, under the
//! `unstable-fuzzing` feature, pinned `=0.6.0`) and adds what a consumer stack needs and rskafka lacks:
//! per-broker connections with timeouts and reconnect, the consumer-group APIs (classic and KIP-848),
//! and the consumer-protocol payloads. No rskafka type appears in this crate's public API; only
//! `wire.rs` and the `connection` module name rskafka, so an rskafka change touches only those.
//!
//! It does not hold group state, assignment logic, or anything about ordering: those live in
//! `orderly-group` and `orderly-engine`.
//!
//! # Layout
//! - [`codec`]: Kafka primitives (classic and flexible), a panic-free decoder over `bytes::Bytes`.
//! - [`messages`]: one file per API, request and response, with the versions we speak.
//! - [`consumer_protocol`]: Subscription / Assignment payloads v0-v3.
//! - [`records`]: record batch v2 decoder and builder; [`records::compression`] (pure-Rust codecs).
//! - [`connection`]: [`BrokerConnection`] and [`ConnectionPool`] (fetch / coordination / produce
//!   connections per broker, connect and request timeouts, bounded exponential backoff, SASL).
//! - `client` and `data` (methods on [`BrokerConnection`]): `find_coordinator`, `join_group`,
//!   `sync_group`, `heartbeat`, `leave_group`, `offset_commit`, `offset_fetch`,
//!   `consumer_group_heartbeat`, `metadata`, `list_offset`, `create_topic`, `fetch`, `produce`,
//!   `produce_sequenced`, `init_producer_id`.
//! - [`producer`]: [`Producer`] (acks=all, idempotent, one batch in flight per partition, Java
//!   partitioner, a time-bounded delivery timeout).
//! - [`transaction`]: [`TransactionalProducer`] (Kafka transactions: records and a consumer
//!   group's offsets committed or aborted as one, zombies fenced by transactional id and group
//!   generation).
//! - [`partitioner`]: Kafka's murmur2, bit-for-bit the Java client's.
//! - [`error`]: [`Error`] and [`ErrorCode`], each classified with `is_retriable()`.
//! - [`tls`] (feature `tls`): [`TlsConfig`] and [`TlsProvider`], the rustls client side of a connection.
//!
//! # Versions
//! Apache Kafka 2.1 through 4.x (`messages::OLDEST_KAFKA`): FindCoordinator 1-6, JoinGroup 3-9,
//! SyncGroup 2-5, Heartbeat 2-4, LeaveGroup 2-5, OffsetCommit 6-9, OffsetFetch 5-9,
//! ConsumerGroupHeartbeat 0-1 (Kafka 4.0), Metadata 7-12, ListOffsets 4-10, CreateTopics 3-7, Fetch
//! 10-18 (13+ when topic ids are known), Produce 7-12 (7-11 in a transaction), DescribeGroups 2-5,
//! InitProducerId 1-4, AddPartitionsToTxn 1-3, AddOffsetsToTxn 1-4, TxnOffsetCommit 2-4, EndTxn 1-4,
//! DescribeConfigs 1-4.
//! Each request goes out at `min(our max, broker max)`.
//!
//! # Features
//! - `tls` (on by default): TLS through tokio-rustls (`TlsConfig`, `ConnectionConfig::tls`),
//!   verifying the broker certificate and host name against given roots. rustls's usual crypto
//!   providers (`ring`, `aws-lc-rs`) compile C; this crate uses two pure-Rust ones instead, picked
//!   by CPU features at start-up ([`TlsProvider::detect`]), so the default dependency tree stays
//!   free of C (`cargo xtask tidy` checks it). Turn the feature off to drop the crypto crates.
//! - `test-util` (off): the module `test_util`, rewriting a broker's answers in tests (a proxy's
//!   rewrites), for other crates' tests as a dev-dependency feature.
//!
//! # Not here (yet)
//! Fetch sessions (KIP-227) are not implemented.

pub mod codec;
pub mod connection;
pub mod consumer_protocol;
pub mod error;
pub mod messages;
pub mod partitioner;
pub mod producer;
pub mod records;
#[cfg(any(test, feature = "test-util"))]
pub mod test_util;
#[cfg(feature = "tls")]
pub mod tls;
pub mod transaction;

mod client;
mod data;
mod wire;

pub use connection::{
    BrokerConnection, ConnectionConfig, ConnectionKind, ConnectionPool, Negotiated, Sasl,
};
pub use data::{BatchSequence, FetchOptions, FetchSpec, PartitionFetch};
pub use error::{Context, Error, ErrorCode, Result};
pub use producer::{Producer, ProducerConfig};
pub use records::{
    Compression, FetchedRecord, IsolationLevel, ProduceRecord, WireHeader, WireHeaders,
};
#[cfg(feature = "tls")]
pub use tls::{TlsConfig, TlsProvider};
pub use transaction::{
    GroupMetadata, TransactionalConfig, TransactionalProducer, TxnError, TxnOffset, TxnState,
};
