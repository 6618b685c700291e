//! Brokers older than orderly supports, or than a feature needs: every command stops with one line naming the API, both version ranges and the oldest supported Kafka release, instead of retrying; static membership on a broker before 2.3 degrades to a dynamic member with a warning. The real broker sits behind a proxy that rewrites its ApiVersions answer.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use orderly_protocol::messages::Request;
use orderly_protocol::messages::api_versions::ApiVersionsRequest;
use orderly_protocol::messages::consumer_group_heartbeat::ConsumerGroupHeartbeatRequest;
use orderly_protocol::messages::join_group::JoinGroupRequest;
use orderly_protocol::messages::offset_fetch::OffsetFetchRequest;
use orderly_protocol::test_util::rewrite_response;
use orderly_testkit::broker;
use orderly_testkit::proxy::KafkaProxy;

const BIN: &str = env!("CARGO_BIN_EXE_orderly");

/// A proxy in front of the test broker whose ApiVersions answers `edit` rewrites.
async fn proxy_claiming(
    edit: impl Fn(&mut <ApiVersionsRequest as Request>::Response) + Send + Sync + 'static,
) -> KafkaProxy {
    let proxy = KafkaProxy::start(broker().bootstrap()).await.unwrap();
    proxy.rewrite_responses(
        ApiVersionsRequest::API_KEY,
        Arc::new(move |version, frame| {
            rewrite_response::<ApiVersionsRequest>(version, frame, |resp| {
                edit(resp);
                true
            })
        }),
    );
    proxy
}

/// A proxy whose broker claims to serve OffsetFetch only up to v4, as Kafka 2.0 did.
async fn kafka_2_0_offset_fetch() -> KafkaProxy {
    proxy_claiming(|resp| {
        for k in &mut resp.api_keys {
            if k.api_key == OffsetFetchRequest::API_KEY {
                k.min_version = 0;
                k.max_version = 4;
            }
        }
    })
    .await
}

/// Runs `orderly args` against `bootstrap` and returns its exit status and stderr, killing it
/// (and failing) if it has not ended after a generous wait: the point is that it stops by itself.
async fn run_to_end(args: &[&str], bootstrap: &str) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .env("ORDERLY_BOOTSTRAP", bootstrap)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status, err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("orderly {args:?} kept running against a broker it cannot talk to");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_stops_with_one_line_naming_the_api() {
    let b = broker();
    let test_topic = b.topic("cli-too-old", 2).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let proxy = kafka_2_0_offset_fetch().await;
    let group = format!("{topic}-g");
    let commands: Vec<Vec<&str>> = vec![
        vec![
            "consume",
            "--group",
            &group,
            "--topic",
            &topic,
            "--dlq-topic",
            &dlq,
            "--exec",
            "true",
        ],
        vec!["seed", "--topic", &topic, "--records", "10"],
        vec![
            "produce",
            "--topic",
            &topic,
            "--generate",
            "--records",
            "10",
        ],
        vec![
            "run",
            "--topic",
            &topic,
            "--group",
            &group,
            "--dlq-topic",
            &dlq,
            "--records",
            "10",
        ],
        vec!["status", "--group", &group],
        vec!["dlq", "ls", "--dlq-topic", &dlq],
    ];
    for args in commands {
        let (status, err) = run_to_end(&args, proxy.bootstrap()).await;
        assert!(!status.success(), "orderly {args:?} succeeded: {err}");
        let line = err
            .lines()
            .find(|l| l.contains("OffsetFetch"))
            .unwrap_or_else(|| panic!("orderly {args:?}: no line names OffsetFetch: {err}"));
        eprintln!("orderly {}: {line}", args[0]);
        for want in ["v0-v4", "v5-v9", "Apache Kafka 2.1"] {
            assert!(
                line.contains(want),
                "orderly {args:?}: {want:?} missing in {line:?}"
            );
        }
        // The brokers answered: the line must not send the user looking for a network fault.
        assert!(
            !line.contains("cannot reach"),
            "orderly {args:?}: {line:?} blames the network for a version mismatch"
        );
    }
}

/// A proxy whose broker claims JoinGroup only up to v4, as Kafka 2.2 did (static membership came
/// with v5 in 2.3).
async fn kafka_2_2_join_group() -> KafkaProxy {
    proxy_claiming(|resp| {
        for k in &mut resp.api_keys {
            if k.api_key == JoinGroupRequest::API_KEY {
                k.max_version = k.max_version.min(4);
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_membership_degrades_to_dynamic_with_a_warning_on_a_broker_before_2_3() {
    use std::io::BufRead;
    let b = broker();
    let test_topic = b.topic("cli-static-old", 1).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let proxy = kafka_2_2_join_group().await;
    let group = format!("{topic}-g");
    let mut child = Command::new(BIN)
        .args([
            "consume",
            "--group",
            &group,
            "--topic",
            &topic,
            "--dlq-topic",
            &dlq,
        ])
        .args([
            "--exec",
            "true",
            "--instance-id",
            "static-1",
            "--admin-addr",
            "off",
        ])
        .env("ORDERLY_BOOTSTRAP", proxy.bootstrap())
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let warning = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) if line.contains("static membership needs Apache Kafka 2.3") => {
                break Some(line);
            }
            Ok(line) => seen.push(line),
            Err(_) if Instant::now() > deadline => break None,
            Err(_) => {}
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("orderly consume exited ({st}): {seen:?}");
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let warning = warning.unwrap_or_else(|| panic!("no static-membership warning: {seen:?}"));
    assert!(warning.contains("dynamic member"), "{warning}");
}

/// A proxy whose broker serves no ConsumerGroupHeartbeat, as every release before Kafka 4.0 (in
/// its default configuration).
async fn without_consumer_group_heartbeat() -> KafkaProxy {
    proxy_claiming(|resp| {
        resp.api_keys
            .retain(|k| k.api_key != ConsumerGroupHeartbeatRequest::API_KEY);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_group_protocol_on_a_broker_before_4_0_stops_naming_classic() {
    let b = broker();
    let test_topic = b.topic("cli-kip848-old", 1).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let proxy = without_consumer_group_heartbeat().await;
    let group = format!("{topic}-g");
    let args = [
        "consume",
        "--group",
        &group,
        "--topic",
        &topic,
        "--dlq-topic",
        &dlq,
        "--exec",
        "true",
        "--admin-addr",
        "off",
        "--group-protocol",
        "consumer",
    ];
    let (status, err) = run_to_end(&args, proxy.bootstrap()).await;
    assert!(!status.success(), "orderly consume succeeded: {err}");
    let line = err
        .lines()
        .find(|l| l.contains("ConsumerGroupHeartbeat"))
        .unwrap_or_else(|| panic!("no line names ConsumerGroupHeartbeat: {err}"));
    for want in ["Apache Kafka 4.0", "group.protocol=classic"] {
        assert!(line.contains(want), "{want:?} missing in {line:?}");
    }
    // orderly itself runs on this broker (with the classic protocol): the line must not say
    // that orderly needs a newer one.
    assert!(!line.contains("orderly needs"), "{line}");
}
