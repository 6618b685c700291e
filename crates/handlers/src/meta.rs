//! What every handler tells the application about a record: metadata, the JSON envelope, `traceparent`.

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use orderly_engine::{Attempt, HandlerError, Record, TraceParent};
use rand::Rng as _;
use serde::Serialize;

use crate::session::{NoSession, SESSION_HEADER, SessionRouter};

/// Bytes as text: UTF-8 when they are (borrowed, no copy), base64 otherwise (`encoding` says
/// which).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Text<'a> {
    /// The text.
    pub text: Cow<'a, str>,
    /// `true` when `text` is base64.
    pub base64: bool,
}

impl<'a> Text<'a> {
    /// Encodes `bytes`.
    pub fn of(bytes: &'a [u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(s) => Self {
                text: Cow::Borrowed(s),
                base64: false,
            },
            Err(_) => Self {
                text: Cow::Owned(B64.encode(bytes)),
                base64: true,
            },
        }
    }

    /// Encodes owned `bytes`.
    pub fn of_owned(bytes: Vec<u8>) -> Text<'static> {
        match String::from_utf8(bytes) {
            Ok(s) => Text {
                text: Cow::Owned(s),
                base64: false,
            },
            Err(e) => Text {
                text: Cow::Owned(B64.encode(e.as_bytes())),
                base64: true,
            },
        }
    }

    /// `"utf8"` or `"base64"`.
    pub fn encoding(&self) -> &'static str {
        if self.base64 { "base64" } else { "utf8" }
    }
}

/// `bytes` as text without a copy when they are UTF-8 (base64 otherwise), with its encoding.
fn text(bytes: &[u8]) -> (Cow<'_, str>, &'static str) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (Cow::Borrowed(s), "utf8"),
        Err(_) => (Cow::Owned(B64.encode(bytes)), "base64"),
    }
}

/// A W3C `traceparent` value: the record's own header, or a fresh root written in place (no
/// allocation either way).
#[derive(Debug, Clone, Copy)]
pub struct TraceText<'a>(TraceRepr<'a>);

#[derive(Debug, Clone, Copy)]
enum TraceRepr<'a> {
    Given(&'a str),
    Fresh([u8; 55]),
}

impl TraceText<'_> {
    /// The value.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            TraceRepr::Given(s) => s,
            // Written from ASCII hex digits and dashes only, so always UTF-8.
            TraceRepr::Fresh(b) => std::str::from_utf8(b).unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for TraceText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::ops::Deref for TraceText<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

/// One record's metadata, computed once per attempt; it borrows from the record.
#[derive(Debug, Clone)]
pub struct Meta<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// The session id (UTF-8 or base64), if any.
    pub session: Option<Text<'a>>,
    /// The attempt number (1 = first).
    pub attempt: u32,
    /// CreateTime (or LogAppendTime), ms since the epoch.
    pub timestamp_ms: i64,
    /// The key, if any.
    pub key: Option<Text<'a>>,
    /// The W3C trace context: the record's own `traceparent` header, or a fresh one.
    pub traceparent: TraceText<'a>,
}

impl<'a> Meta<'a> {
    /// The metadata of `record`, or the permanent error `no session id` when the router's
    /// policy dead-letters records without one.
    pub fn of(
        record: &'a Record,
        attempt: Attempt,
        router: &SessionRouter,
    ) -> Result<Self, HandlerError> {
        let prepared = if router.needs_prepare() {
            record.header(SESSION_HEADER)
        } else {
            None
        };
        let session = match prepared {
            Some(s) => Some(Text::of(s)),
            None => router.session_ref(record).map(|s| match s {
                Cow::Borrowed(b) => Text::of(b),
                Cow::Owned(v) => Text::of_owned(v),
            }),
        };
        if session.is_none() && router.missing == NoSession::Dlq {
            return Err(HandlerError::permanent(format!(
                "no session id ({})",
                router.from
            )));
        }
        Ok(Self {
            topic: &record.partition.topic,
            partition: record.partition.partition,
            offset: record.offset,
            session,
            attempt: attempt.number,
            timestamp_ms: record.timestamp_ms,
            key: record.key.as_deref().map(Text::of),
            traceparent: traceparent(record),
        })
    }

