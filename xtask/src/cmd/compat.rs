//! `cargo xtask compat`: the broker compatibility matrix (see `xtask::compat`).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Result, bail};

use super::steps::build_orderly;

#[derive(clap::Args)]
pub struct Args {
    /// Releases to run (default: 1.1.1, 2.0.1, 2.1.1, 2.8.2, 3.0.2, 3.9.1, 4.0.0, 4.3.1).
    #[arg(long, value_delimiter = ',')]
    versions: Vec<String>,
    /// Records of the seed workload per release.
    #[arg(long, default_value_t = 5_000)]
    records: u64,
    /// Print only; leave the README alone. A run of some releases only (`--versions`) never
    /// rewrites the README's matrix: it holds every supported release.
    #[arg(long)]
    no_write: bool,
    /// Run this `orderly` binary instead of building one.
    #[arg(long)]
    binary: Option<PathBuf>,
}

/// Builds `orderly` unless given one, runs the releases and (for a full run without
/// `--no-write`) rewrites the README's matrix.
pub fn run(args: Args) -> Result<()> {
    let Args {
        versions,
        records,
        no_write,
        binary,
    } = args;
    let write = !no_write && versions.is_empty();
    if !no_write && !write {
        eprintln!("(--versions: the README's matrix is left as it is)");
    }
    let root = xtask::root();
    let binary = match binary {
        Some(b) => b,
        None => build_orderly(false)?,
    };
    let names: Vec<&str> = if versions.is_empty() {
        xtask::compat::DEFAULT_VERSIONS.to_vec()
    } else {
        versions.iter().map(String::as_str).collect()
    };
    let versions = names
        .iter()
        .map(|v| v.parse())
        .collect::<Result<Vec<_>, _>>()?;
    let opts = xtask::compat::CompatOptions {
        versions,
        records,
        binary,
        dir: orderly_testkit::kafka_home().join("compat"),
    };
    let outcomes = xtask::compat::run(&opts)?;
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.passed())
        .map(|o| o.release.to_string())
        .collect();
    if write {
        let commit = git(&["rev-parse", "--short", "HEAD"]);
        let date = git(&["log", "-1", "--format=%cs"]);
        let block = xtask::compat::matrix(&outcomes, &commit, &date);
        xtask::compat::write_matrix(&root.join("README.md"), &block)?;
        eprintln!("README.md: support matrix rewritten");
    }
    if !failed.is_empty() {
        bail!("compat failed for {}", failed.join(", "));
    }
    Ok(())
}

fn git(args: &[&str]) -> String {
    Command::new("git")
        .args(args)
        .current_dir(xtask::root())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
