//! `cargo xtask`: the command line of the project's tasks (see the README's "Tasks" table).

// A developer tool talks to its user on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    about = "orderly project tasks: a local Kafka broker, tests, CI, tidy, demo, bench, fuzz, dist"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Manage the local Apache Kafka broker (resolved from Maven Central) and run Kafka's own tools.
    Kafka {
        #[command(subcommand)]
        action: KafkaAction,
    },
    /// Run the whole test suite against one fresh broker, stopped at the end even if tests fail:
    /// every test binary built once, then several run at a time (the longest first), each one's
    /// output printed when it ends. Arguments go to `cargo test` (package or target selection);
    /// those after `--` go to every test binary (a name filter, `--nocapture`).
    Test {
        /// Test binaries running at once (default: twice the CPUs; most of a broker test's time
        /// is waiting).
        #[arg(long)]
        jobs: Option<usize>,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// What CI runs: format check, clippy with warnings denied, rustdoc with warnings denied, tidy, the test suite, the seed workload against the oldest supported broker (Kafka 2.1.1), and a 2-minute chaos run (seed 20261201).
    Ci,
    /// Check doc lines, that no C builds in the default dependency tree, that the README documents every task, that ARCHITECTURE.md maps every crate, that nothing refers to work history, commit subjects' length, and BENCHMARKS.md's shape.
    Tidy,
    /// The main job: start the local broker, produce the seed workload live while `orderly consume` hands it to an HTTP handler (one record per request, then batched at 50,000/s), print one table.
    Demo {
        /// Records to produce and consume.
        #[arg(long, default_value_t = 50_000)]
        records: usize,
        /// Sessions (keys) the records belong to.
        #[arg(long, default_value_t = 10)]
        sessions: usize,
        /// Partitions of the demo topic.
        #[arg(long, default_value_t = 12)]
        partitions: i32,
        /// Records per second produced (live mode).
        #[arg(long, default_value_t = 10_000)]
        rate: u64,
        /// The backlog demo instead: write everything first, then consume it with `orderly run`.
        #[arg(long)]
        backlog: bool,
    },
    /// Side-by-side benchmarks of orderly, the seed's design in Go and Confluent Parallel Consumer:
    /// starts the broker, builds every system, runs the scenarios interleaved, verifies every run,
    /// writes BENCHMARKS.md and the charts in benches/results/.
    Bench {
        /// The short form (under 5 minutes).
        #[arg(long)]
        quick: bool,
        /// The tiny CI form: orderly only, a private broker, checked by the verifier, nothing written.
        #[arg(long)]
        smoke: bool,
        /// Scenarios, e.g. S1,S3, or http for S1-http, S1k-http and S2-http (default: all of the form).
        #[arg(long, value_delimiter = ',')]
        scenario: Vec<String>,
        /// Systems: orderly, go-seed, parallel-consumer (each with its HTTP rows), or one row's name
        /// such as orderly-http or pc-vertx-tuned (default: all whose toolchain is installed).
        #[arg(long, value_delimiter = ',')]
        systems: Vec<String>,
        /// Repetitions per scenario (default 3; 1 with --quick).
        #[arg(long)]
        reps: Option<usize>,
        /// Records of every selected scenario instead of its own count (a check of the plumbing,
        /// not figures).
        #[arg(long)]
        records: Option<u64>,
        /// Print the figures only; leave BENCHMARKS.md and the charts alone.
        #[arg(long)]
        no_write: bool,
        /// Skip the broker warm-up before the first scenario (to measure what it changes).
        #[arg(long)]
        no_warmup: bool,
        /// Use the benchmark programs already built in the target directory instead of building
        /// them (what `cargo xtask ci` does after its one build).
        #[arg(long)]
        prebuilt: bool,
    },
    /// Chaos: `orderly consume` processes in one group against a 3-node cluster behind fault
    /// proxies, a live producer, a seeded fault schedule (consumer and leader SIGKILLs, proxy
    /// drop/stall/reset, members joining and leaving, a controlled shutdown), and a checker for
    /// loss, per-session order, replays below the watermark and the DLQ. With --exactly-once the
    /// consumers write replies in transactions, the schedule adds a zombie, a transaction
    /// coordinator kill and at least ten consumer kills, and the checker reads the replies with
    /// Kafka's console consumer under read_committed (each once, in session order).
    Chaos {
        /// Length of the fault schedule (each fault kind runs at least once regardless).
        #[arg(long, default_value_t = 2.0)]
        minutes: f64,
        /// Seed of the workload and the schedule (printed; rerun with it to reproduce).
        #[arg(long)]
        seed: Option<u64>,
        /// Consumers in the group.
        #[arg(long, default_value_t = 3)]
        consumers: usize,
        /// Records per second.
        #[arg(long, default_value_t = 200)]
        rate: u32,
        /// Use the release build of `orderly` (default: debug).
        #[arg(long)]
        release: bool,
        /// Run the consumers with `--commit-metadata-limit 0` (no completed offsets in the commit
        /// metadata), to compare the duplicates per crash with a run of the same seed.
        #[arg(long)]
        no_commit_metadata: bool,
        /// Working directory (default: .kafka/chaos; another one lets two runs go side by side).
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
        /// Consumers with --exactly-once and a reply topic; replies checked under read_committed.
        #[arg(long)]
        exactly_once: bool,
        /// Run this `orderly` binary instead of building one.
        #[arg(long)]
        binary: Option<std::path::PathBuf>,
    },
    /// The broker compatibility matrix: for each Apache Kafka release (from its Maven jars;
    /// ZooKeeper mode before 3.3, KRaft after) the versions orderly negotiates, the seed workload
    /// (seed, run with failures: order, loss, DLQ), the lag by `orderly status` and by Kafka's
    /// consumer-groups tool; a release below 2.1 must be refused. Rewrites the README's support
    /// matrix unless --no-write.
    Compat {
        /// Releases to run (default: 1.1.1, 2.0.1, 2.1.1, 2.8.2, 3.0.2, 3.9.1, 4.0.0, 4.3.1).
        #[arg(long, value_delimiter = ',')]
        versions: Vec<String>,
        /// Records of the seed workload per release.
        #[arg(long, default_value_t = 5_000)]
        records: u64,
        /// Print only; leave the README alone. A run of some releases only (`--versions`) never
        /// rewrites the README's matrix: it holds every supported release.
        #[arg(long)]
        no_write: bool,
        /// Run this `orderly` binary instead of building one.
        #[arg(long)]
        binary: Option<std::path::PathBuf>,
    },
    /// Fuzz every decoder (Kafka responses and requests, record batches, codecs, consumer-protocol
    /// payloads, commit metadata): seeded structure-aware mutation in pure Rust, `fuzz` profile
    /// (release with overflow checks); prints inputs, accepted share and time per target.
    Fuzz {
        /// Inputs per target.
        #[arg(long, default_value_t = 1_000_000)]
        iterations: u64,
        /// Seed of the mutation RNG (a crash reproduces with the same seed and iterations).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Only these targets (default: all; `cargo run -p orderly-fuzz -- --list` names them).
        targets: Vec<String>,
    },
    /// Build fully static, stripped `orderly` binaries (x86_64 and aarch64 musl, linked with
    /// rust-lld: no C toolchain) and write dist/orderly-<version>-<target>.tar.gz with a SHA-256 file.
    Dist {
        /// Only these target triples (default: x86_64-unknown-linux-musl and aarch64-unknown-linux-musl).
        #[arg(long = "target")]
        targets: Vec<String>,
    },
}

