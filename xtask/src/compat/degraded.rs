//! Features that need a newer release than the one running: the parked-session store comes up on
//! every release, static membership and the KIP-848 protocol degrade as the README says.

use super::options::CompatOptions;
use super::orderly::{REFUSAL_BOUND, orderly_bounded, wait_for_line};
use super::outcome::Outcome;

/// `orderly consume --dlq-mode park-session` creates its compacted store topic
/// (`<dlq>.parked`, the broker's replication factor) at start-up; it must come up on every
/// release: the check waits for the store's ready line, then stops the consumer.
pub(super) fn check_parked_store(
    opts: &CompatOptions,
    bootstrap: &str,
    topic: &str,
    dlq: &str,
    group: &str,
    outcome: &mut Outcome,
) {
    let group = format!("{group}-parked");
    let args = [
        "consume",
        "--topic",
        topic,
        "--group",
        &group,
        "--dlq-topic",
        dlq,
        "--dlq-mode",
        "park-session",
        "--exec",
        "true",
        "--admin-addr",
        "off",
    ];
    match wait_for_line(opts, bootstrap, &args, "parked-session store ready") {
        Ok(_) => {
            eprintln!("    orderly consume --dlq-mode park-session: store topic {dlq}.parked ready")
        }
        Err(seen) => outcome.failures.push(format!(
            "orderly consume --dlq-mode park-session did not get its store ready: {seen}"
        )),
    }
}

/// Features a release is too old for degrade as the README says: before 2.3 (JoinGroup below
/// v5) `--instance-id` joins as a dynamic member with a warning; before 4.0 `--group-protocol
/// consumer` stops with a line naming `group.protocol=classic`: at start-up where the broker
/// lacks ConsumerGroupHeartbeat, at the first heartbeat where it advertises the API without
/// serving it (3.7 to 3.9 unless their preview is enabled).
pub(super) fn check_degraded(
    opts: &CompatOptions,
    bootstrap: &str,
    topic: &str,
    dlq: &str,
    group: &str,
    outcome: &mut Outcome,
) {
    let chosen = |api: &str| {
        outcome
            .negotiated
            .iter()
            .find(|n| n.api == api)
            .and_then(|n| n.chosen)
    };
    let join = chosen("JoinGroup");
    let heartbeat = chosen("ConsumerGroupHeartbeat");
    let consume = |group: String, extra: &[&str]| {
        let mut args: Vec<String> = [
            "consume",
            "--topic",
            topic,
            "--group",
            &group,
            "--dlq-topic",
            dlq,
            "--exec",
            "true",
            "--admin-addr",
            "off",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        args.extend(extra.iter().map(|a| a.to_string()));
        args
    };
    if join.is_some_and(|v| v < 5) {
        let args = consume(format!("{group}-static"), &["--instance-id", "compat-1"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match wait_for_line(
            opts,
            bootstrap,
            &args,
            "static membership needs Apache Kafka 2.3",
        ) {
            Ok(line) => eprintln!("    orderly consume --instance-id: {line}"),
            Err(seen) => outcome.failures.push(format!(
                "orderly consume --instance-id on JoinGroup v{}: no dynamic-member warning: {seen}",
                join.unwrap_or_default()
            )),
        }
    }
    if heartbeat.is_none() || outcome.release.major < 4 {
        let args = consume(format!("{group}-kip848"), &["--group-protocol", "consumer"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = orderly_bounded(opts, bootstrap, &args, REFUSAL_BOUND);
        let err = out
            .as_ref()
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .unwrap_or_default();
        match (&out, err.lines().find(|l| l.contains("group.protocol=classic"))) {
            (Some(o), Some(line)) if !o.status.success() => {
                eprintln!("    orderly consume --group-protocol consumer: {} {line}", o.status);
            }
            _ => outcome.failures.push(format!(
                "orderly consume --group-protocol consumer before Kafka 4.0 did not stop with a line naming group.protocol=classic ({:?}): {}",
                out.map(|o| o.status),
                err.trim()
            )),
        }
    }
}
