//! Where a record's session id comes from (`key`, `header:NAME`, `json:/pointer`) and what happens to records without one.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use orderly_engine::{Header, Record};

/// The header the [`SessionRouter`] writes the extracted session id into, when the engine cannot
/// read it from the record itself (JSON pointer, or a record routed by partition).
pub const SESSION_HEADER: &str = "orderly-session-id";

/// Where the session id of a record comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SessionFrom {
    /// The record key (default).
    #[default]
    Key,
    /// The first header with this name.
    Header(String),
    /// A JSON pointer (RFC 6901) into the record value parsed as JSON; a string is taken as is,
    /// a number or boolean as its JSON text. Other values (objects, arrays, null) count as absent.
    Json(String),
}

/// Parse error of a session or no-session specification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SpecError(String);

impl FromStr for SessionFrom {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        if s == "key" {
            Ok(Self::Key)
        } else if let Some(name) = s.strip_prefix("header:") {
            if name.is_empty() {
                return Err(SpecError("session `header:` needs a header name".into()));
            }
            Ok(Self::Header(name.to_owned()))
        } else if let Some(ptr) = s.strip_prefix("json:") {
            if !ptr.is_empty() && !ptr.starts_with('/') {
                return Err(SpecError(format!(
                    "session `json:{ptr}`: a JSON pointer starts with `/` (e.g. json:/user/id)"
                )));
            }
            Ok(Self::Json(ptr.to_owned()))
        } else {
            Err(SpecError(format!(
                "invalid session source {s:?}: expected `key`, `header:NAME` or `json:/pointer`"
            )))
        }
    }
}

impl fmt::Display for SessionFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Key => f.write_str("key"),
            Self::Header(h) => write!(f, "header:{h}"),
            Self::Json(p) => write!(f, "json:{p}"),
        }
    }
}

/// What happens to a record without a session id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NoSession {
    /// The engine's unordered lane: handled at once, concurrently with everything (default).
    #[default]
    Unordered,
    /// Dead-lettered with reason `permanent` and the text `no session id`.
    Dlq,
    /// Handled in partition order: all such records of a partition form one session.
    Partition,
}

impl FromStr for NoSession {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        match s {
            "unordered" => Ok(Self::Unordered),
            "dlq" => Ok(Self::Dlq),
            "partition" => Ok(Self::Partition),
            _ => Err(SpecError(format!(
                "invalid no-session policy {s:?}: expected `unordered`, `dlq` or `partition`"
            ))),
        }
    }
}

impl fmt::Display for NoSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unordered => "unordered",
            Self::Dlq => "dlq",
            Self::Partition => "partition",
        })
    }
}

/// Session-id extraction plus the no-session policy.
///
/// The engine reads a session id from the key or a header by itself. For the other cases the
/// router runs on each fetched record before the engine sees it ([`SessionRouter::prepare`]) and
/// writes the id into the [`SESSION_HEADER`] header, which the engine is then told to read
/// ([`SessionRouter::engine_source`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionRouter {
    /// Where the id comes from.
    pub from: SessionFrom,
    /// What happens without one.
    pub missing: NoSession,
}

impl SessionRouter {
    /// A router.
    pub fn new(from: SessionFrom, missing: NoSession) -> Self {
        Self { from, missing }
    }

    /// The session id of `record` as this router defines it, `None` if it has none.
    pub fn session_of(&self, record: &Record) -> Option<Bytes> {
        match &self.from {
            SessionFrom::Key => record.key.clone(),
            SessionFrom::Header(name) => record.header(name).cloned(),
            SessionFrom::Json(_) => self
                .session_ref(record)
                .map(|s| Bytes::from(s.into_owned())),
        }
    }