    /// The metadata as `(name, value)` pairs with the given prefix and separator style:
    /// `orderly-topic` for HTTP headers, `ORDERLY_TOPIC` for environment variables.
    pub fn pairs(&self, env_style: bool) -> Vec<(String, String)> {
        let name = |n: &str| {
            if env_style {
                format!("ORDERLY_{}", n.to_ascii_uppercase().replace('-', "_"))
            } else {
                format!("orderly-{n}")
            }
        };
        let mut out = vec![
            (name("topic"), self.topic.to_owned()),
            (name("partition"), self.partition.to_string()),
            (name("offset"), self.offset.to_string()),
            (name("attempt"), self.attempt.to_string()),
            (name("timestamp"), self.timestamp_ms.to_string()),
        ];
        if let Some(s) = &self.session {
            out.push((name("session"), s.text.to_string()));
            if s.base64 {
                out.push((name("session-encoding"), "base64".into()));
            }
        }
        if let Some(k) = &self.key {
            out.push((name("key"), k.text.to_string()));
            if k.base64 {
                out.push((name("key-encoding"), "base64".into()));
            }
        }
        out
    }
}

/// The record's `traceparent` header if it holds a valid one, otherwise a new sampled root.
pub fn traceparent(record: &Record) -> TraceText<'_> {
    if let Some(v) = record.header("traceparent") {
        if TraceParent::parse(v).is_some() {
            if let Ok(s) = std::str::from_utf8(v) {
                return TraceText(TraceRepr::Given(s));
            }
        }
    }
    let mut rng = rand::rng();
    let trace: u128 = rng.random::<u128>().max(1);
    let span: u64 = rng.random::<u64>().max(1);
    // `00-{trace:032x}-{span:016x}-01`, written directly (this runs once per record attempt).
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 55];
    out[..3].copy_from_slice(b"00-");
    for i in 0..32 {
        out[3 + i] = HEX[((trace >> (124 - 4 * i)) & 0xf) as usize];
    }
    out[35] = b'-';
    for i in 0..16 {
        out[36 + i] = HEX[((span >> (60 - 4 * i)) & 0xf) as usize];
    }
    out[52..].copy_from_slice(b"-01");
    TraceText(TraceRepr::Fresh(out))
}

/// The `--http-body json` / pipe envelope of one record. It borrows the record's bytes: a
/// UTF-8 value or header is serialized from the record itself, not from a copy.
#[derive(Debug, Serialize)]
pub struct Envelope<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Timestamp, ms since the epoch.
    pub timestamp: i64,
    /// Attempt number, 1-based.
    pub attempt: u32,
    /// Session id.
    pub session: Option<&'a str>,
    /// Key (text).
    pub key: Option<&'a str>,
    /// `utf8` or `base64`.
    pub key_encoding: Option<&'static str>,
    /// Value (text).
    pub value: Option<Cow<'a, str>>,
    /// `utf8` or `base64`.
    pub value_encoding: Option<&'static str>,
    /// Headers in wire order, values as UTF-8 text (base64 when not, with `encoding`).
    pub headers: Vec<EnvelopeHeader<'a>>,
    /// W3C trace context.
    pub traceparent: &'a str,
}

/// One header of an [`Envelope`].
#[derive(Debug, Serialize)]
pub struct EnvelopeHeader<'a> {
    /// Name.
    pub name: &'a str,
    /// Value; `None` for Kafka's null header value.
    pub value: Option<Cow<'a, str>>,
    /// `utf8` or `base64`.
    pub encoding: &'static str,
}

