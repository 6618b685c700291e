//! One scenario's section of the report: its table, the paragraphs below it, and the figures its
//! charts take.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use orderly_benches::svg::{self, Series};
use orderly_benches::verify::Verdict;

use super::details::{floor_report, http_details, reply_details};
use super::figures::{fmt_rate, group_digits};
use crate::endpoint::HTTP_TRANSIENT_PCT;
use crate::outcome::{Results, RunResult, describe, med, median};
use crate::product::product_ratio;
use crate::raw_fetch::RawFetch;
use crate::scenario::{Kind, Scenario};
use crate::system::{GO_TUNED_ARGS, ORDERLY_BATCH_ARGS, PC_VERTX_TUNED_ARGS, Suite, System};

/// A backlog chart: its scenarios, and each system's median rate in each.
type Chart = (Vec<String>, BTreeMap<System, Vec<Option<f64>>>);

/// The charts of a report, filled as its scenarios' sections are written.
#[derive(Default)]
pub struct Charts {
    /// Per suite: the backlog scenarios of its chart, and each system's median rate in each.
    by_suite: BTreeMap<Suite, Chart>,
    /// The S3 curve: per system (and raw fetch), its median rate at each work level.
    s3_points: BTreeMap<String, Vec<Option<f64>>>,
    /// The S3 curve's work levels.
    s3_labels: Vec<String>,
    /// Each live scenario's latency chart: its file name and its SVG.
    latency: Vec<(String, String)>,
}

