//! The report `orderly run` prints: throughput, latency percentiles, order, loss and the DLQ.

use std::sync::Mutex;
use std::time::Duration;

use orderly_consumer::synthetic::{Observed, percentile};
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
    from_first_record: Option<Duration>,
}

impl Report {
    /// Summarises a finished run.
    pub fn new(stats: &EngineStats, observed: &Mutex<Observed>, elapsed: Duration) -> Self {
        let o = observed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Taken before the latencies are copied and sorted (tens of ms for a million records),
        // which is the report's work, not the run's.
        let from_first_record = o.first_handled.map(|t| t.elapsed());
        let mut lat = o.latencies_us.clone();
        lat.sort_unstable();
        let ms = |us: u64| us as f64 / 1000.0;
        Report {
            handled: stats.handled(),
            dead_lettered: stats.dead_lettered(),
            retried: stats.retried(),
            violations: o.violations,
            engine_violations: stats.ordering_violations(),
            replays: o.replays,
            sessions: o.last_seq.len(),
            elapsed,
            p50_ms: ms(percentile(&lat, 50.0)),
            p99_ms: ms(percentile(&lat, 99.0)),
            p999_ms: ms(percentile(&lat, 99.9)),
            commits: stats.commits(),
            from_first_record,
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
        if let Some(d) = self.from_first_record {
            let rate = terminal as f64 / d.as_secs_f64().max(1e-9);
            println!(
                "  throughput           {rate:.0} records/s from the first record handed to a handler to the end of the run ({d:.2?}: final commit and LeaveGroup included)"
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
