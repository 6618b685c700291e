//! The side-by-side benchmark harness behind `cargo xtask bench` (see BENCHMARKS.md).
//!
//! It builds the peers under `benches/peers/` (Go with `go build`, Java with `mvn package`), then
//! runs every selected scenario for every system, interleaved (repetition 1 of every system, then
//! repetition 2, ...; the order rotates), against the broker in `ORDERLY_BOOTSTRAP`. Every run is
//! checked by the shared verifier; a run with a violation, a loss or a wrong attempt count is
//! failed whatever its speed. It writes the results between the `bench` markers of BENCHMARKS.md
//! and the charts to `benches/results/`.
//!
//! `--smoke`: a tiny S1 for orderly only, checked by the verifier, nothing written (what CI runs).

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use orderly_benches::svg::{self, Series};
use orderly_benches::verify::{self, Expected, Verdict};
use orderly_benches::workload;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

#[derive(Parser, Clone)]
struct Args {
    /// The short form (under 5 minutes): one repetition, smaller workloads, fewer scenarios.
    #[arg(long)]
    quick: bool,
    /// A tiny S1 for orderly only, checked by the verifier; writes nothing (CI).
    #[arg(long)]
    smoke: bool,
    /// Scenarios to run (default: all of the chosen form).
    #[arg(long, value_delimiter = ',')]
    scenario: Vec<String>,
    /// Systems to run (default: every system whose toolchain is installed).
    #[arg(long, value_delimiter = ',')]
    systems: Vec<String>,
    /// Repetitions per scenario (default 3, 1 with --quick).
    #[arg(long)]
    reps: Option<usize>,
    /// Do not write BENCHMARKS.md and the charts.
    #[arg(long)]
    no_write: bool,
    #[arg(long, env = "ORDERLY_BOOTSTRAP")]
    bootstrap: String,
    /// The command line to quote in BENCHMARKS.md.
    #[arg(long, default_value = "cargo xtask bench")]
    command: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum System {
    Orderly,
    GoSeed,
    ParallelConsumer,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Orderly => "orderly",
            System::GoSeed => "go-seed",
            System::ParallelConsumer => "parallel-consumer",
        }
    }
    fn label(self) -> &'static str {
        match self {
            System::Orderly => "orderly",
            System::GoSeed => "seed design (Go, franz-go)",
            System::ParallelConsumer => "Parallel Consumer 0.5.3.3",
        }
    }
}

/// One scenario's workload.
#[derive(Debug, Clone)]
struct Scenario {
    id: String,
    what: String,
    records: u64,
    sessions: u64,
    partitions: i32,
    fail_mod: u64,
    work_us: u64,
    /// Open-loop rate (records/s); 0 = backlog.
    rate: u64,
    seconds: f64,
    systems: Vec<System>,
}

struct Ctx {
    args: Args,
    root: PathBuf,
    bin: PathBuf,
    runs_dir: PathBuf,
    systems: Vec<System>,
    stamp: u64,
    counter: std::sync::atomic::AtomicU64,
}

impl Ctx {
    fn unique(&self, what: &str) -> String {
        let n = self
            .counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("bench-{}-{what}-{n}", self.stamp)
    }
}

/// The outcome of one run of one system.
#[derive(Debug, Clone)]
struct RunResult {
    verdict: Option<Verdict>,
    error: Option<String>,
    achieved_rate: Option<f64>,
}

