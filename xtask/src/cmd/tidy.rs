//! `cargo xtask tidy`: the repository's own rules (see `xtask::tidy`), and the generated
//! references compared with what `orderly` prints, each problem on a line.

use std::path::Path;

use anyhow::{Result, bail};

use super::steps::build_orderly;

/// Runs every tidy rule, then builds `orderly` (debug) and compares the references with it;
/// fails if either found a problem.
pub fn run() -> Result<()> {
    eprintln!("==> tidy");
    let root = xtask::root();
    let mut problems = xtask::tidy::run(&root)?;
    let orderly = build_orderly(false)?;
    problems.extend(xtask::reference::stale(&root, &orderly)?);
    report(&problems)
}

/// The rules alone, without building anything (CI checks the references once its build is done,
/// with [`references`]).
pub fn rules() -> Result<()> {
    eprintln!("==> tidy");
    report(&xtask::tidy::run(&xtask::root())?)
}

/// The references compared with what `orderly` (already built) prints.
pub fn references(orderly: &Path) -> Result<()> {
    eprintln!("==> tidy: docs/reference/ against {}", orderly.display());
    report(&xtask::reference::stale(&xtask::root(), orderly)?)
}

fn report(problems: &[String]) -> Result<()> {
    for p in problems {
        eprintln!("tidy: {p}");
    }
    if !problems.is_empty() {
        bail!("tidy found {} problem(s)", problems.len());
    }
    Ok(())
}
