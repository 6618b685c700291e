//! `cargo xtask chaos`: `orderly consume` processes against a 3-node cluster under seeded faults
//! (see `xtask::chaos`).

use std::path::PathBuf;

use anyhow::Result;

use super::steps::build_orderly;

#[derive(clap::Args)]
pub struct Args {
    /// Length of the fault schedule (each fault kind runs at least once regardless).
    #[arg(long, default_value_t = 2.0)]
    minutes: f64,
    /// Seed of the workload and the schedule (printed; rerun with it to reproduce).
    #[arg(long)]
    seed: Option<u64>,
    /// Consumers in the group.
    #[arg(long, default_value_t = 3)]
    consumers: usize,
    /// Records per second.
    #[arg(long, default_value_t = 200)]
    rate: u32,
    /// Use the release build of `orderly` (default: debug).
    #[arg(long)]
    release: bool,
    /// Run the consumers with `--commit-metadata-limit 0` (no completed offsets in the commit
    /// metadata), to compare the duplicates per crash with a run of the same seed.
    #[arg(long)]
    no_commit_metadata: bool,
    /// Working directory (default: .kafka/chaos; another one lets two runs go side by side).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Consumers with --exactly-once and a reply topic; replies checked under read_committed;
    /// adds a zombie (SIGSTOP until its partitions moved, then SIGCONT: it must abort and rejoin,
    /// not exit), a transaction coordinator kill and at least ten consumer kills. In either mode
    /// a consumer exit the harness did not cause fails the run.
    #[arg(long)]
    exactly_once: bool,
    /// Run this `orderly` binary instead of building one.
    #[arg(long)]
    binary: Option<PathBuf>,
}

/// Builds `orderly` unless given one, runs the schedule and prints the checker's report.
pub fn run(args: Args) -> Result<()> {
    let Args {
        minutes,
        seed,
        consumers,
        rate,
        release,
        no_commit_metadata,
        dir,
        exactly_once,
        binary,
    } = args;
    let root = xtask::root();
    let binary = match binary {
        Some(b) => b,
        None => build_orderly(release)?,
    };
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    });
    let opts = xtask::chaos::ChaosOptions {
        minutes,
        seed,
        consumers,
        partitions: 6,
        sessions: 300,
        rate,
        binary,
        dir: dir.unwrap_or_else(|| xtask::chaos::default_dir(&root)),
        commit_metadata: !no_commit_metadata,
        exactly_once,
    };
    eprintln!(
        "==> chaos (seed {seed}, {minutes} min{})",
        if exactly_once { ", exactly-once" } else { "" }
    );
    let rt = tokio::runtime::Runtime::new()?;
    let report = rt.block_on(xtask::chaos::run(opts.clone()))?;
    xtask::chaos::print(&report, &opts)
}
