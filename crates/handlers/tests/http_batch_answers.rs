//! What a 2xx answer to an HTTP batch means when its body is not a clean answer: a UTF-8 BOM
//! before the JSON, JSON that does not parse as an answer, a body too long to read whole. A
//! record the service did not take is never marked done; a record it never saw is never
//! dead-lettered.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::HeaderValue;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use orderly_engine::{Attempt, BatchOutcome, Handler, HandlerError, Record, TopicPartition};
use orderly_handlers::{HttpConfig, HttpHandler, SessionRouter};

/// The 2xx answer (content type, body) to a batch whose first offset is `first`.
fn answer_to(first: i64) -> (&'static str, Vec<u8>) {
    match first {
        100 => ("application/json", b"\xef\xbb\xbf{\"done\":1}".to_vec()),
        200 => ("application/json", br#"{"done":1,}"#.to_vec()),
        300 => ("application/json", br#"{"done":"1"}"#.to_vec()),
        400 => ("application/json", br#"[1, 2]"#.to_vec()),
        500 => {
            // An HTML page of 100 KiB: no JSON object, so every record is done, even though
            // only its first part is kept.
            let mut b = b"<!doctype html><html><body>".to_vec();
            b.resize(100 << 10, b'x');
            ("text/html", b)
        }
        600 => {
            // A JSON answer longer than orderly reads: not known to be all done.
            let mut b = br#"{"done": 1, "pad": ""#.to_vec();
            b.resize(2 << 20, b'x');
            b.extend_from_slice(br#""}"#);
            ("text/plain", b)
        }
        700 => ("text/plain", b"\xef\xbb\xbf  \r\n {\"done\":2}".to_vec()),
        _ => ("text/plain", Vec::new()),
    }
}

async fn server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let svc =
                    hyper::service::service_fn(|req: Request<hyper::body::Incoming>| async move {
                        let first: i64 = req
                            .headers()
                            .get("orderly-first-offset")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(-1);
                        let _ = req.into_body().collect().await;
                        let (ct, body) = answer_to(first);
                        let mut r = Response::new(Full::new(Bytes::from(body)));
                        r.headers_mut()
                            .insert("content-type", HeaderValue::from_static(ct));
                        Ok::<_, Infallible>(r)
                    });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// The outcome of a batch of 8 records of one session from offset `first`.
async fn batch(h: &HttpHandler, first: i64) -> BatchOutcome {
    let recs: Vec<Record> = (first..first + 8)
        .map(|o| {
            Record::new(
                TopicPartition::new("orders", 0),
                o,
                Some(Bytes::from_static(b"s-1")),
                Some(Bytes::from_static(b"v")),
            )
        })
        .collect();
    let refs: Vec<&Record> = recs.iter().collect();
    h.handle_batch(&refs, Attempt::FIRST).await
}

fn handler(addr: SocketAddr) -> HttpHandler {
    HttpHandler::new(
        HttpConfig::new(format!("http://{addr}/batch")),
        SessionRouter::default(),
    )
    .unwrap()
}

/// A transient failure of the whole batch whose text contains `needle`.
fn whole_batch_retried(o: &BatchOutcome, needle: &str) {
    assert_eq!(o.done, 0, "{o:?}");
    match &o.error {
        Some(HandlerError::Transient { message, .. }) => {
            assert!(message.contains(needle), "{message:?} lacks {needle:?}")
        }
        other => panic!("a transient failure expected, got {other:?}"),
    }
}

#[tokio::test]
async fn a_bom_before_the_answer_is_read_past() {
    let h = handler(server().await);
    let o = batch(&h, 100).await;
    assert_eq!(o.done, 1, "{o:?}");
    assert!(
        matches!(o.error, Some(HandlerError::Transient { .. })),
        "{o:?}"
    );
    let o = batch(&h, 700).await;
    assert_eq!(o.done, 2, "{o:?}");
}

#[tokio::test]
async fn a_malformed_json_answer_retries_the_whole_batch() {
    let h = handler(server().await);
    for first in [200, 300, 400] {
        let o = batch(&h, first).await;
        whole_batch_retried(&o, "batch answer");
    }
}

#[tokio::test]
async fn a_2xx_body_too_long_to_read_whole_is_done_unless_it_is_json() {
    let h = handler(server().await);
    assert_eq!(batch(&h, 500).await, BatchOutcome::all(8));
    let o = batch(&h, 600).await;
    whole_batch_retried(&o, "not read whole");
    // No body at all: every record is done.
    assert_eq!(batch(&h, 0).await, BatchOutcome::all(8));
}
