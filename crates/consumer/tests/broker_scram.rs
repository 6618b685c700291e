//! SASL/SCRAM end to end against a real broker with a SASL_PLAINTEXT listener and SCRAM users
//! (created by `kafka-storage format --add-scram`): for SCRAM-SHA-256 and SCRAM-SHA-512 the
//! idempotent producer writes and a group consumer reads everything back through the SASL
//! listener; a wrong password is one clear, fatal error; and the password appears neither in the
//! trace-level logs of all that nor in any `Debug` output of the configuration.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use orderly_consumer::{Consumer, ConsumerConfig};
use orderly_engine::{Attempt, Handler, HandlerError, Record};
use orderly_protocol::{ConnectionConfig, ConnectionPool, ProduceRecord, Producer, Sasl};
use orderly_testkit::process::free_port;
use orderly_testkit::{BrokerOptions, DedicatedBroker, SASL_LISTENER};

const PASSWORD: &str = "s3cr3t-Pa55w0rd-xyzzy";
const RECORDS: usize = 40;

/// Collects everything the tracing subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<(String, i64)>>>);

impl Handler for Collect {
    async fn handle(&self, record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        let key = String::from_utf8_lossy(record.key.as_deref().unwrap_or_default()).into_owned();
        self.0.lock().unwrap().push((key, record.offset));
        Ok(())
    }
}

fn scram(mechanism: &str, username: &str, password: &str) -> Sasl {
    match mechanism {
        "SCRAM-SHA-256" => Sasl::ScramSha256 {
            username: username.into(),
            password: password.into(),
        },
        _ => Sasl::ScramSha512 {
            username: username.into(),
            password: password.into(),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_sha256_and_sha512_produce_and_consume_and_a_wrong_password_is_one_clear_error() {
    let captured = Captured::default();
    let sink = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .finish();
    // Global: the consumer's tasks run on every worker thread. This file holds one test.
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let opts = BrokerOptions {
        heap: "512m".into(),
        ..BrokerOptions::default()
    }
    .with_sasl_listener(free_port().unwrap(), &[("alice", PASSWORD)]);
    let broker = tokio::task::spawn_blocking(move || DedicatedBroker::start_with(opts))
        .await
        .unwrap()
        .unwrap();
    let sasl_addr = broker.listener(SASL_LISTENER).unwrap();

    for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let topic = format!("scram-{}", &mechanism[10..]);
        let dlq = format!("{topic}.dlq");
        for t in [&topic, &dlq] {
            orderly_testkit::create_topic(broker.bootstrap(), t, 2)
                .await
                .unwrap();
        }
        let connection = ConnectionConfig {
            sasl: Some(scram(mechanism, "alice", PASSWORD)),
            ..ConnectionConfig::default()
        };
        assert!(
            !format!("{connection:?}").contains(PASSWORD),
            "Debug of the connection settings shows the password"
        );

        // Produce through the SASL listener (idempotent: InitProducerId works there too).
        let pool = Arc::new(ConnectionPool::new(
            vec![sasl_addr.clone()],
            connection.clone(),
        ));
        let producer = Producer::new(pool, Default::default());
        for i in 0..RECORDS {
            producer
                .send(
                    &topic,
                    ProduceRecord {
                        key: Some(Bytes::from(format!("s-{}", i % 5))),
                        value: Some(Bytes::from(format!("v{i}"))),
                        ..Default::default()
                    },
                )
                .await
                .unwrap_or_else(|e| panic!("{mechanism}: {e}"));
        }
        assert!(producer.producer_id().await.is_some(), "{mechanism}");

        // Consume it all back through the same listener, as a group member.
        let mut config = ConsumerConfig::new([sasl_addr.clone()], format!("g-{topic}"), [&topic]);
        config.connection = connection.clone();
        config.dlq_topic = dlq.clone();
        config.group.auto_offset_reset = orderly_group::AutoOffsetReset::Earliest;
        config.group.heartbeat_interval = Duration::from_millis(500);
        assert!(
            !format!("{config:?}").contains(PASSWORD),
            "Debug of the consumer settings shows the password"
        );
        let seen = Collect::default();
        let consumer = Consumer::new(config, seen.clone()).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let run = tokio::spawn(consumer.run(async move {
            let _ = stopped.await;
        }));
        let started = Instant::now();
        while seen.0.lock().unwrap().len() < RECORDS {
            if run.is_finished() {
                panic!("{mechanism}: the consumer stopped: {:?}", run.await);
            }
            if started.elapsed() > Duration::from_secs(90) {
                let logs = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
                let tail: Vec<&str> = logs
                    .lines()
                    .filter(|l| !l.contains("TRACE") && !l.contains("DEBUG"))
                    .collect();
                panic!(
                    "{mechanism}: consumed only {} of {RECORDS}; logs:\n{}",
                    seen.0.lock().unwrap().len(),
                    tail[tail.len().saturating_sub(40)..].join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop.send(()).unwrap();
        run.await.unwrap().unwrap();
        let got = seen.0.lock().unwrap().clone();
        assert_eq!(got.len(), RECORDS, "{mechanism}: each record once");
        // Per session, offsets ascend (the order promise holds through SASL too).
        for s in 0..5 {
            let offsets: Vec<i64> = got
                .iter()
                .filter(|(k, _)| *k == format!("s-{s}"))
                .map(|(_, o)| *o)
                .collect();
            assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");
        }

        // A wrong password: the consumer stops at once with one clear, fatal error.
        let mut config = ConsumerConfig::new([sasl_addr.clone()], format!("g2-{topic}"), [&topic]);
        config.connection = ConnectionConfig {
            sasl: Some(scram(mechanism, "alice", "not-the-password")),
            ..ConnectionConfig::default()
        };
        config.dlq_topic = dlq.clone();
        let started = Instant::now();
        let err = tokio::time::timeout(
            Duration::from_secs(60),
            Consumer::new(config, Collect::default())
                .unwrap()
                .run(std::future::pending::<()>()),
        )
        .await
        .expect("a wrong password ends the run")
        .expect_err("a wrong password is an error");
        let text = err.to_string();
        assert!(
            text.contains("SASL authentication") && text.contains(&sasl_addr),
            "{mechanism}: {text}"
        );
        assert!(!err.is_retriable(), "{mechanism}: {text}");
        assert!(!text.contains("not-the-password"), "{text}");
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(started.elapsed() < Duration::from_secs(30), "{mechanism}");
        // The producer too.
        let pool = Arc::new(ConnectionPool::new(
            vec![sasl_addr.clone()],
            ConnectionConfig {
                sasl: Some(scram(mechanism, "alice", "not-the-password")),
                connect_attempts: 1,
                ..ConnectionConfig::default()
            },
        ));
        let err = Producer::new(pool, Default::default())
            .send(&topic, ProduceRecord::default())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("SASL authentication"), "{err}");
    }

    let logs = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    assert!(
        logs.contains("SCRAM") || logs.contains("sasl") || logs.contains("SASL"),
        "the trace logs cover the SASL exchange"
    );
    assert!(!logs.contains(PASSWORD), "the password is in the logs");
    assert!(
        !logs.contains("not-the-password"),
        "a password is in the logs"
    );
}
