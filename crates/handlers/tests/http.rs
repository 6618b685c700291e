//! `HttpHandler` against a real hyper server: headers, JSON envelope, status mapping, Retry-After as the least delay, h2c, waiting for an endpoint that is not up yet, keep-alive, the adaptive limit on requests in flight.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use orderly_engine::{Attempt, Handler, HandlerError, Header, Record, TopicPartition};
use orderly_handlers::{HttpBody, HttpConfig, HttpHandler, SessionRouter};

/// What the server saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    headers: hyper::HeaderMap,
    body: Bytes,
    version: hyper::Version,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// Serves on `listener`: the answer is chosen by the `kafka-h-answer` header (`503-retry`,
/// `429-date`, `400`, anything else 200).
async fn serve(listener: tokio::net::TcpListener, log: Log) {
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        let log = log.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let log = log.clone();
                async move {
                    let version = req.version();
                    let (parts, body) = req.into_parts();
                    let body = body.collect().await.unwrap().to_bytes();
                    let answer = parts
                        .headers
                        .get("kafka-h-answer")
                        .map(|v| v.to_str().unwrap().to_owned())
                        .unwrap_or_default();
                    log.lock().unwrap().push(Seen {
                        headers: parts.headers,
                        body,
                        version,
                    });
                    let mut r = Response::new(Full::new(Bytes::from_static(b"the reason")));
                    match answer.as_str() {
                        "503-retry" => {
                            *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                            r.headers_mut().insert(
                                "retry-after",
                                hyper::header::HeaderValue::from_static("1"),
                            );
                        }
                        "429-date" => {
                            // Retry-After as an HTTP-date 3 s from now (whole seconds, so the
                            // wait it asks for is between 2 and 3 s).
                            *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                            let at = std::time::SystemTime::now() + Duration::from_secs(3);
                            r.headers_mut().insert(
                                "retry-after",
                                hyper::header::HeaderValue::from_str(&httpdate::fmt_http_date(at))
                                    .unwrap(),
                            );
                        }
                        "400" => *r.status_mut() = StatusCode::BAD_REQUEST,
                        "big-200" => *r.body_mut() = Full::new(Bytes::from(vec![b'x'; 100 << 10])),
                        "big-400" => {
                            *r.status_mut() = StatusCode::BAD_REQUEST;
                            *r.body_mut() = Full::new(Bytes::from(vec![b'x'; 100 << 10]));
                        }
                        _ => {}
                    }
                    Ok::<_, Infallible>(r)
                }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

async fn server() -> (SocketAddr, Log) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = Log::default();
    tokio::spawn(serve(listener, log.clone()));
    (addr, log)
}

/// [`server`] behind a TCP relay that counts the connections clients open.
async fn counted_server() -> (SocketAddr, Log, Arc<AtomicUsize>) {
    let (inner, log) = server().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let acc = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (mut client, _) = listener.accept().await.unwrap();
            acc.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut upstream = tokio::net::TcpStream::connect(inner).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    (addr, log, accepted)
}

fn record(answer: &str) -> Record {
    let mut r = Record::new(
        TopicPartition::new("orders", 3),
        42,
        Some(Bytes::from_static(&[0xff, 0x00])),
        Some(Bytes::from_static(b"{\"n\":1}")),
    );
    r.timestamp_ms = 1_700_000_000_000;
    r.headers.push(Header::new("answer", answer.to_owned()));
    r.headers.push(Header::new("Event-Id", "e-1"));
    r
}

const FIRST: Attempt = Attempt::FIRST;

