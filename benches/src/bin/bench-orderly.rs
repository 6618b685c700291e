//! orderly as a system of the side-by-side benchmarks (`cargo xtask bench`): orderly-consumer with
//! the shared handler semantics (see `orderly_benches::workload`), writing the shared handler log.
//!
//! It consumes `--topic` in group `--group` until `--records` records completed, drains, commits,
//! leaves, and ends the log at `--log` (streamed as records complete); the log's `end_us` is when
//! the final commit was acknowledged (`EngineStats::last_commit`). It prints `READY` on stdout
//! once partitions are assigned. `--stall-session`/`--stall-after-ms`/`--stall-for-ms` make one
//! session fail on every attempt for a while (S4); `--log-flush` writes every line with its own
//! `write` so a SIGKILL loses nothing acknowledged (S6). The log's `#` line also carries
//! `drawn_floor_us`: the retry backoffs the engine drew for each session (`Attempt::backoff`),
//! added up, the largest sum — the floor this run's own draws put under its run time.
//!
//! With `--reply-topic T` (the reply scenarios) the handler answers each record it completes with
//! one reply, value the record's event id, to `T` with the library's default key (the session
//! id), which the library writes before the record counts as done; `--exactly-once` adds the
//! library's exactly-once mode (`ConsumerConfig::exactly_once`, every other setting its default).

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use clap::Parser;
use orderly_benches::verify::{self, LogHeader, LogWriter};
use orderly_benches::workload;
use orderly_consumer::__private::synthetic::process_cpu_time;
use orderly_consumer::{Consumer, ConsumerConfig};
use orderly_engine::{Attempt, Handler, HandlerError, Record, Reply};

#[derive(Parser)]
struct Args {
    #[arg(long, env = "ORDERLY_BOOTSTRAP")]
    bootstrap: String,
    #[arg(long)]
    topic: String,
    #[arg(long)]
    group: String,
    #[arg(long)]
    dlq_topic: String,
    /// Stop once this many records completed.
    #[arg(long)]
    records: u64,
    /// Failure-injection modulus (10 = 10 %, 0 = none).
    #[arg(long, default_value_t = 10)]
    fail_mod: u64,
    /// Handler work per attempt, µs (an async sleep).
    #[arg(long, default_value_t = 0)]
    work_us: u64,
    /// Engine workers. Default: the engine's own default (one per core), which is what
    /// `orderly consume` and an embedding user get. Also `ORDERLY_BENCH_WORKERS`, which the
    /// harness passes on (to compare settings on the same binary: `benches/ab-s3.sh`).
    #[arg(long, env = "ORDERLY_BENCH_WORKERS")]
    workers: Option<usize>,
    /// Where to write the handler log.
    #[arg(long)]
    log: PathBuf,
    /// Write every log line with its own `write` (S6: the process is killed with SIGKILL).
    #[arg(long)]
    log_flush: bool,
    /// S4: this session key fails on every attempt from `--stall-after-ms` after the first record
    /// was handed to the handler, for `--stall-for-ms`.
    #[arg(long)]
    stall_session: Option<String>,
    #[arg(long, default_value_t = 0)]
    stall_after_ms: i64,
    #[arg(long, default_value_t = 0)]
    stall_for_ms: i64,
    /// Print where each record's latency went to stderr at the end: CreateTime → fetched (the
    /// producer, the broker and the fetch), fetched → first attempt started (the engine), started
    /// → done (retries and the session's own queue), as percentiles in ms. Also set by
    /// `ORDERLY_BENCH_BREAKDOWN=true`, which the harness passes on.
    #[arg(long, env = "ORDERLY_BENCH_BREAKDOWN")]
    breakdown: bool,
    /// The engine's memory budget per partition, bytes. Default: the engine's default (16 MiB).
    /// A budget below a partition's backlog makes partitions pause and resume while they run.
    #[arg(long)]
    partition_budget_bytes: Option<usize>,
    /// The fetch long-poll wait toward a broker leading a paused partition, ms. Default: the
    /// consumer's default (`FetchConfig::paused_max_wait`, 20 ms); 500 (`max_wait`) gives the
    /// behaviour before that setting existed.
    #[arg(long)]
    paused_max_wait_ms: Option<u64>,
    /// Answer each completed record with one reply (value: its event id) to this topic.
    #[arg(long)]
    reply_topic: Option<String>,
    /// The library's exactly-once mode: replies and offsets commit in one transaction per
    /// commit interval (needs `--reply-topic`).
    #[arg(long, requires = "reply_topic")]
    exactly_once: bool,
}