impl RunResult {
    fn ok(&self) -> bool {
        self.error.is_none() && self.verdict.as_ref().is_some_and(Verdict::ok)
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("repository root")?
        .to_path_buf();
    let bin = std::env::current_exe()?
        .parent()
        .context("binary directory")?
        .to_path_buf();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let runs_dir = root
        .join("target")
        .join("bench-runs")
        .join(stamp.to_string());
    std::fs::create_dir_all(&runs_dir)?;

    let mut systems = vec![System::Orderly];
    if !args.smoke {
        if build_go(&root).await {
            systems.push(System::GoSeed);
        }
        if build_pc(&root).await {
            systems.push(System::ParallelConsumer);
        }
    }
    if !args.systems.is_empty() {
        systems.retain(|s| args.systems.iter().any(|n| n == s.name()));
    }
    let ctx = Ctx {
        args: args.clone(),
        root,
        bin,
        runs_dir,
        systems,
        stamp,
        counter: Default::default(),
    };
    let started = Instant::now();
    let scenarios = scenarios(&args, &ctx.systems);
    let reps = args
        .reps
        .unwrap_or(if args.quick || args.smoke { 1 } else { 3 });
    let mut report = Report::default();
    for sc in &scenarios {
        eprintln!(
            "==> {} ({}): {} records, {} sessions, {} partitions, {}",
            sc.id,
            sc.what,
            sc.records,
            sc.sessions,
            sc.partitions,
            if sc.rate > 0 {
                format!("{} records/s offered for {} s", sc.rate, sc.seconds)
            } else {
                "backlog".into()
            }
        );
        if sc.id == "S2-max" {
            report.s2max = s2_max(&ctx, sc).await?;
            continue;
        }
        // The long scenarios run once per system in the full form unless --reps says otherwise
        // (S2 offers 60 s of load; S3 reads 1,000,000 records per work level).
        let reps = if args.reps.is_none() && (sc.id == "S2" || sc.id.starts_with("S3")) {
            1
        } else {
            reps
        };
        let mut results: BTreeMap<System, Vec<RunResult>> = BTreeMap::new();
        let mut raw = Vec::new();
        for rep in 0..reps {
            // Backlog scenarios: one topic per repetition, consumed by every system in its own group.
            let shared_topic = if sc.rate == 0 {
                let t = ctx.unique(&sc.id.to_lowercase());
                seed_topic(&ctx, sc, &t).await?;
                Some(t)
            } else {
                None
            };
            let mut order = sc.systems.clone();
            let n = order.len().max(1);
            order.rotate_left(rep % n);
            for sys in order {
                let r = run_one(&ctx, sc, sys, shared_topic.as_deref()).await;
                print_result(sc, sys, &r);
                results.entry(sys).or_default().push(r);
            }
            if sc.id.starts_with("S3")
                && let Some(t) = &shared_topic
            {
                raw.push(raw_fetch(&ctx, sc, t).await);
            }
        }
        report.scenarios.push((sc.clone(), results, raw));
    }
    let failed: Vec<String> = report
        .scenarios
        .iter()
        .flat_map(|(sc, res, _)| {
            res.iter().flat_map(move |(sys, runs)| {
                runs.iter()
                    .filter(|r| !r.ok())
                    .map(move |r| format!("{} {}: {}", sc.id, sys.name(), describe(r)))
            })
        })
        .collect();
    eprintln!("==> done in {:.0} s", started.elapsed().as_secs_f64());
    if args.smoke {
        if !failed.is_empty() {
            bail!("smoke run failed: {failed:?}");
        }
        eprintln!("smoke run verified: order kept, nothing lost");
        return Ok(());
    }
    if !args.no_write {
        write_results(&ctx, &report, started.elapsed()).await?;
    }
    for f in &failed {
        eprintln!("FAILED RUN: {f}");
    }
    Ok(())
}

fn scenarios(args: &Args, systems: &[System]) -> Vec<Scenario> {
    let all = systems.to_vec();
    let q = args.quick;
    let sc =
        |id: &str, what: &str, records, sessions, fail_mod, work_us, rate, seconds: f64| Scenario {
            id: id.into(),
            what: what.into(),
            records,
            sessions,
            partitions: 12,
            fail_mod,
            work_us,
            rate,
            seconds,
            systems: all.clone(),
        };
    if args.smoke {
        return vec![sc("S1", "smoke", 2_000, 10, 10, 0, 0, 0.0)];
    }
    let mut v = vec![
        sc("S1", "backlog, 10 % transient", 50_000, 10, 10, 0, 0, 0.0),
        sc(
            "S1-1k",
            "backlog, 1,000 sessions, 10 % transient",
            50_000,
            1_000,
            10,
            0,
            0,
            0.0,
        ),
    ];
    if !q {
        let mut p1 = sc(
            "S1-p1",
            "backlog, 1 partition, 10 % transient",
            50_000,
            10,
            10,
            0,
            0,
            0.0,
        );
        p1.partitions = 1;
        v.push(p1);
    }
    let live_secs = if q { 3.0 } else { 5.0 };
    v.push(sc(
        "S1-live",
        "10,000 records/s offered, 10 % transient",
        (10_000.0 * live_secs) as u64,
        10,
        10,
        0,
        10_000,
        live_secs,
    ));
    let s2_secs = if q { 10.0 } else { 60.0 };
    v.push(sc(
        "S2",
        "50,000 records/s offered, 1 % transient",
        (50_000.0 * s2_secs) as u64,
        1_000,
        100,
        0,
        50_000,
        s2_secs,
    ));
    if !q {
        let mut m = sc(
            "S2-max",
            "highest offered rate with p99 <= 200 ms",
            0,
            1_000,
            0,
            0,
            0,
            10.0,
        );
        m.systems = vec![System::Orderly];
        v.push(m);
    }
    let s3_records = if q { 200_000 } else { 1_000_000 };
    v.push(sc(
        "S3-0",
        "saturation, no handler work",
        s3_records,
        10_000,
        0,
        0,
        0,
        0.0,
    ));
    if !q {
        v.push(sc(
            "S3-100us",
            "saturation, 100 µs handler work",
            s3_records,
            10_000,
            0,
            100,
            0,
            0.0,
        ));
        v.push(sc(
            "S3-1ms",
            "saturation, 1 ms handler work",
            s3_records,
            10_000,
            0,
            1_000,
            0,
            0.0,
        ));
        let mut s5 = sc(
            "S5",
            "many sessions (orderly only)",
            5_000_000,
            1_000_000,
            0,
            0,
            0,
            0.0,
        );
        s5.systems = vec![System::Orderly];
        v.push(s5);
    }
    if !args.scenario.is_empty() {
        v.retain(|s| {
            args.scenario
                .iter()
                .any(|w| s.id == *w || s.id.starts_with(&format!("{w}-")))
        });
    }
    v
}

async fn build_go(root: &Path) -> bool {
    let dir = root.join("benches/peers/go-seed");
    eprintln!("==> building the Go peer (go build)");
    let ok = Command::new("go")
        .args(["build", "-o", "target/go-seed", "."])
        .current_dir(&dir)
        .status()
        .await
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("    go is missing or the build failed: the Go peer is left out");
    }
    ok
}

