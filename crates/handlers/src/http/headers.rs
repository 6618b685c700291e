//! Request headers of the webhook: Kafka headers as `kafka-h-*`, configured extra headers,
//! the request signature, CloudEvents attributes.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use hyper::HeaderMap;
use hyper::header::{HeaderName, HeaderValue};
use orderly_engine::Record;
use sha2::Sha256;

use crate::meta::Meta;
use crate::session::SESSION_HEADER;

/// Whether `b` can travel as an HTTP header value unchanged and be read back as the same text:
/// visible ASCII, spaces and tabs inside, nothing at either end that a parser trims.
fn plain_value(b: &[u8]) -> bool {
    b.iter().all(|&c| c == b'\t' || (b' '..=b'~').contains(&c))
        && !b.first().is_some_and(|c| c.is_ascii_whitespace())
        && !b.last().is_some_and(|c| c.is_ascii_whitespace())
}

/// Where a request's headers are written: hyper's [`HeaderMap`] (HTTP/2), or the lines of an
/// HTTP/1.1 request head ([`Wire`]). Names are lower-case tokens; a value HTTP cannot carry
/// (CR, LF, NUL and other control bytes) is left out. Every name is written once, except
/// Kafka headers that repeat.
pub(crate) trait HeaderOut {
    /// Adds the header `name: value`.
    fn put(&mut self, name: &str, value: &[u8]);

    /// Adds the header `name: n`.
    fn put_num(&mut self, name: &str, n: impl itoa::Integer) {
        self.put(name, itoa::Buffer::new().format(n).as_bytes());
    }
}

impl HeaderOut for HeaderMap {
    fn put(&mut self, name: &str, value: &[u8]) {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            self.append(n, v);
        }
    }
}

/// The header lines of an HTTP/1.1 request head, written straight into its bytes. Names that a
/// configured extra header replaces are left out here (the extra header follows).
pub(crate) struct Wire<'a> {
    pub out: Vec<u8>,
    pub replaced: &'a [ExtraHeader],
}

impl HeaderOut for Wire<'_> {
    fn put(&mut self, name: &str, value: &[u8]) {
        if !value
            .iter()
            .all(|&c| c == b'\t' || (c >= b' ' && c != 0x7f))
            || self.replaced.iter().any(|x| x.name.as_str() == name)
        {
            return;
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value);
        self.out.extend_from_slice(b"\r\n");
    }
}

/// Whether `b` is visible ASCII (and tabs and spaces): what a header value carries unencoded.
pub(crate) fn visible(b: &[u8]) -> bool {
    b.iter().all(|&c| c == b'\t' || (b' '..=b'~').contains(&c))
}

