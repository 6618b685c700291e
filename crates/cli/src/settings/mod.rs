//! Configuration: `orderly consume`'s settings (one type filled by serde from a TOML file, by clap
//! from `ORDERLY_*` variables and flags (flags win), then resolved into library types) and the
//! connection flags every command that connects shares.

mod alternatives;
mod choice;
mod connection;
mod effective;
mod file;
mod flags;
mod places;
mod resolve;
mod resolved;
mod secret;
#[cfg(test)]
mod tests;
mod text;
mod units;

pub use choice::OffsetReset;
pub use connection::{ConnectionFlags, long_version};
pub use flags::ConsumeOpts;
pub use resolved::{HandlerChoice, Resolved};
pub use units::HumanDuration;