#[derive(Subcommand)]
enum KafkaAction {
    /// Start the broker (if not running) and print its bootstrap address on stdout; with
    /// `--brokers 3`, a 3-node KRaft cluster (RF 3, min.insync.replicas 2) and its addresses.
    Start {
        /// Nodes: 1 = the single broker; 3 = a cluster in .kafka/cluster (each node broker and controller).
        #[arg(long, default_value_t = 1)]
        brokers: usize,
        /// Client port (default: a free port).
        #[arg(long)]
        port: Option<u16>,
        /// JVM heap.
        #[arg(long, default_value = "1g")]
        heap: String,
        /// Also serve a SASL_PLAINTEXT listener (SCRAM-SHA-256/512; PLAIN too on the single
        /// broker) with this user, created as a SCRAM credential at format time (repeatable). With
        /// --brokers 3 every node serves one. The addresses are printed on stderr.
        #[arg(long, value_name = "NAME:PASSWORD")]
        scram_user: Vec<String>,
        /// Port of that SASL listener (default: a free port).
        #[arg(long, requires = "scram_user")]
        sasl_port: Option<u16>,
    },
    /// Stop exactly the broker `start` started (by its recorded pid).
    Stop,
    /// Print pid, bootstrap address and log file; exit 1 if not running.
    Status,
    /// Print the last lines of the broker log.
    Logs {
        #[arg(short = 'n', long, default_value_t = 60)]
        lines: usize,
    },
    /// Run one of Apache Kafka's command-line tools (`list` shows them). `{bootstrap}` in an
    /// argument is replaced by the running broker's address.
    Tool {
        name: String,
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.task {
        Task::Kafka { action } => match action {
            KafkaAction::Start {
                brokers,
                port,
                heap,
                scram_user,
                sasl_port,
            } => {
                let users = scram_user
                    .iter()
                    .map(|u| {
                        u.split_once(':')
                            .map(|(n, p)| (n.to_string(), p.to_string()))
                            .with_context(|| format!("--scram-user {u:?}: expected NAME:PASSWORD"))
                    })
                    .collect::<Result<Vec<_>>>()?;
                if brokers > 1 {
                    if port.is_some() || sasl_port.is_some() {
                        bail!("--port and --sasl-port apply to the single broker only");
                    }
                    println!("{}", xtask::kafka::start_cluster(brokers, &heap, &users)?);
                    return Ok(());
                }
                let b = xtask::kafka::start_with_scram(port, &heap, sasl_port, &users)?;
                println!("{}", b.bootstrap);
                Ok(())
            }
            KafkaAction::Stop => xtask::kafka::stop(),
            KafkaAction::Status => xtask::kafka::status(),
            KafkaAction::Logs { lines } => xtask::kafka::logs(lines),
            KafkaAction::Tool { name, args } => xtask::kafka::tool(&name, &args),
        },
        Task::Test { jobs, args } => test(&args, jobs),
        Task::Ci => ci(),
        Task::Tidy => tidy(),
        Task::Demo {
            records,
            sessions,
            partitions,
            rate,
            backlog,
        } => {
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(xtask::demo::run(xtask::demo::DemoOptions {
                records,
                sessions,
                partitions,
                rate,
                backlog,
            }))
        }
        Task::Bench {
            quick,
            smoke,
            scenario,
            systems,
            reps,
            records,
            no_write,
            no_warmup,
            prebuilt,
        } => {
            let mut args = Vec::new();
            if quick {
                args.push("--quick".to_string());
            }
            if !scenario.is_empty() {
                args.push(format!("--scenario={}", scenario.join(",")));
            }
            if !systems.is_empty() {
                args.push(format!("--systems={}", systems.join(",")));
            }
            if let Some(r) = reps {
                args.push(format!("--reps={r}"));
            }
            if let Some(n) = records {
                args.push(format!("--records={n}"));
            }
            if no_write {
                args.push("--no-write".to_string());
            }
            if no_warmup {
                args.push("--no-warmup".to_string());
            }
            xtask::bench::run(&args, smoke, prebuilt)
        }
        Task::Chaos {
            minutes,
            seed,
            consumers,
            rate,
            release,
            no_commit_metadata,
            dir,
            exactly_once,
            binary,
        } => chaos(ChaosRun {
            minutes,
            seed,
            consumers,
            rate,
            release,
            commit_metadata: !no_commit_metadata,
            dir,
            exactly_once,
            binary,
        }),
        Task::Fuzz {
            iterations,
            seed,
            targets,
        } => xtask::fuzz::run(&xtask::root(), iterations, seed, &targets),
        Task::Compat {
            versions,
            records,
            no_write,
            binary,
        } => {
            let write = !no_write && versions.is_empty();
            if !no_write && !write {
                eprintln!("(--versions: the README's matrix is left as it is)");
            }
            compat(&versions, records, write, binary)
        }
        Task::Dist { targets } => {
            let artifacts = xtask::dist::run(&xtask::root(), &targets)?;
            for a in &artifacts {
                println!("{}", a.archive.display());
            }
            Ok(())
        }
    }
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(xtask::root());
    c
}

fn step(name: &str, mut cmd: Command) -> Result<()> {
    eprintln!("==> {name}");
    let status = cmd.status().with_context(|| format!("running {name}"))?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

/// Target-selection flags of `cargo test`: with one of them, the doc tests are not part of the run
/// (as with `cargo test`).
const TARGET_FLAGS: &[&str] = &[
    "--lib",
    "--bin",
    "--bins",
    "--test",
    "--tests",
    "--example",
    "--examples",
    "--bench",
    "--benches",
    "--all-targets",
];

/// The whole suite against one fresh broker. TLS is in the default build, so the TLS broker test
/// (it starts its own broker with an SSL listener) and the qemu test of the aarch64 binary (it
/// builds that binary once, in the `dist` profile) are part of it.
fn test(args: &[String], jobs: Option<usize>) -> Result<()> {
    let (cargo_args, test_args) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], args[i + 1..].to_vec()),
        None => (args, Vec::new()),
    };
    if cargo_args.iter().any(|a| a == "--doc") {
        // Only the doc tests: no broker, nothing to run side by side.
        let mut cmd = cargo();
        cmd.arg("test").args(args);
        return step("cargo test --doc", cmd);
    }
    // The whole workspace unless packages are named.
    let packages = cargo_args
        .iter()
        .any(|a| a == "-p" || a.starts_with("-p") || a.starts_with("--package"));
    let mut selection: Vec<String> = if packages {
        Vec::new()
    } else {
        vec!["--workspace".into()]
    };
    selection.extend(cargo_args.iter().cloned());
    let mut build = vec!["test".to_string(), "--no-run".into()];
    build.extend(selection.iter().cloned());
    eprintln!("==> cargo {}", build.join(" "));
    let built = xtask::testrun::build(&xtask::root(), &build)?;
    let selects_targets = cargo_args.iter().any(|a| {
        TARGET_FLAGS
            .iter()
            .any(|f| a == f || a.starts_with(&format!("{f}=")))
    });
    run_suite(
        built.tests,
        jobs,
        (!selects_targets).then_some(selection),
        test_args,
    )
}

