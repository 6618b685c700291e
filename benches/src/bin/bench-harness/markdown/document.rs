//! The generated section of BENCHMARKS.md: the run's header (command, machine, workload), every
//! scenario's section, the charts, spliced between the section's markers.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Result;
use tokio::process::Command;

use super::figures::group_digits;
use super::procedures::{write_s2max, write_s4, write_s6};
use super::tables::{Charts, write_scenario};
use crate::ctx::Ctx;
use crate::report::Report;
use crate::warm_up::{QUIET_BUSY, QUIET_WITHIN, WARMUP_RECORDS};

/// The first line `cmd args` prints (stdout, else stderr), `not installed` if it cannot run.
async fn capture(cmd: &str, args: &[&str]) -> String {
    match Command::new(cmd).args(args).output().await {
        Ok(o) => {
            let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
            s.push_str(&String::from_utf8_lossy(&o.stderr));
            s.lines().next().unwrap_or_default().trim().to_owned()
        }
        Err(_) => "not installed".into(),
    }
}

/// Writes the report of `report` (a run that took `took`) between the markers of BENCHMARKS.md
/// and its charts to `benches/results/`.
pub async fn write_results(ctx: &Ctx, report: &Report, took: Duration) -> Result<()> {
    let commit = capture(
        "git",
        &[
            "-C",
            &ctx.root.display().to_string(),
            "rev-parse",
            "--short",
            "HEAD",
        ],
    )
    .await;
    let dirty = !capture(
        "git",
        &[
            "-C",
            &ctx.root.display().to_string(),
            "status",
            "--porcelain",
            "--untracked-files=no",
        ],
    )
    .await
    .is_empty();
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    let java = capture("java", &["-version"]).await;
    let go = capture("go", &["version"]).await;
    let rustc = capture("rustc", &["-V"]).await;
    let mut md = String::new();
    let _ = writeln!(md, "{BEGIN_MARKER}");
    let _ = writeln!(
        md,
        "## Side by side: orderly, the seed's design in Go, Confluent Parallel Consumer\n"
    );
    let _ = writeln!(
        md,
        "Command: `{}` (commit `{commit}`{}, {} form, systems interleaved within each repetition, in a rotating order in which S3's raw fetch takes its turn, dirty pages written out (`sync`) before every run; runs per system under each scenario; took {:.0} s).  ",
        ctx.args.command,
        if dirty {
            ", with uncommitted changes"
        } else {
            ""
        },
        if ctx.args.quick { "quick" } else { "full" },
        took.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "Machine: {cores} cores, {mem_gib:.0} GiB RAM, {rustc}, {java}, {go}; one Apache Kafka {} broker (KRaft, loopback). \
         The machine is shared: absolute figures are context, the ratios measured in the same run are the result.\n",
        orderly_testkit::KAFKA_VERSION
    );
    let warmup = if ctx.args.no_warmup {
        "No broker warm-up before the first scenario (`--no-warmup`). ".to_owned()
    } else {
        format!(
            "Before the first scenario the broker is warmed up, for no system in particular: {} records written by the load \
             generator and read once by orderly's fetch loop and once by ConsumerPerformance, then the harness waits (up to \
             {} s) until the machine is under {:.0} % busy for a second (not measured; on a fresh broker the first runs are the \
             slowest). ",
            group_digits(WARMUP_RECORDS),
            QUIET_WITHIN.as_secs(),
            QUIET_BUSY * 100.0
        )
    };
    let _ = writeln!(
        md,
        "Workload (every system): key = session id, 100-byte value, headers `event-id` and `seq`; a record fails transiently on its \
         first attempt when `fnv1a64(event-id) % m == 0` (m = 10: 10 %, m = 100: 1 %); retries: full jitter over \
         min(100 ms, 1 ms × 2^(n−1)). Throughput = records / (first record handed to a handler → the final commit acknowledged; \
         Parallel Consumer: the end of `close()`, which commits and leaves the group in one call). CPU per record = the process's CPU clock \
         (`CLOCK_PROCESS_CPUTIME_ID`; Go: `getrusage`; Java: `OperatingSystemMXBean.getProcessCpuTime`: every thread, user and \
         system) from the first record handed to a handler to the end of the run, ÷ records; the broker's CPU is not in it. {warmup}Latency = handler completion − CreateTime (live runs only; the first second is warm-up). Every run is checked by \
         the shared verifier (`benches/src/verify.rs`): lost, duplicates, ordering violations, attempt counts; a failed run counts \
         for nothing and is marked.\n"
    );
    let mut charts = Charts::default();
    for (sc, results, raw) in &report.scenarios {
        write_scenario(&mut md, &ctx.systems, sc, results, raw, &mut charts);
    }
    if let Some((sc, searches)) = &report.s2max {
        write_s2max(&mut md, sc, searches);
    }
    if let Some((sc, rows)) = &report.s4 {
        write_s4(&mut md, sc, rows);
    }
    if let Some((sc, rows)) = &report.s6 {
        write_s6(&mut md, sc, rows);
    }
    let results_dir = ctx.root.join("benches/results");
    std::fs::create_dir_all(&results_dir)?;
    charts.write(&mut md, &results_dir)?;
    let _ = writeln!(
        md,
        "Handler logs and each system's stderr of this run: `target/bench-runs/{}/`.",
        ctx.stamp
    );
    let _ = writeln!(md, "{END_MARKER}");
    let path = ctx.root.join("BENCHMARKS.md");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    std::fs::write(&path, splice_generated(&old, &md))?;
    eprintln!("==> wrote BENCHMARKS.md and benches/results/*.svg");
    Ok(())
}

