//! The foundation's end-to-end tests: real round trips through a real Apache Kafka broker.

// A panic in a test is a test failure with its message, which is what we want.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use orderly_testkit::broker;
use rskafka::chrono::DateTime;
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::record::Record;

fn record(key: &str, value: &str, seq: u32) -> Record {
    Record {
        key: Some(key.as_bytes().to_vec()),
        value: Some(value.as_bytes().to_vec()),
        headers: BTreeMap::from([("seq".to_string(), seq.to_string().into_bytes())]),
        timestamp: DateTime::from_timestamp_millis(1_700_000_000_000 + i64::from(seq)).unwrap(),
    }
}

/// A pure-Rust client writes records with headers and reads back exactly what it wrote.
#[tokio::test]
async fn rust_client_round_trips_records_with_headers() {
    let b = broker();
    let topic = b.topic("roundtrip", 1).await.unwrap();
    let client = b.client().await.unwrap();
    let pc = client
        .partition_client(&topic.name, 0, UnknownTopicHandling::Retry)
        .await
        .unwrap();

    let sent: Vec<Record> = (1..=20)
        .map(|i| record(&format!("s-{}", i % 3), &format!("v{i}"), i))
        .collect();
    let offsets = pc
        .produce(sent.clone(), Compression::NoCompression)
        .await
        .unwrap();
    assert_eq!(offsets, (0..20).collect::<Vec<i64>>());

    let (got, high_watermark) = pc.fetch_records(0, 1..1_000_000, 1_000).await.unwrap();
    assert_eq!(high_watermark, 20);
    assert_eq!(got.len(), 20);
    for (i, (r, s)) in got.iter().zip(&sent).enumerate() {
        assert_eq!(r.offset, i as i64);
        assert_eq!(r.record.key, s.key);
        assert_eq!(r.record.value, s.value);
        assert_eq!(r.record.headers, s.headers);
        assert_eq!(r.record.timestamp, s.timestamp);
    }
}

/// Apache Kafka's own tools create a topic and write records that the Rust client reads, and
/// read records the Rust client wrote: both sides agree on the wire.
#[tokio::test]
async fn kafka_tools_and_rust_client_interoperate() {
    let b = broker();
    let bs = b.bootstrap();
    let topic = b.unique_topic("tools");

    let out = b
        .tool(
            "topics",
            &[
                "--bootstrap-server",
                bs,
                "--create",
                "--topic",
                &topic,
                "--partitions",
                "1",
            ],
        )
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "topics --create: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let input = "k1:hello\nk2:world\nk1:again\n";
    let out = b
        .tool_with_input(
            "console-producer",
            &[
                "--bootstrap-server",
                bs,
                "--topic",
                &topic,
                "--reader-property",
                "parse.key=true",
                "--reader-property",
                "key.separator=:",
            ],
            input,
        )
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "console-producer: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Java wrote, Rust reads.
    let client = b.client().await.unwrap();
    let pc = client
        .partition_client(&topic, 0, UnknownTopicHandling::Retry)
        .await
        .unwrap();
    let (got, _) = pc.fetch_records(0, 1..1_000_000, 1_000).await.unwrap();
    let pairs: Vec<(String, String)> = got
        .iter()
        .map(|r| {
            (
                String::from_utf8(r.record.key.clone().unwrap()).unwrap(),
                String::from_utf8(r.record.value.clone().unwrap()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        vec![
            ("k1".into(), "hello".into()),
            ("k2".into(), "world".into()),
            ("k1".into(), "again".into())
        ]
    );

    // Rust writes, Java reads.
    pc.produce(
        vec![record("k3", "from-rust", 4)],
        Compression::NoCompression,
    )
    .await
    .unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        b.tool(
            "console-consumer",
            &[
                "--bootstrap-server",
                bs,
                "--topic",
                &topic,
                "--from-beginning",
                "--max-messages",
                "4",
                "--timeout-ms",
                "30000",
                "--formatter-property",
                "print.key=true",
            ],
        ),
    )
    .await
    .expect("console consumer finished")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "console-consumer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        vec!["k1\thello", "k2\tworld", "k1\tagain", "k3\tfrom-rust"]
    );
}
