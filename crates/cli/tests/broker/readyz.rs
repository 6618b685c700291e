//! `/readyz` of `orderly consume` against the real broker: ready once it is in the group with an assignment and fetching; not ready while its fetches go unanswered (a proxy holds every Fetch request), ready again when they flow; a member beyond the partition count is a ready standby.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::{Duration, Instant};

use orderly_testkit::broker;
use orderly_testkit::proxy::KafkaProxy;
use orderly_testkit::webhook::{Rules, Webhook};

use crate::common;

use common::{Consume, free_addr, group_topic_dlq, http, tmp};

/// Kafka's Fetch API key.
const FETCH: i16 = 1;

/// `orderly consume` bootstrapped at `bootstrap`, reading and dead-lettering where `route` says,
/// posting to `hook`, its admin endpoint at `admin`.
fn start(bootstrap: &str, route: &[&str], hook: &str, admin: &str, log: &Path) -> Consume {
    let own = [
        "--bootstrap",
        bootstrap,
        "--http",
        hook,
        "--heartbeat-interval",
        "500ms",
        "--session-timeout",
        "30s",
        "--admin-addr",
        admin,
    ];
    Consume::start(&[route, &own[..]].concat(), log)
}

/// Polls `/readyz` until `want(answer)` holds; returns the answer.
async fn readyz_until(
    admin: &str,
    child: &mut Consume,
    patience: Duration,
    what: &str,
    want: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + patience;
    loop {
        let answer = http(admin, "GET", "/readyz");
        if want(&answer) {
            return answer;
        }
        assert!(
            child.running(),
            "orderly consume exited while waiting for {what}"
        );
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last /readyz answer: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_needs_an_assignment_and_answered_fetches() {
    let b = broker();
    let test_topic = b.topic("cli-readyz", 2).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    let hook = Webhook::start(Rules {
        transient_pct: 0,
        permanent: false,
        work: Duration::ZERO,
    })
    .await
    .unwrap();
    let admin = free_addr();
    let log = tmp("readyz.log");
    let mut c = start(
        proxy.bootstrap(),
        &group_topic_dlq(&format!("{topic}-g"), &topic, &dlq),
        &hook.url(),
        &admin,
        &log,
    );

    // Until it holds partitions and a fetch came back, it is not ready.
    let first = http(&admin, "GET", "/readyz");
    assert!(
        first.is_empty() || first.starts_with("HTTP/1.1 503") || first.starts_with("HTTP/1.1 200"),
        "{first}"
    );
    readyz_until(
        &admin,
        &mut c,
        Duration::from_secs(90),
        "ready (assigned and fetching)",
        |a| a.starts_with("HTTP/1.1 200"),
    )
    .await;

    // The work pending per partition is exported for autoscaling (docker/k8s): once the
    // partitions' high watermarks are known, each owned partition has its gauge.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = http(&admin, "GET", "/metrics");
        let parts = (0..2)
            .filter(|p| {
                m.lines().any(|l| {
                    l.starts_with("orderly_partition_pending_records{")
                        && l.contains(&format!("partition=\"{p}\""))
                        && l.contains(&format!("topic=\"{topic}\""))
                })
            })
            .count();
        if parts == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no orderly_partition_pending_records for both partitions: {m}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Every Fetch request is held from now on: the member stays in the group with its
    // assignment (heartbeats pass), but no fetch response arrives.
    proxy.hold(FETCH);
    let held_at = Instant::now();
    let answer = readyz_until(
        &admin,
        &mut c,
        Duration::from_secs(60),
        "not ready: not fetching",
        |a| a.starts_with("HTTP/1.1 503"),
    )
    .await;
    assert!(
        answer.contains("not fetching: no fetch response for"),
        "{answer}"
    );
    assert!(proxy.held_now(FETCH) > 0, "a fetch is held right now");
    eprintln!(
        "not ready {:?} after fetches were held: {answer:?}",
        held_at.elapsed()
    );

    // Fetches flow again: ready again.
    proxy.release(FETCH);
    readyz_until(
        &admin,
        &mut c,
        Duration::from_secs(90),
        "ready again after fetches flow",
        |a| a.starts_with("HTTP/1.1 200"),
    )
    .await;

    let code = c.stop(Duration::from_secs(60));
    assert_eq!(
        code,
        0,
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// One replica more than partitions: the member without a partition is a standby in the group,
/// and a rollout must not wait for it forever. Both are ready; exactly one says it is a standby.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_beyond_the_partition_count_is_a_ready_standby() {
    let b = broker();
    let test_topic = b.topic("cli-readyz-standby", 1).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let hook = Webhook::start(Rules {
        transient_pct: 0,
        permanent: false,
        work: Duration::ZERO,
    })
    .await
    .unwrap();
    let group = format!("{topic}-g");
    let group = group_topic_dlq(&group, &topic, &dlq);
    let start = |admin: &str, name: &str| {
        start(
            b.bootstrap(),
            &group,
            &hook.url(),
            admin,
            &tmp(&format!("standby-{name}.log")),
        )
    };
    let (admin_a, admin_b) = (free_addr(), free_addr());
    let mut a = start(&admin_a, "a");
    readyz_until(&admin_a, &mut a, Duration::from_secs(90), "a ready", |r| {
        r.starts_with("HTTP/1.1 200")
    })
    .await;
    let mut c = start(&admin_b, "b");
    readyz_until(&admin_b, &mut c, Duration::from_secs(90), "b ready", |r| {
        r.starts_with("HTTP/1.1 200")
    })
    .await;
    // After the rebalance that let b in, one member holds the partition, the other is the standby.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answers = [
            http(&admin_a, "GET", "/readyz"),
            http(&admin_b, "GET", "/readyz"),
        ];
        let ready = answers.iter().all(|r| r.starts_with("HTTP/1.1 200"));
        let standbys = answers.iter().filter(|r| r.contains("standby")).count();
        if ready && standbys == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "expected both ready, one standby: {answers:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for p in [&a, &c] {
        p.sigterm();
    }
    for p in [&mut a, &mut c] {
        assert_eq!(p.wait_exit(Duration::from_secs(60)), 0);
    }
}
