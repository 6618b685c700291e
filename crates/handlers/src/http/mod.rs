//! `HttpHandler`: each record is POSTed to a URL (keep-alive pool, a cap on requests in flight, HTTP/1.1 or HTTP/2, `http://` or `https://`).

mod config;
mod connect;
mod gate;
mod h1;
mod handler;
mod headers;
mod outcome;
mod request;
mod send;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::HeaderMap;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use orderly_engine::{Attempt, BatchOutcome, BatchReplies, Handler, HandlerError, Record, Reply};

pub use self::headers::{
    CloudEvents, ExtraHeader, RESERVED_HEADERS, SIGNED_HEADERS, SigningKey, mask as mask_header,
};
pub use crate::endpoint::HttpSetupError;

pub use self::config::{HttpBody, HttpConfig, HttpFormat};
use self::h1::RequestHeaders;
use self::headers::{HeaderOut, Wire};
pub use self::outcome::{StatusClasses, StatusSet};

use self::connect::{Connector, TlsFiles, Uses, error_text};
use self::gate::{Gate, GatedBody};
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
/// A request that could not leave on a pooled connection the endpoint had just closed (not a
/// byte of it written) is sent again at once on a fresh connection, not counted as an attempt,
/// at most this many times.
const STALE_RESENDS: usize = 1;

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
/// * An outage of the whole endpoint (refused connections, connects or TLS handshakes that time
///   out, nothing but 502/503/504 among the retried statuses) holds attempts instead of failing
///   them and makes the handler unavailable ([`crate::circuit`]); the engine's attempt timeout
///   does not run while an attempt is held, nor while it waits out a `Retry-After`.
/// * The partition's ownership lapsed while the attempt waited (for the circuit, a permit, a
///   connection; a freeze of the process past the group's session timeout, say): nothing is
///   sent and the attempt is transient. It is asked right before the request is written
///   ([`orderly_engine::ownership_holds`]); neither the circuit nor the concurrency limit
///   counts it.
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

/// How requests reach the endpoint.
#[derive(Debug)]
enum Transport {
    /// HTTP/1.1: connections driven by the attempts themselves ([`h1`]).
    H1(h1::Pool),
    /// HTTP/2: hyper's client (one connection multiplexes every request).
    H2(Client<Connector, GatedBody>),
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
    /// A pooled connection the endpoint had closed before a byte of the request left: it never
    /// reached the service.
    stale: bool,
    /// The partition's ownership lapsed before the request was written: nothing was sent.
    lapsed: bool,
    text: String,
}

impl HttpHandler {
    /// Builds the handler (no connection is made yet).
    pub fn new(config: HttpConfig, router: SessionRouter) -> Result<Self, HttpSetupError> {
        let endpoint = crate::endpoint::Endpoint::parse(&config.url)?;
        config.check_headers()?;
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
        let connector = Connector::new(config.connect_timeout, config.tls_handshake_timeout, tls);
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
