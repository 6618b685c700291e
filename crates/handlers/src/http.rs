//! `HttpHandler`: each record is POSTed to a URL (keep-alive pool, a cap on requests in flight, HTTP/1.1 or HTTP/2, `http://` or `https://`).

mod connect;
mod h1;
mod headers;
mod outcome;

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::HeaderMap;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use orderly_engine::{Attempt, BatchOutcome, BatchReplies, Handler, HandlerError, Record, Reply};

pub use self::headers::{CloudEvents, ExtraHeader, SigningKey, mask as mask_header};
pub use crate::endpoint::HttpSetupError;

use self::h1::RequestHeaders;
use self::headers::{HeaderOut, Wire};
pub use self::outcome::{StatusClasses, StatusSet};

use self::connect::{Connector, TlsFiles, Uses, error_text};
use self::outcome::retry_after;
use crate::batch::{Answerer, batch_answer};
use crate::circuit::{Circuit, Pass};
use crate::limit::{Controller, Limiter};
use crate::meta::{Envelope, Meta, Text};
use crate::replies;
use crate::session::SessionRouter;

/// The first bytes of an answer's body that are kept (for the reason text of a failure), unless
/// the body may carry replies or a batch answer (see [`HttpHandler`]): then up to [`BODY_DRAIN`].
pub const BODY_KEEP: usize = 64 << 10;
/// An answer's body is read to its end (so its connection goes back to the pool) up to this
/// many bytes; a longer one is left unread and its connection closed, which costs less than
/// reading it.
pub const BODY_DRAIN: usize = 1 << 20;
/// A request that fails on a pooled connection the endpoint had just closed is sent again at
/// once, not counted as an attempt, at most this many times in a row.
const STALE_RESENDS: usize = 16;

/// What the request body holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HttpBody {
    /// The record value bytes; metadata in `orderly-*` headers, Kafka headers as `kafka-h-*`.
    #[default]
    Raw,
    /// One JSON envelope (see [`Envelope`]) with key, value, headers and metadata.
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

/// Settings of an [`HttpHandler`]; `HttpConfig::new(url)` gives the documented defaults.
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
    /// Limit for one request (connect, send, response status and headers); hitting it is
    /// transient. The body is read within the same limit, but once a status has arrived the
    /// status decides. Default 30 s.
    pub timeout: Duration,
    /// Speak HTTP/2 instead of HTTP/1.1: with prior knowledge ("h2c") on `http://`, negotiated
    /// by ALPN on `https://`. Default false.
    pub h2c: bool,
    /// While the endpoint as a whole is down (it refuses connections, or answers nothing but
    /// 502 / 503 / 504 for a while), hold every attempt instead of failing it, probing with one
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
    /// Sign every request with `orderly-signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
    /// "<t>." + body>`. Default none.
    pub signing_key: Option<SigningKey>,
    /// A non-empty 2xx body is the record's reply, to the consumer's default reply topic, even
    /// without an `orderly-reply-topic` header (set it when the consumer has a reply topic).
    /// Default false: only a response with that header, or with content type
    /// [`replies::CONTENT_TYPE`], carries replies.
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

/// What the endpoint answered to one request.
#[derive(Debug)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The response headers.
    pub headers: HeaderMap,
    /// The first [`BODY_KEEP`] bytes of the body ([`BODY_DRAIN`] when it may carry replies or
    /// a batch answer).
    pub body: Bytes,
    /// Whether `body` is the whole body (it was read to its end within the timeout and is no
    /// longer than what is kept).
    pub complete: bool,
}

