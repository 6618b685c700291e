//! Every group API round-trips against the real broker (Apache Kafka 4.3.1 from orderly-testkit).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use orderly_protocol::consumer_protocol::{Assignment, Subscription, TopicPartitions};
use orderly_protocol::messages::consumer_group_heartbeat::ConsumerGroupHeartbeatRequest;
use orderly_protocol::messages::heartbeat::HeartbeatRequest;
use orderly_protocol::messages::join_group::{
    JoinGroupProtocol, JoinGroupRequest, PROTOCOL_TYPE_CONSUMER,
};
use orderly_protocol::messages::leave_group::{LeaveGroupRequest, LeavingMember};
use orderly_protocol::messages::offset_commit::{
    OffsetCommitPartition, OffsetCommitRequest, OffsetCommitTopic,
};
use orderly_protocol::messages::offset_fetch::{
    OffsetFetchGroup, OffsetFetchRequest, OffsetFetchTopic,
};
use orderly_protocol::messages::sync_group::{SyncGroupAssignment, SyncGroupRequest};
use orderly_protocol::{ConnectionConfig, ConnectionKind, ConnectionPool, ErrorCode};

async fn coordinator(
    pool: &ConnectionPool,
    group: &str,
) -> std::sync::Arc<orderly_protocol::BrokerConnection> {
    let any = pool.any().await.unwrap();
    // A fresh cluster answers COORDINATOR_NOT_AVAILABLE while __consumer_offsets is created.
    for _ in 0..60 {
        match any.find_coordinator(group).await {
            Ok(c) => {
                return pool
                    .get(&c.addr(), ConnectionKind::Coordination)
                    .await
                    .unwrap();
            }
            Err(e) if e.is_retriable() => {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await
            }
            Err(e) => panic!("find_coordinator: {e}"),
        }
    }
    panic!("no coordinator");
}

