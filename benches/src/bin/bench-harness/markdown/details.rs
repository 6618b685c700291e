//! The paragraphs below a scenario's table: the retry-policy floor of a backlog with failures,
//! what the HTTP endpoint saw, and the reply check of each run.

use orderly_benches::workload;

use super::figures::{fmt_rate, group_digits};
use crate::endpoint::HttpReport;
use crate::outcome::{Results, med, median};
use crate::scenario::{Kind, Scenario};
use crate::system::{PC_TRANSACTIONAL_ARGS, System};

/// The retry-policy floor of a backlog scenario with failures, and orderly's run time against
/// it (the expected floor, and each run's own drawn floor); `None` for other scenarios.
pub fn floor_report(sc: &Scenario, results: &Results) -> Option<String> {
    if sc.fail_mod == 0 || sc.rate > 0 || sc.kind == Kind::Http {
        return None;
    }
    let reference = sc.kind.suite().reference();
    let f = workload::backoff_floor(sc.records, sc.sessions, sc.fail_mod);
    let floor = f.expected_max.as_secs_f64().max(1e-9);
    let orderly_runs: Vec<(f64, f64)> = results
        .get(&reference)
        .map(|runs| {
            runs.iter()
                .filter(|r| r.ok())
                .filter_map(|r| r.verdict.as_ref())
                .filter_map(|v| Some((v.seconds, v.drawn_floor_s.filter(|d| *d > 0.0)?)))
                .collect()
        })
        .unwrap_or_default();
    let drawn = if orderly_runs.is_empty() {
        String::new()
    } else {
        let ratios = median(orderly_runs.iter().map(|(s, d)| s / d).collect());
        format!(
            " orderly's runs, each against the floor of the backoffs it drew (`Attempt::backoff`, \
             added up per session; the largest sum): {}; run time ÷ own drawn floor, median **{}**.",
            orderly_runs
                .iter()
                .map(|(s, d)| format!("{:.1} ms ÷ {:.1} ms = {:.3}×", s * 1e3, d * 1e3, s / d))
                .collect::<Vec<_>>()
                .join(", "),
            ratios.map_or("–".into(), |r| format!("{r:.3}×"))
        )
    };
    Some(format!(
        "Retry-policy floor: the slowest session has {} failing records. A session waits out its \
         backoffs one after another, so a run lasts at least as long as the largest sum of one \
         session's drawn backoffs: {:.1} ms expected (the mean over {} fixed-seed trials of the largest of \
         the sessions' sums; the largest expected sum, k × 0.5 ms, is {:.1} ms), a floor of {} records/s.{}{}",
        f.slowest_k,
        floor * 1e3,
        workload::FLOOR_TRIALS,
        f.max_expected.as_secs_f64() * 1e3,
        fmt_rate(Some(sc.records as f64 / floor)),
        results
            .get(&reference)
            .and_then(|r| med(r, |v| v.seconds))
            .map_or(String::new(), |s| format!(
                " orderly's median run time ÷ expected floor: {:.3}×.",
                s / floor
            )),
        drawn
    ))
}

/// The reply scenarios' paragraph: what each system does and the reply check of each run.
pub fn reply_details(results: &Results) -> String {
    let per: Vec<String> = results
        .iter()
        .map(|(sys, runs)| {
            let each: Vec<String> = runs
                .iter()
                .map(|r| match &r.replies {
                    Some(v) => format!(
                        "{} read, lost {}, duplicates {}, violations {}",
                        group_digits(v.read),
                        v.lost,
                        v.duplicates,
                        v.violations + v.mismatches
                    ),
                    None => "not read (the run failed before)".into(),
                })
                .collect();
            format!("{}: {}", sys.label(), each.join("; "))
        })
        .collect();
    format!(
        "Every system answers each record it completes with one reply (key: the session id, value: the record's event id) \
         to a reply topic of the run (12 partitions). orderly is the library with its default configuration and \
         `ConsumerConfig::reply_topic` (replies at-least-once: each written, acks=all and idempotent, before its record counts \
         as done), and in a second row `ConsumerConfig::exactly_once` too (replies and offsets in one transaction per commit \
         interval, 1 s by default). The Go peer produces its replies in franz-go's `GroupTransactSession`: once per commit \
         interval (1 s) it stops dispatching, waits for every dispatched record and its reply, and ends the transaction with \
         the polled offsets; tuned: `-fetch-max-wait 20ms` and the session channel as in the backlogs. Parallel Consumer \
         returns the reply from `pollAndProduce`, tuned: `{}` (the mode's own 100 ms commit interval) and \
         `--max-concurrency 1000`. After each run the reply topic is read back by Apache Kafka's console consumer with \
         `isolation.level=read_committed`, and the one reply check (`benches/src/replies.rs`) requires every record's reply \
         exactly once, in session order; a run that fails it is marked FAILED and counts for nothing. Per run: {}.",
        PC_TRANSACTIONAL_ARGS.join(" "),
        per.join("; ")
    )
}

