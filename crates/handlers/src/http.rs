//! `HttpHandler`: each record is POSTed to a URL (keep-alive pool, a cap on requests in flight, HTTP/1.1 or h2c).

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use orderly_engine::{Attempt, Handler, HandlerError, Record};
use tokio::sync::Semaphore;

use crate::meta::{Envelope, Meta, snippet};
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
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The URL records are POSTed to (`http://`; TLS is not offered here).
    pub url: String,
    /// Body format. Default raw value bytes.
    pub body: HttpBody,
    /// Requests in flight at most. Default 256.
    pub concurrency: usize,
    /// Limit for one request (connect, send, response). Hitting it is transient. Default 30 s.
    pub timeout: Duration,
    /// Speak HTTP/2 without TLS (prior knowledge, "h2c") instead of HTTP/1.1. Default false.
    pub h2c: bool,
    /// While the endpoint refuses connections, wait (with backoff, not counted as an attempt)
    /// instead of failing the attempt: records wait, nothing is dead-lettered because the
    /// service is down. Default true.
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
/// * 408, 425, 429, 5xx, connection errors and timeouts: transient; a `Retry-After` (seconds)
///   is honoured as the least delay before the next attempt (the attempt waits it out before
///   reporting, so the session's next try cannot come earlier).
/// * Any other status: permanent; the reason holds the status and the first 1 KiB of the body.
///
/// Request headers: `orderly-topic`, `orderly-partition`, `orderly-offset`, `orderly-session`,
/// `orderly-attempt`, `orderly-timestamp`, `orderly-key` (base64 when not UTF-8, then also
/// `orderly-key-encoding: base64`), every Kafka header as `kafka-h-<name>` (header names are
/// lower-cased by HTTP; a value that is not a valid header value is sent base64 with
/// `kafka-h-<name>-encoding: base64`), and `traceparent` (the record's, or a new one).
#[derive(Debug)]
pub struct HttpHandler {
    config: HttpConfig,
    uri: Uri,
    client: Client<HttpConnector, Full<Bytes>>,
    permits: Arc<Semaphore>,
    router: SessionRouter,
    last_unreachable_warn: AtomicU64,
    started: Instant,
}

impl HttpHandler {
    /// Builds the handler (no connection is made yet).
    pub fn new(config: HttpConfig, router: SessionRouter) -> Result<Self, HttpSetupError> {
        let bad = |reason: &str| HttpSetupError::Url {
            url: config.url.clone(),
            reason: reason.to_owned(),
        };
        let uri: Uri = config.url.parse().map_err(|e| bad(&format!("{e}")))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(bad(
                    "https is not supported (no TLS client here); put the handler on http:// \
                     (e.g. localhost or a sidecar)",
                ));
            }
            _ => return Err(bad("expected http://host[:port]/path")),
        }
        if uri.host().is_none() {
            return Err(bad("no host"));
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(config.timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(config.concurrency.max(1))
            .http2_only(config.h2c)
            .build(connector);
        Ok(Self {
            permits: Arc::new(Semaphore::new(config.concurrency.max(1))),
            config,
            uri,
            client,
            router,
            last_unreachable_warn: AtomicU64::new(0),
            started: Instant::now(),
        })
    }

    /// The URL.
    pub fn url(&self) -> &str {
        &self.config.url
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

    fn request(&self, record: &Record, meta: &Meta) -> Result<Request<Full<Bytes>>, HandlerError> {
        let (body, content_type) = match self.config.body {
            HttpBody::Raw => (
                record.value.clone().unwrap_or_default(),
                "application/octet-stream",
            ),
            HttpBody::Json => (Envelope::new(record, meta).to_bytes(), "application/json"),
        };
        let mut req = Request::post(self.uri.clone())
            .header(hyper::header::CONTENT_TYPE, content_type)
            .body(Full::new(body))
            .map_err(|e| HandlerError::Permanent(format!("building the request: {e}")))?;
        let h = req.headers_mut();
        let mut put = |name: &str, value: &[u8]| {
            let Ok(n) = HeaderName::from_bytes(name.as_bytes()) else {
                return;
            };
            match HeaderValue::from_bytes(value) {
                Ok(v) => {
                    h.append(n, v);
                }
                Err(_) => {
                    use base64::Engine as _;
                    let enc = base64::engine::general_purpose::STANDARD.encode(value);
                    if let Ok(v) = HeaderValue::from_str(&enc) {
                        h.append(n, v);
                    }
                    if let Ok(n) = HeaderName::from_bytes(format!("{name}-encoding").as_bytes()) {
                        h.append(n, HeaderValue::from_static("base64"));
                    }
                }
            }
        };
        for (k, v) in meta.pairs(false) {
            put(&k, v.as_bytes());
        }
        if self.config.body == HttpBody::Raw {
            for kh in &record.headers {
                if kh.key == SESSION_HEADER {
                    continue;
                }
                let name = format!("kafka-h-{}", kh.key.to_ascii_lowercase());
                put(&name, kh.value.as_deref().unwrap_or_default());
            }
        }
        put("traceparent", meta.traceparent.as_bytes());
        Ok(req)
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
            tracing::warn!(url = %self.config.url, error = %e, "handler endpoint unreachable; records wait and are retried");
        }
    }
}

/// `Retry-After` in seconds (HTTP dates are not honoured: they need a clock agreement).
fn retry_after(h: &hyper::HeaderMap) -> Option<Duration> {
    let v = h.get(hyper::header::RETRY_AFTER)?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
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

impl Handler for HttpHandler {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        let meta = Meta::of(record, attempt, &self.router)?;
        let mut backoff = Duration::from_millis(50);
        loop {
            let req = self.request(record, &meta)?;
            let permit = self
                .permits
                .acquire()
                .await
                .map_err(|_| HandlerError::Transient("handler closed".into()))?;
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
            drop(permit);
            metrics::histogram!("orderly_http_request_seconds").record(t0.elapsed().as_secs_f64());
            match answer {
                Err(_) => {
                    return Err(HandlerError::Transient(format!(
                        "HTTP request timed out after {:?}",
                        self.config.timeout
                    )));
                }
                Ok(Err(e)) if e.is_connect() && self.config.wait_while_unreachable => {
                    self.warn_unreachable(&e);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                Ok(Err(e)) => {
                    let mut text = e.to_string();
                    if let Some(src) = std::error::Error::source(&e) {
                        text = format!("{text}: {src}");
                    }
                    return Err(HandlerError::Transient(format!(
                        "HTTP request failed: {text}"
                    )));
                }
                Ok(Ok((parts, body))) => {
                    metrics::counter!("orderly_http_responses_total", "status" => parts.status.as_str().to_owned())
                        .increment(1);
                    let outcome = classify(parts.status, &body);
                    if outcome.is_err() {
                        if let Some(wait) = retry_after(&parts.headers)
                            .filter(|_| matches!(outcome, Err(HandlerError::Transient(_))))
                        {
                            tokio::time::sleep(wait.min(self.config.max_retry_after)).await;
                        }
                    }
                    return outcome;
                }
            }
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
    fn urls_are_checked() {
        let r = SessionRouter::default();
        assert!(HttpHandler::new(HttpConfig::new("https://x/"), r.clone()).is_err());
        assert!(HttpHandler::new(HttpConfig::new("nope"), r.clone()).is_err());
        assert!(HttpHandler::new(HttpConfig::new("http://127.0.0.1:1/x"), r).is_ok());
    }
}
