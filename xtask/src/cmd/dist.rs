//! `cargo xtask dist`: static release archives (see `xtask::dist`).

use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// Only these target triples (default: x86_64-unknown-linux-musl and aarch64-unknown-linux-musl).
    #[arg(long = "target")]
    targets: Vec<String>,
}

/// Builds and packages; prints each archive's path.
pub fn run(args: &Args) -> Result<()> {
    let artifacts = xtask::dist::run(&xtask::root(), &args.targets)?;
    for a in &artifacts {
        println!("{}", a.archive.display());
    }
    Ok(())
}
