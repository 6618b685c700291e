//! A member survives a restart of its (only) broker: it rediscovers the coordinator, rejoins if it
//! has to, and commits again. Uses a dedicated broker so the shared one is not disturbed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orderly_group::*;
use orderly_protocol::ConnectionConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn member_rejoins_after_broker_restart() {
    let broker = tokio::task::spawn_blocking(orderly_testkit::DedicatedBroker::start)
        .await
        .unwrap()
        .unwrap();
    let bootstrap = broker.bootstrap().to_owned();
    let topic = format!("restart-{}", std::process::id());
    orderly_testkit::create_topic(&bootstrap, &topic, 4)
        .await
        .unwrap();

    let cfg = GroupConfig::new("g-restart", [topic.clone()])
        .with_session_timeout(Duration::from_secs(10))
        .with_heartbeat_interval(Duration::from_millis(500))
        .with_auto_offset_reset(AutoOffsetReset::Earliest);
    let transport = Arc::new(WireTransport::connect(
        vec![bootstrap.clone()],
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
    let owned = Arc::new(Mutex::new(PartitionSet::new()));
    let lost = Arc::new(Mutex::new(0usize));
    let (o, l) = (owned.clone(), lost.clone());
    let driver = tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            match ev {
                RebalanceEvent::Assigned {
                    partitions, ack, ..
                } => {
                    o.lock()
                        .unwrap()
                        .extend(partitions.into_iter().map(|p| p.partition));
                    ack.done();
                }
                RebalanceEvent::Revoked {
                    partitions, ack, ..
                } => {
                    o.lock().unwrap().retain(|p| !partitions.contains(p));
                    ack.done();
                }
                RebalanceEvent::Lost {
                    partitions, ack, ..
                } => {
                    o.lock().unwrap().retain(|p| !partitions.contains(p));
                    *l.lock().unwrap() += 1;
                    ack.done();
                }
                _ => {}
            }
        }
    });
    let wait_all = |what: &'static str| {
        let owned = owned.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(90);
            while owned.lock().unwrap().len() != 4 {
                assert!(Instant::now() < deadline, "timed out waiting for {what}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    wait_all("the first assignment").await;
    let commit = |offset: i64| CommitOffset {
        partition: GroupPartition::new(topic.clone(), 0),
        offset,
        leader_epoch: None,
        metadata: None,
    };
    handle.commit(vec![commit(0)]).await.unwrap();

    let mut broker = broker;
    let broker = tokio::task::spawn_blocking(move || {
        broker.restart().unwrap();
        broker
    })
    .await
    .unwrap();

    // Back in the group with all partitions, and commits work again (retried across the restart).
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_all("the assignment after the restart").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match handle.commit(vec![commit(0)]).await {
            Ok(()) => break,
            // Between the restart and a rejoin a commit can fail (NotMember after a lost session,
            // or REBALANCE_IN_PROGRESS); the member must get back to a state where it succeeds.
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await
            }
            Err(e) => panic!("commit after restart failed: {e}"),
        }
    }
    // The commit above went over new connections to the restarted broker, with a generation the
    // reloaded group coordinator accepts.
    assert!(handle.generation().is_valid());
    handle.close();
    task.wait().await.unwrap();
    driver.await.unwrap();
    drop(broker);
}
