//! `cargo xtask reference`: builds `orderly` and writes `docs/reference/configuration.md` and
//! `docs/reference/metrics.md` from what it prints (see `xtask::reference`).

use anyhow::Result;

use super::steps::build_orderly;

/// Writes every reference file from a fresh debug build of `orderly`.
pub fn run() -> Result<()> {
    let orderly = build_orderly(false)?;
    for path in xtask::reference::write(&xtask::root(), &orderly)? {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
