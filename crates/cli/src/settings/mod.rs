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

/// The word the configuration reference uses for values of the settings' own types, by the
/// type a flag's value parser produces (`None`: not one of them).
pub fn value_type_name(parser: &clap::builder::ValueParser) -> Option<&'static str> {
    use std::any::TypeId;
    let names = [
        (TypeId::of::<HumanDuration>(), "duration"),
        (TypeId::of::<units::DurationOrOff>(), "duration or `off`"),
        (TypeId::of::<units::ByteSize>(), "size"),
        (TypeId::of::<units::Statuses>(), "HTTP statuses"),
        (TypeId::of::<places::AdminAddr>(), "address or `off`"),
        (TypeId::of::<places::SessionSource>(), "session source"),
        (TypeId::of::<secret::Secret>(), "secret"),
        (TypeId::of::<secret::HeaderArg>(), "header"),
    ];
    let id = parser.type_id();
    names.iter().find(|(t, _)| id == *t).map(|(_, name)| *name)
}
