//! What every step of a harness run needs: its arguments, where things are, the systems it runs,
//! and unique names for its topics.

use std::path::PathBuf;

use crate::args::Args;
use crate::system::System;

/// The harness run's context.
pub struct Ctx {
    /// The command line.
    pub args: Args,
    /// The repository root.
    pub root: PathBuf,
    /// The directory of the benchmark programs (this binary's).
    pub bin: PathBuf,
    /// Where the run's handler logs and each system's stderr go.
    pub runs_dir: PathBuf,
    /// The systems of this run (installed, and named by `--systems` if given), in report order.
    pub systems: Vec<System>,
    /// The run's start, in seconds since the epoch: part of every name it makes.
    pub stamp: u64,
    /// The names made so far.
    pub counter: std::sync::atomic::AtomicU64,
}

impl Ctx {
    /// A name no other topic or group of any harness run has: `bench-<stamp>-<what>-<n>`.
    pub fn unique(&self, what: &str) -> String {
        let n = self
            .counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("bench-{}-{what}-{n}", self.stamp)
    }
}
