//! The `orderly consume` processes of a run: started, killed, stopped and continued, left; and
//! the exits the harness did not cause, each with the tail of the consumer's log.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::report::ConsumerExit;
use super::{DLQ, GROUP, REPLIES, TOPIC};

/// Lines of a consumer's log an unexpected exit carries into the report.
const LOG_TAIL_LINES: usize = 15;

/// SIGKILL's number (Linux, macOS).
const SIGKILL: i32 = 9;

/// A running `orderly consume`.
pub(super) struct ConsumerProc {
    pub(super) name: String,
    /// Its stdout and stderr.
    pub(super) log: PathBuf,
    pub(super) child: tokio::process::Child,
}

/// How the harness ends a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// SIGKILL (a consumer kill).
    Kill,
    /// SIGTERM, SIGKILL after 40 s (a member leaving, the end of the run).
    Term,
}

/// Whether a consumer that ended with `status` ended on its own, given what the harness sent it
/// to end it (`None`: nothing). A SIGKILL accounts only for a death by SIGKILL: any other status
/// means the consumer exited before the signal landed. A controlled stop accounts for whatever
/// status follows it (the consumer was asked to end).
pub(super) fn own_exit(sent: Option<Stop>, status: ExitStatus) -> bool {
    match sent {
        None => true,
        Some(Stop::Kill) => status.signal() != Some(SIGKILL),
        Some(Stop::Term) => false,
    }
}

/// The consumer processes of the run.
pub(super) struct Consumers {
    pub(super) binary: PathBuf,
    pub(super) bootstrap: String,
    pub(super) http: String,
    pub(super) dir: PathBuf,
    pub(super) running: Vec<ConsumerProc>,
    pub(super) started: u64,
    pub(super) commit_metadata: bool,
    /// `--exactly-once --reply-topic`, with the transactional id `chaos.<name>`.
    pub(super) exactly_once: bool,
    /// `--session-timeout`.
    pub(super) session_timeout: Duration,
    /// The run's start (exit times are µs since then).
    pub(super) t0: Instant,
    /// Exits the harness did not cause, in the order they were seen.
    pub(super) exits: Vec<ConsumerExit>,
}

impl Consumers {
    pub(super) async fn spawn(&mut self, name: &str) -> Result<()> {
        self.started += 1;
        let log = self.dir.join(format!("{name}-{}.log", self.started));
        let out = std::fs::File::create(&log).with_context(|| log.display().to_string())?;
        let err = out.try_clone()?;
        let child = tokio::process::Command::new(&self.binary)
            .arg("consume")
            .args(["--bootstrap", &self.bootstrap])
            .args(["--group", GROUP, "--topic", TOPIC, "--dlq-topic", DLQ])
            .args(["--http", &format!("{}/{name}", self.http)])
            .args(["--http-timeout", "5s", "--admin-addr", "off"])
            .args(["--commit-interval", "1s", "--session-timeout"])
            .arg(format!("{}s", self.session_timeout.as_secs()))
            .args(["--heartbeat-interval", "1s", "--rebalance-timeout", "20s"])
            .args(["--retry-base", "50ms", "--retry-cap", "1s"])
            .args(["--retry-max-attempts", "0", "--workers", "2"])
            .args(["--revoke-timeout", "10s", "--shutdown-timeout", "10s"])
            .args(["--dedup-header", ""])
            .args(if self.commit_metadata {
                &[][..]
            } else {
                &["--commit-metadata-limit", "0"][..]
            })
            .args(if self.exactly_once {
                vec![
                    "--exactly-once".to_string(),
                    "--reply-topic".to_string(),
                    REPLIES.to_string(),
                    "--transactional-id".to_string(),
                    format!("chaos.{name}"),
                    "--transaction-timeout".to_string(),
                    "15s".to_string(),
                ]
            } else {
                Vec::new()
            })
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        self.running.push(ConsumerProc {
            name: name.to_string(),
            log,
            child,
        });
        Ok(())
    }

    /// The index of the running consumer `name`.
    pub(super) fn index_of(&self, name: &str) -> Option<usize> {
        self.running.iter().position(|c| c.name == name)
    }

    /// SIGKILL consumer `i` and wait; its name. A consumer that had exited already, or exited
    /// otherwise than by the SIGKILL, is counted as an exit of its own.
    pub(super) async fn kill(&mut self, i: usize) -> Option<String> {
        self.end(i, Stop::Kill).await
    }