/// A token character of RFC 9110 (what a header name is made of).
fn tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// Appends the record's Kafka headers (except orderly's synthetic session header):
///
/// * `kafka-h-<name>: <value>` when the value is visible ASCII;
/// * otherwise the value base64 with `kafka-h-<name>-encoding: base64`;
/// * a null value as an empty value with `kafka-h-<name>-encoding: null` (an empty value has no
///   marker);
/// * a name HTTP cannot carry in `kafka-h-<name>` (not a token: spaces, non-ASCII, separators)
///   as `kafka-hx-<the name's UTF-8 bytes in lowercase hex>`, with the same value rules;
/// * when a name occurs more than once, each of its values gets a marker (`utf8` for a plain
///   one), so the n-th marker belongs to the n-th value.
///
/// Names are lower-cased by HTTP.
pub(crate) fn kafka_headers(h: &mut impl HeaderOut, record: &Record) {
    let mut name = String::with_capacity(32);
    for (i, kh) in record.headers.iter().enumerate() {
        if kh.key == SESSION_HEADER {
            continue;
        }
        name.clear();
        if !kh.key.is_empty() && kh.key.bytes().all(tchar) {
            name.push_str("kafka-h-");
            name.extend(kh.key.chars().map(|c| c.to_ascii_lowercase()));
        } else {
            name.push_str("kafka-hx-");
            for b in kh.key.as_bytes() {
                name.push(char::from(HEX[usize::from(b >> 4)]));
                name.push(char::from(HEX[usize::from(b & 15)]));
            }
        }
        let repeated = record
            .headers
            .iter()
            .enumerate()
            .any(|(j, o)| j != i && o.key.eq_ignore_ascii_case(&kh.key));
        let marker = match &kh.value {
            None => {
                h.put(&name, b"");
                Some("null")
            }
            Some(v) if plain_value(v) => {
                h.put(&name, v);
                repeated.then_some("utf8")
            }
            Some(v) => {
                h.put(&name, B64.encode(v).as_bytes());
                Some("base64")
            }
        };
        if let Some(m) = marker {
            name.push_str("-encoding");
            h.put(&name, m.as_bytes());
        }
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Headers an extra header may not set: orderly writes them on every request (the host, the
/// body's length), and a `transfer-encoding` or second `content-length` beside orderly's would
/// let a record's value frame a request of its own.
pub const RESERVED_HEADERS: [&str; 3] = ["host", "content-length", "transfer-encoding"];

/// The error for an extra header named `name` when orderly sets that header itself.
pub(crate) fn reserved(name: &HeaderName) -> Option<String> {
    RESERVED_HEADERS.contains(&name.as_str()).then(|| {
        format!(
            "header {name}: orderly sets it (a request may not set {})",
            RESERVED_HEADERS.join(", ")
        )
    })
}

/// A header added to every request (`--http-header`). `Debug` shows the name only.
#[derive(Clone, PartialEq, Eq)]
pub struct ExtraHeader {
    /// The name.
    pub name: HeaderName,
    /// The value, marked sensitive (HTTP/2 never puts it in its compression table).
    pub value: HeaderValue,
}

impl fmt::Debug for ExtraHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}: ********\"", self.name)
    }
}

impl ExtraHeader {
    /// A header from `Name: value`, where the value is one of
    ///
    /// * `env:VAR`: the value of the environment variable `VAR`;
    /// * `@/path/to/file`: the file's content, trailing line break removed;
    /// * anything else: the value as written (surrounding spaces removed).
    ///
    /// The names in [`RESERVED_HEADERS`] are refused.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let (name, value) = spec
            .split_once(':')
            .ok_or_else(|| format!("invalid header {:?}: expected `Name: value`", mask(spec)))?;
        let name = name.trim();
        // Not quoted: a name that is no token may be a value that lost its `:`.
        let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            "invalid header name: expected `Name: value`, the name a token (letters, digits, `-`)"
                .to_owned()
        })?;
        if let Some(e) = reserved(&name) {
            return Err(e);
        }
        let value = value.trim();
        let text = if let Some(var) = value.strip_prefix("env:") {
            std::env::var(var)
                .map_err(|e| format!("header {name}: environment variable {var}: {e}"))?
        } else if let Some(path) = value.strip_prefix('@') {
            std::fs::read_to_string(path)
                .map_err(|e| format!("header {name}: cannot read {path}: {e}"))?
                .trim_end_matches(['\n', '\r'])
                .to_owned()
        } else {
            value.to_owned()
        };
        let mut value = HeaderValue::from_str(&text).map_err(|_| {
            format!("header {name}: the value is not a valid HTTP header value (visible ASCII)")
        })?;
        value.set_sensitive(true);
        Ok(Self { name, value })
    }
}

/// `spec` (`Name: value`) with a literal value replaced by `********`; `env:` and `@file`
/// references are shown as written (they name where the secret is, not the secret).
pub fn mask(spec: &str) -> String {
    match spec.split_once(':') {
        Some((n, v)) => {
            let v = v.trim();
            if v.starts_with("env:") || v.starts_with('@') {
                format!("{}: {v}", n.trim())
            } else {
                format!("{}: ********", n.trim())
            }
        }
        None => "********".to_owned(),
    }
}