/// POSTs each record to a URL and maps the answer to the engine's outcome.
///
/// * 2xx: done. The status decides: a body that is slow or fails after a 2xx status does not
///   make the record a retry.
/// * 408, 425, 429, 5xx ([`StatusClasses::retry_on`]), connection errors and timeouts:
///   transient; a `Retry-After` (seconds or an HTTP-date) is honoured as the least delay before
///   the next attempt (the attempt waits it out before reporting, so the session's next try
///   cannot come earlier).
/// * Any other status (and [`StatusClasses::dead_letter_on`]): permanent; the reason holds the
///   status and the first 1 KiB of the body. Redirects are not followed: a 3xx is permanent
///   with a reason naming its `Location`.
/// * An outage of the whole endpoint (refused connections, nothing but 502/503/504 among the
///   retried statuses) holds attempts instead of failing them and makes the handler
///   unavailable ([`crate::circuit`]).
///
/// Request headers: `orderly-topic`, `orderly-partition`, `orderly-offset`, `orderly-session`,
/// `orderly-attempt`, `orderly-timestamp`, `orderly-key` (base64 when not UTF-8, then also
/// `orderly-key-encoding: base64`), every Kafka header as `kafka-h-<name>` (values that are not
/// visible ASCII base64 with `kafka-h-<name>-encoding: base64`, null values empty with
/// `-encoding: null`, names HTTP cannot carry as `kafka-hx-<hex name>`), `traceparent` (the
/// record's, or a new one), with [`HttpFormat::CloudEvents`] the `ce-*` attributes, the
/// configured extra headers, and with a signing key `orderly-signature`.
#[derive(Debug)]
pub struct HttpHandler {
    config: HttpConfig,
    /// Without the userinfo.
    uri: Uri,
    /// `Basic ...` from the URL's userinfo, if it has one.
    authorization: Option<HeaderValue>,
    /// The URL as logs show it.
    shown_url: String,
    transport: Transport,
    permits: Limiter,
    /// The endpoint circuit (`None` when `wait_while_unreachable` is off).
    circuit: Option<Circuit>,
    router: SessionRouter,
    last_unreachable_warn: AtomicU64,
    started: Instant,
    /// `orderly_http_request_seconds`, resolved at first use (after the recorder is installed).
    request_seconds: OnceLock<metrics::Histogram>,
    /// `orderly_http_responses_total` per status code 100..=599, resolved at first use.
    responses: Box<[OnceLock<metrics::Counter>]>,
}

impl HttpConfig {
    /// Checks the URL as [`HttpHandler::new`](crate::HttpHandler::new) does, without building
    /// a client: for configuration checks.
    pub fn validate(&self) -> Result<(), HttpSetupError> {
        crate::endpoint::Endpoint::parse(&self.url).map(|_| ())
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

/// How requests reach the endpoint.
#[derive(Debug)]
enum Transport {
    /// HTTP/1.1: connections driven by the attempts themselves ([`h1`]).
    H1(h1::Pool),
    /// HTTP/2: hyper's client (one connection multiplexes every request).
    H2(Client<Connector, Full<Bytes>>),
}

/// One request: its headers (without `host` and `content-length`) and body.
struct Prepared {
    head: RequestHeaders,
    body: Bytes,
}

/// Why a request got no answer, from either transport.
struct NoAnswer {
    /// No connection could be made.
    connect: bool,
    /// A pooled connection the endpoint had closed: the request never reached the service.
    stale: bool,
    text: String,
}

/// Whether `e` is the endpoint closing a pooled connection under a request that was sent on it
/// (the request raced the server's idle close); such a request never reached the service's code.
fn stale_connection(e: &hyper_util::client::legacy::Error) -> bool {
    let reused = e
        .connect_info()
        .and_then(Uses::of)
        .is_some_and(|u| u.reused());
    if !reused {
        return false;
    }
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() || h.is_closed() {
                return true;
            }
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            if matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            ) {
                return true;
            }
        }
        src = s.source();
    }
    false
}

/// Reads `body` until its end, `deadline` or [`BODY_DRAIN`] bytes, keeping the first `keep`.
/// Returns the kept bytes and whether they are the whole body.
async fn read_body(
    mut body: hyper::body::Incoming,
    deadline: tokio::time::Instant,
    keep: usize,
) -> (Bytes, bool) {
    use hyper::body::Body as _;
    if body.is_end_stream() {
        // No body (`content-length: 0`, 204): no timer needed.
        return (Bytes::new(), true);
    }
    let mut kept = BytesMut::new();
    let mut total = 0usize;
    let read = tokio::time::timeout_at(deadline, async {
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            if let Ok(data) = frame.into_data() {
                total += data.len();
                let room = keep.saturating_sub(kept.len());
                kept.extend_from_slice(&data[..data.len().min(room)]);
                if total > BODY_DRAIN {
                    return false;
                }
            }
        }
        true
    })
    .await;
    let ended = matches!(read, Ok(true));
    (kept.freeze(), ended && total <= keep)
}

