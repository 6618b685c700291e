//! The side-by-side benchmark harness behind `cargo xtask bench` (see BENCHMARKS.md).
//!
//! It builds the peers under `benches/peers/` (Go with `go build`, Java with `mvn package`), then
//! runs every selected scenario for every system, interleaved (repetition 1 of every system, then
//! repetition 2, ...; the order rotates, and S3's raw fetch takes its turn in it), against the
//! broker in `ORDERLY_BOOTSTRAP`. Before every run the page cache's dirty pages are written out
//! (`sync`), so no run pays for an earlier one's writes. Every run is checked by the shared
//! verifier; a run with a violation, a loss or a wrong attempt count is
//! failed whatever its speed. It writes the results between the `bench` markers of BENCHMARKS.md
//! and the charts to `benches/results/`.
//!
//! Scenarios with procedures of their own: S2-max (per system, doubling then bisection of the
//! offered rate until p99 > 200 ms, the load generator's shortfall reported), S4 (each system with
//! and without one session failing for 10 s; the others' latency compared), S6 (three processes
//! per system in one group, one killed with SIGKILL every 10 s and restarted; their logs merged).
//!
//! HTTP scenarios (S1-http, S1k-http, S2-http): every system posts the records to one shared
//! endpoint, `bench-http-server`, which fails 10 % of them once (503), checks order per session
//! from its side and writes the handler log the verifier reads: orderly as the product binary
//! (`orderly consume --http`, one record per request, and batched when the binary offers
//! `--http-batch-max`), the Go peer with a `net/http` client and Parallel Consumer's Vert.x module,
//! each peer tuned and as written.
//!
//! Reply scenarios (S1k-reply): every system answers each record with one reply to a reply topic
//! of its run (orderly's library with replies at-least-once and in its exactly-once mode, the Go
//! peer in franz-go's `GroupTransactSession`, Parallel Consumer in its transactional commit mode);
//! besides the handler log, every run's reply topic is read back with Apache Kafka's console
//! consumer in `read_committed` mode and checked by the one reply check
//! (`orderly_benches::replies`): every record's reply exactly once, in session order.
//!
//! `--smoke`: a tiny S1 for orderly only, checked by the verifier, nothing written (what CI runs).
//!
//! # Layout
//! - `args`: the command line; `runner`: a harness run from start to end.
//! - `system`: the systems compared, by suite; `available`: those this machine runs.
//! - `scenario`: the scenarios as data, the table of them, and `--scenario`'s selection.
//! - `command`: each system's command line; `process`: starting, watching and stopping it.
//! - `run`: one run judged by its handler log; `product`, `http`: the product binary's row and
//!   the HTTP scenarios' runs; `max`, `crash`: S2-max's search and S6's crash runs.
//! - `topic`, `load`, `raw_fetch`, `warm_up`: topics, the load generator, the raw fetch limit,
//!   the broker warm-up.
//! - `outcome`, `report`, `endpoint`: a run's outcome, every result of a harness run, the HTTP
//!   endpoint's report; `markdown`: BENCHMARKS.md's generated section and the charts.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod args;
mod available;
mod command;
mod crash;
mod ctx;
mod endpoint;
mod http;
mod load;
mod markdown;
mod max;
mod outcome;
mod process;
mod product;
mod raw_fetch;
mod report;
mod run;
mod runner;
mod scenario;
mod system;
mod topic;
mod warm_up;

use clap::Parser as _;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    runner::run(args::Args::parse()).await
}
