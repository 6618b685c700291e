//! The consumer-protocol (KIP-848) member against a real Apache Kafka broker (orderly-testkit):
//! join, incremental assignment, revoke-before-ack with a committing drain, members that keep
//! their partitions never told anything, static membership (-2 leave, UNRELEASED_INSTANCE_ID),
//! regex subscription, server assignors by name, fencing after a lost session, and a Java
//! `KafkaConsumer` with `group.protocol=consumer` in the same group.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orderly_group::codes::{Api, ErrorCode};
use orderly_group::transport::*;
use orderly_group::*;
use orderly_protocol::ConnectionConfig;

/// What a member's driver saw.
#[derive(Debug, Default)]
struct Seen {
    owned: PartitionSet,
    revoked: Vec<PartitionSet>,
    lost: Vec<PartitionSet>,
    assigned: Vec<Vec<AssignedPartition>>,
    /// Commits of a revoke handler that failed.
    commit_errors: Vec<String>,
}

struct Member {
    name: String,
    handle: GroupHandle,
    seen: Arc<Mutex<Seen>>,
    task: MemberTask,
    driver: tokio::task::JoinHandle<()>,
    paused: Arc<AtomicBool>,
}

impl Member {
    fn owned(&self) -> PartitionSet {
        self.seen.lock().unwrap().owned.clone()
    }
    async fn close(self) -> Result<(), GroupError> {
        self.handle.close();
        let r = self.task.wait().await;
        self.driver.await.unwrap();
        r
    }
}

/// A transport whose requests can be made to fail for a while (a partitioned process).
struct Pausable {
    inner: WireTransport,
    paused: Arc<AtomicBool>,
}

impl Pausable {
    fn check(&self, api: Api) -> Result<(), TransportError> {
        if self.paused.load(Ordering::SeqCst) {
            Err(TransportError {
                api,
                message: "paused".into(),
            })
        } else {
            Ok(())
        }
    }
}

impl GroupTransport for Pausable {
    async fn find_coordinator(&self, g: &str) -> Result<FindCoordinatorResponse, TransportError> {
        self.check(Api::FindCoordinator)?;
        self.inner.find_coordinator(g).await
    }
    async fn join_group(
        &self,
        c: &Coordinator,
        r: JoinGroupRequest,
    ) -> Result<JoinGroupResponse, TransportError> {
        self.check(Api::JoinGroup)?;
        self.inner.join_group(c, r).await
    }
    async fn sync_group(
        &self,
        c: &Coordinator,
        r: SyncGroupRequest,
    ) -> Result<SyncGroupResponse, TransportError> {
        self.check(Api::SyncGroup)?;
        self.inner.sync_group(c, r).await
    }
    async fn heartbeat(
        &self,
        c: &Coordinator,
        r: HeartbeatRequest,
    ) -> Result<ErrorCode, TransportError> {
        self.check(Api::Heartbeat)?;
        self.inner.heartbeat(c, r).await
    }
    async fn leave_group(
        &self,
        c: &Coordinator,
        r: LeaveGroupRequest,
    ) -> Result<ErrorCode, TransportError> {
        self.check(Api::LeaveGroup)?;
        self.inner.leave_group(c, r).await
    }
    async fn offset_commit(
        &self,
        c: &Coordinator,
        r: OffsetCommitRequest,
    ) -> Result<Vec<(GroupPartition, ErrorCode)>, TransportError> {
        self.check(Api::OffsetCommit)?;
        self.inner.offset_commit(c, r).await
    }
    async fn offset_fetch(
        &self,
        c: &Coordinator,
        g: &str,
        p: &[GroupPartition],
    ) -> Result<OffsetFetchResponse, TransportError> {
        self.check(Api::OffsetFetch)?;
        self.inner.offset_fetch(c, g, p).await
    }
    async fn list_offsets(
        &self,
        p: &[GroupPartition],
        s: OffsetSpec,
    ) -> Result<BTreeMap<GroupPartition, Result<i64, ErrorCode>>, TransportError> {
        self.check(Api::ListOffsets)?;
        self.inner.list_offsets(p, s).await
    }
    async fn partition_counts(
        &self,
        t: &[String],
    ) -> Result<BTreeMap<String, i32>, TransportError> {
        self.check(Api::Metadata)?;
        self.inner.partition_counts(t).await
    }
    async fn consumer_group_heartbeat(
        &self,
        c: &Coordinator,
        r: ConsumerHeartbeatRequest,
    ) -> Result<ConsumerHeartbeatResponse, TransportError> {
        self.check(Api::ConsumerGroupHeartbeat)?;
        self.inner.consumer_group_heartbeat(c, r).await
    }
    async fn topic_ids(
        &self,
        t: Option<&[String]>,
    ) -> Result<BTreeMap<String, TopicId>, TransportError> {
        self.check(Api::Metadata)?;
        self.inner.topic_ids(t).await
    }
    async fn describe_configs(
        &self,
        c: &Coordinator,
        r: ConfigResource,
        keys: &[&str],
    ) -> Result<DescribedConfigs, TransportError> {
        self.check(Api::DescribeConfigs)?;
        self.inner.describe_configs(c, r, keys).await
    }
}

