//! The side-by-side benchmark harness behind `cargo xtask bench` (see BENCHMARKS.md).
//!
//! It builds the peers under `benches/peers/` (Go with `go build`, Java with `mvn package`), then
//! runs every selected scenario for every system, interleaved (repetition 1 of every system, then
//! repetition 2, ...; the order rotates, and S3's raw fetch takes its turn in it), against the
//! broker in `ORDERLY_BOOTSTRAP`. Before every run the page cache's dirty pages are written out
//! (`sync`), so no run pays for an earlier one's writes. Every run is checked by the shared
//! verifier; a run with a violation, a loss or a wrong attempt count is
//! failed whatever its speed. It writes the results between the `bench` markers of BENCHMARKS.md
//! and the charts to `benches/results/`.
//!
//! Scenarios with procedures of their own: S2-max (per system, doubling then bisection of the
//! offered rate until p99 > 200 ms, the load generator's shortfall reported), S4 (each system with
//! and without one session failing for 10 s; the others' latency compared), S6 (three processes
//! per system in one group, one killed with SIGKILL every 10 s and restarted; their logs merged).
//!
//! HTTP scenarios (S1-http, S1k-http, S2-http): every system posts the records to one shared
//! endpoint, `bench-http-server`, which fails 10 % of them once (503), checks order per session
//! from its side and writes the handler log the verifier reads: orderly as the product binary
//! (`orderly consume --http`, one record per request, and batched when the binary offers
//! `--http-batch-max`), the Go peer with a `net/http` client and Parallel Consumer's Vert.x module,
//! each peer tuned and as written.
//!
//! Reply scenarios (S1k-reply): every system answers each record with one reply to a reply topic
//! of its run (orderly's library with replies at-least-once and in its exactly-once mode, the Go
//! peer in franz-go's `GroupTransactSession`, Parallel Consumer in its transactional commit mode);
//! besides the handler log, every run's reply topic is read back with Apache Kafka's console
//! consumer in `read_committed` mode and checked by the one reply check
//! (`orderly_benches::replies`): every record's reply exactly once, in session order.
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
use orderly_benches::replies::{self, ReplyVerdict};
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
    /// Scenarios to run: ids (`S2` is S2 alone; `S3`, which is no id, selects S3-0, S3-100us and
    /// S3-1ms; `http` selects S1-http, S1k-http and S2-http) or `all` (default: all of the full
    /// form; the quick form leaves out S2-max, S4, S5 and S6 unless named).
    #[arg(long, value_delimiter = ',')]
    scenario: Vec<String>,
    /// Systems to run: a family (`orderly`, `go-seed`, `parallel-consumer`: each with its HTTP
    /// rows) or one row's name (`orderly-http`, `pc-vertx-tuned`, ...); default: every system
    /// whose toolchain is installed.
    #[arg(long, value_delimiter = ',')]
    systems: Vec<String>,
    /// Repetitions per scenario (default 3, 1 with --quick; in the full form S2, S3-100us, S3-1ms
    /// and S5 run once and S3-0 five times unless this is given).
    #[arg(long)]
    reps: Option<usize>,
    /// Do not write BENCHMARKS.md and the charts.
    #[arg(long)]
    no_write: bool,
    /// Records of every selected scenario instead of its own count (a live scenario offers its
    /// rate for records ÷ rate seconds): for a tiny check of the plumbing, not for figures.
    #[arg(long)]
    records: Option<u64>,
    /// Skip the broker warm-up before the first scenario (to measure what it changes).
    #[arg(long)]
    no_warmup: bool,
    #[arg(long, env = "ORDERLY_BOOTSTRAP")]
    bootstrap: String,
    /// The command line to quote in BENCHMARKS.md.
    #[arg(long, default_value = "cargo xtask bench")]
    command: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum System {
    /// orderly through the library with its default configuration (`bench-orderly`).
    Orderly,
    /// The product binary, `orderly run` with its default flags (backlog scenarios but S5): its
    /// own synthetic handler and report, measured beside `bench-orderly` in the same run.
    OrderlyRun,
    /// The Go peer tuned as a Go engineer tunes it, per scenario ([`go_tuned_args`]).
    GoSeedTuned,
    /// The Go peer as written: the design's own settings and franz-go's defaults.
    GoSeed,
    /// Parallel Consumer tuned with its documented settings, per scenario ([`pc_tuned_args`]).
    PcTuned,
    /// Parallel Consumer with the library's defaults (`maxConcurrency` 16, batch size 1,
    /// asynchronous periodic commits).
    ParallelConsumer,
    /// HTTP scenarios: the product binary, `orderly consume --http` with its default flags (one
    /// record per request).
    OrderlyHttp,
    /// HTTP scenarios: `orderly consume --http` sending several records of a session per request
    /// ([`ORDERLY_BATCH_ARGS`]); run only when `orderly consume --help` lists `--http-batch-max`.
    OrderlyHttpBatch,
    /// HTTP scenarios: the Go peer with a `net/http` client, tuned ([`GO_TUNED_ARGS`]).
    GoSeedHttpTuned,
    /// HTTP scenarios: the Go peer with a `net/http` client, as written (franz-go's defaults).
    GoSeedHttp,
    /// HTTP scenarios: Parallel Consumer's Vert.x module, tuned ([`PC_VERTX_TUNED_ARGS`]).
    PcVertxTuned,
    /// HTTP scenarios: Parallel Consumer's Vert.x module with its defaults.
    PcVertx,
    /// Reply scenarios: `bench-orderly` with the library's default configuration and a reply
    /// topic (replies at-least-once, written before their record counts as done).
    OrderlyReplies,
    /// Reply scenarios: the same in the library's exactly-once mode (`ConsumerConfig::exactly_once`).
    OrderlyExactlyOnce,
    /// Reply scenarios: the Go peer producing its replies in franz-go's `GroupTransactSession`
    /// transactions, tuned ([`go_tuned_args`]).
    GoSeedTransact,
    /// Reply scenarios: Parallel Consumer in its transactional commit mode, producing its replies
    /// with `pollAndProduce`, tuned ([`pc_tuned_args`], [`PC_TRANSACTIONAL_ARGS`]).
    PcTransactional,
}

/// The scenarios a system belongs to: it runs in those only, and its rows are compared with the
/// suite's [`Suite::reference`] row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Suite {
    /// An in-process handler writing the handler log (S1 ... S6).
    Handler,
    /// Every system posting to the shared HTTP endpoint (S1-http, S1k-http, S2-http).
    Http,
    /// An in-process handler answering each record with a reply (S1k-reply).
    Reply,
}

impl Suite {
    /// The row the others are compared with: orderly with its defaults.
    fn reference(self) -> System {
        match self {
            Suite::Handler => System::Orderly,
            Suite::Http => System::OrderlyHttp,
            Suite::Reply => System::OrderlyReplies,
        }
    }

    /// The file of the suite's backlog throughput chart, its title and its alt text.
    fn chart(self) -> [&'static str; 3] {
        match self {
            Suite::Handler => [
                "throughput.svg",
                "Backlog throughput (median)",
                "throughput per system",
            ],
            Suite::Http => [
                "throughput-http.svg",
                "HTTP endpoint, backlog throughput (median)",
                "HTTP throughput per system",
            ],
            Suite::Reply => [
                "throughput-replies.svg",
                "Replies, backlog throughput (median)",
                "reply throughput per system",
            ],
        }
    }
}

/// What the batched orderly row adds to `orderly consume --http`.
const ORDERLY_BATCH_ARGS: &[&str] = &["--http-batch-max", "64"];
/// The Go peer tuned as a Go engineer tunes franz-go (issue text of the peers' rows: a 20 ms fetch
/// max wait instead of franz-go's 5 s, a 10,000-record session channel instead of 256).
const GO_TUNED_ARGS: &[&str] = &["-fetch-max-wait", "20ms", "-session-chan", "10000"];
/// Parallel Consumer's transactional commit mode as the reply scenarios run it, with the mode's own
/// settings (a 100 ms commit interval, no processing while a transaction commits): a 1 s interval
/// and eager processing measured no better (benches/peers/README.md).
const PC_TRANSACTIONAL_ARGS: &[&str] = &["--commit-mode", "PERIODIC_TRANSACTIONAL_PRODUCER"];
/// Parallel Consumer's Vert.x module tuned: `maxConcurrency` 1000 (its README's example value;
/// the module sizes Vert.x's connection pool to it), against its default of 16.
const PC_VERTX_TUNED_ARGS: &[&str] = &["--max-concurrency", "1000"];

/// The Go peer's tuned settings in `sc` (benches/peers/README.md says why each): franz-go's fetch
/// max wait at 20 ms instead of 5 s, and each session's channel raised from the design's 256 to the
/// records the scenario gives a session where they are more (at most 10,000): a full channel
/// blocks the worker that feeds it, and with it every other session of that worker (S1: 5,000
/// records per session), while a channel far deeper than a session's records only adds memory the
/// garbage collector scans (S3: 10,000 sessions × 10,000 slots halved the rate).
fn go_tuned_args(sc: &Scenario) -> Vec<String> {
    let per_session = sc.records.div_ceil(sc.sessions.max(1)).clamp(256, 10_000);
    vec![
        "-fetch-max-wait".into(),
        "20ms".into(),
        "-session-chan".into(),
        per_session.to_string(),
    ]
}

