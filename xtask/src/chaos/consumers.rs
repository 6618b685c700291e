//! The `orderly consume` processes of a run: started, killed, stopped and continued, left.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};

use super::{DLQ, GROUP, REPLIES, TOPIC};

/// A running `orderly consume`.
pub(super) struct ConsumerProc {
    pub(super) name: String,
    pub(super) child: tokio::process::Child,
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
            child,
        });
        Ok(())
    }

    pub(super) async fn kill(&mut self, i: usize) -> Option<String> {
        if i >= self.running.len() {
            return None;
        }
        let mut c = self.running.remove(i);
        let _ = c.child.start_kill();
        let _ = c.child.wait().await;
        Some(c.name)
    }

    /// SIGTERM and wait (up to 40 s, then SIGKILL).
    pub(super) async fn leave(&mut self, i: usize) -> Option<String> {
        if i >= self.running.len() {
            return None;
        }
        let mut c = self.running.remove(i);
        if let Some(pid) = c.child.id() {
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status();
        }
        if tokio::time::timeout(Duration::from_secs(40), c.child.wait())
            .await
            .is_err()
        {
            eprintln!("consumer {} did not leave within 40 s; killing it", c.name);
            let _ = c.child.start_kill();
            let _ = c.child.wait().await;
        }
        Some(c.name)
    }

    /// Sends `signal` (`-STOP`, `-CONT`) to consumer `i`; its name.
    pub(super) fn signal(&self, i: usize, signal: &str) -> Option<String> {
        let c = self.running.get(i)?;
        let pid = c.child.id()?;
        let _ = std::process::Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status();
        Some(c.name.clone())
    }

    /// Consumers that exited on their own (a crash, or a zombie that stopped): named, so the
    /// report shows them. With `remove`, they leave the list (to be started again).
    pub(super) fn exited(&mut self, remove: bool) -> Vec<(String, String)> {
        let mut gone = Vec::new();
        for c in &mut self.running {
            if let Ok(Some(status)) = c.child.try_wait() {
                gone.push((c.name.clone(), status.to_string()));
            }
        }
        if remove {
            let names: Vec<&String> = gone.iter().map(|(n, _)| n).collect();
            self.running.retain(|c| !names.contains(&&c.name));
        }
        gone
    }
}
