//! End-to-end, with the `orderly` binary against the real broker: a session parked by one
//! `orderly consume` process stays parked in the next process, and `orderly dlq replay --release`
//! hands its records to the handler in order.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use orderly_testkit::broker;

const BIN: &str = env!("CARGO_BIN_EXE_orderly");

fn orderly(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("ORDERLY_BOOTSTRAP", broker().bootstrap())
        .env("RUST_LOG", "warn")
        .output()
        .expect("running orderly")
}

fn ok(args: &[&str]) -> String {
    let out = orderly(args);
    assert!(
        out.status.success(),
        "orderly {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("orderly-cli-parked-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&d);
    d
}

fn consume(args: &[&str], log: &PathBuf) -> Child {
    Command::new(BIN)
        .arg("consume")
        .args(args)
        .args(["--heartbeat-interval", "500ms", "--session-timeout", "10s"])
        .args(["--commit-interval", "500ms", "--admin-addr", "off"])
        .env("ORDERLY_BOOTSTRAP", broker().bootstrap())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("starting orderly consume")
}

fn stop(child: &mut Child) {
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert_eq!(st.code(), Some(0));
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("orderly consume did not exit");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

async fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn reasons(dlq: &str) -> Vec<String> {
    ok(&["dlq", "ls", "--dlq-topic", dlq, "--json"])
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["reason"].as_str().unwrap().to_owned()
        })
        .collect()
}

fn produce(topic: &str, kv: &str) {
    let input = tmp("in.kv");
    std::fs::write(&input, kv).unwrap();
    ok(&[
        "produce",
        "--topic",
        topic,
        "--format",
        "kv",
        "--file",
        input.to_str().unwrap(),
    ]);
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

    produce(&topic, "a\tok1\na\tbad\na\tok2\nb\tok1\n");
    let log = tmp("c1.log");
    let a1 = args(&failing);
    let mut c = consume(&a1.iter().map(String::as_str).collect::<Vec<_>>(), &log);
    wait_until("bad and ok2 in the DLQ", || reasons(&dlq).len() == 2).await;
    wait_until("b ok1", || seen_of(&seen, "b") == ["ok1"]).await;
    stop(&mut c);

    // A new process, with the handler fixed: a's next record stays parked.
    let log = tmp("c2.log");
    let a2 = args(&fixed);
    let mut c = consume(&a2.iter().map(String::as_str).collect::<Vec<_>>(), &log);
    produce(&topic, "a\tok3\nb\tok2\n");
    wait_until("b ok2", || seen_of(&seen, "b") == ["ok1", "ok2"]).await;
    wait_until("ok3 in the DLQ", || reasons(&dlq).len() == 3).await;
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
    produce(&topic, "a\tok4\n");
    wait_until("ok4", || seen_of(&seen, "a").len() == 5).await;
    assert_eq!(seen_of(&seen, "a"), ["ok1", "bad", "ok2", "ok3", "ok4"]);
    assert_eq!(reasons(&dlq).len(), 3, "nothing more was dead-lettered");
    stop(&mut c);
}
