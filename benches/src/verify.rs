//! The handler log every system writes, and the one verifier shared by all of them.
//!
//! # The log
//!
//! Text, one line per successful handler completion, in completion order (a session's lines are in
//! the order its records completed), streamed to the file as the handler completes (no system keeps
//! the log in memory, so peak RSS is the system's own), and a `#` line, written at the end:
//!
//! ```text
//! s-000042 17 e-1234 2 1764581999000 1764582000123456
//! # system=orderly first_us=1764582000000000 end_us=1764582001000000 rss_kib=51234
//! ```
//!
//! A process killed with SIGKILL (scenario S6) leaves no `#` line; there every line is written
//! with its own `write` before the handler returns (`--log-flush`), so a completion the process
//! acknowledged is in the file. The `#` line names the system, when the first record was handed to a handler (`first_us`), when
//! the run ended after its final commit (`end_us`), and the peak resident memory (`rss_kib`, the
//! `VmHWM` of `/proc/self/status`); optionally the process's CPU time from the first record to
//! the end (`cpu_us`). Each line is: session key, `seq`, `event-id`, the attempt that
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
    /// The largest sum, over the sessions, of the retry backoffs drawn for one session's records,
    /// µs: the floor those draws alone put under the run, since a session waits out its backoffs
    /// one after another. Only systems that know their draws write it (orderly, from
    /// `Attempt::backoff`).
    pub drawn_floor_us: Option<i64>,
    /// CPU time of the whole process (every thread, user and system), µs, from the first record
    /// handed to a handler to the end of the run; written by the systems that read their own
    /// CPU clock (orderly, the Go peer, Parallel Consumer).
    pub cpu_us: Option<i64>,
}

impl LogHeader {
    /// The `#` line (without the newline).
    fn line(&self) -> String {
        let mut l = format!(
            "# system={} first_us={} end_us={} rss_kib={}",
            self.system, self.first_us, self.end_us, self.rss_kib
        );
        if let Some(f) = self.drawn_floor_us {
            l.push_str(&format!(" drawn_floor_us={f}"));
        }
        if let Some(c) = self.cpu_us {
            l.push_str(&format!(" cpu_us={c}"));
        }
        l
    }
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
    writeln!(w, "{}", header.line())?;
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
    let mut lines = Vec::new();
    let header = for_each_line(path, |c| lines.push(c))?;
    Ok((header, lines))
}

/// Streams a handler log: calls `f` with each completion in file order, returns the `#` line.
pub fn for_each_line(path: &Path, mut f: impl FnMut(Completion)) -> Result<LogHeader> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut header = LogHeader::default();
    let mut lines = std::io::BufReader::new(file).lines().enumerate().peekable();
    while let Some((n, line)) = lines.next() {
        let line = line?;
        // A process killed at a time limit may leave its last line half written (a buffered log
        // goes out in blocks); that line is no completion. Anywhere else it is an error.
        if lines.peek().is_none() && !line.starts_with('#') && line.split_whitespace().count() != 6
        {
            break;
        }
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
                    "drawn_floor_us" => header.drawn_floor_us = v.parse().ok(),
                    "cpu_us" => header.cpu_us = v.parse().ok(),
                    _ => {}
                }
            }
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() != 6 {
            bail!("{}:{}: expected 6 fields: {line:?}", path.display(), n + 1);
        }
        let num = |i: usize| -> Result<i64> {
            fields[i]
                .parse()
                .with_context(|| format!("{}:{}: field {}", path.display(), n + 1, i + 1))
        };
        f(Completion {
            session: fields[0].to_owned(),
            seq: num(1)? as u64,
            event_id: fields[2].to_owned(),
            attempt: num(3)? as u32,
            create_ms: num(4)?,
            done_us: num(5)?,
        });
    }
    Ok(header)
}

/// Streams a handler log to a file as completions come (what `bench-orderly` uses; the Go and
/// Java peers do the same): lines go through a buffer, or, with `flush_each`, each one with its
/// own `write` before the handler returns, so a SIGKILL loses no acknowledged completion.
pub struct LogWriter {
    out: std::sync::Mutex<std::io::BufWriter<std::fs::File>>,
    flush_each: bool,
}

