//! `cargo xtask test`: the whole suite against one fresh broker (see `xtask::testrun`), and the
//! broker and runner settings `cargo xtask ci` shares.

use std::path::PathBuf;

use anyhow::Result;

use super::steps::{cargo, step};

#[derive(clap::Args)]
pub struct Args {
    /// Test binaries running at once (default: twice the CPUs; most of a broker test's time
    /// is waiting).
    #[arg(long)]
    jobs: Option<usize>,
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
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
pub fn run(a: &Args) -> Result<()> {
    let args = &a.args;
    let (cargo_args, test_args) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], args[i + 1..].to_vec()),
        None => (&args[..], Vec::new()),
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
        a.jobs,
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
pub fn start_test_broker() -> Result<orderly_testkit::RunningBroker> {
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

/// Stops the test run's broker, naming its log if the run `failed`.
pub fn stop_test_broker(broker: &orderly_testkit::RunningBroker, failed: bool) -> Result<()> {
    orderly_testkit::process::stop(broker)?;
    if failed {
        eprintln!("broker log of this run: {}", broker.log().display());
    }
    Ok(())
}

/// How the test binaries run against `broker`: `jobs` at a time (default twice the CPUs), logs
/// and durations in `dir`.
pub fn suite_options(
    broker: &orderly_testkit::RunningBroker,
    jobs: Option<usize>,
    doc_args: Option<Vec<String>>,
    test_args: Vec<String>,
    dir: PathBuf,
) -> xtask::testrun::RunOptions {
    let jobs = jobs.unwrap_or_else(|| {
        2 * std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
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
