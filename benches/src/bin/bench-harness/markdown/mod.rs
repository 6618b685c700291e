//! The report: the generated section of BENCHMARKS.md and the charts in `benches/results/`.

mod details;
mod document;
mod figures;
mod procedures;
mod tables;

pub use details::floor_report;
pub use document::write_results;
