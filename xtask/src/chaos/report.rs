//! The figures of a finished run ([`ChaosReport`]) and their print-out.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Result, bail};

use super::{ChaosOptions, EXACTLY_ONCE_KILLS, FaultKind, kinds, session_timeout};

/// Figures of a finished run.
#[derive(Debug, Default)]
pub struct ChaosReport {
    /// Seconds the whole run took.
    pub seconds: f64,
    /// Records acknowledged to the producer.
    pub acked: usize,
    /// Records in the log at the end (acknowledged or not).
    pub in_log: usize,
    /// Produce calls that failed (record not acknowledged).
    pub produce_errors: u64,
    /// Deliveries (HTTP requests) seen.
    pub deliveries: usize,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, usize>,
    /// Acknowledged records neither answered 2xx nor dead-lettered.
    pub lost: usize,
    /// Violations of the ordering, watermark and DLQ rules.
    pub violations: Vec<String>,
    /// Deliveries after a terminal answer, by the kind of the fault before them.
    pub duplicates: BTreeMap<String, usize>,
    /// Dead letters read back.
    pub dead_letters: usize,
    /// Per fault kind, one entry per fault event: the time (s) from the fault until *every*
    /// partition had again a delivery that started after the fault and was answered 2xx (records
    /// flow again everywhere). Events after which some partition never flowed again are left out
    /// and counted in `unrecovered`.
    pub recovery: BTreeMap<String, Vec<f64>>,
    /// Per fault kind: events after which some partition had no 2xx delivery any more.
    pub unrecovered: BTreeMap<String, usize>,
    /// Per leader kill: the time until every *surviving* partition (led by another node) delivered
    /// again (`None`: one never did). The goal: within one session timeout.
    pub surviving_recovery: Vec<Option<f64>>,
    /// Per entry of `surviving_recovery`: the time until the brokers acknowledged a write again
    /// on every surviving partition (acks=all: the log's high watermark moves only once the
    /// killed node has left those partitions' ISR). No consumer can deliver a record produced
    /// after the kill before then; `None` when some surviving partition had no write acknowledged
    /// after the kill.
    pub surviving_log_stall: Vec<Option<f64>>,
    /// Per entry of `surviving_recovery`: the consumers' own share, the longest time on any
    /// surviving partition from its first acknowledged write after the kill to its first 2xx
    /// delivery started after the kill (0 when a delivery came first).
    pub surviving_consumer_delay: Vec<Option<f64>>,
    /// Whether the consumers kept completed offsets in the commit metadata.
    pub commit_metadata: bool,
    /// Exactly-once mode: replies in the read_committed reply stream.
    pub replies: usize,
    /// Exactly-once mode: records (not permanent failures) without a reply.
    pub reply_lost: usize,
    /// Exactly-once mode: records with more than one reply.
    pub reply_duplicates: usize,
    /// Exactly-once mode: replies out of their session's order.
    pub reply_order: usize,
    /// Consumer exits the harness did not cause (neither a SIGKILL nor a controlled stop of its
    /// schedule), in the order they were seen. Each fails the run.
    pub unexpected_exits: Vec<ConsumerExit>,
}

/// A consumer process that ended without the harness ending it; the harness started it again.
#[derive(Debug, Clone, Default)]
pub struct ConsumerExit {
    /// The consumer's name (its transactional id is `chaos.<name>` in exactly-once mode).
    pub consumer: String,
    /// When the harness saw it gone (s since the start; it checks every 250 ms while it waits,
    /// later while a fault is being injected).
    pub at: f64,
    /// Its exit status (`exit status: 1`, `signal: 6 (SIGABRT)`, ...).
    pub status: String,
    /// The fault before it: kind, time and what.
    pub after: String,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
    /// The last lines of its log.
    pub tail: Vec<String>,
}

impl ChaosReport {
    /// Duplicates per event of `kind` (the duplicates whose preceding fault was of that kind).
    pub fn duplicates_per_event(&self, kind: &str) -> Option<f64> {
        let n = *self.faults.get(kind)?;
        (n > 0).then(|| self.duplicates.get(kind).copied().unwrap_or(0) as f64 / n as f64)
    }
}

/// Median and worst of the known values (0 when none).
fn median_worst(v: &[Option<f64>]) -> (f64, f64) {
    let mut v: Vec<f64> = v.iter().flatten().copied().collect();
    v.sort_by(f64::total_cmp);
    (
        v.get(v.len() / 2).copied().unwrap_or(0.0),
        v.last().copied().unwrap_or(0.0),
    )
}