async fn build_pc(root: &Path) -> bool {
    let dir = root.join("benches/peers/parallel-consumer");
    eprintln!("==> building the Parallel Consumer peer (mvn package)");
    let ok = Command::new("mvn")
        .args(["-q", "-B", "package", "-DskipTests"])
        .current_dir(&dir)
        .status()
        .await
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("    mvn is missing or the build failed: the Parallel Consumer peer is left out");
    }
    ok
}

async fn create_topic(ctx: &Ctx, name: &str, partitions: i32) -> Result<()> {
    Ok(orderly_testkit::create_topic(&ctx.args.bootstrap, name, partitions).await?)
}

async fn seed_topic(ctx: &Ctx, sc: &Scenario, topic: &str) -> Result<()> {
    create_topic(ctx, topic, sc.partitions).await?;
    let out = Command::new(ctx.bin.join("bench-load"))
        .args(["--bootstrap", &ctx.args.bootstrap, "--topic", topic])
        .args(["--sessions", &sc.sessions.to_string()])
        .args(["--records", &sc.records.to_string()])
        .output()
        .await
        .context("running bench-load")?;
    if !out.status.success() {
        bail!("seeding failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

fn system_command(
    ctx: &Ctx,
    sys: System,
    topic: &str,
    group: &str,
    dlq: &str,
    sc: &Scenario,
    log: &Path,
) -> Command {
    let records = sc.records.to_string();
    let fail = sc.fail_mod.to_string();
    let work = sc.work_us.to_string();
    let log = log.display().to_string();
    let b = &ctx.args.bootstrap;
    match sys {
        System::Orderly => {
            let mut c = Command::new(ctx.bin.join("bench-orderly"));
            c.args([
                "--bootstrap",
                b,
                "--topic",
                topic,
                "--group",
                group,
                "--dlq-topic",
                dlq,
            ])
            .args([
                "--records",
                &records,
                "--fail-mod",
                &fail,
                "--work-us",
                &work,
                "--log",
                &log,
            ]);
            c
        }
        System::GoSeed => {
            let mut c = Command::new(ctx.root.join("benches/peers/go-seed/target/go-seed"));
            c.args(["-bootstrap", b, "-topic", topic, "-group", group])
                .args([
                    "-records",
                    &records,
                    "-fail-mod",
                    &fail,
                    "-work-us",
                    &work,
                    "-log",
                    &log,
                ]);
            c
        }
        System::ParallelConsumer => {
            let dir = ctx.root.join("benches/peers/parallel-consumer/target");
            let cp = format!(
                "{}:{}/lib/*",
                dir.join("pc-peer-0.1.0.jar").display(),
                dir.display()
            );
            let mut c = Command::new("java");
            c.args([
                "-Xmx2g",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp",
                &cp,
            ])
            .arg("orderly.bench.PcPeer")
            .args([
                "--bootstrap",
                b,
                "--topic",
                topic,
                "--group",
                group,
                "--dlq-topic",
                dlq,
            ])
            .args([
                "--records",
                &records,
                "--fail-mod",
                &fail,
                "--work-us",
                &work,
                "--log",
                &log,
            ]);
            c
        }
    }
}

/// Runs one system on one scenario: starts it, waits until it owns partitions, offers the live
/// load if the scenario has one, waits for it to finish (bounded), and verifies its log.
async fn run_one(ctx: &Ctx, sc: &Scenario, sys: System, shared_topic: Option<&str>) -> RunResult {
    match run_one_inner(ctx, sc, sys, shared_topic).await {
        Ok(r) => r,
        Err(e) => RunResult {
            verdict: None,
            error: Some(format!("{e:#}")),
            achieved_rate: None,
        },
    }
}

async fn run_one_inner(
    ctx: &Ctx,
    sc: &Scenario,
    sys: System,
    shared_topic: Option<&str>,
) -> Result<RunResult> {
    let topic = match shared_topic {
        Some(t) => t.to_owned(),
        None => {
            let t = ctx.unique(&sc.id.to_lowercase());
            create_topic(ctx, &t, sc.partitions).await?;
            t
        }
    };
    let group = format!("{topic}-{}", sys.name());
    let dlq = format!("{group}.dlq");
    create_topic(ctx, &dlq, 1).await?;
    let log = ctx.runs_dir.join(format!("{group}.log"));
    let stderr_path = ctx.runs_dir.join(format!("{group}.stderr"));
    let mut cmd = system_command(ctx, sys, &topic, &group, &dlq, sc, &log);
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&stderr_path)?))
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", sys.name()))?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(l) = lines.next_line().await? {
            if l.trim() == "READY" {
                return Ok::<bool, std::io::Error>(true);
            }
        }
        Ok(false)
    })
    .await;
    if !matches!(ready, Ok(Ok(true))) {
        let _ = child.kill().await;
        bail!(
            "{} never got partitions (see {})",
            sys.name(),
            stderr_path.display()
        );
    }
    // Keep draining its stdout so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let mut achieved = None;
    if sc.rate > 0 {
        let out = Command::new(ctx.bin.join("bench-load"))
            .args(["--bootstrap", &ctx.args.bootstrap, "--topic", &topic])
            .args(["--sessions", &sc.sessions.to_string()])
            .args([
                "--rate",
                &sc.rate.to_string(),
                "--seconds",
                &sc.seconds.to_string(),
            ])
            .output()
            .await
            .context("running bench-load")?;
        if !out.status.success() {
            let _ = child.kill().await;
            bail!(
                "load generator failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        achieved = parse_kv(&String::from_utf8_lossy(&out.stdout), "achieved_rate");
    }
    // Backlog: generous; live: the offered time plus a drain allowance.
    let limit = Duration::from_secs_f64(if sc.rate > 0 { 60.0 } else { 300.0 });
    match tokio::time::timeout(limit, child.wait()).await {
        Ok(Ok(st)) if st.success() => {}
        Ok(Ok(st)) => bail!(
            "{} exited with {st} (see {})",
            sys.name(),
            stderr_path.display()
        ),
        Ok(Err(e)) => bail!("waiting for {}: {e}", sys.name()),
        Err(_) => {
            let _ = child.kill().await;
            bail!(
                "{} did not finish within {} s of the end of the load: killed",
                sys.name(),
                limit.as_secs()
            );
        }
    }
    let (header, completions) = verify::read_log(&log)?;
    let v = verify::verify(
        &header,
        &completions,
        &Expected {
            records: sc.records,
            sessions: sc.sessions,
            fail_mod: sc.fail_mod,
            // Live runs: the first second is warm-up for every system (JIT, connections).
            warmup: if sc.rate > 0 {
                Duration::from_secs(1)
            } else {
                Duration::ZERO
            },
        },
    );
    Ok(RunResult {
        verdict: Some(v),
        error: None,
        achieved_rate: achieved,
    })
}

fn parse_kv(text: &str, key: &str) -> Option<f64> {
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
}

fn describe(r: &RunResult) -> String {
    match (&r.error, &r.verdict) {
        (Some(e), _) => format!("error: {e}"),
        (None, Some(v)) => format!(
            "{:.0} records/s in {:.2} s, p50 {:.1} ms p99 {:.1} ms p99.9 {:.1} ms, lost {}, duplicates {}, violations {}, mismatches {}, rss {} MiB{}",
            v.rate,
            v.seconds,
            v.latency_ms[0],
            v.latency_ms[1],
            v.latency_ms[2],
            v.lost,
            v.duplicates,
            v.violations,
            v.mismatches,
            v.rss_kib / 1024,
            r.achieved_rate
                .map(|a| format!(", load achieved {a:.0} records/s"))
                .unwrap_or_default()
        ),
        (None, None) => "no result".into(),
    }
}

fn print_result(sc: &Scenario, sys: System, r: &RunResult) {
    eprintln!(
        "    {} {:<18} {} {}",
        sc.id,
        sys.name(),
        if r.ok() { "ok    " } else { "FAILED" },
        describe(r)
    );
}

/// The raw fetch limit on the same topic: orderly's own fetch loop without the engine, and Apache
/// Kafka's ConsumerPerformance.
#[derive(Debug, Clone, Default)]
struct RawFetch {
    orderly_fetch: Option<f64>,
    consumer_perf_fetch: Option<f64>,
    consumer_perf_total: Option<f64>,
}

async fn raw_fetch(ctx: &Ctx, sc: &Scenario, topic: &str) -> RawFetch {
    let mut r = RawFetch::default();
    if let Ok(out) = Command::new(ctx.bin.join("fetch"))
        .args([sc.records.to_string(), topic.to_owned()])
        .env("ORDERLY_BOOTSTRAP", &ctx.args.bootstrap)
        .output()
        .await
    {
        r.orderly_fetch = parse_kv(&String::from_utf8_lossy(&out.stdout), "fetch_rate");
    }
    let records = sc.records.to_string();
    if let Ok(out) = orderly_testkit::run_tool(
        "consumer-perf",
        &[
            "--bootstrap-server",
            &ctx.args.bootstrap,
            "--topic",
            topic,
            "--messages",
            &records,
            "--timeout",
            "60000",
        ],
        None,
    )
    .await
    {
        // CSV: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,
        // nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(line) = text.lines().rev().find(|l| l.split(',').count() >= 10) {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            r.consumer_perf_total = f[5].parse().ok();
            r.consumer_perf_fetch = f[9].parse().ok();
        }
    }
    eprintln!(
        "    raw fetch: orderly fetch loop {:?} records/s, ConsumerPerformance {:?} records/s (fetch phase)",
        r.orderly_fetch.map(|v| v.round()),
        r.consumer_perf_fetch.map(|v| v.round())
    );
    r
}