impl<'a> Envelope<'a> {
    /// The envelope of `record` with its `meta`.
    pub fn new(record: &'a Record, meta: &'a Meta<'a>) -> Self {
        let value = record.value.as_deref().map(text);
        Self {
            topic: meta.topic,
            partition: meta.partition,
            offset: meta.offset,
            timestamp: meta.timestamp_ms,
            attempt: meta.attempt,
            session: meta.session.as_ref().map(|s| s.text.as_ref()),
            key: meta.key.as_ref().map(|k| k.text.as_ref()),
            key_encoding: meta.key.as_ref().map(Text::encoding),
            value_encoding: value.as_ref().map(|v| v.1),
            value: value.map(|v| v.0),
            headers: record
                .headers
                .iter()
                .filter(|h| h.key != SESSION_HEADER)
                .map(|h| {
                    let t = h.value.as_deref().map(text);
                    EnvelopeHeader {
                        name: &h.key,
                        encoding: t.as_ref().map_or("utf8", |t| t.1),
                        value: t.map(|t| t.0),
                    }
                })
                .collect(),
            traceparent: meta.traceparent.as_str(),
        }
    }

    /// The envelope as JSON bytes.
    pub fn to_bytes(&self) -> Bytes {
        let mut out = Vec::with_capacity(self.size_hint());
        // Serializing plain strings and numbers cannot fail; an empty object is a safe fallback.
        if serde_json::to_writer(&mut out, self).is_err() {
            return Bytes::from_static(b"{}");
        }
        Bytes::from(out)
    }

    /// About the size of the JSON (what is not escaped), to size its buffer once.
    pub fn size_hint(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|h| h.name.len() + h.value.as_ref().map_or(4, |v| v.len()) + 40)
            .sum();
        256 + self.topic.len()
            + self.session.map_or(0, str::len)
            + self.key.map_or(0, str::len)
            + self.value.as_ref().map_or(0, |v| v.len())
            + headers
    }

    /// About the size of the JSON envelope of `record` with `meta`, without building it (a
    /// base64 value or header counts at its raw size: the buffer grows once if needed).
    pub fn size_hint_of(record: &Record, meta: &Meta<'_>) -> usize {
        let headers: usize = record
            .headers
            .iter()
            .map(|h| h.key.len() + h.value.as_ref().map_or(4, |v| v.len()) + 40)
            .sum();
        256 + meta.topic.len()
            + meta.session.as_ref().map_or(0, |s| s.text.len())
            + meta.key.as_ref().map_or(0, |k| k.text.len())
            + record.value.as_ref().map_or(0, |v| v.len())
            + headers
    }
}

/// At most `max` bytes of `bytes` as lossy UTF-8 (the reason text of a failure).
pub fn snippet(bytes: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(max)])
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use orderly_engine::{Header, TopicPartition};

    use super::*;
    use crate::session::SessionFrom;

    #[test]
    fn binary_keys_are_base64_and_traceparent_is_kept_or_started() {
        let mut r = Record::new(
            TopicPartition::new("t", 1),
            5,
            Some(Bytes::from_static(&[0xff, 0x00])),
            Some(Bytes::from_static(b"v")),
        );
        let m = Meta::of(
            &r,
            Attempt::retry(2, std::time::Duration::from_millis(100)),
            &SessionRouter::default(),
        )
        .unwrap();
        let pairs = m.pairs(false);
        assert!(pairs.contains(&("orderly-key".into(), "/wA=".into())));
        assert!(pairs.contains(&("orderly-key-encoding".into(), "base64".into())));
        assert!(pairs.contains(&("orderly-attempt".into(), "2".into())));
        assert!(TraceParent::parse(m.traceparent.as_bytes()).is_some());
        assert_eq!(m.traceparent.len(), 55);
        assert!(m.traceparent.starts_with("00-") && m.traceparent.ends_with("-01"));
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        r.headers.push(Header::new("traceparent", tp));
        let m = Meta::of(&r, Attempt::FIRST, &SessionRouter::default()).unwrap();
        assert_eq!(m.traceparent.as_str(), tp);
        let env = m.pairs(true);
        assert!(env.contains(&("ORDERLY_KEY_ENCODING".into(), "base64".into())));
    }

    #[test]
    fn dlq_policy_rejects_records_without_session() {
        let r = Record::new(TopicPartition::new("t", 1), 5, None, None);
        let router = SessionRouter::new(SessionFrom::Key, NoSession::Dlq);
        let e = Meta::of(&r, Attempt::FIRST, &router).unwrap_err();
        assert!(
            matches!(e, HandlerError::Permanent { message: t, .. } if t.contains("no session id"))
        );
    }
}