/// Below an HTTP scenario's table: per system, what the endpoint saw (records per request,
/// answers 503, violations from its side) and, in a backlog, the batched orderly row's rate
/// against each.
pub fn http_details(results: &Results, live: bool) -> String {
    let batched = results
        .get(&System::OrderlyHttpBatch)
        .and_then(|r| med(r, |v| v.rate));
    let rows: Vec<String> = results
        .iter()
        .map(|(sys, runs)| {
            let reports: Vec<&HttpReport> = runs.iter().filter_map(|r| r.http.as_ref()).collect();
            let per = median(reports.iter().map(|h| h.per_request()).collect());
            let sum = |f: fn(&HttpReport) -> u64| reports.iter().map(|h| f(h)).sum::<u64>();
            let vs = match (batched, med(runs, |v| v.rate)) {
                (Some(b), Some(r)) if !live && *sys != System::OrderlyHttpBatch => {
                    format!("; orderly batched ÷ it {:.1}×", b / r)
                }
                _ => String::new(),
            };
            let lat = if live {
                String::new()
            } else {
                let p = |f: fn(&HttpReport) -> f64| {
                    median(reports.iter().map(|h| f(h)).collect())
                        .map_or("–".into(), |v| format!("{v:.0}"))
                };
                format!(
                    ", CreateTime → done p50 {} ms p99 {} ms (median; the backlog's wait included)",
                    p(|h| h.latency_p50_ms),
                    p(|h| h.latency_p99_ms)
                )
            };
            format!(
                "{}: {} records per request (median){lat}, {} requests ({} of several records), {} answered 503, endpoint-side violations {} in flight / {} out of sequence / {} mixed batches, {} records done again{vs}",
                sys.label(),
                per.map_or("–".into(), |p| format!("{p:.2}")),
                group_digits(sum(|h| h.requests)),
                group_digits(sum(|h| h.batches)),
                group_digits(sum(|h| h.transient)),
                sum(|h| h.violations_in_flight),
                sum(|h| h.violations_sequence),
                sum(|h| h.violations_batch),
                sum(|h| h.duplicates),
            )
        })
        .collect();
    format!("What the endpoint saw (all runs): {}.", rows.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::RunResult;
    use orderly_benches::verify::Verdict;

    /// The lines under an HTTP table: records per request, the endpoint's violations, and the
    /// batched row's rate against each other row in a backlog.
    #[test]
    fn http_details_name_requests_violations_and_the_batched_ratio() {
        let run = |rate: f64, requests: u64, sent: u64, in_flight: u64| RunResult {
            verdict: Some(Verdict {
                rate,
                ..Verdict::default()
            }),
            error: None,
            achieved_rate: None,
            load_ack_p99_ms: None,
            http: Some(HttpReport {
                requests,
                records_sent: sent,
                violations_in_flight: in_flight,
                ..HttpReport::default()
            }),
            replies: None,
        };
        let mut res = Results::new();
        res.insert(System::OrderlyHttp, vec![run(10_000.0, 1_000, 1_000, 0)]);
        res.insert(System::OrderlyHttpBatch, vec![run(40_000.0, 100, 1_000, 0)]);
        res.insert(System::PcVertx, vec![run(2_000.0, 1_000, 1_000, 2)]);
        assert!(
            !res[&System::PcVertx][0].ok(),
            "an endpoint-side violation fails the run"
        );
        let text = http_details(&res, false);
        assert!(
            text.contains("--http-batch-max 64: 10.00 records per request"),
            "{text}"
        );
        assert!(
            text.contains("defaults: 1.00 records per request"),
            "{text}"
        );
        assert!(text.contains("violations 2 in flight"), "{text}");
        assert!(text.contains("orderly batched ÷ it 4.0×"), "{text}");
        assert!(
            !text.contains("20.0×"),
            "a failed run has no rate to compare: {text}"
        );
        assert!(
            !http_details(&res, true).contains("÷"),
            "no rate ratio in a live run"
        );
    }
}
