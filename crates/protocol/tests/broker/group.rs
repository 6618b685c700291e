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
    let c = any
        .find_coordinator_within(group, std::time::Duration::from_secs(30))
        .await
        .unwrap();
    pool.get(&c.addr(), ConnectionKind::Coordination)
        .await
        .unwrap()
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
    // A coordinator found on a broker that has just started may still be loading its
    // __consumer_offsets partition (COORDINATOR_LOAD_IN_PROGRESS): asked again, as a client does.
    let t0 = std::time::Instant::now();
    let first = loop {
        let r = conn.join_group(&join).await.unwrap();
        if r.error_code != ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
            || t0.elapsed() > std::time::Duration::from_secs(60)
        {
            break r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
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
    let mut conn = coordinator(&pool, &group).await;
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
    let mut answers = 0;
    let loading_since = std::time::Instant::now();
    while answers < 20 {
        let resp = conn.consumer_group_heartbeat(&req).await.unwrap();
        // A coordinator still electing or loading its partition of __consumer_offsets (slow on
        // a busy machine: the topic is created by the first group request) answers with one of
        // the retriable coordinator codes; a client backs off, finds the coordinator again and
        // asks again.
        if resp.error_code == ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
            || resp.error_code.is_coordinator_error()
        {
            assert!(
                loading_since.elapsed() < std::time::Duration::from_secs(300),
                "no coordinator ready after 5 minutes: {resp:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            conn = coordinator(&pool, &group).await;
            continue;
        }
        answers += 1;
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

/// A TCP proxy in front of the broker that can swallow the broker's answers: a half-open
/// connection, or a frame lost on the way back.
struct BlackHoleProxy {
    addr: String,
    swallow: std::sync::Arc<std::sync::atomic::AtomicBool>,
    accepted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl BlackHoleProxy {
    async fn start(upstream: &str) -> BlackHoleProxy {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let swallow = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (sw, acc, upstream) = (swallow.clone(), accepted.clone(), upstream.to_owned());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                acc.fetch_add(1, Ordering::SeqCst);
                let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw_half) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut cr, &mut sw_half).await;
                });
                let swallow = sw.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        match sr.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) if !swallow.load(Ordering::SeqCst) => {
                                if cw.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                            Ok(_) => {} // swallowed
                        }
                    }
                });
            }
        });
        BlackHoleProxy {
            addr,
            swallow,
            accepted,
        }
    }

    fn swallow(&self, on: bool) {
        self.swallow.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    fn accepted(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A request its caller gave up on (the caller's own deadline fired before the
/// connection's; the group member bounds every request that way) must take its connection out of
/// the pool. Were it kept as "healthy" and the answer never came, every later request on it
/// would hang too, and a member would retry FindCoordinator on it forever, its heartbeats stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_request_takes_its_connection_out_of_the_pool() {
    let broker = orderly_testkit::broker();
    let proxy = BlackHoleProxy::start(broker.bootstrap()).await;
    let pool = ConnectionPool::new(vec![proxy.addr.clone()], ConnectionConfig::default());
    let conn = pool
        .get(&proxy.addr, ConnectionKind::Coordination)
        .await
        .unwrap();
    conn.metadata(Some(&[])).await.unwrap();
    assert!(!conn.is_broken());

    // The broker's answer is lost; the caller's own deadline (far below the connection's 30 s)
    // abandons the request.
    proxy.swallow(true);
    let abandoned = tokio::time::timeout(
        std::time::Duration::from_millis(300),
        conn.metadata(Some(&[])),
    )
    .await;
    assert!(abandoned.is_err(), "the answer went through the black hole");
    assert!(
        conn.is_broken(),
        "an abandoned request must mark its connection broken"
    );

    // The pool replaces it: a new TCP connection, and it works.
    proxy.swallow(false);
    let fresh = pool
        .get(&proxy.addr, ConnectionKind::Coordination)
        .await
        .unwrap();
    assert!(!std::sync::Arc::ptr_eq(&conn, &fresh));
    assert_eq!(proxy.accepted(), 2);
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        fresh.metadata(Some(&[])),
    )
    .await
    .expect("the fresh connection answers")
    .unwrap();

    // A request that completes leaves its connection alone.
    assert!(!fresh.is_broken());
}
