//! What the commands share: running cargo and other steps with their outcome printed, building
//! `orderly`, and one line for an error and its causes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// `cargo` (the one running `cargo xtask`), in the repository root.
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(xtask::root());
    c
}

/// Runs `cmd` with its output on the terminal, announced as `name`.
pub fn step(name: &str, mut cmd: Command) -> Result<()> {
    eprintln!("==> {name}");
    let status = cmd.status().with_context(|| format!("running {name}"))?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

/// Runs `cmd` with its output in `log`, printed in one piece when it ends.
pub fn logged_step(name: &str, mut cmd: Command, log: &Path) -> Result<()> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let started = std::time::Instant::now();
    let status = match cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .status()
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("==> {name}: could not start: {e}");
            return Err(e).with_context(|| format!("running {name}"));
        }
    };
    let text = std::fs::read_to_string(log).unwrap_or_default();
    eprintln!(
        "==> {name}: {} in {:.0} s (log {})\n{text}",
        if status.success() { "ok" } else { "FAILED" },
        started.elapsed().as_secs_f64(),
        log.display()
    );
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

/// `cargo build -p orderly-cli` (debug or release); returns the binary's path.
pub fn build_orderly(release: bool) -> Result<PathBuf> {
    let mut build = cargo();
    build.args(["build", "-p", "orderly-cli"]);
    if release {
        build.arg("--release");
    }
    step("cargo build -p orderly-cli", build)?;
    Ok(xtask::target_dir(&xtask::root())
        .join(if release { "release" } else { "debug" })
        .join("orderly"))
}

/// The error and its causes, each cause only if the message so far does not already say it (our
/// library errors include their cause in their own message).
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}