impl HttpHandler {
    /// Builds the handler (no connection is made yet).
    pub fn new(config: HttpConfig, router: SessionRouter) -> Result<Self, HttpSetupError> {
        let endpoint = crate::endpoint::Endpoint::parse(&config.url)?;
        let https = endpoint.uri.scheme_str() == Some("https");
        let files = TlsFiles {
            ca_file: config.ca_file.as_deref(),
            client_cert: config.client_cert.as_deref(),
            client_key: config.client_key.as_deref(),
            h2: config.h2c,
        };
        let tls = if https {
            Some(connect::tls_client(&files).map_err(HttpSetupError::Tls)?)
        } else {
            if files.ca_file.is_some() || files.client_cert.is_some() || files.client_key.is_some()
            {
                return Err(HttpSetupError::Tls(
                    "a CA file or client certificate is set but the URL is http://".into(),
                ));
            }
            None
        };
        let connector = Connector::new(config.timeout, tls);
        let transport = if config.h2c {
            Transport::H2(
                Client::builder(TokioExecutor::new())
                    .pool_idle_timeout(config.pool_idle_timeout)
                    .pool_timer(TokioTimer::new())
                    .http2_only(true)
                    .build(connector),
            )
        } else {
            Transport::H1(h1::Pool::new(
                connector,
                endpoint.uri.clone(),
                config.concurrency,
                config.pool_idle_timeout,
            ))
        };
        Ok(Self {
            permits: Limiter::new(Controller::new(
                config.concurrency,
                config.adaptive_concurrency,
            )),
            circuit: config.wait_while_unreachable.then(Circuit::new),
            config,
            uri: endpoint.uri,
            authorization: endpoint.authorization,
            shown_url: endpoint.shown,
            transport,
            router,
            last_unreachable_warn: AtomicU64::new(0),
            started: Instant::now(),
            request_seconds: OnceLock::new(),
            responses: (100..=599).map(|_| OnceLock::new()).collect(),
        })
    }

    /// Requests allowed in flight now (the adaptive limit, or the fixed cap).
    pub fn concurrency_limit(&self) -> usize {
        self.permits.limit()
    }

    /// The URL with its secrets masked ([`redact_url`](crate::redact_url)).
    pub fn url(&self) -> &str {
        &self.shown_url
    }

    /// Tries a TCP connection to the endpoint, for a start-up warning (the handler itself keeps
    /// retrying; nothing is skipped while the endpoint is down).
    pub async fn probe(&self) -> Result<(), std::io::Error> {
        let host = self.uri.host().unwrap_or("localhost");
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let default = if self.uri.scheme_str() == Some("https") {
            443
        } else {
            80
        };
        let port = self.uri.port_u16().unwrap_or(default);
        tokio::time::timeout(
            Duration::from_secs(5),
            tokio::net::TcpStream::connect((host, port)),
        )
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
        Ok(())
    }

