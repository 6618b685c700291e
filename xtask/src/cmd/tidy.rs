//! `cargo xtask tidy`: the repository's own rules (see `xtask::tidy`), each problem on a line.

use anyhow::{Result, bail};

/// Runs every tidy rule; fails if one found a problem.
pub fn run() -> Result<()> {
    eprintln!("==> tidy");
    let problems = xtask::tidy::run(&xtask::root())?;
    for p in &problems {
        eprintln!("tidy: {p}");
    }
    if !problems.is_empty() {
        bail!("tidy found {} problem(s)", problems.len());
    }
    Ok(())
}
