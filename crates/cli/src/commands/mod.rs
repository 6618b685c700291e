//! One module per `orderly` subcommand; each only wires library types.

pub mod config;
pub mod consume;
pub mod run;
pub mod seed;
