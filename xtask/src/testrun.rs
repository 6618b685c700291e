//! `cargo xtask test`: builds every test binary once, then runs several of them at a time.
//!
//! `cargo test` runs its test binaries one after another, and most of a broker test's time is
//! spent waiting on the broker (rebalances, session and transaction timeouts), not on the CPU. So
//! the suite is built with `cargo test --no-run`, and the binaries then run `jobs` at a time, the
//! longest first (by the time each took in the previous run, kept in
//! `target/xtask-test/durations`), each with its output in `target/xtask-test/<binary>.log`,
//! printed in one piece when it ends. The doc tests run as one more job (`cargo test --doc`).
//!
//! A binary whose tests took long last time (a crate's broker tests share one binary), or that
//! has not run before, is split into shards: its tests (`--list`) dealt round-robin into up to
//! `jobs` processes, each running its share by exact name, so one crate's slow tests do not
//! queue behind each other on libtest's few threads. Every shard uses the same shared broker; the tests are independent of each other
//! (own topics and groups), in one process or several.
//!
//! Every binary gets what `cargo test` gives it: its package directory as working directory and
//! `CARGO_MANIFEST_DIR` / `CARGO_PKG_NAME`, plus the caller's extra environment (the shared
//! broker's address).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// One test executable `cargo test --no-run` built.
#[derive(Debug, Clone)]
pub struct TestBinary {
    /// Package name, e.g. `orderly-consumer`.
    pub package: String,
    /// Target name, e.g. `broker` or `orderly_consumer` (the library's unit tests).
    pub target: String,
    /// Target kind as cargo names it: `lib`, `bin`, `test`, `example`, `bench`.
    pub kind: String,
    /// The executable.
    pub path: PathBuf,
    /// The package directory (`cargo test` runs a test binary there).
    pub dir: PathBuf,
}

impl TestBinary {
    /// `package/kind/target`, unique in a workspace.
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.package, self.kind, self.target)
    }
}

/// What one build produced: the test binaries and the plain binaries built beside them (an
/// integration test's `CARGO_BIN_EXE_*`, e.g. `orderly`), by name.
#[derive(Debug, Default)]
pub struct Built {
    /// The test executables.
    pub tests: Vec<TestBinary>,
    /// Plain executables (not test harnesses), by target name.
    pub bins: BTreeMap<String, PathBuf>,
}

/// `cargo <cargo_args> --message-format=json-render-diagnostics`, run in `root`, where
/// `cargo_args` builds test binaries: `test --no-run …` or `build --all-targets …`.
pub fn build(root: &Path, cargo_args: &[String]) -> Result<Built> {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root)
        .args(cargo_args)
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped());
    let out = cmd
        .spawn()
        .and_then(|c| c.wait_with_output())
        .context("running cargo")?;
    if !out.status.success() {
        bail!("building the tests failed ({})", out.status);
    }
    let mut built = Built::default();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(path) = msg["executable"].as_str() else {
            continue;
        };
        let target = msg["target"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if msg["profile"]["test"] != true {
            built.bins.insert(target, PathBuf::from(path));
            continue;
        }
        let manifest = PathBuf::from(msg["manifest_path"].as_str().unwrap_or_default());
        built.tests.push(TestBinary {
            package: package_name(msg["package_id"].as_str().unwrap_or_default()),
            target,
            kind: msg["target"]["kind"][0]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            path: PathBuf::from(path),
            dir: manifest.parent().map(Path::to_path_buf).unwrap_or_default(),
        });
    }
    Ok(built)
}

/// The package name in a package id: `path+file:///x/crates/cli#orderly-cli@0.1.0` or the older
/// `orderly-cli 0.1.0 (path+file:///x)` form.
fn package_name(id: &str) -> String {
    if let Some((_, tail)) = id.rsplit_once('#') {
        let name = tail.split('@').next().unwrap_or(tail);
        // `…/crates/cli#0.1.0` (the name equals the directory): no `@`, the tail is a version.
        if name.chars().next().is_some_and(|c| c.is_ascii_digit()) {
            let dir = id[..id.len() - tail.len() - 1].rsplit('/').next();
            return dir.unwrap_or(name).to_string();
        }
        return name.to_string();
    }
    id.split(' ').next().unwrap_or(id).to_string()
}

