//! `HttpHandler` against real servers: extra headers and the request signature, configured status
//! classes, redirects not followed, CloudEvents binary mode, the pool's idle timeout and the
//! request that meets a pooled connection the server has just closed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use orderly_engine::{Attempt, Handler, HandlerError, Header, Record, TopicPartition};
use orderly_handlers::http::{CloudEvents, ExtraHeader, SigningKey, StatusClasses};
use orderly_handlers::{HttpConfig, HttpFormat, HttpHandler, SessionRouter};
use orderly_testkit::raw_http::read_request;
use tokio::io::AsyncWriteExt;

#[derive(Debug, Clone)]
struct Seen {
    headers: hyper::HeaderMap,
    body: Bytes,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// A server that answers with the status in the `kafka-h-status` header (200 without), a
/// `Location` with 3xx; returns its address, what it saw and the connections it accepted.
async fn server() -> (SocketAddr, Log, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = Log::default();
    let accepted = Arc::new(AtomicUsize::new(0));
    let (l2, a2) = (log.clone(), accepted.clone());
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            a2.fetch_add(1, Ordering::SeqCst);
            let log = l2.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let log = log.clone();
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.unwrap().to_bytes();
                        let status = parts
                            .headers
                            .get("kafka-h-status")
                            .and_then(|v| v.to_str().ok()?.parse().ok())
                            .unwrap_or(200u16);
                        log.lock().unwrap().push(Seen {
                            headers: parts.headers,
                            body,
                        });
                        let mut r = Response::new(Full::new(Bytes::from_static(b"why")));
                        *r.status_mut() = StatusCode::from_u16(status).unwrap();
                        if (300..400).contains(&status) {
                            r.headers_mut().insert(
                                "location",
                                hyper::header::HeaderValue::from_static(
                                    "https://elsewhere.example/in",
                                ),
                            );
                        }
                        Ok::<_, Infallible>(r)
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, log, accepted)
}

fn record(status: u16) -> Record {
    let mut r = Record::new(
        TopicPartition::new("orders", 3),
        42,
        Some(Bytes::from_static(b"customer-7")),
        Some(Bytes::from_static(b"{\"n\":1}")),
    );
    r.timestamp_ms = 1_700_000_000_123;
    r.headers.push(Header::new("status", status.to_string()));
    r.headers.push(Header::new("event-id", "e-42"));
    r
}

fn hv(s: &Seen, n: &str) -> Option<String> {
    s.headers.get(n).map(|v| v.to_str().unwrap().to_owned())
}

#[tokio::test]
async fn extra_headers_and_a_signature_a_service_can_verify() {
    let (addr, log, _) = server().await;
    let mut c = HttpConfig::new(format!("http://{addr}/in"));
    c.headers = vec![
        ExtraHeader::parse("Authorization: Bearer s3cret").unwrap(),
        ExtraHeader::parse("X-Tenant: blue").unwrap(),
    ];
    c.signing_key = Some(SigningKey::new(b"shared-key".to_vec()));
    assert!(!format!("{c:?}").contains("s3cret"));
    assert!(!format!("{c:?}").contains("shared-key"));
    let h = HttpHandler::new(c, SessionRouter::default()).unwrap();
    assert!(!format!("{h:?}").contains("s3cret"));
    assert_eq!(h.handle(&record(200), Attempt::FIRST).await, Ok(()));
    let seen = log.lock().unwrap()[0].clone();
    assert_eq!(hv(&seen, "authorization").as_deref(), Some("Bearer s3cret"));
    assert_eq!(hv(&seen, "x-tenant").as_deref(), Some("blue"));
    // What the README tells a service to do: HMAC-SHA256 over "<t>." + the body as received.
    let sig = hv(&seen, "orderly-signature").unwrap();
    let fields: std::collections::HashMap<&str, &str> =
        sig.split(',').filter_map(|p| p.split_once('=')).collect();
    let (t, v1) = (fields["t"], fields["v1"]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(now.abs_diff(t.parse::<u64>().unwrap()) < 300);
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"shared-key").unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(&seen.body);
    let expected: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(v1, expected);
}