fn config(group: &str, topics: &[&str]) -> GroupConfig {
    GroupConfig::new(group, topics.iter().copied())
        .with_protocol(GroupProtocol::Consumer)
        .with_session_timeout(Duration::from_secs(6))
        .with_heartbeat_interval(Duration::from_millis(500))
        .with_rebalance_timeout(Duration::from_secs(30))
        .with_auto_offset_reset(AutoOffsetReset::Earliest)
}

/// The offset a revoke handler commits for a partition: recognisable per partition.
fn marker(tp: &GroupPartition) -> i64 {
    1000 + tp.partition as i64
}

/// Starts a member whose revoke handler waits `drain`, commits [`marker`] offsets for the revoked
/// partitions (with the member epoch, through the handle), then acknowledges.
fn start(name: &str, bootstrap: &str, cfg: GroupConfig, drain: Duration) -> Member {
    let paused = Arc::new(AtomicBool::new(false));
    let transport = Pausable {
        inner: WireTransport::connect(
            vec![bootstrap.to_owned()],
            ConnectionConfig {
                client_id: format!("orderly-{name}"),
                ..ConnectionConfig::default()
            },
        ),
        paused: paused.clone(),
    };
    let GroupMember {
        handle,
        mut events,
        task,
    } = GroupMember::spawn(cfg, Arc::new(transport), std::future::pending()).unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = seen.clone();
    let h = handle.clone();
    let driver = tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            if let RebalanceEvent::Revoked { partitions, .. } = &ev {
                tokio::time::sleep(drain).await;
                let offsets = partitions
                    .iter()
                    .map(|p| CommitOffset {
                        partition: p.clone(),
                        offset: marker(p),
                        leader_epoch: None,
                        metadata: Some("kip848".into()),
                    })
                    .collect();
                if let Err(e) = h.commit(offsets).await {
                    s.lock().unwrap().commit_errors.push(e.to_string());
                }
            }
            let mut s = s.lock().unwrap();
            match ev {
                RebalanceEvent::Assigned {
                    partitions, ack, ..
                } => {
                    for p in &partitions {
                        assert!(s.owned.insert(p.partition.clone()), "assigned twice: {p:?}");
                    }
                    s.assigned.push(partitions);
                    ack.done();
                }
                RebalanceEvent::Revoked {
                    partitions, ack, ..
                } => {
                    for p in &partitions {
                        assert!(s.owned.remove(p), "revoked but not owned: {p}");
                    }
                    s.revoked.push(partitions);
                    ack.done();
                }
                RebalanceEvent::Lost {
                    partitions, ack, ..
                } => {
                    for p in &partitions {
                        assert!(s.owned.remove(p), "lost but not owned: {p}");
                    }
                    s.lost.push(partitions);
                    ack.done();
                }
                _ => {}
            }
        }
    });
    Member {
        name: name.to_owned(),
        handle,
        seen,
        task,
        driver,
        paused,
    }
}