/// The line that opens the generated section of BENCHMARKS.md (`cargo xtask tidy` checks that the
/// document has it, and the closing [`END_MARKER`], once each).
pub const BEGIN_MARKER: &str =
    "<!-- bench:begin (written by `cargo xtask bench`; edits inside are overwritten) -->";
/// The line that closes the generated section of BENCHMARKS.md.
pub const END_MARKER: &str = "<!-- bench:end -->";

/// `old` (BENCHMARKS.md) with its generated section, from the begin marker to the end marker,
/// replaced by `block` (which carries both markers); everything outside stays as it is. Without
/// the markers, `block` is appended.
pub fn splice_generated(old: &str, block: &str) -> String {
    let begin = old.find(BEGIN_MARKER.split(" (").next().unwrap_or(BEGIN_MARKER));
    match (begin, old.find(END_MARKER)) {
        (Some(a), Some(b)) if b > a => format!(
            "{}{}{}",
            old.get(..a).unwrap_or_default(),
            block.trim_end(),
            old.get(b + END_MARKER.len()..).unwrap_or_default()
        ),
        _ => format!("{}\n{}", old.trim_end(), block),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_section_is_replaced_and_the_rest_kept() {
        let old = format!(
            "# Benchmarks\n\nintro\n\n{BEGIN_MARKER}\n## old tables\n{END_MARKER}\n\n## Limits\ntext\n"
        );
        let block = format!("{BEGIN_MARKER}\n## new tables\n{END_MARKER}\n");
        let new = splice_generated(&old, &block);
        assert_eq!(
            new,
            format!(
                "# Benchmarks\n\nintro\n\n{BEGIN_MARKER}\n## new tables\n{END_MARKER}\n\n## Limits\ntext\n"
            )
        );
        assert_eq!(splice_generated(&new, &block), new, "idempotent");
        // Without markers the block is appended.
        assert_eq!(
            splice_generated("# Benchmarks\n", &block),
            format!("# Benchmarks\n{block}")
        );
    }

    #[test]
    fn benchmarks_md_has_the_markers_the_harness_writes_between() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../BENCHMARKS.md"),
        )
        .unwrap();
        assert_eq!(doc.matches(BEGIN_MARKER).count(), 1);
        assert_eq!(doc.matches(END_MARKER).count(), 1);
        assert!(doc.find(BEGIN_MARKER) < doc.find(END_MARKER));
    }
}
