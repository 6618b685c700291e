//! The transactional producer against the real broker: what it commits is what Apache Kafka's own
//! console consumer reads under read_committed (and the group's offsets are what it set), what it
//! aborts is never read and leaves the offsets alone, a second producer with the same
//! transactional id fences the first, and the group coordinator fences offsets of a stale
//! generation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use orderly_protocol::consumer_protocol::{Assignment, Subscription, TopicPartitions};
use orderly_protocol::messages::join_group::{
    JoinGroupProtocol, JoinGroupRequest, PROTOCOL_TYPE_CONSUMER,
};
use orderly_protocol::messages::list_offsets::LATEST;
use orderly_protocol::messages::offset_fetch::{
    OffsetFetchGroup, OffsetFetchRequest, OffsetFetchTopic,
};
use orderly_protocol::messages::sync_group::{SyncGroupAssignment, SyncGroupRequest};
use orderly_protocol::{
    BrokerConnection, ConnectionConfig, ConnectionKind, ConnectionPool, ErrorCode, GroupMetadata,
    IsolationLevel, ProduceRecord, TransactionalConfig, TransactionalProducer, TxnError, TxnOffset,
    TxnState,
};
use orderly_testkit::proxy::KafkaProxy;

const TXN_TIMEOUT: Duration = Duration::from_secs(60);

fn pool() -> Arc<ConnectionPool> {
    Arc::new(ConnectionPool::new(
        vec![orderly_testkit::broker().bootstrap().to_string()],
        ConnectionConfig::default(),
    ))
}

fn producer(pool: &Arc<ConnectionPool>) -> TransactionalProducer {
    TransactionalProducer::new(Arc::clone(pool), TransactionalConfig::default())
}

fn record(value: &str) -> ProduceRecord {
    ProduceRecord {
        key: Some(bytes::Bytes::copy_from_slice(value.as_bytes())),
        value: Some(bytes::Bytes::copy_from_slice(value.as_bytes())),
        ..Default::default()
    }
}

/// A classic-protocol member of `group` that is its only member and leader, joined and synced
/// with raw group requests (no heartbeats: the test is over long before the session timeout).
struct Member {
    conn: Arc<BrokerConnection>,
    group: String,
    topic: String,
    member_id: String,
    generation_id: i32,
}

impl Member {
    async fn join(pool: &ConnectionPool, group: &str, topic: &str) -> Member {
        let any = pool.any().await.unwrap();
        let c = any
            .find_coordinator_within(group, Duration::from_secs(30))
            .await
            .unwrap();
        let conn = pool
            .get(&c.addr(), ConnectionKind::Coordination)
            .await
            .unwrap();
        let mut m = Member {
            conn,
            group: group.to_string(),
            topic: topic.to_string(),
            member_id: String::new(),
            generation_id: -1,
        };
        m.rejoin().await;
        m
    }