/// The header the `--breakdown` fetch hook writes: when the record's fetch response was decoded.
const FETCHED_US: &str = "bench-fetched-us";

/// Per-record latency parts, µs (`--breakdown`): (create → fetched, fetched → started, started →
/// done), for records created after the warm-up second.
#[derive(Default)]
struct Breakdown {
    parts: std::sync::Mutex<Vec<[i64; 3]>>,
    /// When the first attempt of a record that failed it started, by event id.
    first_attempt: std::sync::Mutex<std::collections::HashMap<Bytes, i64>>,
}

impl Breakdown {
    fn report(&self, first_us: i64) {
        let v = self
            .parts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = first_us;
        let names = ["create->fetched", "fetched->started", "started->done"];
        for (i, name) in names.iter().enumerate() {
            let mut col: Vec<i64> = v.iter().map(|p| p[i]).collect();
            col.sort_unstable();
            let pct = |q: f64| {
                col.get(((col.len() as f64 * q) as usize).min(col.len().saturating_sub(1)))
                    .map_or(0.0, |x| *x as f64 / 1000.0)
            };
            eprintln!(
                "breakdown {name:<17} n={} p50 {:.2} ms p90 {:.2} ms p99 {:.2} ms p99.9 {:.2} ms max {:.2} ms",
                col.len(),
                pct(0.5),
                pct(0.9),
                pct(0.99),
                pct(0.999),
                pct(1.0)
            );
        }
    }
}

struct BenchHandler {
    fail_mod: u64,
    work: Duration,
    first_us: AtomicI64,
    /// The process's CPU time (ns) when the first record was handed over.
    first_cpu_ns: AtomicU64,
    completed: AtomicU64,
    /// Stop once this many records completed.
    target: u64,
    /// Notified by the completion that reaches `target`, so the end of a run is seen at once
    /// (as the Go and Parallel Consumer peers see theirs), not at the next poll.
    reached: tokio::sync::Notify,
    log: LogWriter,
    stall: Option<(Bytes, i64, i64)>,
    breakdown: Option<Breakdown>,
    /// Per session, the retry backoffs the engine drew for its records, added up (µs): the
    /// largest is the floor those draws put under the run (`drawn_floor_us` in the log header).
    /// Touched on retries only.
    drawn: std::sync::Mutex<std::collections::HashMap<Bytes, u64>>,
    /// How late retries start: when each failed attempt returned (by event id), and per retry
    /// when it started (µs since the epoch) and `start − failure − drawn backoff` (µs), reported
    /// on stderr at the end.
    late: std::sync::Mutex<Lateness>,
}

/// When each failed attempt returned (by event id), and each retry's (start, lateness), µs.
type Lateness = (std::collections::HashMap<Bytes, i64>, Vec<(i64, i64)>);

impl BenchHandler {
    fn failed(&self, id: &[u8]) {
        let now = verify::now_us();
        self.late
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0
            .insert(Bytes::copy_from_slice(id), now);
    }

    /// `retry lateness µs (start - failure - drawn backoff): n=… mean=… p50=… p90=… p99=… max=…;
    /// first 50 ms: n=… mean=…; after: n=… mean=…` (the first 50 ms after `first_us` are when
    /// the backlog is fetched and taken in, and the CPU is busiest).
    fn report_lateness(&self, first_us: i64) {
        let late = self
            .late
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut v: Vec<i64> = late.1.iter().map(|&(_, l)| l).collect();
        if v.is_empty() {
            return;
        }
        let mean = |v: &[i64]| v.iter().sum::<i64>() as f64 / v.len().max(1) as f64;
        let early: Vec<i64> = late
            .1
            .iter()
            .filter(|&&(at, _)| at < first_us + 50_000)
            .map(|&(_, l)| l)
            .collect();
        let after: Vec<i64> = late
            .1
            .iter()
            .filter(|&&(at, _)| at >= first_us + 50_000)
            .map(|&(_, l)| l)
            .collect();
        v.sort_unstable();
        eprintln!(
            "retry lateness µs (start - failure - drawn backoff): n={} mean={:.1} p50={} p90={} p99={} max={}; \
             first 50 ms: n={} mean={:.1}; after: n={} mean={:.1}",
            v.len(),
            mean(&v),
            verify::percentile(&v, 50.0),
            verify::percentile(&v, 90.0),
            verify::percentile(&v, 99.0),
            verify::percentile(&v, 100.0),
            early.len(),
            mean(&early),
            after.len(),
            mean(&after),
        );
        // The first 60 ms in 5 ms steps: how many retries started in each and how late, on
        // average (the backlog is taken in during the first tens of ms of a run).
        let mut steps = String::new();
        for k in 0..12i64 {
            let (lo, hi) = (first_us + k * 5_000, first_us + (k + 1) * 5_000);
            let l: Vec<i64> = late
                .1
                .iter()
                .filter(|&&(at, _)| lo <= at && at < hi)
                .map(|&(_, l)| l)
                .collect();
            steps.push_str(&format!(
                " {}-{}ms n={} mean={:.0};",
                k * 5,
                k * 5 + 5,
                l.len(),
                mean(&l)
            ));
        }
        eprintln!("retry lateness µs by start time:{steps}");
    }
}

