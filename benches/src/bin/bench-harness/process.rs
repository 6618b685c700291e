//! The processes of a run: a system started with its stdout read for `READY` and its peak memory
//! sampled, stopped with SIGTERM or killed after a limit; and a clean page cache before each run.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::command::{RunOpts, system_command};
use crate::ctx::Ctx;
use crate::scenario::Scenario;
use crate::system::System;

/// Writes the page cache's dirty pages to disk (`sync`) before a measured run. Seeding a
/// backlog topic leaves ~140 MB per million records dirty, and earlier scenarios more; the
/// kernel writes them back 30 s later (`vm.dirty_expire_centisecs`), in whichever run happens to
/// be going then. After this, each run starts with the same clean page cache, and the broker's
/// data stays cached for reading.
pub async fn settle() {
    if let Err(e) = Command::new("sync").status().await {
        eprintln!("    (sync failed: {e}; runs may share the disk with write-back)");
    }
}

/// A started system: its process, the highest `VmHWM` seen of it (sampled from /proc, so a
/// process that is killed still has a figure), and whether it reported `READY`.
pub struct Running {
    /// The process.
    pub child: tokio::process::Child,
    peak_kib: std::sync::Arc<std::sync::atomic::AtomicU64>,
    ready: tokio::sync::watch::Receiver<bool>,
    /// Where its stderr goes.
    pub stderr_path: PathBuf,
}

impl Running {
    /// The highest `VmHWM` seen of it so far, KiB.
    pub fn peak_kib(&self) -> u64 {
        self.peak_kib.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits up to `limit` for `READY`.
    pub async fn wait_ready(&mut self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.ready.wait_for(|r| *r))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// Starts `sys` on `topic` in `group` ([`system_command`]), its stderr to `stderr_path`.
#[allow(clippy::too_many_arguments)]
pub fn spawn_system(
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
pub fn sample_peak(pid: Option<u32>) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
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

/// Sends SIGTERM to a process (tokio's `Child` only kills).
pub async fn terminate(child: &tokio::process::Child) {
    if let Some(pid) = child.id() {
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await;
    }
}

/// Waits up to `limit` for `child` to exit; kills it after that. `Ok(true)` when it exited
/// successfully by itself.
pub async fn wait_or_kill(child: &mut tokio::process::Child, limit: Duration) -> Result<bool> {
    match tokio::time::timeout(limit, child.wait()).await {
        Ok(st) => Ok(st?.success()),
        Err(_) => {
            let _ = child.kill().await;
            Ok(false)
        }
    }
}
