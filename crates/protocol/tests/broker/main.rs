//! The protocol layer against the real broker: one test binary, so one link and, under a plain
//! `cargo test`, one shared broker for all of these (each test uses topics, groups and
//! transactional ids of its own, so they run side by side; the SASL and TLS tests start dedicated
//! brokers with those listeners). Run one module with
//! `cargo test -p orderly-protocol --test broker idempotent::`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod fetch;
mod group;
mod idempotent;
mod no_producer_ids;
mod sasl;
#[cfg(feature = "tls")]
mod tls;
mod transactions;
mod txn;

use std::time::Duration;

use orderly_protocol::{BrokerConnection, ErrorCode};

/// Waits until partition 0 of a new topic has a leader that serves it, so a produce finds it.
/// Metadata can name the leader a moment before the partition is led there (a produce then got
/// NOT_LEADER_OR_FOLLOWER in CI); ListOffsets succeeds only at the serving leader.
pub(crate) async fn wait_for_leader(conn: &BrokerConnection, topic: &str) {
    for _ in 0..200 {
        let md = conn.metadata(Some(&[topic])).await.unwrap();
        let named = md.topics.iter().any(|t| {
            t.error_code == ErrorCode::NONE
                && t.partitions
                    .iter()
                    .any(|p| p.partition_index == 0 && p.leader_id >= 0)
        });
        if named
            && conn
                .list_offset(
                    topic,
                    0,
                    orderly_protocol::messages::list_offsets::LATEST,
                    orderly_protocol::IsolationLevel::ReadUncommitted,
                )
                .await
                .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{topic} has no leader");
}
