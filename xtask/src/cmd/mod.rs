//! One module per `cargo xtask` command: its arguments and what it does with them. The work
//! itself lives in the library (`xtask::kafka`, `xtask::chaos`, `xtask::testrun`, ...); these
//! modules turn the command line into calls of it.

pub mod bench;
pub mod chaos;
pub mod ci;
pub mod compat;
pub mod demo;
pub mod dist;
pub mod fuzz;
pub mod kafka;
pub mod reference;
pub mod steps;
pub mod test;
pub mod tidy;