    /// The request for one attempt of one record. Over HTTP/1.1 without CloudEvents (whose
    /// record headers may replace attributes), the header lines are written straight into the
    /// request's bytes; otherwise into a header map.
    fn request(&self, record: &Record, meta: &Meta<'_>) -> Prepared {
        let (body, content_type) = match self.config.body {
            HttpBody::Raw => (
                record.value.clone().unwrap_or_default(),
                "application/octet-stream",
            ),
            HttpBody::Json => (Envelope::new(record, meta).to_bytes(), "application/json"),
        };
        let kafka_headers = self.config.body == HttpBody::Raw && !record.headers.is_empty();
        match (&self.transport, &self.config.format) {
            (Transport::H1(_), HttpFormat::Plain) => {
                let mut w = Wire {
                    out: Vec::with_capacity(320 + 48 * record.headers.len()),
                    replaced: &self.config.headers,
                };
                w.put("content-type", content_type.as_bytes());
                meta_headers(&mut w, meta);
                if kafka_headers {
                    headers::kafka_headers(&mut w, record);
                }
                self.finish_wire(w.out, body)
            }
            (_, format) => {
                let mut h =
                    HeaderMap::with_capacity(12 + record.headers.len() + self.config.headers.len());
                h.insert(
                    hyper::header::CONTENT_TYPE,
                    HeaderValue::from_static(content_type),
                );
                meta_headers(&mut h, meta);
                if kafka_headers {
                    headers::kafka_headers(&mut h, record);
                }
                if let HttpFormat::CloudEvents(ce) = format {
                    ce.headers(&mut h, record, meta);
                }
                self.finish(h, body)
            }
        }
    }

    /// [`finish`](Self::finish) for header lines already written: the URL's credentials, the
    /// configured extra headers (orderly's headers of those names were left out) and the
    /// signature.
    fn finish_wire(&self, mut out: Vec<u8>, body: Bytes) -> Prepared {
        let line = |out: &mut Vec<u8>, name: &[u8], value: &[u8]| {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        };
        let signed = self.config.signing_key.is_some();
        if let Some(a) = &self.authorization {
            if !self
                .config
                .headers
                .iter()
                .any(|x| x.name == hyper::header::AUTHORIZATION)
            {
                line(&mut out, b"authorization", a.as_bytes());
            }
        }
        for x in &self.config.headers {
            if !(signed && x.name.as_str() == "orderly-signature") {
                line(&mut out, x.name.as_str().as_bytes(), x.value.as_bytes());
            }
        }
        if let Some(k) = &self.config.signing_key {
            line(
                &mut out,
                b"orderly-signature",
                k.signature_now(&body).as_bytes(),
            );
        }
        Prepared {
            head: RequestHeaders::Lines(out),
            body,
        }
    }

    /// A POST of `body` to the URL with the headers `h` plus the configured extra headers and
    /// the signature: the part of a request that does not depend on what it carries.
    fn finish(&self, mut h: HeaderMap, body: Bytes) -> Prepared {
        if let Some(a) = &self.authorization {
            h.insert(hyper::header::AUTHORIZATION, a.clone());
        }
        let mut replaced: Vec<&HeaderName> = Vec::new();
        for x in &self.config.headers {
            // The first value for a name replaces orderly's; later ones are added.
            if replaced.contains(&&x.name) {
                h.append(x.name.clone(), x.value.clone());
            } else {
                h.insert(x.name.clone(), x.value.clone());
                replaced.push(&x.name);
            }
        }
        if let Some(k) = &self.config.signing_key {
            k.sign(&mut h, &body);
        }
        Prepared {
            head: RequestHeaders::Map(h),
            body,
        }
    }

    /// Sends one request and reads its answer: the status and headers before `deadline` (an
    /// `Err` when it passes), the body up to `deadline` (cut short, `complete` is false).
    async fn exchange(
        &self,
        p: Prepared,
        deadline: tokio::time::Instant,
    ) -> Result<Result<Answer, NoAnswer>, tokio::time::error::Elapsed> {
        match &self.transport {
            Transport::H1(pool) => {
                let head =
                    match tokio::time::timeout_at(deadline, pool.send(&p.head, &p.body)).await? {
                        Ok(head) => head,
                        Err(f) => {
                            return Ok(Err(NoAnswer {
                                connect: matches!(f, h1::Failure::Connect(_)),
                                stale: matches!(f, h1::Failure::Stale(_)),
                                text: f.to_string(),
                            }));
                        }
                    };
                let h1::Head {
                    status,
                    headers,
                    rest,
                } = head;
                let keep = if self.body_matters(&headers) {
                    BODY_DRAIN
                } else {
                    BODY_KEEP
                };
                let (body, complete) = pool.body(rest, deadline, keep, BODY_DRAIN).await;
                Ok(Ok(Answer {
                    status,
                    headers,
                    body,
                    complete,
                }))
            }
            Transport::H2(client) => {
                let mut req = Request::new(Full::new(p.body));
                *req.method_mut() = hyper::Method::POST;
                *req.uri_mut() = self.uri.clone();
                *req.headers_mut() = p.head.into_map();
                match tokio::time::timeout_at(deadline, client.request(req)).await? {
                    Ok(resp) => {
                        if let Some(u) = resp.extensions().get::<Uses>() {
                            u.answered();
                        }
                        let (parts, body) = resp.into_parts();
                        let keep = if self.body_matters(&parts.headers) {
                            BODY_DRAIN
                        } else {
                            BODY_KEEP
                        };
                        let (body, complete) = read_body(body, deadline, keep).await;
                        Ok(Ok(Answer {
                            status: parts.status,
                            headers: parts.headers,
                            body,
                            complete,
                        }))
                    }
                    Err(e) => Ok(Err(NoAnswer {
                        connect: e.is_connect(),
                        stale: stale_connection(&e),
                        text: error_text(&e),
                    })),
                }
            }
        }
    }

