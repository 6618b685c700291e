//! The outcome of a run: the verifier's verdict and what else was checked, its one-line
//! description, and the medians the report takes over passing runs.

use std::collections::BTreeMap;

use orderly_benches::replies::ReplyVerdict;
use orderly_benches::verify::Verdict;

use crate::endpoint::HttpReport;
use crate::scenario::Scenario;
use crate::system::System;

/// The outcome of one run of one system.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The verifier's findings (`None`: the run failed before it could be verified).
    pub verdict: Option<Verdict>,
    /// Why the run failed, where it failed other than by the verdict.
    pub error: Option<String>,
    /// Live runs: the rate the load generator achieved.
    pub achieved_rate: Option<f64>,
    /// The load generator's own p99 from CreateTime to the broker's acknowledgement, ms (live
    /// runs): the part of every system's latency that is the producer's and the broker's.
    pub load_ack_p99_ms: Option<f64>,
    /// HTTP scenarios: what the shared endpoint reported.
    pub http: Option<HttpReport>,
    /// Reply scenarios: the reply check of the reply topic read with `read_committed`.
    pub replies: Option<ReplyVerdict>,
}

impl RunResult {
    /// Whether the run passed every check.
    pub fn ok(&self) -> bool {
        self.error.is_none()
            && self.verdict.as_ref().is_some_and(Verdict::ok)
            && self.http.as_ref().is_none_or(|h| h.violations() == 0)
            && self.replies.as_ref().is_none_or(ReplyVerdict::ok)
    }

    /// A run that failed with `error` before it could be verified.
    pub fn failed(error: String) -> Self {
        RunResult {
            verdict: None,
            error: Some(error),
            achieved_rate: None,
            load_ack_p99_ms: None,
            http: None,
            replies: None,
        }
    }
}

/// Every run of every system in one scenario.
pub type Results = BTreeMap<System, Vec<RunResult>>;

/// S4: per system, (run without the stalled session, run with it) per repetition.
pub type StallRows = BTreeMap<System, Vec<(RunResult, RunResult)>>;

/// The median of `v`, `None` when it is empty.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// Median of the passing runs' figure, `None` when no run passed.
pub fn med(runs: &[RunResult], f: impl Fn(&Verdict) -> f64) -> Option<f64> {
    median(
        runs.iter()
            .filter(|r| r.ok())
            .filter_map(|r| r.verdict.as_ref().map(&f))
            .collect(),
    )
}

/// The run in one line: its figures or its error, and its reply check.
pub fn describe(r: &RunResult) -> String {
    let replies = r.replies.as_ref().map_or(String::new(), |v| {
        format!(
            "; replies read with read_committed: {} of {} records' replies, lost {}, duplicates {}, violations {}, mismatches {}",
            v.seen,
            v.seen + v.lost,
            v.lost,
            v.duplicates,
            v.violations,
            v.mismatches
        )
    });
    let handler = match (&r.error, &r.verdict) {
        (Some(e), _) => format!("error: {e}"),
        (None, Some(v)) => format!(
            "{} in {:.2} s, p50 {:.1} ms p99 {:.1} ms p99.9 {:.1} ms, lost {}, duplicates {}, violations {}, mismatches {}, rss {} MiB{}{}",
            // Crash runs merge the logs of several processes: no single run time to divide by.
            if v.seconds < 0.001 {
                "throughput not measured".to_owned()
            } else {
                format!("{:.0} records/s", v.rate)
            },
            v.seconds,
            v.latency_ms[0],
            v.latency_ms[1],
            v.latency_ms[2],
            v.lost,
            v.duplicates,
            v.violations,
            v.mismatches,
            v.rss_kib / 1024,
            v.cpu_us_per_record
                .map(|c| format!(", cpu {c:.2} µs per record"))
                .unwrap_or_default(),
            r.achieved_rate
                .map(|a| format!(", load achieved {a:.0} records/s"))
                .unwrap_or_default()
        ),
        (None, None) => "no result".into(),
    };
    handler + &replies
}

/// Prints the run's line to stderr.
pub fn print_result(sc: &Scenario, sys: System, r: &RunResult) {
    eprintln!(
        "    {} {:<18} {} {}{}",
        sc.id,
        sys.name(),
        if r.ok() { "ok    " } else { "FAILED" },
        describe(r),
        r.http.as_ref().map_or(String::new(), |h| format!(
            "; endpoint: {:.2} records per request, CreateTime -> done p50 {:.1} ms p99 {:.1} ms over every record",
            h.per_request(),
            h.latency_p50_ms,
            h.latency_p99_ms
        ))
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run whose handler log passes but whose read_committed replies hold a duplicate failed.
    #[test]
    fn a_run_failing_the_reply_check_failed() {
        let run = |replies: ReplyVerdict| RunResult {
            verdict: Some(Verdict {
                seen: 10,
                rate: 1_000.0,
                ..Verdict::default()
            }),
            error: None,
            achieved_rate: None,
            load_ack_p99_ms: None,
            http: None,
            replies: Some(replies),
        };
        let clean = ReplyVerdict {
            read: 10,
            seen: 10,
            ..ReplyVerdict::default()
        };
        assert!(run(clean.clone()).ok());
        let twice = run(ReplyVerdict {
            read: 11,
            duplicates: 1,
            ..clean
        });
        assert!(!twice.ok());
        assert!(
            describe(&twice).contains("duplicates 1, violations 0"),
            "{}",
            describe(&twice)
        );
        let mut res = Results::new();
        res.insert(System::PcTransactional, vec![twice]);
        assert_eq!(med(&res[&System::PcTransactional], |v| v.rate), None);
    }
}
