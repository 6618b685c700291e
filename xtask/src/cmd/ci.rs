//! `cargo xtask ci`: everything CI checks, in one command (see the README's "Tasks").

use std::collections::VecDeque;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

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
    super::tidy::rules()?;
    // A fresh machine adds the musl target and resolves the Kafka distribution every broker
    // below runs from before anything runs side by side.
    let aarch64 = "aarch64-unknown-linux-musl";
    xtask::dist::ensure_targets(&[aarch64.to_string()])?;
    orderly_testkit::KafkaDist::ensure()?;
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
    super::tidy::references(Path::new(&orderly))?;
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
    // The runs that start brokers of their own, longest first: the exactly-once mode's short
    // form (consumer kills, a zombie, a broker restart and a transaction-coordinator kill, its
    // replies read back with read_committed); a short chaos run with a fixed seed, every fault
    // kind at least once (README, "Tasks"); the oldest broker orderly supports in the short form
    // (the current one serves the suite); the benchmark harness in its tiny form, a smoke run
    // checked by the verifier, not a timing.
    let side = [
        SideRun {
            log: "chaos-exactly-once",
            args: vec![
                "chaos",
                "--exactly-once",
                "--minutes",
                "1",
                "--seed",
                &eos_seed,
                "--binary",
                &orderly,
                // A cluster directory of its own: the other chaos run may use the default one
                // at the same time.
                "--dir",
                &eos_dir,
            ],
        },
        SideRun {
            log: "chaos",
            args: vec![
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
        },
        SideRun {
            log: "compat",
            args: compat_args.to_vec(),
        },
        SideRun {
            log: "bench",
            args: vec!["bench", "--smoke", "--prebuilt"],
        },
    ];
    // While rustdoc and the aarch64 build run, a second lane takes the side runs (their brokers
    // mostly wait out fault schedules). The suite starts once that lane finished the run it is
    // in and takes no new one: a 3-node cluster beside the suite's broker tests overloads two
    // cores (read_committed checks by JVM tools then time out). What is left runs after it.
    eprintln!(
        "==> beside the rest, one after another: {}",
        side.iter()
            .map(|r| format!("`cargo xtask {}`", r.args.join(" ")))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let queue = Mutex::new(side.iter().collect::<VecDeque<_>>());
    let lane_stop = AtomicBool::new(false);
    let (suite, side) = std::thread::scope(|s| {
        let lane = s.spawn(|| side_runs(&me, &queue, &logs, &lane_stop));
        let built = docs_and_dist(&root, &logs, aarch64).map_err(|e| error_chain(&e));
        lane_stop.store(true, Ordering::SeqCst);
        let mut side: Vec<String> = match lane.join() {
            Ok(r) => r.iter().map(error_chain).collect(),
            Err(_) => vec!["a lane of the side runs panicked".into()],
        };
        let suite = built.and_then(|()| {
            suite(&root, tests, qemu, &logs)
                .map_err(|e| format!("the test suite: {}", error_chain(&e)))
        });
        side.extend(
            side_runs(&me, &queue, &logs, &AtomicBool::new(false))
                .iter()
                .map(error_chain),
        );
        (suite, side)
    });
    let failed: Vec<String> = suite.err().into_iter().chain(side).collect();
    if !failed.is_empty() {
        bail!("{}", failed.join("; "));
    }
    Ok(())
}

/// The CPU-bound steps, one after another: the API documentation of every crate builds without
/// a warning (broken intra-doc links, unclosed HTML, bare URLs; rustdoc only, no dependencies
/// documented), and the aarch64 static binary the qemu test runs.
fn docs_and_dist(root: &Path, logs: &Path, aarch64: &str) -> Result<()> {
    let mut doc = cargo();
    doc.args(["doc", "--no-deps", "--workspace"])
        .env("RUSTDOCFLAGS", "-D warnings");
    logged_step("cargo doc (warnings denied)", doc, &logs.join("doc.log"))?;
    logged_step(
        "cargo build --profile dist --target aarch64-unknown-linux-musl",
        xtask::dist::build_command(root, aarch64),
        &logs.join("dist-aarch64.log"),
    )
}

/// The test suite (twice as many binaries at a time as cores: they mostly wait on the broker),
/// then the qemu test, against one fresh broker, stopped when they end.
fn suite(
    root: &Path,
    tests: Vec<xtask::testrun::TestBinary>,
    qemu: Vec<xtask::testrun::TestBinary>,
    logs: &Path,
) -> Result<()> {
    let broker = start_test_broker()?;
    let suite_opts = suite_options(
        &broker,
        None,
        Some(vec!["--workspace".into()]),
        Vec::new(),
        xtask::target_dir(root).join("xtask-test"),
    );
    let qemu_opts = suite_options(&broker, Some(1), None, Vec::new(), logs.join("qemu"));
    eprintln!(
        "==> {} test binaries, {} at a time",
        tests.len(),
        suite_opts.jobs
    );
    let result = xtask::testrun::run(root, tests, &suite_opts)
        .and_then(|_| xtask::testrun::run(root, qemu, &qemu_opts).map(|_| ()));
    stop_test_broker(&broker, result.is_err())?;
    result
}

/// One run beside the suite: `cargo xtask <args>`, its output in `<log>.log`.
struct SideRun<'a> {
    log: &'static str,
    args: Vec<&'a str>,
}

/// Takes runs from `queue` until it is empty and runs each (`me`: a copy of this program), its
/// output printed in one piece when it ends; returns the failures.
/// Takes side runs from `queue` one after another until it is empty or `stop` is set (checked
/// before each run).
fn side_runs(
    me: &Path,
    queue: &Mutex<VecDeque<&SideRun<'_>>>,
    logs: &Path,
    stop: &AtomicBool,
) -> Vec<anyhow::Error> {
    let mut failed = Vec::new();
    loop {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let run = match queue.lock() {
            Ok(mut q) => q.pop_front(),
            Err(_) => None,
        };
        let Some(run) = run else { break };
        let mut cmd = Command::new(me);
        cmd.args(&run.args).current_dir(xtask::root());
        if let Err(e) = logged_step(
            &format!("cargo xtask {}", run.args.join(" ")),
            cmd,
            &logs.join(format!("{}.log", run.log)),
        ) {
            failed.push(e);
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_lanes_run_every_side_run_once_and_collect_each_failure() {
        let dir = std::env::temp_dir().join(format!("xtask-ci-lanes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let count = dir.join("count");
        let script = format!("echo x >> {}; exit $0", count.display());
        let runs: Vec<SideRun<'_>> = ["0", "1", "0", "1", "0"]
            .into_iter()
            .map(|code| SideRun {
                log: if code == "0" { "ok" } else { "failed" },
                args: vec!["-c", &script, code],
            })
            .collect();
        let queue = Mutex::new(runs.iter().collect::<VecDeque<_>>());
        let sh = Path::new("/bin/sh");
        let no = AtomicBool::new(false);
        let failed = std::thread::scope(|s| {
            let lane = s.spawn(|| side_runs(sh, &queue, &dir, &no));
            let mut failed = side_runs(sh, &queue, &dir, &no);
            failed.extend(lane.join().unwrap());
            failed
        });
        let ran = std::fs::read_to_string(&count).unwrap().lines().count();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(ran, 5, "every run once");
        assert_eq!(failed.len(), 2, "{failed:?}");
    }
}
