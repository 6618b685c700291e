//! The embedding example against the real broker: chat sessions whose messages must apply in order,
//! a flaky dependency (transient failures retried in place) and one message that is not a command
//! (dead-lettered without holding its session back for good).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use orderly_example_embedded::{Itineraries, config, run};
use orderly_protocol::{
    ConnectionConfig, ConnectionPool, ProduceRecord, Producer, ProducerConfig, WireHeader,
};
use orderly_testkit::broker;

const SESSIONS: usize = 20;
const MESSAGES: u64 = 10;
const CITIES: [&str; 5] = ["Paris", "Rome", "Oslo", "Lisbon", "Vienna"];

fn message(session: &str, seq: Option<u64>, text: &str) -> ProduceRecord {
    ProduceRecord {
        key: Some(Bytes::from(session.to_string())),
        value: Some(Bytes::from(text.to_string())),
        headers: seq
            .map(|s| WireHeader {
                key: "seq".into(),
                value: Some(Bytes::from(s.to_string())),
            })
            .into_iter()
            .collect(),
        timestamp: None,
    }
}

/// The city session `s` ends in: the destination of its last message.
fn last_city(s: usize) -> &'static str {
    CITIES[(s + MESSAGES as usize) % CITIES.len()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_handler_applies_every_session_in_order() {
    let b = broker();
    let topic = b.topic("embedded", 4).await.unwrap();
    let dlq = format!("{}.dlq", topic.name);
    b.create_topic(&dlq, 1).await.unwrap();

    // Sessions interleaved message by message, so one partition carries many sessions at once.
    let pool = Arc::new(ConnectionPool::new(
        vec![b.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let producer = Producer::new(pool, ProducerConfig::default());
    for seq in 1..=MESSAGES {
        for s in 0..SESSIONS {
            let session = format!("chat-{s:03}");
            let text = if seq == 1 {
                "book London".to_string()
            } else {
                format!("change {}", CITIES[(s + seq as usize) % CITIES.len()])
            };
            producer
                .send(&topic.name, message(&session, Some(seq), &text))
                .await
                .unwrap();
            if s == 0 && seq == 1 {
                // Not a command: dead-lettered, and chat-000's later messages wait for that.
                producer
                    .send(&topic.name, message(&session, None, "hello?"))
                    .await
                    .unwrap();
            }
        }
    }

    let mut config = config(b.bootstrap(), &format!("{}-g", topic.name), &topic.name);
    assert_eq!(config.dlq_topic, dlq);
    config.group.heartbeat_interval = Duration::from_millis(500);
    config.engine.retry.base = Duration::from_millis(1);
    config.engine.retry.cap = Duration::from_millis(50);

    let trips = Itineraries::new();
    let watched = trips.clone();
    let expected = SESSIONS as u64 * MESSAGES;
    let started = Instant::now();
    let stats = run(config, trips.clone(), async move {
        // Stop once every valid message has been applied (generous limit: a busy machine).
        while watched.snapshot().values().map(|t| t.messages).sum::<u64>() < expected {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "not every message was applied: {:?}",
                watched.snapshot()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();

    let trips = trips.snapshot();
    assert_eq!(trips.len(), SESSIONS);
    for s in 0..SESSIONS {
        let trip = &trips[&format!("chat-{s:03}")];
        assert_eq!(trip.messages, MESSAGES, "chat-{s:03}: {trip:?}");
        assert_eq!(trip.last_seq, MESSAGES, "chat-{s:03}: {trip:?}");
        assert_eq!(trip.out_of_order, 0, "chat-{s:03}: {trip:?}");
        assert_eq!(trip.changes_before_booking, 0, "chat-{s:03}: {trip:?}");
        assert_eq!(
            trip.destination.as_deref(),
            Some(last_city(s)),
            "chat-{s:03}"
        );
    }
    assert_eq!(stats.handled(), expected);
    assert_eq!(
        stats.dead_lettered(),
        1,
        "the one message that is not a command"
    );
    // Every 5th message failed once and was retried in place.
    assert!(
        stats.retried() >= SESSIONS as u64 * (MESSAGES / 5),
        "{}",
        stats.retried()
    );
}
