//! One module per `orderly` subcommand; each only wires library types.

pub mod config;
pub mod consume;
pub mod dlq;
pub mod produce;
pub mod run;
pub mod seed;
pub mod status;