/// How one binary (or the doc-test job) ended.
#[derive(Debug)]
pub struct Outcome {
    /// [`TestBinary::id`] (with `#<shard>of<shards>` for a shard), or `doc-tests`.
    pub id: String,
    /// [`TestBinary::id`] of the binary it ran (part of), or `doc-tests`.
    pub binary: String,
    /// Whether it passed.
    pub passed: bool,
    /// Wall time.
    pub took: Duration,
    /// Its combined stdout and stderr.
    pub log: PathBuf,
}

/// What to run and how.
#[derive(Debug)]
pub struct RunOptions {
    /// Binaries running at once.
    pub jobs: usize,
    /// Arguments for every test binary (after `--` on the command line: filters, `--nocapture`).
    pub test_args: Vec<String>,
    /// Extra environment of every test process.
    pub env: Vec<(String, String)>,
    /// The `cargo test --doc` arguments (package selection), or `None` to skip the doc tests.
    pub doc_args: Option<Vec<String>>,
    /// Where the logs and the durations file go.
    pub dir: PathBuf,
}

/// A binary whose tests took at least twice this long last time is split into shards of about
/// this much each (at most `jobs` of them).
const SHARD_SECONDS: f64 = 30.0;

/// Part of a binary's tests, run by exact name.
struct Shard {
    index: usize,
    of: usize,
    tests: Vec<String>,
}

enum Job {
    Binary(TestBinary, Option<Shard>),
    Doc(Vec<String>),
}

impl Job {
    fn id(&self) -> String {
        match self {
            Job::Binary(b, None) => b.id(),
            Job::Binary(b, Some(s)) => format!("{}#{}of{}", b.id(), s.index + 1, s.of),
            Job::Doc(_) => "doc-tests".into(),
        }
    }

    /// The binary this job runs part or all of (its id), for the durations file.
    fn binary_id(&self) -> String {
        match self {
            Job::Binary(b, _) => b.id(),
            Job::Doc(_) => "doc-tests".into(),
        }
    }
}