async fn wait_for(
    members: &[&Member],
    within: Duration,
    what: &str,
    check: impl Fn(&[PartitionSet]) -> bool,
) {
    let deadline = Instant::now() + within;
    loop {
        let owned: Vec<PartitionSet> = members.iter().map(|m| m.owned()).collect();
        if check(&owned) {
            return;
        }
        if Instant::now() > deadline {
            let counts: Vec<(String, usize)> = members
                .iter()
                .map(|m| (m.name.clone(), m.owned().len()))
                .collect();
            panic!("timed out waiting for {what}; owned counts {counts:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn disjoint_and_total(owned: &[PartitionSet], total: usize) -> bool {
    let union: PartitionSet = owned.iter().flatten().cloned().collect();
    union.len() == total && owned.iter().map(|s| s.len()).sum::<usize>() == total
}

fn counts(owned: &[PartitionSet]) -> Vec<usize> {
    let mut c: Vec<usize> = owned.iter().map(|s| s.len()).collect();
    c.sort_unstable();
    c
}

/// The test broker enforces `group.consumer.session.timeout.ms=6000`. DescribeConfigs gives it for
/// the group resource and for the coordinator's broker resource, and a member whose own
/// `session_timeout` says 45 s learns it: its lease never reaches 6 s past the present.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn member_learns_the_session_timeout_the_broker_enforces() {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("k848-session", 2).await.unwrap();
    let group = broker.unique_topic("g848-session");
    let t = topic.name.as_str();
    let wire = WireTransport::connect(
        vec![broker.bootstrap().to_owned()],
        ConnectionConfig::default(),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let coordinator = loop {
        let found = wire.find_coordinator(&group).await;
        match found {
            Ok(r) if r.error_code == ErrorCode::NONE => break r.coordinator,
            other if Instant::now() > deadline => panic!("no coordinator: {other:?}"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let by_group = wire
        .describe_configs(
            &coordinator,
            ConfigResource::Group(group.clone()),
            &["consumer.session.timeout.ms"],
        )
        .await
        .unwrap();
    assert_eq!(by_group.error_code, ErrorCode::NONE, "{by_group:?}");
    assert_eq!(
        by_group
            .values
            .get("consumer.session.timeout.ms")
            .map(String::as_str),
        Some("6000")
    );
    let by_broker = wire
        .describe_configs(
            &coordinator,
            ConfigResource::Broker(coordinator.node_id),
            &["group.consumer.session.timeout.ms"],
        )
        .await
        .unwrap();
    assert_eq!(
        by_broker
            .values
            .get("group.consumer.session.timeout.ms")
            .map(String::as_str),
        Some("6000"),
        "{by_broker:?}"
    );

    let cfg = config(&group, &[t]).with_session_timeout(Duration::from_secs(45));
    let a = start("a", broker.bootstrap(), cfg, Duration::ZERO);
    wait_for(&[&a], Duration::from_secs(60), "a owns 2", |o| {
        o[0].len() == 2
    })
    .await;
    let lease = a.handle.lease();
    for _ in 0..4 {
        let now = tokio::time::Instant::now();
        assert!(lease.holds(now), "held while heartbeats are answered");
        assert!(
            !lease.holds(now + Duration::from_secs(6)),
            "the lease follows the client's 45 s, not the broker's 6 s: {lease:?}"
        );
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    a.close().await.unwrap();
}

/// Members join one by one and one leaves: only partitions that move are revoked (after a drain
/// that commits with the member epoch), nobody loses anything, the new owner starts at the
/// committed offset, and a member that keeps its partitions hears nothing at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_join_and_leave_moving_only_what_moves() {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("k848-share", 12).await.unwrap();
    let group = broker.unique_topic("g848-share");
    let t = topic.name.as_str();
    let drain = Duration::from_millis(1500);
    let a = start("a", broker.bootstrap(), config(&group, &[t]), drain);
    wait_for(&[&a], Duration::from_secs(60), "a owns 12", |o| {
        o[0].len() == 12
    })
    .await;
    assert!(a.handle.generation().generation_id > 0, "a holds an epoch");

    let b = start("b", broker.bootstrap(), config(&group, &[t]), drain);
    wait_for(&[&a, &b], Duration::from_secs(60), "6/6", |o| {
        disjoint_and_total(o, 12) && counts(o) == [6, 6]
    })
    .await;
    {
        let sa = a.seen.lock().unwrap();
        let sb = b.seen.lock().unwrap();
        let revoked: PartitionSet = sa.revoked.iter().flatten().cloned().collect();
        assert_eq!(revoked, sb.owned, "a revoked exactly what b took");
        assert!(sa.lost.is_empty() && sb.lost.is_empty());
        assert!(sa.commit_errors.is_empty(), "{:?}", sa.commit_errors);
        // b starts where a's drain committed: the commit carried a's member epoch and was taken.
        for p in sb.assigned.iter().flatten() {
            assert_eq!(
                p.start.offset(),
                Some(marker(&p.partition)),
                "{p:?} does not start at a's committed offset"
            );
        }
    }

    let before_a = a.owned();
    let before_b = b.owned();
    let (ra, rb) = (
        a.seen.lock().unwrap().revoked.len(),
        b.seen.lock().unwrap().revoked.len(),
    );
    let c = start("c", broker.bootstrap(), config(&group, &[t]), drain);
    wait_for(&[&a, &b, &c], Duration::from_secs(60), "4/4/4", |o| {
        disjoint_and_total(o, 12) && counts(o) == [4, 4, 4]
    })
    .await;
    for (m, before, skip) in [(&a, &before_a, ra), (&b, &before_b, rb)] {
        let seen = m.seen.lock().unwrap();
        assert!(seen.owned.is_subset(before), "{} gained partitions", m.name);
        let revoked: PartitionSet = seen.revoked[skip..].iter().flatten().cloned().collect();
        assert_eq!(revoked.len(), 2, "{} revoked {revoked:?}", m.name);
        assert!(seen.lost.is_empty(), "{} lost partitions", m.name);
    }

    // c leaves gracefully: its 4 go to a and b; a and b revoke nothing.
    let (ra, rb) = (
        a.seen.lock().unwrap().revoked.len(),
        b.seen.lock().unwrap().revoked.len(),
    );
    let t0 = Instant::now();
    c.close().await.unwrap();
    wait_for(
        &[&a, &b],
        Duration::from_secs(30),
        "6/6 after c left",
        |o| disjoint_and_total(o, 12) && counts(o) == [6, 6],
    )
    .await;
    assert!(
        t0.elapsed() < Duration::from_secs(5) + drain,
        "leave took {:?}: the session timeout, not the leave, moved the partitions",
        t0.elapsed()
    );
    assert_eq!(
        a.seen.lock().unwrap().revoked.len(),
        ra,
        "a revoked on c's leave"
    );
    assert_eq!(
        b.seen.lock().unwrap().revoked.len(),
        rb,
        "b revoked on c's leave"
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// A partitioned member (no request reaches the broker) notices the session expiry (ownership in
/// doubt, partitions kept) and, once it reaches the broker again and is fenced, reports its
/// partitions lost (never revoked: no commit), and rejoins with epoch 0 once it can talk again;
/// meanwhile the other member took everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partitioned_member_loses_partitions_then_rejoins() {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("k848-fence", 4).await.unwrap();
    let group = broker.unique_topic("g848-fence");
    let t = topic.name.as_str();
    let a = start(
        "a",
        broker.bootstrap(),
        config(&group, &[t]),
        Duration::ZERO,
    );
    let b = start(
        "b",
        broker.bootstrap(),
        config(&group, &[t]),
        Duration::ZERO,
    );
    wait_for(&[&a, &b], Duration::from_secs(60), "2/2", |o| {
        disjoint_and_total(o, 4) && counts(o) == [2, 2]
    })
    .await;
    let revoked_before = a.seen.lock().unwrap().revoked.len();
    a.paused.store(true, Ordering::SeqCst);
    wait_for(&[&b], Duration::from_secs(40), "b owns 4", |o| {
        o[0].len() == 4
    })
    .await;
    // a notices (in doubt: an engine holds dispatch) but keeps its partitions: only the broker
    // may say they are gone.
    let mut doubt = a.handle.in_doubt();
    tokio::time::timeout(Duration::from_secs(20), doubt.wait_for(|d| *d))
        .await
        .expect("a never noticed")
        .unwrap();
    assert_eq!(a.owned().len(), 2, "a keeps its partitions while in doubt");
    assert!(a.seen.lock().unwrap().lost.is_empty());
    // Its heartbeats reach the broker again: fenced, so lost, then a rejoin.
    a.paused.store(false, Ordering::SeqCst);
    wait_for(&[&a], Duration::from_secs(20), "a lost its 2", |_| {
        !a.seen.lock().unwrap().lost.is_empty()
    })
    .await;
    {
        let s = a.seen.lock().unwrap();
        assert_eq!(s.lost.len(), 1, "{:?}", s.lost);
        assert_eq!(s.lost[0].len(), 2);
        assert_eq!(
            s.revoked.len(),
            revoked_before,
            "lost partitions must not be revoked"
        );
    }
    wait_for(&[&a, &b], Duration::from_secs(60), "2/2 again", |o| {
        disjoint_and_total(o, 4) && counts(o) == [2, 2]
    })
    .await;
    assert!(!*doubt.borrow());
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// The broker's session timeout (6 s on the test broker) expires while the member's own is longer:
/// the broker has removed the member, so its next heartbeat is fenced (UNKNOWN_MEMBER_ID or
/// FENCED_MEMBER_EPOCH). Partitions are reported lost and the member rejoins with epoch 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fenced_by_the_broker_rejoins_with_epoch_zero() {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("k848-fenced", 4).await.unwrap();
    let group = broker.unique_topic("g848-fenced");
    let t = topic.name.as_str();
    let cfg = config(&group, &[t]).with_session_timeout(Duration::from_secs(60));
    let a = start("a", broker.bootstrap(), cfg, Duration::ZERO);
    let b = start(
        "b",
        broker.bootstrap(),
        config(&group, &[t]),
        Duration::ZERO,
    );
    wait_for(&[&a, &b], Duration::from_secs(60), "2/2", |o| {
        disjoint_and_total(o, 4) && counts(o) == [2, 2]
    })
    .await;
    let epoch_before = a.handle.generation().generation_id;
    a.paused.store(true, Ordering::SeqCst);
    wait_for(&[&b], Duration::from_secs(40), "b owns 4", |o| {
        o[0].len() == 4
    })
    .await;
    assert_eq!(a.owned().len(), 2, "a cannot know yet");
    a.paused.store(false, Ordering::SeqCst);
    wait_for(&[&a, &b], Duration::from_secs(60), "2/2 again", |o| {
        disjoint_and_total(o, 4) && counts(o) == [2, 2]
    })
    .await;
    let lost = a.seen.lock().unwrap().lost.len();
    assert_eq!(lost, 1, "the fence reports the old partitions lost");
    assert_ne!(a.handle.generation().generation_id, epoch_before);
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// Static membership: a member closed with epoch -2 keeps its assignment on the broker, so a
/// restart with the same instance id gets the same partitions back and the other member hears
/// nothing. A second live process with a taken instance id is refused (UNRELEASED_INSTANCE_ID)
/// and stops with that error, while the owner keeps its partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn static_member_restart_and_unreleased_instance_id() {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("k848-static", 4).await.unwrap();
    let group = broker.unique_topic("g848-static");
    let t = topic.name.as_str();
    let a = start(
        "a",
        broker.bootstrap(),
        config(&group, &[t]).with_instance_id("inst-a"),
        Duration::ZERO,
    );
    let b = start(
        "b",
        broker.bootstrap(),
        config(&group, &[t]).with_instance_id("inst-b"),
        Duration::ZERO,
    );
    wait_for(&[&a, &b], Duration::from_secs(60), "2/2", |o| {
        disjoint_and_total(o, 4) && counts(o) == [2, 2]
    })
    .await;
    let a_parts = a.owned();
    let b_events = {
        let s = b.seen.lock().unwrap();
        (s.revoked.len(), s.assigned.len())
    };
    a.close().await.unwrap();
    let a2 = start(
        "a2",
        broker.bootstrap(),
        config(&group, &[t]).with_instance_id("inst-a"),
        Duration::ZERO,
    );
    wait_for(
        &[&a2],
        Duration::from_secs(30),
        "a2 owns a's partitions",
        |o| o[0] == a_parts,
    )
    .await;
    {
        let s = b.seen.lock().unwrap();
        assert_eq!(
            (s.revoked.len(), s.assigned.len()),
            b_events,
            "b saw a rebalance"
        );
    }

    // A duplicate of b while b lives: refused until it gives up (twice its session timeout).
    let dup = start(
        "dup",
        broker.bootstrap(),
        config(&group, &[t]).with_instance_id("inst-b"),
        Duration::ZERO,
    );
    let err = tokio::time::timeout(Duration::from_secs(40), dup.task.wait())
        .await
        .expect("the duplicate did not give up")
        .unwrap_err();
    match &err {
        GroupError::Fatal { code, .. } => {
            assert_eq!(*code, ErrorCode::UNRELEASED_INSTANCE_ID, "{err}")
        }
        other => panic!("unexpected {other}"),
    }
    dup.driver.await.unwrap();
    assert!(dup.seen.lock().unwrap().assigned.is_empty());
    assert_eq!(b.owned().len(), 2, "b kept its partitions");
    a2.close().await.unwrap();
    b.close().await.unwrap();
}

/// Subscription by regular expression (evaluated by the broker, RE2/J) over two topics, with the
/// `range` server assignor; and an unknown assignor name is a fatal configuration error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn regex_subscription_range_assignor_and_rack() {
    let broker = orderly_testkit::broker();
    let prefix = broker.unique_topic("k848rx");
    let t1 = format!("{prefix}-one");
    let t2 = format!("{prefix}-two");
    broker.create_topic(&t1, 2).await.unwrap();
    broker.create_topic(&t2, 2).await.unwrap();
    let group = broker.unique_topic("g848-regex");
    let cfg = GroupConfig::new(&group, Vec::<String>::new())
        .with_protocol(GroupProtocol::Consumer)
        .with_topic_regex(format!("{prefix}-.*"))
        .with_server_assignor("range")
        .with_rack("rack-1")
        .with_session_timeout(Duration::from_secs(6))
        .with_heartbeat_interval(Duration::from_millis(500))
        .with_auto_offset_reset(AutoOffsetReset::Earliest);
    let a = start("a", broker.bootstrap(), cfg.clone(), Duration::ZERO);
    let b = start("b", broker.bootstrap(), cfg, Duration::ZERO);
    wait_for(
        &[&a, &b],
        Duration::from_secs(60),
        "2/2 over two topics",
        |o| disjoint_and_total(o, 4) && counts(o) == [2, 2],
    )
    .await;
    // Range co-partitions: each member gets the same partition index of both topics.
    for m in [&a, &b] {
        let owned = m.owned();
        let topics: std::collections::BTreeSet<&str> =
            owned.iter().map(|tp| tp.topic.as_str()).collect();
        let indexes: std::collections::BTreeSet<i32> =
            owned.iter().map(|tp| tp.partition).collect();
        assert_eq!(topics.len(), 2, "{}: {owned:?}", m.name);
        assert_eq!(
            indexes.len(),
            1,
            "range gives {} one index of both topics: {owned:?}",
            m.name
        );
    }
    a.close().await.unwrap();
    b.close().await.unwrap();

    let bad = GroupConfig::new(broker.unique_topic("g848-bad"), [t1.as_str()])
        .with_protocol(GroupProtocol::Consumer)
        .with_server_assignor("no-such-assignor");
    let m = start("bad", broker.bootstrap(), bad, Duration::ZERO);
    let err = tokio::time::timeout(Duration::from_secs(30), m.task.wait())
        .await
        .expect("an unknown assignor must stop the member")
        .unwrap_err();
    assert!(
        matches!(&err, GroupError::Fatal { code, .. } if *code == ErrorCode::UNSUPPORTED_ASSIGNOR),
        "{err}"
    );
    m.driver.await.unwrap();
}

/// A Java `KafkaConsumer` with `group.protocol=consumer` (the console consumer) and an orderly
/// member share one group: 6/6, both listed by `kafka-consumer-groups`, and orderly takes
/// everything back when Java leaves, without ever losing a partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn java_consumer_protocol_member_shares_group() {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("k848-java", 12).await.unwrap();
    let group = broker.unique_topic("g848-java");
    let a = start(
        "a",
        broker.bootstrap(),
        config(&group, &[&topic.name]),
        Duration::ZERO,
    );
    wait_for(&[&a], Duration::from_secs(60), "a owns 12", |o| {
        o[0].len() == 12
    })
    .await;
    // The Java member stays until the test ends it (no idle timeout: on a busy machine the
    // JVMs start slowly, and an idle exit could come before the group is described).
    let dist = orderly_testkit::KafkaDist::ensure().unwrap();
    let mut cmd = orderly_testkit::tools::command(&dist, "console-consumer").unwrap();
    cmd.args([
        "--bootstrap-server",
        broker.bootstrap(),
        "--topic",
        &topic.name,
        "--group",
        &group,
        "--consumer-property",
        "group.protocol=consumer",
    ])
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped());
    let mut java = tokio::process::Command::from(cmd)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_for(
        &[&a],
        Duration::from_secs(60),
        "a owns 6 beside Java",
        |o| o[0].len() == 6,
    )
    .await;
    let out = broker
        .tool(
            "consumer-groups",
            &[
                "--bootstrap-server",
                broker.bootstrap(),
                "--describe",
                "--group",
                &group,
                "--members",
            ],
        )
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let members: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|c| c.len() >= 5 && c[0] == group)
        .collect();
    assert_eq!(members.len(), 2, "two members expected in:\n{text}");
    assert!(
        members
            .iter()
            .any(|c| c.iter().any(|f| f.starts_with("orderly-a"))),
        "orderly member listed in:\n{text}"
    );
    assert!(
        members
            .iter()
            .any(|c| c.iter().any(|f| f.starts_with("console-consumer"))),
        "Java member listed in:\n{text}"
    );
    // SIGTERM runs the console consumer's shutdown hook, which closes the consumer: Java leaves
    // the group.
    let pid = java.id().unwrap().to_string();
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(term.success(), "kill -TERM {pid}");
    let status = tokio::time::timeout(Duration::from_secs(60), java.wait())
        .await
        .expect("the console consumer ends on SIGTERM")
        .unwrap();
    assert!(
        status.success() || status.code() == Some(143),
        "console consumer ended with {status}"
    );
    wait_for(&[&a], Duration::from_secs(30), "a owns 12 again", |o| {
        o[0].len() == 12
    })
    .await;
    assert!(a.seen.lock().unwrap().lost.is_empty());
    a.close().await.unwrap();
}
