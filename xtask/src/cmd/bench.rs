//! `cargo xtask bench`: the side-by-side benchmarks (see `xtask::bench`).

use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// The short form (under 5 minutes).
    #[arg(long)]
    quick: bool,
    /// The tiny CI form: orderly only, a private broker, checked by the verifier, nothing written.
    #[arg(long)]
    smoke: bool,
    /// Scenarios, e.g. S1,S3, or http for S1-http, S1k-http and S2-http (default: all of the form).
    #[arg(long, value_delimiter = ',')]
    scenario: Vec<String>,
    /// Systems: orderly, go-seed, parallel-consumer (each with its HTTP rows), or one row's name
    /// such as orderly-http or pc-vertx-tuned (default: all whose toolchain is installed).
    #[arg(long, value_delimiter = ',')]
    systems: Vec<String>,
    /// Repetitions per scenario (default 3; 1 with --quick).
    #[arg(long)]
    reps: Option<usize>,
    /// Records of every selected scenario instead of its own count (a check of the plumbing,
    /// not figures).
    #[arg(long)]
    records: Option<u64>,
    /// Print the figures only; leave BENCHMARKS.md and the charts alone.
    #[arg(long)]
    no_write: bool,
    /// Skip the broker warm-up before the first scenario (to measure what it changes).
    #[arg(long)]
    no_warmup: bool,
    /// Use the benchmark programs already built in the target directory instead of building
    /// them (what `cargo xtask ci` does after its one build).
    #[arg(long)]
    prebuilt: bool,
}

/// Runs the harness with these arguments.
pub fn run(a: &Args) -> Result<()> {
    let mut args = Vec::new();
    if a.quick {
        args.push("--quick".to_string());
    }
    if !a.scenario.is_empty() {
        args.push(format!("--scenario={}", a.scenario.join(",")));
    }
    if !a.systems.is_empty() {
        args.push(format!("--systems={}", a.systems.join(",")));
    }
    if let Some(r) = a.reps {
        args.push(format!("--reps={r}"));
    }
    if let Some(n) = a.records {
        args.push(format!("--records={n}"));
    }
    if a.no_write {
        args.push("--no-write".to_string());
    }
    if a.no_warmup {
        args.push("--no-warmup".to_string());
    }
    xtask::bench::run(&args, a.smoke, a.prebuilt)
}
