//! A release below the floor: the library and every command that talks to a broker refuse it by
//! themselves, with the one-line error and a non-zero exit.

use super::options::CompatOptions;
use super::orderly::{REFUSAL_BOUND, orderly_bounded};
use super::outcome::Outcome;

/// Every command must stop by itself, with a non-zero exit and the one-line error naming the
/// oldest supported release.
pub(super) fn check_refused(
    opts: &CompatOptions,
    bootstrap: &str,
    topic: &str,
    dlq: &str,
    group: &str,
    outcome: &mut Outcome,
) {
    if outcome.refused.is_none() {
        outcome
            .failures
            .push("the library connected to a broker below the floor".into());
    }
    let records = opts.records.to_string();
    let commands: [&[&str]; 8] = [
        &["seed", "--topic", topic, "--records", &records],
        &["produce", "--topic", topic, "--generate", "--records", "10"],
        &[
            "run",
            "--topic",
            topic,
            "--group",
            group,
            "--dlq-topic",
            dlq,
            "--records",
            &records,
        ],
        &[
            "consume",
            "--topic",
            topic,
            "--group",
            group,
            "--dlq-topic",
            dlq,
            "--exec",
            "true",
            "--admin-addr",
            "off",
        ],
        &["status", "--group", group],
        &["dlq", "ls", "--dlq-topic", dlq],
        &["dlq", "show", "--dlq-topic", dlq, "--all"],
        &["dlq", "replay", "--dlq-topic", dlq, "--all"],
    ];
    let mut slowest = std::time::Duration::ZERO;
    for args in commands {
        let name = args
            .iter()
            .take_while(|a| !a.starts_with('-'))
            .copied()
            .collect::<Vec<_>>()
            .join(" ");
        let started = std::time::Instant::now();
        let Some(out) = orderly_bounded(opts, bootstrap, args, REFUSAL_BOUND) else {
            outcome.failures.push(format!(
                "orderly {name} was still running after {}s (killed)",
                REFUSAL_BOUND.as_secs()
            ));
            continue;
        };
        let took = started.elapsed();
        slowest = slowest.max(took);
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        let refusal = lines
            .iter()
            .find(|l| l.contains("orderly needs Apache Kafka"));
        match refusal {
            Some(line) if !out.status.success() && !line.contains("cannot reach") => {
                eprintln!(
                    "    orderly {name}: {} after {took:.1?}: {line}",
                    out.status
                );
            }
            _ => outcome.failures.push(format!(
                "orderly {name} was not refused with the one-line error ({}): {}",
                out.status,
                err.trim()
            )),
        }
    }
    outcome.summary = match &outcome.refused {
        Some(line) => format!(
            "refused by the library and by every command (slowest {:.1}s): {line}",
            slowest.as_secs_f64()
        ),
        None => "not refused".into(),
    };
}