/// Runs `tests` (and the doc tests with `doc_args`) against one fresh broker, stopped at the end
/// even if tests fail.
fn run_suite(
    tests: Vec<xtask::testrun::TestBinary>,
    jobs: Option<usize>,
    doc_args: Option<Vec<String>>,
    test_args: Vec<String>,
) -> Result<()> {
    let broker = start_test_broker()?;
    let root = xtask::root();
    let opts = suite_options(
        &broker,
        jobs,
        doc_args,
        test_args,
        xtask::target_dir(&root).join("xtask-test"),
    );
    eprintln!("==> {} test binaries, {} at a time", tests.len(), opts.jobs);
    let result = xtask::testrun::run(&root, tests, &opts);
    stop_test_broker(&broker, result.is_err())?;
    result.map(|_| ())
}

/// One fresh broker for a test run. The guarded start also spawns a watchdog: if this process
/// dies (Ctrl-C), the broker ends too.
fn start_test_broker() -> Result<orderly_testkit::RunningBroker> {
    eprintln!(
        "==> starting one Apache Kafka {} broker for this test run",
        orderly_testkit::KAFKA_VERSION
    );
    let broker = orderly_testkit::start_guarded(&orderly_testkit::BrokerOptions::default())?;
    eprintln!(
        "    bootstrap {} log {}",
        broker.bootstrap,
        broker.log().display()
    );
    Ok(broker)
}

