//! A topic in message format v1 on a release before 3.0: orderly does not decode v0/v1 message
//! sets, so consuming it stops with one line and commits nothing, and an idempotent produce to it
//! is refused.

use orderly_protocol::{BrokerConnection, ConnectionConfig};

use super::options::CompatOptions;
use super::orderly::{REFUSAL_BOUND, orderly, orderly_bounded};
use super::outcome::Outcome;

/// How long `orderly consume` may take to give up on a message format v1 topic (a corrupt batch
/// is fetched again a few times with backoff first) before the check kills it and fails.
const LEGACY_BOUND: std::time::Duration = std::time::Duration::from_secs(120);

/// A topic pinned to message format v1 (`message.format.version=0.10.2`), three records written
/// without idempotence (which that format cannot carry): orderly does not decode v0/v1 message
/// sets, so `orderly consume` must stop by itself with a non-zero exit and a line naming the
/// message format, and commit nothing (no record skipped); an idempotent `orderly produce` to
/// that topic must stop with the broker's UNSUPPORTED_FOR_MESSAGE_FORMAT.
pub(super) fn check_legacy_format(
    rt: &tokio::runtime::Runtime,
    opts: &CompatOptions,
    bootstrap: &str,
    base: &str,
    outcome: &mut Outcome,
) {
    use orderly_protocol::{ConnectionPool, ProduceRecord, Producer, ProducerConfig};
    let topic = format!("{base}-v1");
    let group = format!("{topic}-g");
    let dlq = format!("{topic}.dlq");
    let written = rt.block_on(async {
        let config = ConnectionConfig::default();
        let conn = BrokerConnection::connect(bootstrap, &config).await?;
        conn.create_topic(&topic, 1, 1, &[("message.format.version", "0.10.2")])
            .await?;
        conn.create_topic(&dlq, 1, 1, &[]).await?;
        let pool = std::sync::Arc::new(ConnectionPool::new(vec![bootstrap.to_owned()], config));
        let producer = Producer::new(
            pool,
            ProducerConfig {
                idempotent: false,
                ..ProducerConfig::default()
            },
        );
        for i in 0..3 {
            producer
                .send(
                    &topic,
                    ProduceRecord {
                        key: Some(bytes::Bytes::from(format!("s-{i}"))),
                        value: Some(bytes::Bytes::from_static(b"v1 message set")),
                        ..ProduceRecord::default()
                    },
                )
                .await?;
        }
        Ok::<_, orderly_protocol::Error>(())
    });
    if let Err(e) = written {
        outcome
            .failures
            .push(format!("writing the message format v1 topic {topic}: {e}"));
        return;
    }
    let args = [
        "consume",
        "--topic",
        &topic,
        "--group",
        &group,
        "--dlq-topic",
        &dlq,
        "--exec",
        "true",
        "--admin-addr",
        "off",
    ];
    let started = std::time::Instant::now();
    let Some(out) = orderly_bounded(opts, bootstrap, &args, LEGACY_BOUND) else {
        outcome.failures.push(format!(
            "orderly consume of the message format v1 topic was still running after {}s (killed)",
            LEGACY_BOUND.as_secs()
        ));
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    match err.lines().rfind(|l| l.contains("message format v0/v1")) {
        Some(line) if !out.status.success() => eprintln!(
            "    message format v1 topic: orderly consume {} after {:.1?}: {line}",
            out.status,
            started.elapsed()
        ),
        _ => outcome.failures.push(format!(
            "orderly consume of a message format v1 topic did not stop with a line naming the format ({}): {}",
            out.status,
            err.trim()
        )),
    }
    let status = orderly(opts, bootstrap, &["status", "--group", &group, "--json"]);
    let lag = serde_json::from_slice::<serde_json::Value>(&status.stdout)
        .ok()
        .and_then(|v| v.get("total_lag").and_then(serde_json::Value::as_i64));
    // Idempotent writes need message format v2: the broker refuses them, and so must orderly,
    // at once rather than retrying.
    let produce = ["produce", "--topic", &topic, "--generate", "--records", "3"];
    match orderly_bounded(opts, bootstrap, &produce, REFUSAL_BOUND) {
        Some(out)
            if !out.status.success()
                && String::from_utf8_lossy(&out.stderr)
                    .contains("UNSUPPORTED_FOR_MESSAGE_FORMAT") =>
        {
            eprintln!(
                "    message format v1 topic: orderly produce {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Some(out) => outcome.failures.push(format!(
            "orderly produce to a message format v1 topic was not refused ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        None => outcome.failures.push(format!(
            "orderly produce to a message format v1 topic was still running after {}s (killed)",
            REFUSAL_BOUND.as_secs()
        )),
    }
    if lag != Some(3) {
        outcome.failures.push(format!(
            "the message format v1 topic: total lag {lag:?} after the refusal, expected 3 (nothing skipped): {}",
            String::from_utf8_lossy(&status.stderr).trim()
        ));
    }
}
