//! Against a real 3-node KRaft cluster: SIGKILL of the node that is the group coordinator
//! must not cost the members their partitions. A classic and a consumer-protocol (KIP-848) member,
//! each with a session timeout (5 s) shorter than the time the cluster takes to move the
//! coordinator (the dead node is fenced after `broker.session.timeout.ms`, 6 s in the test
//! cluster), ride it out: their ownership is in doubt for a while, then the new coordinator (which
//! loaded the groups from `__consumer_offsets` and restarted their sessions) answers their
//! heartbeats with the same generation / member epoch. No Lost, no new assignment (so nothing is
//! redelivered), and a commit with the kept generation succeeds. Before the fix both members
//! reported their partitions lost about 5 s after the kill and rejoined.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orderly_group::*;
use orderly_protocol::{BrokerConnection, ConnectionConfig};
use orderly_testkit::cluster::{ClusterOptions, TestCluster};

/// Leader of `__consumer_offsets` partition 0: the coordinator of every group
/// (`offsets.topic.num.partitions=1` in the test cluster).
async fn coordinator_node(cluster: &TestCluster) -> Option<i32> {
    for node in cluster.nodes() {
        if !cluster.is_running(node.id) {
            continue;
        }
        let Ok(conn) =
            BrokerConnection::connect(&node.address(), &ConnectionConfig::default()).await
        else {
            continue;
        };
        let Ok(md) = conn.metadata(Some(&["__consumer_offsets"])).await else {
            continue;
        };
        let leader = md
            .topics
            .first()?
            .partitions
            .iter()
            .find(|p| p.partition_index == 0)?
            .leader_id;
        return (leader >= 0).then_some(leader);
    }
    None
}

/// What the test's "engine" saw of one member.
#[derive(Default)]
struct Seen {
    owned: PartitionSet,
    /// Every event after the first assignment, as text.
    later: Vec<String>,
    assigned_once: bool,
    /// The doubt flag was raised at some point.
    doubted: bool,
}

struct Running {
    handle: GroupHandle,
    task: MemberTask,
    seen: Arc<Mutex<Seen>>,
    driver: tokio::task::JoinHandle<()>,
    watcher: tokio::task::JoinHandle<()>,
}

fn spawn(protocol: GroupProtocol, group: &str, topic: &str, bootstrap: Vec<String>) -> Running {
    let cfg = GroupConfig::new(group, [topic.to_owned()])
        .with_protocol(protocol)
        .with_session_timeout(Duration::from_secs(5))
        .with_heartbeat_interval(Duration::from_millis(500))
        .with_auto_offset_reset(AutoOffsetReset::Earliest);
    let transport = Arc::new(WireTransport::connect(
        bootstrap,
        ConnectionConfig {
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(5),
            ..ConnectionConfig::default()
        },
    ));
    let GroupMember {
        handle,
        mut events,
        task,
    } = GroupMember::spawn(cfg, transport, std::future::pending()).unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = seen.clone();
    let driver = tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            let mut s = s.lock().unwrap();
            match ev {
                RebalanceEvent::Assigned {
                    partitions, ack, ..
                } => {
                    if s.assigned_once {
                        s.later.push(format!("Assigned {partitions:?}"));
                    }
                    s.assigned_once = true;
                    s.owned.extend(partitions.into_iter().map(|p| p.partition));
                    ack.done();
                }
                RebalanceEvent::Revoked {
                    partitions, ack, ..
                } => {
                    s.later.push(format!("Revoked {partitions:?}"));
                    s.owned.retain(|p| !partitions.contains(p));
                    ack.done();
                }
                RebalanceEvent::Lost {
                    partitions,
                    ack,
                    reason,
                } => {
                    s.later.push(format!("Lost {partitions:?} {reason:?}"));
                    s.owned.retain(|p| !partitions.contains(p));
                    ack.done();
                }
                other => s.later.push(format!("{other:?}")),
            }
        }
    });
    let mut doubt = handle.in_doubt();
    let s = seen.clone();
    let watcher = tokio::spawn(async move {
        while doubt.changed().await.is_ok() {
            // The watch only changes value, and starts `false`: any change raised it at least
            // once, even if it is already cleared again when this task runs.
            s.lock().unwrap().doubted = true;
        }
    });
    Running {
        handle,
        task,
        seen,
        driver,
        watcher,
    }
}

