//! `cargo xtask fuzz`: runs every cargo-fuzz target of `crates/protocol/fuzz` for a bounded time.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The crate whose `fuzz/` folder holds the targets.
pub const FUZZ_CRATE: &str = "crates/protocol";

/// How cargo-fuzz gets the nightly-only `-Z` flags it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toolchain {
    /// An installed nightly toolchain (`rustup run nightly cargo fuzz ...`).
    Nightly,
    /// The default (stable) toolchain with `RUSTC_BOOTSTRAP=1`, when no nightly is installed.
    StableBootstrap,
}

/// Picks nightly when rustup lists one, else stable with `RUSTC_BOOTSTRAP=1`.
pub fn toolchain() -> Toolchain {
    let listed = Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if listed.lines().any(|l| l.starts_with("nightly")) {
        Toolchain::Nightly
    } else {
        Toolchain::StableBootstrap
    }
}

/// A `cargo fuzz <args>` command in the fuzzed crate on `tc`.
fn cargo_fuzz(root: &Path, tc: Toolchain, args: &[&str]) -> Command {
    let mut cmd = match tc {
        Toolchain::Nightly => {
            let mut c = Command::new("rustup");
            c.args(["run", "nightly", "cargo", "fuzz"]);
            c
        }
        Toolchain::StableBootstrap => {
            let mut c = Command::new("cargo");
            c.arg("fuzz").env("RUSTC_BOOTSTRAP", "1");
            c
        }
    };
    // `cargo xtask` runs under the workspace's toolchain; do not let its choice leak into the
    // nightly build.
    cmd.env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .current_dir(root.join(FUZZ_CRATE))
        .args(args);
    cmd
}

/// The target names `cargo fuzz list` reports.
pub fn targets(root: &Path, tc: Toolchain) -> Result<Vec<String>> {
    let out = cargo_fuzz(root, tc, &["list"])
        .output()
        .context("running `cargo fuzz list` (install it with `cargo install cargo-fuzz`)")?;
    if !out.status.success() {
        bail!(
            "`cargo fuzz list` failed (is cargo-fuzz installed? `cargo install cargo-fuzz`):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// Builds every target once, then runs each (or only those in `only`) for `seconds`. Returns the
/// targets that found a crash, with the folder holding the reproducer.
pub fn run(root: &Path, seconds: u64, only: &[String]) -> Result<Vec<(String, PathBuf)>> {
    let tc = toolchain();
    eprintln!("==> cargo fuzz on {tc:?}");
    let all = targets(root, tc)?;
    for t in only {
        if !all.contains(t) {
            bail!("no fuzz target {t:?}; targets: {all:?}");
        }
    }
    let chosen: Vec<String> = if only.is_empty() { all } else { only.to_vec() };
    eprintln!("==> cargo fuzz build ({} targets)", chosen.len());
    let status = cargo_fuzz(root, tc, &["build"])
        .status()
        .context("cargo fuzz build")?;
    if !status.success() {
        bail!("cargo fuzz build failed ({status})");
    }
    let mut crashed = Vec::new();
    let max_time = format!("-max_total_time={seconds}");
    for t in &chosen {
        eprintln!("==> fuzzing {t} for {seconds} s");
        let status = cargo_fuzz(
            root,
            tc,
            &["run", t, "--", &max_time, "-print_final_stats=1"],
        )
        .status()
        .with_context(|| format!("cargo fuzz run {t}"))?;
        if !status.success() {
            let artifacts = root.join(FUZZ_CRATE).join("fuzz/artifacts").join(t);
            eprintln!(
                "fuzz target {t} failed ({status}); reproducer in {}",
                artifacts.display()
            );
            crashed.push((t.clone(), artifacts));
        }
    }
    Ok(crashed)
}
