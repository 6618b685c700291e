//! The transactions against the real broker, with the group member driven by hand, so a test
//! can hold its rebalance events where the consumer's bridge would forward them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use orderly_engine::{Assignment, CommitPoint, TopicPartition};
use orderly_group::{GroupConfig, GroupMember, RebalanceEvent, WireTransport};
use orderly_protocol::messages::heartbeat::HeartbeatRequest;
use orderly_protocol::messages::join_group::JoinGroupRequest;
use orderly_protocol::test_util::rewrite_response;
use orderly_protocol::{ConnectionConfig, ConnectionPool, ErrorCode, ProduceRecord};
use orderly_testkit::proxy::KafkaProxy;

use super::queued::Ack;
use super::{Transactions, TxnSettings};

const JOIN_GROUP: i16 = 11;
const HEARTBEAT: i16 = 12;
const TXN_OFFSET_COMMIT: i16 = 28;

/// The next rebalance event, within a generous bound.
async fn next_event(events: &mut orderly_group::RebalanceEvents) -> RebalanceEvent {
    tokio::time::timeout(Duration::from_secs(120), events.next())
        .await
        .expect("no rebalance event within 120 s")
        .expect("the member stopped")
}

/// Waits until `done()` or panics after `limit`.
async fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !done() {
        assert!(
            t0.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A member whose JoinGroup is answered UNKNOWN_MEMBER_ID has no generation (-1, no member id)
/// from then on; its partitions' `Lost` is on its way to the transactions, not there yet (the
/// test holds it where the bridge would forward it). A commit in that window must not send the
/// transaction's offsets: the group coordinator does not check a transactional commit with an
/// empty generation, so it would land on top of the new owner's. The commit is refused and no
/// TxnOffsetCommit reaches the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_without_a_generation_sends_no_transactional_offsets() {
    let b = orderly_testkit::broker();
    let topic = b.topic("txn-nogen-in", 1).await.unwrap();
    let replies = b.topic("txn-nogen-replies", 1).await.unwrap();
    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    let pool = Arc::new(ConnectionPool::new(
        vec![proxy.bootstrap().to_owned()],
        ConnectionConfig::default(),
    ));
    let group = b.unique_topic("txn-nogen-g");
    let mut gcfg = GroupConfig::new(group.clone(), [topic.name.clone()]);
    gcfg.session_timeout = Duration::from_secs(30);
    gcfg.heartbeat_interval = Duration::from_millis(300);
    let member = GroupMember::spawn(
        gcfg,
        Arc::new(WireTransport::new(pool.clone())),
        std::future::pending(),
    )
    .unwrap();
    let GroupMember {
        handle,
        mut events,
        task: _task,
    } = member;

    let txn = Transactions::new(
        pool.clone(),
        TxnSettings {
            transactional_id: b.unique_topic("txn-nogen-tid"),
            timeout: Duration::from_secs(60),
            group_id: group.clone(),
            instance_id: None,
            metadata_limit: 4096,
        },
    );
    txn.init().await.unwrap();
    txn.set_group(handle.clone());

    let tp = TopicPartition {
        topic: Arc::from(topic.name.as_str()),
        partition: 0,
    };
    match next_event(&mut events).await {
        RebalanceEvent::Assigned { ack, .. } => {
            txn.assigned(&Assignment {
                partition: tp.clone(),
                next_offset: 0,
                metadata: String::new(),
                committed: false,
            });
            ack.done();
        }
        other => panic!("expected the assignment first: {other:?}"),
    }
    assert!(handle.generation().is_valid());

    // The record at offset 0 answered in the open transaction.
    let reply = ProduceRecord {
        key: Some(Bytes::from_static(b"s")),
        value: Some(Bytes::from_static(b"r0")),
        headers: Vec::new(),
        timestamp: None,
    };
    txn.write(
        (&tp, 0),
        vec![(replies.name.as_str(), 0, reply)],
        Ack::Written,
    )
    .await
    .unwrap();

    // The coordinator asks for a rebalance, and the JoinGroup that follows is answered
    // UNKNOWN_MEMBER_ID (every one: the member stays without a generation).
    let asked = Arc::new(AtomicUsize::new(0));
    let once = asked.clone();
    proxy.rewrite_responses(
        HEARTBEAT,
        Arc::new(move |version, frame| {
            rewrite_response::<HeartbeatRequest>(version, frame, |resp| {
                if once.fetch_add(1, Ordering::SeqCst) > 0 {
                    return false;
                }
                resp.error_code = ErrorCode::REBALANCE_IN_PROGRESS;
                true
            })
        }),
    );
    proxy.rewrite_responses(
        JOIN_GROUP,
        Arc::new(move |version, frame| {
            rewrite_response::<JoinGroupRequest>(version, frame, |resp| {
                resp.error_code = ErrorCode::UNKNOWN_MEMBER_ID;
                true
            })
        }),
    );
    let held = loop {
        match next_event(&mut events).await {
            RebalanceEvent::Lost { ack, .. } => break ack,
            RebalanceEvent::Assigned { ack, .. } | RebalanceEvent::Revoked { ack, .. } => {
                ack.done();
            }
            _ => {}
        }
    };
    wait_until(
        Duration::from_secs(60),
        "the member without generation",
        || !handle.generation().is_valid(),
    )
    .await;

    let result = txn
        .commit(vec![(
            tp.clone(),
            CommitPoint {
                offset: 1,
                metadata: String::new(),
            },
        )])
        .await;
    assert!(
        result.is_err(),
        "a commit without a generation was accepted"
    );
    assert_eq!(
        proxy.seen(TXN_OFFSET_COMMIT),
        0,
        "no TxnOffsetCommit from a member without a generation"
    );
    drop(held);
    handle.close();
}
