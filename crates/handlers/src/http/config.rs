//! The settings of an [`HttpHandler`](crate::HttpHandler): URL, body, format, limits, TLS files, extra headers.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::headers::{CloudEvents, ExtraHeader, SigningKey};
use super::outcome::StatusClasses;
use crate::endpoint::HttpSetupError;

/// What the request body holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpBody {
    /// The record value bytes; metadata in `orderly-*` headers, Kafka headers as `kafka-h-*`.
    #[default]
    Raw,
    /// One JSON envelope (see [`Envelope`](crate::meta::Envelope)) with key, value, headers and metadata.
    Json,
}

impl FromStr for HttpBody {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "raw" => Ok(Self::Raw),
            "json" => Ok(Self::Json),
            _ => Err(format!("invalid HTTP body {s:?}: expected `raw` or `json`")),
        }
    }
}

/// The request's header convention.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum HttpFormat {
    /// orderly's `orderly-*`, `kafka-h-*` and `traceparent` headers.
    #[default]
    Plain,
    /// The same plus the CloudEvents HTTP binding in binary content mode (`ce-*` headers).
    CloudEvents(CloudEvents),
}

/// Settings of an [`HttpHandler`](crate::HttpHandler); `HttpConfig::new(url)` gives the documented defaults.
/// `Debug` masks the URL's secrets ([`redact_url`](crate::redact_url)), header values and the
/// signing key.
#[derive(Clone)]
pub struct HttpConfig {
    /// The URL records are POSTed to, `http://` or `https://`. Credentials in its userinfo
    /// (`https://user:password@host/`, percent-encoded) are sent as `Authorization: Basic`;
    /// logs and errors show it masked.
    pub url: String,
    /// Body format. Default raw value bytes.
    pub body: HttpBody,
    /// Header convention. Default [`HttpFormat::Plain`].
    pub format: HttpFormat,
    /// Requests in flight at most. Default 256.
    pub concurrency: usize,
    /// Let the number of requests in flight follow the endpoint's latency, between
    /// [`limit::FLOOR`](crate::limit::FLOOR) (8) and `concurrency`, starting at
    /// [`limit::START`](crate::limit::START) (16): it grows while the round-trip time holds and
    /// shrinks when requests only queue (see [`crate::limit`]). `false`: always `concurrency`.
    /// Default false: on a loaded host the scheduler's delays look like a queue, so it helps an
    /// endpoint that answers at once but can hold back one with milliseconds of service time.
    pub adaptive_concurrency: bool,
    /// Limit for one request (send, response status and headers); hitting it is transient.
    /// The body is read within the same limit, but once a status has arrived the status
    /// decides. Over HTTP/1.1 it starts once the connection stands; over HTTP/2 (which connects
    /// inside the request) `connect_timeout` and `tls_handshake_timeout` are added to it.
    /// Default 30 s.
    pub timeout: Duration,
    /// Limit for making a TCP connection (name resolution included). Running out of it counts
    /// as the endpoint being unreachable, as a refused connection does: with
    /// `wait_while_unreachable`, attempts are held, not failed. Default 10 s.
    pub connect_timeout: Duration,
    /// `https://`: limit for the TLS handshake on a new connection; running out of it counts as
    /// the endpoint being unreachable, as `connect_timeout` does. Default 10 s.
    pub tls_handshake_timeout: Duration,
    /// Speak HTTP/2 instead of HTTP/1.1: with prior knowledge ("h2c") on `http://`, negotiated
    /// by ALPN on `https://`. Default false.
    pub h2c: bool,
    /// While the endpoint as a whole is down (it refuses connections, lets them or their TLS
    /// handshake time out, or answers nothing but 502 / 503 / 504 for a while), hold every attempt instead of failing it, probing with one
    /// request at a time, and report the handler unavailable to the engine (which suspends its
    /// stuck-gap rule): records wait, none uses up its retries or is dead-lettered because the
    /// service is down. See [`crate::circuit`]. Default true; `false` makes such failures
    /// ordinary transient errors.
    pub wait_while_unreachable: bool,
    /// Longest `Retry-After` honoured. Default 5 min.
    pub max_retry_after: Duration,
    /// Which statuses are retried and which dead-lettered. Default: 408, 425, 429 and 5xx
    /// retried, 2xx done, anything else dead-lettered.
    pub classes: StatusClasses,
    /// An idle pooled connection is closed after this. Default 4 s, below the 5 s after which
    /// Node.js (and servers like it) close idle keep-alive connections.
    pub pool_idle_timeout: Duration,
    /// `https://`: trust the CA certificates of this PEM file instead of the public web PKI
    /// (compiled in). The server's certificate chain and host name are always verified.
    pub ca_file: Option<PathBuf>,
    /// `https://`: present this PEM certificate chain (mTLS); needs `client_key`.
    pub client_cert: Option<PathBuf>,
    /// `https://`: the PEM private key of `client_cert`.
    pub client_key: Option<PathBuf>,
    /// Headers added to every request, after orderly's own (a name given here replaces
    /// orderly's header of that name).
    pub headers: Vec<ExtraHeader>,
    /// Sign every request with `orderly-signature: t=<unix seconds>,v1=<hex>,v2=<hex>`: HMAC-SHA256
    /// of `"<t>." + body` (v1), and of that followed by the values of
    /// [`SIGNED_HEADERS`](crate::http::SIGNED_HEADERS) (v2; see
    /// [`SigningKey::signature`](crate::http::SigningKey::signature)). Default none.
    pub signing_key: Option<SigningKey>,
    /// A non-empty 2xx body is the record's reply, to the consumer's default reply topic, even
    /// without an `orderly-reply-topic` header (set it when the consumer has a reply topic).
    /// Default false: only a response with that header, or with content type
    /// [`replies::CONTENT_TYPE`](crate::replies::CONTENT_TYPE), carries replies.
    pub reply_with_body: bool,
}

