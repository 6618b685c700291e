//! xtask: the project's tasks beyond `cargo build` and `cargo test` (run as `cargo xtask <task>`).
//!
//! # Layout
//! - `main.rs`: the command line, parsed and dispatched to one module per command (`cmd/`, part of
//!   the binary: each turns its arguments into calls of the modules below).
//! - [`kafka`]: `cargo xtask kafka start|stop|status|logs|tool`.
//! - [`tidy`]: doc lines, no C in the default tree, README documents every task.
//! - [`reference`](mod@reference): the generated configuration and metrics references
//!   (`docs/reference/`), and tidy's rule that every metric the code emits is in the metrics
//!   reference.
//! - [`circles`]: tidy's import-circle rule (no file imports from one that imports it back).
//! - [`demo`]: the main job: a local broker plus a real produce-and-consume run with a report.
//! - [`bench`](mod@bench): the side-by-side benchmarks (builds and runs `bench-harness`).
//! - [`chaos`]: `orderly consume` processes against a 3-node cluster under seeded faults, judged by
//!   a checker outside the consumer.
//! - [`compat`]: the broker compatibility matrix: every Kafka release from its Maven jars, the
//!   seed workload against each, the negotiated versions, the README's support matrix.
//! - [`fuzz`]: every decoder target of the `orderly-fuzz` crate, N inputs each (pure Rust).
//! - [`dist`]: static musl binaries for x86_64 and aarch64, packaged with SHA-256 files.
//! - [`testrun`]: `cargo xtask test`'s runner: the test binaries built once, run several at a time.

// A developer tool talks to its user on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

pub mod bench;
pub mod chaos;
pub mod circles;
pub mod compat;
pub mod demo;
pub mod dist;
pub mod fuzz;
pub mod kafka;
pub mod reference;
pub mod testrun;
pub mod tidy;

/// Every `cargo xtask` subcommand; `tidy` checks that the README documents each.
pub const SUBCOMMANDS: &[&str] = &[
    "kafka start",
    "kafka stop",
    "kafka status",
    "kafka logs",
    "kafka tool",
    "test",
    "ci",
    "tidy",
    "reference",
    "demo",
    "bench",
    "fuzz",
    "chaos",
    "compat",
    "dist",
];

/// The repository root (xtask lives one level below it).
pub fn root() -> std::path::PathBuf {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_else(|| here.to_path_buf())
}

/// Cargo's target directory: `CARGO_TARGET_DIR` (relative to the root if relative) or `<root>/target`.
pub fn target_dir(root: &std::path::Path) -> std::path::PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => {
            let d = std::path::PathBuf::from(d);
            if d.is_absolute() { d } else { root.join(d) }
        }
        None => root.join("target"),
    }
}