/// The test names of `binary` (`--list --format terse`).
fn list(binary: &TestBinary) -> Result<Vec<String>> {
    let out = Command::new(&binary.path)
        .current_dir(&binary.dir)
        .args(["--list", "--format", "terse"])
        .stderr(Stdio::null())
        .output()
        .with_context(|| format!("listing the tests of {}", binary.id()))?;
    if !out.status.success() {
        bail!(
            "listing the tests of {} failed ({})",
            binary.id(),
            out.status
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .map(str::to_string)
        .collect())
}

/// How many shards a binary that took `took` seconds last time wants: one per
/// [`SHARD_SECONDS`] of it, and as many as may run at once for a binary not seen before (it
/// counts as long, as in the order the jobs start in).
fn shards_wanted(took: Option<f64>, jobs: usize) -> usize {
    took.map_or(jobs, |t| (t / SHARD_SECONDS).ceil() as usize)
}

/// The jobs of `binary`: the whole binary, or shards when it took `took` seconds last time (or
/// never ran).
fn jobs_of(binary: TestBinary, took: Option<f64>, opts: &RunOptions) -> Vec<Job> {
    let want = shards_wanted(took, opts.jobs);
    // Arguments for the binary (a filter, `--exact`) decide what runs: no sharding then.
    if want < 2 || opts.jobs < 2 || !opts.test_args.is_empty() {
        return vec![Job::Binary(binary, None)];
    }
    let tests = match list(&binary) {
        Ok(t) if t.len() >= 2 => t,
        _ => return vec![Job::Binary(binary, None)],
    };
    let of = want.min(opts.jobs).min(tests.len());
    let mut shards: Vec<Shard> = (0..of)
        .map(|index| Shard {
            index,
            of,
            tests: Vec::new(),
        })
        .collect();
    for (i, t) in tests.into_iter().enumerate() {
        shards[i % of].tests.push(t);
    }
    shards
        .into_iter()
        .map(|s| Job::Binary(binary.clone(), Some(s)))
        .collect()
}

/// Runs `binaries` (and the doc tests) `opts.jobs` at a time, longest first; prints each one's
/// output when it ends and a table of times at the end. Fails if any failed.
pub fn run(root: &Path, binaries: Vec<TestBinary>, opts: &RunOptions) -> Result<Vec<Outcome>> {
    std::fs::create_dir_all(&opts.dir)
        .with_context(|| format!("creating {}", opts.dir.display()))?;
    let durations_file = opts.dir.join("durations");
    let previous = read_durations(&durations_file);
    let mut jobs: Vec<Job> = binaries
        .into_iter()
        .flat_map(|b| {
            let took = previous.get(&b.id()).copied();
            jobs_of(b, took, opts)
        })
        .collect();
    if let Some(args) = &opts.doc_args {
        jobs.push(Job::Doc(args.clone()));
    }
    // Longest first (a shard: its binary's time over the shards); a binary not seen before
    // counts as long (it may start a broker of its own).
    let guess = |j: &Job| {
        let whole = previous.get(&j.binary_id()).copied().unwrap_or(f64::MAX);
        match j {
            Job::Binary(_, Some(s)) => whole / s.of as f64,
            _ => whole,
        }
    };
    jobs.sort_by(|a, b| guess(b).total_cmp(&guess(a)));
    let total = jobs.len();
    let queue = Mutex::new(jobs.into_iter().collect::<VecDeque<_>>());
    let outcomes = Mutex::new(Vec::with_capacity(total));
    let print = Mutex::new(());
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.max(1) {
            s.spawn(|| {
                loop {
                    let job = match queue.lock() {
                        Ok(mut q) => q.pop_front(),
                        Err(_) => None,
                    };
                    let Some(job) = job else { break };
                    let outcome = run_one(root, &job, opts);
                    if let Ok(_guard) = print.lock() {
                        report(&outcome, total);
                    }
                    if let Ok(mut o) = outcomes.lock() {
                        o.push(outcome);
                    }
                }
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap_or_default();
    outcomes.sort_by_key(|o| std::cmp::Reverse(o.took));
    eprintln!(
        "==> test binaries by wall time ({} jobs at a time)",
        opts.jobs
    );
    for o in &outcomes {
        eprintln!(
            "    {:>6.1} s  {}{}",
            o.took.as_secs_f64(),
            o.id,
            if o.passed { "" } else { "  FAILED" }
        );
    }
    write_durations(&durations_file, &previous, &outcomes);
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| !o.passed)
        .map(|o| o.id.as_str())
        .collect();
    if !failed.is_empty() {
        for o in outcomes.iter().filter(|o| !o.passed) {
            eprintln!("    log of {}: {}", o.id, o.log.display());
        }
        bail!(
            "{} test binaries failed: {}",
            failed.len(),
            failed.join(", ")
        );
    }
    Ok(outcomes)
}

fn run_one(root: &Path, job: &Job, opts: &RunOptions) -> Outcome {
    let id = job.id();
    let log = opts.dir.join(format!("{}.log", id.replace('/', "-")));
    let started = Instant::now();
    let passed = spawn(root, job, opts, &log).unwrap_or_else(|e| {
        let _ = std::fs::write(&log, format!("could not run {id}: {e:#}\n"));
        false
    });
    Outcome {
        id,
        binary: job.binary_id(),
        passed,
        took: started.elapsed(),
        log,
    }
}

fn spawn(root: &Path, job: &Job, opts: &RunOptions, log: &Path) -> Result<bool> {
    let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = match job {
        Job::Binary(b, shard) => {
            let mut c = Command::new(&b.path);
            c.current_dir(&b.dir).args(&opts.test_args);
            if let Some(s) = shard {
                c.arg("--exact").args(&s.tests);
            }
            c.env("CARGO_MANIFEST_DIR", &b.dir)
                .env("CARGO_PKG_NAME", &b.package);
            c
        }
        Job::Doc(args) => {
            let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            c.current_dir(root)
                .args(["test", "--doc"])
                .args(args)
                .arg("--")
                .args(&opts.test_args);
            c
        }
    };
    cmd.envs(opts.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file);
    let status = cmd
        .status()
        .with_context(|| format!("running {}", job.id()))?;
    Ok(status.success())
}

/// Prints a finished binary's output: all of it if it failed, else its test-result lines.
fn report(o: &Outcome, total: usize) {
    let text = std::fs::read_to_string(&o.log).unwrap_or_default();
    let verdict = if o.passed { "ok" } else { "FAILED" };
    eprintln!(
        "==> {} {verdict} in {:.1} s (of {total})",
        o.id,
        o.took.as_secs_f64()
    );
    if o.passed {
        for line in text.lines().filter(|l| l.starts_with("test result:")) {
            eprintln!("    {line}");
        }
    } else {
        eprintln!("{text}");
    }
}

fn read_durations(file: &Path) -> BTreeMap<String, f64> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (secs, id) = l.split_once(' ')?;
            Some((id.to_string(), secs.parse().ok()?))
        })
        .collect()
}