    /// Sends the request `build` makes (again for each try): waits for a permit, holds the
    /// attempt while the endpoint as a whole is down (the circuit, when configured), sends again
    /// at once when a pooled connection turns out closed, and reads the answer within the
    /// timeout. An `Err` is the transient failure of the attempt (timeout, connection error).
    async fn send(&self, mut build: impl FnMut() -> Prepared) -> Result<Answer, HandlerError> {
        let mut resends = 0;
        loop {
            let pass = match &self.circuit {
                Some(c) => c.admit().await,
                None => Pass::Normal,
            };
            let mut guard = ProbeGuard {
                circuit: self.circuit.as_ref().filter(|_| pass == Pass::Probe),
            };
            let req = build();
            let mut permit = self
                .permits
                .acquire()
                .await
                .map_err(|_| HandlerError::Transient("handler closed".into()))?;
            let t0 = Instant::now();
            let deadline = tokio::time::Instant::now() + self.config.timeout;
            let answer = self.exchange(req, deadline).await;
            let rtt = t0.elapsed();
            // The limit learns from answers and timeouts (load shedding, 429 and 503, lowers
            // it); a connection error says nothing about the endpoint's queue.
            match &answer {
                Ok(Ok(a)) if matches!(a.status.as_u16(), 429 | 503) => permit.overloaded(),
                Ok(Ok(_)) => permit.sample(rtt),
                Err(_) => permit.sample(self.config.timeout),
                Ok(Err(_)) => {}
            }
            drop(permit);
            self.request_seconds
                .get_or_init(|| metrics::histogram!("orderly_http_request_seconds"))
                .record(rtt.as_secs_f64());
            match answer {
                Ok(Ok(a)) => {
                    guard.answered();
                    self.responses(a.status).increment(1);
                    if let Some(c) = &self.circuit {
                        let retried = self.config.classes.retries(a.status);
                        if retried {
                            if let Some(w) = retry_after(&a.headers, SystemTime::now()) {
                                // The service asked its client to slow down: every request waits.
                                c.hold(
                                    tokio::time::Instant::now()
                                        + w.min(self.config.max_retry_after),
                                );
                            }
                        }
                        if retried && matches!(a.status.as_u16(), 502..=504) {
                            if c.on_endpoint_failure(false, pass) {
                                // The endpoint is down: this attempt is held, not failed.
                                continue;
                            }
                        } else {
                            c.on_answer();
                        }
                    }
                    return Ok(a);
                }
                Err(_) => {
                    return Err(HandlerError::Transient(format!(
                        "HTTP request timed out after {:?}",
                        self.config.timeout
                    )));
                }
                Ok(Err(e)) if e.stale && resends < STALE_RESENDS => {
                    // The request never reached the service: send it again now, on a fresh
                    // connection (the closed one has left the pool).
                    resends += 1;
                    tracing::debug!(error = %e.text, "pooled connection closed by the endpoint; request sent again");
                }
                Ok(Err(e)) if e.connect && self.circuit.is_some() => {
                    guard.answered();
                    if let Some(c) = &self.circuit {
                        c.on_endpoint_failure(true, pass);
                    }
                    self.warn_unreachable(&e.text);
                }
                Ok(Err(e)) => {
                    return Err(HandlerError::Transient(format!(
                        "HTTP request failed: {}",
                        e.text
                    )));
                }
            }
        }
    }

