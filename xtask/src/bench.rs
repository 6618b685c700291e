//! `cargo xtask bench`: the side-by-side benchmarks of orderly and its peers (see BENCHMARKS.md).
//!
//! Starts the local broker (or reuses it), builds the benchmark programs and the `orderly` binary
//! (release; the smoke form: the benchmark programs, debug), and runs `bench-harness` (benches/src/bin/bench-harness/), which builds the
//! peers under `benches/peers/`, runs the scenarios interleaved, verifies every run and writes
//! BENCHMARKS.md and the charts. `--smoke` is the tiny form CI runs: a broker of its own, orderly
//! only, the verifier's verdict, nothing written.

use std::process::Command;

use anyhow::{Context, Result, bail};

/// Runs the harness with `args` (passed through: `--quick`, `--scenario`, `--systems`, `--reps`, `--records`,
/// `--no-write`, `--no-warmup`); `smoke` selects the CI form; `prebuilt` uses the programs already
/// in the target directory instead of building them.
pub fn run(args: &[String], smoke: bool, prebuilt: bool) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let profile = if smoke { "debug" } else { "release" };
    if !prebuilt {
        eprintln!("==> building the benchmark programs ({profile})");
        let mut build = Command::new(&cargo);
        build
            .current_dir(crate::root())
            .args(["build", "-q", "-p", "orderly-benches", "--bins"]);
        if !smoke {
            // The HTTP scenarios run the product binary, `orderly consume --http`.
            build.args(["-p", "orderly-cli", "--release"]);
        }
        if !build.status().context("running cargo build")?.success() {
            bail!("building orderly-benches failed");
        }
    }
    let harness = crate::target_dir(&crate::root())
        .join(profile)
        .join("bench-harness");
    let mut command = String::from("cargo xtask bench");
    for a in args {
        command.push(' ');
        command.push_str(a);
    }
    let (bootstrap, guard) = if smoke {
        let b = orderly_testkit::start_guarded(&orderly_testkit::BrokerOptions::default())?;
        (b.bootstrap.clone(), Some(b))
    } else {
        (crate::kafka::start(None, "1g")?.bootstrap, None)
    };
    let mut cmd = Command::new(harness);
    cmd.args(args)
        .args(["--command", &command])
        .env(orderly_testkit::ENV_BOOTSTRAP, &bootstrap);
    if smoke {
        cmd.arg("--smoke");
    }
    let status = cmd.status().context("running bench-harness");
    if let Some(b) = &guard {
        orderly_testkit::process::stop(b)?;
    }
    if !status?.success() {
        bail!("bench-harness failed");
    }
    Ok(())
}
