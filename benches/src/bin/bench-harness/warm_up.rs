//! The broker warm-up before the first scenario, and the wait for a quiet machine after it.

use std::time::{Duration, Instant};

use anyhow::Result;

use crate::ctx::Ctx;
use crate::raw_fetch::raw_fetch;
use crate::scenario::{Kind, Scenario};
use crate::topic::seed_topic;

/// Records the broker warm-up writes and reads before the first scenario.
pub const WARMUP_RECORDS: u64 = 200_000;

/// Warms up a fresh broker before anything is measured: its JIT compiler and its caches make
/// whichever run comes first on a fresh broker the slowest, so that run would pay for every
/// system. Writes `WARMUP_RECORDS` records of the shared workload
/// with the load generator and reads them once with orderly's fetch loop and once with Kafka's
/// ConsumerPerformance (a consumer group: join, fetch, commit), the same for every system, then
/// waits for a quiet machine (the JVM's JIT threads); nothing of it is reported.
pub async fn warm_up(ctx: &Ctx) -> Result<()> {
    let started = Instant::now();
    eprintln!(
        "==> warming up the broker (not measured): {WARMUP_RECORDS} records written and read twice"
    );
    let sc = Scenario {
        id: "warm-up".into(),
        what: "broker warm-up".into(),
        records: WARMUP_RECORDS,
        sessions: 1_000,
        partitions: 12,
        fail_mod: 0,
        work_us: 0,
        rate: 0,
        seconds: 0.0,
        systems: Vec::new(),
        kind: Kind::Plain,
        limit_s: 300.0,
        full_reps: 1,
        raw_fetch: false,
        memory_per_session: false,
        in_quick_form: false,
    };
    let topic = ctx.unique("warmup");
    seed_topic(ctx, &sc, &topic).await?;
    raw_fetch(ctx, &sc, &topic).await;
    // A fresh JVM keeps compiling for a while after its traffic stopped (its JIT threads take
    // a core for seconds); wait until the machine is quiet before the first measured run.
    let quiet = wait_quiet(QUIET_BUSY, QUIET_WITHIN).await;
    eprintln!(
        "    warm-up took {:.0} s; {}",
        started.elapsed().as_secs_f64(),
        match quiet {
            Ok(busy) => format!(
                "machine quiet ({:.0} % busy over the last second)",
                busy * 100.0
            ),
            Err(busy) => format!(
                "the machine was still {:.0} % busy after {} s; measuring anyway",
                busy * 100.0,
                QUIET_WITHIN.as_secs()
            ),
        }
    );
    Ok(())
}

/// Below this share of all cores busy over one second the machine counts as quiet.
pub const QUIET_BUSY: f64 = 0.10;
/// How long [`warm_up`] waits for a quiet machine.
pub const QUIET_WITHIN: Duration = Duration::from_secs(60);

/// Waits until the share of CPU time spent busy over all cores (`/proc/stat`) stays below
/// `busy` for one second, at most `within`: `Ok(last share)`, or `Err(last share)` on timeout (or
/// `Ok(0.0)` where `/proc/stat` is missing).
async fn wait_quiet(busy: f64, within: Duration) -> std::result::Result<f64, f64> {
    /// (busy, total) jiffies of the `cpu` line.
    fn sample() -> Option<(u64, u64)> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
        let total: u64 = v.iter().take(8).sum();
        let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
        Some((total.saturating_sub(idle), total))
    }
    let deadline = Instant::now() + within;
    let Some(mut prev) = sample() else {
        return Ok(0.0);
    };
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(now) = sample() else {
            return Ok(0.0);
        };
        let share =
            now.0.saturating_sub(prev.0) as f64 / now.1.saturating_sub(prev.1).max(1) as f64;
        prev = now;
        if share < busy {
            return Ok(share);
        }
        if Instant::now() >= deadline {
            return Err(share);
        }
    }
}
