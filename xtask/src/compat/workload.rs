//! The seed workload on a supported release: `orderly seed`, then `orderly run` with transient
//! and permanent failures, then the DLQ topic, the group's lag and Kafka's own view of the group.

use anyhow::{Context, Result, bail};

use super::options::CompatOptions;
use super::orderly::{orderly, orderly_bounded};
use super::outcome::Outcome;

/// How long the seed workload's `orderly run` may take before the check kills it and fails.
const WORKLOAD_BOUND: std::time::Duration = std::time::Duration::from_secs(600);

/// Seed, run (order, loss, DLQ), then the DLQ topic, the lag and Kafka's view of the group.
pub(super) fn check_workload(
    opts: &CompatOptions,
    bootstrap: &str,
    topic: &str,
    dlq: &str,
    group: &str,
    outcome: &mut Outcome,
) {
    if let Some(line) = &outcome.refused {
        outcome.failures.push(format!("refused: {line}"));
        outcome.summary = "refused".into();
        return;
    }
    let records = opts.records.to_string();
    let seed = orderly(
        opts,
        bootstrap,
        &["seed", "--topic", topic, "--records", &records],
    );
    if !seed.status.success() {
        outcome.failures.push(format!(
            "orderly seed failed: {}",
            String::from_utf8_lossy(&seed.stderr).trim()
        ));
        return;
    }
    // `orderly run` ends once every record is handled or dead-lettered: a lost record keeps it
    // running, which the bound turns into a failure.
    let Some(run) = orderly_bounded(
        opts,
        bootstrap,
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
            "--permanent",
        ],
        WORKLOAD_BOUND,
    ) else {
        outcome.failures.push(format!(
            "orderly run had not seen all {records} records after {}s (killed): a record was lost",
            WORKLOAD_BOUND.as_secs()
        ));
        return;
    };
    let report = String::from_utf8_lossy(&run.stdout).into_owned();
    if !run.status.success() {
        outcome.failures.push(format!(
            "orderly run failed: {}{}",
            report.trim(),
            String::from_utf8_lossy(&run.stderr).trim()
        ));
        return;
    }
    let dead = dead_lettered(&report);
    let letters = orderly(
        opts,
        bootstrap,
        &["dlq", "ls", "--dlq-topic", dlq, "--json"],
    );
    let in_dlq = String::from_utf8_lossy(&letters.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .count() as u64;
    if !letters.status.success() || Some(in_dlq) != dead {
        outcome.failures.push(format!(
            "the DLQ holds {in_dlq} letters, the run reported {dead:?} dead-lettered: {}",
            String::from_utf8_lossy(&letters.stderr).trim()
        ));
    }
    let status = orderly(opts, bootstrap, &["status", "--group", group, "--json"]);
    let lag = serde_json::from_slice::<serde_json::Value>(&status.stdout)
        .ok()
        .and_then(|v| v.get("total_lag").and_then(serde_json::Value::as_i64));
    if lag != Some(0) {
        outcome.failures.push(format!(
            "orderly status: total lag {lag:?}, expected 0: {}",
            String::from_utf8_lossy(&status.stderr).trim()
        ));
    }
    match kafka_lag(bootstrap, group, topic) {
        Ok(0) => {}
        Ok(n) => outcome
            .failures
            .push(format!("kafka-consumer-groups: lag {n}, expected 0")),
        Err(e) => outcome
            .failures
            .push(format!("kafka-consumer-groups: {e:#}")),
    }
    outcome.summary = format!(
        "{records} records in order, none lost, {} dead-lettered, lag 0",
        dead.unwrap_or(0)
    );
}

/// "records terminal N (H handled, D dead-lettered)" → D.
fn dead_lettered(report: &str) -> Option<u64> {
    let line = report.lines().find(|l| l.contains("dead-lettered"))?;
    let before = line.split(" dead-lettered").next()?;
    before
        .rsplit(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The group's total lag on `topic` as `kafka-consumer-groups --describe` (current release)
/// reports it; fails if the tool does not list every partition.
fn kafka_lag(bootstrap: &str, group: &str, topic: &str) -> Result<i64> {
    let dist = orderly_testkit::KafkaDist::ensure()?;
    let Some(mut cmd) = orderly_testkit::tools::command(&dist, "consumer-groups") else {
        bail!("no consumer-groups tool");
    };
    let out = cmd
        .args([
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--group",
            group,
        ])
        .output()
        .context("running kafka-consumer-groups")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{}{}",
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let header: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("GROUP"))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    let lag_col = header
        .iter()
        .position(|h| *h == "LAG")
        .context("no LAG column")?;
    let mut partitions = 0;
    let mut lag = 0;
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.get(1) == Some(&topic) {
            partitions += 1;
            lag += cols
                .get(lag_col)
                .and_then(|v| v.parse::<i64>().ok())
                .with_context(|| format!("no lag in {line:?}"))?;
        }
    }
    if partitions != 4 {
        bail!("listed {partitions} partitions of {topic}, expected 4:\n{text}");
    }
    Ok(lag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_letter_count_is_read_from_the_report() {
        let r = "orderly run report\n  records terminal     2000 (1998 handled, 2 dead-lettered)\n";
        assert_eq!(dead_lettered(r), Some(2));
        assert_eq!(dead_lettered("nothing"), None);
    }
}