fn stop_test_broker(broker: &orderly_testkit::RunningBroker, failed: bool) -> Result<()> {
    orderly_testkit::process::stop(broker)?;
    if failed {
        eprintln!("broker log of this run: {}", broker.log().display());
    }
    Ok(())
}

/// How the test binaries run against `broker`: `jobs` at a time (default twice the CPUs), logs
/// and durations in `dir`.
fn suite_options(
    broker: &orderly_testkit::RunningBroker,
    jobs: Option<usize>,
    doc_args: Option<Vec<String>>,
    test_args: Vec<String>,
    dir: std::path::PathBuf,
) -> xtask::testrun::RunOptions {
    let jobs = jobs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    xtask::testrun::RunOptions {
        jobs,
        test_args,
        env: vec![
            (
                orderly_testkit::ENV_BOOTSTRAP.to_string(),
                broker.bootstrap.clone(),
            ),
            (
                orderly_testkit::ENV_BROKER_LOG.to_string(),
                broker.log().display().to_string(),
            ),
        ],
        doc_args,
        dir,
    }
}

/// The test binary that runs the aarch64 static build under qemu.
const QEMU_TEST: &str = "qemu_aarch64";

fn ci() -> Result<()> {
    let root = xtask::root();
    let logs = xtask::target_dir(&root).join("xtask-ci");
    // The runs beside the suite are this program with other arguments. The workspace build below
    // rebuilds (replaces) its file, so they run a copy taken now.
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let me = logs.join("xtask");
    std::fs::copy(std::env::current_exe().context("this program's path")?, &me)
        .with_context(|| format!("copying this program to {}", me.display()))?;
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--check"]);
    step("cargo fmt --check", fmt)?;
    let mut clippy = cargo();
    clippy.args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    step("cargo clippy -D warnings", clippy)?;
    tidy()?;
    // A fresh machine adds the musl target before anything runs side by side.
    let aarch64 = "aarch64-unknown-linux-musl";
    xtask::dist::ensure_targets(&[aarch64.to_string()])?;
    // One build of everything: the test binaries, `orderly` and the benchmark programs, with the
    // features the tests unify, so the compat, bench and chaos runs below build nothing more.
    eprintln!("==> cargo build --workspace --all-targets");
    let built = xtask::testrun::build(
        &root,
        &["build".into(), "--workspace".into(), "--all-targets".into()],
    )?;
    let orderly = built
        .bins
        .get("orderly")
        .context("the build produced no `orderly` binary")?
        .display()
        .to_string();
    let (qemu, tests): (Vec<_>, Vec<_>) =
        built.tests.into_iter().partition(|t| t.target == QEMU_TEST);
    let seed = CI_CHAOS_SEED.to_string();
    let eos_seed = CI_EXACTLY_ONCE_SEED.to_string();
    let eos_dir = orderly_testkit::kafka_home()
        .join("chaos-exactly-once")
        .display()
        .to_string();
    let compat_args = [
        "compat",
        "--versions",
        xtask::compat::OLDEST_SUPPORTED,
        "--records",
        "2000",
        "--no-write",
        "--binary",
        &orderly,
    ];
    let side = [
        // The oldest broker orderly supports in the short form (the current one serves the
        // suite), then the benchmark harness in its tiny form: a smoke run checked by the
        // verifier, not a timing.
        vec![compat_args.to_vec(), vec!["bench", "--smoke", "--prebuilt"]],
        // A short chaos run with a fixed seed: every fault kind at least once (README, "Tasks");
        // then the exactly-once mode's short form: consumer kills, a zombie, a broker restart
        // and a transaction-coordinator kill, its replies read back with read_committed.
        vec![
            vec![
                "chaos",
                "--minutes",
                "2",
                "--seed",
                &seed,
                "--consumers",
                "3",
                "--rate",
                "200",
                "--binary",
                &orderly,
            ],
            vec![
                "chaos",
                "--exactly-once",
                "--minutes",
                "1",
                "--seed",
                &eos_seed,
                "--binary",
                &orderly,
                // A cluster directory of its own: the first run's cluster may still be going
                // away in the default one.
                "--dir",
                &eos_dir,
            ],
        ],
    ];
    // The CPU-bound steps first, one after another: the API documentation of every crate builds
    // without a warning (broken intra-doc links, unclosed HTML, bare URLs; rustdoc only, no
    // dependencies documented), and the aarch64 static binary the qemu test runs.
    let mut doc = cargo();
    doc.args(["doc", "--no-deps", "--workspace"])
        .env("RUSTDOCFLAGS", "-D warnings");
    logged_step("cargo doc (warnings denied)", doc, &logs.join("doc.log"))?;
    logged_step(
        "cargo build --profile dist --target aarch64-unknown-linux-musl",
        xtask::dist::build_command(&root, aarch64),
        &logs.join("dist-aarch64.log"),
    )?;
    // Then the suite, as many test binaries at a time as the machine has cores (they mostly
    // wait on the broker), and after it the runs that start brokers of their own, in turn: a
    // machine loaded past its cores turns every timeout in them into a race.
    let broker = start_test_broker()?;
    let suite_opts = suite_options(
        &broker,
        None,
        Some(vec!["--workspace".into()]),
        Vec::new(),
        xtask::target_dir(&root).join("xtask-test"),
    );
    let qemu_opts = suite_options(&broker, Some(1), None, Vec::new(), logs.join("qemu"));
    eprintln!(
        "==> {} test binaries, {} at a time",
        tests.len(),
        suite_opts.jobs
    );
    let suite = xtask::testrun::run(&root, tests, &suite_opts)
        .and_then(|_| xtask::testrun::run(&root, qemu, &qemu_opts).map(|_| ()));
    let side: Vec<Result<()>> = side
        .iter()
        .map(|runs| side_runs(&me, runs, &logs))
        .collect();
    let mut failed = Vec::new();
    if let Err(e) = &suite {
        failed.push(format!("the test suite: {}", error_chain(e)));
    }
    failed.extend(
        side.iter()
            .filter_map(|r| r.as_ref().err())
            .map(error_chain),
    );
    stop_test_broker(&broker, !failed.is_empty())?;
    if !failed.is_empty() {
        bail!("{}", failed.join("; "));
    }
    Ok(())
}