/// The request headers the signature's `v2` covers, in the order of its string to sign: those
/// that name the record (or the batch) and its delivery. A header a request does not carry counts
/// as empty.
pub const SIGNED_HEADERS: [&str; 12] = [
    "orderly-topic",
    "orderly-partition",
    "orderly-offset",
    "orderly-attempt",
    "orderly-timestamp",
    "orderly-key",
    "orderly-key-encoding",
    "orderly-session",
    "orderly-session-encoding",
    "orderly-batch-size",
    "orderly-first-offset",
    "orderly-last-offset",
];

/// The HMAC-SHA256 key that signs every request. `Debug` prints no key material.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey(Vec<u8>);

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningKey(********)")
    }
}

impl SigningKey {
    /// The key's bytes (a shared secret of the service).
    pub fn new(secret: impl Into<Vec<u8>>) -> Self {
        Self(secret.into())
    }

    /// The `orderly-signature` value of a request with `body` whose header `name` has the value
    /// `header(name)` (its first one), signed at `unix_secs`:
    /// `t=<unix_secs>,v1=<hex>,v2=<hex>`, lowercase hex of HMAC-SHA256 with this key over
    ///
    /// * `v1`: `"<t>." + body`;
    /// * `v2`: `"<t>." + body`, then for each of [`SIGNED_HEADERS`] in order a line feed and the
    ///   header's value (nothing when absent).
    pub fn signature<'a>(
        &self,
        unix_secs: u64,
        body: &[u8],
        header: impl Fn(&str) -> Option<&'a [u8]>,
    ) -> String {
        let t = itoa::Buffer::new().format(unix_secs).to_owned();
        let mut out = String::with_capacity(t.len() + 2 * 64 + 12);
        out.push_str("t=");
        out.push_str(&t);
        // Any key length is valid for HMAC.
        if let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.0) {
            mac.update(t.as_bytes());
            mac.update(b".");
            mac.update(body);
            let v1 = mac.clone().finalize().into_bytes();
            for name in SIGNED_HEADERS {
                mac.update(b"\n");
                mac.update(header(name).unwrap_or_default());
            }
            let v2 = mac.finalize().into_bytes();
            for (field, mac) in [(",v1=", v1), (",v2=", v2)] {
                out.push_str(field);
                for b in mac {
                    out.push(char::from(HEX[usize::from(b >> 4)]));
                    out.push(char::from(HEX[usize::from(b & 15)]));
                }
            }
        }
        out
    }

    /// [`signature`](Self::signature) signed now.
    pub(crate) fn signature_now<'a>(
        &self,
        body: &[u8],
        header: impl Fn(&str) -> Option<&'a [u8]>,
    ) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.signature(now, body, header)
    }

    /// Adds `orderly-signature` for `body` and the headers in `h`, signed now.
    pub(crate) fn sign(&self, h: &mut HeaderMap, body: &[u8]) {
        let sig = self.signature_now(body, |n| h.get(n).map(HeaderValue::as_bytes));
        if let Ok(v) = HeaderValue::from_str(&sig) {
            h.insert(HeaderName::from_static("orderly-signature"), v);
        }
    }
}

/// The value of the first header line named `name` in `lines` (`name: value\r\n` each, as
/// [`Wire`] writes them).
pub(crate) fn line_value<'a>(lines: &'a [u8], name: &str) -> Option<&'a [u8]> {
    lines.split(|&c| c == b'\n').find_map(|line| {
        let line = line.strip_suffix(b"\r")?;
        line.strip_prefix(name.as_bytes())?.strip_prefix(b": ")
    })
}