/// One step of the S2-max sweep.
#[derive(Debug, Clone)]
struct MaxStep {
    offered: u64,
    result: RunResult,
}

/// S2-max: offered rates from 50,000 records/s up, 10 s each, until p99 exceeds 200 ms, the load
/// generator cannot offer the rate, or the run fails.
async fn s2_max(ctx: &Ctx, base: &Scenario) -> Result<Vec<MaxStep>> {
    let mut steps = Vec::new();
    for rate in [50_000u64, 100_000, 150_000, 200_000, 300_000] {
        let sc = Scenario {
            records: (rate as f64 * base.seconds) as u64,
            rate,
            ..base.clone()
        };
        let r = run_one(ctx, &sc, System::Orderly, None).await;
        print_result(&sc, System::Orderly, &r);
        let p99 = r.verdict.as_ref().map_or(f64::MAX, |v| v.latency_ms[1]);
        let short = r.achieved_rate.is_some_and(|a| a < 0.95 * rate as f64);
        let stop = !r.ok() || p99 > 200.0 || short;
        steps.push(MaxStep {
            offered: rate,
            result: r,
        });
        if stop {
            break;
        }
    }
    Ok(steps)
}

/// Every run of every system in one scenario.
type Results = BTreeMap<System, Vec<RunResult>>;

