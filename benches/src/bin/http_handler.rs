//! `--http` against the in-process handler: the same backlog (1,000 sessions by default) consumed by the engine once with the synthetic handler in the process and once with `orderly_handlers::HttpHandler` (what `orderly consume --http` runs) posting to a minimal local hyper server with the same failure rules; records/s, p99 and CPU per record.
//!
//! Run: `cargo run -p orderly-benches --release --bin http_handler -- [records] [sessions]
//! [--work-ms N] [--h2c] [--concurrency N] [--adaptive-concurrency] [--batch-max N]
//! [--only in-process|http] [--runs N]`.
//! Prints figures; it is not a timed test. Both runs use the same engine settings (retry base 1 ms,
//! cap 100 ms, no attempt limit; 10 % transient failures on the first attempt, 0.1 % permanent);
//! `--work-ms` gives both handlers the same service time per attempt (an async sleep: in the
//! synthetic handler, or in the HTTP server before it answers). Throughput counts from the first
//! record handed to a handler to the last terminal record. CPU per record is this process's user
//! and system time (`/proc/self/stat`) over the run divided by the records; the HTTP server runs in
//! this process on its own runtime and thread(s), so its cost is included; it is also shown
//! alone (the `http-server` threads' `/proc/self/task/*/stat`).

// A benchmark program reports on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use orderly_consumer::__private::synthetic::{Synthetic, percentile, produce_seed};
use orderly_consumer::{Consumer, ConsumerConfig};
use orderly_engine::{
    Attempt, BatchOutcome, EngineStats, Handler, HandlerError, Record, RetryPolicy,
};
use orderly_group::AutoOffsetReset;
use orderly_handlers::{HttpConfig, HttpHandler, SessionRouter};
use orderly_testkit::webhook::{Rules, Webhook};

#[derive(Parser)]
#[command(about = "--http against the in-process handler on the same backlog")]
struct Args {
    /// Records in the backlog.
    #[arg(default_value_t = 200_000)]
    records: u64,
    /// Sessions.
    #[arg(default_value_t = 1_000)]
    sessions: usize,
    /// Service time per attempt of both handlers, in ms (0: no work).
    #[arg(long, default_value_t = 0)]
    work_ms: u64,
    /// HTTP/2 without TLS (prior knowledge) instead of HTTP/1.1.
    #[arg(long)]
    h2c: bool,
    /// Requests in flight at most (`--http-concurrency`; default 256, the product's default).
    #[arg(long)]
    concurrency: Option<usize>,
    /// Let the requests in flight follow the latency, up to `--concurrency`
    /// (`--http-adaptive-concurrency`); default: always `--concurrency` (the product's default).
    #[arg(long)]
    adaptive_concurrency: bool,
    /// Records of one session per HTTP request at most (`--http-batch-max`; default 1). The
    /// in-process run always takes one record per call.
    #[arg(long, default_value_t = 1)]
    batch_max: usize,
    /// Threads of the HTTP server's own runtime.
    #[arg(long, default_value_t = 1)]
    server_threads: usize,
    /// Run only one side.
    #[arg(long, value_parser = ["in-process", "http"])]
    only: Option<String>,
    /// Runs of each side (alternating).
    #[arg(long, default_value_t = 1)]
    runs: usize,
}

fn config(bootstrap: &str, group: &str, topic: &str, dlq: &str) -> ConsumerConfig {
    let mut c = ConsumerConfig::new([bootstrap], group, [topic]);
    c.dlq_topic = dlq.to_owned();
    c.group.auto_offset_reset = AutoOffsetReset::Earliest;
    c.group.heartbeat_interval = Duration::from_secs(1);
    c.group.session_timeout = Duration::from_secs(10);
    c.engine.seq_header = Some("seq".into());
    c.engine.attempt_timeout = None;
    c.engine.retry = RetryPolicy {
        base: Duration::from_millis(1),
        factor: 2.0,
        cap: Duration::from_millis(100),
        max_attempts: None,
    };
    c
}

/// CPU time so far, in clock ticks of 10 ms: the whole process and, within it, the HTTP server's
/// threads (named `http-server`); zero where `/proc` does not exist.
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    user: Duration,
    sys: Duration,
    server_user: Duration,
    server_sys: Duration,
}