    /// The outcome of an answer to one record: its status class, and for a transient one the
    /// `Retry-After` waited out here.
    async fn outcome(&self, answer: &Answer) -> Result<(), HandlerError> {
        let location = answer
            .headers
            .get(hyper::header::LOCATION)
            .map(HeaderValue::as_bytes);
        let outcome = self
            .config
            .classes
            .classify(answer.status, location, &answer.body);
        if matches!(outcome, Err(HandlerError::Transient(_))) {
            if let Some(wait) = retry_after(&answer.headers, SystemTime::now()) {
                tokio::time::sleep(wait.min(self.config.max_retry_after)).await;
            }
        }
        outcome
    }

    /// Whether a response's body is read whole (up to [`BODY_DRAIN`]): it may be a reply or a
    /// batch answer (JSON).
    fn body_matters(&self, h: &HeaderMap) -> bool {
        self.config.reply_with_body
            || h.contains_key(replies::TOPIC_HEADER)
            || h.get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("json"))
    }

    /// The replies a 2xx answer to one record carries (see [`HttpHandler`]). A body that
    /// cannot be read whole or parsed is a permanent error: the record is dead-lettered rather
    /// than its replies dropped.
    fn replies(&self, answer: &Answer) -> Result<Vec<Reply>, HandlerError> {
        let h = &answer.headers;
        let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let json = h
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(replies::CONTENT_TYPE));
        let topic = text(replies::TOPIC_HEADER);
        let body_reply =
            topic.is_some() || (self.config.reply_with_body && !answer.body.is_empty());
        if !json && !body_reply {
            return Ok(Vec::new());
        }
        if !answer.complete {
            return Err(HandlerError::Permanent(format!(
                "HTTP {}: the reply body is larger than {BODY_DRAIN} bytes or was not read to its end",
                answer.status
            )));
        }
        if json {
            return replies::parse(&answer.body)
                .map_err(|e| HandlerError::Permanent(format!("HTTP {}: {e}", answer.status)));
        }
        let mut reply = Reply::new(answer.body.clone());
        reply.topic = topic.filter(|t| !t.is_empty());
        reply.key = text(replies::KEY_HEADER).map(Bytes::from);
        Ok(vec![reply])
    }

    /// The response counter for `status`, resolved once per status code (a label lookup per
    /// request would cost a hash and an allocation in the recorder).
    fn responses(&self, status: StatusCode) -> &metrics::Counter {
        let code = status.as_u16();
        let slot = usize::from(code.saturating_sub(100)).min(self.responses.len() - 1);
        self.responses[slot].get_or_init(|| {
            metrics::counter!("orderly_http_responses_total", "status" => status.as_str().to_owned())
        })
    }

    fn warn_unreachable(&self, e: &dyn std::fmt::Display) {
        // At most one warning every 10 s, however many records are waiting.
        let now = self.started.elapsed().as_secs() + 10;
        let last = self.last_unreachable_warn.load(Ordering::Relaxed);
        if now >= last + 10
            && self
                .last_unreachable_warn
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(url = %self.shown_url, error = %e, "handler endpoint unreachable; records wait and are retried");
        }
    }
}

/// The `orderly-*` metadata headers and `traceparent` of one record.
fn meta_headers(h: &mut impl HeaderOut, meta: &Meta<'_>) {
    let topic = meta.topic.as_bytes();
    h.put(
        "orderly-topic",
        if headers::visible(topic) {
            topic
        } else {
            b"invalid-topic-name"
        },
    );
    h.put_num("orderly-partition", meta.partition);
    h.put_num("orderly-offset", meta.offset);
    h.put_num("orderly-attempt", meta.attempt);
    h.put_num("orderly-timestamp", meta.timestamp_ms);
    if let Some(s) = &meta.session {
        put_text(h, "orderly-session", "orderly-session-encoding", s);
    }
    if let Some(k) = &meta.key {
        put_text(h, "orderly-key", "orderly-key-encoding", k);
    }
    if headers::visible(meta.traceparent.as_bytes()) {
        h.put("traceparent", meta.traceparent.as_bytes());
    }
}

