//! The handler log every system writes, and the one verifier shared by all of them.
//!
//! # The log
//!
//! Text, one line per successful handler completion, in completion order (a session's lines are in
//! the order its records completed):
//!
//! ```text
//! # system=orderly first_us=1764582000000000 end_us=1764582001000000 rss_kib=51234
//! s-000042 17 e-1234 2 1764581999000 1764582000123456
//! ```
//!
//! The header names the system, when the first record was handed to a handler (`first_us`), when
//! the run ended after its final commit (`end_us`), and the peak resident memory (`rss_kib`, the
//! `VmHWM` of `/proc/self/status`). Each line is: session key, `seq`, `event-id`, the attempt that
//! succeeded (1 = first try), the record's CreateTime (ms) and the completion time (µs since the
//! epoch).
//!
//! # What is checked
//!
//! Against the workload ([`crate::workload`]): every `(session, seq)` expected is seen (else
//! **lost**), at most once (else **duplicates**), the `event-id` matches the workload's, no `seq`
//! is seen for the first time after a higher `seq` of its session completed (else an **ordering
//! violation**), and the failure injection was applied (a record of the failing bucket succeeded
//! on attempt ≥ 2, every other record on attempt 1). A run with a violation, a loss or a wrong
//! attempt count fails.

use std::collections::HashMap;
use std::io::{BufRead, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};

use crate::workload;

/// One line of the handler log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// Session key.
    pub session: String,
    /// The record's `seq` header.
    pub seq: u64,
    /// The record's `event-id` header.
    pub event_id: String,
    /// The attempt that succeeded (1 = first try).
    pub attempt: u32,
    /// The record's CreateTime, ms since the epoch.
    pub create_ms: i64,
    /// When the handler completed, µs since the epoch.
    pub done_us: i64,
}

/// The header of a handler log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogHeader {
    /// Which system wrote it.
    pub system: String,
    /// When the first record was handed to a handler, µs since the epoch.
    pub first_us: i64,
    /// When the run ended (after its final commit), µs since the epoch.
    pub end_us: i64,
    /// Peak resident memory of the process, KiB.
    pub rss_kib: u64,
}

/// Microseconds since the epoch, now.
pub fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Peak resident memory of this process (`VmHWM`), KiB; 0 where /proc is missing.
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Writes a handler log.
pub fn write_log(path: &Path, header: &LogHeader, lines: &[Completion]) -> Result<()> {
    let f = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = BufWriter::new(f);
    writeln!(
        w,
        "# system={} first_us={} end_us={} rss_kib={}",
        header.system, header.first_us, header.end_us, header.rss_kib
    )?;
    for c in lines {
        writeln!(
            w,
            "{} {} {} {} {} {}",
            c.session, c.seq, c.event_id, c.attempt, c.create_ms, c.done_us
        )?;
    }
    w.flush()?;
    Ok(())
}

/// Reads a handler log.
pub fn read_log(path: &Path) -> Result<(LogHeader, Vec<Completion>)> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut header = LogHeader::default();
    let mut lines = Vec::new();
    for (n, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line?;
        if let Some(h) = line.strip_prefix('#') {
            for kv in h.split_whitespace() {
                let Some((k, v)) = kv.split_once('=') else {
                    continue;
                };
                match k {
                    "system" => header.system = v.to_owned(),
                    "first_us" => header.first_us = v.parse().unwrap_or(0),
                    "end_us" => header.end_us = v.parse().unwrap_or(0),
                    "rss_kib" => header.rss_kib = v.parse().unwrap_or(0),
                    _ => {}
                }
            }
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 6 {
            bail!("{}:{}: expected 6 fields: {line:?}", path.display(), n + 1);
        }
        let num = |i: usize| -> Result<i64> {
            f[i].parse()
                .with_context(|| format!("{}:{}: field {}", path.display(), n + 1, i + 1))
        };
        lines.push(Completion {
            session: f[0].to_owned(),
            seq: num(1)? as u64,
            event_id: f[2].to_owned(),
            attempt: num(3)? as u32,
            create_ms: num(4)?,
            done_us: num(5)?,
        });
    }
    Ok((header, lines))
}

/// What a run was supposed to process.
#[derive(Debug, Clone, Copy)]
pub struct Expected {
    /// Records produced.
    pub records: u64,
    /// Sessions they were spread over, round robin.
    pub sessions: u64,
    /// The failure-injection modulus (0 = no failures).
    pub fail_mod: u64,
    /// Records created before `first_us + warmup` are left out of the latency figures.
    pub warmup: Duration,
}

/// The verifier's findings for one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    /// Distinct expected records seen.
    pub seen: u64,
    /// Expected records never seen.
    pub lost: u64,
    /// Completions of a record already seen.
    pub duplicates: u64,
    /// First completions of a `seq` after a higher `seq` of the same session.
    pub violations: u64,
    /// Completions whose event id, session or attempt number do not match the workload.
    pub mismatches: u64,
    /// Successes after a retry.
    pub retried: u64,
    /// Seconds from the first record handed to a handler to the end of the run.
    pub seconds: f64,
    /// Records per second over `seconds`.
    pub rate: f64,
    /// Latency (completion − CreateTime) percentiles in ms: p50, p99, p99.9, max.
    pub latency_ms: [f64; 4],
    /// Peak resident memory, KiB.
    pub rss_kib: u64,
}

impl Verdict {
    /// True if nothing was lost, nothing reordered and the injection was applied as specified.
    pub fn ok(&self) -> bool {
        self.lost == 0 && self.violations == 0 && self.mismatches == 0
    }
}

