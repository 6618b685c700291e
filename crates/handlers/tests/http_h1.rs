//! `HttpHandler`'s HTTP/1.1 client at the edges of the exchange: an answer that comes before the
//! request is fully written, a connection that closes after the request reached the service,
//! and response framing that a lenient reader would take wrongly (`transfer-encoding` beside
//! `content-length`, a signed length, padded chunk sizes, a `101`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use orderly_engine::{Attempt, Handler, HandlerError, Record, TopicPartition};
use orderly_handlers::{HttpConfig, HttpHandler, SessionRouter};
use orderly_testkit::raw_http::read_head;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads the `content-length` body of the request with `head`.
async fn read_body(s: &mut TcpStream, head: &[u8]) {
    let len: usize = String::from_utf8_lossy(head)
        .to_ascii_lowercase()
        .lines()
        .find_map(|l| l.strip_prefix("content-length:").map(str::to_owned))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0u8; len];
    let _ = s.read_exact(&mut body).await;
}

/// What the server does with a request.
#[derive(Clone, Copy)]
enum Step {
    /// Reads the whole request and writes these bytes.
    Answer(&'static [u8]),
    /// Reads the whole request and closes the connection without a word.
    Drop,
    /// Reads only the request's head, writes these bytes and keeps the connection open
    /// without reading another byte.
    EarlyKeepOpen(&'static [u8]),
    /// Reads only the request's head, writes these bytes and closes the connection (with the
    /// unread body in its buffer: a reset).
    EarlyClose(&'static [u8]),
}

struct Server {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    /// The first line of each request the server read.
    requests: Arc<Mutex<Vec<String>>>,
}

/// A server that takes each request's step from `steps`, in order over all its connections.
async fn server(steps: Vec<Step>) -> Server {
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
                loop {
                    let Some(head) = read_head(&mut s).await else {
                        return;
                    };
                    let value = String::from_utf8_lossy(&head)
                        .lines()
                        .find_map(|l| l.strip_prefix("orderly-offset: ").map(str::to_owned))
                        .unwrap_or_default();
                    requests.lock().unwrap().push(value);
                    let step = steps.lock().unwrap().next();
                    match step {
                        Some(Step::Answer(bytes)) => {
                            read_body(&mut s, &head).await;
                            if s.write_all(bytes).await.is_err() {
                                return;
                            }
                        }
                        Some(Step::Drop) => {
                            read_body(&mut s, &head).await;
                            return;
                        }
                        Some(Step::EarlyKeepOpen(bytes)) => {
                            let _ = s.write_all(bytes).await;
                            // Open until the client closes it; nothing more is read.
                            std::future::pending::<()>().await;
                        }
                        Some(Step::EarlyClose(bytes)) => {
                            let _ = s.write_all(bytes).await;
                            return;
                        }
                        None => return,
                    }
                }
            });
        }
    });
    Server {
        addr,
        accepted,
        requests,
    }
}

fn record(offset: i64, value: Bytes) -> Record {
    Record::new(
        TopicPartition::new("orders", 3),
        offset,
        Some(Bytes::from_static(b"customer-7")),
        Some(value),
    )
}

/// A handler whose 2xx bodies are replies, so a test sees the body the client read.
fn handler(addr: SocketAddr) -> HttpHandler {
    let mut c = HttpConfig::new(format!("http://{addr}/in"));
    c.reply_with_body = true;
    HttpHandler::new(c, SessionRouter::default()).unwrap()
}

async fn send(h: &HttpHandler, offset: i64, value: Bytes) -> Result<Vec<u8>, HandlerError> {
    let mut replies = h
        .handle_replying(&record(offset, value), Attempt::FIRST)
        .await?;
    Ok(replies
        .pop()
        .and_then(|r| r.value)
        .map(|v| v.to_vec())
        .unwrap_or_default())
}

fn small() -> Bytes {
    Bytes::from_static(b"v")
}

