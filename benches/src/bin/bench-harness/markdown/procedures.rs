//! The sections of the scenarios with a procedure of their own: S2-max's searches, S4's runs with
//! and without the stalled session, S6's crash runs.

use std::fmt::Write as _;

use orderly_benches::verify::Verdict;
use orderly_benches::workload;

use super::figures::{fmt_rate, group_digits};
use crate::crash::CrashResult;
use crate::max::{MaxSearch, S2MAX_START};
use crate::outcome::{RunResult, StallRows, describe, med};
use crate::scenario::{STALL, Scenario};
use crate::system::System;

/// The seed's own S2 figure: p99 above 200 ms at this rate (records/s).
const SEED_RATE: f64 = 48_805.0;

/// Writes S2-max's section: each system's search step by step, and what limited it.
pub fn write_s2max(md: &mut String, sc: &Scenario, searches: &[(System, MaxSearch)]) {
    let secs = sc.seconds;
    let _ = writeln!(
        md,
        "### S2-max: the highest offered rate with p99 ≤ 200 ms\n\n\
         1,000 sessions, 12 partitions, no failures. Each system's search starts at {} records/s, doubles the rate while a step \
         holds and then bisects between the highest rate held and the lowest not held (to within 10 %); a step offers the rate \
         for {secs} s on a topic of its own (the first second is warm-up) and holds when the run verifies, p99 ≤ 200 ms, and the \
         load generator achieved ≥ 95 % of the rate. The systems' searches are interleaved step by step. Each step also shows the \
         load generator's own p99 from CreateTime to the broker's acknowledgement (producer, ms), the part of every system's \
         latency that is the broker's; a step that failed while that alone was over 200 ms is offered once more (the first try \
         is shown in brackets).\n",
        group_digits(S2MAX_START)
    );
    let _ = writeln!(
        md,
        "| system | max rate held (records/s) | ÷ the seed's 48,805 | steps (offered → achieved: p99 ms (producer p99 ms), held?) | limited by |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|");
    for (sys, search) in searches {
        let steps: Vec<String> = search
            .steps
            .iter()
            .map(|st| {
                let p99 = |r: &RunResult| match (&r.verdict, r.ok()) {
                    (Some(v), true) => format!("{:.0}", v.latency_ms[1]),
                    _ => "failed".into(),
                };
                let ack = |r: &RunResult| {
                    r.load_ack_p99_ms
                        .map_or(String::new(), |a| format!(" (producer {a:.0})"))
                };
                format!(
                    "{}{} → {}: {}{}{}",
                    st.retried.as_ref().map_or(String::new(), |r| format!(
                        "[first try: {}{}, again] ",
                        p99(r),
                        ack(r)
                    )),
                    group_digits(st.offered),
                    fmt_rate(st.result.achieved_rate),
                    p99(&st.result),
                    ack(&st.result),
                    if st.held { " ✓" } else { " ✗" }
                )
            })
            .collect();
        let limited = if let Some(cap) = search.generator_cap() {
            format!(
                "the load generator (it achieved at most {} records/s where it fell short)",
                fmt_rate(Some(cap))
            )
        } else if search.hi.is_some() {
            "the system's p99 (or it fell behind)".into()
        } else {
            "the step budget".into()
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {limited} |",
            sys.label(),
            search.lo.map_or_else(
                || {
                    let lowest = search.steps.iter().map(|s| s.offered).min().unwrap_or(0);
                    format!("none (< {})", group_digits(lowest))
                },
                group_digits
            ),
            search
                .lo
                .map_or("–".into(), |l| format!("{:.2}×", l as f64 / SEED_RATE)),
            steps.join("; ")
        );
    }
    md.push('\n');
}

