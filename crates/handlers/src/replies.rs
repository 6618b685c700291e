//! Replies in JSON: the form in which an HTTP endpoint or a pipe child returns records for the
//! engine to write before the record counts as done.
//!
//! One reply is an object; every field is optional but a reply without `value` is written with
//! a null value:
//!
//! ```json
//! {"topic": "answers", "key": "chat-7", "value": "hello", "headers": {"lang": "en"}}
//! ```
//!
//! - `topic`: the destination; default: the consumer's `--reply-topic` (a reply with neither
//!   dead-letters its record).
//! - `key`: default: the session id of the record answered, so a session's replies stay on one
//!   partition, in order.
//! - `value`: text. `key_encoding` / `value_encoding`: `"base64"` when `key` / `value` is base64
//!   of bytes that are not text (the envelope's own convention), `"utf8"` (default) otherwise.
//! - `headers`: an object, name → text value (`null` for Kafka's null header value); written in
//!   name order.
//! - `offset`: in an HTTP batch answer, the offset of the record the reply belongs to (required
//!   there, ignored elsewhere).
//!
//! Several replies travel as `{"replies": [..]}` (an HTTP body with content type
//! [`CONTENT_TYPE`], or the `replies` field of a batch answer or of a pipe answer), and are
//! written in the order listed.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use orderly_engine::{Header, Reply};
use serde::Deserialize;

/// The content type of an HTTP response body that carries replies as JSON.
pub const CONTENT_TYPE: &str = "application/vnd.orderly.replies+json";

/// The response header naming the topic of the reply that is the response body.
pub const TOPIC_HEADER: &str = "orderly-reply-topic";

/// The response header giving the key of the reply that is the response body.
pub const KEY_HEADER: &str = "orderly-reply-key";

/// One reply as JSON (see the module docs).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonReply {
    /// Destination topic.
    #[serde(default)]
    pub topic: Option<String>,
    /// Key, text or base64.
    #[serde(default)]
    pub key: Option<String>,
    /// `utf8` (default) or `base64`.
    #[serde(default)]
    pub key_encoding: Option<String>,
    /// Value, text or base64.
    #[serde(default)]
    pub value: Option<String>,
    /// `utf8` (default) or `base64`.
    #[serde(default)]
    pub value_encoding: Option<String>,
    /// Headers, name → value.
    #[serde(default)]
    pub headers: BTreeMap<String, Option<String>>,
    /// The record answered, in an HTTP batch answer.
    #[serde(default)]
    pub offset: Option<i64>,
}

/// Several replies as JSON: `{"replies": [..]}`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct JsonReplies {
    /// The replies, in order.
    #[serde(default)]
    pub replies: Vec<JsonReply>,
}

fn decode(
    text: Option<String>,
    encoding: Option<&str>,
    what: &str,
) -> Result<Option<Bytes>, String> {
    match (text, encoding) {
        (None, _) => Ok(None),
        (Some(t), None | Some("utf8" | "utf-8")) => Ok(Some(Bytes::from(t))),
        (Some(t), Some("base64")) => B64
            .decode(t.as_bytes())
            .map(|b| Some(Bytes::from(b)))
            .map_err(|e| format!("reply {what} is not base64: {e}")),
        (Some(_), Some(other)) => Err(format!(
            "reply {what}_encoding {other:?} is not utf8 or base64"
        )),
    }
}

impl JsonReply {
    /// The engine's reply.
    pub fn into_reply(self) -> Result<Reply, String> {
        Ok(Reply {
            topic: self.topic.filter(|t| !t.is_empty()),
            key: decode(self.key, self.key_encoding.as_deref(), "key")?,
            value: decode(self.value, self.value_encoding.as_deref(), "value")?,
            headers: self
                .headers
                .into_iter()
                .map(|(k, v)| Header {
                    key: k.into(),
                    value: v.map(Bytes::from),
                })
                .collect(),
        })
    }
}

/// Parses `{"replies": [..]}`.
pub fn parse(body: &[u8]) -> Result<Vec<Reply>, String> {
    let r: JsonReplies =
        serde_json::from_slice(body).map_err(|e| format!("invalid replies JSON: {e}"))?;
    r.replies.into_iter().map(JsonReply::into_reply).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_with_defaults_and_encodings() {
        let r = parse(
            br#"{"replies":[{"value":"a"},{"topic":"t","key":"aGk=","key_encoding":"base64","value":null,"headers":{"x":"1","n":null}}]}"#,
        )
        .unwrap();
        assert_eq!(r[0], Reply::new("a"));
        assert_eq!(r[1].topic.as_deref(), Some("t"));
        assert_eq!(r[1].key.as_deref(), Some(&b"hi"[..]));
        assert_eq!(r[1].value, None);
        assert_eq!(r[1].headers.len(), 2);
        assert_eq!(r[1].headers[0].key, "n");
        assert_eq!(r[1].headers[0].value, None);
        assert!(parse(br#"{"replies":[{"value":"%","value_encoding":"base64"}]}"#).is_err());
        assert!(parse(br#"{"replies":[{"valeu":"typo"}]}"#).is_err());
        assert!(parse(b"not json").is_err());
        assert!(parse(br#"{}"#).unwrap().is_empty());
    }
}
