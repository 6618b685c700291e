//! `cargo xtask demo`: the main job against the local broker (see `xtask::demo`).

use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// Records to produce and consume.
    #[arg(long, default_value_t = 50_000)]
    records: usize,
    /// Sessions (keys) the records belong to.
    #[arg(long, default_value_t = 10)]
    sessions: usize,
    /// Partitions of the demo topic.
    #[arg(long, default_value_t = 12)]
    partitions: i32,
    /// Records per second produced (live mode).
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// The backlog demo instead: write everything first, then consume it with `orderly run`.
    #[arg(long)]
    backlog: bool,
}

/// Runs the demo.
pub fn run(args: Args) -> Result<()> {
    let Args {
        records,
        sessions,
        partitions,
        rate,
        backlog,
    } = args;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(xtask::demo::run(xtask::demo::DemoOptions {
        records,
        sessions,
        partitions,
        rate,
        backlog,
    }))
}
