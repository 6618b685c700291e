//! `HttpHandler`'s HTTP/1.1 client against servers that write their answers byte by byte:
//! chunked bodies with extensions and trailers, bodies that end with the connection (HTTP/1.0),
//! interim `100 Continue` answers, `connection: close`, an answer sent unasked on an idle
//! connection, answers that are not HTTP, and the request as it goes on the wire.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use orderly_engine::{Attempt, Handler, HandlerError, Record, TopicPartition};
use orderly_handlers::{HttpConfig, HttpHandler, SessionRouter};
use orderly_testkit::raw_http::read_request;
use tokio::io::AsyncWriteExt;

/// What a scripted server does after reading a request.
#[derive(Clone)]
enum Step {
    /// Writes these bytes in pieces of at most the given size, a short pause between them.
    Answer(&'static [u8], usize),
    /// Writes these bytes and closes the connection.
    AnswerAndClose(&'static [u8]),
    /// Answers, then after the pause writes the second bytes unasked and closes.
    AnswerThenUnasked(&'static [u8], Duration, &'static [u8]),
}

struct Script {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Vec<u8>>>>,
}

/// A server that takes each request's step from `steps`, in order over all its connections.
async fn scripted(steps: Vec<Step>) -> Script {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let steps = Arc::new(Mutex::new(steps.into_iter()));
    let (a2, r2) = (accepted.clone(), requests.clone());
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            a2.fetch_add(1, Ordering::SeqCst);
            let (steps, requests) = (steps.clone(), r2.clone());
            tokio::spawn(async move {
                while let Some(req) = read_request(&mut s).await {
                    requests.lock().unwrap().push(req);
                    let step = steps.lock().unwrap().next();
                    match step {
                        Some(Step::Answer(bytes, piece)) => {
                            for part in bytes.chunks(piece) {
                                s.write_all(part).await.unwrap();
                                tokio::time::sleep(Duration::from_millis(2)).await;
                            }
                        }
                        Some(Step::AnswerAndClose(bytes)) => {
                            s.write_all(bytes).await.unwrap();
                            return;
                        }
                        Some(Step::AnswerThenUnasked(bytes, pause, unasked)) => {
                            s.write_all(bytes).await.unwrap();
                            tokio::time::sleep(pause).await;
                            let _ = s.write_all(unasked).await;
                            return;
                        }
                        None => return,
                    }
                }
            });
        }
    });
    Script {
        addr,
        accepted,
        requests,
    }
}

fn record(value: &str) -> Record {
    let mut r = Record::new(
        TopicPartition::new("orders", 3),
        42,
        Some(Bytes::from_static(b"customer-7")),
        Some(Bytes::from(value.to_owned())),
    );
    r.timestamp_ms = 1_700_000_000_123;
    r
}

/// A handler whose 2xx bodies are replies, so a test sees the body the client read.
fn handler(addr: SocketAddr) -> HttpHandler {
    let mut c = HttpConfig::new(format!("http://{addr}/in?x=1"));
    c.reply_with_body = true;
    HttpHandler::new(c, SessionRouter::default()).unwrap()
}

async fn reply_of(h: &HttpHandler, value: &str) -> Result<Vec<u8>, HandlerError> {
    let mut replies = h.handle_replying(&record(value), Attempt::FIRST).await?;
    assert!(replies.len() <= 1, "{replies:?}");
    Ok(replies
        .pop()
        .and_then(|r| r.value)
        .map(|v| v.to_vec())
        .unwrap_or_default())
}