impl HttpConfig {
    /// Defaults for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            body: HttpBody::Raw,
            format: HttpFormat::Plain,
            concurrency: 256,
            adaptive_concurrency: false,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(10),
            h2c: false,
            wait_while_unreachable: true,
            max_retry_after: Duration::from_secs(300),
            classes: StatusClasses::default(),
            pool_idle_timeout: Duration::from_secs(4),
            ca_file: None,
            client_cert: None,
            client_key: None,
            headers: Vec::new(),
            signing_key: None,
            reply_with_body: false,
        }
    }
}

impl HttpConfig {
    /// Checks the URL and the extra headers as [`HttpHandler::new`](crate::HttpHandler::new)
    /// does, without building a client: for configuration checks.
    pub fn validate(&self) -> Result<(), HttpSetupError> {
        crate::endpoint::Endpoint::parse(&self.url)?;
        self.check_headers()
    }

    /// Refuses an extra header named in [`RESERVED_HEADERS`](super::RESERVED_HEADERS).
    pub(crate) fn check_headers(&self) -> Result<(), HttpSetupError> {
        match self
            .headers
            .iter()
            .find_map(|x| super::headers::reserved(&x.name))
        {
            Some(e) => Err(HttpSetupError::Header(e)),
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("url", &crate::redact_url(&self.url))
            .field("body", &self.body)
            .field("concurrency", &self.concurrency)
            .field("adaptive_concurrency", &self.adaptive_concurrency)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls_handshake_timeout", &self.tls_handshake_timeout)
            .field("h2c", &self.h2c)
            .field("wait_while_unreachable", &self.wait_while_unreachable)
            .field("max_retry_after", &self.max_retry_after)
            .field("format", &self.format)
            .field("classes", &self.classes)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("ca_file", &self.ca_file)
            .field("client_cert", &self.client_cert)
            .field("client_key", &self.client_key)
            .field("headers", &self.headers)
            .field("signing_key", &self.signing_key)
            .finish()
    }
}