/// The `p`-th percentile (0..=100) of sorted values.
pub fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let idx = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Checks one run's log against what was produced.
pub fn verify(header: &LogHeader, lines: &[Completion], exp: &Expected) -> Verdict {
    let mut v = Verdict {
        rss_kib: header.rss_kib,
        ..Verdict::default()
    };
    let sessions = exp.sessions.max(1);
    // Per session: the highest seq completed, and which seqs were seen.
    let mut state: HashMap<&str, (u64, Vec<bool>)> = HashMap::new();
    let mut lat = Vec::with_capacity(lines.len());
    let warm_until_ms = (header.first_us + exp.warmup.as_micros() as i64) / 1000;
    for c in lines {
        let s_idx = c
            .session
            .strip_prefix("s-")
            .and_then(|n| n.parse::<u64>().ok());
        let Some(s_idx) = s_idx.filter(|s| *s < sessions) else {
            v.mismatches += 1;
            continue;
        };
        let n = workload::records_of_session(exp.records, sessions, s_idx);
        if c.seq == 0 || c.seq > n {
            v.mismatches += 1;
            continue;
        }
        let i = (c.seq - 1) * sessions + s_idx;
        if c.event_id != format!("e-{i}") {
            v.mismatches += 1;
        }
        let fails = workload::fails_first_attempt(c.event_id.as_bytes(), exp.fail_mod);
        if (fails && c.attempt < 2) || (!fails && c.attempt != 1) {
            v.mismatches += 1;
        }
        if c.attempt > 1 {
            v.retried += 1;
        }
        let (max, seen) = state
            .entry(c.session.as_str())
            .or_insert_with(|| (0, vec![false; n as usize]));
        let slot = &mut seen[(c.seq - 1) as usize];
        if *slot {
            v.duplicates += 1;
            continue;
        }
        *slot = true;
        v.seen += 1;
        if c.seq < *max {
            v.violations += 1;
        }
        *max = (*max).max(c.seq);
        if c.create_ms >= warm_until_ms {
            lat.push(c.done_us - c.create_ms * 1000);
        }
    }
    v.lost = exp.records.saturating_sub(v.seen);
    lat.sort_unstable();
    let ms = |p: f64| percentile(&lat, p) as f64 / 1000.0;
    v.latency_ms = [
        ms(50.0),
        ms(99.0),
        ms(99.9),
        lat.last().copied().unwrap_or(0) as f64 / 1000.0,
    ];
    v.seconds = (header.end_us - header.first_us).max(1) as f64 / 1e6;
    v.rate = v.seen as f64 / v.seconds;
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(records: u64, sessions: u64, fail_mod: u64) -> Vec<Completion> {
        let mut out = Vec::new();
        for i in 0..records {
            let s = i % sessions;
            let id = format!("e-{i}");
            let attempt = if workload::fails_first_attempt(id.as_bytes(), fail_mod) {
                2
            } else {
                1
            };
            out.push(Completion {
                session: workload::session_key(s as usize),
                seq: i / sessions + 1,
                event_id: id,
                attempt,
                create_ms: 1_000,
                done_us: 1_000_000 + i as i64,
            });
        }
        out
    }

    fn exp(records: u64, sessions: u64) -> Expected {
        Expected {
            records,
            sessions,
            fail_mod: 10,
            warmup: Duration::ZERO,
        }
    }

    fn header() -> LogHeader {
        LogHeader {
            system: "t".into(),
            first_us: 1_000_000,
            end_us: 2_000_000,
            rss_kib: 1,
        }
    }

    #[test]
    fn a_clean_run_passes() {
        let v = verify(&header(), &run(1000, 7, 10), &exp(1000, 7));
        assert!(v.ok(), "{v:?}");
        assert_eq!(
            (v.seen, v.lost, v.duplicates, v.violations),
            (1000, 0, 0, 0)
        );
        assert!(v.retried > 50 && v.retried < 150, "{}", v.retried);
        assert!((v.rate - 1000.0).abs() < 1e-6);
    }

    #[test]
    fn loss_reorder_duplicate_and_skipped_injection_are_caught() {
        let mut l = run(1000, 7, 10);
        l.remove(500);
        let v = verify(&header(), &l, &exp(1000, 7));
        assert_eq!(v.lost, 1);
        assert!(!v.ok());

        let mut l = run(1000, 7, 10);
        l.swap(10, 17); // two records of session 3, completed in the wrong order
        let v = verify(&header(), &l, &exp(1000, 7));
        assert_eq!(v.violations, 1);
        assert!(!v.ok());

        let mut l = run(1000, 7, 10);
        l.push(l[3].clone());
        let v = verify(&header(), &l, &exp(1000, 7));
        assert_eq!((v.duplicates, v.violations), (1, 0));
        assert!(v.ok(), "a replay is a duplicate, not a violation");

        let mut l = run(1000, 7, 10);
        let i = l.iter().position(|c| c.attempt == 2).unwrap_or(0);
        l[i].attempt = 1;
        let v = verify(&header(), &l, &exp(1000, 7));
        assert_eq!(v.mismatches, 1);
        assert!(!v.ok());
    }

    #[test]
    fn the_log_round_trips() {
        let dir = std::env::temp_dir().join(format!("orderly-verify-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("log.txt");
        let lines = run(100, 3, 10);
        write_log(&path, &header(), &lines).unwrap_or_default();
        let (h, back) = read_log(&path).unwrap_or_default();
        assert_eq!(h, header());
        assert_eq!(back, lines);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
