//! The broker's online migration between group protocols, under live load: a group of two orderly
//! consumers is rolled member by member from `group.protocol=classic` to `consumer` (the broker
//! converts the classic group into a consumer group) and back (converted back when the last
//! consumer-protocol member leaves). Records are produced live the whole time; at the end every
//! record was handled, in session order.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Recording, config, verdict, wait_until};
use orderly_consumer::Consumer;
use orderly_group::GroupProtocol;
use orderly_testkit::broker;

/// The group's type as Apache Kafka's `kafka-groups --list` reports it (`Classic` or `Consumer`).
async fn group_type(bootstrap: &str, group: &str) -> String {
    let out = broker()
        .tool("groups", &["--bootstrap-server", bootstrap, "--list"])
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|c| c.first() == Some(&group))
        .and_then(|c| c.get(1).map(|s| s.to_string()))
        .unwrap_or_else(|| format!("not listed in:\n{text}"))
}

async fn wait_for_type(bootstrap: &str, group: &str, want: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = group_type(bootstrap, group).await;
        if got == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "group type {got}, expected {want}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_group_rolls_from_classic_to_consumer_protocol_and_back_losing_nothing() {
    let b = broker();
    let topic = b.topic("migrate", 12).await.unwrap();
    let dlq = b.topic("migrate-dlq", 3).await.unwrap();
    let group = b.unique_topic("migrate-group");
    let log = Arc::new(Mutex::new(Vec::new()));

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let producer = tokio::spawn({
        let bootstrap = vec![b.bootstrap().to_string()];
        let topic = topic.name.clone();
        async move {
            orderly_consumer::__private::synthetic::produce_live(
                &bootstrap,
                &topic,
                24,
                300,
                async {
                    let _ = stop_rx.await;
                },
            )
            .await
            .unwrap()
        }
    });

    let spawn = |id: u32, protocol: GroupProtocol| {
        let handler = Recording {
            id,
            log: log.clone(),
            work: Duration::from_millis(2),
        };
        let mut cfg = config(b.bootstrap(), &group, &topic.name, &dlq.name);
        cfg.group.protocol = protocol;
        common::start(Consumer::new(cfg, handler).unwrap())
    };
    let handled_by = |id: u32| {
        log.lock()
            .unwrap()
            .iter()
            .filter(|s| s.consumer == id)
            .count()
    };
    let under_way = |id: u32, what: &'static str| {
        let handled_by = &handled_by;
        async move {
            let before = handled_by(id);
            wait_until(Duration::from_secs(60), what, || {
                handled_by(id) > before + 100
            })
            .await;
        }
    };

    let c1 = spawn(1, GroupProtocol::Classic);
    let c2 = spawn(2, GroupProtocol::Classic);
    under_way(1, "classic consumer 1 under way").await;
    under_way(2, "classic consumer 2 under way").await;
    wait_for_type(b.bootstrap(), &group, "Classic").await;

    // Upgrade, one member at a time.
    c1.stop().await;
    let c3 = spawn(3, GroupProtocol::Consumer);
    under_way(3, "consumer-protocol member 3 under way").await;
    wait_for_type(b.bootstrap(), &group, "Consumer").await;
    under_way(2, "classic member 2 still consuming in the consumer group").await;
    c2.stop().await;
    let c4 = spawn(4, GroupProtocol::Consumer);
    under_way(4, "consumer-protocol member 4 under way").await;
    under_way(3, "member 3 still consuming").await;

    // Downgrade, one member at a time.
    c3.stop().await;
    let c5 = spawn(5, GroupProtocol::Classic);
    under_way(5, "classic member 5 under way in the consumer group").await;
    c4.stop().await;
    let c6 = spawn(6, GroupProtocol::Classic);
    under_way(6, "classic member 6 under way").await;
    wait_for_type(b.bootstrap(), &group, "Classic").await;
    under_way(5, "member 5 still consuming").await;

    let _ = stop_tx.send(());
    let produced = producer.await.unwrap() as usize;
    let distinct = || verdict(&log.lock().unwrap()).distinct;
    wait_until(Duration::from_secs(120), "every record handled", || {
        distinct() >= produced
    })
    .await;
    c5.stop().await;
    c6.stop().await;
    let v = verdict(&log.lock().unwrap());
    assert!(
        v.violations.is_empty(),
        "ordering violations: {:?}",
        &v.violations[..v.violations.len().min(5)]
    );
    assert_eq!(v.distinct, produced, "nothing lost");
    eprintln!(
        "migration: {produced} records produced live, all handled in order, {} replays",
        v.replays
    );
}