/// CloudEvents attribute values for the HTTP binding: bytes outside visible ASCII, space, `"`
/// and `%` percent-encoded.
fn ce_value(b: &[u8]) -> HeaderValue {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        if (b'!'..=b'~').contains(&c) && c != b'"' && c != b'%' {
            s.push(char::from(c));
        } else {
            s.push_str(&format!("%{c:02X}"));
        }
    }
    HeaderValue::from_str(&s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Settings of the CloudEvents binary content mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudEvents {
    /// `ce-type`. Default `dev.orderly.record`.
    pub event_type: String,
    /// `ce-source`; `None`: `/topics/<topic>/partitions/<partition>`.
    pub source: Option<String>,
    /// The Kafka header whose value is `ce-id` (when present); otherwise
    /// `<topic>/<partition>/<offset>`. Default `event-id`.
    pub id_header: Option<String>,
}

impl Default for CloudEvents {
    fn default() -> Self {
        Self {
            event_type: "dev.orderly.record".into(),
            source: None,
            id_header: Some("event-id".into()),
        }
    }
}

impl CloudEvents {
    /// Adds `ce-specversion`, `ce-id`, `ce-source`, `ce-type`, `ce-time` and (with a session)
    /// `ce-subject`. Kafka headers of the CloudEvents Kafka binding (`ce_<attribute>`) override
    /// the attribute they name, and a `content-type` Kafka header sets the content type, so
    /// records produced as CloudEvents pass through unchanged.
    pub(crate) fn headers(&self, h: &mut HeaderMap, record: &Record, meta: &Meta<'_>) {
        let id = self
            .id_header
            .as_deref()
            .and_then(|n| record.header(n))
            .map(|v| ce_value(v))
            .unwrap_or_else(|| {
                ce_value(format!("{}/{}/{}", meta.topic, meta.partition, meta.offset).as_bytes())
            });
        let source = match &self.source {
            Some(s) => ce_value(s.as_bytes()),
            None => {
                ce_value(format!("/topics/{}/partitions/{}", meta.topic, meta.partition).as_bytes())
            }
        };
        h.insert(
            HeaderName::from_static("ce-specversion"),
            HeaderValue::from_static("1.0"),
        );
        h.insert(HeaderName::from_static("ce-id"), id);
        h.insert(HeaderName::from_static("ce-source"), source);
        h.insert(
            HeaderName::from_static("ce-type"),
            ce_value(self.event_type.as_bytes()),
        );
        h.insert(
            HeaderName::from_static("ce-time"),
            ce_value(rfc3339(meta.timestamp_ms).as_bytes()),
        );
        if let Some(s) = &meta.session {
            let raw = if s.base64 {
                B64.decode(s.text.as_bytes()).unwrap_or_default()
            } else {
                s.text.as_bytes().to_vec()
            };
            h.insert(HeaderName::from_static("ce-subject"), ce_value(&raw));
        }
        for kh in &record.headers {
            let Some(attr) = kh.key.strip_prefix("ce_") else {
                if kh.key.eq_ignore_ascii_case("content-type") {
                    if let Some(v) = kh.value.as_ref().filter(|v| plain_value(v)) {
                        if let Ok(v) = HeaderValue::from_maybe_shared(v.clone()) {
                            h.insert(hyper::header::CONTENT_TYPE, v);
                        }
                    }
                }
                continue;
            };
            let (Some(v), Ok(n)) = (
                &kh.value,
                HeaderName::from_bytes(format!("ce-{attr}").as_bytes()),
            ) else {
                continue;
            };
            h.insert(n, ce_value(v));
        }
    }
}

/// `ms` since the epoch as RFC 3339 in UTC with milliseconds: `2023-11-14T22:13:20.000Z`.
pub(crate) fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn signature_matches_a_known_hmac() {
        // HMAC-SHA256 of "<t>." + body (v1), then each signed header after a line feed (v2),
        // computed here independently.
        let k = SigningKey::new(b"Jefe".to_vec());
        let headers = |n: &str| match n {
            "orderly-topic" => Some(&b"orders"[..]),
            "orderly-offset" => Some(&b"42"[..]),
            _ => None,
        };
        let s = k.signature(1, b"x", headers);
        let hex = |m: &[u8]| -> String {
            let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
            mac.update(m);
            mac.finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        };
        let v1 = hex(b"1.x");
        let v2 = hex(b"1.x\norders\n\n42\n\n\n\n\n\n\n\n\n");
        assert_eq!(s, format!("t=1,v1={v1},v2={v2}"));
        assert!(!format!("{k:?}").contains("Jefe"));
        // What Python's `hmac.new(b"Jefe", ..., hashlib.sha256)` gives for the README's
        // verification code, the request carrying `orderly-topic: orders`, `orderly-offset: 42`.
        assert_eq!(
            k.signature(1_700_000_000, b"{\"n\":1}", headers),
            "t=1700000000,\
             v1=00601f438e960a8bdde282326d65b7cc150d649b63c709218d74ef1078c99b61,\
             v2=9ed5c6633ba1b6c33f4521a491651b187b203285e9c5a844e3f45e609b705c7d"
        );
    }

    #[test]
    fn signed_header_values_are_read_from_the_request_lines() {
        let lines = b"content-type: application/json\r\norderly-topic: t.1\r\norderly-offset: 7\r\norderly-offset: 8\r\norderly-key: a: b\r\n";
        assert_eq!(line_value(lines, "orderly-topic"), Some(&b"t.1"[..]));
        assert_eq!(line_value(lines, "orderly-offset"), Some(&b"7"[..]));
        assert_eq!(line_value(lines, "orderly-key"), Some(&b"a: b"[..]));
        assert_eq!(line_value(lines, "orderly-session"), None);
        assert_eq!(line_value(lines, "orderly"), None);
    }

    #[test]
    fn extra_headers_read_literals_env_and_files_and_never_print_values() {
        let h = ExtraHeader::parse("Authorization: Bearer s3cret").unwrap();
        assert_eq!(h.name.as_str(), "authorization");
        assert_eq!(h.value.to_str().unwrap(), "Bearer s3cret");
        assert!(h.value.is_sensitive());
        assert!(!format!("{h:?}").contains("s3cret"));
        assert_eq!(
            mask("Authorization: Bearer s3cret"),
            "Authorization: ********"
        );
        assert_eq!(mask("X-Token: env:TOKEN"), "X-Token: env:TOKEN");
        let dir = std::env::temp_dir().join(format!("orderly-hdr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("token");
        std::fs::write(&f, "from-file\n").unwrap();
        let h = ExtraHeader::parse(&format!("X-Token: @{}", f.display())).unwrap();
        assert_eq!(h.value.to_str().unwrap(), "from-file");
        let _ = std::fs::remove_dir_all(&dir);
        let h = ExtraHeader::parse("X-Path: env:PATH").unwrap();
        assert_eq!(h.value.to_str().unwrap(), std::env::var("PATH").unwrap());
        assert!(ExtraHeader::parse("X-Missing: env:ORDERLY_TEST_SURELY_UNSET_VAR").is_err());
        assert!(ExtraHeader::parse("no colon").is_err());
        assert!(ExtraHeader::parse("bad name: v").is_err());
    }

    #[test]
    fn a_malformed_extra_header_is_refused_without_quoting_its_value() {
        for spec in [
            "Authorization Bearer s3cret",
            "Authorization Bearer s3cret:x",
            "Authorization=s3cret: x",
            "X-Token: s3cret\u{7f}",
        ] {
            let e = ExtraHeader::parse(spec).unwrap_err();
            assert!(!e.contains("s3cret"), "{spec}: {e}");
        }
    }

    #[test]
    fn extra_headers_may_not_set_the_request_framing() {
        for spec in [
            "Host: other.example",
            "Content-Length: 5",
            "Transfer-Encoding: chunked",
            "transfer-encoding: env:PATH",
        ] {
            let e = ExtraHeader::parse(spec).unwrap_err();
            let name = spec.split_once(':').unwrap().0.to_ascii_lowercase();
            assert!(
                e.contains(&name) && e.contains("orderly sets it"),
                "{spec}: {e}"
            );
        }
        assert!(ExtraHeader::parse("X-Host: h").is_ok());
    }
}