    /// SIGTERM consumer `i` and wait (up to 40 s, then SIGKILL); its name. A consumer that had
    /// exited before the SIGTERM is counted as an exit of its own.
    pub(super) async fn leave(&mut self, i: usize) -> Option<String> {
        self.end(i, Stop::Term).await
    }

    async fn end(&mut self, i: usize, stop: Stop) -> Option<String> {
        if i >= self.running.len() {
            return None;
        }
        let mut c = self.running.remove(i);
        if let Ok(Some(status)) = c.child.try_wait() {
            self.note_exit(&c, status, None);
            return Some(c.name);
        }
        let status = match stop {
            Stop::Kill => {
                let _ = c.child.start_kill();
                c.child.wait().await
            }
            Stop::Term => {
                if let Some(pid) = c.child.id() {
                    let _ = std::process::Command::new("kill")
                        .arg("-TERM")
                        .arg(pid.to_string())
                        .status();
                }
                match tokio::time::timeout(Duration::from_secs(40), c.child.wait()).await {
                    Ok(status) => status,
                    Err(_) => {
                        eprintln!("consumer {} did not leave within 40 s; killing it", c.name);
                        let _ = c.child.start_kill();
                        c.child.wait().await
                    }
                }
            }
        };
        if let Ok(status) = status {
            self.note_exit(&c, status, Some(stop));
        }
        Some(c.name)
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to the running consumer `name`; false when none runs.
    pub(super) fn signal(&self, name: &str, signal: &str) -> bool {
        let Some(pid) = self.index_of(name).and_then(|i| self.running[i].child.id()) else {
            return false;
        };
        let _ = std::process::Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status();
        true
    }

    /// Consumers that exited on their own (the harness sent them nothing that ends a process):
    /// counted in [`Consumers::exits`], taken off the running list; their names, to be started
    /// again.
    pub(super) fn reap(&mut self) -> Vec<String> {
        let mut gone = Vec::new();
        let mut i = 0;
        while i < self.running.len() {
            match self.running[i].child.try_wait() {
                Ok(Some(status)) => {
                    let c = self.running.remove(i);
                    self.note_exit(&c, status, None);
                    gone.push(c.name);
                }
                _ => i += 1,
            }
        }
        gone
    }

    /// Counts the end of `c` with `status` as an exit of its own unless `sent` accounts for it.
    fn note_exit(&mut self, c: &ConsumerProc, status: ExitStatus, sent: Option<Stop>) {
        let at = u64::try_from(self.t0.elapsed().as_micros()).unwrap_or(u64::MAX);
        if !own_exit(sent, status) {
            if !status.success() && status.signal().is_none() {
                eprintln!(
                    "[chaos {:>7.1}s] consumer {} ended its controlled stop with {status}",
                    at as f64 / 1e6,
                    c.name
                );
            }
            return;
        }
        eprintln!(
            "[chaos {:>7.1}s] consumer {} exited on its own ({status}); log {}",
            at as f64 / 1e6,
            c.name,
            c.log.display()
        );
        self.exits.push(ConsumerExit {
            consumer: c.name.clone(),
            at: at as f64 / 1e6,
            status: status.to_string(),
            log: c.log.clone(),
            tail: log_tail(&c.log, LOG_TAIL_LINES),
            after: String::new(),
        });
    }
}

/// The last `n` lines of the file at `path` (from its last 64 KiB); empty when unreadable.
fn log_tail(path: &Path, n: usize) -> Vec<String> {
    let read = || -> std::io::Result<Vec<u8>> {
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        Ok(buf)
    };
    let Ok(buf) = read() else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    fn signalled(signal: i32) -> ExitStatus {
        ExitStatus::from_raw(signal)
    }

    #[test]
    fn an_exit_is_the_consumers_own_unless_the_harness_ended_it() {
        // Nothing sent: any end is the consumer's own, a clean exit too.
        assert!(own_exit(None, exited(1)));
        assert!(own_exit(None, exited(0)));
        assert!(own_exit(None, signalled(SIGKILL)), "the OOM killer, say");
        assert!(own_exit(None, signalled(6)));
        // A SIGKILL of the schedule accounts for a death by SIGKILL only.
        assert!(!own_exit(Some(Stop::Kill), signalled(SIGKILL)));
        assert!(
            own_exit(Some(Stop::Kill), exited(1)),
            "it exited before the SIGKILL landed"
        );
        assert!(own_exit(Some(Stop::Kill), signalled(11)));
        // A controlled stop accounts for whatever follows it.
        assert!(!own_exit(Some(Stop::Term), exited(0)));
        assert!(!own_exit(Some(Stop::Term), exited(1)));
        assert!(!own_exit(Some(Stop::Term), signalled(15)));
        assert!(!own_exit(Some(Stop::Term), signalled(SIGKILL)));
    }

    /// Consumers whose processes are `sh -c <script>`, logging into `dir`.
    fn consumers(dir: &Path) -> Consumers {
        Consumers {
            binary: PathBuf::from("sh"),
            bootstrap: String::new(),
            http: String::new(),
            dir: dir.to_path_buf(),
            running: Vec::new(),
            started: 0,
            commit_metadata: true,
            exactly_once: true,
            session_timeout: Duration::from_secs(6),
            t0: Instant::now(),
            exits: Vec::new(),
        }
    }

    fn start(cs: &mut Consumers, name: &str, script: &str) {
        let log = cs.dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = tokio::process::Command::new("sh")
            .args(["-c", script])
            .stdout(out)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        cs.running.push(ConsumerProc {
            name: name.to_string(),
            log,
            child,
        });
    }

    /// Waits until the process of `name` has exited (without reaping it through `Consumers`).
    async fn until_exited(cs: &mut Consumers, name: &str) {
        let i = cs.index_of(name).unwrap();
        for _ in 0..200 {
            // `try_wait` reaps; `id` turns `None` only then, so ask the OS instead.
            let pid = cs.running[i].child.id().unwrap();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat.split_whitespace().nth(2) == Some("Z") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{name} did not exit");
    }

    #[tokio::test]
    async fn the_harness_counts_the_exits_it_did_not_cause_with_the_log_tail() {
        let dir = std::env::temp_dir().join(format!("chaos-exits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cs = consumers(&dir);
        start(&mut cs, "killed", "exec sleep 60");
        start(&mut cs, "left", "exec sleep 60");
        start(
            &mut cs,
            "crashed",
            "seq 1 30 | sed 's/^/line /'; echo 'transaction failed: fenced'; exit 3",
        );
        start(&mut cs, "gone-before-its-kill", "echo bye; exit 1");
        start(&mut cs, "gone-before-its-leave", "exit 2");
        until_exited(&mut cs, "crashed").await;
        until_exited(&mut cs, "gone-before-its-kill").await;
        until_exited(&mut cs, "gone-before-its-leave").await;

        // The schedule's SIGKILL and SIGTERM: not counted.
        let i = cs.index_of("killed").unwrap();
        assert_eq!(cs.kill(i).await.as_deref(), Some("killed"));
        let i = cs.index_of("left").unwrap();
        assert_eq!(cs.leave(i).await.as_deref(), Some("left"));
        assert!(cs.exits.is_empty(), "{:?}", cs.exits);

        // A kill or a leave that finds the consumer gone already: its own exit.
        let i = cs.index_of("gone-before-its-kill").unwrap();
        cs.kill(i).await;
        let i = cs.index_of("gone-before-its-leave").unwrap();
        cs.leave(i).await;
        // An exit found while it runs: its own, off the running list, to be started again.
        assert_eq!(cs.reap(), vec!["crashed".to_string()]);
        assert!(cs.running.is_empty());

        let seen: Vec<(&str, &str)> = cs
            .exits
            .iter()
            .map(|e| (e.consumer.as_str(), e.status.as_str()))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("gone-before-its-kill", "exit status: 1"),
                ("gone-before-its-leave", "exit status: 2"),
                ("crashed", "exit status: 3"),
            ]
        );
        let crashed = &cs.exits[2];
        assert_eq!(crashed.tail.len(), LOG_TAIL_LINES);
        assert_eq!(
            crashed.tail.last().map(String::as_str),
            Some("transaction failed: fenced")
        );
        assert_eq!(crashed.tail[0], "line 17");
        assert_eq!(cs.exits[0].tail, vec!["bye".to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