#[tokio::test]
async fn headers_status_mapping_and_retry_after() {
    let (addr, log) = server().await;
    let h = HttpHandler::new(
        HttpConfig::new(format!("http://{addr}/in")),
        SessionRouter::default(),
    )
    .unwrap();
    assert_eq!(h.handle(&record("ok"), FIRST).await, Ok(()));
    let seen = log.lock().unwrap()[0].clone();
    let hv = |n: &str| seen.headers.get(n).map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(hv("orderly-topic").as_deref(), Some("orders"));
    assert_eq!(hv("orderly-partition").as_deref(), Some("3"));
    assert_eq!(hv("orderly-offset").as_deref(), Some("42"));
    assert_eq!(hv("orderly-attempt").as_deref(), Some("1"));
    assert_eq!(hv("orderly-timestamp").as_deref(), Some("1700000000000"));
    assert_eq!(hv("orderly-key").as_deref(), Some("/wA="));
    assert_eq!(hv("orderly-key-encoding").as_deref(), Some("base64"));
    assert_eq!(hv("orderly-session").as_deref(), Some("/wA="));
    assert_eq!(hv("kafka-h-event-id").as_deref(), Some("e-1"));
    assert!(hv("traceparent").unwrap().starts_with("00-"));
    assert_eq!(&seen.body[..], b"{\"n\":1}");
    assert_eq!(seen.version, hyper::Version::HTTP_11);

    let t0 = Instant::now();
    let e = h.handle(&record("503-retry"), FIRST).await.unwrap_err();
    assert!(
        t0.elapsed() >= Duration::from_secs(1),
        "Retry-After is the least delay"
    );
    assert_eq!(e, HandlerError::transient("HTTP 503: the reason"));
    let t0 = Instant::now();
    let e = h.handle(&record("429-date"), FIRST).await.unwrap_err();
    assert!(
        t0.elapsed() >= Duration::from_secs(2),
        "Retry-After as an HTTP-date is the least delay too (waited {:?})",
        t0.elapsed()
    );
    assert_eq!(e, HandlerError::transient("HTTP 429: the reason"));
    assert_eq!(
        h.handle(&record("400"), FIRST).await,
        Err(HandlerError::permanent("HTTP 400: the reason"))
    );
}

#[tokio::test]
async fn json_envelope_over_h2c() {
    let (addr, log) = server().await;
    let mut cfg = HttpConfig::new(format!("http://{addr}/in"));
    cfg.body = HttpBody::Json;
    cfg.h2c = true;
    let h = HttpHandler::new(cfg, SessionRouter::default()).unwrap();
    assert_eq!(
        h.handle(
            &record("ok"),
            Attempt::retry(2, std::time::Duration::from_millis(100))
        )
        .await,
        Ok(())
    );
    let seen = log.lock().unwrap()[0].clone();
    assert_eq!(seen.version, hyper::Version::HTTP_2);
    let v: serde_json::Value = serde_json::from_slice(&seen.body).unwrap();
    assert_eq!(v["topic"], "orders");
    assert_eq!(v["offset"], 42);
    assert_eq!(v["attempt"], 2);
    assert_eq!(v["key"], "/wA=");
    assert_eq!(v["key_encoding"], "base64");
    assert_eq!(v["value"], "{\"n\":1}");
    assert_eq!(v["headers"][1]["name"], "Event-Id");
    assert_eq!(v["headers"][1]["value"], "e-1");
}