/// Writes S4's section: each system's latency of the other sessions without and with the stall.
pub fn write_s4(md: &mut String, sc: &Scenario, rows: &StallRows) {
    let _ = writeln!(
        md,
        "### S4: slow-session isolation\n\n\
         {} records, 1,000 sessions, 12 partitions, offered at {} records/s for {} s, 1 % transient. Each system runs twice, \
         interleaved: once as is, once with session `{}` failing on every attempt from {} s after its first record for {} s \
         (then it recovers; its records are retried with the shared policy). The latency figures are of the *other* 999 sessions \
         in both runs; the rate is one Parallel Consumer holds on this machine (it falls seconds behind at S2's 50,000).\n",
        group_digits(sc.records),
        group_digits(sc.rate),
        sc.seconds,
        workload::session_key(STALL.0 as usize),
        STALL.1 / 1000,
        STALL.2 / 1000
    );
    let _ = writeln!(
        md,
        "| system | others' p99 ms without / with the stall | ratio | others' p50 ms without / with | stalled session: max latency ms | lost / dup / violations | verdict |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    for (sys, runs) in rows {
        let base: Vec<RunResult> = runs.iter().map(|(b, _)| b.clone()).collect();
        let st: Vec<RunResult> = runs.iter().map(|(_, s)| s.clone()).collect();
        let p = |r: &[RunResult], i: usize| med(r, |v| v.latency_ms[i]);
        let f = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.1}"));
        let ratio = match (p(&base, 1), p(&st, 1)) {
            (Some(b), Some(s)) if b > 0.0 => format!("{:.2}×", s / b),
            _ => "–".into(),
        };
        let all: Vec<&RunResult> = base.iter().chain(st.iter()).collect();
        let sum = |g: fn(&Verdict) -> u64| {
            all.iter()
                .filter_map(|r| r.verdict.as_ref())
                .map(g)
                .sum::<u64>()
        };
        let verdict = if all.iter().all(|r| r.ok()) {
            "ok".to_string()
        } else {
            let why: Vec<String> = all
                .iter()
                .filter(|r| !r.ok())
                .map(|r| describe(r))
                .collect();
            format!("FAILED: {}", why.join("; ").replace('|', "/"))
        };
        let _ = writeln!(
            md,
            "| {} | {} / {} | {ratio} | {} / {} | {} | {} / {} / {} | {verdict} |",
            sys.label(),
            f(p(&base, 1)),
            f(p(&st, 1)),
            f(p(&base, 0)),
            f(p(&st, 0)),
            f(med(&st, |v| v.stalled_latency_ms[3])),
            sum(|v| v.lost),
            sum(|v| v.duplicates),
            sum(|v| v.violations),
        );
    }
    md.push('\n');
}

/// Writes S6's section: each system's crashes, losses, violations and duplicates.
pub fn write_s6(md: &mut String, sc: &Scenario, rows: &[(System, CrashResult)]) {
    let _ = writeln!(
        md,
        "### S6: crash and rebalance\n\n\
         {} records, 1,000 sessions, 12 partitions, offered at {} records/s for {} s, 1 % transient. Three processes of each \
         system in one group (session timeout 10 s and heartbeat 3 s for every system); every 10 s of the load one of them is killed with SIGKILL \
         and started again at once. Every process writes each completion with its own `write` before its handler returns, so \
         a killed process loses no completion it acknowledged. The merged logs are verified: a record completed again \
         (a replay above the committed watermark, after a crash or a rebalance) is a duplicate, allowed and counted; a record \
         never completed is lost; a first completion after a later `seq` of its session is a violation.\n",
        group_digits(sc.records),
        group_digits(sc.rate),
        sc.seconds
    );
    let _ = writeln!(
        md,
        "| system | crashes | lost | violations | duplicates | duplicates per crash | p99 ms (incl. failover) | verdict |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    for (sys, r) in rows {
        let v = r.result.verdict.as_ref();
        let g = |f: fn(&Verdict) -> u64| v.map_or("–".into(), |v| group_digits(f(v)));
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            sys.label(),
            r.crashes,
            g(|v| v.lost),
            g(|v| v.violations),
            g(|v| v.duplicates),
            v.map_or("–".into(), |v| format!(
                "{:.0}",
                v.duplicates as f64 / r.crashes.max(1) as f64
            )),
            v.map_or("–".into(), |v| format!("{:.0}", v.latency_ms[1])),
            if r.result.ok() {
                "ok".to_string()
            } else {
                format!("FAILED: {}", describe(&r.result).replace('|', "/"))
            }
        );
    }
    md.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::max::tests::step;
    use crate::scenario::Kind;

    /// The report shows a re-offered step's first try and the producer's p99 of each.
    #[test]
    fn s2_max_reports_a_reoffered_steps_first_try() {
        let mut first = step(80_000, false);
        first.result.load_ack_p99_ms = Some(366.0);
        let mut again = step(80_000, true);
        again.result.load_ack_p99_ms = Some(68.0);
        again.retried = Some(Box::new(first.result));
        let mut search = MaxSearch::new(80_000);
        search.record(again, 1);
        let sc = Scenario {
            id: "S2-max".into(),
            what: String::new(),
            records: 0,
            sessions: 1_000,
            partitions: 12,
            fail_mod: 0,
            work_us: 0,
            rate: 0,
            seconds: 4.0,
            systems: vec![System::Orderly],
            kind: Kind::Max,
            limit_s: 10.0,
            full_reps: 1,
            raw_fetch: false,
            memory_per_session: false,
            in_quick_form: false,
        };
        let mut md = String::new();
        write_s2max(&mut md, &sc, &[(System::Orderly, search)]);
        assert!(
            md.contains(
                "[first try: failed (producer 366), again] 80,000 → 80,000: failed (producer 68) ✓"
            ),
            "{md}"
        );
    }
}
