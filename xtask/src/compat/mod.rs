//! `cargo xtask compat`: the broker compatibility matrix. For each Apache Kafka release, start a
//! single-node broker from its Maven jars (ZooKeeper mode before 3.3, KRaft after), print what
//! orderly negotiates per API, run the seed workload through the `orderly` binary (`seed`, then
//! `run` with transient and permanent failures: order, loss and the DLQ are checked by its
//! report), then check the DLQ topic (`orderly dlq ls`), the group's lag (`orderly status`) and
//! Kafka's own view of the group (`kafka-consumer-groups --describe` of the current release,
//! whose admin client speaks to brokers from 2.1 on). A release older than orderly supports
//! passes when the library and every command that talks to a broker (`seed`, `produce`, `run`,
//! `consume`, `status`, `dlq ls|show|replay`) refuse it by themselves with the one-line error
//! and a non-zero exit.
//!
//! The README's support matrix is rewritten from the run, with the commit and date, unless told
//! not to.
//!
//! # Layout
//! - `releases`: the releases run by default and what orderly expects of each.
//! - `run`: one release after another: its broker, the negotiation, the checks that apply.
//! - `refusal`, `workload`, `degraded`, `sasl`, `legacy_format`: the checks.
//! - `orderly`: running the `orderly` binary against a release's broker.
//! - `options`, `outcome`: a run's options, what one release did.
//! - `matrix`: the README's support matrix.

mod degraded;
mod legacy_format;
mod matrix;
mod options;
mod orderly;
mod outcome;
mod refusal;
mod releases;
mod run;
mod sasl;
mod workload;

pub use matrix::{matrix, write_matrix};
pub use options::CompatOptions;
pub use outcome::Outcome;
pub use releases::{DEFAULT_VERSIONS, OLDEST_SUPPORTED};
pub use run::run;
