//! The options of one `cargo xtask compat` run.

use std::path::PathBuf;

use orderly_testkit::releases::Release;

/// Options of one run.
#[derive(Debug, Clone)]
pub struct CompatOptions {
    /// Releases to run.
    pub versions: Vec<Release>,
    /// Records the seed workload writes per release.
    pub records: u64,
    /// The `orderly` binary.
    pub binary: PathBuf,
    /// State directories go under this one.
    pub dir: PathBuf,
}