/// Runs `cmd` with its output in `log`, printed in one piece when it ends.
fn logged_step(name: &str, mut cmd: Command, log: &std::path::Path) -> Result<()> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let started = std::time::Instant::now();
    let status = match cmd
        .stdin(std::process::Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .status()
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("==> {name}: could not start: {e}");
            return Err(e).with_context(|| format!("running {name}"));
        }
    };
    let text = std::fs::read_to_string(log).unwrap_or_default();
    eprintln!(
        "==> {name}: {} in {:.0} s (log {})\n{text}",
        if status.success() { "ok" } else { "FAILED" },
        started.elapsed().as_secs_f64(),
        log.display()
    );
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

/// Runs `cargo xtask <args>` for each of `runs` in turn (`me`: a copy of this program), each
/// one's output in `logs/<task>.log`, printed in one piece when it ends; stops at the first
/// failure.
fn side_runs(me: &std::path::Path, runs: &[Vec<&str>], logs: &std::path::Path) -> Result<()> {
    for args in runs {
        let mut cmd = Command::new(me);
        cmd.args(args).current_dir(xtask::root());
        logged_step(
            &format!("cargo xtask {}", args.join(" ")),
            cmd,
            &logs.join(format!("{}.log", args.first().copied().unwrap_or("run"))),
        )?;
    }
    Ok(())
}