/// Writes scenario `sc`'s section to `md`: a table of every run of every system, the paragraphs
/// its kind adds, and its figures into `charts` (a backlog chart has a series for each of
/// `systems`, the harness run's systems of its suite).
pub fn write_scenario(
    md: &mut String,
    systems: &[System],
    sc: &Scenario,
    results: &Results,
    raw: &[RawFetch],
    charts: &mut Charts,
) {
    let live = sc.rate > 0;
    // A table may follow its heading directly; a paragraph under a table needs a blank line.
    let _ = writeln!(md, "### {}: {}", sc.id, sc.what);
    // What ran, the retry policy's floor and the product's ratio: one paragraph under the table.
    let mut under = format!(
        "{} records, {} sessions, {} partition(s){}{}; {} run(s) per system.",
        group_digits(sc.records),
        group_digits(sc.sessions),
        sc.partitions,
        if live {
            format!(
                ", offered at {} records/s for {} s",
                group_digits(sc.rate),
                sc.seconds
            )
        } else {
            ", backlog".into()
        },
        if sc.work_us > 0 {
            format!(", {} µs of handler work (a sleep)", sc.work_us)
        } else {
            String::new()
        },
        results.values().map(Vec::len).max().unwrap_or(0)
    );
    let http = sc.kind == Kind::Http;
    let reference = sc.kind.suite().reference();
    let orderly_rate = results.get(&reference).and_then(|r| med(r, |v| v.rate));
    if http {
        let _ = writeln!(
            md,
            "Every system posts each record to one shared endpoint, `bench-http-server` (hyper, one thread, HTTP/1.1 keep-alive), \
             which answers 503 to a record's first attempt when `fnv1a64(event-id) % 100 < {HTTP_TRANSIENT_PCT}` and 200 otherwise \
             (a batch: 200 with `{{\"done\": N}}` up to its first failing record), and judges the run from its side: a request of a \
             session while another of it is in flight, or a record done out of sequence, is a violation; throughput is records ÷ \
             (its first request → its answer to the last record), latency each record's CreateTime → its done answer (in a backlog, \
             mostly time spent waiting). Every system retries with the shared policy. orderly is the product binary \
             (`orderly consume --http URL`, default flags but the shared retry policy; batched: `{}`), the Go peer posts with one \
             shared `net/http` client (keep-alive, `MaxIdleConnsPerHost` 1024), tuned: `{}`; Parallel Consumer's Vert.x module posts \
             with its WebClient and a 5xx fails the call, so it is retried; tuned: `{}` (its default is 16).\n",
            ORDERLY_BATCH_ARGS.join(" "),
            GO_TUNED_ARGS.join(" "),
            PC_VERTX_TUNED_ARGS.join(" ")
        );
    }
    if live {
        let _ = writeln!(
            md,
            "| system | runs (p50 / p99 / p99.9 ms) | median p50 ms | median p99 ms | median p99.9 ms | load achieved records/s | producer p99 ms (its runs) | lost / dup / violations | verdict |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
    } else {
        let _ = writeln!(
            md,
            "| system | runs (records/s) | median records/s | orderly ÷ system | CPU µs per record | peak RSS MiB | lost / dup / violations | verdict |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    }
    for (sys, runs) in results {
        let each: Vec<String> = runs
            .iter()
            .map(|r| match (&r.verdict, r.ok()) {
                (Some(v), true) if live => format!(
                    "{:.1} / {:.1} / {:.1}",
                    v.latency_ms[0], v.latency_ms[1], v.latency_ms[2]
                ),
                (Some(v), true) => group_digits(v.rate.round() as u64),
                _ => "FAILED".into(),
            })
            .collect();
        let bad = |f: fn(&Verdict) -> u64| {
            runs.iter()
                .filter_map(|r| r.verdict.as_ref())
                .map(f)
                .sum::<u64>()
        };
        let all_ok = runs.iter().all(RunResult::ok);
        let verdict = if all_ok {
            "ok".to_string()
        } else {
            let why: Vec<String> = runs.iter().filter(|r| !r.ok()).map(describe).collect();
            format!("FAILED: {}", why.join("; ").replace('|', "/"))
        };
        let loss = format!(
            "{} / {} / {}",
            bad(|v| v.lost),
            bad(|v| v.duplicates),
            bad(|v| v.violations)
        );
        if live {
            let ach = median(runs.iter().filter_map(|r| r.achieved_rate).collect());
            // The load generator's own CreateTime → acknowledged p99 during each of this
            // system's runs: the broker's share, which no consumer can undercut.
            let acks: Vec<String> = runs
                .iter()
                .map(|r| r.load_ack_p99_ms.map_or("–".into(), |a| format!("{a:.1}")))
                .collect();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {loss} | {verdict} |",
                sys.label(),
                each.join(", "),
                med(runs, |v| v.latency_ms[0]).map_or("–".into(), |v| format!("{v:.1}")),
                med(runs, |v| v.latency_ms[1]).map_or("–".into(), |v| format!("{v:.1}")),
                med(runs, |v| v.latency_ms[2]).map_or("–".into(), |v| format!("{v:.1}")),
                fmt_rate(ach),
                acks.join(", "),
            );
        } else {
            let rate = med(runs, |v| v.rate);
            let ratio = match (orderly_rate, rate) {
                (Some(o), Some(r)) if *sys != reference => format!("{:.1}×", o / r),
                _ => "–".into(),
            };
            let rss = med(runs, |v| v.rss_kib as f64 / 1024.0)
                .map_or("–".into(), |v| format!("{v:.0}"));
            // The process's own CPU clock from its first record to its end, every thread.
            let cpu = runs
                .iter()
                .filter(|r| r.ok())
                .filter_map(|r| r.verdict.as_ref()?.cpu_us_per_record)
                .collect::<Vec<_>>();
            let cpu = median(cpu).map_or("–".into(), |c| format!("{c:.2}"));
            let _ = writeln!(
                md,
                "| {} | {} | {} | {ratio} | {cpu} | {rss} | {loss} | {verdict} |",
                sys.label(),
                each.join(", "),
                fmt_rate(rate)
            );
        }
    }
    if let Some(floor) = floor_report(sc, results) {
        let _ = write!(under, " {floor}");
    }
    if let Some(r) = product_ratio(results) {
        let _ = write!(
            under,
            " The product binary against the library in this run: `orderly run` (default flags) ÷ `bench-orderly` (the \
             library's default configuration), medians of interleaved runs: **{:.0} %**.",
            r * 100.0
        );
    }
    let _ = writeln!(md, "\n{under}");
    if http {
        let _ = writeln!(md, "\n{}", http_details(results, live));
    }
    if sc.kind == Kind::Reply {
        let _ = writeln!(md, "\n{}", reply_details(results));
    }
    if sc.memory_per_session {
        let per: Vec<String> = results
            .iter()
            .map(|(sys, runs)| {
                let kib = runs
                    .iter()
                    .filter_map(|r| r.verdict.as_ref())
                    .map(|v| v.rss_kib)
                    .max()
                    .unwrap_or(0);
                format!(
                    "{} {} MiB = {} bytes per session{}",
                    sys.label(),
                    group_digits(kib / 1024),
                    group_digits(kib * 1024 / sc.sessions.max(1)),
                    if runs.iter().all(RunResult::ok) {
                        ""
                    } else {
                        " (run not finished: peak so far)"
                    }
                )
            })
            .collect();
        let _ = writeln!(
            md,
            "\nPeak RSS (the process's `VmHWM`, sampled by the harness every 200 ms and reported by the process) ÷ {} sessions, \
             everything included (runtime, fetch buffers, records in flight; every handler log is streamed to a file, none is \
             kept in memory): {}. A run is bounded to {} s.",
            group_digits(sc.sessions),
            per.join("; "),
            sc.limit_s
        );
    }
    if !raw.is_empty() {
        let of = median(raw.iter().filter_map(|r| r.orderly_fetch).collect());
        let cf = median(raw.iter().filter_map(|r| r.consumer_perf_fetch).collect());
        let ct = median(raw.iter().filter_map(|r| r.consumer_perf_total).collect());
        let _ = writeln!(
            md,
            "\nRaw fetch limit on the same topic (no handler, no engine), median: orderly's fetch loop {} records/s; Apache Kafka's \
             ConsumerPerformance {} records/s (fetch phase; {} with the group join). orderly end to end ÷ its raw fetch: {}.",
            fmt_rate(of),
            fmt_rate(cf),
            fmt_rate(ct),
            match (orderly_rate, of) {
                (Some(o), Some(f)) => format!("{:.0} %", o / f * 100.0),
                _ => "–".into(),
            }
        );
        let label = format!("{} µs", sc.work_us);
        charts.s3_labels.push(label);
        for sys in &sc.systems {
            charts
                .s3_points
                .entry(sys.label().to_string())
                .or_default()
                .push(results.get(sys).and_then(|r| med(r, |v| v.rate)));
        }
        if sc.work_us == 0 {
            charts
                .s3_points
                .entry("raw fetch (orderly loop)".into())
                .or_default()
                .push(of);
            charts
                .s3_points
                .entry("ConsumerPerformance".into())
                .or_default()
                .push(cf);
        }
    }
    md.push('\n');
    if !live {
        let suite = sc.kind.suite();
        let (cats, series) = charts.by_suite.entry(suite).or_default();
        cats.push(sc.id.clone());
        for sys in systems.iter().filter(|s| s.suite() == suite) {
            series
                .entry(*sys)
                .or_default()
                .push(results.get(sys).and_then(|r| med(r, |v| v.rate)));
        }
    } else {
        let cats = vec!["p50".to_string(), "p99".to_string(), "p99.9".to_string()];
        let series: Vec<Series> = results
            .iter()
            .map(|(sys, runs)| Series {
                name: sys.label().into(),
                values: (0..3).map(|i| med(runs, |v| v.latency_ms[i])).collect(),
            })
            .collect();
        let file = format!("latency-{}.svg", sc.id.to_lowercase());
        charts.latency.push((
            file.clone(),
            svg::bars(
                &format!("{}: latency percentiles", sc.id),
                "ms",
                &cats,
                &series,
            ),
        ));
        let _ = writeln!(md, "![{} latency](benches/results/{file})\n", sc.id);
    }
}

impl Charts {
    /// Writes every chart's file to `dir`, and to `md` the image line of each backlog chart and
    /// of the S3 curve (a live scenario's section has its own).
    pub fn write(self, md: &mut String, dir: &Path) -> Result<()> {
        for (suite, (cats, values)) in &self.by_suite {
            let [file, title, alt] = suite.chart();
            let series: Vec<Series> = values
                .iter()
                .map(|(sys, values)| Series {
                    name: sys.label().into(),
                    values: values.clone(),
                })
                .collect();
            std::fs::write(dir.join(file), svg::bars(title, "records/s", cats, &series))?;
            let _ = writeln!(md, "![{alt}](benches/results/{file})\n");
        }
        if !self.s3_labels.is_empty() {
            let series: Vec<Series> = self
                .s3_points
                .into_iter()
                .map(|(name, values)| Series { name, values })
                .collect();
            std::fs::write(
                dir.join("s3-curve.svg"),
                svg::lines(
                    "S3: saturation by handler work",
                    "records/s",
                    &self.s3_labels,
                    &series,
                ),
            )?;
            let _ = writeln!(md, "![S3 curve](benches/results/s3-curve.svg)\n");
        }
        for (file, body) in self.latency {
            std::fs::write(dir.join(file), body)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scenario's section: its heading, the table straight under it, then one paragraph with
    /// what ran and the product binary's ratio to the library.
    #[test]
    fn a_scenario_is_its_heading_its_table_and_one_paragraph() {
        let run = |rate: f64| RunResult {
            verdict: Some(Verdict {
                rate,
                seen: 1_000,
                ..Verdict::default()
            }),
            error: None,
            achieved_rate: None,
            load_ack_p99_ms: None,
            http: None,
            replies: None,
        };
        let sc = Scenario {
            id: "S1".into(),
            what: "backlog".into(),
            records: 1_000,
            sessions: 10,
            partitions: 12,
            fail_mod: 0,
            work_us: 0,
            rate: 0,
            seconds: 0.0,
            systems: vec![System::Orderly, System::OrderlyRun],
            kind: Kind::Plain,
            limit_s: 10.0,
            full_reps: 1,
            raw_fetch: false,
            memory_per_session: false,
            in_quick_form: false,
        };
        let mut res = Results::new();
        res.insert(System::Orderly, vec![run(100_000.0)]);
        res.insert(System::OrderlyRun, vec![run(95_000.0)]);
        let mut md = String::new();
        write_scenario(&mut md, &sc.systems, &sc, &res, &[], &mut Charts::default());
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines[0], "### S1: backlog", "{md}");
        assert!(lines[1].starts_with("| system |"), "{md}");
        let under: Vec<&&str> = lines[2..]
            .iter()
            .filter(|l| !l.is_empty() && !l.starts_with('|'))
            .collect();
        assert_eq!(under.len(), 1, "one paragraph under the table: {md}");
        assert!(
            under[0].starts_with("1,000 records, 10 sessions, 12 partition(s), backlog; 1 run(s)"),
            "{md}"
        );
        assert!(under[0].contains("**95 %**"), "{md}");
    }
}
