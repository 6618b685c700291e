//! Group membership against a real Apache Kafka broker (orderly-testkit): sharing, graceful leave,
//! crash without leave, cooperative stickiness, a Java member in the same group, offsets and lag.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::collections::BTreeMap;
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
}

struct Member {
    name: String,
    handle: GroupHandle,
    seen: Arc<Mutex<Seen>>,
    task: MemberTask,
    driver: tokio::task::JoinHandle<()>,
    kill: Arc<std::sync::atomic::AtomicBool>,
    joins: Arc<Joins>,
}

/// When the member's JoinGroup requests started and were answered.
#[derive(Debug, Default)]
struct Joins {
    started: Mutex<Vec<Instant>>,
    answered: Mutex<Vec<Instant>>,
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

/// A transport that can be "killed": afterwards every request fails without reaching the broker,
/// like a process that vanished without LeaveGroup.
struct Killable {
    inner: WireTransport,
    dead: Arc<std::sync::atomic::AtomicBool>,
    joins: Arc<Joins>,
}

impl Killable {
    fn check(&self, api: Api) -> Result<(), TransportError> {
        if self.dead.load(std::sync::atomic::Ordering::SeqCst) {
            Err(TransportError {
                api,
                message: "killed".into(),
            })
        } else {
            Ok(())
        }
    }
}

impl GroupTransport for Killable {
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
        self.joins.started.lock().unwrap().push(Instant::now());
        let r = self.inner.join_group(c, r).await;
        self.joins.answered.lock().unwrap().push(Instant::now());
        r
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
}

/// Logs to the test's captured output when `RUST_LOG` is set (e.g.
/// `RUST_LOG=orderly_group=trace,orderly_protocol=debug`), so a failing run keeps the member's trace.
fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .with_ansi(false)
                .try_init();
        }
    });
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn config(group: &str, topic: &str) -> GroupConfig {
    GroupConfig::new(group, [topic])
        .with_session_timeout(Duration::from_secs(6))
        .with_heartbeat_interval(Duration::from_millis(500))
        .with_rebalance_timeout(Duration::from_secs(30))
        .with_auto_offset_reset(AutoOffsetReset::Earliest)
}

fn start(name: &str, bootstrap: &str, cfg: GroupConfig) -> Member {
    start_with_drain(name, bootstrap, cfg, Duration::ZERO)
}