    /// JoinGroup (again) and SyncGroup as the leader: a new generation.
    async fn rejoin(&mut self) {
        let sub = Subscription {
            version: 3,
            topics: vec![self.topic.clone()],
            generation_id: -1,
            ..Default::default()
        };
        let mut join = JoinGroupRequest {
            group_id: self.group.clone(),
            session_timeout_ms: 60_000,
            rebalance_timeout_ms: 30_000,
            member_id: self.member_id.clone(),
            group_instance_id: None,
            protocol_type: PROTOCOL_TYPE_CONSUMER.to_string(),
            protocols: vec![JoinGroupProtocol {
                name: "range".into(),
                metadata: sub.encode().unwrap(),
            }],
            reason: None,
        };
        let t0 = std::time::Instant::now();
        let joined = loop {
            let r = self.conn.join_group(&join).await.unwrap();
            match r.error_code {
                ErrorCode::NONE => break r,
                ErrorCode::MEMBER_ID_REQUIRED => join.member_id = r.member_id.clone(),
                ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
                    if t0.elapsed() < Duration::from_secs(60) =>
                {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                other => panic!("JoinGroup: {other}"),
            }
        };
        assert_eq!(joined.leader, joined.member_id);
        let assignment = Assignment {
            version: 3,
            assigned_partitions: vec![TopicPartitions {
                topic: self.topic.clone(),
                partitions: vec![0],
            }],
            user_data: None,
        };
        let synced = self
            .conn
            .sync_group(&SyncGroupRequest {
                group_id: self.group.clone(),
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
        self.member_id = joined.member_id;
        self.generation_id = joined.generation_id;
    }

    fn metadata(&self) -> GroupMetadata {
        GroupMetadata {
            group_id: self.group.clone(),
            generation_id: self.generation_id,
            member_id: self.member_id.clone(),
            group_instance_id: None,
        }
    }

    /// The group's committed offset and metadata of partition 0 (-1: none), stable offsets only.
    async fn committed(&self) -> (i64, Option<String>) {
        let t0 = std::time::Instant::now();
        loop {
            let resp = self
                .conn
                .offset_fetch(&OffsetFetchRequest {
                    groups: vec![OffsetFetchGroup {
                        group_id: self.group.clone(),
                        member_id: None,
                        member_epoch: -1,
                        topics: Some(vec![OffsetFetchTopic {
                            name: self.topic.clone(),
                            partition_indexes: vec![0],
                        }]),
                    }],
                    require_stable: true,
                })
                .await
                .unwrap();
            let p = &resp.groups[0].topics[0].partitions[0];
            // A transaction's offsets are pending until its markers are written.
            if p.error_code == ErrorCode::UNSTABLE_OFFSET_COMMIT
                && t0.elapsed() < Duration::from_secs(30)
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            assert_eq!(p.error_code, ErrorCode::NONE);
            return (p.committed_offset, p.metadata.clone());
        }
    }
}

/// The values Apache Kafka's console consumer reads from `topic` (one partition) under
/// read_committed, from the beginning, until it has read `count` (or 60 s passed without a new
/// one). Every test reads exactly the records it committed last, so a record that must stay
/// invisible (produced before them) would take one of their places.
async fn read_committed(topic: &str, count: usize) -> Vec<String> {
    orderly_testkit::broker()
        .read_committed(topic, orderly_testkit::ReadUntil::Count(count))
        .await
        .unwrap()
        .into_iter()
        .map(|(_, v)| v)
        .collect()
}

/// The last stable offset of partition 0 (what read_committed consumers may read up to).
async fn last_stable_offset(pool: &ConnectionPool, topic: &str) -> i64 {
    let (_, md) = pool.metadata(Some(&[topic])).await.unwrap();
    let leader = md.topics[0].partitions[0].leader_id;
    let conn = pool.broker(leader, ConnectionKind::Fetch).await.unwrap();
    conn.list_offset(topic, 0, LATEST, IsolationLevel::ReadCommitted)
        .await
        .unwrap()
        .0
}

/// Committed records are read by Kafka's own read_committed consumer (and only after the commit:
/// the last stable offset stays at the transaction's first record until then), and the group's
/// offsets with their metadata are what `send_offsets` set.
#[tokio::test]
async fn a_committed_transaction_is_read_committed_with_its_offsets() {
    let b = orderly_testkit::broker();
    let topic = b.topic("txn-commit", 1).await.unwrap();
    let input = b.topic("txn-commit-in", 1).await.unwrap();
    let pool = pool();
    let member = Member::join(&pool, &b.unique_topic("txn-g"), &input.name).await;
    let p = producer(&pool);
    p.init(&b.unique_topic("tid"), TXN_TIMEOUT).await.unwrap();
    assert_eq!(p.state(), TxnState::Ready);

    p.begin().unwrap();
    for i in 0..3 {
        p.send_batch(&topic.name, 0, &[record(&format!("c-{i}"))])
            .await
            .unwrap();
    }
    let (partition, _) = p.send(&topic.name, record("c-3")).await.unwrap();
    assert_eq!(partition, 0);
    p.send_offsets(
        &member.metadata(),
        &[TxnOffset {
            topic: input.name.clone(),
            partition: 0,
            offset: 42,
            leader_epoch: -1,
            metadata: Some("done:44,45".into()),
        }],
    )
    .await
    .unwrap();
    assert_eq!(
        last_stable_offset(&pool, &topic.name).await,
        0,
        "records of an open transaction must not be stable"
    );
    p.commit().await.unwrap();
    assert_eq!(p.state(), TxnState::Ready);

    // A second transaction on the same producer: sequences and partitions carry on.
    p.begin().unwrap();
    p.send_batch(&topic.name, 0, &[record("c-4"), record("c-5")])
        .await
        .unwrap();
    p.commit().await.unwrap();

    let want: Vec<String> = (0..6).map(|i| format!("c-{i}")).collect();
    assert_eq!(read_committed(&topic.name, 6).await, want);
    assert_eq!(
        member.committed().await,
        (42, Some("done:44,45".to_string()))
    );
}

/// Aborted records are never read under read_committed (a committed record produced after them
/// shows the consumer read past them), and the group's offsets keep their committed value.
#[tokio::test]
async fn an_aborted_transaction_is_invisible_and_keeps_the_offsets() {
    let b = orderly_testkit::broker();
    let topic = b.topic("txn-abort", 1).await.unwrap();
    let input = b.topic("txn-abort-in", 1).await.unwrap();
    let pool = pool();
    let member = Member::join(&pool, &b.unique_topic("txn-g"), &input.name).await;
    let offsets = |offset: i64, md: &str| {
        vec![TxnOffset {
            topic: input.name.clone(),
            partition: 0,
            offset,
            leader_epoch: -1,
            metadata: Some(md.to_string()),
        }]
    };
    let p = producer(&pool);
    p.init(&b.unique_topic("tid"), TXN_TIMEOUT).await.unwrap();

    p.begin().unwrap();
    p.send_batch(&topic.name, 0, &[record("first")])
        .await
        .unwrap();
    p.send_offsets(&member.metadata(), &offsets(10, "ten"))
        .await
        .unwrap();
    p.commit().await.unwrap();

    p.begin().unwrap();
    p.send_batch(&topic.name, 0, &[record("aborted-0"), record("aborted-1")])
        .await
        .unwrap();
    p.send_offsets(&member.metadata(), &offsets(20, "twenty"))
        .await
        .unwrap();
    p.abort().await.unwrap();
    assert_eq!(p.state(), TxnState::Ready);

    p.begin().unwrap();
    p.send_batch(&topic.name, 0, &[record("last")])
        .await
        .unwrap();
    p.commit().await.unwrap();

    assert_eq!(read_committed(&topic.name, 2).await, ["first", "last"]);
    assert_eq!(member.committed().await, (10, Some("ten".to_string())));
}

/// A second producer with the same transactional id fences the first: the first one's next send
/// and its commit fail as fenced, its open transaction is aborted, and the second one commits.
#[tokio::test]
async fn a_second_producer_with_the_same_id_fences_the_first() {
    let b = orderly_testkit::broker();
    let topic = b.topic("txn-fence", 1).await.unwrap();
    let pool = pool();
    let tid = b.unique_topic("tid");
    let zombie = producer(&pool);
    zombie.init(&tid, TXN_TIMEOUT).await.unwrap();
    zombie.begin().unwrap();
    zombie
        .send_batch(&topic.name, 0, &[record("zombie-0")])
        .await
        .unwrap();

    // Its own pool: another process, as far as the broker can tell.
    let successor = producer(&self::pool());
    successor.init(&tid, TXN_TIMEOUT).await.unwrap();
    let (zid, zepoch) = zombie.producer_id().unwrap();
    let (sid, sepoch) = successor.producer_id().unwrap();
    assert_eq!(zid, sid);
    assert!(sepoch > zepoch);

    let err = zombie
        .send_batch(&topic.name, 0, &[record("zombie-1")])
        .await
        .unwrap_err();
    assert!(
        matches!(err, TxnError::ProducerFenced { .. }) && err.is_fenced(),
        "{err:?}"
    );
    assert_eq!(zombie.state(), TxnState::Fenced);
    let err = zombie.commit().await.unwrap_err();
    assert!(matches!(err, TxnError::ProducerFenced { .. }), "{err:?}");

    successor.begin().unwrap();
    successor
        .send_batch(&topic.name, 0, &[record("successor")])
        .await
        .unwrap();
    successor.commit().await.unwrap();
    assert_eq!(read_committed(&topic.name, 1).await, ["successor"]);
}

/// A transaction the coordinator aborted at its timeout fences the producer (its epoch was
/// bumped), but no other producer took the id: `recover_epoch` lets it go on under a new epoch,
/// and what it wrote in the aborted transaction is never read.
#[tokio::test]
async fn a_producer_fenced_by_its_transaction_timeout_recovers_its_epoch() {
    let b = orderly_testkit::broker();
    let topic = b.topic("txn-timeout", 1).await.unwrap();
    let pool = pool();
    let tid = b.unique_topic("tid");
    let p = producer(&pool);
    p.init(&tid, Duration::from_secs(1)).await.unwrap();
    p.begin().unwrap();
    p.send_batch(&topic.name, 0, &[record("timed-out-0")])
        .await
        .unwrap();
    // The coordinator aborts it at its next sweep after the timeout; until then sends succeed.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let err = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        match p.send_batch(&topic.name, 0, &[record("timed-out-n")]).await {
            Ok(_) => assert!(
                std::time::Instant::now() < deadline,
                "the coordinator never aborted the transaction"
            ),
            Err(e) => break e,
        }
    };
    assert!(err.is_fenced(), "{err:?}");
    p.recover_epoch().await.unwrap();
    assert_eq!(p.state(), TxnState::Ready);
    p.begin().unwrap();
    p.send_batch(&topic.name, 0, &[record("after")])
        .await
        .unwrap();
    p.commit().await.unwrap();
    assert_eq!(read_committed(&topic.name, 1).await, ["after"]);
}

/// A producer fenced by another producer with its transactional id stays fenced:
/// `recover_epoch` is refused and the successor is not disturbed.
#[tokio::test]
async fn a_producer_fenced_by_another_cannot_recover_its_epoch() {
    let b = orderly_testkit::broker();
    let topic = b.topic("txn-fence-recover", 1).await.unwrap();
    let tid = b.unique_topic("tid");
    let zombie = producer(&pool());
    zombie.init(&tid, TXN_TIMEOUT).await.unwrap();
    zombie.begin().unwrap();
    zombie
        .send_batch(&topic.name, 0, &[record("zombie")])
        .await
        .unwrap();
    let successor = producer(&pool());
    successor.init(&tid, TXN_TIMEOUT).await.unwrap();
    let err = zombie.commit().await.unwrap_err();
    assert!(err.is_fenced(), "{err:?}");
    let err = zombie.recover_epoch().await.unwrap_err();
    assert!(err.is_fenced(), "{err:?}");
    assert_eq!(zombie.state(), TxnState::Fenced);
    successor.begin().unwrap();
    successor
        .send_batch(&topic.name, 0, &[record("successor")])
        .await
        .unwrap();
    successor.commit().await.unwrap();
    assert_eq!(read_committed(&topic.name, 1).await, ["successor"]);
}

/// A fenced producer that was never told (it had nothing in flight) learns it at its commit.
#[tokio::test]
async fn a_fenced_producer_cannot_commit() {
    let b = orderly_testkit::broker();
    let topic = b.topic("txn-fence-commit", 1).await.unwrap();
    let pool = pool();
    let tid = b.unique_topic("tid");
    let zombie = producer(&pool);
    zombie.init(&tid, TXN_TIMEOUT).await.unwrap();
    zombie.begin().unwrap();
    zombie
        .send_batch(&topic.name, 0, &[record("zombie")])
        .await
        .unwrap();
    producer(&self::pool())
        .init(&tid, TXN_TIMEOUT)
        .await
        .unwrap();
    let err = zombie.commit().await.unwrap_err();
    assert!(err.is_fenced(), "{err:?}");
    assert_eq!(zombie.state(), TxnState::Fenced);
}

/// KIP-447: offsets sent with a generation the group has moved past are refused as fenced, the
/// transaction must be aborted, and after the abort the producer works on with the current
/// generation.
#[tokio::test]
async fn offsets_of_a_stale_generation_are_fenced() {
    let b = orderly_testkit::broker();
    let topic = b.topic("txn-gen", 1).await.unwrap();
    let input = b.topic("txn-gen-in", 1).await.unwrap();
    let pool = pool();
    let mut member = Member::join(&pool, &b.unique_topic("txn-g"), &input.name).await;
    let stale = member.metadata();
    member.rejoin().await;
    assert!(member.generation_id > stale.generation_id);
    let offsets = vec![TxnOffset {
        topic: input.name.clone(),
        partition: 0,
        offset: 7,
        leader_epoch: -1,
        metadata: Some("seven".into()),
    }];

    let p = producer(&pool);
    p.init(&b.unique_topic("tid"), TXN_TIMEOUT).await.unwrap();
    p.begin().unwrap();
    p.send_batch(&topic.name, 0, &[record("zombie-reply")])
        .await
        .unwrap();
    let err = p.send_offsets(&stale, &offsets).await.unwrap_err();
    match &err {
        TxnError::GroupFenced { group_id, source } => {
            assert_eq!(group_id, &stale.group_id);
            assert_eq!(source.code(), Some(ErrorCode::ILLEGAL_GENERATION));
        }
        other => panic!("{other:?}"),
    }
    assert!(err.is_fenced() && err.is_abortable());
    assert_eq!(p.state(), TxnState::AbortableError);
    assert!(p.commit().await.unwrap_err().is_abortable());
    p.abort().await.unwrap();

    p.begin().unwrap();
    p.send_batch(&topic.name, 0, &[record("reply")])
        .await
        .unwrap();
    p.send_offsets(&member.metadata(), &offsets).await.unwrap();
    p.commit().await.unwrap();
    assert_eq!(read_committed(&topic.name, 1).await, ["reply"]);
    assert_eq!(member.committed().await, (7, Some("seven".to_string())));
}

const PRODUCE: i16 = 0;

/// A proxy in front of the test broker, and a connection pool that reaches the broker through it.
async fn through_proxy() -> (KafkaProxy, Arc<ConnectionPool>) {
    let proxy = KafkaProxy::start(orderly_testkit::broker().bootstrap())
        .await
        .unwrap();
    let pool = Arc::new(ConnectionPool::new(
        vec![proxy.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    (proxy, pool)
}

/// The end of partition 0's log, aborted and open transactions included.
async fn log_end(pool: &ConnectionPool, topic: &str) -> i64 {
    let (_, md) = pool.metadata(Some(&[topic])).await.unwrap();
    let leader = md.topics[0].partitions[0].leader_id;
    let conn = pool.broker(leader, ConnectionKind::Fetch).await.unwrap();
    conn.list_offset(topic, 0, LATEST, IsolationLevel::ReadUncommitted)
        .await
        .unwrap()
        .0
}

/// A batch whose response is lost is sent again with its sequence, and the broker keeps it once.
#[tokio::test]
async fn a_batch_retried_after_a_lost_response_is_in_the_transaction_once() {
    let b = orderly_testkit::broker();
    let topic = b.topic("txn-lost", 1).await.unwrap();
    let (proxy, pool) = through_proxy().await;
    let p = producer(&pool);
    p.init(&b.unique_topic("tid"), TXN_TIMEOUT).await.unwrap();
    p.begin().unwrap();
    proxy.lose_responses(PRODUCE, 1);
    p.send_batch(&topic.name, 0, &[record("once-0"), record("once-1")])
        .await
        .unwrap();
    assert_eq!(proxy.lost(PRODUCE), 1, "the first response was lost");
    assert_eq!(proxy.seen(PRODUCE), 2, "and the batch sent again");
    p.send_batch(&topic.name, 0, &[record("once-2")])
        .await
        .unwrap();
    p.commit().await.unwrap();
    assert_eq!(
        read_committed(&topic.name, 3).await,
        ["once-0", "once-1", "once-2"]
    );
}

/// A send cancelled while its batch is held on the way, which then reaches the broker and is
/// written: the transaction is abortable (it cannot commit), the abort takes a new epoch, and the
/// next transaction's first batch (sequence 0 again) is written rather than taken for a duplicate
/// of the cancelled one.
#[tokio::test]
async fn a_send_cancelled_in_flight_aborts_and_takes_a_new_epoch() {
    let b = orderly_testkit::broker();
    let topic = b.topic("txn-cancel", 1).await.unwrap();
    let (proxy, pool) = through_proxy().await;
    let p = producer(&pool);
    p.init(&b.unique_topic("tid"), TXN_TIMEOUT).await.unwrap();
    let (_, epoch) = p.producer_id().unwrap();
    p.begin().unwrap();
    proxy.hold(PRODUCE);
    let cancelled = [record("cancelled")];
    {
        let send = p.send_batch(&topic.name, 0, &cancelled);
        tokio::pin!(send);
        let t0 = std::time::Instant::now();
        while proxy.held_now(PRODUCE) == 0 {
            assert!(t0.elapsed() < Duration::from_secs(60), "Produce never sent");
            tokio::select! {
                r = &mut send => panic!("the send finished while its Produce was held: {r:?}"),
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    }
    assert_eq!(p.state(), TxnState::AbortableError);
    // The held batch reaches the broker after all, under the old epoch and sequence 0.
    proxy.release(PRODUCE);
    let direct = self::pool();
    let t0 = std::time::Instant::now();
    while log_end(&direct, &topic.name).await < 1 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the held batch was never written"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(p.commit().await.unwrap_err().is_abortable());
    p.abort().await.unwrap();
    let (_, new_epoch) = p.producer_id().unwrap();
    assert!(new_epoch > epoch, "a new epoch after the abort");

    p.begin().unwrap();
    p.send_batch(&topic.name, 0, &[record("after")])
        .await
        .unwrap();
    p.commit().await.unwrap();
    assert_eq!(read_committed(&topic.name, 1).await, ["after"]);
}

/// A batch the broker wrote while its answer reports a refusal (INVALID_RECORD): the transaction
/// can only abort, and the next transaction's batch of the same size is written, not answered as
/// a duplicate of the refused one. The producer cannot tell such a batch from one the broker
/// turned away, so the abort restarts the sequences under a new epoch.
#[tokio::test]
async fn a_batch_answered_as_refused_is_not_taken_for_the_next_ones_duplicate() {
    use orderly_protocol::messages::produce::ProduceRequest;
    use orderly_protocol::test_util::{refuse_every_partition, rewrite_response};

    let b = orderly_testkit::broker();
    let topic = b.topic("txn-refused", 1).await.unwrap();
    let (proxy, pool) = through_proxy().await;
    let p = producer(&pool);
    p.init(&b.unique_topic("tid"), TXN_TIMEOUT).await.unwrap();
    let (_, epoch) = p.producer_id().unwrap();
    let spoil = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let once = Arc::clone(&spoil);
    proxy.rewrite_responses(
        PRODUCE,
        Arc::new(move |version, frame| {
            rewrite_response::<ProduceRequest>(version, frame, |resp| {
                // Only an answer that says the batch was written (a refusal the broker really
                // gave, such as NOT_LEADER_OR_FOLLOWER for a topic just created, passes as it is).
                let written = resp
                    .responses
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .all(|p| p.error_code == ErrorCode::NONE);
                if !written || !once.swap(false, std::sync::atomic::Ordering::SeqCst) {
                    return false;
                }
                refuse_every_partition(resp, ErrorCode::INVALID_RECORD);
                true
            })
        }),
    );

    p.begin().unwrap();
    let err = p
        .send_batch(&topic.name, 0, &[record("refused")])
        .await
        .unwrap_err();
    assert!(err.is_abortable(), "{err}");
    assert!(!spoil.load(std::sync::atomic::Ordering::SeqCst));
    assert_eq!(
        log_end(&self::pool(), &topic.name).await,
        1,
        "the broker wrote it"
    );
    p.abort().await.unwrap();
    let (_, new_epoch) = p.producer_id().unwrap();
    assert!(new_epoch > epoch, "a new epoch after the abort");

    p.begin().unwrap();
    let offset = p
        .send_batch(&topic.name, 0, &[record("written")])
        .await
        .unwrap();
    assert!(
        offset >= 0,
        "written, not taken for a duplicate (offset {offset})"
    );
    p.commit().await.unwrap();
    assert_eq!(read_committed(&topic.name, 1).await, ["written"]);
}

/// Batches for several partitions of a topic go in one AddPartitionsToTxn and one Produce
/// request per leader, each with its own sequence: two rounds to three partitions take about two
/// Produce requests and one registration, and read_committed holds every record once.
#[tokio::test]
async fn batches_for_many_partitions_share_one_request() {
    const ADD_PARTITIONS: i16 = 24;
    let b = orderly_testkit::broker();
    let topic = b.topic("txn-many", 3).await.unwrap();
    let (proxy, pool) = through_proxy().await;
    let p = producer(&pool);
    p.init(&b.unique_topic("tid"), TXN_TIMEOUT).await.unwrap();
    p.begin().unwrap();
    let round = |n: usize| -> Vec<Vec<ProduceRecord>> {
        (0..3)
            .map(|part| {
                (0..n)
                    .map(|i| record(&format!("r{n}-p{part}-{i}")))
                    .collect()
            })
            .collect()
    };
    let mut want = Vec::new();
    for n in [2, 3] {
        let records = round(n);
        let batches: Vec<(i32, &[ProduceRecord])> = records
            .iter()
            .enumerate()
            .map(|(part, r)| (part as i32, r.as_slice()))
            .collect();
        let answers = p.send_batches(&topic.name, &batches).await.unwrap();
        assert_eq!(answers.len(), 3);
        for a in answers {
            assert!(a.unwrap() >= 0);
        }
        want.extend(
            records
                .iter()
                .flatten()
                .map(|r| String::from_utf8(r.value.as_ref().unwrap().to_vec()).unwrap()),
        );
    }
    // One Produce per round and one registration, give or take a retry (a topic just created
    // may answer NOT_LEADER_OR_FOLLOWER at first): a request per partition would be six and three.
    let (produces, registrations) = (proxy.seen(PRODUCE), proxy.seen(ADD_PARTITIONS));
    assert!(
        produces < 6,
        "{produces} Produce requests for 6 batches in 2 rounds"
    );
    assert!(
        registrations < 3,
        "{registrations} AddPartitionsToTxn for 3 partitions"
    );
    p.commit().await.unwrap();
    let mut got = read_committed(&topic.name, want.len()).await;
    got.sort();
    want.sort();
    assert_eq!(got, want);
}