impl LogWriter {
    /// Creates (truncates) the log file.
    pub fn create(path: &Path, flush_each: bool) -> Result<Self> {
        let f =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self {
            out: std::sync::Mutex::new(std::io::BufWriter::with_capacity(1 << 20, f)),
            flush_each,
        })
    }

    /// Writes one completion line (`session seq event-id attempt create_ms done_us`).
    pub fn line(
        &self,
        session: &[u8],
        seq: &[u8],
        event_id: &[u8],
        attempt: u32,
        create_ms: i64,
        done_us: i64,
    ) {
        // The line is formatted outside the lock, without `fmt` (three integers through `fmt`
        // cost as much as the rest of an S3 record's handling), into a per-thread buffer, and
        // written with one call under the lock.
        thread_local! {
            static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        LINE.with_borrow_mut(|buf| {
            buf.clear();
            for (i, part) in [session, seq, event_id].into_iter().enumerate() {
                if i > 0 {
                    buf.push(b' ');
                }
                buf.extend_from_slice(part);
            }
            for v in [i64::from(attempt), create_ms, done_us] {
                buf.push(b' ');
                push_decimal(buf, v);
            }
            buf.push(b'\n');
            let mut w = self
                .out
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let _ = w.write_all(buf);
            if self.flush_each {
                let _ = w.flush();
            }
        });
    }

    /// Writes the `#` line and flushes.
    pub fn finish(&self, header: &LogHeader) -> Result<()> {
        let mut w = self
            .out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        writeln!(w, "{}", header.line())?;
        w.flush()?;
        Ok(())
    }
}