#[tokio::test]
async fn configured_status_classes_and_redirects_not_followed() {
    let (addr, log, _) = server().await;
    let mut c = HttpConfig::new(format!("http://{addr}/in"));
    c.classes = StatusClasses {
        retry_on: "409,500-599".parse().unwrap(),
        dead_letter_on: "501".parse().unwrap(),
    };
    c.max_retry_after = Duration::ZERO;
    let h = HttpHandler::new(c, SessionRouter::default()).unwrap();
    let outcome = |r: Result<(), HandlerError>| match r {
        Ok(()) => "done",
        Err(e) if e.is_transient() => "retry",
        Err(_) => "dead-letter",
    };
    for (status, expected) in [
        (200, "done"),
        (409, "retry"),
        (503, "retry"),
        (501, "dead-letter"),
        (429, "dead-letter"),
        (400, "dead-letter"),
    ] {
        assert_eq!(
            outcome(h.handle(&record(status), Attempt::FIRST).await),
            expected,
            "{status}"
        );
    }
    // Defaults: a redirect is dead-lettered with a reason naming where it pointed, and the
    // request is not sent there.
    let before = log.lock().unwrap().len();
    let h = HttpHandler::new(
        HttpConfig::new(format!("http://{addr}/in")),
        SessionRouter::default(),
    )
    .unwrap();
    let Err(HandlerError::Permanent {
        message: reason, ..
    }) = h.handle(&record(307), Attempt::FIRST).await
    else {
        panic!("a redirect is permanent");
    };
    assert!(
        reason.contains("307") && reason.contains("https://elsewhere.example/in"),
        "{reason}"
    );
    assert_eq!(log.lock().unwrap().len(), before + 1);
}

#[tokio::test]
async fn cloudevents_binary_mode() {
    let (addr, log, _) = server().await;
    let mut c = HttpConfig::new(format!("http://{addr}/in"));
    c.format = HttpFormat::CloudEvents(CloudEvents::default());
    let h = HttpHandler::new(c, SessionRouter::default()).unwrap();
    assert_eq!(h.handle(&record(200), Attempt::FIRST).await, Ok(()));
    let mut no_id = record(200);
    no_id.headers = Default::default();
    no_id.key = Some(Bytes::from_static("ü 1".as_bytes()));
    assert_eq!(h.handle(&no_id, Attempt::FIRST).await, Ok(()));
    let mut ce = record(200);
    ce.headers
        .push(Header::new("ce_type", "com.example.order.created"));
    ce.headers
        .push(Header::new("content-type", "application/json"));
    assert_eq!(h.handle(&ce, Attempt::FIRST).await, Ok(()));

    let log = log.lock().unwrap();
    let s = &log[0];
    assert_eq!(hv(s, "ce-specversion").as_deref(), Some("1.0"));
    assert_eq!(hv(s, "ce-id").as_deref(), Some("e-42"));
    assert_eq!(
        hv(s, "ce-source").as_deref(),
        Some("/topics/orders/partitions/3")
    );
    assert_eq!(hv(s, "ce-type").as_deref(), Some("dev.orderly.record"));
    assert_eq!(hv(s, "ce-subject").as_deref(), Some("customer-7"));
    assert_eq!(
        hv(s, "ce-time").as_deref(),
        Some("2023-11-14T22:13:20.123Z")
    );
    assert_eq!(&s.body[..], b"{\"n\":1}");
    // Without an event id: topic/partition/offset; a session that is not ASCII is
    // percent-encoded (CloudEvents HTTP binding).
    assert_eq!(hv(&log[1], "ce-id").as_deref(), Some("orders/3/42"));
    assert_eq!(hv(&log[1], "ce-subject").as_deref(), Some("%C3%BC%201"));
    // Kafka-binding attributes of the record win.
    assert_eq!(
        hv(&log[2], "ce-type").as_deref(),
        Some("com.example.order.created")
    );
    assert_eq!(
        hv(&log[2], "content-type").as_deref(),
        Some("application/json")
    );
}

#[tokio::test]
async fn idle_pooled_connections_are_closed_after_the_pool_idle_timeout() {
    let (addr, _, accepted) = server().await;
    let mut c = HttpConfig::new(format!("http://{addr}/in"));
    assert_eq!(c.pool_idle_timeout, Duration::from_secs(4));
    c.pool_idle_timeout = Duration::from_millis(100);
    let h = HttpHandler::new(c, SessionRouter::default()).unwrap();
    assert_eq!(h.handle(&record(200), Attempt::FIRST).await, Ok(()));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(h.handle(&record(200), Attempt::FIRST).await, Ok(()));
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

/// A server that reads each request whole and closes its connection without an answer: the
/// request may have reached the service. Returns the address and the requests read.
async fn dropping_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let read = Arc::new(AtomicUsize::new(0));
    let counted = read.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let counted = counted.clone();
            tokio::spawn(async move {
                if read_request(&mut s).await.is_some() {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
    });
    (addr, read)
}

/// A keep-alive server that answers one request on each connection and then closes it, as a
/// server closes a connection it has kept idle long enough; each close is announced on the
/// returned channel once done. Returns the address and the requests answered.
async fn one_answer_server() -> (
    SocketAddr,
    Arc<AtomicUsize>,
    tokio::sync::mpsc::UnboundedReceiver<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let answered = Arc::new(AtomicUsize::new(0));
    let (closed_tx, closed) = tokio::sync::mpsc::unbounded_channel();
    let a2 = answered.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let (answered, closed_tx) = (a2.clone(), closed_tx.clone());
            tokio::spawn(async move {
                if read_request(&mut s).await.is_some() {
                    answered.fetch_add(1, Ordering::SeqCst);
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                        .await;
                }
                drop(s);
                let _ = closed_tx.send(());
            });
        }
    });
    (addr, answered, closed)
}