impl std::ops::Sub for Cpu {
    type Output = Cpu;
    fn sub(self, o: Cpu) -> Cpu {
        Cpu {
            user: self.user.saturating_sub(o.user),
            sys: self.sys.saturating_sub(o.sys),
            server_user: self.server_user.saturating_sub(o.server_user),
            server_sys: self.server_sys.saturating_sub(o.server_sys),
        }
    }
}

/// (name, user, system) of one `stat` file of `/proc`.
fn stat(path: &std::path::Path) -> Option<(String, Duration, Duration)> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The name is in parentheses (it may hold spaces); the other fields follow the last ')'.
    let (head, rest) = stat.rsplit_once(')')?;
    let name = head.split_once('(').map_or("", |(_, n)| n).to_owned();
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let tick = |i: usize| Duration::from_millis(f.get(i).copied().unwrap_or(0) * 10);
    Some((name, tick(11), tick(12)))
}

fn cpu_time() -> Cpu {
    let mut c = Cpu::default();
    if let Some((_, u, s)) = stat(std::path::Path::new("/proc/self/stat")) {
        c.user = u;
        c.sys = s;
    }
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            if let Some((name, u, s)) = stat(&t.path().join("stat")) {
                if name.starts_with("http-server") {
                    c.server_user += u;
                    c.server_sys += s;
                }
            }
        }
    }
    c
}

/// One side's figures.
struct Run {
    rate: f64,
    p99_ms: f64,
    violations: u64,
    dead_letters: u64,
    user_us: f64,
    sys_us: f64,
    server_user_us: f64,
    server_sys_us: f64,
}