/// Keeps each binary's time: the sum over its shards (what one process would have needed with
/// the shards' threads), so the next run can split it again.
fn write_durations(file: &Path, previous: &BTreeMap<String, f64>, outcomes: &[Outcome]) {
    let mut this_run: BTreeMap<String, f64> = BTreeMap::new();
    for o in outcomes {
        *this_run.entry(o.binary.clone()).or_default() += o.took.as_secs_f64();
    }
    let mut all = previous.clone();
    all.extend(this_run);
    let text: String = all
        .iter()
        .map(|(id, secs)| format!("{secs:.1} {id}\n"))
        .collect();
    let _ = std::fs::write(file, text);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_from_both_id_forms() {
        assert_eq!(
            package_name("path+file:///w/crates/cli#orderly-cli@0.1.0"),
            "orderly-cli"
        );
        assert_eq!(package_name("path+file:///w/xtask#0.1.0"), "xtask");
        assert_eq!(
            package_name("orderly-cli 0.1.0 (path+file:///w/crates/cli)"),
            "orderly-cli"
        );
    }

    #[test]
    fn a_binary_is_split_by_its_last_time_or_as_far_as_jobs_allow_when_new() {
        assert_eq!(shards_wanted(Some(1.5), 4), 1);
        assert_eq!(shards_wanted(Some(45.0), 4), 2);
        assert_eq!(shards_wanted(Some(260.0), 4), 9);
        assert_eq!(shards_wanted(None, 4), 4);
        assert_eq!(shards_wanted(None, 1), 1);
    }

    #[test]
    fn durations_round_trip_and_new_outcomes_replace_old_ones() {
        let dir = std::env::temp_dir().join(format!("xtask-durations-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("durations");
        let mut previous = BTreeMap::new();
        previous.insert("a/test/x".to_string(), 3.0);
        previous.insert("a/test/y".to_string(), 5.0);
        let outcome = |id: &str, binary: &str, ms| Outcome {
            id: id.into(),
            binary: binary.into(),
            passed: true,
            took: Duration::from_millis(ms),
            log: dir.join("y.log"),
        };
        let outcomes = [
            outcome("a/test/y#1of2", "a/test/y", 1000),
            outcome("a/test/y#2of2", "a/test/y", 500),
        ];
        write_durations(&file, &previous, &outcomes);
        let read = read_durations(&file);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(read.get("a/test/x"), Some(&3.0));
        assert_eq!(read.get("a/test/y"), Some(&1.5));
        assert_eq!(read.len(), 2);
    }
}