    /// [`session_of`](Self::session_of) borrowed from the record where it can be (a key or a
    /// header), copied only when it comes out of a JSON value.
    pub fn session_ref<'r>(&self, record: &'r Record) -> Option<Cow<'r, [u8]>> {
        match &self.from {
            SessionFrom::Key => record.key.as_deref().map(Cow::Borrowed),
            SessionFrom::Header(name) => record.header(name).map(|v| Cow::Borrowed(&v[..])),
            SessionFrom::Json(ptr) => {
                let value = record.value.as_ref()?;
                let doc: serde_json::Value = serde_json::from_slice(value).ok()?;
                match doc.pointer(ptr)? {
                    serde_json::Value::String(s) => Some(Cow::Owned(s.clone().into_bytes())),
                    v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_)) => {
                        Some(Cow::Owned(v.to_string().into_bytes()))
                    }
                    _ => None,
                }
            }
        }
    }

    /// True when records must pass through [`SessionRouter::prepare`] before the engine.
    pub fn needs_prepare(&self) -> bool {
        matches!(self.from, SessionFrom::Json(_)) || self.missing == NoSession::Partition
    }

    /// What the engine must read the session id from.
    pub fn engine_source(&self) -> orderly_engine::SessionIdFrom {
        if self.needs_prepare() {
            orderly_engine::SessionIdFrom::Header(SESSION_HEADER.to_owned())
        } else {
            match &self.from {
                SessionFrom::Header(h) => orderly_engine::SessionIdFrom::Header(h.clone()),
                _ => orderly_engine::SessionIdFrom::Key,
            }
        }
    }

    /// Writes the session id into the [`SESSION_HEADER`] header (a record routed by partition
    /// gets `partition:<topic>-<n>`, so all of a partition's records without an id form one
    /// session). Does nothing when [`SessionRouter::needs_prepare`] is false.
    pub fn prepare(&self, record: &mut Record) {
        if !self.needs_prepare() {
            return;
        }
        let sid = match self.session_of(record) {
            Some(s) => Some(s),
            None if self.missing == NoSession::Partition => {
                Some(Bytes::from(format!("partition:{}", record.partition)))
            }
            None => None,
        };
        // A header of that name already on the record (copied by a replay, or sent by a
        // producer) is not this router's answer: it would win over the one written here.
        record.headers.retain(|h| h.key != SESSION_HEADER);
        if let Some(s) = sid {
            record.headers.push(Header::new(SESSION_HEADER, s));
        }
    }
}

#[cfg(test)]
mod tests {
    use orderly_engine::TopicPartition;

    use super::*;

    fn rec(key: Option<&str>, value: &str) -> Record {
        Record::new(
            TopicPartition::new("t", 3),
            7,
            key.map(|k| Bytes::from(k.to_owned())),
            Some(Bytes::from(value.to_owned())),
        )
    }

    #[test]
    fn parses_specs_and_names_the_bad_ones() {
        assert_eq!("key".parse::<SessionFrom>(), Ok(SessionFrom::Key));
        assert_eq!(
            "header:user".parse::<SessionFrom>(),
            Ok(SessionFrom::Header("user".into()))
        );
        assert_eq!(
            "json:/a/b".parse::<SessionFrom>(),
            Ok(SessionFrom::Json("/a/b".into()))
        );
        assert!("json:a".parse::<SessionFrom>().is_err());
        let e = "value".parse::<SessionFrom>().unwrap_err().to_string();
        assert!(e.contains("\"value\""), "{e}");
        assert_eq!("dlq".parse::<NoSession>(), Ok(NoSession::Dlq));
        assert!("drop".parse::<NoSession>().is_err());
    }

    #[test]
    fn json_pointer_strings_numbers_and_missing() {
        let r = SessionRouter::new(SessionFrom::Json("/user/id".into()), NoSession::Unordered);
        assert_eq!(
            r.session_of(&rec(None, r#"{"user":{"id":"u-1"}}"#)),
            Some(Bytes::from("u-1"))
        );
        assert_eq!(
            r.session_of(&rec(None, r#"{"user":{"id":42}}"#)),
            Some(Bytes::from("42"))
        );
        assert_eq!(r.session_of(&rec(None, r#"{"user":{}}"#)), None);
        assert_eq!(r.session_of(&rec(None, "not json")), None);
        let mut with = rec(None, r#"{"user":{"id":"u-1"}}"#);
        r.prepare(&mut with);
        assert_eq!(with.header(SESSION_HEADER), Some(&Bytes::from("u-1")));
        let mut without = rec(Some("k"), "{}");
        r.prepare(&mut without);
        assert_eq!(without.header(SESSION_HEADER), None);
    }

    #[test]
    fn partition_policy_routes_records_without_id_by_partition() {
        let r = SessionRouter::new(SessionFrom::Key, NoSession::Partition);
        assert!(r.needs_prepare());
        let mut keyed = rec(Some("k"), "v");
        r.prepare(&mut keyed);
        assert_eq!(keyed.header(SESSION_HEADER), Some(&Bytes::from("k")));
        let mut unkeyed = rec(None, "v");
        r.prepare(&mut unkeyed);
        assert_eq!(
            unkeyed.header(SESSION_HEADER),
            Some(&Bytes::from("partition:t-3"))
        );
        // A stale header of the same name (a replayed record) never wins.
        let mut stale = rec(Some("k"), "v");
        stale.headers.push(Header::new(SESSION_HEADER, "old"));
        r.prepare(&mut stale);
        assert_eq!(stale.header(SESSION_HEADER), Some(&Bytes::from("k")));
        let json = SessionRouter::new(SessionFrom::Json("/id".into()), NoSession::Unordered);
        let mut stale = rec(None, "{}");
        stale.headers.push(Header::new(SESSION_HEADER, "old"));
        json.prepare(&mut stale);
        assert_eq!(stale.header(SESSION_HEADER), None, "no id: no header");
        let plain = SessionRouter::default();
        assert!(!plain.needs_prepare());
        assert_eq!(plain.engine_source(), orderly_engine::SessionIdFrom::Key);
    }
}