/// Builds `orderly`, runs the releases and (with `write`) rewrites the README's matrix.
fn compat(
    versions: &[String],
    records: u64,
    write: bool,
    binary: Option<std::path::PathBuf>,
) -> Result<()> {
    let root = xtask::root();
    let binary = match binary {
        Some(b) => b,
        None => build_orderly(false)?,
    };
    let names: Vec<&str> = if versions.is_empty() {
        xtask::compat::DEFAULT_VERSIONS.to_vec()
    } else {
        versions.iter().map(String::as_str).collect()
    };
    let versions = names
        .iter()
        .map(|v| v.parse())
        .collect::<Result<Vec<_>, _>>()?;
    let opts = xtask::compat::CompatOptions {
        versions,
        records,
        binary,
        dir: orderly_testkit::kafka_home().join("compat"),
    };
    let outcomes = xtask::compat::run(&opts)?;
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.passed())
        .map(|o| o.release.to_string())
        .collect();
    if write {
        let commit = git(&["rev-parse", "--short", "HEAD"]);
        let date = git(&["log", "-1", "--format=%cs"]);
        let block = xtask::compat::matrix(&outcomes, &commit, &date);
        xtask::compat::write_matrix(&root.join("README.md"), &block)?;
        eprintln!("README.md: support matrix rewritten");
    }
    if !failed.is_empty() {
        bail!("compat failed for {}", failed.join(", "));
    }
    Ok(())
}

