//! `cargo xtask fuzz`: every decoder target of the `orderly-fuzz` crate (`fuzz/`), N inputs each, in the `fuzz` profile.
//!
//! Pure Rust: seeded, structure-aware mutation of valid encodings (no libFuzzer, so no C++
//! toolchain and no nightly). The `fuzz` profile is release with overflow checks and debug
//! assertions on. `fuzz/tests/smoke.rs` runs every target for a few thousand inputs inside the
//! normal test suite, so the fuzzer cannot rot between long runs.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Runs `orderly-fuzz` with `iterations` inputs per target (all targets, or those in `only`),
/// printing its table; `Err` when a target crashed (the table names the input and the seed).
pub fn run(root: &Path, iterations: u64, seed: u64, only: &[String]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(root)
        .args([
            "run",
            "--quiet",
            "--profile",
            "fuzz",
            "-p",
            "orderly-fuzz",
            "--",
        ])
        .args(["--iterations", &iterations.to_string()])
        .args(["--seed", &seed.to_string()])
        .args(only)
        .status()
        .context("running orderly-fuzz")?;
    if !status.success() {
        bail!("cargo xtask fuzz: a target crashed or the build failed ({status})");
    }
    Ok(())
}