#[tokio::test]
async fn a_pooled_connection_the_server_closed_while_idle_is_not_used() {
    // The close reached the client before its next request: the pool sees it and the request
    // goes out on a new connection, its first attempt a success.
    let (addr, answered, mut closed) = one_answer_server().await;
    let h = HttpHandler::new(
        HttpConfig::new(format!("http://{addr}/in")),
        SessionRouter::default(),
    )
    .unwrap();
    for i in 0..3 {
        assert_eq!(
            h.handle(&record(200), Attempt::FIRST).await,
            Ok(()),
            "request {i}"
        );
        closed.recv().await.unwrap();
    }
    assert_eq!(answered.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_fresh_connection_closed_under_the_request_is_a_failed_attempt() {
    // The request may have reached the service: it is not sent again behind the engine's back.
    let (addr, read) = dropping_server().await;
    let h = HttpHandler::new(
        HttpConfig::new(format!("http://{addr}/in")),
        SessionRouter::default(),
    )
    .unwrap();
    let r = h.handle(&record(200), Attempt::FIRST).await;
    assert!(matches!(r, Err(HandlerError::Transient { .. })), "{r:?}");
    assert_eq!(read.load(Ordering::SeqCst), 1, "sent once");
}

/// The request headers the `v2` signature covers, in the order the README gives.
const SIGNED: [&str; 12] = [
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

/// What the README tells a service to do with `v2`: HMAC-SHA256 over "<t>." + the body, then for
/// each signed header a line break and its value (empty when absent).
fn verify_v2(secret: &[u8], headers: &hyper::HeaderMap, body: &[u8]) -> bool {
    let sig = headers.get("orderly-signature").unwrap().to_str().unwrap();
    let fields: std::collections::HashMap<&str, &str> =
        sig.split(',').filter_map(|p| p.split_once('=')).collect();
    let (Some(t), Some(v2)) = (fields.get("t"), fields.get("v2")) else {
        return false;
    };
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    for n in SIGNED {
        mac.update(b"\n");
        mac.update(headers.get(n).map_or(&b""[..], |v| v.as_bytes()));
    }
    let expected: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    expected == *v2
}

#[tokio::test]
async fn the_signature_covers_the_headers_that_name_the_record() {
    let (addr, log, _) = server().await;
    for h2c in [false, true] {
        let mut c = HttpConfig::new(format!("http://{addr}/in"));
        c.h2c = h2c;
        c.signing_key = Some(SigningKey::new(b"shared-key".to_vec()));
        let h = HttpHandler::new(c, SessionRouter::default()).unwrap();
        let mut r = record(200);
        r.key = Some(Bytes::from_static(b"customer 7 "));
        assert_eq!(h.handle(&r, Attempt::FIRST).await, Ok(()));
        let batch = [record(200), {
            let mut r = record(200);
            r.offset = 43;
            r
        }];
        let refs: Vec<&Record> = batch.iter().collect();
        assert!(h.handle_batch(&refs, Attempt::FIRST).await.error.is_none());
        let seen: Vec<Seen> = log.lock().unwrap().drain(..).collect();
        assert_eq!(seen.len(), 2);
        for s in seen {
            assert!(verify_v2(b"shared-key", &s.headers, &s.body), "{s:?}");
            // A replay of the request with another offset, key or session does not verify.
            for (name, value) in [
                ("orderly-offset", "41"),
                ("orderly-first-offset", "41"),
                ("orderly-key", "customer-8"),
                ("orderly-session", "customer-8"),
                ("orderly-key-encoding", "utf8"),
            ] {
                let mut altered = s.headers.clone();
                altered.insert(name, hyper::header::HeaderValue::from_static(value));
                assert!(
                    !verify_v2(b"shared-key", &altered, &s.body),
                    "{name}: {value} still verifies"
                );
            }
            let mut removed = s.headers.clone();
            removed.remove("orderly-topic");
            assert!(!verify_v2(b"shared-key", &removed, &s.body));
        }
    }
}

#[tokio::test]
async fn extra_headers_may_not_set_host_or_the_framing() {
    for name in ["host", "content-length", "transfer-encoding"] {
        let mut c = HttpConfig::new("http://127.0.0.1:1/in");
        c.headers = vec![ExtraHeader {
            name: hyper::header::HeaderName::from_static(name),
            value: hyper::header::HeaderValue::from_static("chunked"),
        }];
        let e = HttpHandler::new(c, SessionRouter::default()).unwrap_err();
        assert!(e.to_string().contains(name), "{e}");
    }
}