fn git(args: &[&str]) -> String {
    Command::new("git")
        .args(args)
        .current_dir(xtask::root())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The seed of CI's chaos run, so a CI failure reproduces with `cargo xtask chaos --seed 20261201`.
const CI_CHAOS_SEED: u64 = 20_261_201;

/// The seed of CI's exactly-once chaos run (`cargo xtask chaos --exactly-once --minutes 1 --seed
/// 35035` reproduces it).
const CI_EXACTLY_ONCE_SEED: u64 = 35_035;

/// What `cargo xtask chaos` was asked to run.
struct ChaosRun {
    minutes: f64,
    seed: Option<u64>,
    consumers: usize,
    rate: u32,
    release: bool,
    commit_metadata: bool,
    dir: Option<std::path::PathBuf>,
    exactly_once: bool,
    binary: Option<std::path::PathBuf>,
}

/// `cargo build -p orderly-cli` (debug or release); returns the binary's path.
fn build_orderly(release: bool) -> Result<std::path::PathBuf> {
    let mut build = cargo();
    build.args(["build", "-p", "orderly-cli"]);
    if release {
        build.arg("--release");
    }
    step("cargo build -p orderly-cli", build)?;
    Ok(xtask::target_dir(&xtask::root())
        .join(if release { "release" } else { "debug" })
        .join("orderly"))
}

fn chaos(run: ChaosRun) -> Result<()> {
    let ChaosRun {
        minutes,
        seed,
        consumers,
        rate,
        release,
        commit_metadata,
        dir,
        exactly_once,
        binary,
    } = run;
    let root = xtask::root();
    let binary = match binary {
        Some(b) => b,
        None => build_orderly(release)?,
    };
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    });
    let opts = xtask::chaos::ChaosOptions {
        minutes,
        seed,
        consumers,
        partitions: 6,
        sessions: 300,
        rate,
        binary,
        dir: dir.unwrap_or_else(|| xtask::chaos::default_dir(&root)),
        commit_metadata,
        exactly_once,
    };
    eprintln!(
        "==> chaos (seed {seed}, {minutes} min{})",
        if exactly_once { ", exactly-once" } else { "" }
    );
    let rt = tokio::runtime::Runtime::new()?;
    let report = rt.block_on(xtask::chaos::run(opts.clone()))?;
    xtask::chaos::print(&report, &opts)
}

fn tidy() -> Result<()> {
    eprintln!("==> tidy");
    let problems = xtask::tidy::run(&xtask::root())?;
    for p in &problems {
        eprintln!("tidy: {p}");
    }
    if !problems.is_empty() {
        bail!("tidy found {} problem(s)", problems.len());
    }
    Ok(())
}

/// The error and its causes, each cause only if the message so far does not already say it (our
/// library errors include their cause in their own message).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}