/// Like [`start`], with a revoke handler that takes `drain` and then commits the revoked partitions.
fn start_with_drain(name: &str, bootstrap: &str, cfg: GroupConfig, drain: Duration) -> Member {
    init_logging();
    let dead = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let joins = Arc::new(Joins::default());
    let transport = Killable {
        joins: joins.clone(),
        inner: WireTransport::connect(
            vec![bootstrap.to_owned()],
            ConnectionConfig {
                client_id: format!("orderly-{name}"),
                ..ConnectionConfig::default()
            },
        ),
        dead: dead.clone(),
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
                if !drain.is_zero() {
                    tokio::time::sleep(drain).await;
                    let offsets = partitions
                        .iter()
                        .map(|p| CommitOffset {
                            partition: p.clone(),
                            offset: 0,
                            leader_epoch: None,
                            metadata: None,
                        })
                        .collect();
                    h.commit(offsets).await.unwrap();
                }
            }
            let mut s = s.lock().unwrap();
            match ev {
                RebalanceEvent::Assigned {
                    partitions, ack, ..
                } => {
                    s.owned
                        .extend(partitions.iter().map(|p| p.partition.clone()));
                    s.assigned.push(partitions);
                    ack.done();
                }
                RebalanceEvent::Revoked {
                    partitions, ack, ..
                } => {
                    for p in &partitions {
                        s.owned.remove(p);
                    }
                    s.revoked.push(partitions);
                    ack.done();
                }
                RebalanceEvent::Lost {
                    partitions, ack, ..
                } => {
                    for p in &partitions {
                        s.owned.remove(p);
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
        kill: dead,
        joins,
    }
}

/// Waits until `check` holds for the members' owned sets, or fails with the last state.
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
    owned.iter().map(|s| s.len()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_members_share_twelve_then_leave_and_crash() {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("grp-share", 12).await.unwrap();
    let group = broker.unique_topic("g-share");
    let a = start("a", broker.bootstrap(), config(&group, &topic.name));
    let b = start("b", broker.bootstrap(), config(&group, &topic.name));
    let c = start("c", broker.bootstrap(), config(&group, &topic.name));
    wait_for(&[&a, &b, &c], Duration::from_secs(60), "4/4/4", |o| {
        disjoint_and_total(o, 12) && counts(o) == [4, 4, 4]
    })
    .await;

    // Graceful leave: the others take over quickly (LeaveGroup, no session timeout).
    let t = Instant::now();
    a.close().await.unwrap();
    wait_for(&[&b, &c], Duration::from_secs(20), "6/6 after leave", |o| {
        disjoint_and_total(o, 12) && counts(o) == [6, 6]
    })
    .await;
    let leave_took = t.elapsed();
    assert!(
        leave_took < Duration::from_secs(5),
        "graceful leave took {leave_took:?}"
    );

    // Crash: b's requests stop reaching the broker, no LeaveGroup.
    let t = Instant::now();
    b.kill.store(true, std::sync::atomic::Ordering::SeqCst);
    wait_for(
        &[&c],
        Duration::from_secs(40),
        "c owns 12 after b's session expired",
        |o| o[0].len() == 12,
    )
    .await;
    let crash_took = t.elapsed();
    assert!(
        crash_took >= Duration::from_secs(4),
        "partitions moved after {crash_took:?}, before the 6 s session timeout could expire"
    );
    // b itself notices that no heartbeat succeeded for a session timeout: its ownership is in
    // doubt (an engine holds dispatch), but only the broker may say the partitions are gone
    // (a coordinator move looks the same from here, and costs nothing).
    let mut doubt = b.handle.in_doubt();
    tokio::time::timeout(Duration::from_secs(20), doubt.wait_for(|d| *d))
        .await
        .expect("b never noticed")
        .unwrap();
    assert!(b.seen.lock().unwrap().lost.is_empty());
    assert_eq!(b.owned().len(), 6, "b keeps its partitions while in doubt");
    // b's requests reach the broker again: it answers UNKNOWN_MEMBER_ID, b reports the loss,
    // then rejoins and gets a share again.
    b.kill.store(false, std::sync::atomic::Ordering::SeqCst);
    wait_for(
        &[&b, &c],
        Duration::from_secs(60),
        "6/6 after b is back",
        |o| disjoint_and_total(o, 12) && counts(o) == [6, 6],
    )
    .await;
    assert_eq!(b.seen.lock().unwrap().lost.len(), 1);
    assert!(!*doubt.borrow());
    c.close().await.unwrap();
    b.close().await.unwrap();
}

/// A member whose JoinGroup waits for a dead member's session to expire still commits: the
/// coordinator accepts the current generation while it prepares the rebalance, so the commit
/// must neither wait for the member's commit gate nor queue behind the parked JoinGroup on the
/// same connection (a broker answers a connection's requests one at a time). Before, it completed
/// only after the rebalance, and work done during such a wait was redone after a crash (S6).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commits_go_on_while_a_join_waits_for_a_dead_members_session() {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("grp-join-commit", 4).await.unwrap();
    let group = broker.unique_topic("g-join-commit");
    let a = start("a", broker.bootstrap(), config(&group, &topic.name));
    let c = start("c", broker.bootstrap(), config(&group, &topic.name));
    wait_for(&[&a, &c], Duration::from_secs(60), "2/2", |o| {
        disjoint_and_total(o, 4) && counts(o) == [2, 2]
    })
    .await;
    let joins_before = a.joins.started.lock().unwrap().len();
    // c vanishes without LeaveGroup; b joins, so the coordinator prepares a rebalance and a's
    // JoinGroup waits until c's 6 s session expired.
    c.kill.store(true, std::sync::atomic::Ordering::SeqCst);
    let b = start("b", broker.bootstrap(), config(&group, &topic.name));
    let t = Instant::now();
    let waiting = loop {
        let started = a.joins.started.lock().unwrap().len();
        let answered = a.joins.answered.lock().unwrap().len();
        if started > joins_before && answered < started {
            break answered; // the index of the JoinGroup now waiting
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "a never rejoined: {:?}",
            a.joins
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let partition = a.owned().into_iter().next().expect("a owns partitions");
    a.handle
        .commit(vec![CommitOffset {
            partition,
            offset: 7,
            leader_epoch: None,
            metadata: None,
        }])
        .await
        .expect("commit during the join wait");
    let committed = Instant::now();
    // That JoinGroup was answered after the commit returned: the commit did not wait for it.
    let answered = a.joins.answered.lock().unwrap().get(waiting).copied();
    assert!(
        answered.is_none_or(|at| at > committed),
        "the commit returned {:?} after the JoinGroup it should not wait for was answered",
        answered.map(|at| committed - at)
    );
    wait_for(
        &[&a, &b],
        Duration::from_secs(60),
        "2/2 after c's session",
        |o| disjoint_and_total(o, 4) && counts(o) == [2, 2],
    )
    .await;
    b.close().await.unwrap();
    a.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cooperative_sticky_keeps_unmoved_partitions() {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("grp-coop", 12).await.unwrap();
    let group = broker.unique_topic("g-coop");
    let a = start("a", broker.bootstrap(), config(&group, &topic.name));
    let b = start("b", broker.bootstrap(), config(&group, &topic.name));
    wait_for(&[&a, &b], Duration::from_secs(60), "6/6", |o| {
        disjoint_and_total(o, 12) && counts(o) == [6, 6]
    })
    .await;
    let before_a = a.owned();
    let before_b = b.owned();
    let revoked_before = (
        a.seen.lock().unwrap().revoked.len(),
        b.seen.lock().unwrap().revoked.len(),
    );

    let c = start("c", broker.bootstrap(), config(&group, &topic.name));
    wait_for(&[&a, &b, &c], Duration::from_secs(60), "4/4/4", |o| {
        disjoint_and_total(o, 12) && counts(o) == [4, 4, 4]
    })
    .await;
    for (m, before, skip) in [
        (&a, &before_a, revoked_before.0),
        (&b, &before_b, revoked_before.1),
    ] {
        let seen = m.seen.lock().unwrap();
        let now = &seen.owned;
        assert!(
            now.is_subset(before),
            "{} gained partitions it did not own",
            m.name
        );
        let revoked: PartitionSet = seen.revoked[skip..].iter().flatten().cloned().collect();
        assert_eq!(revoked.len(), 2, "{} revoked {revoked:?}", m.name);
        assert!(
            revoked.is_disjoint(now),
            "{}: a kept partition was revoked",
            m.name
        );
        assert!(seen.lost.is_empty(), "{} lost partitions", m.name);
    }
    for m in [a, b, c] {
        m.close().await.unwrap();
    }
}

/// Partition-level lines of `kafka-consumer-groups --describe`: (topic, partition) → (current, log end, lag).
fn describe_offsets(out: &str, topic: &str) -> BTreeMap<i32, (String, String, String)> {
    let mut m = BTreeMap::new();
    for line in out.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() >= 6 && cols[1] == topic {
            if let Ok(p) = cols[2].parse::<i32>() {
                m.insert(
                    p,
                    (cols[3].to_owned(), cols[4].to_owned(), cols[5].to_owned()),
                );
            }
        }
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commits_show_in_consumer_groups_tool_with_lag() {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("grp-lag", 3).await.unwrap();
    let group = broker.unique_topic("g-lag");
    // 10 records per partition.
    let client = broker.client().await.unwrap();
    for p in 0..3 {
        let pc = client
            .partition_client(
                &topic.name,
                p,
                rskafka::client::partition::UnknownTopicHandling::Retry,
            )
            .await
            .unwrap();
        let records: Vec<rskafka::record::Record> = (0..10)
            .map(|i| rskafka::record::Record {
                key: None,
                value: Some(format!("v{i}").into_bytes()),
                headers: Default::default(),
                timestamp: rskafka::chrono::DateTime::from_timestamp_millis(now_ms()).unwrap(),
            })
            .collect();
        pc.produce(
            records,
            rskafka::client::partition::Compression::NoCompression,
        )
        .await
        .unwrap();
    }

    let a = start("a", broker.bootstrap(), config(&group, &topic.name));
    wait_for(&[&a], Duration::from_secs(60), "a owns 3", |o| {
        o[0].len() == 3
    })
    .await;
    // No committed offsets: auto.offset.reset=earliest gives 0.
    let first = a
        .seen
        .lock()
        .unwrap()
        .assigned
        .iter()
        .flatten()
        .cloned()
        .collect::<Vec<_>>();
    assert!(
        first.iter().all(|p| p.start
            == StartPosition::Reset {
                offset: 0,
                policy: AutoOffsetReset::Earliest
            }),
        "{first:?}"
    );
    let offsets: Vec<CommitOffset> = (0..3)
        .map(|p| CommitOffset {
            partition: GroupPartition::new(topic.name.clone(), p),
            offset: 4 + i64::from(p),
            leader_epoch: None,
            metadata: Some(format!("orderly:{p}")),
        })
        .collect();
    a.handle.commit(offsets).await.unwrap();

    let out = broker
        .tool(
            "consumer-groups",
            &[
                "--bootstrap-server",
                broker.bootstrap(),
                "--describe",
                "--group",
                &group,
            ],
        )
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let rows = describe_offsets(&text, &topic.name);
    for p in 0..3 {
        let cur = (4 + p).to_string();
        let lag = (10 - 4 - p).to_string();
        assert_eq!(
            rows.get(&p),
            Some(&(cur, "10".to_owned(), lag)),
            "partition {p} in:\n{text}"
        );
    }
    a.close().await.unwrap();

    // A new member of the same group starts from the committed offsets, with their metadata.
    let b = start(
        "b",
        broker.bootstrap(),
        config(&group, &topic.name).with_auto_offset_reset(AutoOffsetReset::Latest),
    );
    wait_for(&[&b], Duration::from_secs(60), "b owns 3", |o| {
        o[0].len() == 3
    })
    .await;
    let got = b
        .seen
        .lock()
        .unwrap()
        .assigned
        .iter()
        .flatten()
        .cloned()
        .collect::<Vec<_>>();
    for p in got {
        let i = p.partition.partition;
        assert_eq!(
            p.start,
            StartPosition::Committed {
                offset: 4 + i64::from(i),
                leader_epoch: None,
                metadata: Some(format!("orderly:{i}"))
            }
        );
    }
    b.close().await.unwrap();

    // A fresh group with auto.offset.reset=latest starts at the log end.
    let c = start(
        "c",
        broker.bootstrap(),
        config(&broker.unique_topic("g-latest"), &topic.name)
            .with_auto_offset_reset(AutoOffsetReset::Latest),
    );
    wait_for(&[&c], Duration::from_secs(60), "c owns 3", |o| {
        o[0].len() == 3
    })
    .await;
    let got = c
        .seen
        .lock()
        .unwrap()
        .assigned
        .iter()
        .flatten()
        .cloned()
        .collect::<Vec<_>>();
    assert!(
        got.iter().all(|p| p.start
            == StartPosition::Reset {
                offset: 10,
                policy: AutoOffsetReset::Latest
            }),
        "{got:?}"
    );
    c.close().await.unwrap();
}

async fn java_member_shares_group(strategy: &str, assignor: Arc<dyn Assignor>) {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("grp-java", 12).await.unwrap();
    let group = broker.unique_topic("g-java");
    let a = start(
        "a",
        broker.bootstrap(),
        config(&group, &topic.name).with_assignors(vec![assignor]),
    );
    wait_for(&[&a], Duration::from_secs(60), "a owns 12", |o| {
        o[0].len() == 12
    })
    .await;

    let bootstrap = broker.bootstrap().to_owned();
    let (g, t) = (group.clone(), topic.name.clone());
    let strategy = format!("partition.assignment.strategy={strategy}");
    // The Java member stays until it has read one record, which the test produces only after it
    // described the group: with an idle timeout instead, a describe slowed down by a loaded
    // machine could find the Java member already gone. The long timeout only bounds a broken run.
    let java = tokio::spawn(async move {
        orderly_testkit::broker()
            .tool(
                "console-consumer",
                &[
                    "--bootstrap-server",
                    &bootstrap,
                    "--topic",
                    &t,
                    "--group",
                    &g,
                    "--consumer-property",
                    &strategy,
                    "--consumer-property",
                    "group.protocol=classic",
                    "--consumer-property",
                    "session.timeout.ms=6000",
                    "--consumer-property",
                    "heartbeat.interval.ms=500",
                    "--from-beginning",
                    "--max-messages",
                    "1",
                    "--timeout-ms",
                    "180000",
                ],
            )
            .await
    });
    wait_for(
        &[&a],
        Duration::from_secs(60),
        "a owns 6 beside the Java member",
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
    let per_member: Vec<&str> = members.iter().map(|c| c[c.len() - 1]).collect();
    assert_eq!(per_member, ["6", "6"], "partitions per member in:\n{text}");
    assert!(
        members.iter().any(|c| c[1].starts_with("orderly-a")),
        "orderly member listed in:\n{text}"
    );
    assert!(
        members.iter().any(|c| c[1].starts_with("console-consumer")),
        "Java member listed in:\n{text}"
    );

    // One record in every partition: the Java member reads one of its own and exits; orderly then
    // gets everything back.
    let client = broker.client().await.unwrap();
    for p in 0..12 {
        let pc = client
            .partition_client(
                &topic.name,
                p,
                rskafka::client::partition::UnknownTopicHandling::Retry,
            )
            .await
            .unwrap();
        let record = rskafka::record::Record {
            key: None,
            value: Some(format!("release-{p}").into_bytes()),
            headers: Default::default(),
            timestamp: rskafka::chrono::DateTime::from_timestamp_millis(now_ms()).unwrap(),
        };
        pc.produce(
            vec![record],
            rskafka::client::partition::Compression::NoCompression,
        )
        .await
        .unwrap();
    }
    let out = java.await.unwrap().unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("release-"),
        "console consumer failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(&[&a], Duration::from_secs(30), "a owns 12 again", |o| {
        o[0].len() == 12
    })
    .await;
    a.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn java_member_shares_group_cooperative_sticky() {
    java_member_shares_group(
        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
        Arc::new(CooperativeStickyAssignor),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn java_member_shares_group_range() {
    java_member_shares_group(
        "org.apache.kafka.clients.consumer.RangeAssignor",
        Arc::new(RangeAssignor),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn static_member_restart_keeps_partitions_and_duplicate_is_fenced() {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("grp-static", 4).await.unwrap();
    let group = broker.unique_topic("g-static");
    let a = start(
        "a",
        broker.bootstrap(),
        config(&group, &topic.name).with_instance_id("inst-a"),
    );
    let b = start(
        "b",
        broker.bootstrap(),
        config(&group, &topic.name).with_instance_id("inst-b"),
    );
    wait_for(&[&a, &b], Duration::from_secs(60), "2/2", |o| {
        disjoint_and_total(o, 4) && counts(o) == [2, 2]
    })
    .await;
    let a_parts = a.owned();
    // Restart a within the session timeout: static members do not leave, and get the same
    // partitions back without b seeing a rebalance.
    let b_revoked = b.seen.lock().unwrap().revoked.len();
    a.close().await.unwrap();
    let a2 = start(
        "a2",
        broker.bootstrap(),
        config(&group, &topic.name).with_instance_id("inst-a"),
    );
    wait_for(
        &[&a2],
        Duration::from_secs(30),
        "a2 owns a's partitions",
        |o| o[0] == a_parts,
    )
    .await;
    assert_eq!(
        b.seen.lock().unwrap().revoked.len(),
        b_revoked,
        "b saw a rebalance"
    );

    // A second process with b's instance id fences b.
    let b2 = start(
        "b2",
        broker.bootstrap(),
        config(&group, &topic.name).with_instance_id("inst-b"),
    );
    let err = tokio::time::timeout(Duration::from_secs(30), b.task.wait())
        .await
        .expect("b not fenced")
        .unwrap_err();
    assert!(matches!(err, GroupError::FencedInstance { .. }), "{err}");
    assert!(err.to_string().contains("inst-b"), "{err}");
    b.driver.await.unwrap();
    for m in [a2, b2] {
        m.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_revoke_longer_than_session_timeout_keeps_membership() {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("grp-drain", 4).await.unwrap();
    let group = broker.unique_topic("g-drain");
    // Eager (range): a new member makes `a` revoke everything; its drain takes 10 s, longer than
    // the 6 s session timeout. Heartbeats on their own task keep it in the group, and the commit
    // inside the revoke succeeds.
    let cfg = |name: &str| {
        (
            name.to_owned(),
            config(&group, &topic.name).with_assignors(vec![Arc::new(RangeAssignor)]),
        )
    };
    let (n, c) = cfg("a");
    let a = start_with_drain(&n, broker.bootstrap(), c, Duration::from_secs(10));
    wait_for(&[&a], Duration::from_secs(60), "a owns 4", |o| {
        o[0].len() == 4
    })
    .await;
    let (n, c) = cfg("b");
    let b = start(&n, broker.bootstrap(), c);
    wait_for(&[&a, &b], Duration::from_secs(60), "2/2", |o| {
        disjoint_and_total(o, 4) && counts(o) == [2, 2]
    })
    .await;
    {
        let seen = a.seen.lock().unwrap();
        assert_eq!(seen.revoked.len(), 1, "one eager revoke of everything");
        assert_eq!(seen.revoked[0].len(), 4);
        assert!(
            seen.lost.is_empty(),
            "a lost its partitions during the slow drain"
        );
    }
    b.close().await.unwrap();
    a.close().await.unwrap();
}
