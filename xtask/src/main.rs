//! `cargo xtask`: the command line of the project's tasks (see the README's "Tasks" table). It
//! parses and dispatches; each command is a module of `cmd`.

// A developer tool talks to its user on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod cmd;

use std::process::ExitCode;

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
        action: cmd::kafka::Action,
    },
    /// Run the whole test suite against one fresh broker, stopped at the end even if tests fail:
    /// every test binary built once, then several run at a time (the longest first), each one's
    /// output printed when it ends. Arguments go to `cargo test` (package or target selection);
    /// those after `--` go to every test binary (a name filter, `--nocapture`).
    Test(cmd::test::Args),
    /// What CI runs: format check, clippy with warnings denied, rustdoc with warnings denied, tidy, the test suite, the seed workload against the oldest supported broker (Kafka 2.1.1), the bench smoke run, a 2-minute chaos run (seed 20261201) and the exactly-once chaos short form (seed 35035).
    Ci,
    /// Check doc lines, that no C builds in the default dependency tree, that the README documents every task, that ARCHITECTURE.md maps every crate, that nothing refers to work history, commit subjects' length, BENCHMARKS.md's shape, that every metric the code emits is in docs/reference/metrics.md, and (building `orderly`) that docs/reference/ is what the binary prints.
    Tidy,
    /// Build `orderly` and write docs/reference/configuration.md (every command's flags) and
    /// docs/reference/metrics.md (every metric) from what it prints.
    Reference,
    /// The main job: start the local broker, produce the seed workload live while `orderly consume` hands it to an HTTP handler (one record per request, then batched at 50,000/s), print one table.
    Demo(cmd::demo::Args),
    /// Side-by-side benchmarks of orderly, the seed's design in Go and Confluent Parallel Consumer:
    /// starts the broker, builds every system, runs the scenarios interleaved, verifies every run,
    /// writes BENCHMARKS.md and the charts in benches/results/.
    Bench(cmd::bench::Args),
    /// Chaos: `orderly consume` processes in one group against a 3-node cluster behind fault
    /// proxies, a live producer, a seeded fault schedule (consumer and leader SIGKILLs, proxy
    /// drop/stall/reset, members joining and leaving, a controlled shutdown), and a checker for
    /// loss, per-session order, replays below the watermark, the DLQ and consumer exits the
    /// harness did not cause (each printed with its status and log tail, restarted, and failing
    /// the run). With --exactly-once the consumers write replies in transactions, the schedule
    /// adds a zombie (it must abort and rejoin, not exit), a transaction coordinator kill and at
    /// least ten consumer kills, and the checker reads the replies with Apache Kafka's own
    /// consumer under read_committed (each once, in session order).
    Chaos(cmd::chaos::Args),
    /// The broker compatibility matrix: for each Apache Kafka release (from its Maven jars;
    /// ZooKeeper mode before 3.3, KRaft after) the versions orderly negotiates, the seed workload
    /// (seed, run with failures: order, loss, DLQ), the lag by `orderly status` and by Kafka's
    /// consumer-groups tool; a release below 2.1 must be refused. Rewrites the README's support
    /// matrix unless --no-write.
    Compat(cmd::compat::Args),
    /// Fuzz every decoder (Kafka responses and requests, record batches, codecs, consumer-protocol
    /// payloads, commit metadata): seeded structure-aware mutation in pure Rust, `fuzz` profile
    /// (release with overflow checks); prints inputs, accepted share and time per target.
    Fuzz(cmd::fuzz::Args),
    /// Build fully static, stripped `orderly` binaries (x86_64 and aarch64 musl, linked with
    /// rust-lld: no C toolchain) and write dist/orderly-<version>-<target>.tar.gz with a SHA-256 file.
    Dist(cmd::dist::Args),
}

fn main() -> ExitCode {
    let result = match Cli::parse().task {
        Task::Kafka { action } => cmd::kafka::run(action),
        Task::Test(args) => cmd::test::run(&args),
        Task::Ci => cmd::ci::run(),
        Task::Tidy => cmd::tidy::run(),
        Task::Reference => cmd::reference::run(),
        Task::Demo(args) => cmd::demo::run(args),
        Task::Bench(args) => cmd::bench::run(&args),
        Task::Chaos(args) => cmd::chaos::run(args),
        Task::Compat(args) => cmd::compat::run(args),
        Task::Fuzz(args) => cmd::fuzz::run(&args),
        Task::Dist(args) => cmd::dist::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", cmd::steps::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}