/// Prints the report; `Err` when anything was lost or violated.
pub fn print(report: &ChaosReport, opts: &ChaosOptions) -> Result<()> {
    let session = session_timeout(opts);
    println!("chaos run: seed {} · {:.0} s", opts.seed, report.seconds);
    println!(
        "records: {} acknowledged, {} in the log, {} produce errors; {} deliveries; {} dead letters",
        report.acked, report.in_log, report.produce_errors, report.deliveries, report.dead_letters
    );
    let faults: Vec<String> = report
        .faults
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!("faults: {}", faults.join(", "));
    let dups: Vec<String> = report
        .duplicates
        .iter()
        .map(|(k, n)| format!("after {k}: {n}"))
        .collect();
    println!(
        "duplicates (a delivery after a terminal answer): {}",
        if dups.is_empty() {
            "none".into()
        } else {
            dups.join(", ")
        }
    );
    let per: Vec<String> = kinds(opts)
        .iter()
        .map(|k| format!("{k:?}"))
        .filter_map(|k| {
            let d = report.duplicates_per_event(&k)?;
            Some(format!("{k} {d:.1}"))
        })
        .collect();
    println!(
        "duplicates per fault event (commit metadata {}): {}",
        if report.commit_metadata { "on" } else { "off" },
        per.join(", ")
    );
    let rec: Vec<String> = report
        .recovery
        .iter()
        .map(|(k, v)| {
            let mut v = v.clone();
            v.sort_by(f64::total_cmp);
            let median = v.get(v.len() / 2).copied().unwrap_or(0.0);
            let worst = v.last().copied().unwrap_or(0.0);
            let stuck = report.unrecovered.get(k).copied().unwrap_or(0);
            format!(
                "{k} median {median:.1} s, worst {worst:.1} s ({} events{})",
                v.len(),
                if stuck > 0 {
                    format!(", {stuck} never recovered")
                } else {
                    String::new()
                }
            )
        })
        .collect();
    println!(
        "recovery (fault until every partition has a 2xx delivery started after it):\n  {}",
        rec.join("\n  ")
    );
    if let Some(v) = report.recovery.get(&format!("{:?}", FaultKind::LeaderKill)) {
        let within = v.iter().filter(|s| **s <= session.as_secs_f64()).count();
        println!(
            "leader kills recovered within one session timeout ({} s): {within} of {}",
            session.as_secs(),
            v.len() + report.unrecovered.get("LeaderKill").copied().unwrap_or(0)
        );
    }
    if !report.surviving_recovery.is_empty() {
        let within = report
            .surviving_recovery
            .iter()
            .flatten()
            .filter(|s| **s <= session.as_secs_f64())
            .count();
        let (median, worst) = median_worst(&report.surviving_recovery);
        println!(
            "leader kills, surviving partitions (led by a node neither killed nor behind a proxy fault in progress) flowing again within one session timeout: {within} of {} (median {median:.1} s, worst {worst:.1} s)",
            report.surviving_recovery.len(),
        );
        let (stall, delay) = (
            median_worst(&report.surviving_log_stall),
            median_worst(&report.surviving_consumer_delay),
        );
        println!(
            "  the brokers' part (no write acknowledged on some surviving partition until the killed node left the ISR): median {:.1} s, worst {:.1} s; the consumers' part (first acknowledged write to first delivery, worst partition): median {:.1} s, worst {:.1} s",
            stall.0, stall.1, delay.0, delay.1
        );
    }
    if opts.exactly_once {
        println!(
            "replies (read_committed, Apache Kafka's consumer): {} · lost {} · duplicates {} · out of session order {}",
            report.replies, report.reply_lost, report.reply_duplicates, report.reply_order
        );
    }
    println!(
        "lost: {} · violations: {} · consumer exits the harness did not cause: {}",
        report.lost,
        report.violations.len(),
        report.unexpected_exits.len()
    );
    for v in &report.violations {
        println!("  {v}");
    }
    for e in &report.unexpected_exits {
        println!(
            "  UNEXPECTED EXIT consumer {} at {:.1} s ({}), after {}; started again; log {}, ending:",
            e.consumer,
            e.at,
            e.status,
            e.after,
            e.log.display()
        );
        for line in &e.tail {
            println!("    | {line}");
        }
    }
    let missing: Vec<&str> = kinds(opts)
        .iter()
        .map(|k| format!("{k:?}"))
        .filter(|k| !report.faults.contains_key(k))
        .map(|_| "")
        .collect();
    if !missing.is_empty() {
        bail!("not every fault kind ran");
    }
    if opts.exactly_once
        && report
            .faults
            .get(&format!("{:?}", FaultKind::ConsumerKill))
            .copied()
            .unwrap_or(0)
            < EXACTLY_ONCE_KILLS
    {
        bail!("fewer than {EXACTLY_ONCE_KILLS} consumer kills ran");
    }
    if report.lost > 0 || !report.violations.is_empty() || !report.unexpected_exits.is_empty() {
        bail!(
            "chaos run failed: {} lost, {} violations, {} consumer exits the harness did not cause (reproduce with --seed {})",
            report.lost,
            report.violations.len(),
            report.unexpected_exits.len(),
            opts.seed
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(exactly_once: bool) -> ChaosOptions {
        ChaosOptions {
            minutes: 1.0,
            seed: 7,
            consumers: 3,
            partitions: 6,
            sessions: 10,
            rate: 10,
            binary: PathBuf::from("orderly"),
            dir: PathBuf::from("/nonexistent"),
            commit_metadata: true,
            exactly_once,
        }
    }

    /// A report in which every fault kind ran (ten consumer kills) and nothing was lost.
    fn clean(opts: &ChaosOptions) -> ChaosReport {
        let mut r = ChaosReport::default();
        for k in kinds(opts) {
            r.faults.insert(format!("{k:?}"), EXACTLY_ONCE_KILLS);
        }
        r
    }

    #[test]
    fn an_unexpected_consumer_exit_fails_the_run_in_either_mode() {
        for exactly_once in [false, true] {
            let o = opts(exactly_once);
            let mut r = clean(&o);
            print(&r, &o).expect("a clean run passes");
            r.unexpected_exits.push(ConsumerExit {
                consumer: "c2".into(),
                status: "exit status: 1".into(),
                ..ConsumerExit::default()
            });
            let err = print(&r, &o).expect_err("an exit of its own fails the run");
            assert!(
                err.to_string()
                    .contains("1 consumer exits the harness did not cause"),
                "{err}"
            );
        }
    }
}