#[tokio::test]
async fn chunked_bodies_with_extensions_and_trailers_are_read_whole() {
    let s = scripted(vec![
        Step::Answer(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;name=v\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nx-trailer: 1\r\n\r\n",
            7,
        ),
        Step::Answer(
            b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nnext",
            3,
        ),
    ])
    .await;
    let h = handler(s.addr);
    assert_eq!(reply_of(&h, "a").await.unwrap(), b"hello world");
    // The chunked answer was read to its end: the connection carries the next request.
    assert_eq!(reply_of(&h, "b").await.unwrap(), b"next");
    assert_eq!(s.accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_body_that_ends_with_the_connection_is_read_and_the_connection_not_reused() {
    let s = scripted(vec![
        Step::AnswerAndClose(b"HTTP/1.0 200 OK\r\n\r\nuntil the end"),
        Step::AnswerAndClose(
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok",
        ),
        Step::Answer(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nthird", 64),
    ])
    .await;
    let h = handler(s.addr);
    assert_eq!(reply_of(&h, "a").await.unwrap(), b"until the end");
    assert_eq!(reply_of(&h, "b").await.unwrap(), b"ok");
    assert_eq!(reply_of(&h, "c").await.unwrap(), b"third");
    assert_eq!(s.accepted.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn interim_answers_are_skipped() {
    let s = scripted(vec![Step::Answer(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\ndone",
        5,
    )])
    .await;
    assert_eq!(reply_of(&handler(s.addr), "a").await.unwrap(), b"done");
}

#[tokio::test]
async fn an_answer_sent_unasked_on_an_idle_connection_answers_no_request() {
    // Some servers write a 408 before they close a connection idle for too long. That 408
    // belongs to no request: the next request goes on a fresh connection and gets its own.
    let s = scripted(vec![
        Step::AnswerThenUnasked(
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n1",
            Duration::from_millis(20),
            b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
        ),
        Step::Answer(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n2", 64),
    ])
    .await;
    let h = handler(s.addr);
    assert_eq!(reply_of(&h, "a").await.unwrap(), b"1");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(reply_of(&h, "b").await.unwrap(), b"2");
    assert_eq!(s.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_answer_that_is_not_http_fails_the_attempt() {
    let s = scripted(vec![
        Step::AnswerAndClose(b"220 smtp.example.com ESMTP ready\r\n"),
        Step::AnswerAndClose(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\ncut"),
        Step::AnswerAndClose(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"),
    ])
    .await;
    let h = handler(s.addr);
    let r = h.handle(&record("a"), Attempt::FIRST).await;
    assert!(
        matches!(&r, Err(HandlerError::Transient { message: t, .. }) if t.contains("invalid HTTP answer")),
        "{r:?}"
    );
    // A 2xx whose body is cut short is still done (the status decides), but its body is not a
    // reply that can be trusted: the record is dead-lettered rather than a partial reply sent.
    let r = h.handle_replying(&record("b"), Attempt::FIRST).await;
    assert!(matches!(&r, Err(HandlerError::Permanent { .. })), "{r:?}");
    let r = h.handle(&record("c"), Attempt::FIRST).await;
    assert_eq!(r, Ok(()));
}

#[tokio::test]
async fn the_request_on_the_wire() {
    let s = scripted(vec![Step::Answer(b"HTTP/1.1 204 No Content\r\n\r\n", 64)]).await;
    let h = handler(s.addr);
    h.handle(&record("the value"), Attempt::FIRST)
        .await
        .unwrap();
    let req = s.requests.lock().unwrap()[0].clone();
    let text = String::from_utf8(req).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    assert_eq!(lines.next(), Some("POST /in?x=1 HTTP/1.1"));
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(": ").unwrap();
            (n.to_owned(), v.to_owned())
        })
        .collect();
    let get = |n: &str| {
        let v: Vec<&str> = headers
            .iter()
            .filter(|(k, _)| k == n)
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(v.len(), 1, "{n} in {headers:?}");
        v[0].to_owned()
    };
    assert_eq!(get("host"), s.addr.to_string());
    assert_eq!(get("content-length"), "9");
    assert_eq!(get("orderly-offset"), "42");
    assert_eq!(get("orderly-topic"), "orders");
    assert_eq!(get("content-type"), "application/octet-stream");
    assert_eq!(body, "the value");
}

#[tokio::test]
async fn a_batch_on_the_wire() {
    let s = scripted(vec![Step::Answer(b"HTTP/1.1 204 No Content\r\n\r\n", 64)]).await;
    let h = handler(s.addr);
    let mut second = record("two \"quoted\"");
    second.offset = 43;
    let first = record("one");
    let out = h
        .handle_batch_replying(&[&first, &second], Attempt::FIRST)
        .await;
    assert_eq!(out.outcome.done, 2);
    assert!(out.outcome.error.is_none());
    let req = String::from_utf8(s.requests.lock().unwrap()[0].clone()).unwrap();
    let (head, body) = req.split_once("\r\n\r\n").unwrap();
    let headers: Vec<(&str, &str)> = head
        .split("\r\n")
        .skip(1)
        .map(|l| l.split_once(": ").unwrap())
        .collect();
    let get = |n: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(k, _)| *k == n)
            .map(|(_, v)| *v)
            .collect()
    };
    assert_eq!(get("content-type"), ["application/json"]);
    assert_eq!(get("orderly-topic"), ["orders"]);
    assert_eq!(get("orderly-partition"), ["3"]);
    assert_eq!(get("orderly-batch-size"), ["2"]);
    assert_eq!(get("orderly-first-offset"), ["42"]);
    assert_eq!(get("orderly-last-offset"), ["43"]);
    assert_eq!(get("orderly-attempt"), ["1"]);
    assert_eq!(get("orderly-session"), ["customer-7"]);
    assert_eq!(get("traceparent").len(), 1);
    assert_eq!(get("content-length"), [body.len().to_string().as_str()]);
    let items: serde_json::Value = serde_json::from_str(body).unwrap();
    let items = items.as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["offset"], 42);
    assert_eq!(items[0]["value"], "one");
    assert_eq!(items[1]["offset"], 43);
    assert_eq!(items[1]["value"], "two \"quoted\"");
    assert_eq!(items[1]["session"], "customer-7");
    assert_eq!(items[1]["key"], "customer-7");
    assert_eq!(items[1]["topic"], "orders");
}

#[tokio::test]
async fn a_configured_header_replaces_orderlys_of_that_name_once() {
    let s = scripted(vec![Step::Answer(b"HTTP/1.1 204 No Content\r\n\r\n", 64)]).await;
    let mut c = HttpConfig::new(format!("http://user:pw@{}/in", s.addr));
    c.headers = vec![
        orderly_handlers::http::ExtraHeader::parse("Content-Type: text/plain").unwrap(),
        orderly_handlers::http::ExtraHeader::parse("Authorization: Bearer t").unwrap(),
        orderly_handlers::http::ExtraHeader::parse("X-Twice: 1").unwrap(),
        orderly_handlers::http::ExtraHeader::parse("X-Twice: 2").unwrap(),
    ];
    let h = HttpHandler::new(c, SessionRouter::default()).unwrap();
    h.handle(&record("v"), Attempt::FIRST).await.unwrap();
    let req = String::from_utf8(s.requests.lock().unwrap()[0].clone()).unwrap();
    let values = |n: &str| -> Vec<String> {
        req.split("\r\n")
            .filter_map(|l| l.split_once(": "))
            .filter(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.to_owned())
            .collect()
    };
    assert_eq!(values("content-type"), ["text/plain"]);
    assert_eq!(values("authorization"), ["Bearer t"]);
    assert_eq!(values("x-twice"), ["1", "2"]);
    assert_eq!(values("orderly-offset"), ["42"]);
}

#[tokio::test]
async fn a_large_body_goes_out_whole_behind_its_head() {
    let s = scripted(vec![
        Step::Answer(b"HTTP/1.1 204 No Content\r\n\r\n", 64),
        Step::Answer(b"HTTP/1.1 204 No Content\r\n\r\n", 64),
    ])
    .await;
    let h = handler(s.addr);
    let value: String = (0..300_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    h.handle(&record(&value), Attempt::FIRST).await.unwrap();
    h.handle(&record("small"), Attempt::FIRST).await.unwrap();
    let reqs = s.requests.lock().unwrap().clone();
    assert!(reqs[0].ends_with(format!("\r\n\r\n{value}").as_bytes()));
    assert!(reqs[1].ends_with(b"\r\n\r\nsmall"));
    assert_eq!(s.accepted.load(Ordering::SeqCst), 1);
}