#[tokio::test]
async fn classic_group_round_trip() {
    let broker = orderly_testkit::broker();
    let topic = broker.unique_topic("grp");
    broker.create_topic(&topic, 3).await.unwrap();
    let group = broker.unique_topic("g");
    let pool = ConnectionPool::new(
        vec![broker.bootstrap().to_string()],
        ConnectionConfig::default(),
    );
    let conn = coordinator(&pool, &group).await;

    let sub = Subscription {
        version: 3,
        topics: vec![topic.clone()],
        generation_id: -1,
        ..Default::default()
    };
    let mut join = JoinGroupRequest {
        group_id: group.clone(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        member_id: String::new(),
        group_instance_id: None,
        protocol_type: PROTOCOL_TYPE_CONSUMER.to_string(),
        protocols: vec![JoinGroupProtocol {
            name: "range".into(),
            metadata: sub.encode().unwrap(),
        }],
        reason: Some("test".into()),
    };
    let first = conn.join_group(&join).await.unwrap();
    assert_eq!(first.error_code, ErrorCode::MEMBER_ID_REQUIRED);
    assert!(!first.member_id.is_empty());
    join.member_id = first.member_id.clone();
    let joined = conn.join_group(&join).await.unwrap();
    assert_eq!(joined.error_code, ErrorCode::NONE, "{joined:?}");
    assert_eq!(joined.leader, joined.member_id);
    assert_eq!(joined.protocol_name.as_deref(), Some("range"));
    assert_eq!(joined.members.len(), 1);
    let their_sub = Subscription::decode(joined.members[0].metadata.clone()).unwrap();
    assert_eq!(their_sub.topics, vec![topic.clone()]);

    let assignment = Assignment {
        version: 3,
        assigned_partitions: vec![TopicPartitions {
            topic: topic.clone(),
            partitions: vec![0, 1, 2],
        }],
        user_data: None,
    };
    let synced = conn
        .sync_group(&SyncGroupRequest {
            group_id: group.clone(),
            generation_id: joined.generation_id,
            member_id: joined.member_id.clone(),
            group_instance_id: None,
            protocol_type: Some(PROTOCOL_TYPE_CONSUMER.into()),
            protocol_name: joined.protocol_name.clone(),
            assignments: vec![SyncGroupAssignment {
                member_id: joined.member_id.clone(),
                assignment: assignment.encode().unwrap(),
            }],
        })
        .await
        .unwrap();
    assert_eq!(synced.error_code, ErrorCode::NONE);
    assert_eq!(Assignment::decode(synced.assignment).unwrap(), assignment);

    let hb = conn
        .heartbeat(&HeartbeatRequest {
            group_id: group.clone(),
            generation_id: joined.generation_id,
            member_id: joined.member_id.clone(),
            group_instance_id: None,
        })
        .await
        .unwrap();
    assert_eq!(hb.error_code, ErrorCode::NONE);

    let commit = conn
        .offset_commit(&OffsetCommitRequest {
            group_id: group.clone(),
            generation_id_or_member_epoch: joined.generation_id,
            member_id: joined.member_id.clone(),
            group_instance_id: None,
            topics: vec![OffsetCommitTopic {
                name: topic.clone(),
                partitions: vec![OffsetCommitPartition {
                    partition_index: 1,
                    committed_offset: 0,
                    committed_leader_epoch: -1,
                    committed_metadata: Some("meta".into()),
                }],
            }],
        })
        .await
        .unwrap();
    assert_eq!(commit.first_error(), None, "{commit:?}");

    let fetched = conn
        .offset_fetch(&OffsetFetchRequest {
            groups: vec![OffsetFetchGroup {
                group_id: group.clone(),
                member_id: None,
                member_epoch: -1,
                topics: Some(vec![OffsetFetchTopic {
                    name: topic.clone(),
                    partition_indexes: vec![0, 1],
                }]),
            }],
            require_stable: true,
        })
        .await
        .unwrap();
    let g = &fetched.groups[0];
    assert_eq!(g.error_code, ErrorCode::NONE);
    let parts = &g.topics[0].partitions;
    let p1 = parts.iter().find(|p| p.partition_index == 1).unwrap();
    assert_eq!(
        (p1.committed_offset, p1.metadata.as_deref()),
        (0, Some("meta"))
    );
    let p0 = parts.iter().find(|p| p.partition_index == 0).unwrap();
    assert_eq!(p0.committed_offset, -1);

    let left = conn
        .leave_group(&LeaveGroupRequest {
            group_id: group.clone(),
            members: vec![LeavingMember {
                member_id: joined.member_id.clone(),
                group_instance_id: None,
                reason: Some("done".into()),
            }],
        })
        .await
        .unwrap();
    assert_eq!(left.error_code, ErrorCode::NONE);
    assert_eq!(left.members[0].error_code, ErrorCode::NONE);
}

#[tokio::test]
async fn consumer_group_heartbeat_join_and_leave() {
    let broker = orderly_testkit::broker();
    let topic = broker.unique_topic("cghb");
    broker.create_topic(&topic, 2).await.unwrap();
    let group = broker.unique_topic("g848");
    let pool = ConnectionPool::new(
        vec![broker.bootstrap().to_string()],
        ConnectionConfig::default(),
    );
    let conn = coordinator(&pool, &group).await;
    let member_id = format!("m{:032x}", rand_u128());
    let mut req = ConsumerGroupHeartbeatRequest {
        group_id: group.clone(),
        member_id: member_id.clone(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec![topic.clone()]),
        topic_partitions: Some(vec![]),
        ..Default::default()
    };
    let mut assigned = 0;
    let mut epoch = 0;
    for _ in 0..20 {
        let resp = conn.consumer_group_heartbeat(&req).await.unwrap();
        assert_eq!(resp.error_code, ErrorCode::NONE, "{resp:?}");
        assert_eq!(resp.member_id.as_deref(), Some(member_id.as_str()));
        epoch = resp.member_epoch;
        if let Some(a) = resp.assignment {
            assigned = a.iter().map(|t| t.partitions.len()).sum();
            req.topic_partitions = Some(a);
        }
        if assigned == 2 {
            break;
        }
        req.member_epoch = epoch;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(assigned, 2);
    assert!(epoch > 0);
    req.member_epoch = -1;
    let resp = conn.consumer_group_heartbeat(&req).await.unwrap();
    assert_eq!(resp.error_code, ErrorCode::NONE);
    assert_eq!(resp.member_epoch, -1);
}

fn rand_u128() -> u128 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    t ^ u128::from(std::process::id())
}
