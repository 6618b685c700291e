//! The settings that are one of a few names (`--isolation read-committed`, `--dlq-mode
//! park-session`, ...): each a clap `ValueEnum`, so clap refuses any other value naming the flag
//! and the possible values, and `--help` lists them; serde reads and writes the same names, so
//! the flags, the `ORDERLY_*` variables, the file and `config check` spell a value alike. Each
//! maps onto the library type it chooses here, in one place.
//!
//! The variants have no doc comments: clap would list them as each value's help under the flag,
//! whose own help already says what each value means.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use clap::ValueEnum;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// `--isolation`: which records fetches return.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Isolation {
    #[default]
    ReadCommitted,
    ReadUncommitted,
}

/// `--http-body`: what the request body holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum HttpBody {
    #[default]
    Raw,
    Json,
}

/// `--http-format`: the request's header convention.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum HttpFormat {
    #[default]
    Plain,
    #[value(name = "cloudevents")]
    CloudEvents,
}

/// `--no-session`: what happens to a record without a session id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum NoSession {
    #[default]
    Unordered,
    Dlq,
    Partition,
}

/// `--dlq-mode`: what happens to a session after one of its records was dead-lettered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum DlqMode {
    #[default]
    Continue,
    ParkSession,
}

/// `--group-protocol`: which group protocol the member speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum GroupProtocol {
    #[default]
    Classic,
    Consumer,
}

/// `--offset-reset`: where a partition without a committed offset starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum OffsetReset {
    #[default]
    Earliest,
    Latest,
}

/// `--assignor`: a client-side assignor of the classic protocol, by its protocol name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Assignor {
    CooperativeSticky,
    Range,
    #[value(name = "roundrobin")]
    RoundRobin,
}

/// `--sasl-mechanism` (any case).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SaslMechanism {
    #[value(name = "PLAIN")]
    Plain,
    #[value(name = "SCRAM-SHA-256")]
    ScramSha256,
    #[value(name = "SCRAM-SHA-512")]
    ScramSha512,
}

/// `--tls-provider` (any case): the rustls crypto provider, or `auto` to pick one for the CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum TlsProvider {
    #[default]
    Auto,
    Graviola,
    #[value(name = "rustcrypto")]
    RustCrypto,
}

impl From<Isolation> for orderly_protocol::IsolationLevel {
    fn from(v: Isolation) -> Self {
        match v {
            Isolation::ReadCommitted => Self::ReadCommitted,
            Isolation::ReadUncommitted => Self::ReadUncommitted,
        }
    }
}

impl From<orderly_protocol::IsolationLevel> for Isolation {
    fn from(v: orderly_protocol::IsolationLevel) -> Self {
        match v {
            orderly_protocol::IsolationLevel::ReadCommitted => Self::ReadCommitted,
            orderly_protocol::IsolationLevel::ReadUncommitted => Self::ReadUncommitted,
        }
    }
}

impl From<HttpBody> for orderly_handlers::HttpBody {
    fn from(v: HttpBody) -> Self {
        match v {
            HttpBody::Raw => Self::Raw,
            HttpBody::Json => Self::Json,
        }
    }
}

impl From<orderly_handlers::HttpBody> for HttpBody {
    fn from(v: orderly_handlers::HttpBody) -> Self {
        match v {
            orderly_handlers::HttpBody::Raw => Self::Raw,
            orderly_handlers::HttpBody::Json => Self::Json,
        }
    }
}

/// The library's format carries the CloudEvents attributes, which `resolve` fills from their own
/// settings; this is the choice between the two.
impl From<&orderly_handlers::HttpFormat> for HttpFormat {
    fn from(v: &orderly_handlers::HttpFormat) -> Self {
        match v {
            orderly_handlers::HttpFormat::Plain => Self::Plain,
            orderly_handlers::HttpFormat::CloudEvents(_) => Self::CloudEvents,
        }
    }
}

impl From<NoSession> for orderly_handlers::NoSession {
    fn from(v: NoSession) -> Self {
        match v {
            NoSession::Unordered => Self::Unordered,
            NoSession::Dlq => Self::Dlq,
            NoSession::Partition => Self::Partition,
        }
    }
}

impl From<orderly_handlers::NoSession> for NoSession {
    fn from(v: orderly_handlers::NoSession) -> Self {
        match v {
            orderly_handlers::NoSession::Unordered => Self::Unordered,
            orderly_handlers::NoSession::Dlq => Self::Dlq,
            orderly_handlers::NoSession::Partition => Self::Partition,
        }
    }
}

