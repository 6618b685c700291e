//! The harness's command line.

use clap::Parser;

#[derive(Parser, Clone)]
pub struct Args {
    /// The short form (under 5 minutes): one repetition, smaller workloads, fewer scenarios.
    #[arg(long)]
    pub quick: bool,
    /// A tiny S1 for orderly only, checked by the verifier; writes nothing (CI).
    #[arg(long)]
    pub smoke: bool,
    /// Scenarios to run: ids (`S2` is S2 alone; `S3`, which is no id, selects S3-0, S3-100us and
    /// S3-1ms; `http` selects S1-http, S1k-http and S2-http) or `all` (default: all of the full
    /// form; the quick form leaves out S2-max, S4, S5 and S6 unless named).
    #[arg(long, value_delimiter = ',')]
    pub scenario: Vec<String>,
    /// Systems to run: a family (`orderly`, `go-seed`, `parallel-consumer`: each with its HTTP
    /// rows) or one row's name (`orderly-http`, `pc-vertx-tuned`, ...); default: every system
    /// whose toolchain is installed.
    #[arg(long, value_delimiter = ',')]
    pub systems: Vec<String>,
    /// Repetitions per scenario (default 3, 1 with --quick; in the full form S2, S3-100us, S3-1ms
    /// and S5 run once and S3-0 five times unless this is given).
    #[arg(long)]
    pub reps: Option<usize>,
    /// Do not write BENCHMARKS.md and the charts.
    #[arg(long)]
    pub no_write: bool,
    /// Records of every selected scenario instead of its own count (a live scenario offers its
    /// rate for records ÷ rate seconds): for a tiny check of the plumbing, not for figures.
    #[arg(long)]
    pub records: Option<u64>,
    /// Skip the broker warm-up before the first scenario (to measure what it changes).
    #[arg(long)]
    pub no_warmup: bool,
    #[arg(long, env = "ORDERLY_BOOTSTRAP")]
    pub bootstrap: String,
    /// The command line to quote in BENCHMARKS.md.
    #[arg(long, default_value = "cargo xtask bench")]
    pub command: String,
}
