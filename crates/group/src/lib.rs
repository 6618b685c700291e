//! orderly-group: a hand-written Kafka consumer-group member (classic protocol and KIP-848).
//!
//! It owns group membership and tells its user (the engine) which partitions it owns and when it
//! must give them back: it finds the coordinator, joins the group, runs the assignor when it leads,
//! heartbeats on its own task, hands partitions over through an ordered [`RebalanceEvent`] stream,
//! looks up start offsets and commits offsets. It does **not** fetch or process records (that is
//! `orderly-engine`'s job) and it does not encode Kafka requests itself (that is
//! `orderly-protocol`'s; this crate talks to it through [`GroupTransport`]).
//!
//! # Using it (the engine's Kafka driver)
//!
//! ```no_run
//! use std::sync::Arc;
//! use orderly_group::{CommitOffset, GroupConfig, GroupMember, RebalanceEvent, WireTransport};
//! use orderly_protocol::ConnectionConfig;
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let transport = Arc::new(WireTransport::connect(
//!     vec!["localhost:9092".into()],
//!     ConnectionConfig::default(),
//! ));
//! let shutdown = async {
//!     let _ = tokio::signal::ctrl_c().await;
//! };
//! let config = GroupConfig::new("my-group", ["orders"]);
//! let GroupMember { handle, mut events, task } = GroupMember::spawn(config, transport, shutdown)?;
//! while let Some(event) = events.next().await {
//!     match event {
//!         RebalanceEvent::Assigned { partitions, ack, .. } => {
//!             for p in &partitions {
//!                 // Start fetching p.partition at p.start.offset().
//!                 let _ = p.start.offset();
//!             }
//!             ack.done();
//!         }
//!         RebalanceEvent::Revoked { partitions, ack, .. } => {
//!             // Stop fetching `partitions`, drain in-flight work, then commit the watermarks.
//!             let watermarks: Vec<CommitOffset> = Vec::new();
//!             handle.commit(watermarks).await?;
//!             ack.done();
//!         }
//!         RebalanceEvent::Lost { ack, .. } => ack.done(), // stop at once, no commit
//!         _ => {}
//!     }
//! }
//! task.wait().await?; // Ok after a graceful close, the fatal error otherwise
//! # Ok(())
//! # }
//! ```
//!
//! While [`GroupHandle::in_doubt`] is `true` (no heartbeat succeeded for a session timeout, e.g.
//! the coordinator's broker died), start no processing of owned partitions but keep their state:
//! the member keeps heartbeating, and either the coordinator confirms it (the watch turns `false`,
//! nothing was lost) or says it is gone (a `Lost` event); `crates/group/DESIGN.md`, invariant 6.
//!
//! # Layout
//!
//! * [`handle`]: [`GroupMember::spawn`] (the member of the configured protocol), [`GroupHandle`],
//!   [`MemberTask`].
//! * [`classic`]: the classic-protocol member (JoinGroup / SyncGroup / Heartbeat).
//! * [`kip848`]: the consumer-protocol (KIP-848) member, chosen with [`GroupProtocol::Consumer`];
//!   same events, same handle.
//! * [`listener`]: the rebalance-listener contract (event stream or async trait).
//! * [`assignor`]: the [`Assignor`] trait and `range`, `roundrobin`, `cooperative-sticky`.
//! * [`codes`]: every error code and the action taken for it (the table).
//! * [`offsets`]: start positions (OffsetFetch, ListOffsets) and serialised commits.
//! * [`transport`]: the [`GroupTransport`] trait the member talks through.
//! * [`wire`]: [`GroupTransport`] over `orderly-protocol`.
//! * [`payload`]: consumer-protocol Subscription/Assignment payloads.
//! * `testing`: a scripted fake coordinator (feature `test-util`, and in this crate's tests).
//! * [`config`], [`error`], [`types`].

pub mod assignor;
mod broker_session;
pub mod classic;
pub mod codes;
pub mod config;
pub mod error;
pub mod handle;
mod heartbeat;
pub mod kip848;
mod lease;
pub mod listener;
pub mod offsets;
pub mod payload;
mod shared;
mod shutdown;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
pub mod transport;
pub mod types;
pub mod wire;

#[cfg(test)]
mod kip848_tests;
#[cfg(test)]
mod tests;

pub use assignor::{
    Assignor, CooperativeStickyAssignor, RangeAssignor, RebalanceProtocol, RoundRobinAssignor,
};
pub use config::{GroupConfig, GroupProtocol};
pub use error::{CommitError, GroupError};
pub use handle::{GroupHandle, GroupMember, MemberTask};
pub use lease::OwnershipLease;
pub use listener::{
    Ack, AssignedPartition, LostReason, RebalanceEvent, RebalanceEvents, RebalanceListener,
};
pub use transport::GroupTransport;
pub use types::{
    AutoOffsetReset, CommitOffset, Generation, GroupPartition, PartitionSet, StartPosition,
};
pub use wire::WireTransport;
