//! What the broker tests of the `orderly` binary share: running a command against the test
//! broker, starting `orderly consume` (stopped when the test ends, pass or fail), signalling it
//! and waiting for it to exit, polling a condition, reading the group's lag and the dead letters,
//! and scratch file names.

// Each test binary includes this module and uses a part of it.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use orderly_testkit::broker;

/// The `orderly` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_orderly");

/// `--heartbeat-interval 500ms --session-timeout 10s --commit-interval 500ms`: a group that
/// notices a member leave and commits within a test's patience.
pub const FAST_GROUP: [&str; 6] = [
    "--heartbeat-interval",
    "500ms",
    "--session-timeout",
    "10s",
    "--commit-interval",
    "500ms",
];

/// `--retry-base 1ms --retry-cap 50ms`: transient failures retried at once.
pub const QUICK_RETRIES: [&str; 4] = ["--retry-base", "1ms", "--retry-cap", "50ms"];

/// Runs `orderly <args>` against the test broker (`RUST_LOG=warn`) and returns its output.
pub fn orderly(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("ORDERLY_BOOTSTRAP", broker().bootstrap())
        .env("RUST_LOG", "warn")
        .output()
        .expect("running orderly")
}

/// Runs `orderly <args>`, asserts it succeeded and returns its standard output.
pub fn ok(args: &[&str]) -> String {
    let out = orderly(args);
    assert!(
        out.status.success(),
        "orderly {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A scratch path in the temporary directory, unique to this test binary's process; any file
/// left there by an earlier run is removed.
pub fn tmp(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "orderly-{}-{}-{name}",
        env!("CARGO_CRATE_NAME"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&p);
    p
}

/// A running `orderly consume`, killed when dropped (a failing test leaves none behind).
pub struct Consume(Child);

impl Consume {
    /// Starts `orderly consume <args>` against the test broker with `RUST_LOG=info`, its log
    /// (standard error) written to `log`.
    pub fn start<S: AsRef<OsStr>>(args: &[S], log: &Path) -> Consume {
        Consume::start_with(Command::new(BIN), args, log)
    }

    /// [`Consume::start`] with a command the caller prepared (its process group, say).
    pub fn start_with<S: AsRef<OsStr>>(mut cmd: Command, args: &[S], log: &Path) -> Consume {
        cmd.arg("consume")
            .args(args)
            .env("ORDERLY_BOOTSTRAP", broker().bootstrap())
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .map(Consume)
            .expect("starting orderly consume")
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Sends `sig` (`-TERM`, `-KILL`, `-STOP`, ...) with `kill`.
    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([sig, &self.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success(), "kill {sig} {}", self.id());
    }

    /// SIGTERM: the graceful stop.
    pub fn sigterm(&self) {
        self.signal("-TERM");
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }

    /// Waits for the process to exit and returns its exit code (-1 for a signal); kills it and
    /// fails the test after `patience` (generous: the machine is busy).
    pub fn wait_exit(&mut self, patience: Duration) -> i32 {
        let deadline = Instant::now() + patience;
        loop {
            if let Some(st) = self.0.try_wait().unwrap() {
                return st.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = self.0.kill();
                panic!("orderly consume did not exit within {patience:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERM, then the exit code within `patience`.
    pub fn stop(&mut self, patience: Duration) -> i32 {
        self.sigterm();
        self.wait_exit(patience)
    }
}

impl Drop for Consume {
    fn drop(&mut self) {
        if self.running() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Polls `f` until it holds; fails the test after `patience`.
pub async fn wait_until(what: &str, patience: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + patience;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`wait_until`] for a condition that awaits (reads a topic, say).
pub async fn wait_until_async(what: &str, patience: Duration, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + patience;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The group's total lag from `orderly status`, or `None` (the reason printed) when it could
/// not tell: it is polled while a member's partitions move, when a read may fail and is read
/// again rather than fail the test.
pub fn total_lag(group: &str) -> Option<i64> {
    let out = orderly(&["status", "--group", group, "--json"]);
    if !out.status.success() {
        eprintln!(
            "orderly status --group {group} failed (read again): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["total_lag"].as_i64()
}

/// The dead letters of `dlq` as `orderly dlq ls --json` prints them, one object each.
pub fn dlq_letters(dlq: &str) -> Vec<serde_json::Value> {
    ok(&["dlq", "ls", "--dlq-topic", dlq, "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A loopback address with a port free at the time of the call (for an admin endpoint).
pub fn free_addr() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string()
}

/// The raw answer (status line, headers, body) to `METHOD path` from the HTTP server at `addr`
/// (an admin endpoint), or an empty string while nothing answers there.
pub fn http(addr: &str, method: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
    );
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// `--group G --topic T --dlq-topic D`: where an `orderly consume` of a test reads and
/// dead-letters.
pub fn group_topic_dlq<'a>(group: &'a str, topic: &'a str, dlq: &'a str) -> [&'a str; 6] {
    ["--group", group, "--topic", topic, "--dlq-topic", dlq]
}

/// Produces `kv` (lines `key<TAB>value`) to `topic` with `orderly produce --format kv`.
pub fn produce_kv(topic: &str, kv: &str) {
    let input = tmp(&format!("{topic}.kv"));
    std::fs::write(&input, kv).unwrap();
    ok(&[
        "produce",
        "--topic",
        topic,
        "--format",
        "kv",
        "--file",
        input.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&input);
}
