//! The report `orderly run` prints: throughput, latency percentiles, order, loss and the DLQ.

use std::time::{Duration, Instant, SystemTime};

use orderly_consumer::__private::synthetic::{
    Observed, peak_rss_kib, percentile, process_cpu_time,
};
use orderly_engine::EngineStats;

/// The figures of one run.
#[derive(Debug)]
pub struct Report {
    handled: u64,
    dead_lettered: u64,
    retried: u64,
    violations: u64,
    engine_violations: u64,
    replays: u64,
    sessions: usize,
    elapsed: Duration,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    commits: u64,
    /// From the first record handed to the handler to the final commit's acknowledgement, and
    /// from there to the end of the run (the LeaveGroup and the teardown).
    from_first_record: Option<(Duration, Duration)>,
    /// CPU time of the whole process (every thread, user and system) from the first record handed
    /// to the handler to the end of the run.
    cpu_from_first_record: Option<Duration>,
    /// Peak resident memory of the process, KiB.
    peak_rss_kib: Option<u64>,
}

/// The run's span from the first record handed to the handler (`first`, on the wall clock
/// `first_at`) to the final commit's acknowledgement, and from there to the end of the run
/// (`ended`: the LeaveGroup and the teardown). The span ends at the commit, the end point of every
/// system the benchmark compares; without an acknowledged commit it ends with the run.
fn spans(
    first: Instant,
    first_at: Option<SystemTime>,
    last_commit: Option<SystemTime>,
    ended: Instant,
) -> (Duration, Duration) {
    let whole = ended.saturating_duration_since(first);
    let to_commit = match (first_at, last_commit) {
        (Some(at), Some(commit)) => commit.duration_since(at).unwrap_or_default(),
        _ => whole,
    }
    .min(whole);
    (to_commit, whole - to_commit)
}

impl Report {
    /// Summarises a finished run that ended (returned from [`orderly_consumer::Consumer::run`])
    /// just now.
    pub fn new(stats: &EngineStats, observed: Observed, elapsed: Duration) -> Self {
        let ended = Instant::now();
        let cpu_now = process_cpu_time();
        let Observed {
            sessions,
            violations,
            replays,
            latencies_us: mut lat,
            first_handled,
            first_handled_at,
            first_handled_cpu,
        } = observed;
        let from_first_record =
            first_handled.map(|first| spans(first, first_handled_at, stats.last_commit(), ended));
        lat.sort_unstable();
        let ms = |us: u64| us as f64 / 1000.0;
        Report {
            handled: stats.handled(),
            dead_lettered: stats.dead_lettered(),
            retried: stats.retried(),
            violations,
            engine_violations: stats.ordering_violations(),
            replays,
            sessions,
            elapsed,
            p50_ms: ms(percentile(&lat, 50.0)),
            p99_ms: ms(percentile(&lat, 99.0)),
            p999_ms: ms(percentile(&lat, 99.9)),
            commits: stats.commits(),
            from_first_record,
            cpu_from_first_record: first_handled_cpu.map(|c| cpu_now.saturating_sub(c)),
            peak_rss_kib: peak_rss_kib(),
        }
    }

    /// True if the run kept order (no violation seen by the handler or by the engine's checker).
    pub fn ok(&self) -> bool {
        self.violations == 0 && self.engine_violations == 0
    }

    /// Prints the report on stdout.
    pub fn print(&self) {
        let terminal = self.handled + self.dead_lettered;
        let rate = terminal as f64 / self.elapsed.as_secs_f64().max(1e-9);
        println!("orderly run report");
        println!(
            "  records terminal     {terminal} ({} handled, {} dead-lettered)",
            self.handled, self.dead_lettered
        );
        println!("  transient retries    {}", self.retried);
        println!("  sessions             {}", self.sessions);
        println!(
            "  wall time            {:.2?} (join, consume, drain, commit, leave)",
            self.elapsed
        );
        println!("  throughput           {rate:.0} records/s over the wall time");
        if let Some((d, after)) = self.from_first_record {
            let rate = terminal as f64 / d.as_secs_f64().max(1e-9);
            println!(
                "  throughput           {rate:.0} records/s from the first record handed to a handler to the final commit acknowledged ({d:.2?}; leaving the group took {after:.2?} more)"
            );
        }
        if let Some(cpu) = self.cpu_from_first_record {
            let per_record = cpu.as_secs_f64() * 1e6 / terminal.max(1) as f64;
            println!(
                "  cpu                  {per_record:.2} µs per record ({cpu:.2?} user + system, every thread, from the first record handed to a handler to the end)"
            );
        }
        if let Some(kib) = self.peak_rss_kib {
            println!(
                "  peak memory          {} MiB resident (VmHWM)",
                kib.div_ceil(1024)
            );
        }
        println!(
            "  latency              p50 {:.1} ms  p99 {:.1} ms  p99.9 {:.1} ms (handled - CreateTime; in a backlog run this includes the time records waited in the topic)",
            self.p50_ms, self.p99_ms, self.p999_ms
        );
        println!(
            "  ordering violations  {} (handler check) / {} (engine seq checker)",
            self.violations, self.engine_violations
        );
        println!("  replays              {}", self.replays);
        println!("  commits              {}", self.commits);
        println!(
            "  verdict              {}",
            if self.ok() {
                "OK: order held, nothing lost"
            } else {
                "FAILED"
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_span_ends_at_the_final_commit_and_the_rest_is_leaving() {
        let first = Instant::now();
        let first_at = SystemTime::now();
        let ended = first + Duration::from_millis(130);
        let commit = first_at + Duration::from_millis(120);
        assert_eq!(
            spans(first, Some(first_at), Some(commit), ended),
            (Duration::from_millis(120), Duration::from_millis(10))
        );
        // No acknowledged commit: the whole run.
        assert_eq!(
            spans(first, Some(first_at), None, ended),
            (Duration::from_millis(130), Duration::ZERO)
        );
        // A commit acknowledged before the first record (nothing new to commit) counts as no
        // time, and the clocks disagreeing can never make the span longer than the run.
        assert_eq!(
            spans(
                first,
                Some(first_at),
                Some(first_at - Duration::from_millis(5)),
                ended
            ),
            (Duration::ZERO, Duration::from_millis(130))
        );
        assert_eq!(
            spans(
                first,
                Some(first_at),
                Some(first_at + Duration::from_secs(9)),
                ended
            ),
            (Duration::from_millis(130), Duration::ZERO)
        );
    }
}