/// Parallel Consumer's tuned settings in `sc` (benches/peers/README.md says why each):
/// `maxConcurrency` 1000, its README's example value, instead of the default 16. Its batch size
/// stays 1 (a batch fails and is retried as a whole, so it cannot express a record failing alone,
/// and where nothing fails it measured no faster) and its commit mode the default (asynchronous
/// periodic commits; the synchronous mode measured no faster).
fn pc_tuned_args(sc: &Scenario) -> Vec<String> {
    let _ = sc;
    vec!["--max-concurrency".into(), "1000".into()]
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Orderly => "orderly",
            System::OrderlyRun => "orderly-run",
            System::GoSeedTuned => "go-seed-tuned",
            System::GoSeed => "go-seed",
            System::PcTuned => "pc-tuned",
            System::ParallelConsumer => "parallel-consumer",
            System::OrderlyHttp => "orderly-http",
            System::OrderlyHttpBatch => "orderly-http-batch",
            System::GoSeedHttpTuned => "go-seed-http-tuned",
            System::GoSeedHttp => "go-seed-http",
            System::PcVertxTuned => "pc-vertx-tuned",
            System::PcVertx => "pc-vertx",
            System::OrderlyReplies => "orderly-replies",
            System::OrderlyExactlyOnce => "orderly-exactly-once",
            System::GoSeedTransact => "go-seed-transact",
            System::PcTransactional => "pc-transactional",
        }
    }
    fn label(self) -> &'static str {
        match self {
            System::Orderly => "orderly (library, default configuration)",
            System::OrderlyRun => "orderly run (the product binary, default flags)",
            System::GoSeedTuned => "seed design (Go, franz-go), tuned",
            System::GoSeed => "seed design (Go, franz-go), as written",
            System::PcTuned => "Parallel Consumer 0.5.3.3, tuned",
            System::ParallelConsumer => "Parallel Consumer 0.5.3.3, defaults",
            System::OrderlyHttp => "orderly consume --http (batch 1, default flags)",
            System::OrderlyHttpBatch => "orderly consume --http --http-batch-max 64",
            System::GoSeedHttpTuned => "seed design (Go, net/http), tuned",
            System::GoSeedHttp => "seed design (Go, net/http), as written",
            System::PcVertxTuned => "Parallel Consumer 0.5.3.3 Vert.x, tuned",
            System::PcVertx => "Parallel Consumer 0.5.3.3 Vert.x, defaults",
            System::OrderlyReplies => {
                "orderly (library, default configuration), replies at-least-once"
            }
            System::OrderlyExactlyOnce => "orderly (library, default configuration), exactly-once",
            System::GoSeedTransact => "seed design (Go, franz-go GroupTransactSession), tuned",
            System::PcTransactional => "Parallel Consumer 0.5.3.3 transactional, tuned",
        }
    }
    /// The system family `--systems` also accepts: `orderly`, `go-seed`, `parallel-consumer`.
    fn family(self) -> &'static str {
        match self {
            System::Orderly
            | System::OrderlyRun
            | System::OrderlyHttp
            | System::OrderlyHttpBatch
            | System::OrderlyReplies
            | System::OrderlyExactlyOnce => "orderly",
            System::GoSeedTuned
            | System::GoSeed
            | System::GoSeedHttpTuned
            | System::GoSeedHttp
            | System::GoSeedTransact => "go-seed",
            System::PcTuned
            | System::ParallelConsumer
            | System::PcVertxTuned
            | System::PcVertx
            | System::PcTransactional => "parallel-consumer",
        }
    }
    /// The scenarios this system belongs to.
    fn suite(self) -> Suite {
        match self {
            System::OrderlyHttp
            | System::OrderlyHttpBatch
            | System::GoSeedHttpTuned
            | System::GoSeedHttp
            | System::PcVertxTuned
            | System::PcVertx => Suite::Http,
            System::OrderlyReplies
            | System::OrderlyExactlyOnce
            | System::GoSeedTransact
            | System::PcTransactional => Suite::Reply,
            System::Orderly
            | System::OrderlyRun
            | System::GoSeedTuned
            | System::GoSeed
            | System::PcTuned
            | System::ParallelConsumer => Suite::Handler,
        }
    }
    /// Whether this peer row runs with its tuned settings ([`go_tuned_args`], [`pc_tuned_args`]).
    fn tuned(self) -> bool {
        matches!(
            self,
            System::GoSeedTuned
                | System::PcTuned
                | System::GoSeedTransact
                | System::PcTransactional
        )
    }
    /// What this system adds to its command line in the reply scenarios (the reply topic itself
    /// comes with [`RunOpts::reply_topic`]): its transactional mode.
    fn reply_args(self, group: &str) -> Vec<String> {
        match self {
            System::OrderlyExactlyOnce => vec!["--exactly-once".into()],
            System::GoSeedTransact => vec!["-transactional-id".into(), format!("{group}.txn")],
            System::PcTransactional => PC_TRANSACTIONAL_ARGS.iter().map(|a| (*a).into()).collect(),
            _ => Vec::new(),
        }
    }
    /// Whether this system runs in `sc`. The product binary runs the backlog scenarios but S5
    /// (its synthetic handler keeps a table of every session it saw, so S5's memory per session
    /// would be the handler's as much as orderly's). Scenarios with a procedure of their own
    /// (S2-max, S4, S6) run each peer tuned only: the best its user would do.
    fn runs_in(self, sc: &Scenario) -> bool {
        match self {
            System::OrderlyRun => sc.kind == Kind::Plain && sc.rate == 0 && sc.id != "S5",
            System::GoSeed | System::ParallelConsumer => sc.kind == Kind::Plain,
            _ => true,
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
    kind: Kind,
    /// How long a run may take after the load ended (live) or after it started (backlog).
    limit_s: f64,
}

/// Scenarios with a procedure of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One run per system and repetition.
    Plain,
    /// S2-max: a search for the highest rate with p99 ≤ 200 ms, per system.
    Max,
    /// S4: a run with one session stalled for 10 s against the same run without.
    Stall,
    /// S6: three processes in one group, one killed every 10 s and restarted.
    Crash,
    /// S1-http, S1k-http, S2-http: one run per system and repetition, every system posting the
    /// records to the shared endpoint (`bench-http-server`), which judges the run.
    Http,
    /// S1k-reply: one run per system and repetition, each record answered with a reply to a
    /// topic of the run, which is read back with `read_committed` and checked.
    Reply,
}

impl Kind {
    /// The systems that run in scenarios of this kind.
    fn suite(self) -> Suite {
        match self {
            Kind::Http => Suite::Http,
            Kind::Reply => Suite::Reply,
            Kind::Plain | Kind::Max | Kind::Stall | Kind::Crash => Suite::Handler,
        }
    }

    /// One run per system and repetition (no procedure of its own).
    fn repeated(self) -> bool {
        matches!(self, Kind::Plain | Kind::Http | Kind::Reply)
    }
}

/// What a run adds to a system's command line.
#[derive(Debug, Clone, Default)]
struct RunOpts {
    /// S4: (session index, stall from ms after the first record handled, for ms).
    stall: Option<(u64, u64, u64)>,
    /// S6: write every log line with its own `write`, run until killed, 10 s session timeout.
    crash: bool,
    /// Reply scenarios: the topic the system's replies go to.
    reply_topic: Option<String>,
}

/// S4's stalled session, its start after the first record handled, and its length.
const STALL: (u64, u64, u64) = (7, 2_000, 10_000);

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
    /// The load generator's own p99 from CreateTime to the broker's acknowledgement, ms (live
    /// runs): the part of every system's latency that is the producer's and the broker's.
    load_ack_p99_ms: Option<f64>,
    /// HTTP scenarios: what the shared endpoint reported.
    http: Option<HttpReport>,
    /// Reply scenarios: the reply check of the reply topic read with `read_committed`.
    replies: Option<ReplyVerdict>,
}

impl RunResult {
    fn ok(&self) -> bool {
        self.error.is_none()
            && self.verdict.as_ref().is_some_and(Verdict::ok)
            && self.http.as_ref().is_none_or(|h| h.violations() == 0)
            && self.replies.as_ref().is_none_or(ReplyVerdict::ok)
    }

