//! `cargo xtask ci`: everything CI checks, in one command (see the README's "Tasks").

use std::process::Command;

use anyhow::{Context, Result, bail};

use super::steps::{cargo, error_chain, logged_step, step};
use super::test::{start_test_broker, stop_test_broker, suite_options};

/// The seed of CI's chaos run, so a CI failure reproduces with `cargo xtask chaos --seed 20261201`.
const CI_CHAOS_SEED: u64 = 20_261_201;

/// The seed of CI's exactly-once chaos run (`cargo xtask chaos --exactly-once --minutes 1 --seed
/// 35035` reproduces it).
const CI_EXACTLY_ONCE_SEED: u64 = 35_035;

/// The test binary that runs the aarch64 static build under qemu.
const QEMU_TEST: &str = "qemu_aarch64";

/// Runs every check; fails naming each part that failed.
pub fn run() -> Result<()> {
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
    super::tidy::run()?;
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