/// A metadata value: ASCII text as is, anything else base64 with `<name>-encoding: base64`.
fn put_text(h: &mut impl HeaderOut, name: &str, encoding: &str, t: &Text<'_>) {
    if t.base64 || !t.text.bytes().all(|c| (b' '..=b'~').contains(&c)) {
        // Binary, or text HTTP cannot carry as a visible-ASCII header value: send it base64.
        use base64::Engine as _;
        if t.base64 {
            h.put(name, t.text.as_bytes());
        } else {
            let enc = base64::engine::general_purpose::STANDARD.encode(t.text.as_bytes());
            h.put(name, enc.as_bytes());
        }
        h.put(encoding, b"base64");
    } else {
        h.put(name, t.text.as_bytes());
    }
}

/// Gives a probe back to the circuit if its attempt ends without an answer (timed out,
/// cancelled), so another request may probe.
struct ProbeGuard<'a> {
    circuit: Option<&'a Circuit>,
}

impl ProbeGuard<'_> {
    /// The probe got its answer; the circuit was told.
    fn answered(&mut self) {
        self.circuit = None;
    }
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.circuit {
            c.probe_abandoned();
        }
    }
}

impl HttpHandler {
    /// The request for a batch: a JSON array of the records' envelopes (as `--http-body json`
    /// sends one), with headers naming the session, the batch size and its first and last
    /// offsets (plus the configured extra headers and the signature, as for one record).
    fn batch_request(&self, records: &[&Record], metas: &[Meta<'_>]) -> Prepared {
        let mut body = Vec::with_capacity(
            records
                .iter()
                .zip(metas)
                .map(|(r, m)| Envelope::size_hint_of(r, m))
                .sum::<usize>()
                + 2,
        );
        body.push(b'[');
        for (i, (r, m)) in records.iter().zip(metas).enumerate() {
            if i > 0 {
                body.push(b',');
            }
            // Serializing plain strings and numbers cannot fail.
            if serde_json::to_writer(&mut body, &Envelope::new(r, m)).is_err() {
                body.truncate(1);
                break;
            }
        }
        body.push(b']');
        let body = Bytes::from(body);
        let (first, last) = (&metas[0], &metas[metas.len() - 1]);
        match &self.transport {
            Transport::H1(_) => {
                let mut w = Wire {
                    out: Vec::with_capacity(384),
                    replaced: &self.config.headers,
                };
                batch_headers(&mut w, records.len(), first, last);
                self.finish_wire(w.out, body)
            }
            Transport::H2(_) => {
                let mut h = HeaderMap::with_capacity(10 + self.config.headers.len());
                batch_headers(&mut h, records.len(), first, last);
                self.finish(h, body)
            }
        }
    }
}

/// The headers of a batch request: its content type, where it comes from, its size and offsets,
/// the first record's attempt, session and `traceparent`.
fn batch_headers(h: &mut impl HeaderOut, n: usize, first: &Meta<'_>, last: &Meta<'_>) {
    h.put("content-type", b"application/json");
    let topic = first.topic.as_bytes();
    h.put(
        "orderly-topic",
        if headers::visible(topic) {
            topic
        } else {
            b"invalid-topic-name"
        },
    );
    h.put_num("orderly-partition", first.partition);
    h.put_num("orderly-batch-size", n);
    h.put_num("orderly-first-offset", first.offset);
    h.put_num("orderly-last-offset", last.offset);
    h.put_num("orderly-attempt", first.attempt);
    if let Some(s) = &first.session {
        put_text(h, "orderly-session", "orderly-session-encoding", s);
    }
    if headers::visible(first.traceparent.as_bytes()) {
        h.put("traceparent", first.traceparent.as_bytes());
    }
}

impl Handler for HttpHandler {
    fn available(&self) -> bool {
        self.circuit.as_ref().is_none_or(Circuit::available)
    }

    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        self.handle_replying(record, attempt).await.map(drop)
    }