fn commits(topic: &str, offset: i64) -> Vec<CommitOffset> {
    (0..4)
        .map(|p| CommitOffset {
            partition: GroupPartition::new(topic.to_owned(), p),
            offset,
            leader_epoch: None,
            metadata: None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_kill_keeps_generation_and_partitions() {
    let dir = orderly_testkit::kafka_home()
        .join("test-runs")
        .join(format!("{}-coordinator-kill", std::process::id()));
    let mut cluster = tokio::task::spawn_blocking(move || {
        TestCluster::start(&dir, &ClusterOptions::default(), true).expect("cluster starts")
    })
    .await
    .unwrap();
    let bootstrap: Vec<String> = cluster.nodes().iter().map(|n| n.address()).collect();
    let topic = format!("coordkill-{}", std::process::id());
    orderly_testkit::create_topic_rf(&bootstrap[0], &topic, 4, 3)
        .await
        .expect("RF=3 topic");

    let members = [
        (
            "classic",
            spawn(
                GroupProtocol::Classic,
                &format!("{topic}-classic"),
                &topic,
                bootstrap.clone(),
            ),
        ),
        (
            "consumer",
            spawn(
                GroupProtocol::Consumer,
                &format!("{topic}-consumer"),
                &topic,
                bootstrap.clone(),
            ),
        ),
    ];
    let deadline = Instant::now() + Duration::from_secs(120);
    for (name, m) in &members {
        while m.seen.lock().unwrap().owned.len() != 4 {
            assert!(
                Instant::now() < deadline,
                "{name}: never assigned 4 partitions"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // A commit before the kill, with the generation the member keeps.
        let t = Instant::now();
        loop {
            match m.handle.commit(commits(&topic, 1)).await {
                Ok(()) => break,
                Err(e) => assert!(t.elapsed() < Duration::from_secs(60), "{name}: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Let a few heartbeats go by so both members are stable on the coordinator.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before: Vec<Generation> = members.iter().map(|(_, m)| m.handle.generation()).collect();
    for ((name, m), g) in members.iter().zip(&before) {
        assert!(g.is_valid(), "{name}: no generation before the kill");
        assert!(
            m.seen.lock().unwrap().later.is_empty(),
            "{name}: {:?}",
            m.seen.lock().unwrap().later
        );
    }

    let coordinator = coordinator_node(&cluster).await.expect("the coordinator");
    cluster.kill(coordinator).expect("kill the coordinator");
    let killed = Instant::now();

    // Each member rides it out: a commit with its kept generation succeeds once the new
    // coordinator has the group (the member's own retries bound each attempt).
    for (name, m) in &members {
        loop {
            match m.handle.commit(commits(&topic, 2)).await {
                Ok(()) => break,
                Err(e) => assert!(
                    killed.elapsed() < Duration::from_secs(90),
                    "{name}: no commit succeeded within 90 s of the kill: {e}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Past several session timeouts of the new coordinator, nothing happened to the members.
    tokio::time::sleep(Duration::from_secs(12)).await;
    for ((name, m), g) in members.iter().zip(&before) {
        let s = m.seen.lock().unwrap();
        assert!(
            s.doubted,
            "{name}: the coordinator moved within the session timeout; the test did not \
             exercise the doubt (the cluster fences a dead node after 6 s)"
        );
        assert!(
            s.later.is_empty(),
            "{name}: events after the coordinator kill (partitions lost or reassigned, records \
             would be redelivered): {:?}",
            s.later
        );
        assert_eq!(s.owned.len(), 4, "{name}: partitions kept");
        assert_eq!(&m.handle.generation(), g, "{name}: generation kept");
        assert!(!*m.handle.in_doubt().borrow(), "{name}: still in doubt");
    }
    eprintln!(
        "coordinator node {coordinator} killed; both members kept generation and partitions ({:?} after the kill)",
        killed.elapsed()
    );

    for (_, m) in members {
        m.handle.close();
        m.task.wait().await.unwrap();
        m.driver.await.unwrap();
        m.watcher.abort();
    }
    cluster.stop_all().ok();
}
