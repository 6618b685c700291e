//! `HttpHandler`: each record is POSTed to a URL (keep-alive pool, a cap on requests in flight, HTTP/1.1 or h2c).

use std::str::FromStr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::HeaderMap;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use orderly_engine::{Attempt, BatchOutcome, Handler, HandlerError, Record};

use crate::circuit::{Circuit, Pass};
use crate::limit::{Controller, Limiter};
use crate::meta::{Envelope, Meta, Text, snippet};
use crate::session::{SESSION_HEADER, SessionRouter};

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

/// Settings of an [`HttpHandler`]; `HttpConfig::new(url)` gives the documented defaults.
/// `Debug` masks the URL's secrets ([`redact_url`](crate::redact_url)).
#[derive(Clone)]
pub struct HttpConfig {
    /// The URL records are POSTed to (`http://`; TLS is not offered here). Credentials in its
    /// userinfo (`http://user:password@host/`, percent-encoded) are sent as
    /// `Authorization: Basic`; logs and errors show it masked.
    pub url: String,
    /// Body format. Default raw value bytes.
    pub body: HttpBody,
    /// Requests in flight at most. Default 256.
    pub concurrency: usize,
    /// Let the number of requests in flight follow the endpoint's latency, between
    /// [`limit::FLOOR`](crate::limit::FLOOR) (8) and `concurrency`, starting at
    /// [`limit::START`](crate::limit::START) (16): it grows while the round-trip time holds and
    /// shrinks when requests only queue (see [`crate::limit`]). `false`: always `concurrency`.
    /// Default false: on the loaded 2-core machine of BENCHMARKS.md it made a local endpoint that
    /// answers at once 1.4 times faster but one with 5 ms of service time 2 times slower.
    pub adaptive_concurrency: bool,
    /// Limit for one request (connect, send, response). Hitting it is transient. Default 30 s.
    pub timeout: Duration,
    /// Speak HTTP/2 without TLS (prior knowledge, "h2c") instead of HTTP/1.1. Default false.
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
}

impl HttpConfig {
    /// Defaults for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            body: HttpBody::Raw,
            concurrency: 256,
            adaptive_concurrency: false,
            timeout: Duration::from_secs(30),
            h2c: false,
            wait_while_unreachable: true,
            max_retry_after: Duration::from_secs(300),
        }
    }
}

/// Why an [`HttpHandler`] could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpSetupError {
    /// The URL does not parse or is not `http://host[:port]/...`.
    #[error("invalid handler URL {url:?}: {reason}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
}