    async fn handle_replying(
        &self,
        record: &Record,
        attempt: Attempt,
    ) -> Result<Vec<Reply>, HandlerError> {
        let meta = Meta::of(record, attempt, &self.router)?;
        let answer = self.send(|| self.request(record, &meta)).await?;
        self.outcome(&answer).await?;
        self.replies(&answer)
    }

    async fn handle_batch(&self, records: &[&Record], attempt: Attempt) -> BatchOutcome {
        self.handle_batch_replying(records, attempt).await.outcome
    }

    /// One request for the whole batch: a JSON array of the records' envelopes with the
    /// headers `orderly-batch-size`, `orderly-first-offset` and `orderly-last-offset`. 2xx: the
    /// body may name what is done (see the README's batch contract); the retried classes (408/425/429/5xx by default), timeouts and
    /// connection failures: the whole batch is retried; a dead-lettering status cannot name the
    /// record at fault, so the records are sent again one per request within this call, each
    /// getting its own verdict. Replies come in the answer's `replies`, each naming the
    /// `offset` of its record (see [`crate::replies`] and the README).
    async fn handle_batch_replying(&self, records: &[&Record], attempt: Attempt) -> BatchReplies {
        let mut metas = Vec::with_capacity(records.len());
        for (i, r) in records.iter().enumerate() {
            let at = if i == 0 { attempt } else { Attempt::FIRST };
            match Meta::of(r, at, &self.router) {
                Ok(m) => metas.push(m),
                Err(e) => {
                    // The records before it go on their own; this one gets the error.
                    return self.one_by_one(&records[..i], attempt, Some(e)).await;
                }
            }
        }
        let answer = match self.send(|| self.batch_request(records, &metas)).await {
            Ok(a) => a,
            Err(e) => return BatchOutcome::failed(e).into(),
        };
        match self.outcome(&answer).await {
            Ok(()) if !answer.complete => BatchOutcome::failed(HandlerError::Permanent(format!(
                "HTTP {}: the batch answer is larger than {BODY_DRAIN} bytes or was not read to its end",
                answer.status
            )))
            .into(),
            Ok(()) => batch_answer(&answer.body, records, Answerer::Http),
            Err(e @ HandlerError::Transient(_)) => BatchOutcome::failed(e).into(),
            Err(HandlerError::Permanent(_)) => self.one_by_one(records, attempt, None).await,
        }
    }
}

impl HttpHandler {
    /// Sends `records` one per request, stopping at the first failure; `then`: the error of the
    /// record after them.
    async fn one_by_one(
        &self,
        records: &[&Record],
        attempt: Attempt,
        then: Option<HandlerError>,
    ) -> BatchReplies {
        let mut replies = Vec::with_capacity(records.len());
        for (i, r) in records.iter().enumerate() {
            let at = if i == 0 { attempt } else { Attempt::FIRST };
            match self.handle_replying(r, at).await {
                Ok(rs) => replies.push(rs),
                Err(e) => {
                    return BatchReplies {
                        outcome: BatchOutcome {
                            done: i,
                            error: Some(e),
                        },
                        replies,
                    };
                }
            }
        }
        let outcome = match then {
            Some(e) => BatchOutcome {
                done: records.len(),
                error: Some(e),
            },
            None => BatchOutcome::all(records.len()),
        };
        BatchReplies { outcome, replies }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked() {
        let r = SessionRouter::default();
        assert!(HttpHandler::new(HttpConfig::new("https://x/"), r.clone()).is_ok());
        assert!(HttpHandler::new(HttpConfig::new("ftp://x/"), r.clone()).is_err());
        assert!(HttpHandler::new(HttpConfig::new("nope"), r.clone()).is_err());
        assert!(HttpHandler::new(HttpConfig::new("http://127.0.0.1:1/x"), r).is_ok());
    }
}
