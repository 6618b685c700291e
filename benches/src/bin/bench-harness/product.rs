//! The product binary's row, `orderly run`: it runs with its own synthetic handler and is judged
//! by the report it prints.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use orderly_benches::verify::Verdict;
use tokio::process::Command;

use crate::ctx::Ctx;
use crate::outcome::{Results, RunResult, med};
use crate::process::sample_peak;
use crate::scenario::Scenario;
use crate::system::System;
use crate::topic::create_topic;

/// Runs the product binary, `orderly run`, with its default flags on a backlog topic: the
/// engine and the Kafka driver behind the CLI's wiring, its synthetic handler (a record fails
/// once when `fnv1a64(event-id) % 100 < pct`, the scenario's share of failures by the product's
/// own rule) and its report, which the run is judged by: records terminal (short of the
/// scenario's count: lost), ordering violations seen by the handler and by the engine's `seq`
/// checker, replays (counted as duplicates), and the rate from the first record handed to the
/// handler to the final commit's acknowledgement (the LeaveGroup and the teardown after it are
/// not counted; crates/cli/src/report.rs).
pub async fn run_product(
    ctx: &Ctx,
    sc: &Scenario,
    shared_topic: Option<&str>,
) -> Result<RunResult> {
    let topic = shared_topic.context("the product binary runs backlog scenarios only")?;
    let group = format!(
        "{topic}-{}-{}",
        sc.id.to_lowercase(),
        System::OrderlyRun.name()
    );
    // `orderly run`'s default dead-letter topic, `<group>.dlq`, which must exist.
    create_topic(ctx, &format!("{group}.dlq"), 1).await?;
    let stderr_path = ctx.runs_dir.join(format!("{group}.stderr"));
    let pct = 100u64.checked_div(sc.fail_mod).unwrap_or(0);
    let mut c = Command::new(ctx.bin.join("orderly"));
    c.args(["run", "--bootstrap", &ctx.args.bootstrap])
        .args(["--topic", topic, "--group", &group])
        .args(["--records", &sc.records.to_string()])
        .args(["--transient-pct", &pct.to_string()])
        .args(["--work-us", &sc.work_us.to_string()])
        // The product's own logging, as a user runs it.
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&stderr_path)?))
        .kill_on_drop(true);
    let child = c.spawn().context("starting orderly run")?;
    let peak = sample_peak(child.id());
    let limit = Duration::from_secs_f64(sc.limit_s);
    let out = match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(out) => out.context("waiting for orderly run")?,
        Err(_) => bail!("did not finish within {} s: killed", limit.as_secs()),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v = parse_run_report(&text, sc.records).with_context(|| {
        format!(
            "orderly run exited with {} and no report (see {})",
            out.status,
            stderr_path.display()
        )
    })?;
    // The harness samples every 200 ms, which a short run ends before; the report has the peak.
    v.rss_kib = v
        .rss_kib
        .max(peak.load(std::sync::atomic::Ordering::Relaxed));
    Ok(RunResult {
        verdict: Some(v),
        error: None,
        achieved_rate: None,
        load_ack_p99_ms: None,
        http: None,
        replies: None,
    })
}

/// Reads the report `orderly run` prints (crates/cli/src/report.rs) into a verdict for a run of
/// `records` records; `None` if a figure is missing.
fn parse_run_report(text: &str, records: u64) -> Option<Verdict> {
    let field = |name: &str| -> Option<&str> {
        text.lines()
            .find_map(|l| l.trim_start().strip_prefix(name))
            .map(str::trim_start)
    };
    let first_number = |s: &str| -> Option<f64> {
        s.split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .find(|w| !w.is_empty())?
            .parse()
            .ok()
    };
    let terminal = first_number(field("records terminal")?)? as u64;
    let retried = first_number(field("transient retries")?)? as u64;
    let replays = first_number(field("replays")?)? as u64;
    let violations = field("ordering violations")?;
    let (handler, engine) = violations.split_once('/')?;
    let violations = first_number(handler)? as u64 + first_number(engine)? as u64;
    let rate = text
        .lines()
        .find(|l| l.contains("records/s from the first record"))
        .and_then(|l| first_number(l.trim_start().strip_prefix("throughput")?))?;
    let cpu_us_per_record = field("cpu").and_then(first_number);
    let rss_kib = field("peak memory")
        .and_then(first_number)
        .map_or(0, |mib| mib as u64 * 1024);
    Some(Verdict {
        seen: terminal.min(records),
        lost: records.saturating_sub(terminal),
        duplicates: replays,
        violations,
        retried,
        seconds: terminal as f64 / rate.max(1e-9),
        rate,
        cpu_us_per_record,
        rss_kib,
        ..Verdict::default()
    })
}

/// The product binary's median rate ÷ the library's (`bench-orderly`) in one scenario, if both ran.
pub fn product_ratio(results: &Results) -> Option<f64> {
    let lib = results
        .get(&System::Orderly)
        .and_then(|r| med(r, |v| v.rate))?;
    let product = results
        .get(&System::OrderlyRun)
        .and_then(|r| med(r, |v| v.rate))?;
    Some(product / lib)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_product_report_is_read_into_a_verdict() {
        let report = "orderly run report
  records terminal     49990 (49990 handled, 0 dead-lettered)
  transient retries    5012
  sessions             1000
  wall time            1.04s (join, consume, drain, commit, leave)
  throughput           481938 records/s over the wall time
  throughput           250000 records/s from the first record handed to a handler to the final commit acknowledged (199.96ms; leaving the group took 10.02ms more)
  peak memory          54 MiB resident (VmHWM)
  cpu                  1.85 µs per record (92.48ms user + system, every thread, from the first record handed to a handler to the end)
  latency              p50 2440.8 ms  p99 2751.5 ms  p99.9 2757.8 ms (handled - CreateTime; in a backlog run this includes the time records waited in the topic)
  ordering violations  2 (handler check) / 1 (engine seq checker)
  replays              4
  commits              1
  verdict              FAILED
";
        let v = parse_run_report(report, 50_000).unwrap();
        assert_eq!((v.seen, v.lost, v.duplicates), (49_990, 10, 4));
        assert_eq!((v.violations, v.retried), (3, 5_012));
        assert!((v.rate - 250_000.0).abs() < 1e-9);
        assert!((v.seconds - 0.19996).abs() < 1e-9);
        assert_eq!(v.cpu_us_per_record, Some(1.85));
        assert_eq!(v.rss_kib, 54 * 1024);
        assert!(!v.ok());
        assert!(parse_run_report("error: no broker", 10).is_none());
    }
}