#[tokio::test]
async fn an_endpoint_that_is_not_up_yet_makes_records_wait_not_fail() {
    // Reserve a port, free it, and start the server there only after the request began.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let h = Arc::new(
        HttpHandler::new(
            HttpConfig::new(format!("http://127.0.0.1:{port}/in")),
            SessionRouter::default(),
        )
        .unwrap(),
    );
    assert!(h.probe().await.is_err());
    let h2 = h.clone();
    let attempt = tokio::spawn(async move { h2.handle(&record("ok"), FIRST).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!attempt.is_finished(), "the attempt waits for the endpoint");
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let log = Log::default();
    tokio::spawn(serve(listener, log.clone()));
    let r = tokio::time::timeout(Duration::from_secs(30), attempt)
        .await
        .expect("handled once the endpoint is up")
        .unwrap();
    assert_eq!(r, Ok(()));
    assert_eq!(log.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn connections_are_kept_alive_and_reused() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let log = Log::default();
    let (acc, l2) = (accepted.clone(), log.clone());
    // Count accepted connections in front of the same server loop.
    let (tx, rx) = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map(|inner| (inner.local_addr().unwrap(), inner))
        .unwrap();
    tokio::spawn(serve(rx, l2));
    tokio::spawn(async move {
        loop {
            let (mut client, _) = listener.accept().await.unwrap();
            acc.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tokio::spawn(async move {
                let mut upstream = tokio::net::TcpStream::connect(tx).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    let h = Arc::new(
        HttpHandler::new(
            HttpConfig::new(format!("http://{addr}/in")),
            SessionRouter::default(),
        )
        .unwrap(),
    );
    for _ in 0..50 {
        assert_eq!(h.handle(&record("ok"), FIRST).await, Ok(()));
    }
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                assert_eq!(h.handle(&record("ok"), FIRST).await, Ok(()));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(log.lock().unwrap().len(), 250);
    let n = accepted.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        n <= 8,
        "{n} connections for 250 requests, at most 8 concurrent"
    );
}

/// A server whose answer takes `delay`; with `serial`, one request at a time (the others queue,
/// as on a saturated service). Returns the address and the most requests it saw at once.
async fn timed_server(delay: Duration, serial: bool) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let now = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let queue = Arc::new(tokio::sync::Mutex::new(()));
    let seen = most.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (now, most, queue) = (now.clone(), most.clone(), queue.clone());
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(move |_req: Request<hyper::body::Incoming>| {
                        let (now, most, queue) = (now.clone(), most.clone(), queue.clone());
                        async move {
                            let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(n, Ordering::SeqCst);
                            if serial {
                                let _one = queue.lock().await;
                                tokio::time::sleep(delay).await;
                            } else {
                                tokio::time::sleep(delay).await;
                            }
                            now.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
                        }
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

/// `callers` tasks send `requests` records in all through `h`.
async fn load(h: &Arc<HttpHandler>, callers: usize, requests: usize) {
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let h = h.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..requests / callers {
                assert_eq!(h.handle(&record("ok"), FIRST).await, Ok(()));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adaptive_limit_grows_while_the_endpoint_keeps_its_latency() {
    // Every answer takes 50 ms however many are in flight: more in flight is pure gain, so the
    // limit climbs from its start (16) towards the cap (256), and the server sees it.
    let (addr, most) = timed_server(Duration::from_millis(50), false).await;
    let mut cfg = HttpConfig::new(format!("http://{addr}/in"));
    cfg.adaptive_concurrency = true;
    let h = Arc::new(HttpHandler::new(cfg, SessionRouter::default()).unwrap());
    assert_eq!(h.concurrency_limit(), orderly_handlers::limit::START);
    load(&h, 128, 1_536).await;
    let (limit, most) = (h.concurrency_limit(), most.load(Ordering::SeqCst));
    assert!(limit > 32, "limit {limit}");
    assert!(most > 32, "at most {most} requests at once at the server");
    assert!(most <= 128);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adaptive_limit_shrinks_when_requests_only_queue() {
    // One request at a time at the server (2 ms each): more in flight only lengthens the queue,
    // so the limit falls from its start towards the floor. (Before the smoothed round trip has
    // caught up with the queue, the first answers may lift it a little above the start.)
    let (addr, most) = timed_server(Duration::from_millis(2), true).await;
    let mut cfg = HttpConfig::new(format!("http://{addr}/in"));
    cfg.adaptive_concurrency = true;
    let h = Arc::new(HttpHandler::new(cfg, SessionRouter::default()).unwrap());
    // Rounds of load until the limit has come down (on a busy machine the first round's round
    // trips may be too noisy to read); the bound on rounds is generous, not the assertion.
    for _ in 0..10 {
        load(&h, 64, 320).await;
        if h.concurrency_limit() < orderly_handlers::limit::START {
            break;
        }
    }
    let (limit, most) = (h.concurrency_limit(), most.load(Ordering::SeqCst));
    assert!(limit < orderly_handlers::limit::START, "limit {limit}");
    assert!(limit >= orderly_handlers::limit::FLOOR, "limit {limit}");
    assert!(
        most < 2 * orderly_handlers::limit::START,
        "{most} requests at once at the server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_limit_keeps_the_cap() {
    // Adaptive off (the default): as many in flight as --http-concurrency, from the first request.
    let (addr, most) = timed_server(Duration::from_millis(50), false).await;
    let mut cfg = HttpConfig::new(format!("http://{addr}/in"));
    cfg.concurrency = 64;
    let h = Arc::new(HttpHandler::new(cfg, SessionRouter::default()).unwrap());
    assert_eq!(h.concurrency_limit(), 64);
    load(&h, 128, 256).await;
    assert_eq!(h.concurrency_limit(), 64);
    let most = most.load(Ordering::SeqCst);
    assert!(most > 32 && most <= 64, "{most} requests at once");
}

#[tokio::test]
async fn a_body_over_64_kib_is_read_to_its_end_and_the_connection_reused() {
    let (addr, log, accepted) = counted_server().await;
    let h = HttpHandler::new(
        HttpConfig::new(format!("http://{addr}/in")),
        SessionRouter::default(),
    )
    .unwrap();
    for _ in 0..3 {
        assert_eq!(h.handle(&record("big-200"), FIRST).await, Ok(()));
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one kept-alive connection for three sequential requests with 100 KiB answers"
    );
    // The reason text holds the start of a long body, not nothing.
    let Err(HandlerError::Permanent {
        message: reason, ..
    }) = h.handle(&record("big-400"), FIRST).await
    else {
        panic!("400 is permanent");
    };
    assert_eq!(reason, format!("HTTP 400: {}", "x".repeat(1024)));
    assert_eq!(h.handle(&record("big-200"), FIRST).await, Ok(()));
    assert_eq!(log.lock().unwrap().len(), 5);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one kept-alive connection for five sequential requests with 100 KiB answers"
    );
}

/// A response body that yields one chunk and then never ends.
struct Stalling(bool);

impl hyper::body::Body for Stalling {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        if self.0 {
            std::task::Poll::Pending
        } else {
            self.0 = true;
            std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from_static(
                b"partial",
            )))))
        }
    }
}

/// A server that answers 200 with the start of a body and then never finishes it.
async fn stalling_body_server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(|req: Request<hyper::body::Incoming>| async move {
                        let _ = req.into_body().collect().await;
                        Ok::<_, Infallible>(Response::new(Stalling(false)))
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_2xx_whose_body_is_slow_is_done_not_retried() {
    let addr = stalling_body_server().await;
    let mut cfg = HttpConfig::new(format!("http://{addr}/in"));
    cfg.timeout = Duration::from_millis(500);
    let h = HttpHandler::new(cfg, SessionRouter::default()).unwrap();
    // The status arrived inside the timeout: the record is done whatever its body does after.
    assert_eq!(h.handle(&record("ok"), FIRST).await, Ok(()));
}

#[tokio::test]
async fn kafka_headers_keep_null_empty_non_ascii_values_and_names_http_cannot_carry() {
    use base64::Engine as _;
    let (addr, log) = server().await;
    let h = HttpHandler::new(
        HttpConfig::new(format!("http://{addr}/in")),
        SessionRouter::default(),
    )
    .unwrap();
    let mut r = record("ok");
    r.headers.push(Header::new("note", "héllo"));
    r.headers.push(Header::new("empty", ""));
    r.headers.push(Header {
        key: "nothing".into(),
        value: None,
    });
    r.headers.push(Header::new("größe", "1"));
    r.headers.push(Header::new("with space", "2"));
    assert_eq!(h.handle(&r, FIRST).await, Ok(()));
    let seen = log.lock().unwrap()[0].clone();
    let hv = |n: &str| {
        seen.headers
            .get(n)
            .map(|v| String::from_utf8(v.as_bytes().to_vec()).unwrap())
    };
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    // Non-ASCII text is not sent as raw bytes: base64 with the encoding marker.
    assert_eq!(hv("kafka-h-note"), Some(b64("héllo")));
    assert_eq!(hv("kafka-h-note-encoding").as_deref(), Some("base64"));
    // Empty and null differ.
    assert_eq!(hv("kafka-h-empty").as_deref(), Some(""));
    assert_eq!(hv("kafka-h-empty-encoding"), None);
    assert_eq!(hv("kafka-h-nothing").as_deref(), Some(""));
    assert_eq!(hv("kafka-h-nothing-encoding").as_deref(), Some("null"));
    // Names HTTP cannot carry arrive hex-encoded under their own prefix.
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(
        hv(&format!("kafka-hx-{}", hex("größe"))).as_deref(),
        Some("1")
    );
    assert_eq!(
        hv(&format!("kafka-hx-{}", hex("with space"))).as_deref(),
        Some("2")
    );
    // The plain ones are unchanged.
    assert_eq!(hv("kafka-h-event-id").as_deref(), Some("e-1"));
}

#[tokio::test]
async fn keys_and_sessions_with_spaces_at_either_end_travel_base64() {
    use base64::Engine as _;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let (addr, log) = server().await;
    for h2c in [false, true] {
        let mut c = HttpConfig::new(format!("http://{addr}/in"));
        c.h2c = h2c;
        let h = HttpHandler::new(c, SessionRouter::default()).unwrap();
        for key in ["abc ", " abc", "abc", "a b"] {
            let mut r = record("ok");
            r.key = Some(Bytes::from(key.to_owned()));
            assert_eq!(h.handle(&r, FIRST).await, Ok(()));
            let seen = log.lock().unwrap().pop().unwrap();
            let hv = |n: &str| seen.headers.get(n).map(|v| v.to_str().unwrap().to_owned());
            let (value, encoding) = if key.trim() == key {
                (key.to_owned(), None)
            } else {
                (b64(key), Some("base64"))
            };
            assert_eq!(hv("orderly-key").as_deref(), Some(&value[..]), "{key:?}");
            assert_eq!(hv("orderly-key-encoding").as_deref(), encoding, "{key:?}");
            assert_eq!(
                hv("orderly-session").as_deref(),
                Some(&value[..]),
                "{key:?}"
            );
            assert_eq!(
                hv("orderly-session-encoding").as_deref(),
                encoding,
                "{key:?}"
            );
        }
    }
}