    fn failed(error: String) -> Self {
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

/// The JSON report of `bench-http-server` (the fields the harness reads).
#[derive(Debug, Clone, Default, serde::Deserialize)]
struct HttpReport {
    requests: u64,
    batches: u64,
    records_sent: u64,
    transient: u64,
    violations_in_flight: u64,
    violations_sequence: u64,
    violations_batch: u64,
    duplicates: u64,
    unreadable: u64,
    /// CreateTime → done answer over every record (a backlog's is mostly time spent waiting).
    latency_p50_ms: f64,
    latency_p99_ms: f64,
}

impl HttpReport {
    /// Order violations seen from the endpoint's side, and requests it could not read.
    fn violations(&self) -> u64 {
        self.violations_in_flight
            + self.violations_sequence
            + self.violations_batch
            + self.unreadable
    }

    /// Records per request (a record sent again counts again).
    fn per_request(&self) -> f64 {
        self.records_sent as f64 / self.requests.max(1) as f64
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
        systems.extend([System::OrderlyReplies, System::OrderlyExactlyOnce]);
        // The HTTP scenarios run the product binary, built next to this one by `cargo xtask bench`.
        if bin.join("orderly").exists() {
            systems.extend([System::OrderlyRun, System::OrderlyHttp]);
            if orderly_batches(&bin).await {
                systems.push(System::OrderlyHttpBatch);
            } else {
                eprintln!(
                    "    orderly consume --help lists no --http-batch-max: the batched orderly row of the HTTP scenarios is left out"
                );
            }
        } else {
            eprintln!(
                "    no orderly binary next to the harness ({}): no `orderly run` row, and the HTTP scenarios run without orderly",
                bin.join("orderly").display()
            );
        }
        if build_go(&root).await {
            systems.extend([
                System::GoSeedTuned,
                System::GoSeed,
                System::GoSeedHttpTuned,
                System::GoSeedHttp,
                System::GoSeedTransact,
            ]);
        }
        if build_pc(&root).await {
            systems.extend([
                System::PcTuned,
                System::ParallelConsumer,
                System::PcVertxTuned,
                System::PcVertx,
                System::PcTransactional,
            ]);
        }
    }
    systems.sort();
    if !args.systems.is_empty() {
        systems.retain(|s| {
            args.systems
                .iter()
                .any(|n| n == s.name() || n == s.family())
        });
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
    if !(args.smoke || args.no_warmup) {
        warm_up(&ctx).await?;
    }
    let mut report = Report::default();
    let mut backlog_topics: BTreeMap<(u64, u64, i32, usize), String> = BTreeMap::new();
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
        match sc.kind {
            Kind::Plain | Kind::Http | Kind::Reply => {}
            Kind::Max => {
                let searches = s2_max_all(&ctx, sc, if args.quick { 4 } else { 7 }).await;
                report.s2max = Some((sc.clone(), searches));
                continue;
            }
            Kind::Stall => {
                let mut rows = StallRows::new();
                for rep in 0..reps.min(if args.reps.is_some() { reps } else { 1 }) {
                    let mut order = sc.systems.clone();
                    let n = order.len().max(1);
                    order.rotate_left(rep % n);
                    for sys in order {
                        let base = run_one(&ctx, sc, sys, None, &RunOpts::default()).await;
                        print_result(sc, sys, &base);
                        let stalled = RunOpts {
                            stall: Some(STALL),
                            ..RunOpts::default()
                        };
                        let r = run_one(&ctx, sc, sys, None, &stalled).await;
                        print_result(sc, sys, &r);
                        rows.entry(sys).or_default().push((base, r));
                    }
                }
                report.s4 = Some((sc.clone(), rows));
                continue;
            }
            Kind::Crash => {
                let mut rows = Vec::new();
                for sys in &sc.systems {
                    let r = run_crash(&ctx, sc, *sys).await;
                    eprintln!(
                        "    {} {:<18} {} crashes, {} processes: {} {}",
                        sc.id,
                        sys.name(),
                        r.crashes,
                        r.processes,
                        if r.result.ok() { "ok    " } else { "FAILED" },
                        describe(&r.result)
                    );
                    rows.push((*sys, r));
                }
                report.s6 = Some((sc.clone(), rows));
                continue;
            }
        }
        // The long scenarios run once per system in the full form unless --reps says otherwise
        // (S2 offers 60 s of load; S3 reads 1,000,000 records per work level, S5 5,000,000; S1-p1
        // is S1 on one partition), so that the full form stays within 30 minutes. S3-0 is the
        // exception: its goal is a ratio of two ~1 s runs, and single runs of either can move by
        // a quarter from one run to the next on a shared machine, so in
        // the full form it runs five times, each repetition with its raw fetch, and the medians
        // are compared.
        let long = sc.id == "S2" || (sc.id.starts_with("S3") && sc.id != "S3-0") || sc.id == "S5";
        let reps = match args.reps {
            None if long => 1,
            None if sc.id == "S3-0" && !(args.quick || args.smoke) => 5,
            _ => reps,
        };
        let mut results: BTreeMap<System, Vec<RunResult>> = BTreeMap::new();
        let mut raw = Vec::new();
        for rep in 0..reps {
            // Backlog scenarios: one topic per repetition, consumed by every system in its own group.
            // The S3 work levels share their topics (same records; each system and level reads
            // it in a group of its own).
            let shared_topic = if sc.rate == 0 {
                let key = (sc.records, sc.sessions, sc.partitions, rep);
                match backlog_topics.get(&key) {
                    Some(t) => Some(t.clone()),
                    None => {
                        let t = ctx.unique(&sc.id.to_lowercase());
                        seed_topic(&ctx, sc, &t).await?;
                        backlog_topics.insert(key, t.clone());
                        Some(t)
                    }
                }
            } else {
                None
            };
            // The S3 raw fetch takes its turn in the rotation like a system (`None`), so it is not
            // always measured in the same place, after the slowest system.
            let raw_topic = shared_topic.as_deref().filter(|_| sc.id.starts_with("S3"));
            let mut order: Vec<Option<System>> = sc.systems.iter().copied().map(Some).collect();
            if raw_topic.is_some() {
                order.push(None);
            }
            let n = order.len().max(1);
            order.rotate_left(rep % n);
            for slot in order {
                match (slot, raw_topic) {
                    (Some(sys), _) => {
                        let r =
                            run_one(&ctx, sc, sys, shared_topic.as_deref(), &RunOpts::default())
                                .await;
                        print_result(sc, sys, &r);
                        results.entry(sys).or_default().push(r);
                    }
                    (None, Some(t)) => raw.push(raw_fetch(&ctx, sc, t).await),
                    (None, None) => {}
                }
            }
        }
        if let Some(floor) = floor_report(sc, &results) {
            eprintln!("    {floor}");
        }
        if let Some(r) = product_ratio(&results) {
            eprintln!(
                "    the product binary (orderly run) ÷ the library (bench-orderly), medians: {:.0} %",
                r * 100.0
            );
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
        .chain(report.s4.iter().flat_map(|(sc, rows)| {
            rows.iter().flat_map(move |(sys, runs)| {
                runs.iter()
                    .flat_map(|(a, b)| [a, b])
                    .filter(|r| !r.ok())
                    .map(move |r| format!("{} {}: {}", sc.id, sys.name(), describe(r)))
            })
        }))
        .chain(report.s6.iter().flat_map(|(sc, rows)| {
            rows.iter()
                .filter(|(_, r)| !r.result.ok())
                .map(move |(sys, r)| format!("{} {}: {}", sc.id, sys.name(), describe(&r.result)))
        }))
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
    let suite = |kind: Kind| -> Vec<System> {
        systems
            .iter()
            .copied()
            .filter(|s| s.suite() == kind.suite())
            .collect()
    };
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
            systems: suite(Kind::Plain),
            kind: Kind::Plain,
            limit_s: if rate > 0 { 60.0 } else { 300.0 },
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
    let mut s2 = sc(
        "S2",
        "50,000 records/s offered, 1 % transient",
        (50_000.0 * s2_secs) as u64,
        1_000,
        100,
        0,
        50_000,
        s2_secs,
    );
    // A system that falls minutes behind the load has failed S2 anyway.
    s2.limit_s = 30.0;
    v.push(s2);
    let mut m = sc(
        "S2-max",
        "highest offered rate with p99 <= 200 ms",
        0,
        1_000,
        0,
        0,
        0,
        if q { 4.0 } else { 6.0 },
    );
    m.kind = Kind::Max;
    // A step whose records are not all handled 10 s after the load ended did not hold.
    m.limit_s = 10.0;
    v.push(m);
    let s3_records = if q { 200_000 } else { 1_000_000 };
    // Bounded (Parallel Consumer reads ~8,000 records/s here: 1,000,000 would take 2 minutes
    // per work level); a run still reading at the limit is reported as not finished.
    let s3_limit = if q { 60.0 } else { 120.0 };
    let mut s3 = sc(
        "S3-0",
        "saturation, no handler work",
        s3_records,
        10_000,
        0,
        0,
        0,
        0.0,
    );
    s3.limit_s = s3_limit;
    v.push(s3);
    if !q {
        for (id, what, work) in [
            ("S3-100us", "saturation, 100 µs handler work", 100),
            ("S3-1ms", "saturation, 1 ms handler work", 1_000),
        ] {
            let mut s3 = sc(id, what, s3_records, 10_000, 0, work, 0, 0.0);
            s3.limit_s = s3_limit;
            v.push(s3);
        }
    }
    // S4: live at a rate every system holds on this machine (Parallel Consumer falls seconds
    // behind at S2's 50,000 records/s, which would measure its backlog, not the isolation).
    let s4_rate = 5_000;
    let s4_secs = (STALL.1 + STALL.2) as f64 / 1000.0 + 3.0;
    let mut s4 = sc(
        "S4",
        "slow-session isolation: one session failing for 10 s, 1 % transient",
        (s4_rate as f64 * s4_secs) as u64,
        1_000,
        100,
        0,
        s4_rate,
        s4_secs,
    );
    s4.kind = Kind::Stall;
    // The HTTP scenarios: every system posts each record to the shared endpoint
    // (`bench-http-server`), which fails 10 % of records once (503) and checks order per session.
    let http_records = if q { 20_000 } else { 50_000 };
    let http_secs = if q { 5.0 } else { 10.0 };
    for (id, what, records, sessions, rate, seconds) in [
        (
            "S1-http",
            "HTTP endpoint, backlog, 10 % answered 503 once",
            http_records,
            10,
            0,
            0.0,
        ),
        (
            "S1k-http",
            "HTTP endpoint, backlog, 1,000 sessions, 10 % answered 503 once",
            http_records,
            1_000,
            0,
            0.0,
        ),
        (
            "S2-http",
            "HTTP endpoint, 10,000 records/s offered, 10 % answered 503 once",
            (10_000.0 * http_secs) as u64,
            10,
            10_000,
            http_secs,
        ),
    ] {
        let mut h = sc(id, what, records, sessions, 10, 0, rate, seconds);
        h.kind = Kind::Http;
        h.systems = suite(Kind::Http);
        v.push(h);
    }
    // The reply scenario: S1-1k's backlog, each record answered with one reply, every run's reply
    // topic read back with read_committed and checked (`orderly_benches::replies`). The injected
    // failures stay: every system retries a failed record in place before its reply is produced,
    // in its transactional mode too.
    let mut r = sc(
        "S1k-reply",
        "replies, backlog, 1,000 sessions, 10 % transient",
        if q { 20_000 } else { 50_000 },
        1_000,
        10,
        0,
        0,
        0.0,
    );
    r.kind = Kind::Reply;
    r.systems = suite(Kind::Reply);
    v.push(r);
    v.push(s4);
    let (s5_records, s5_sessions) = if q {
        (1_000_000, 200_000)
    } else {
        (5_000_000, 1_000_000)
    };
    let mut s5 = sc("S5", "many sessions", s5_records, s5_sessions, 0, 0, 0, 0.0);
    // Bounded: a system still reading after this has its peak RSS so far reported.
    s5.limit_s = if q { 60.0 } else { 200.0 };
    v.push(s5);
    let s6_secs = if q { 25.0 } else { 45.0 };
    let mut s6 = sc(
        "S6",
        "crash and rebalance: 3 processes, one killed (SIGKILL) every 10 s, 1 % transient",
        (3_000.0 * s6_secs) as u64,
        1_000,
        100,
        0,
        3_000,
        s6_secs,
    );
    s6.kind = Kind::Crash;
    v.push(s6);
    if args.scenario.is_empty() {
        // The quick form's default keeps to 5 minutes: S2-max, S4, S5 and S6 take minutes each
        // (S4 and S6 are bound by their 10 s stall and crash period); `--scenario all` adds them.
        if q {
            v.retain(|s| s.kind.repeated() && s.id != "S5");
        }
    } else if !args.scenario.iter().any(|w| w == "all") {
        // A name picks the scenario of that id; a name no scenario has picks its family (`S3`:
        // S3-0, S3-100us, S3-1ms). So `S2` is S2 alone, not S2-max too. `http` picks the HTTP
        // scenarios.
        let ids: Vec<String> = v.iter().map(|s| s.id.clone()).collect();
        v.retain(|s| {
            args.scenario.iter().any(|w| {
                s.id == *w
                    || (w == "http" && s.kind == Kind::Http)
                    || (!ids.contains(w) && s.id.starts_with(&format!("{w}-")))
            })
        });
    }
    for s in &mut v {
        let keep: Vec<System> = s.systems.iter().copied().filter(|x| x.runs_in(s)).collect();
        s.systems = keep;
    }
    if let Some(n) = args.records {
        for s in v.iter_mut().filter(|s| s.kind.repeated()) {
            s.records = n;
            if s.rate > 0 {
                s.seconds = n as f64 / s.rate as f64;
            }
        }
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

/// Waits (up to 30 s) until the broker's metadata lists `topic` with its `partitions`.
async fn wait_for_topic(ctx: &Ctx, topic: &str, partitions: i32) -> Result<()> {
    let client = orderly_testkit::client(&ctx.args.bootstrap).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = client
            .list_topics()
            .await
            .with_context(|| format!("listing topics for {topic}"))?
            .into_iter()
            .any(|t| t.name == topic && t.partitions.len() == partitions as usize);
        if listed {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("{topic} not in the broker's metadata 30 s after it was created");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

#[allow(clippy::too_many_arguments)]
fn system_command(
    ctx: &Ctx,
    sys: System,
    topic: &str,
    group: &str,
    dlq: &str,
    sc: &Scenario,
    log: &Path,
    opts: &RunOpts,
) -> Command {
    // S6 processes run until they are killed.
    let records = if opts.crash { u64::MAX / 4 } else { sc.records }.to_string();
    let fail = sc.fail_mod.to_string();
    let work = sc.work_us.to_string();
    let log = log.display().to_string();
    let b = &ctx.args.bootstrap;
    // The same options in each system's spelling: `--x v` (orderly, Java) or `-x v` (Go).
    let mut extra: Vec<(&str, String)> = Vec::new();
    if let Some((s, after, len)) = opts.stall {
        extra.push(("stall-session", workload::session_key(s as usize)));
        extra.push(("stall-after-ms", after.to_string()));
        extra.push(("stall-for-ms", len.to_string()));
    }
    if let Some(t) = &opts.reply_topic {
        extra.push(("reply-topic", t.clone()));
    }
    if opts.crash {
        extra.push(("log-flush", "true".into()));
        // orderly's bench runs with a 10 s session timeout; the peers get the same in S6.
        match sys.family() {
            "go-seed" => extra.push(("session-timeout", "10s".into())),
            "parallel-consumer" => extra.push(("session-timeout-ms", "10000".into())),
            _ => {}
        }
    }
    let extra_args = |dash: &str| -> Vec<String> {
        extra
            .iter()
            .flat_map(|(k, v)| {
                if *k == "log-flush" && dash == "--" && sys == System::Orderly {
                    vec![format!("--{k}")]
                } else if *k == "log-flush" && dash == "-" {
                    vec![format!("-{k}={v}")]
                } else {
                    vec![format!("{dash}{k}"), v.clone()]
                }
            })
            .collect()
    };
    // The HTTP scenarios' systems are started by `http_command`; here each runs as its family.
    match sys.family() {
        "orderly" => {
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
            c.args(extra_args("--"));
            c.args(sys.reply_args(group));
            c
        }
        "go-seed" => {
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
            if sys.tuned() {
                c.args(go_tuned_args(sc));
            }
            c.args(extra_args("-"));
            c.args(sys.reply_args(group));
            c
        }
        _ => {
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
            if sys.tuned() {
                c.args(pc_tuned_args(sc));
            }
            c.args(extra_args("--"));
            c.args(sys.reply_args(group));
            c
        }
    }
}

/// Writes the page cache's dirty pages to disk (`sync`) before a measured run. Seeding a
/// backlog topic leaves ~140 MB per million records dirty, and earlier scenarios more; the
/// kernel writes them back 30 s later (`vm.dirty_expire_centisecs`), in whichever run happens to
/// be going then. After this, each run starts with the same clean page cache, and the broker's
/// data stays cached for reading.
async fn settle() {
    if let Err(e) = Command::new("sync").status().await {
        eprintln!("    (sync failed: {e}; runs may share the disk with write-back)");
    }
}

/// Runs one system on one scenario: starts it, waits until it owns partitions, offers the live
/// load if the scenario has one, waits for it to finish (bounded), and verifies its log.
async fn run_one(
    ctx: &Ctx,
    sc: &Scenario,
    sys: System,
    shared_topic: Option<&str>,
    opts: &RunOpts,
) -> RunResult {
    settle().await;
    let r = if sc.kind == Kind::Http {
        run_http(ctx, sc, sys, shared_topic).await
    } else if sys == System::OrderlyRun {
        run_product(ctx, sc, shared_topic).await
    } else {
        run_one_inner(ctx, sc, sys, shared_topic, opts).await
    };
    r.unwrap_or_else(|e| RunResult::failed(format!("{e:#}")))
}

/// A started system: its process, the highest `VmHWM` seen of it (sampled from /proc, so a
/// process that is killed still has a figure), and whether it reported `READY`.
struct Running {
    child: tokio::process::Child,
    peak_kib: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ready: tokio::sync::watch::Receiver<bool>,
    stderr_path: PathBuf,
}

impl Running {
    fn peak_kib(&self) -> u64 {
        self.peak_kib.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits up to `limit` for `READY`.
    async fn wait_ready(&mut self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.ready.wait_for(|r| *r))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

#[allow(clippy::too_many_arguments)]
fn spawn_system(
    ctx: &Ctx,
    sc: &Scenario,
    sys: System,
    topic: &str,
    group: &str,
    dlq: &str,
    log: &Path,
    stderr_path: &Path,
    opts: &RunOpts,
) -> Result<Running> {
    let mut cmd = system_command(ctx, sys, topic, group, dlq, sc, log, opts);
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(stderr_path)?))
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", sys.name()))?;
    let stdout = child.stdout.take().context("stdout")?;
    let (tx, ready) = tokio::sync::watch::channel(false);
    // Read its stdout to the end (so it never blocks on a full pipe), noting READY.
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            if l.trim() == "READY" {
                let _ = tx.send(true);
            }
        }
    });
    let peak_kib = sample_peak(child.id());
    Ok(Running {
        child,
        peak_kib,
        ready,
        stderr_path: stderr_path.to_path_buf(),
    })
}

/// The highest `VmHWM` of process `pid`, sampled from /proc every 200 ms while it lives.
fn sample_peak(pid: Option<u32>) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    let peak_kib = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    if let Some(pid) = pid {
        let peak = peak_kib.clone();
        tokio::spawn(async move {
            let path = format!("/proc/{pid}/status");
            while let Ok(text) = std::fs::read_to_string(&path) {
                if let Some(kib) = text
                    .lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    peak.fetch_max(kib, std::sync::atomic::Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }
    peak_kib
}

/// Runs the product binary, `orderly run`, with its default flags on a backlog topic: the
/// engine and the Kafka driver behind the CLI's wiring, its synthetic handler (a record fails
/// once when `fnv1a64(event-id) % 100 < pct`, the scenario's share of failures by the product's
/// own rule) and its report, which the run is judged by: records terminal (short of the
/// scenario's count: lost), ordering violations seen by the handler and by the engine's `seq`
/// checker, replays (counted as duplicates), and the rate from the first record handed to the
/// handler to the end of the run (the final commit and the LeaveGroup included).
async fn run_product(ctx: &Ctx, sc: &Scenario, shared_topic: Option<&str>) -> Result<RunResult> {
    let topic = shared_topic.context("the product binary runs backlog scenarios only")?;
    let group = format!(
        "{topic}-{}-{}",
        sc.id.to_lowercase(),
        System::OrderlyRun.name()
    );
    // `orderly run`'s default dead-letter topic, `<group>.dlq`, which must exist.
    create_topic(ctx, &format!("{group}.dlq"), 1).await?;
    let stderr_path = ctx.runs_dir.join(format!("{group}.stderr"));
    let pct = 100u64.checked_div(sc.fail_mod).unwrap_or(0);
    let mut c = Command::new(ctx.bin.join("orderly"));
    c.args(["run", "--bootstrap", &ctx.args.bootstrap])
        .args(["--topic", topic, "--group", &group])
        .args(["--records", &sc.records.to_string()])
        .args(["--transient-pct", &pct.to_string()])
        .args(["--work-us", &sc.work_us.to_string()])
        // The product's own logging, as a user runs it.
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&stderr_path)?))
        .kill_on_drop(true);
    let child = c.spawn().context("starting orderly run")?;
    let peak = sample_peak(child.id());
    let limit = Duration::from_secs_f64(sc.limit_s);
    let out = match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(out) => out.context("waiting for orderly run")?,
        Err(_) => bail!("did not finish within {} s: killed", limit.as_secs()),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut v = parse_run_report(&text, sc.records).with_context(|| {
        format!(
            "orderly run exited with {} and no report (see {})",
            out.status,
            stderr_path.display()
        )
    })?;
    v.rss_kib = peak.load(std::sync::atomic::Ordering::Relaxed);
    Ok(RunResult {
        verdict: Some(v),
        error: None,
        achieved_rate: None,
        load_ack_p99_ms: None,
        http: None,
        replies: None,
    })
}

/// Reads the report `orderly run` prints (crates/cli/src/report.rs) into a verdict for a run of
/// `records` records; `None` if a figure is missing.
fn parse_run_report(text: &str, records: u64) -> Option<Verdict> {
    let field = |name: &str| -> Option<&str> {
        text.lines()
            .find_map(|l| l.trim_start().strip_prefix(name))
            .map(str::trim_start)
    };
    let first_number = |s: &str| -> Option<f64> {
        s.split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .find(|w| !w.is_empty())?
            .parse()
            .ok()
    };
    let terminal = first_number(field("records terminal")?)? as u64;
    let retried = first_number(field("transient retries")?)? as u64;
    let replays = first_number(field("replays")?)? as u64;
    let violations = field("ordering violations")?;
    let (handler, engine) = violations.split_once('/')?;
    let violations = first_number(handler)? as u64 + first_number(engine)? as u64;
    let rate = text
        .lines()
        .find(|l| l.contains("records/s from the first record"))
        .and_then(|l| first_number(l.trim_start().strip_prefix("throughput")?))?;
    Some(Verdict {
        seen: terminal.min(records),
        lost: records.saturating_sub(terminal),
        duplicates: replays,
        violations,
        retried,
        seconds: terminal as f64 / rate.max(1e-9),
        rate,
        ..Verdict::default()
    })
}

/// The product binary's median rate ÷ the library's (`bench-orderly`) in one scenario, if both ran.
fn product_ratio(results: &Results) -> Option<f64> {
    let lib = results
        .get(&System::Orderly)
        .and_then(|r| med(r, |v| v.rate))?;
    let product = results
        .get(&System::OrderlyRun)
        .and_then(|r| med(r, |v| v.rate))?;
    Some(product / lib)
}

/// Starts the open-loop load generator as a process of its own.
fn start_load(
    ctx: &Ctx,
    topic: &str,
    sessions: u64,
    rate: u64,
    seconds: f64,
) -> Result<tokio::process::Child> {
    Command::new(ctx.bin.join("bench-load"))
        .args(["--bootstrap", &ctx.args.bootstrap, "--topic", topic])
        .args(["--sessions", &sessions.to_string()])
        .args([
            "--rate",
            &rate.to_string(),
            "--seconds",
            &seconds.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting bench-load")
}

/// Waits for the load generator; returns the rate it achieved and its own CreateTime →
/// acknowledged p99 (ms).
async fn finish_load(load: tokio::process::Child) -> Result<(Option<f64>, Option<f64>)> {
    let out = load
        .wait_with_output()
        .await
        .context("running bench-load")?;
    if !out.status.success() {
        bail!(
            "load generator failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // The producer's own latency (CreateTime → acknowledged by the broker) is part of every
    // system's latency; printed so a reader can tell the broker's share from the consumer's.
    let ack_p99 = parse_kv(&text, "ack_p99_ms");
    if let (Some(p50), Some(p99)) = (parse_kv(&text, "ack_p50_ms"), ack_p99) {
        eprintln!(
            "      load: CreateTime -> produce acknowledged p50 {p50:.1} ms, p99 {p99:.1} ms"
        );
    }
    Ok((parse_kv(&text, "achieved_rate"), ack_p99))
}

fn expected(sc: &Scenario) -> Expected {
    Expected {
        records: sc.records,
        sessions: sc.sessions,
        fail_mod: sc.fail_mod,
        // The HTTP endpoint fails a record by its own rule (that of `orderly_testkit::webhook`).
        fail_pct: (sc.kind == Kind::Http).then_some(HTTP_TRANSIENT_PCT),
        // Live runs: the first second is warm-up for every system (JIT, connections).
        warmup: if sc.rate > 0 {
            Duration::from_secs(1)
        } else {
            Duration::ZERO
        },
        // S4: the stalled session is left out of the latency of the others in both runs, so
        // the two runs compare the same sessions.
        stalled_session: (sc.kind == Kind::Stall).then_some(STALL.0),
    }
}

async fn run_one_inner(
    ctx: &Ctx,
    sc: &Scenario,
    sys: System,
    shared_topic: Option<&str>,
    opts: &RunOpts,
) -> Result<RunResult> {
    let topic = match shared_topic {
        Some(t) => t.to_owned(),
        None => {
            let t = ctx.unique(&sc.id.to_lowercase());
            create_topic(ctx, &t, sc.partitions).await?;
            t
        }
    };
    let group = format!(
        "{topic}-{}-{}{}",
        sc.id.to_lowercase(),
        sys.name(),
        if opts.stall.is_some() { "-stall" } else { "" }
    );
    let dlq = format!("{group}.dlq");
    create_topic(ctx, &dlq, 1).await?;
    // Reply scenarios: a reply topic of the run's own, as many partitions as the input.
    let reply_topic = if sc.kind == Kind::Reply {
        let t = format!("{group}.replies");
        create_topic(ctx, &t, sc.partitions).await?;
        // Until the broker's metadata lists it, a producer's first write waits out its own
        // unknown-topic backoff (franz-go's took seconds), which would be timed as the system's.
        wait_for_topic(ctx, &t, sc.partitions).await?;
        Some(t)
    } else {
        None
    };
    let opts = &RunOpts {
        reply_topic: reply_topic.clone(),
        ..opts.clone()
    };
    let log = ctx.runs_dir.join(format!("{group}.log"));
    let stderr_path = ctx.runs_dir.join(format!("{group}.stderr"));
    let mut run = spawn_system(ctx, sc, sys, &topic, &group, &dlq, &log, &stderr_path, opts)?;
    if !run.wait_ready(Duration::from_secs(60)).await {
        let _ = run.child.kill().await;
        bail!(
            "{} never got partitions (see {})",
            sys.name(),
            stderr_path.display()
        );
    }
    let (mut achieved, mut ack_p99) = (None, None);
    if sc.rate > 0 {
        let load = start_load(ctx, &topic, sc.sessions, sc.rate, sc.seconds)?;
        match finish_load(load).await {
            Ok((a, p)) => (achieved, ack_p99) = (a, p),
            Err(e) => {
                let _ = run.child.kill().await;
                return Err(e);
            }
        }
    }
    let limit = Duration::from_secs_f64(sc.limit_s);
    let mut error = None;
    match tokio::time::timeout(limit, run.child.wait()).await {
        Ok(Ok(st)) if st.success() => {}
        Ok(Ok(st)) => bail!(
            "{} exited with {st} (see {})",
            sys.name(),
            run.stderr_path.display()
        ),
        Ok(Err(e)) => bail!("waiting for {}: {e}", sys.name()),
        Err(_) => {
            let _ = run.child.kill().await;
            error = Some(format!(
                "did not finish within {} s{}: killed",
                limit.as_secs(),
                if sc.rate > 0 {
                    " of the end of the load"
                } else {
                    ""
                }
            ));
        }
    }
    let (_, mut v) = verify::verify_files(std::slice::from_ref(&log), &expected(sc))?;
    v.rss_kib = v.rss_kib.max(run.peak_kib());
    if sc.rate > 0 && v.seen > 0 && v.latency_samples == 0 && error.is_none() {
        // Seen once (a Go run of S1-live at 681bb85): READY printed, then no handler call until
        // 5 s later, after the whole load. Its percentiles would be zeros that count as the
        // best run in the median.
        error = Some(
            "handled no record created after its warm-up (its first handler call came after the \
             load): it was not consuming while the load ran, so there is no latency to report"
                .to_owned(),
        );
    }
    if let Some(e) = &mut error {
        let _ = write!(e, " after {} of {} records", v.seen, sc.records);
    }
    // Whatever the system did, its reply topic holds what a read_committed reader gets.
    let replies = match &reply_topic {
        Some(t) => {
            let seen = replies::read_committed(&ctx.args.bootstrap, t, REPLY_READ_IDLE).await?;
            Some(replies::check(&seen, sc.records, sc.sessions))
        }
        None => None,
    };
    Ok(RunResult {
        verdict: Some(v),
        error,
        achieved_rate: achieved,
        load_ack_p99_ms: ack_p99,
        http: None,
        replies,
    })
}

/// How long the reply check's reader waits for another record before it counts what it read: the
/// system has exited by then, so what is committed is all there.
const REPLY_READ_IDLE: Duration = Duration::from_secs(5);

/// The share of records the HTTP endpoint answers 503 on their first attempt.
const HTTP_TRANSIENT_PCT: u64 = 10;

/// Whether this build of `orderly consume` can send several records per request.
async fn orderly_batches(bin: &Path) -> bool {
    Command::new(bin.join("orderly"))
        .args(["consume", "--help"])
        .output()
        .await
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--http-batch-max"))
}

/// A free port on 127.0.0.1 (for orderly's admin endpoint).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Polls orderly's `/readyz` until it answers 200 (it holds its partitions and fetches).
async fn orderly_ready(port: u16, tx: tokio::sync::watch::Sender<bool>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        if let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            let _ = s
                .write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                .await;
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf).await;
            if buf.starts_with(b"HTTP/1.1 200") {
                let _ = tx.send(true);
                return;
            }
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The command line of an HTTP-scenario system posting to `url`, and, for orderly, the port of
/// its admin endpoint (readiness is read there; the peers print `READY`).
#[allow(clippy::too_many_arguments)]
fn http_command(
    ctx: &Ctx,
    sys: System,
    topic: &str,
    group: &str,
    dlq: &str,
    sc: &Scenario,
    url: &str,
    log: &Path,
) -> Result<(Command, Option<u16>)> {
    let b = &ctx.args.bootstrap;
    let records = sc.records.to_string();
    let log = log.display().to_string();
    Ok(match sys {
        System::OrderlyHttp | System::OrderlyHttpBatch => {
            let admin = free_port()?;
            let mut c = Command::new(ctx.bin.join("orderly"));
            c.args([
                "consume",
                "--bootstrap",
                b,
                "--group",
                group,
                "--topic",
                topic,
            ])
            .args(["--dlq-topic", dlq, "--http", url])
            // The shared retry policy of every system (benchmarks.md), not a tuning: base 1 ms,
            // cap 100 ms, no attempt limit (the product's defaults are 100 ms, 30 s, 10).
            .args([
                "--retry-base",
                "1ms",
                "--retry-cap",
                "100ms",
                "--retry-max-attempts",
                "0",
            ])
            .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
            .env("RUST_LOG", "warn");
            if sys == System::OrderlyHttpBatch {
                c.args(ORDERLY_BATCH_ARGS);
            }
            (c, Some(admin))
        }
        System::GoSeedHttpTuned | System::GoSeedHttp => {
            let mut c = Command::new(ctx.root.join("benches/peers/go-seed/target/go-seed"));
            c.args(["-bootstrap", b, "-topic", topic, "-group", group])
                .args(["-records", &records, "-fail-mod", "0", "-log", &log])
                .args(["-http", url]);
            if sys == System::GoSeedHttpTuned {
                c.args(GO_TUNED_ARGS);
            }
            (c, None)
        }
        System::PcVertxTuned | System::PcVertx => {
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
            .arg("orderly.bench.PcVertxPeer")
            .args(["--bootstrap", b, "--topic", topic, "--group", group])
            .args(["--records", &records, "--http", url]);
            if sys == System::PcVertxTuned {
                c.args(PC_VERTX_TUNED_ARGS);
            }
            (c, None)
        }
        System::Orderly
        | System::OrderlyRun
        | System::GoSeedTuned
        | System::GoSeed
        | System::PcTuned
        | System::ParallelConsumer
        | System::OrderlyReplies
        | System::OrderlyExactlyOnce
        | System::GoSeedTransact
        | System::PcTransactional => {
            bail!("{} is no system of the HTTP scenarios", sys.name())
        }
    })
}

/// Sends SIGTERM to a process (tokio's `Child` only kills).
async fn terminate(child: &tokio::process::Child) {
    if let Some(pid) = child.id() {
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await;
    }
}

/// Waits up to `limit` for `child` to exit; kills it after that. `Ok(true)` when it exited
/// successfully by itself.
async fn wait_or_kill(child: &mut tokio::process::Child, limit: Duration) -> Result<bool> {
    match tokio::time::timeout(limit, child.wait()).await {
        Ok(st) => Ok(st?.success()),
        Err(_) => {
            let _ = child.kill().await;
            Ok(false)
        }
    }
}

/// One run of an HTTP scenario: starts the shared endpoint (`bench-http-server`), then the
/// system posting to it, offers the live load if the scenario has one, waits until the endpoint
/// has answered every record done (bounded), stops the system (orderly: SIGTERM, so it drains,
/// commits and leaves; the peers stop by themselves after as many successes as records), stops
/// the endpoint, and verifies the endpoint's log and report. Throughput and latency are the
/// endpoint's: from its first request to its answer to the last record, and from each record's
/// CreateTime to its done answer.
async fn run_http(
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
    let group = format!("{topic}-{}-{}", sc.id.to_lowercase(), sys.name());
    let dlq = format!("{group}.dlq");
    create_topic(ctx, &dlq, 1).await?;
    let log = ctx.runs_dir.join(format!("{group}.log"));
    let report_path = ctx.runs_dir.join(format!("{group}.server.json"));
    let server_err = ctx.runs_dir.join(format!("{group}.server.stderr"));
    let mut server = Command::new(ctx.bin.join("bench-http-server"))
        .args(["--log", &log.display().to_string()])
        .args(["--report", &report_path.display().to_string()])
        .args(["--records", &sc.records.to_string()])
        .args(["--transient-pct", &HTTP_TRANSIENT_PCT.to_string()])
        .args(["--system", sys.name()])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&server_err)?))
        .kill_on_drop(true)
        .spawn()
        .context("starting bench-http-server")?;
    let stdout = server.stdout.take().context("server stdout")?;
    let (url_tx, url_rx) = tokio::sync::oneshot::channel();
    let (done_tx, mut done) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut url_tx = Some(url_tx);
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            if let Some(u) = l.trim().strip_prefix("LISTEN ") {
                if let Some(tx) = url_tx.take() {
                    let _ = tx.send(u.to_owned());
                }
            } else if l.trim() == "DONE" {
                let _ = done_tx.send(true);
            }
        }
    });
    let url = tokio::time::timeout(Duration::from_secs(10), url_rx)
        .await
        .context("bench-http-server did not start listening")??;

    let sys_log = ctx.runs_dir.join(format!("{group}.peer.log"));
    let stderr_path = ctx.runs_dir.join(format!("{group}.stderr"));
    let (mut cmd, admin) = http_command(ctx, sys, &topic, &group, &dlq, sc, &url, &sys_log)?;
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&stderr_path)?))
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", sys.name()))?;
    let stdout = child.stdout.take().context("stdout")?;
    let (ready_tx, mut ready) = tokio::sync::watch::channel(false);
    if let Some(port) = admin {
        tokio::spawn(orderly_ready(port, ready_tx.clone()));
    }
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            if l.trim() == "READY" {
                let _ = ready_tx.send(true);
            }
        }
    });
    let peak_kib = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    if let Some(pid) = child.id() {
        let peak = peak_kib.clone();
        tokio::spawn(async move {
            let path = format!("/proc/{pid}/status");
            while let Ok(text) = std::fs::read_to_string(&path) {
                if let Some(kib) = text
                    .lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    peak.fetch_max(kib, std::sync::atomic::Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }
    let is_ready = tokio::time::timeout(Duration::from_secs(60), ready.wait_for(|r| *r))
        .await
        .is_ok_and(|r| r.is_ok());
    if !is_ready {
        let _ = child.kill().await;
        let _ = server.kill().await;
        bail!(
            "{} never got partitions (see {})",
            sys.name(),
            stderr_path.display()
        );
    }
    let (mut achieved, mut ack_p99) = (None, None);
    if sc.rate > 0 {
        let load = start_load(ctx, &topic, sc.sessions, sc.rate, sc.seconds)?;
        match finish_load(load).await {
            Ok((a, p)) => (achieved, ack_p99) = (a, p),
            Err(e) => {
                let _ = child.kill().await;
                let _ = server.kill().await;
                return Err(e);
            }
        }
    }
    let limit = Duration::from_secs_f64(sc.limit_s);
    let mut error = None;
    let all_done = tokio::time::timeout(limit, done.wait_for(|d| *d))
        .await
        .is_ok_and(|r| r.is_ok());
    if !all_done {
        error = Some(format!(
            "the endpoint had not answered every record done within {} s{}",
            limit.as_secs(),
            if sc.rate > 0 {
                " of the end of the load"
            } else {
                ""
            }
        ));
    }
    // orderly runs until told to stop; the peers stop by themselves after `records` successes.
    if admin.is_some() || !all_done {
        terminate(&child).await;
    }
    let exited_ok = wait_or_kill(&mut child, Duration::from_secs(30)).await?;
    if !exited_ok && error.is_none() {
        error = Some(format!(
            "{} did not stop cleanly within 30 s (see {})",
            sys.name(),
            stderr_path.display()
        ));
    }
    terminate(&server).await;
    if !wait_or_kill(&mut server, Duration::from_secs(10)).await? {
        bail!(
            "bench-http-server did not write its report (see {})",
            server_err.display()
        );
    }
    let report: HttpReport = serde_json::from_slice(
        &std::fs::read(&report_path)
            .with_context(|| format!("reading {}", report_path.display()))?,
    )
    .with_context(|| format!("parsing {}", report_path.display()))?;
    let (_, mut v) = verify::verify_files(std::slice::from_ref(&log), &expected(sc))?;
    v.rss_kib = peak_kib.load(std::sync::atomic::Ordering::Relaxed);
    if report.violations() > 0 && error.is_none() {
        error = Some(format!(
            "the endpoint saw {} requests of a session while another was in flight, {} records done out of sequence, {} batches not of one session in sequence, {} unreadable requests",
            report.violations_in_flight,
            report.violations_sequence,
            report.violations_batch,
            report.unreadable
        ));
    }
    if sc.rate > 0 && v.seen > 0 && v.latency_samples == 0 && error.is_none() {
        error = Some(
            "answered no record created after its warm-up: it was not consuming while the load ran"
                .to_owned(),
        );
    }
    if let Some(e) = &mut error {
        let _ = write!(e, " after {} of {} records", v.seen, sc.records);
    }
    Ok(RunResult {
        verdict: Some(v),
        error,
        achieved_rate: achieved,
        load_ack_p99_ms: ack_p99,
        http: Some(report),
        replies: None,
    })
}

/// S6's outcome for one system.
#[derive(Debug, Clone)]
struct CrashResult {
    crashes: u64,
    processes: usize,
    result: RunResult,
}

/// S6: three processes of `sys` in one group on a live topic; every 10 s of the load one of them
/// is killed with SIGKILL and started again at once (a new member). When the load has ended and
/// every record was seen (or the time limit passed), all are killed, and the merged logs are
/// verified: a record completed again after a crash or a rebalance is a duplicate, allowed; a
/// record never completed is lost; a first completion out of order is a violation.
async fn run_crash(ctx: &Ctx, sc: &Scenario, sys: System) -> CrashResult {
    let mut crashes = 0;
    let mut processes = 0;
    let r = async {
        let topic = ctx.unique(&sc.id.to_lowercase());
        create_topic(ctx, &topic, sc.partitions).await?;
        let group = format!("{topic}-{}", sys.name());
        let dlq = format!("{group}.dlq");
        create_topic(ctx, &dlq, 1).await?;
        let opts = RunOpts {
            crash: true,
            ..RunOpts::default()
        };
        let mut logs = Vec::new();
        let start = |slot: usize, logs: &mut Vec<PathBuf>| -> Result<Running> {
            let n = logs.len();
            let log = ctx.runs_dir.join(format!("{group}-p{slot}-{n}.log"));
            let err = ctx.runs_dir.join(format!("{group}-p{slot}-{n}.stderr"));
            logs.push(log.clone());
            spawn_system(ctx, sc, sys, &topic, &group, &dlq, &log, &err, &opts)
        };
        let mut procs = Vec::new();
        for slot in 0..3 {
            procs.push(start(slot, &mut logs)?);
        }
        processes = 3;
        for p in &mut procs {
            if !p.wait_ready(Duration::from_secs(60)).await {
                bail!(
                    "{} never got partitions (see {})",
                    sys.name(),
                    p.stderr_path.display()
                );
            }
        }
        let load = start_load(ctx, &topic, sc.sessions, sc.rate, sc.seconds)?;
        let t0 = Instant::now();
        let mut next_kill = Duration::from_secs(10);
        while next_kill.as_secs_f64() < sc.seconds {
            tokio::time::sleep_until((t0 + next_kill).into()).await;
            let victim = (crashes % 3) as usize;
            let _ = procs[victim].child.start_kill();
            let _ = procs[victim].child.wait().await;
            crashes += 1;
            procs[victim] = start(victim, &mut logs)?;
            processes += 1;
            next_kill += Duration::from_secs(10);
        }
        let (achieved, ack_p99) = finish_load(load).await?;
        let exp = expected(sc);
        let deadline = Instant::now() + Duration::from_secs_f64(sc.limit_s);
        let mut v;
        loop {
            (_, v) = verify::verify_files(&logs, &exp)?;
            if v.lost == 0 || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let peak = procs.iter().map(Running::peak_kib).max().unwrap_or(0);
        for p in &mut procs {
            let _ = p.child.start_kill();
            let _ = p.child.wait().await;
        }
        // Lines written between the last check and the kill are replays or late completions.
        (_, v) = verify::verify_files(&logs, &exp)?;
        v.rss_kib = peak;
        Ok::<_, anyhow::Error>(RunResult {
            error: (v.lost > 0).then(|| {
                format!(
                    "{} records still missing {} s after the end of the load",
                    v.lost, sc.limit_s
                )
            }),
            verdict: Some(v),
            achieved_rate: achieved,
            load_ack_p99_ms: ack_p99,
            http: None,
            replies: None,
        })
    }
    .await;
    CrashResult {
        crashes,
        processes,
        result: r.unwrap_or_else(|e| RunResult::failed(format!("{e:#}"))),
    }
}

fn parse_kv(text: &str, key: &str) -> Option<f64> {
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
}

fn describe(r: &RunResult) -> String {
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
            "{} in {:.2} s, p50 {:.1} ms p99 {:.1} ms p99.9 {:.1} ms, lost {}, duplicates {}, violations {}, mismatches {}, rss {} MiB{}",
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
            r.achieved_rate
                .map(|a| format!(", load achieved {a:.0} records/s"))
                .unwrap_or_default()
        ),
        (None, None) => "no result".into(),
    };
    handler + &replies
}

fn print_result(sc: &Scenario, sys: System, r: &RunResult) {
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

/// The raw fetch limit on the same topic: orderly's own fetch loop without the engine, and Apache
/// Kafka's ConsumerPerformance.
#[derive(Debug, Clone, Default)]
struct RawFetch {
    orderly_fetch: Option<f64>,
    consumer_perf_fetch: Option<f64>,
    consumer_perf_total: Option<f64>,
}

async fn raw_fetch(ctx: &Ctx, sc: &Scenario, topic: &str) -> RawFetch {
    settle().await;
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

/// Records the broker warm-up writes and reads before the first scenario.
const WARMUP_RECORDS: u64 = 200_000;

/// Warms up a fresh broker before anything is measured: its JIT compiler and its caches make
/// whichever run comes first on a fresh broker the slowest, so that run would pay for every
/// system. Writes `WARMUP_RECORDS` records of the shared workload
/// with the load generator and reads them once with orderly's fetch loop and once with Kafka's
/// ConsumerPerformance (a consumer group: join, fetch, commit), the same for every system, then
/// waits for a quiet machine (the JVM's JIT threads); nothing of it is reported.
async fn warm_up(ctx: &Ctx) -> Result<()> {
    let started = Instant::now();
    eprintln!(
        "==> warming up the broker (not measured): {WARMUP_RECORDS} records written and read twice"
    );
    let sc = Scenario {
        id: "warm-up".into(),
        what: "broker warm-up".into(),
        records: WARMUP_RECORDS,
        sessions: 1_000,
        partitions: 12,
        fail_mod: 0,
        work_us: 0,
        rate: 0,
        seconds: 0.0,
        systems: Vec::new(),
        kind: Kind::Plain,
        limit_s: 300.0,
    };
    let topic = ctx.unique("warmup");
    seed_topic(ctx, &sc, &topic).await?;
    raw_fetch(ctx, &sc, &topic).await;
    // A fresh JVM keeps compiling for a while after its traffic stopped (its JIT threads take
    // a core for seconds); wait until the machine is quiet before the first measured run.
    let quiet = wait_quiet(QUIET_BUSY, QUIET_WITHIN).await;
    eprintln!(
        "    warm-up took {:.0} s; {}",
        started.elapsed().as_secs_f64(),
        match quiet {
            Ok(busy) => format!(
                "machine quiet ({:.0} % busy over the last second)",
                busy * 100.0
            ),
            Err(busy) => format!(
                "the machine was still {:.0} % busy after {} s; measuring anyway",
                busy * 100.0,
                QUIET_WITHIN.as_secs()
            ),
        }
    );
    Ok(())
}

/// Below this share of all cores busy over one second the machine counts as quiet.
const QUIET_BUSY: f64 = 0.10;
/// How long [`warm_up`] waits for a quiet machine.
const QUIET_WITHIN: Duration = Duration::from_secs(60);

/// Waits until the share of CPU time spent busy over all cores (`/proc/stat`) stays below
/// `busy` for one second, at most `within`: `Ok(last share)`, or `Err(last share)` on timeout (or
/// `Ok(0.0)` where `/proc/stat` is missing).
async fn wait_quiet(busy: f64, within: Duration) -> std::result::Result<f64, f64> {
    /// (busy, total) jiffies of the `cpu` line.
    fn sample() -> Option<(u64, u64)> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
        let total: u64 = v.iter().take(8).sum();
        let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
        Some((total.saturating_sub(idle), total))
    }
    let deadline = Instant::now() + within;
    let Some(mut prev) = sample() else {
        return Ok(0.0);
    };
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Some(now) = sample() else {
            return Ok(0.0);
        };
        let share =
            now.0.saturating_sub(prev.0) as f64 / now.1.saturating_sub(prev.1).max(1) as f64;
        prev = now;
        if share < busy {
            return Ok(share);
        }
        if Instant::now() >= deadline {
            return Err(share);
        }
    }
}

/// One step of an S2-max search.
#[derive(Debug, Clone)]
struct MaxStep {
    offered: u64,
    result: RunResult,
    /// Verified, p99 ≤ 200 ms, and the generator offered ≥ 95 % of the rate.
    held: bool,
    /// The generator achieved < 95 % of the offered rate.
    generator_short: bool,
    /// The first try of this step, when it was offered again because the producer's own p99
    /// (CreateTime → acknowledged) was over the budget.
    retried: Option<Box<RunResult>>,
}

impl MaxStep {
    /// Whether the load generator's own writes had a p99 over the 200 ms budget.
    fn broker_over_budget(&self) -> bool {
        self.result.load_ack_p99_ms.is_some_and(|p| p > 200.0)
    }
}

/// One system's S2-max search: doubling from the start rate while each step holds, then bisection
/// between the highest rate held and the lowest not held.
#[derive(Debug, Clone, Default)]
struct MaxSearch {
    steps: Vec<MaxStep>,
    /// Highest rate held.
    lo: Option<u64>,
    /// Lowest rate not held.
    hi: Option<u64>,
    /// The next rate to try; `None` once the search ended.
    next: Option<u64>,
}

impl MaxSearch {
    fn new(start: u64) -> Self {
        Self {
            next: Some(start),
            ..Self::default()
        }
    }

    /// The highest rate the generator achieved in any step (its own cap, when it fell short).
    fn generator_cap(&self) -> Option<f64> {
        self.steps
            .iter()
            .filter(|s| s.generator_short)
            .filter_map(|s| s.result.achieved_rate)
            .max_by(f64::total_cmp)
    }

    fn record(&mut self, step: MaxStep, max_steps: usize) {
        let rate = step.offered;
        if step.held {
            self.lo = Some(self.lo.map_or(rate, |l| l.max(rate)));
        } else {
            self.hi = Some(self.hi.map_or(rate, |h| h.min(rate)));
        }
        self.steps.push(step);
        self.next = match (self.lo, self.hi) {
            _ if self.steps.len() >= max_steps => None,
            (Some(lo), None) => Some(lo * 2),
            (None, Some(hi)) => (hi / 2 >= 1_000).then_some(hi / 2),
            // Stop once the bracket is within 10 % (rounded to 1,000 records/s).
            (Some(lo), Some(hi)) if hi > lo && (hi - lo) * 10 > lo => {
                Some(((lo + hi) / 2).div_ceil(1_000) * 1_000)
            }
            _ => None,
        };
    }
}

/// S2-max for every system, interleaved: step k of each system's search, then step k + 1 (each
/// search picks its next rate from its own last step). A step offers the rate for the scenario's
/// seconds on a topic of its own; it holds when the run verifies, p99 ≤ 200 ms, and the load
/// generator achieved ≥ 95 % of the rate (otherwise the generator, not the system, is the limit,
/// and that is reported).
async fn s2_max_all(ctx: &Ctx, base: &Scenario, max_steps: usize) -> Vec<(System, MaxSearch)> {
    let mut searches: Vec<(System, MaxSearch)> = base
        .systems
        .iter()
        .map(|s| (*s, MaxSearch::new(S2MAX_START)))
        .collect();
    loop {
        let mut any = false;
        for (sys, search) in &mut searches {
            let Some(rate) = search.next else { continue };
            any = true;
            let sc = Scenario {
                records: (rate as f64 * base.seconds) as u64,
                rate,
                ..base.clone()
            };
            let mut step = max_step(ctx, &sc, *sys).await;
            // The producer's own writes took longer than the budget: the broker (busy on this
            // shared machine), not the consumer, failed the step. Offered once more, alike for
            // every system, so one noisy moment does not end a search.
            if !step.held && step.broker_over_budget() {
                eprintln!(
                    "      the producer's own p99 was over 200 ms: the step is offered again"
                );
                let again = max_step(ctx, &sc, *sys).await;
                step = MaxStep {
                    retried: Some(Box::new(step.result)),
                    ..again
                };
            }
            search.record(step, max_steps);
        }
        if !any {
            return searches;
        }
    }
}

/// Runs one S2-max step: `sc` offered to `sys`.
async fn max_step(ctx: &Ctx, sc: &Scenario, sys: System) -> MaxStep {
    let r = run_one(ctx, sc, sys, None, &RunOpts::default()).await;
    print_result(sc, sys, &r);
    let p99 = r.verdict.as_ref().map_or(f64::MAX, |v| v.latency_ms[1]);
    let generator_short = r.achieved_rate.is_some_and(|a| a < 0.95 * sc.rate as f64);
    let held = r.ok() && p99 <= 200.0 && !generator_short;
    MaxStep {
        offered: sc.rate,
        result: r,
        held,
        generator_short,
        retried: None,
    }
}

/// Where every S2-max search starts (records/s).
const S2MAX_START: u64 = 10_000;

/// S4: per system, (run without the stalled session, run with it) per repetition.
type StallRows = BTreeMap<System, Vec<(RunResult, RunResult)>>;

/// Every run of every system in one scenario.
type Results = BTreeMap<System, Vec<RunResult>>;

#[derive(Default)]
struct Report {
    scenarios: Vec<(Scenario, Results, Vec<RawFetch>)>,
    s2max: Option<(Scenario, Vec<(System, MaxSearch)>)>,
    /// S4: per system, (run without the stalled session, run with it) per repetition.
    s4: Option<(Scenario, StallRows)>,
    s6: Option<(Scenario, Vec<(System, CrashResult)>)>,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// The retry-policy floor of a backlog scenario with failures, and orderly's run time against
/// it (the expected floor, and each run's own drawn floor); `None` for other scenarios.
fn floor_report(sc: &Scenario, results: &BTreeMap<System, Vec<RunResult>>) -> Option<String> {
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
    let _ = writeln!(md, "{BEGIN_MARKER}");
    let _ = writeln!(
        md,
        "## Side by side: orderly, the seed's design in Go, Confluent Parallel Consumer\n"
    );
    let _ = writeln!(
        md,
        "Command: `{}` (commit `{commit}`{}, {} form, systems interleaved within each repetition, in a rotating order in which S3's raw fetch takes its turn, dirty pages written out (`sync`) before every run; runs per system under each scenario; took {:.0} s).  ",
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
    let warmup = if ctx.args.no_warmup {
        "No broker warm-up before the first scenario (`--no-warmup`). ".to_owned()
    } else {
        format!(
            "Before the first scenario the broker is warmed up, for no system in particular: {} records written by the load \
             generator and read once by orderly's fetch loop and once by ConsumerPerformance, then the harness waits (up to \
             {} s) until the machine is under {:.0} % busy for a second (not measured; on a fresh broker the first runs are the \
             slowest). ",
            group_digits(WARMUP_RECORDS),
            QUIET_WITHIN.as_secs(),
            QUIET_BUSY * 100.0
        )
    };
    let _ = writeln!(
        md,
        "Workload (every system): key = session id, 100-byte value, headers `event-id` and `seq`; a record fails transiently on its \
         first attempt when `fnv1a64(event-id) % m == 0` (m = 10: 10 %, m = 100: 1 %); retries: full jitter over \
         min(100 ms, 1 ms × 2^(n−1)). Throughput = records / (first record handed to a handler → the final commit acknowledged; \
         Parallel Consumer: the end of `close()`, which commits and leaves the group in one call). {warmup}Latency = handler completion − CreateTime (live runs only; the first second is warm-up). Every run is checked by \
         the shared verifier (`benches/src/verify.rs`): lost, duplicates, ordering violations, attempt counts; a failed run counts \
         for nothing and is marked.\n"
    );
    // Per suite: the backlog scenarios of its chart, and each system's median rate in each.
    type Chart = (Vec<String>, BTreeMap<System, Vec<Option<f64>>>);
    let mut charts: BTreeMap<Suite, Chart> = BTreeMap::new();
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
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {ratio} | {rss} | {loss} | {verdict} |",
                    sys.label(),
                    each.join(", "),
                    fmt_rate(rate)
                );
            }
        }
        if let Some(floor) = floor_report(sc, results) {
            let _ = writeln!(md, "\n{floor}");
        }
        if let Some(r) = product_ratio(results) {
            let _ = writeln!(
                md,
                "\nThe product binary against the library in this run: `orderly run` (default flags) ÷ `bench-orderly` (the \
                 library's default configuration), medians of interleaved runs: **{:.0} %**.",
                r * 100.0
            );
        }
        if http {
            let _ = writeln!(md, "\n{}", http_details(results, live));
        }
        if sc.kind == Kind::Reply {
            let _ = writeln!(md, "\n{}", reply_details(results));
        }
        if sc.id == "S5" {
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
            let suite = sc.kind.suite();
            let (cats, series) = charts.entry(suite).or_default();
            cats.push(sc.id.clone());
            for sys in ctx.systems.iter().filter(|s| s.suite() == suite) {
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
    if let Some((sc, searches)) = &report.s2max {
        write_s2max(&mut md, sc, searches);
    }
    if let Some((sc, rows)) = &report.s4 {
        write_s4(&mut md, sc, rows);
    }
    if let Some((sc, rows)) = &report.s6 {
        write_s6(&mut md, sc, rows);
    }
    let results_dir = ctx.root.join("benches/results");
    std::fs::create_dir_all(&results_dir)?;
    for (suite, (cats, values)) in &charts {
        let [file, title, alt] = suite.chart();
        let series: Vec<Series> = values
            .iter()
            .map(|(sys, values)| Series {
                name: sys.label().into(),
                values: values.clone(),
            })
            .collect();
        std::fs::write(
            results_dir.join(file),
            svg::bars(title, "records/s", cats, &series),
        )?;
        let _ = writeln!(md, "![{alt}](benches/results/{file})\n");
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
    let _ = writeln!(md, "{END_MARKER}");
    let path = ctx.root.join("BENCHMARKS.md");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    std::fs::write(&path, splice_generated(&old, &md))?;
    eprintln!("==> wrote BENCHMARKS.md and benches/results/*.svg");
    Ok(())
}

/// The line that opens the generated section of BENCHMARKS.md (`cargo xtask tidy` checks that the
/// document has it, and the closing [`END_MARKER`], once each).
const BEGIN_MARKER: &str =
    "<!-- bench:begin (written by `cargo xtask bench`; edits inside are overwritten) -->";
/// The line that closes the generated section of BENCHMARKS.md.
const END_MARKER: &str = "<!-- bench:end -->";

/// `old` (BENCHMARKS.md) with its generated section, from the begin marker to the end marker,
/// replaced by `block` (which carries both markers); everything outside stays as it is. Without
/// the markers, `block` is appended.
fn splice_generated(old: &str, block: &str) -> String {
    let begin = old.find(BEGIN_MARKER.split(" (").next().unwrap_or(BEGIN_MARKER));
    match (begin, old.find(END_MARKER)) {
        (Some(a), Some(b)) if b > a => format!(
            "{}{}{}",
            old.get(..a).unwrap_or_default(),
            block.trim_end(),
            old.get(b + END_MARKER.len()..).unwrap_or_default()
        ),
        _ => format!("{}\n{}", old.trim_end(), block),
    }
}

/// Below an HTTP scenario's table: per system, what the endpoint saw (records per request,
/// answers 503, violations from its side) and, in a backlog, the batched orderly row's rate
/// against each.
/// The reply scenarios' paragraph: what each system does and the reply check of each run.
fn reply_details(results: &Results) -> String {
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

fn http_details(results: &Results, live: bool) -> String {
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

/// The seed's own S2 figure: p99 above 200 ms at this rate (records/s).
const SEED_RATE: f64 = 48_805.0;

fn write_s2max(md: &mut String, sc: &Scenario, searches: &[(System, MaxSearch)]) {
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

fn write_s4(md: &mut String, sc: &Scenario, rows: &StallRows) {
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

fn write_s6(md: &mut String, sc: &Scenario, rows: &[(System, CrashResult)]) {
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

    fn step(offered: u64, held: bool) -> MaxStep {
        MaxStep {
            offered,
            result: RunResult {
                verdict: None,
                error: None,
                achieved_rate: Some(offered as f64),
                load_ack_p99_ms: None,
                http: None,
                replies: None,
            },
            held,
            generator_short: false,
            retried: None,
        }
    }

    /// Feeds a search a system that holds every rate up to `max`; returns the rates tried.
    fn search(max: u64, budget: usize) -> (MaxSearch, Vec<u64>) {
        let mut s = MaxSearch::new(10_000);
        let mut tried = Vec::new();
        while let Some(r) = s.next {
            tried.push(r);
            s.record(step(r, r <= max), budget);
        }
        (s, tried)
    }

    #[test]
    fn a_scenario_name_picks_that_scenario_and_a_family_name_its_members() {
        let ids = |names: &str| -> Vec<String> {
            let args =
                Args::parse_from(["bench-harness", "--bootstrap", "x:1", "--scenario", names]);
            scenarios(&args, &[System::Orderly])
                .into_iter()
                .map(|s| s.id)
                .collect()
        };
        assert_eq!(ids("S2"), ["S2"]);
        assert_eq!(ids("S1"), ["S1"]);
        assert_eq!(ids("S3"), ["S3-0", "S3-100us", "S3-1ms"]);
        assert_eq!(ids("S2-max,S1-live"), ["S1-live", "S2-max"]);
        assert_eq!(ids("http"), ["S1-http", "S1k-http", "S2-http"]);
        assert_eq!(ids("S1-http"), ["S1-http"]);
        assert_eq!(ids("S1k-reply"), ["S1k-reply"]);
    }

    /// The HTTP scenarios run the HTTP systems only, the others never; `--records` sets every
    /// selected scenario's count (a live one's seconds follow from its rate).
    #[test]
    fn http_scenarios_get_the_http_systems_and_records_override_the_counts() {
        let all = [
            System::Orderly,
            System::GoSeed,
            System::OrderlyHttp,
            System::GoSeedHttpTuned,
            System::PcVertx,
        ];
        let args = Args::parse_from([
            "bench-harness",
            "--bootstrap",
            "x:1",
            "--scenario",
            "S1,http",
            "--records",
            "3000",
        ]);
        for sc in scenarios(&args, &all) {
            assert_eq!(sc.records, 3000, "{}", sc.id);
            let http = sc.kind == Kind::Http;
            assert!(
                sc.systems.iter().all(|s| s.suite() == sc.kind.suite()),
                "{sc:?}"
            );
            assert_eq!(sc.systems.len(), if http { 3 } else { 2 }, "{}", sc.id);
            if sc.rate > 0 {
                assert!((sc.seconds - 0.3).abs() < 1e-9, "{sc:?}");
            }
        }
        assert_eq!(System::OrderlyHttpBatch.suite(), Suite::Http);
        assert_eq!(System::ParallelConsumer.suite(), Suite::Handler);
        assert_eq!(System::PcVertxTuned.family(), "parallel-consumer");
    }

    /// The reply scenario runs the four reply systems and nothing else, each peer tuned and in
    /// its transactional mode; the reply systems run nowhere else.
    #[test]
    fn the_reply_scenario_runs_the_reply_systems_in_their_transactional_modes() {
        let all = [
            System::Orderly,
            System::OrderlyRun,
            System::GoSeedTuned,
            System::PcTuned,
            System::OrderlyHttp,
            System::OrderlyReplies,
            System::OrderlyExactlyOnce,
            System::GoSeedTransact,
            System::PcTransactional,
        ];
        let args = Args::parse_from(["bench-harness", "--bootstrap", "x:1", "--scenario", "all"]);
        for sc in scenarios(&args, &all) {
            let reply = sc
                .systems
                .iter()
                .filter(|s| s.suite() == Suite::Reply)
                .count();
            if sc.kind == Kind::Reply {
                assert_eq!(sc.id, "S1k-reply");
                assert_eq!((sc.records, sc.sessions, sc.fail_mod), (50_000, 1_000, 10));
                assert_eq!(reply, 4, "{sc:?}");
                assert_eq!(sc.systems.len(), 4, "{sc:?}");
            } else {
                assert_eq!(reply, 0, "{sc:?}");
            }
        }
        assert_eq!(Suite::Reply.reference(), System::OrderlyReplies);
        assert!(System::OrderlyReplies.reply_args("g").is_empty());
        assert_eq!(
            System::OrderlyExactlyOnce.reply_args("g"),
            ["--exactly-once"]
        );
        assert_eq!(
            System::GoSeedTransact.reply_args("g"),
            ["-transactional-id", "g.txn"]
        );
        assert!(
            System::PcTransactional
                .reply_args("g")
                .contains(&"PERIODIC_TRANSACTIONAL_PRODUCER".to_string())
        );
        assert!(System::GoSeedTransact.tuned() && System::PcTransactional.tuned());
        assert_eq!(System::GoSeedTransact.family(), "go-seed");
    }

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

    #[test]
    fn the_product_runs_the_backlogs_but_s5_and_the_procedures_run_tuned_peers_only() {
        let all = [
            System::Orderly,
            System::OrderlyRun,
            System::GoSeedTuned,
            System::GoSeed,
            System::PcTuned,
            System::ParallelConsumer,
        ];
        let args = Args::parse_from(["bench-harness", "--bootstrap", "x:1", "--scenario", "all"]);
        let v = scenarios(&args, &all);
        let has = |id: &str, sys: System| {
            v.iter()
                .find(|s| s.id == id)
                .is_some_and(|s| s.systems.contains(&sys))
        };
        for id in ["S1", "S1-1k", "S1-p1", "S3-0", "S3-1ms"] {
            assert!(has(id, System::OrderlyRun), "{id}");
            assert!(
                has(id, System::GoSeed) && has(id, System::ParallelConsumer),
                "{id}"
            );
        }
        for id in ["S1-live", "S2", "S5", "S2-max", "S4", "S6"] {
            assert!(!has(id, System::OrderlyRun), "{id}");
        }
        for id in ["S2-max", "S4", "S6"] {
            assert!(
                has(id, System::GoSeedTuned) && has(id, System::PcTuned),
                "{id}"
            );
            assert!(
                !has(id, System::GoSeed) && !has(id, System::ParallelConsumer),
                "{id}"
            );
        }
        let chan = |id: &str| {
            let sc = v.iter().find(|s| s.id == id).unwrap();
            let a = go_tuned_args(sc);
            let i = a.iter().position(|x| x == "-session-chan").unwrap();
            a[i + 1].clone()
        };
        assert_eq!(chan("S1"), "5000", "S1: a session's 5,000 records");
        assert_eq!(
            chan("S3-0"),
            "256",
            "S3: the design's 256 already holds 100"
        );
        assert_eq!(chan("S5"), "256");
    }

    #[test]
    fn the_product_report_is_read_into_a_verdict() {
        let report = "orderly run report
  records terminal     49990 (49990 handled, 0 dead-lettered)
  transient retries    5012
  sessions             1000
  wall time            1.04s (join, consume, drain, commit, leave)
  throughput           481938 records/s over the wall time
  throughput           250000 records/s from the first record handed to a handler to the end of the run (199.96ms: final commit and LeaveGroup included)
  latency              p50 2440.8 ms  p99 2751.5 ms  p99.9 2757.8 ms (handled - CreateTime)
  ordering violations  2 (handler check) / 1 (engine seq checker)
  replays              4
  commits              1
  verdict              FAILED
";
        let v = parse_run_report(report, 50_000).unwrap();
        assert_eq!((v.seen, v.lost, v.duplicates), (49_990, 10, 4));
        assert_eq!((v.violations, v.retried), (3, 5_012));
        assert!((v.rate - 250_000.0).abs() < 1e-9);
        assert!((v.seconds - 0.19996).abs() < 1e-9);
        assert!(!v.ok());
        assert!(parse_run_report("error: no broker", 10).is_none());
    }

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

    #[test]
    fn the_generated_section_is_replaced_and_the_rest_kept() {
        let old = format!(
            "# Benchmarks\n\nintro\n\n{BEGIN_MARKER}\n## old tables\n{END_MARKER}\n\n## Limits\ntext\n"
        );
        let block = format!("{BEGIN_MARKER}\n## new tables\n{END_MARKER}\n");
        let new = splice_generated(&old, &block);
        assert_eq!(
            new,
            format!(
                "# Benchmarks\n\nintro\n\n{BEGIN_MARKER}\n## new tables\n{END_MARKER}\n\n## Limits\ntext\n"
            )
        );
        assert_eq!(splice_generated(&new, &block), new, "idempotent");
        // Without markers the block is appended.
        assert_eq!(
            splice_generated("# Benchmarks\n", &block),
            format!("# Benchmarks\n{block}")
        );
    }

    #[test]
    fn benchmarks_md_has_the_markers_the_harness_writes_between() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../BENCHMARKS.md"),
        )
        .unwrap();
        assert_eq!(doc.matches(BEGIN_MARKER).count(), 1);
        assert_eq!(doc.matches(END_MARKER).count(), 1);
        assert!(doc.find(BEGIN_MARKER) < doc.find(END_MARKER));
    }

    #[test]
    fn s2_max_doubles_then_bisects_to_within_ten_percent() {
        let (s, tried) = search(57_000, 20);
        assert_eq!(&tried[..4], &[10_000, 20_000, 40_000, 80_000]);
        let (lo, hi) = (s.lo.unwrap(), s.hi.unwrap());
        assert!(lo <= 57_000 && hi > 57_000, "{lo} {hi}");
        assert!((hi - lo) * 10 <= lo, "{lo} {hi}");
    }

    #[test]
    fn s2_max_halves_when_the_start_is_not_held_and_respects_the_budget() {
        let (s, tried) = search(3_000, 20);
        assert_eq!(&tried[..3], &[10_000, 5_000, 2_500]);
        assert!(s.lo.unwrap() <= 3_000);
        let (_, tried) = search(1_000_000, 4);
        assert_eq!(tried.len(), 4);
        let (s, _) = search(10, 20);
        assert_eq!(s.lo, None, "nothing held down to 1,000 records/s");
    }

    /// A step that failed while the producer's own p99 was over the budget is the broker's
    /// failure, one that failed with the producer within it is the system's; the report shows a
    /// re-offered step's first try and the producer's p99 of each.
    #[test]
    fn s2_max_tells_a_broker_over_budget_and_reports_the_first_try() {
        let mut first = step(80_000, false);
        first.result.load_ack_p99_ms = Some(366.0);
        assert!(first.broker_over_budget());
        let mut own = step(80_000, false);
        own.result.load_ack_p99_ms = Some(68.0);
        assert!(!own.broker_over_budget());
        assert!(
            !step(80_000, false).broker_over_budget(),
            "no figure, no excuse"
        );

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