/// 8 MiB: far more than the socket buffers of both ends hold.
fn large() -> Bytes {
    Bytes::from(vec![b'x'; 8 << 20])
}

const TOO_LARGE: &[u8] =
    b"HTTP/1.1 413 Content Too Large\r\ncontent-length: 8\r\nconnection: close\r\n\r\ntoo big!";
const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

fn assert_permanent_413(r: Result<Vec<u8>, HandlerError>) {
    match r {
        Err(e) => assert!(e.is_permanent() && e.message().contains("413"), "{e:?}"),
        Ok(v) => panic!("done: {v:?}"),
    }
}

#[tokio::test]
async fn an_answer_before_the_request_is_written_is_taken_while_the_server_stops_reading() {
    let s = server(vec![Step::EarlyKeepOpen(TOO_LARGE), Step::Answer(OK)]).await;
    let h = handler(s.addr);
    assert_permanent_413(send(&h, 1, large()).await);
    // The request was not written whole: its connection is not used again.
    assert_eq!(send(&h, 2, small()).await.unwrap(), b"ok");
    assert_eq!(s.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_answer_before_the_request_is_written_is_taken_when_the_server_resets() {
    let s = server(vec![Step::EarlyClose(TOO_LARGE), Step::Answer(OK)]).await;
    let h = handler(s.addr);
    assert_permanent_413(send(&h, 1, large()).await);
    assert_eq!(send(&h, 2, small()).await.unwrap(), b"ok");
    assert_eq!(s.requests.lock().unwrap().as_slice(), ["1", "2"]);
}

#[tokio::test]
async fn a_request_the_server_read_and_dropped_is_not_sent_again() {
    // The first request leaves a pooled connection; the server reads the second whole on it
    // (it may have acted on it) and closes without an answer.
    let s = server(vec![Step::Answer(OK), Step::Drop, Step::Answer(OK)]).await;
    let h = handler(s.addr);
    assert_eq!(send(&h, 1, small()).await.unwrap(), b"ok");
    let e = send(&h, 2, small()).await.unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    assert_eq!(s.requests.lock().unwrap().as_slice(), ["1", "2"]);
}

#[tokio::test]
async fn an_answer_with_transfer_encoding_and_content_length_closes_its_connection() {
    let s = server(vec![
        Step::Answer(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        ),
        Step::Answer(OK),
    ])
    .await;
    let h = handler(s.addr);
    assert_eq!(send(&h, 1, small()).await.unwrap(), b"hello");
    assert_eq!(send(&h, 2, small()).await.unwrap(), b"ok");
    assert_eq!(s.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_signed_content_length_is_not_http() {
    let s = server(vec![Step::Answer(
        b"HTTP/1.1 200 OK\r\ncontent-length: +5\r\n\r\nhello",
    )])
    .await;
    let e = send(&handler(s.addr), 1, small()).await.unwrap_err();
    assert!(
        e.is_transient() && e.message().contains("content-length"),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_chunk_size_with_leading_space_ends_the_body_and_its_connection() {
    let s = server(vec![
        Step::Answer(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n 5\r\nhello\r\n0\r\n\r\n",
        ),
        Step::Answer(OK),
    ])
    .await;
    let h = handler(s.addr);
    // The body is not read as `hello`.
    let first = send(&h, 1, small()).await;
    assert!(!matches!(first.as_deref(), Ok(b"hello")), "{first:?}");
    assert_eq!(send(&h, 2, small()).await.unwrap(), b"ok");
    assert_eq!(s.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_101_is_no_answer_and_its_connection_is_not_kept() {
    let s = server(vec![
        Step::Answer(
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
        ),
        Step::Answer(OK),
    ])
    .await;
    let h = handler(s.addr);
    let e = send(&h, 1, small()).await.unwrap_err();
    assert!(e.is_transient() && e.message().contains("101"), "{e:?}");
    assert_eq!(send(&h, 2, small()).await.unwrap(), b"ok");
    assert_eq!(s.accepted.load(Ordering::SeqCst), 2);
}