impl From<DlqMode> for orderly_engine::DlqMode {
    fn from(v: DlqMode) -> Self {
        match v {
            DlqMode::Continue => Self::Continue,
            DlqMode::ParkSession => Self::ParkSession,
        }
    }
}

impl From<orderly_engine::DlqMode> for DlqMode {
    fn from(v: orderly_engine::DlqMode) -> Self {
        match v {
            orderly_engine::DlqMode::Continue => Self::Continue,
            orderly_engine::DlqMode::ParkSession => Self::ParkSession,
        }
    }
}

impl From<GroupProtocol> for orderly_group::config::GroupProtocol {
    fn from(v: GroupProtocol) -> Self {
        match v {
            GroupProtocol::Classic => Self::Classic,
            GroupProtocol::Consumer => Self::Consumer,
        }
    }
}

impl From<orderly_group::config::GroupProtocol> for GroupProtocol {
    /// The group crate may add protocols; these settings choose between the two it has, and any
    /// other would not come from them.
    fn from(v: orderly_group::config::GroupProtocol) -> Self {
        match v {
            orderly_group::config::GroupProtocol::Consumer => Self::Consumer,
            _ => Self::Classic,
        }
    }
}

impl From<OffsetReset> for orderly_group::AutoOffsetReset {
    fn from(v: OffsetReset) -> Self {
        match v {
            OffsetReset::Earliest => Self::Earliest,
            OffsetReset::Latest => Self::Latest,
        }
    }
}

impl From<orderly_group::AutoOffsetReset> for OffsetReset {
    /// `AutoOffsetReset::None` (report the partition, start nowhere) is no choice of these
    /// settings, so it never comes from them.
    fn from(v: orderly_group::AutoOffsetReset) -> Self {
        match v {
            orderly_group::AutoOffsetReset::Earliest => Self::Earliest,
            orderly_group::AutoOffsetReset::Latest | orderly_group::AutoOffsetReset::None => {
                Self::Latest
            }
        }
    }
}

impl From<Assignor> for Arc<dyn orderly_group::assignor::Assignor> {
    fn from(v: Assignor) -> Self {
        use orderly_group::assignor::{
            CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor,
        };
        match v {
            Assignor::CooperativeSticky => Arc::new(CooperativeStickyAssignor),
            Assignor::Range => Arc::new(RangeAssignor),
            Assignor::RoundRobin => Arc::new(RoundRobinAssignor),
        }
    }
}

impl Assignor {
    /// The choice naming `a`, one of the built-in assignors (by its protocol name).
    pub fn of(a: &dyn orderly_group::assignor::Assignor) -> Option<Self> {
        <Self as ValueEnum>::from_str(a.name(), false).ok()
    }
}

impl SaslMechanism {
    /// The SASL settings of this mechanism with these credentials.
    pub fn with(self, username: String, password: String) -> orderly_protocol::Sasl {
        use orderly_protocol::Sasl;
        match self {
            Self::Plain => Sasl::Plain { username, password },
            Self::ScramSha256 => Sasl::ScramSha256 { username, password },
            Self::ScramSha512 => Sasl::ScramSha512 { username, password },
        }
    }
}

#[cfg(feature = "tls")]
impl TlsProvider {
    /// The provider named, or for `auto` the fastest one this CPU runs.
    pub fn pick(self) -> orderly_protocol::tls::TlsProvider {
        use orderly_protocol::tls::TlsProvider as Library;
        match self {
            Self::Auto => Library::detect(),
            Self::Graviola => Library::Graviola,
            Self::RustCrypto => Library::RustCrypto,
        }
    }
}

/// The name clap gives `v` (every variant has one: none is skipped).
fn name<T: ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_owned())
        .unwrap_or_default()
}

/// The names of `T`'s values as an error says them: `a or b`, `a, b or c`.
fn names<T: ValueEnum>() -> String {
    let all: Vec<String> = T::value_variants().iter().map(name).collect();
    match all.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Reads a choice from a string by the names (and aliases) clap takes for it.
struct ByName<T> {
    ignore_case: bool,
    of: PhantomData<T>,
}

impl<T: ValueEnum> Visitor<'_> for ByName<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&names::<T>())
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<T, E> {
        T::from_str(s, self.ignore_case)
            .map_err(|_| E::custom(format!("invalid value {s:?}: expected {}", names::<T>())))
    }
}

