//! Running the `orderly` binary against a release's broker: to its end, bounded in time, or
//! until a line appears on its stderr.

use std::process::Command;

use super::options::CompatOptions;

/// How long a command may run against a broker below the floor before the check kills it and
/// fails: the refusal comes at the first connection, so this bound only turns a command that
/// retries forever into a failure instead of a hung run.
pub(super) const REFUSAL_BOUND: std::time::Duration = std::time::Duration::from_secs(60);

pub(super) fn orderly(
    opts: &CompatOptions,
    bootstrap: &str,
    args: &[&str],
) -> std::process::Output {
    orderly_env(opts, bootstrap, args, &[])
}

pub(super) fn orderly_env(
    opts: &CompatOptions,
    bootstrap: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    Command::new(&opts.binary)
        .args(args)
        .envs(env.iter().copied())
        .env("ORDERLY_BOOTSTRAP", bootstrap)
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .output()
        .unwrap_or_else(|e| std::process::Output {
            status: std::process::ExitStatus::default(),
            stdout: Vec::new(),
            stderr: format!("cannot run {}: {e}", opts.binary.display()).into_bytes(),
        })
}

/// Runs `orderly args` with stdin closed and returns its output, or `None` if it was still
/// running after `bound` (it is then killed).
pub(super) fn orderly_bounded(
    opts: &CompatOptions,
    bootstrap: &str,
    args: &[&str],
    bound: std::time::Duration,
) -> Option<std::process::Output> {
    let spawned = Command::new(&opts.binary)
        .args(args)
        .env("ORDERLY_BOOTSTRAP", bootstrap)
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            return Some(std::process::Output {
                status: std::process::ExitStatus::default(),
                stdout: Vec::new(),
                stderr: format!("cannot run {}: {e}", opts.binary.display()).into_bytes(),
            });
        }
    };
    // Read both pipes while waiting, so a chatty command cannot block on a full pipe.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = std::time::Instant::now() + bound;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    Some(std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// Runs `orderly args` (log level info) until a stderr line contains `needs`, then kills it:
/// the line, or (if the command ended first or [`REFUSAL_BOUND`] passed) what it printed.
pub(super) fn wait_for_line(
    opts: &CompatOptions,
    bootstrap: &str,
    args: &[&str],
    needs: &str,
) -> Result<String, String> {
    use std::io::BufRead;
    let mut child = Command::new(&opts.binary)
        .args(args)
        .env("ORDERLY_BOOTSTRAP", bootstrap)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", opts.binary.display()))?;
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(stderr) = child.stderr.take() {
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    let deadline = std::time::Instant::now() + REFUSAL_BOUND;
    let mut seen = Vec::new();
    let found = loop {
        match rx.recv_timeout(std::time::Duration::from_millis(200)) {
            Ok(line) if line.contains(needs) => break Some(line),
            Ok(line) => seen.push(line),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break None,
            Err(_) if std::time::Instant::now() > deadline => break None,
            Err(_) => {}
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    found.ok_or_else(|| seen.join("\n"))
}