/// Appends `v` in decimal, as `{v}` would.
fn push_decimal(buf: &mut Vec<u8>, v: i64) {
    buf.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// What a run was supposed to process.
#[derive(Debug, Clone, Copy, Default)]
pub struct Expected {
    /// Records produced.
    pub records: u64,
    /// Sessions they were spread over, round robin.
    pub sessions: u64,
    /// The failure-injection modulus (0 = no failures).
    pub fail_mod: u64,
    /// The HTTP scenarios' rule instead (their endpoint's): a record fails on its first attempt
    /// when `fnv1a64(event-id) % 100 < pct`; `fail_mod` is then not used.
    pub fail_pct: Option<u64>,
    /// Records created before `first_us + warmup` are left out of the latency figures.
    pub warmup: Duration,
    /// Scenario S4: this session's records fail on every attempt for a while, so any attempt
    /// number is right for them, and they are left out of the latency figures (reported apart).
    pub stalled_session: Option<u64>,
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
    /// How many completions `latency_ms` is taken over (records created after the warm-up; the
    /// stalled session's left out). Zero in a live run means the system was not handling records
    /// while the load ran, and its percentiles (all 0) mean nothing.
    pub latency_samples: u64,
    /// Peak resident memory, KiB.
    pub rss_kib: u64,
    /// Latency percentiles of the stalled session alone (S4): p50, p99, p99.9, max.
    pub stalled_latency_ms: [f64; 4],
    /// The header's `drawn_floor_us`, in seconds: the floor this run's drawn backoffs imposed.
    pub drawn_floor_s: Option<f64>,
    /// The header's `cpu_us` ÷ the records seen: the process's CPU per record, µs.
    pub cpu_us_per_record: Option<f64>,
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
    let mut v = Verifier::new(*exp);
    for c in lines {
        v.add(c);
    }
    v.finish(header)
}

/// Reads the handler logs of one run (one file per process; several for S6, where processes are
/// killed and restarted) and checks them. The lines of several files are merged by completion
/// time; a single file is streamed, never held in memory (S5 writes 5,000,000 lines). The header
/// returned has the earliest `first_us`, the latest `end_us` and the largest `rss_kib`, and the
/// `drawn_floor_us` of a single file only.
pub fn verify_files(paths: &[std::path::PathBuf], exp: &Expected) -> Result<(LogHeader, Verdict)> {
    let mut header = LogHeader::default();
    let mut merge = |h: LogHeader| {
        if header.system.is_empty() {
            header.system = h.system;
        }
        if h.first_us > 0 && (header.first_us == 0 || h.first_us < header.first_us) {
            header.first_us = h.first_us;
        }
        header.end_us = header.end_us.max(h.end_us);
        header.rss_kib = header.rss_kib.max(h.rss_kib);
        header.drawn_floor_us = h.drawn_floor_us;
        header.cpu_us = h.cpu_us;
    };
    let mut v = Verifier::new(*exp);
    if let [one] = paths {
        let h = for_each_line(one, |c| v.add(&c))?;
        merge(h);
    } else {
        let mut all = Vec::new();
        // A process started just before the check may not have created its log yet.
        for p in paths.iter().filter(|p| p.exists()) {
            let h = for_each_line(p, |c| all.push(c))?;
            merge(h);
        }
        all.sort_by_key(|c| c.done_us);
        for c in &all {
            v.add(c);
        }
        // Several processes (S6) each drew their own backoffs; no one floor covers the run, and
        // a process killed with SIGKILL reports no CPU.
        header.drawn_floor_us = None;
        header.cpu_us = None;
    }
    Ok((header.clone(), v.finish(&header)))
}

/// The verifier, fed one completion at a time in completion order.
pub struct Verifier {
    exp: Expected,
    v: Verdict,
    /// Per session index: the highest seq completed, and which seqs were seen.
    state: HashMap<u64, (u64, Vec<bool>)>,
    /// (CreateTime ms, latency µs) of every first completion, and of the stalled session's.
    lat: Vec<(i64, i64)>,
    stalled_lat: Vec<i64>,
}

impl Verifier {
    /// A verifier for a run that produced `exp`.
    pub fn new(exp: Expected) -> Self {
        Self {
            exp,
            v: Verdict::default(),
            state: HashMap::new(),
            lat: Vec::new(),
            stalled_lat: Vec::new(),
        }
    }

    /// Checks one completion.
    pub fn add(&mut self, c: &Completion) {
        let exp = &self.exp;
        let v = &mut self.v;
        let sessions = exp.sessions.max(1);
        let s_idx = c
            .session
            .strip_prefix("s-")
            .and_then(|n| n.parse::<u64>().ok());
        let Some(s_idx) = s_idx.filter(|s| *s < sessions) else {
            v.mismatches += 1;
            return;
        };
        let n = workload::records_of_session(exp.records, sessions, s_idx);
        if c.seq == 0 || c.seq > n {
            v.mismatches += 1;
            return;
        }
        let i = (c.seq - 1) * sessions + s_idx;
        if c.event_id != format!("e-{i}") {
            v.mismatches += 1;
        }
        let stalled = exp.stalled_session == Some(s_idx);
        let fails = match exp.fail_pct {
            Some(pct) => workload::fails_first_attempt_pct(c.event_id.as_bytes(), pct),
            None => workload::fails_first_attempt(c.event_id.as_bytes(), exp.fail_mod),
        };
        if !stalled && ((fails && c.attempt < 2) || (!fails && c.attempt != 1)) {
            v.mismatches += 1;
        }
        if c.attempt > 1 {
            v.retried += 1;
        }
        let (max, seen) = self
            .state
            .entry(s_idx)
            .or_insert_with(|| (0, vec![false; n as usize]));
        let slot = &mut seen[(c.seq - 1) as usize];
        if *slot {
            // A replay (at-least-once after a crash or a rebalance): counted, not a violation.
            v.duplicates += 1;
            return;
        }
        *slot = true;
        v.seen += 1;
        if c.seq < *max {
            v.violations += 1;
        }
        *max = (*max).max(c.seq);
        let l = c.done_us - c.create_ms * 1000;
        if stalled {
            self.stalled_lat.push(l);
        } else {
            self.lat.push((c.create_ms, l));
        }
    }

    /// The verdict, once every completion was added; `header` gives the run's time span.
    pub fn finish(mut self, header: &LogHeader) -> Verdict {
        let mut v = std::mem::take(&mut self.v);
        v.rss_kib = header.rss_kib;
        v.lost = self.exp.records.saturating_sub(v.seen);
        let warm_until_ms = (header.first_us + self.exp.warmup.as_micros() as i64) / 1000;
        let mut lat: Vec<i64> = self
            .lat
            .iter()
            .filter(|(create_ms, _)| *create_ms >= warm_until_ms)
            .map(|(_, l)| *l)
            .collect();
        v.latency_samples = lat.len() as u64;
        v.latency_ms = percentiles(&mut lat);
        v.stalled_latency_ms = percentiles(&mut self.stalled_lat);
        v.seconds = (header.end_us - header.first_us).max(1) as f64 / 1e6;
        v.rate = v.seen as f64 / v.seconds;
        v.drawn_floor_s = header.drawn_floor_us.map(|f| f as f64 / 1e6);
        v.cpu_us_per_record = header.cpu_us.map(|c| c as f64 / v.seen.max(1) as f64);
        v
    }
}

/// p50, p99, p99.9 and max of latencies in µs, as ms.
fn percentiles(lat: &mut [i64]) -> [f64; 4] {
    lat.sort_unstable();
    let ms = |p: f64| percentile(lat, p) as f64 / 1000.0;
    [
        ms(50.0),
        ms(99.0),
        ms(99.9),
        lat.last().copied().unwrap_or(0) as f64 / 1000.0,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-rolled formatting writes what `format!` would, and the line reads back.
    #[test]
    fn log_lines_are_written_as_fmt_would() {
        for v in [0, 7, -7, 10, 1_796_187_011_913_642, i64::MAX, i64::MIN] {
            let mut b = Vec::new();
            push_decimal(&mut b, v);
            assert_eq!(String::from_utf8(b).expect("utf-8"), v.to_string());
        }
        let dir = std::env::temp_dir().join(format!("orderly-log-{}", std::process::id()));
        let w = LogWriter::create(&dir, false).expect("create");
        w.line(b"s-1", b"2", b"e-3", 1, 1_700_000_000_000, -5);
        w.line(b"s-9", b"", b"e-10", 12, 0, 42);
        drop(w);
        let text = std::fs::read_to_string(&dir).expect("read");
        let _ = std::fs::remove_file(&dir);
        assert_eq!(text, "s-1 2 e-3 1 1700000000000 -5\ns-9  e-10 12 0 42\n");
    }

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
            fail_pct: None,
            warmup: Duration::ZERO,
            stalled_session: None,
        }
    }

    fn header() -> LogHeader {
        LogHeader {
            system: "t".into(),
            first_us: 1_000_000,
            end_us: 2_000_000,
            rss_kib: 1,
            drawn_floor_us: None,
            cpu_us: None,
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
        l.swap(10, 17); // two records of one session, completed in the wrong order
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

    /// The HTTP scenarios' rule (`% 100 < pct`) picks other records than `% fail_mod == 0`: a
    /// log made by one rule fails the check of the other.
    #[test]
    fn the_http_rule_is_checked_when_named() {
        let mut l = run(1000, 7, 0);
        for c in &mut l {
            if workload::fails_first_attempt_pct(c.event_id.as_bytes(), 10) {
                c.attempt = 2;
            }
        }
        let mut e = exp(1000, 7);
        assert!(!verify(&header(), &l, &e).ok());
        e.fail_pct = Some(10);
        let v = verify(&header(), &l, &e);
        assert!(v.ok(), "{v:?}");
        assert!(v.retried > 50 && v.retried < 150, "{}", v.retried);
    }

    #[test]
    fn latency_counts_only_records_created_after_the_warm_up() {
        // Records created at 1,000 ms, first handler call at 1,000,000 µs = 1,000 ms.
        let mut e = exp(1000, 7);
        let v = verify(&header(), &run(1000, 7, 10), &e);
        assert_eq!(v.latency_samples, 1000);
        e.warmup = Duration::from_millis(1);
        let mut l = run(1000, 7, 10);
        for c in l.iter_mut().skip(400) {
            c.create_ms = 1_001;
        }
        let v = verify(&header(), &l, &e);
        assert_eq!(v.latency_samples, 600);
        // A system that started handling only after every record was created: nothing to time.
        let late = LogHeader {
            first_us: 5_000_000,
            ..header()
        };
        let v = verify(&late, &l, &e);
        assert_eq!(v.latency_samples, 0);
        assert_eq!(v.latency_ms, [0.0; 4]);
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
        // The drawn floor, written only by systems that know it, comes back and reaches the
        // verdict in seconds.
        let with_floor = LogHeader {
            drawn_floor_us: Some(271_500),
            ..header()
        };
        write_log(&path, &with_floor, &lines).unwrap_or_default();
        let (h, _) = read_log(&path).unwrap_or_default();
        assert_eq!(h, with_floor);
        assert_eq!(verify(&h, &lines, &exp(100, 3)).drawn_floor_s, Some(0.2715));
        // So does the process's CPU time, per record seen.
        let with_cpu = LogHeader {
            cpu_us: Some(250),
            ..header()
        };
        write_log(&path, &with_cpu, &lines).unwrap_or_default();
        let (h, _) = read_log(&path).unwrap_or_default();
        assert_eq!(h, with_cpu);
        assert_eq!(
            verify(&h, &lines, &exp(100, 3)).cpu_us_per_record,
            Some(2.5)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_stalled_session_may_take_many_attempts_and_is_timed_apart() {
        let mut l = run(1000, 7, 10);
        for c in l.iter_mut().filter(|c| c.session == "s-000003") {
            c.attempt = 40;
            c.done_us += 10_000_000;
        }
        let mut e = exp(1000, 7);
        assert!(
            !verify(&header(), &l, &e).ok(),
            "without the stall, 40 attempts are wrong"
        );
        e.stalled_session = Some(3);
        let v = verify(&header(), &l, &e);
        assert!(v.ok(), "{v:?}");
        assert!(v.stalled_latency_ms[3] >= 10_000.0, "{v:?}");
        assert!(
            v.latency_ms[3] < 10_000.0,
            "the others are timed without it: {v:?}"
        );
    }

    #[test]
    fn logs_of_killed_processes_merge_and_replays_count_as_duplicates() {
        let dir = std::env::temp_dir().join(format!("orderly-verify-m-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let all = run(600, 5, 10);
        // Process 1 completed the first 400 and was killed (no `#` line); process 2 replayed
        // 350..400 (above the watermark its predecessor committed) and did the rest.
        let p1 = dir.join("p1.log");
        let p2 = dir.join("p2.log");
        let w1 = LogWriter::create(&p1, true).unwrap_or_else(|e| panic!("{e}"));
        for c in &all[..400] {
            let seq = c.seq.to_string();
            w1.line(
                c.session.as_bytes(),
                seq.as_bytes(),
                c.event_id.as_bytes(),
                c.attempt,
                c.create_ms,
                c.done_us,
            );
        }
        drop(w1);
        let w2 = LogWriter::create(&p2, false).unwrap_or_else(|e| panic!("{e}"));
        for c in &all[350..] {
            let seq = c.seq.to_string();
            w2.line(
                c.session.as_bytes(),
                seq.as_bytes(),
                c.event_id.as_bytes(),
                c.attempt,
                c.create_ms,
                c.done_us + 1_000_000,
            );
        }
        w2.finish(&header()).unwrap_or_else(|e| panic!("{e}"));
        let (h, v) =
            verify_files(&[p1.clone(), p2.clone()], &exp(600, 5)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(h.system, "t");
        assert_eq!(
            (v.seen, v.lost, v.duplicates, v.violations),
            (600, 0, 50, 0),
            "{v:?}"
        );
        assert!(v.ok());
        // Without the second process, the records after 400 are lost.
        let (_, v) = verify_files(&[p1], &exp(600, 5)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v.lost, 200);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_half_written_last_line_is_left_out_and_elsewhere_is_an_error() {
        let dir = std::env::temp_dir().join(format!("orderly-verify-t-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("killed.log");
        std::fs::write(&path, "s-000001 1 e-1 1 5 6\ns-000002 1 e-2").unwrap();
        let (_, lines) = read_log(&path).unwrap();
        assert_eq!(lines.len(), 1);
        std::fs::write(&path, "s-000002 1 e-2\ns-000001 1 e-1 1 5 6\n").unwrap();
        assert!(read_log(&path).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