impl Handler for BenchHandler {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        let started_us = if self.breakdown.is_some() {
            verify::now_us()
        } else {
            0
        };
        if self.first_us.load(Ordering::Relaxed) == 0
            && self
                .first_us
                .compare_exchange(0, verify::now_us(), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.first_cpu_ns
                .store(process_cpu_time().as_nanos() as u64, Ordering::Relaxed);
        }
        if attempt.number > 1 {
            let now = verify::now_us();
            let id = record.header("event-id").map_or(&[][..], |b| &b[..]);
            let mut late = self
                .late
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(at) = late.0.remove(id) {
                late.1
                    .push((now, now - at - attempt.backoff.as_micros() as i64));
            }
            drop(late);
            let key = record.key.as_deref().unwrap_or_default();
            let mut drawn = self
                .drawn
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let us = attempt.backoff.as_micros() as u64;
            match drawn.get_mut(key) {
                Some(sum) => *sum += us,
                None => {
                    drawn.insert(Bytes::copy_from_slice(key), us);
                }
            }
        }
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        // Borrowed, not cloned: a clone is an atomic increment on the count of the buffer the
        // record shares with its neighbours, which the other workers touch too.
        let id: &[u8] = record.header("event-id").map_or(&[], |b| &b[..]);
        if attempt.number == 1 && workload::fails_first_attempt(id, self.fail_mod) {
            if let Some(b) = &self.breakdown {
                b.first_attempt
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(Bytes::copy_from_slice(id), started_us);
            }
            self.failed(id);
            return Err(HandlerError::transient("injected"));
        }
        let key = record.key.as_deref().unwrap_or_default();
        if let Some((stalled, from, until)) = &self.stall {
            let since_ms = (verify::now_us() - self.first_us.load(Ordering::Relaxed)) / 1000;
            if key == stalled.as_ref() && (*from..*until).contains(&since_ms) {
                self.failed(id);
                return Err(HandlerError::transient("stalled"));
            }
        }
        let seq = record.header("seq").map(|b| b.as_ref()).unwrap_or_default();
        self.log.line(
            key,
            seq,
            id,
            attempt.number,
            record.timestamp_ms,
            verify::now_us(),
        );
        if let Some(b) = &self.breakdown {
            let fetched = record
                .header(FETCHED_US)
                .and_then(|v| std::str::from_utf8(v).ok()?.parse::<i64>().ok())
                .unwrap_or(0);
            let started = if attempt.number == 1 {
                started_us
            } else {
                b.first_attempt
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(id)
                    .unwrap_or(started_us)
            };
            let done = verify::now_us();
            let warm = self.first_us.load(Ordering::Relaxed) / 1000 + 1000;
            if record.timestamp_ms >= warm {
                b.parts
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push([
                        fetched - record.timestamp_ms * 1000,
                        started - fetched,
                        done - started,
                    ]);
            }
        }
        if self.completed.fetch_add(1, Ordering::Relaxed) + 1 == self.target {
            // Stores a permit if `main` is not waiting yet: the wake-up is never lost.
            self.reached.notify_one();
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    // Logs to stderr only when asked (`RUST_LOG`): a run's own output stays the measurement.
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
    }
    let mut config = ConsumerConfig::new([a.bootstrap.clone()], a.group.clone(), [a.topic.clone()]);
    config.dlq_topic = a.dlq_topic.clone();
    config.group.auto_offset_reset = orderly_group::AutoOffsetReset::Earliest;
    // The group's heartbeat stays at its default (3 s), as franz-go's and Java's do in the peers:
    // in S6 (a SIGKILL every 10 s, session timeout 10 s) a dead member expires one session
    // timeout after its last heartbeat, and a 1 s heartbeat would put that expiry, and the
    // rebalance it ends, within a second of the next kill.
    config.group.session_timeout = Duration::from_secs(10);
    if let Some(w) = a.workers {
        config.engine.workers = w.max(1);
    }
    config.engine.retry = workload::retry_policy();
    if let Some(b) = a.partition_budget_bytes {
        config.engine.partition_budget_bytes = b;
    }
    if let Some(ms) = a.paused_max_wait_ms {
        config.fetch.paused_max_wait = Duration::from_millis(ms);
    }
    config.reply_topic = a.reply_topic.clone();
    config.exactly_once = a.exactly_once;
    if a.breakdown {
        config.fetch.prepare = Some(orderly_consumer::RecordHook(Arc::new(|r| {
            r.headers.push(orderly_engine::Header::new(
                FETCHED_US,
                verify::now_us().to_string(),
            ));
        })));
    }
    let handler = Arc::new(BenchHandler {
        fail_mod: a.fail_mod,
        work: Duration::from_micros(a.work_us),
        first_us: AtomicI64::new(0),
        first_cpu_ns: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        target: a.records,
        reached: tokio::sync::Notify::new(),
        log: LogWriter::create(&a.log, a.log_flush)?,
        stall: a.stall_session.as_ref().map(|k| {
            (
                Bytes::from(k.clone()),
                a.stall_after_ms,
                a.stall_after_ms + a.stall_for_ms,
            )
        }),
        breakdown: a.breakdown.then(Breakdown::default),
        drawn: Default::default(),
        late: Default::default(),
    });
    let replying = a.reply_topic.is_some();
    let consumer = Consumer::new(config, Shared(handler.clone(), replying))?;
    let stats = consumer.stats();
    let engine_stats = stats.clone();
    let target = a.records;
    let h = handler.clone();
    let shutdown = async move {
        let mut ready = false;
        loop {
            // Partitions show in the stats at the engine's next housekeeping tick; a small run can
            // finish before that, and a handled record proves the assignment as well.
            if !ready && (!stats.partitions().is_empty() || h.completed.load(Ordering::Relaxed) > 0)
            {
                ready = true;
                let mut out = std::io::stdout();
                let _ = writeln!(out, "READY");
                let _ = out.flush();
            }
            if h.completed.load(Ordering::Relaxed) >= target {
                return;
            }
            if std::env::var_os("BENCH_DEBUG").is_some() {
                eprintln!(
                    "completed {} handled {} failed {} retried {} active {}",
                    h.completed.load(Ordering::Relaxed),
                    stats.handled(),
                    stats.failed(),
                    stats.retried(),
                    stats.active_sessions()
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            // The READY check above polls; the end does not wait for the poll.
            tokio::select! {
                () = h.reached.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(2)) => {}
            }
        }
    };
    consumer.run(shutdown).await.context("consumer run")?;
    let cpu_ns = process_cpu_time().as_nanos() as u64;
    // The run ends when its last watermark was committed (benchmarks.md: "first record handed
    // to a handler → last watermark committed"), not after the LeaveGroup and the teardown
    // that follow; the Go peer ends at the same point.
    let end_us = match engine_stats.last_commit() {
        Some(at) => at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64),
        None => {
            eprintln!("no commit was acknowledged; the run ends now");
            verify::now_us()
        }
    };
    eprintln!(
        "after the final commit: {:.2} ms until the run returned (LeaveGroup, teardown)",
        (verify::now_us() - end_us) as f64 / 1000.0
    );
    let header = LogHeader {
        system: "orderly".into(),
        first_us: handler.first_us.load(Ordering::Relaxed),
        end_us,
        rss_kib: verify::peak_rss_kib(),
        drawn_floor_us: handler
            .drawn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .max()
            .map(|&us| us as i64),
        cpu_us: (handler.first_us.load(Ordering::Relaxed) != 0).then(|| {
            (cpu_ns.saturating_sub(handler.first_cpu_ns.load(Ordering::Relaxed)) / 1000) as i64
        }),
    };
    handler.log.finish(&header)?;
    handler.report_lateness(header.first_us);
    if let Some(b) = &handler.breakdown {
        b.report(header.first_us);
    }
    Ok(())
}

/// The handler behind an `Arc`, so `main` keeps a handle to its log; with `true`, each record it
/// completes is answered with one reply, its event id, to the default reply topic and key.
struct Shared(Arc<BenchHandler>, bool);

impl Handler for Shared {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        self.0.handle(record, attempt).await
    }

    async fn handle_replying(
        &self,
        record: &Record,
        attempt: Attempt,
    ) -> Result<Vec<Reply>, HandlerError> {
        self.0.handle(record, attempt).await?;
        if !self.1 {
            return Ok(Vec::new());
        }
        let id = record.header("event-id").map_or(&[][..], |b| &b[..]);
        Ok(vec![Reply::new(Bytes::copy_from_slice(id))])
    }
}