/// POSTs each record to a URL and maps the answer to the engine's outcome.
///
/// * 2xx: done.
/// * 408, 425, 429, 5xx, connection errors and timeouts: transient; a `Retry-After` (seconds
///   or an HTTP-date) is honoured as the least delay before the next attempt (the attempt waits it out before
///   reporting, so the session's next try cannot come earlier).
/// * Any other status: permanent; the reason holds the status and the first 1 KiB of the body.
/// * An outage of the whole endpoint (refused connections, nothing but 502/503/504) holds
///   attempts instead of failing them and makes the handler unavailable ([`crate::circuit`]).
///
/// Request headers: `orderly-topic`, `orderly-partition`, `orderly-offset`, `orderly-session`,
/// `orderly-attempt`, `orderly-timestamp`, `orderly-key` (base64 when not UTF-8, then also
/// `orderly-key-encoding: base64`), every Kafka header as `kafka-h-<name>` (header names are
/// lower-cased by HTTP; a value that is not a valid header value is sent base64 with
/// `kafka-h-<name>-encoding: base64`), and `traceparent` (the record's, or a new one).
#[derive(Debug)]
pub struct HttpHandler {
    config: HttpConfig,
    /// Without the userinfo.
    uri: Uri,
    /// `Basic ...` from the URL's userinfo, if it has one.
    authorization: Option<HeaderValue>,
    /// The URL as logs show it.
    shown_url: String,
    client: Client<HttpConnector, Full<Bytes>>,
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

impl HttpHandler {
    /// Builds the handler (no connection is made yet).
    pub fn new(config: HttpConfig, router: SessionRouter) -> Result<Self, HttpSetupError> {
        let endpoint = crate::endpoint::Endpoint::parse(&config.url)?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(config.timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(config.concurrency.max(1))
            .http2_only(config.h2c)
            .build(connector);
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
            client,
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
        let port = self.uri.port_u16().unwrap_or(80);
        tokio::time::timeout(
            Duration::from_secs(5),
            tokio::net::TcpStream::connect((host, port)),
        )
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
        Ok(())
    }

    /// The request for one attempt. Built for the hot path: the header map is sized once, the
    /// fixed header names are static, values that are already `Bytes` (the key, Kafka header
    /// values) are shared rather than copied when they are valid header values.
    fn request(&self, record: &Record, meta: &Meta) -> Request<Full<Bytes>> {
        let (body, content_type) = match self.config.body {
            HttpBody::Raw => (
                record.value.clone().unwrap_or_default(),
                "application/octet-stream",
            ),
            HttpBody::Json => (Envelope::new(record, meta).to_bytes(), "application/json"),
        };
        let kafka_headers = if self.config.body == HttpBody::Raw {
            record.headers.len()
        } else {
            0
        };
        let mut h = HeaderMap::with_capacity(12 + kafka_headers);
        h.insert(
            hyper::header::CONTENT_TYPE,
            HeaderValue::from_static(content_type),
        );
        h.insert(
            HeaderName::from_static("orderly-topic"),
            HeaderValue::from_str(&meta.topic)
                .unwrap_or_else(|_| HeaderValue::from_static("invalid-topic-name")),
        );
        h.insert(
            HeaderName::from_static("orderly-partition"),
            HeaderValue::from(meta.partition),
        );
        h.insert(
            HeaderName::from_static("orderly-offset"),
            HeaderValue::from(meta.offset),
        );
        h.insert(
            HeaderName::from_static("orderly-attempt"),
            HeaderValue::from(meta.attempt),
        );
        h.insert(
            HeaderName::from_static("orderly-timestamp"),
            HeaderValue::from(meta.timestamp_ms),
        );
        if let Some(s) = &meta.session {
            put_text(
                &mut h,
                HeaderName::from_static("orderly-session"),
                HeaderName::from_static("orderly-session-encoding"),
                s,
            );
        }
        if let Some(k) = &meta.key {
            put_text(
                &mut h,
                HeaderName::from_static("orderly-key"),
                HeaderName::from_static("orderly-key-encoding"),
                k,
            );
        }
        if kafka_headers > 0 {
            let mut name = Vec::with_capacity(32);
            for kh in &record.headers {
                if kh.key == SESSION_HEADER {
                    continue;
                }
                name.clear();
                name.extend_from_slice(b"kafka-h-");
                name.extend_from_slice(kh.key.as_bytes());
                // `from_bytes` lower-cases; a name HTTP cannot carry is left out.
                let Ok(n) = HeaderName::from_bytes(&name) else {
                    continue;
                };
                let value = kh.value.clone().unwrap_or_default();
                match HeaderValue::from_maybe_shared(value.clone()) {
                    Ok(v) => {
                        h.append(n, v);
                    }
                    Err(_) => {
                        use base64::Engine as _;
                        let enc = base64::engine::general_purpose::STANDARD.encode(&value);
                        if let Ok(v) = HeaderValue::from_str(&enc) {
                            h.append(n, v);
                        }
                        name.extend_from_slice(b"-encoding");
                        if let Ok(n) = HeaderName::from_bytes(&name) {
                            h.append(n, HeaderValue::from_static("base64"));
                        }
                    }
                }
            }
        }
        if let Ok(v) = HeaderValue::from_str(&meta.traceparent) {
            h.insert(HeaderName::from_static("traceparent"), v);
        }
        if let Some(a) = &self.authorization {
            h.insert(hyper::header::AUTHORIZATION, a.clone());
        }
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = hyper::Method::POST;
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = h;
        req
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

/// A metadata value: UTF-8 text as is, base64 text with `<name>-encoding: base64`.
fn put_text(h: &mut HeaderMap, name: HeaderName, encoding: HeaderName, t: &Text) {
    match HeaderValue::from_str(&t.text) {
        Ok(v) => {
            h.insert(name, v);
            if t.base64 {
                h.insert(encoding, HeaderValue::from_static("base64"));
            }
        }
        Err(_) => {
            // Text HTTP cannot carry as a header value (control characters): send it base64.
            use base64::Engine as _;
            let enc = base64::engine::general_purpose::STANDARD.encode(t.text.as_bytes());
            if let Ok(v) = HeaderValue::from_str(&enc) {
                h.insert(name, v);
                h.insert(encoding, HeaderValue::from_static("base64"));
            }
        }
    }
}

/// `Retry-After` as a delay from `now`: delay-seconds, or an HTTP-date (RFC 9110 section 10.2.3:
/// IMF-fixdate, or the obsolete RFC 850 and asctime forms), which counts from this host's clock; a
/// date in the past means no wait. `None` when the header is absent or neither form.
fn retry_after(h: &hyper::HeaderMap, now: SystemTime) -> Option<Duration> {
    let v = h.get(hyper::header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The outcome of a status code.
fn classify(status: StatusCode, body: &[u8]) -> Result<(), HandlerError> {
    let code = status.as_u16();
    if status.is_success() {
        Ok(())
    } else if matches!(code, 408 | 425 | 429) || status.is_server_error() {
        Err(HandlerError::Transient(format!(
            "HTTP {code}: {}",
            snippet(body, 1024)
        )))
    } else {
        Err(HandlerError::Permanent(format!(
            "HTTP {code}: {}",
            snippet(body, 1024)
        )))
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

/// How one exchange with the endpoint ended.
enum Exchange {
    /// An answer the circuit let through (any status but the endpoint-wide failures it holds),
    /// with its body's first 64 KiB.
    Answer(hyper::http::response::Parts, Bytes),
    /// No answer: a timeout or a connection failure, as a transient error.
    Failed(HandlerError),
}

impl HttpHandler {
    /// Sends the request `build` makes (again, while the circuit holds it) through the circuit,
    /// the in-flight cap and the timeout. A transient answer's `Retry-After` is waited out here,
    /// so it is the least delay before the record's next attempt.
    async fn exchange(&self, build: impl Fn() -> Request<Full<Bytes>>) -> Exchange {
        loop {
            let pass = match &self.circuit {
                Some(c) => c.admit().await,
                None => Pass::Normal,
            };
            let mut guard = ProbeGuard {
                circuit: self.circuit.as_ref().filter(|_| pass == Pass::Probe),
            };
            let req = build();
            let Ok(mut permit) = self.permits.acquire().await else {
                return Exchange::Failed(HandlerError::Transient("handler closed".into()));
            };
            let t0 = Instant::now();
            let answer = tokio::time::timeout(self.config.timeout, async {
                let resp = self.client.request(req).await?;
                let (parts, body) = resp.into_parts();
                // The body is read to its end so the connection goes back to the pool; only the
                // first 64 KiB are kept (the reason text uses 1 KiB).
                let bytes = Limited::new(body, 64 << 10)
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                Ok::<_, hyper_util::client::legacy::Error>((parts, bytes))
            })
            .await;
            let rtt = t0.elapsed();
            // The limit learns from answers (any status) and timeouts; a connection error says
            // nothing about the endpoint's queue.
            match &answer {
                Ok(Ok(_)) => permit.sample(rtt),
                Err(_) => permit.sample(self.config.timeout),
                Ok(Err(_)) => {}
            }
            drop(permit);
            self.request_seconds
                .get_or_init(|| metrics::histogram!("orderly_http_request_seconds"))
                .record(rtt.as_secs_f64());
            match answer {
                Err(_) => {
                    return Exchange::Failed(HandlerError::Transient(format!(
                        "HTTP request timed out after {:?}",
                        self.config.timeout
                    )));
                }
                Ok(Err(e)) if e.is_connect() && self.circuit.is_some() => {
                    guard.answered();
                    if let Some(c) = &self.circuit {
                        c.on_endpoint_failure(true, pass);
                    }
                    self.warn_unreachable(&e);
                }
                Ok(Err(e)) => {
                    let mut text = e.to_string();
                    if let Some(src) = std::error::Error::source(&e) {
                        text = format!("{text}: {src}");
                    }
                    return Exchange::Failed(HandlerError::Transient(format!(
                        "HTTP request failed: {text}"
                    )));
                }
                Ok(Ok((parts, body))) => {
                    guard.answered();
                    self.responses(parts.status).increment(1);
                    let transient =
                        matches!(classify(parts.status, b""), Err(HandlerError::Transient(_)));
                    let wait = retry_after(&parts.headers, SystemTime::now())
                        .filter(|_| transient)
                        .map(|w| w.min(self.config.max_retry_after));
                    if let Some(c) = &self.circuit {
                        if let Some(w) = wait {
                            // The service asked its client to slow down: every request waits.
                            c.hold(tokio::time::Instant::now() + w);
                        }
                        if matches!(parts.status.as_u16(), 502..=504) {
                            if c.on_endpoint_failure(false, pass) {
                                // The endpoint is down: this attempt is held, not failed.
                                continue;
                            }
                        } else {
                            c.on_answer();
                        }
                    }
                    if let Some(w) = wait {
                        tokio::time::sleep(w).await;
                    }
                    return Exchange::Answer(parts, body);
                }
            }
        }
    }

    /// The request for a batch: a JSON array of the records' envelopes (as `--http-body json`
    /// sends one), with headers naming the session, the batch size and its first and last
    /// offsets.
    fn batch_request(&self, records: &[&Record], metas: &[Meta]) -> Request<Full<Bytes>> {
        let envelopes: Vec<Envelope<'_>> = records
            .iter()
            .zip(metas)
            .map(|(r, m)| Envelope::new(r, m))
            .collect();
        let body = serde_json::to_vec(&envelopes).unwrap_or_default();
        let (first, last) = (&metas[0], &metas[metas.len() - 1]);
        let mut h = HeaderMap::with_capacity(10);
        h.insert(
            hyper::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(
            HeaderName::from_static("orderly-topic"),
            HeaderValue::from_str(&first.topic)
                .unwrap_or_else(|_| HeaderValue::from_static("invalid-topic-name")),
        );
        h.insert(
            HeaderName::from_static("orderly-partition"),
            HeaderValue::from(first.partition),
        );
        h.insert(
            HeaderName::from_static("orderly-batch-size"),
            HeaderValue::from(records.len()),
        );
        h.insert(
            HeaderName::from_static("orderly-first-offset"),
            HeaderValue::from(first.offset),
        );
        h.insert(
            HeaderName::from_static("orderly-last-offset"),
            HeaderValue::from(last.offset),
        );
        h.insert(
            HeaderName::from_static("orderly-attempt"),
            HeaderValue::from(first.attempt),
        );
        if let Some(s) = &first.session {
            put_text(
                &mut h,
                HeaderName::from_static("orderly-session"),
                HeaderName::from_static("orderly-session-encoding"),
                s,
            );
        }
        if let Ok(v) = HeaderValue::from_str(&first.traceparent) {
            h.insert(HeaderName::from_static("traceparent"), v);
        }
        let mut req = Request::new(Full::new(Bytes::from(body)));
        *req.method_mut() = hyper::Method::POST;
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = h;
        req
    }
}

/// The answer to a batch that a 2xx body may carry (see [`batch_answer`]).
#[derive(Debug, serde::Deserialize)]
struct BatchAnswer {
    /// Records from the front that are done.
    done: Option<usize>,
    /// One result per record from the front (`ok`, `retry`, `fail`); the first that is not `ok`
    /// decides the next record.
    results: Option<Vec<String>>,
    /// The next record's result when `done` is given: `retry` (default) or `fail`.
    result: Option<String>,
    /// Why, for the dead letter or the retry log.
    reason: Option<String>,
}

/// Maps a 2xx answer to a batch of `n` records: no body (or a body that is no JSON object with
/// `done` or `results`) means all done; `{"done": N}` the first N done and the next retried;
/// `{"done": N, "result": "fail", "reason": ".."}` the first N done and the next dead-lettered;
/// `{"results": ["ok", "ok", "retry", ..]}` one result per record, the first that is not `ok`
/// deciding.
fn batch_answer(body: &[u8], n: usize) -> BatchOutcome {
    let Ok(a) = serde_json::from_slice::<BatchAnswer>(body) else {
        return BatchOutcome::all(n);
    };
    let reason = a.reason.unwrap_or_default();
    let error = |result: &str| {
        let text = format!("HTTP 2xx: the endpoint answered {result}: {reason}");
        match result {
            "fail" | "dead-letter" | "permanent" => HandlerError::Permanent(text),
            _ => HandlerError::Transient(text),
        }
    };
    if let Some(results) = a.results {
        return match results.iter().position(|r| r != "ok") {
            Some(i) if i < n => BatchOutcome {
                done: i,
                error: Some(error(&results[i])),
            },
            // Fewer results than records: the rest are retried.
            None if results.len() < n => BatchOutcome {
                done: results.len(),
                error: None,
            },
            _ => BatchOutcome::all(n),
        };
    }
    match a.done {
        Some(d) if d < n => BatchOutcome {
            done: d,
            error: Some(error(a.result.as_deref().unwrap_or("retry"))),
        },
        _ => BatchOutcome::all(n),
    }
}

impl Handler for HttpHandler {
    fn available(&self) -> bool {
        self.circuit.as_ref().is_none_or(Circuit::available)
    }

    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        let meta = Meta::of(record, attempt, &self.router)?;
        match self.exchange(|| self.request(record, &meta)).await {
            Exchange::Failed(e) => Err(e),
            Exchange::Answer(parts, body) => classify(parts.status, &body),
        }
    }

    /// One request for the whole batch (see [`HttpHandler::batch_request`]). 2xx: per
    /// [`batch_answer`]; 408/425/429/5xx, timeouts and connection failures: the whole batch is
    /// retried; any other status cannot name the record at fault, so the records are sent again
    /// one per request within this call, each getting its own verdict.
    async fn handle_batch(&self, records: &[&Record], attempt: Attempt) -> BatchOutcome {
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
        match self.exchange(|| self.batch_request(records, &metas)).await {
            Exchange::Failed(e) => BatchOutcome::failed(e),
            Exchange::Answer(parts, body) => match classify(parts.status, &body) {
                Ok(()) => batch_answer(&body, records.len()),
                Err(e @ HandlerError::Transient(_)) => BatchOutcome::failed(e),
                Err(HandlerError::Permanent(_)) => self.one_by_one(records, attempt, None).await,
            },
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
    ) -> BatchOutcome {
        for (i, r) in records.iter().enumerate() {
            let at = if i == 0 { attempt } else { Attempt::FIRST };
            if let Err(e) = self.handle(r, at).await {
                return BatchOutcome {
                    done: i,
                    error: Some(e),
                };
            }
        }
        match then {
            Some(e) => BatchOutcome {
                done: records.len(),
                error: Some(e),
            },
            None => BatchOutcome::all(records.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_mapping() {
        assert!(classify(StatusCode::OK, b"").is_ok());
        assert!(classify(StatusCode::NO_CONTENT, b"").is_ok());
        for t in [408, 425, 429, 500, 503] {
            let s = StatusCode::from_u16(t).unwrap();
            assert!(
                matches!(classify(s, b"busy"), Err(HandlerError::Transient(_))),
                "{t}"
            );
        }
        for p in [400, 404, 409, 422, 301] {
            let s = StatusCode::from_u16(p).unwrap();
            assert!(
                matches!(classify(s, b"bad"), Err(HandlerError::Permanent(_))),
                "{p}"
            );
        }
        let long = vec![b'x'; 5000];
        let Err(HandlerError::Permanent(t)) = classify(StatusCode::BAD_REQUEST, &long) else {
            panic!("permanent expected");
        };
        assert_eq!(t.len(), "HTTP 400: ".len() + 1024);
    }

    #[test]
    fn retry_after_takes_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 2015-10-21 07:28:00 GMT
        let with = |v: &str| {
            let mut h = hyper::HeaderMap::new();
            h.insert(
                hyper::header::RETRY_AFTER,
                HeaderValue::from_str(v).unwrap(),
            );
            retry_after(&h, now)
        };
        assert_eq!(with("120"), Some(Duration::from_secs(120)));
        assert_eq!(with(" 3 "), Some(Duration::from_secs(3)));
        // The three date forms of RFC 9110, 90 s after `now`.
        assert_eq!(
            with("Wed, 21 Oct 2015 07:29:30 GMT"),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            with("Wednesday, 21-Oct-15 07:29:30 GMT"),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            with("Wed Oct 21 07:29:30 2015"),
            Some(Duration::from_secs(90))
        );
        // A date already past: retry without waiting.
        assert_eq!(with("Wed, 21 Oct 2015 07:27:00 GMT"), Some(Duration::ZERO));
        assert_eq!(with("soon"), None);
        assert_eq!(with("-5"), None);
        assert_eq!(retry_after(&hyper::HeaderMap::new(), now), None);
    }

    #[test]
    fn batch_answers_name_what_is_done() {
        assert_eq!(batch_answer(b"", 3), BatchOutcome::all(3));
        assert_eq!(batch_answer(b"ok", 3), BatchOutcome::all(3));
        assert_eq!(batch_answer(br#"{"done": 5}"#, 3), BatchOutcome::all(3));
        let o = batch_answer(br#"{"done": 1}"#, 3);
        assert_eq!(o.done, 1);
        assert!(matches!(o.error, Some(HandlerError::Transient(_))));
        let o = batch_answer(br#"{"done": 2, "result": "fail", "reason": "bad"}"#, 3);
        assert_eq!(o.done, 2);
        assert!(matches!(o.error, Some(HandlerError::Permanent(ref t)) if t.contains("bad")));
        let o = batch_answer(br#"{"results": ["ok", "retry", "ok"]}"#, 3);
        assert_eq!(o.done, 1);
        assert!(matches!(o.error, Some(HandlerError::Transient(_))));
        let o = batch_answer(br#"{"results": ["ok", "fail"]}"#, 3);
        assert_eq!(o.done, 1);
        assert!(matches!(o.error, Some(HandlerError::Permanent(_))));
        let o = batch_answer(br#"{"results": ["ok"]}"#, 3);
        assert_eq!((o.done, o.error), (1, None));
        assert_eq!(
            batch_answer(br#"{"results": ["ok", "ok", "ok"]}"#, 3),
            BatchOutcome::all(3)
        );
    }

    #[test]
    fn urls_are_checked() {
        let r = SessionRouter::default();
        assert!(HttpHandler::new(HttpConfig::new("https://x/"), r.clone()).is_err());
        assert!(HttpHandler::new(HttpConfig::new("nope"), r.clone()).is_err());
        assert!(HttpHandler::new(HttpConfig::new("http://127.0.0.1:1/x"), r).is_ok());
    }
}
