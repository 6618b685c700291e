//! `cargo xtask fuzz`: every decoder target, N inputs each (see `xtask::fuzz`).

use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// Inputs per target.
    #[arg(long, default_value_t = 1_000_000)]
    iterations: u64,
    /// Seed of the mutation RNG (a crash reproduces with the same seed and iterations).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Only these targets (default: all; `cargo run -p orderly-fuzz -- --list` names them).
    targets: Vec<String>,
}

/// Runs the fuzzer.
pub fn run(args: &Args) -> Result<()> {
    xtask::fuzz::run(&xtask::root(), args.iterations, args.seed, &args.targets)
}