#[derive(Default)]
struct Report {
    scenarios: Vec<(Scenario, Results, Vec<RawFetch>)>,
    s2max: Vec<MaxStep>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// Median of the passing runs' figure, `None` when no run passed.
fn med(runs: &[RunResult], f: impl Fn(&Verdict) -> f64) -> Option<f64> {
    median(
        runs.iter()
            .filter(|r| r.ok())
            .filter_map(|r| r.verdict.as_ref().map(&f))
            .collect(),
    )
}

fn fmt_rate(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| group_digits(v.round() as u64))
}

fn group_digits(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

async fn capture(cmd: &str, args: &[&str]) -> String {
    match Command::new(cmd).args(args).output().await {
        Ok(o) => {
            let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
            s.push_str(&String::from_utf8_lossy(&o.stderr));
            s.lines().next().unwrap_or_default().trim().to_owned()
        }
        Err(_) => "not installed".into(),
    }
}

async fn write_results(ctx: &Ctx, report: &Report, took: Duration) -> Result<()> {
    let commit = capture(
        "git",
        &[
            "-C",
            &ctx.root.display().to_string(),
            "rev-parse",
            "--short",
            "HEAD",
        ],
    )
    .await;
    let dirty = !capture(
        "git",
        &[
            "-C",
            &ctx.root.display().to_string(),
            "status",
            "--porcelain",
            "--untracked-files=no",
        ],
    )
    .await
    .is_empty();
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    let java = capture("java", &["-version"]).await;
    let go = capture("go", &["version"]).await;
    let rustc = capture("rustc", &["-V"]).await;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "<!-- bench:begin (written by `cargo xtask bench`; edits inside are overwritten) -->"
    );
    let _ = writeln!(
        md,
        "## Side by side: orderly, the seed's design in Go, Confluent Parallel Consumer\n"
    );
    let _ = writeln!(
        md,
        "Command: `{}` (commit `{commit}`{}, {} form, systems interleaved within each repetition; runs per system under each scenario; took {:.0} s).  ",
        ctx.args.command,
        if dirty {
            ", with uncommitted changes"
        } else {
            ""
        },
        if ctx.args.quick { "quick" } else { "full" },
        took.as_secs_f64()
    );
    let _ = writeln!(
        md,
        "Machine: {cores} cores, {mem_gib:.0} GiB RAM, {rustc}, {java}, {go}; one Apache Kafka {} broker (KRaft, loopback). \
         The machine is shared: absolute figures are context, the ratios measured in the same run are the result.\n",
        orderly_testkit::KAFKA_VERSION
    );
    let _ = writeln!(
        md,
        "Workload (every system): key = session id, 100-byte value, headers `event-id` and `seq`; a record fails transiently on its \
         first attempt when `fnv1a64(event-id) % m == 0` (m = 10: 10 %, m = 100: 1 %); retries: full jitter over \
         min(100 ms, 1 ms × 2^(n−1)). Throughput = records / (first record handed to a handler → end of the run after the final \
         commit). Latency = handler completion − CreateTime (live runs only; the first second is warm-up). Every run is checked by \
         the shared verifier (`benches/src/verify.rs`): lost, duplicates, ordering violations, attempt counts; a failed run counts \
         for nothing and is marked.\n"
    );
    let mut throughput_cats = Vec::new();
    let mut throughput_series: BTreeMap<System, Vec<Option<f64>>> = BTreeMap::new();
    let mut s3_points: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
    let mut s3_labels = Vec::new();
    let mut latency_charts = Vec::new();
    for (sc, results, raw) in &report.scenarios {
        let live = sc.rate > 0;
        let _ = writeln!(
            md,
            "### {}: {}\n\n{} records, {} sessions, {} partition(s){}{}; {} run(s) per system.\n",
            sc.id,
            sc.what,
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
        let orderly_rate = results
            .get(&System::Orderly)
            .and_then(|r| med(r, |v| v.rate));
        if live {
            let _ = writeln!(
                md,
                "| system | runs (p50 / p99 / p99.9 ms) | median p50 ms | median p99 ms | median p99.9 ms | load achieved records/s | lost / dup / violations | verdict |"
            );
            let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
        } else {
            let _ = writeln!(
                md,
                "| system | runs (records/s) | median records/s | orderly ÷ system | peak RSS MiB | lost / dup / violations | verdict |"
            );
            let _ = writeln!(md, "|---|---|---|---|---|---|---|");
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
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} | {} | {} | {loss} | {verdict} |",
                    sys.label(),
                    each.join(", "),
                    med(runs, |v| v.latency_ms[0]).map_or("–".into(), |v| format!("{v:.1}")),
                    med(runs, |v| v.latency_ms[1]).map_or("–".into(), |v| format!("{v:.1}")),
                    med(runs, |v| v.latency_ms[2]).map_or("–".into(), |v| format!("{v:.1}")),
                    fmt_rate(ach),
                );
            } else {
                let rate = med(runs, |v| v.rate);
                let ratio = match (orderly_rate, rate) {
                    (Some(o), Some(r)) if *sys != System::Orderly => format!("{:.1}×", o / r),
                    _ => "–".into(),
                };
                let rss = med(runs, |v| v.rss_kib as f64 / 1024.0)
                    .map_or("–".into(), |v| format!("{v:.0}"));
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {ratio} | {rss} | {loss} | {verdict} |",
                    sys.label(),
                    each.join(", "),
                    fmt_rate(rate)
                );
            }
        }
        if sc.fail_mod > 0 && !live {
            let (floor, k) = workload::backoff_floor(sc.records, sc.sessions, sc.fail_mod);
            let _ = writeln!(
                md,
                "\nRetry-policy floor: the slowest session has {k} failing records; their expected drawn backoffs add up to {:.0} ms \
                 (k × 0.5 ms), a floor of {} records/s.{}",
                floor.as_secs_f64() * 1e3,
                fmt_rate(Some(sc.records as f64 / floor.as_secs_f64().max(1e-9))),
                orderly_rate
                    .and_then(|o| results
                        .get(&System::Orderly)
                        .and_then(|r| med(r, |v| v.seconds))
                        .map(|s| (o, s)))
                    .map_or(String::new(), |(_, s)| format!(
                        " orderly's run time ÷ floor: {:.2}×.",
                        s / floor.as_secs_f64().max(1e-9)
                    ))
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
            s3_labels.push(label);
            for sys in &sc.systems {
                s3_points
                    .entry(sys.label().to_string())
                    .or_default()
                    .push(results.get(sys).and_then(|r| med(r, |v| v.rate)));
            }
            if sc.work_us == 0 {
                s3_points
                    .entry("raw fetch (orderly loop)".into())
                    .or_default()
                    .push(of);
                s3_points
                    .entry("ConsumerPerformance".into())
                    .or_default()
                    .push(cf);
            }
        }
        md.push('\n');
        if !live {
            throughput_cats.push(sc.id.clone());
            for sys in &ctx.systems {
                throughput_series
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
            latency_charts.push((
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
    if !report.s2max.is_empty() {
        let _ = writeln!(
            md,
            "### S2-max: the highest offered rate with p99 ≤ 200 ms (orderly)\n"
        );
        let _ = writeln!(
            md,
            "1,000 sessions, 12 partitions, no failures, 10 s per step, rates raised until p99 > 200 ms, the load generator falls short (< 95 %), or a run fails.\n"
        );
        let _ = writeln!(
            md,
            "| offered records/s | achieved records/s | p50 ms | p99 ms | p99.9 ms | verdict |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|");
        for s in &report.s2max {
            let v = s.result.verdict.as_ref();
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} |",
                group_digits(s.offered),
                fmt_rate(s.result.achieved_rate),
                v.map_or("–".into(), |v| format!("{:.1}", v.latency_ms[0])),
                v.map_or("–".into(), |v| format!("{:.1}", v.latency_ms[1])),
                v.map_or("–".into(), |v| format!("{:.1}", v.latency_ms[2])),
                if s.result.ok() {
                    "ok".into()
                } else {
                    describe(&s.result).replace('|', "/")
                }
            );
        }
        md.push('\n');
    }
    let results_dir = ctx.root.join("benches/results");
    std::fs::create_dir_all(&results_dir)?;
    if !throughput_cats.is_empty() {
        let series: Vec<Series> = throughput_series
            .iter()
            .map(|(sys, values)| Series {
                name: sys.label().into(),
                values: values.clone(),
            })
            .collect();
        std::fs::write(
            results_dir.join("throughput.svg"),
            svg::bars(
                "Backlog throughput (median)",
                "records/s",
                &throughput_cats,
                &series,
            ),
        )?;
        let _ = writeln!(
            md,
            "![throughput per system](benches/results/throughput.svg)\n"
        );
    }
    if !s3_labels.is_empty() {
        let series: Vec<Series> = s3_points
            .into_iter()
            .map(|(name, values)| Series { name, values })
            .collect();
        std::fs::write(
            results_dir.join("s3-curve.svg"),
            svg::lines(
                "S3: saturation by handler work",
                "records/s",
                &s3_labels,
                &series,
            ),
        )?;
        let _ = writeln!(md, "![S3 curve](benches/results/s3-curve.svg)\n");
    }
    for (file, body) in latency_charts {
        std::fs::write(results_dir.join(file), body)?;
    }
    let _ = writeln!(
        md,
        "Handler logs and each system's stderr of this run: `target/bench-runs/{}/`.",
        ctx.stamp
    );
    let _ = writeln!(md, "<!-- bench:end -->");
    let path = ctx.root.join("BENCHMARKS.md");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    let new = match (old.find("<!-- bench:begin"), old.find("<!-- bench:end -->")) {
        (Some(a), Some(b)) if b > a => {
            format!(
                "{}{}{}",
                &old[..a],
                md.trim_end(),
                &old[b + "<!-- bench:end -->".len()..]
            )
        }
        _ => format!("{}\n{}", old.trim_end(), md),
    };
    std::fs::write(&path, new)?;
    eprintln!("==> wrote BENCHMARKS.md and benches/results/*.svg");
    Ok(())
}