/// Serde for a choice: written as its clap name, read from any name clap takes for it, in any
/// case when `ignore_case` (the flag then has `ignore_case = true` too).
macro_rules! serde_by_name {
    ($($t:ty),+ $(,)?) => {
        $(serde_by_name!($t, ignore_case = false);)+
    };
    ($t:ty, ignore_case = $ignore_case:literal) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&name(self))
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_str(ByName {
                    ignore_case: $ignore_case,
                    of: PhantomData,
                })
            }
        }
    };
}

serde_by_name!(
    Isolation,
    HttpBody,
    HttpFormat,
    NoSession,
    DlqMode,
    GroupProtocol,
    OffsetReset,
    Assignor,
);
serde_by_name!(SaslMechanism, ignore_case = true);
serde_by_name!(TlsProvider, ignore_case = true);

#[cfg(test)]
mod tests {
    use super::*;

    /// Each value through the library type and back: the mapping loses nothing.
    fn round_trip<T, L>()
    where
        T: ValueEnum + PartialEq + fmt::Debug + Copy + Into<L> + From<L>,
    {
        for v in T::value_variants() {
            assert_eq!(T::from((*v).into()), *v);
        }
    }

    #[test]
    fn each_choice_maps_onto_its_library_value_and_back() {
        round_trip::<Isolation, orderly_protocol::IsolationLevel>();
        round_trip::<HttpBody, orderly_handlers::HttpBody>();
        round_trip::<NoSession, orderly_handlers::NoSession>();
        round_trip::<DlqMode, orderly_engine::DlqMode>();
        round_trip::<GroupProtocol, orderly_group::config::GroupProtocol>();
        round_trip::<OffsetReset, orderly_group::AutoOffsetReset>();
        for v in Assignor::value_variants() {
            let a: Arc<dyn orderly_group::assignor::Assignor> = (*v).into();
            assert_eq!(Assignor::of(a.as_ref()), Some(*v));
            assert_eq!(a.name(), name(v));
        }
    }

    /// The names the library types print are the names these settings take.
    #[test]
    fn the_names_are_the_library_names() {
        for v in NoSession::value_variants() {
            let l: orderly_handlers::NoSession = (*v).into();
            assert_eq!(l.to_string(), name(v));
        }
        for v in GroupProtocol::value_variants() {
            let l: orderly_group::config::GroupProtocol = (*v).into();
            assert_eq!(l.name(), name(v));
        }
        for v in HttpBody::value_variants() {
            assert_eq!(
                name(v).parse::<orderly_handlers::HttpBody>(),
                Ok((*v).into())
            );
        }
    }

    /// Every provider the library has is a choice, under the library's name.
    #[cfg(feature = "tls")]
    #[test]
    fn every_tls_provider_is_a_choice() {
        for p in orderly_protocol::tls::TlsProvider::ALL {
            let v = <TlsProvider as ValueEnum>::from_str(p.name(), false).unwrap();
            assert_eq!(v.pick(), p);
        }
    }

    #[test]
    fn the_file_takes_and_writes_the_flag_names() {
        #[derive(Deserialize, Serialize)]
        struct F {
            i: Isolation,
            s: SaslMechanism,
            a: Vec<Assignor>,
        }
        let f: F = toml::from_str(
            "i = \"read-uncommitted\"\ns = \"scram-sha-512\"\na = [\"roundrobin\", \"range\"]\n",
        )
        .unwrap();
        assert_eq!(f.i, Isolation::ReadUncommitted);
        assert_eq!(f.s, SaslMechanism::ScramSha512);
        assert_eq!(f.a, [Assignor::RoundRobin, Assignor::Range]);
        assert_eq!(
            toml::to_string(&f).unwrap(),
            "i = \"read-uncommitted\"\ns = \"SCRAM-SHA-512\"\na = [\"roundrobin\", \"range\"]\n"
        );
        let e = toml::from_str::<F>("i = \"Read-Committed\"\ns = \"PLAIN\"\na = []\n")
            .err()
            .unwrap();
        assert!(
            e.message().contains(
                "invalid value \"Read-Committed\": expected read-committed or read-uncommitted"
            ),
            "{e}"
        );
        let e = toml::from_str::<F>("i = 1\ns = \"PLAIN\"\na = []\n")
            .err()
            .unwrap();
        assert!(
            e.message()
                .contains("expected read-committed or read-uncommitted"),
            "{e}"
        );
        let e = toml::from_str::<F>("i = \"read-committed\"\ns = \"PLAIN\"\na = [\"sticky\"]\n")
            .err()
            .unwrap();
        assert!(
            e.message()
                .contains("expected cooperative-sticky, range or roundrobin"),
            "{e}"
        );
    }
}