/// Runs one consumer until `records` are terminal; returns (records/s from the first terminal
/// record, engine stats, CPU per record in µs: user, system, the server's user, the server's system).
async fn consume<H: Handler>(
    c: ConsumerConfig,
    h: H,
    records: u64,
) -> anyhow::Result<(f64, EngineStats, [f64; 4])> {
    let consumer = Consumer::new(c, h)?;
    let stats = consumer.stats();
    let s = stats.clone();
    let watch = async move {
        let mut first: Option<(Instant, Cpu)> = None;
        loop {
            let n = s.handled() + s.dead_lettered();
            if n > 0 && first.is_none() {
                first = Some((Instant::now(), cpu_time()));
            }
            if n >= records {
                return first.map_or((Duration::ZERO, Cpu::default()), |f| {
                    (f.0.elapsed(), cpu_time() - f.1)
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let run = tokio::spawn(consumer.run(async move {
        let _ = rx.await;
    }));
    let (span, cpu) = watch.await;
    let _ = tx.send(());
    run.await??;
    let per = |d: Duration| d.as_secs_f64() * 1e6 / records as f64;
    Ok((
        records as f64 / span.as_secs_f64().max(1e-9),
        stats,
        [
            per(cpu.user),
            per(cpu.sys),
            per(cpu.server_user),
            per(cpu.server_sys),
        ],
    ))
}

async fn in_process(a: &Args, c: ConsumerConfig) -> anyhow::Result<Run> {
    let h = Synthetic::new(10, true, Duration::from_millis(a.work_ms));
    let tally = h.tally();
    let (rate, s, [user_us, sys_us, ..]) = consume(c, h, a.records).await?;
    let mut o = tally.observed();
    o.latencies_us.sort_unstable();
    Ok(Run {
        rate,
        p99_ms: percentile(&o.latencies_us, 99.0) as f64 / 1000.0,
        violations: o.violations + s.ordering_violations(),
        dead_letters: s.dead_lettered(),
        user_us,
        sys_us,
        server_user_us: 0.0,
        server_sys_us: 0.0,
    })
}

/// The HTTP handler behind an `Arc`, so the run can read its limit afterwards.
struct Shared(Arc<HttpHandler>);

impl Handler for Shared {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        self.0.handle(record, attempt).await
    }

    async fn handle_batch(&self, records: &[&Record], attempt: Attempt) -> BatchOutcome {
        self.0.handle_batch(records, attempt).await
    }

    fn available(&self) -> bool {
        self.0.available()
    }
}

async fn http(a: &Args, mut c: ConsumerConfig) -> anyhow::Result<Run> {
    c.engine.batch_max = a.batch_max.max(1);
    // The server gets its own runtime (as a separate service would); it stops with `server_rt`.
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.server_threads.max(1))
        .thread_name("http-server")
        .enable_all()
        .build()?;
    let rules = Rules {
        transient_pct: 10,
        permanent: true,
        work: Duration::from_millis(a.work_ms),
    };
    let hook = server_rt
        .spawn(async move { Webhook::start(rules).await })
        .await??;
    let mut hc = HttpConfig::new(hook.url());
    hc.h2c = a.h2c;
    hc.concurrency = a.concurrency.unwrap_or(256).max(1);
    hc.adaptive_concurrency = a.adaptive_concurrency;
    let h = Arc::new(HttpHandler::new(hc, SessionRouter::default())?);
    let (rate, s, [user_us, sys_us, server_user_us, server_sys_us]) =
        consume(c, Shared(Arc::clone(&h)), a.records).await?;
    eprintln!(
        "requests in flight allowed at the end: {}",
        h.concurrency_limit()
    );
    let r = hook.report();
    drop(hook);
    server_rt.shutdown_background();
    Ok(Run {
        rate,
        p99_ms: r.quantile_ms(0.99),
        violations: r.violations + s.ordering_violations(),
        dead_letters: s.dead_lettered(),
        user_us,
        sys_us,
        server_user_us,
        server_sys_us,
    })
}

fn row(name: &str, r: &Run) {
    println!(
        "{:<40} {:>10.0} {:>17.0} ms {:>11} {:>13} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
        name,
        r.rate,
        r.p99_ms,
        r.violations,
        r.dead_letters,
        r.user_us,
        r.sys_us,
        r.server_user_us,
        r.server_sys_us
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let broker = orderly_testkit::broker();
    let bs = broker.bootstrap().to_owned();
    let topic = broker.unique_topic("bench-http");
    let dlq = format!("{topic}.dlq");
    broker.create_topic(&topic, 12).await?;
    broker.create_topic(&dlq, 3).await?;
    eprintln!(
        "writing {} records for {} sessions to {topic} (12 partitions)",
        a.records, a.sessions
    );
    produce_seed(
        std::slice::from_ref(&bs),
        &topic,
        a.records as usize,
        a.sessions,
    )
    .await?;
    let http_name = format!(
        "--http (HttpHandler, {}, batch {})",
        if a.h2c { "h2c" } else { "h1" },
        a.batch_max.max(1)
    );
    let mut results: Vec<(String, Run)> = Vec::new();
    for run in 0..a.runs {
        if a.only.as_deref() != Some("http") {
            eprintln!("run {}: in-process synthetic handler ...", run + 1);
            let c = config(&bs, &format!("{topic}-in-{run}"), &topic, &dlq);
            results.push(("in-process (synthetic)".into(), in_process(&a, c).await?));
        }
        if a.only.as_deref() != Some("in-process") {
            eprintln!("run {}: HttpHandler to a local HTTP server ...", run + 1);
            let c = config(&bs, &format!("{topic}-http-{run}"), &topic, &dlq);
            results.push((http_name.clone(), http(&a, c).await?));
        }
    }

    println!(
        "records {}, sessions {}, 12 partitions, backlog, handler work {} ms per attempt, \
         HTTP requests in flight at most {} ({})",
        a.records,
        a.sessions,
        a.work_ms,
        a.concurrency.unwrap_or(256),
        if a.adaptive_concurrency {
            "adaptive"
        } else {
            "fixed"
        }
    );
    println!(
        "{:<40} {:>10} {:>20} {:>11} {:>13} {:>9} {:>9} {:>9} {:>9}",
        "handler",
        "records/s",
        "p99 CreateTime->done",
        "violations",
        "dead letters",
        "user µs",
        "sys µs",
        "srv usr",
        "srv sys"
    );
    for (name, r) in &results {
        row(name, r);
    }
    let median = |name: &str| {
        let mut v: Vec<f64> = results
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, r)| r.rate)
            .collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    if let (Some(i), Some(h)) = (median("in-process (synthetic)"), median(&http_name)) {
        println!(
            "http / in-process throughput (medians): {:.2} (goal: at least 0.5)",
            h / i.max(1e-9)
        );
    }
    println!(
        "(user/sys µs: CPU time of this process per record, HTTP server included; \
         srv usr/sys: the HTTP server's threads alone)"
    );
    Ok(())
}
