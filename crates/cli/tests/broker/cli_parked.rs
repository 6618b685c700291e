//! End-to-end, with the `orderly` binary against the real broker: a session parked by one
//! `orderly consume` process stays parked in the next process, and `orderly dlq replay --release`
//! hands its records to the handler in order.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use orderly_testkit::broker;

use crate::common;

use common::{Consume, FAST_GROUP, dlq_letters, ok, produce_kv, tmp, wait_until};

/// How long a step of the test may take on a busy machine.
const PATIENCE: Duration = Duration::from_secs(90);

fn consume(args: &[&str], log: &Path) -> Consume {
    Consume::start(
        &[args, &FAST_GROUP[..], &["--admin-addr", "off"]].concat(),
        log,
    )
}

fn stop(c: &mut Consume) {
    assert_eq!(c.stop(Duration::from_secs(60)), 0);
}

fn reasons(dlq: &str) -> Vec<String> {
    dlq_letters(dlq)
        .iter()
        .map(|v| v["reason"].as_str().unwrap().to_owned())
        .collect()
}

fn seen_of(path: &PathBuf, session: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{session} ")).map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_session_survives_a_restart_and_dlq_replay_release_resumes_it_in_order() {
    let b = broker();
    let test_topic = b.topic("cli-parked", 1).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let group = format!("{topic}-g");
    let seen = tmp("seen");
    let args = |script: &str| -> Vec<String> {
        [
            "--group",
            &group,
            "--topic",
            &topic,
            "--dlq-topic",
            &dlq,
            "--dlq-mode",
            "park-session",
            "--exec",
            script,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    };
    let failing = format!(
        r#"v=$(cat); [ "$v" = bad ] && exit 3; echo "$ORDERLY_SESSION $v" >> {}"#,
        seen.display()
    );
    let fixed = format!(r#"echo "$ORDERLY_SESSION $(cat)" >> {}"#, seen.display());

    produce_kv(&topic, "a\tok1\na\tbad\na\tok2\nb\tok1\n");
    let log = tmp("c1.log");
    let a1 = args(&failing);
    let mut c = consume(&a1.iter().map(String::as_str).collect::<Vec<_>>(), &log);
    wait_until("bad and ok2 in the DLQ", PATIENCE, || {
        reasons(&dlq).len() == 2
    })
    .await;
    wait_until("b ok1", PATIENCE, || seen_of(&seen, "b") == ["ok1"]).await;
    stop(&mut c);

    // A new process, with the handler fixed: a's next record stays parked.
    let log = tmp("c2.log");
    let a2 = args(&fixed);
    let mut c = consume(&a2.iter().map(String::as_str).collect::<Vec<_>>(), &log);
    produce_kv(&topic, "a\tok3\nb\tok2\n");
    wait_until("b ok2", PATIENCE, || seen_of(&seen, "b") == ["ok1", "ok2"]).await;
    wait_until("ok3 in the DLQ", PATIENCE, || reasons(&dlq).len() == 3).await;
    assert_eq!(reasons(&dlq), ["permanent", "parked", "parked"]);
    assert_eq!(
        seen_of(&seen, "a"),
        ["ok1"],
        "a stays parked after the restart"
    );

    let out = ok(&[
        "dlq",
        "replay",
        "--dlq-topic",
        &dlq,
        "--release",
        "--source-topic",
        &topic,
        "--source-partition",
        "0",
        "--session",
        "a",
        "--wait",
        "90",
    ]);
    assert!(out.contains("released"), "{out}");
    assert_eq!(seen_of(&seen, "a"), ["ok1", "bad", "ok2", "ok3"]);
    produce_kv(&topic, "a\tok4\n");
    wait_until("ok4", PATIENCE, || seen_of(&seen, "a").len() == 5).await;
    assert_eq!(seen_of(&seen, "a"), ["ok1", "bad", "ok2", "ok3", "ok4"]);
    assert_eq!(reasons(&dlq).len(), 3, "nothing more was dead-lettered");
    stop(&mut c);
}
