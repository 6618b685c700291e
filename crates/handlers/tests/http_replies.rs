//! `HttpHandler` replies against a real hyper server: the body as the reply (with the
//! `orderly-reply-topic` / `orderly-reply-key` headers, or a default reply topic), the JSON form
//! for several replies, batch answers naming each reply's record, and malformed replies
//! dead-lettering their record instead of being dropped.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::HeaderValue;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use orderly_engine::{Attempt, Handler, HandlerError, Header, Record, Reply, TopicPartition};
use orderly_handlers::{HttpConfig, HttpHandler, SessionRouter};

/// Answers by the record's value (or, for a batch, with a batch answer): see the match arms.
async fn server() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    |req: Request<hyper::body::Incoming>| async move {
                        let batch = req.headers().contains_key("orderly-batch-size");
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let mut r = Response::new(Full::new(Bytes::new()));
                        let h = r.headers_mut();
                        let json = |h: &mut hyper::HeaderMap| {
                            h.insert(
                                "content-type",
                                HeaderValue::from_static("application/vnd.orderly.replies+json"),
                            );
                        };
                        let out: &[u8] = if batch {
                            // Three records, offsets 10..=12: 10 and 12 answered, 11 has none.
                            h.insert("content-type", HeaderValue::from_static("application/json"));
                            br#"{"replies":[{"offset":12,"value":"c"},{"offset":10,"value":"a1"},{"offset":10,"value":"a2","topic":"other"}]}"#
                        } else {
                            match &body[..] {
                                b"plain" => {
                                    h.insert(
                                        "orderly-reply-topic",
                                        HeaderValue::from_static("answers"),
                                    );
                                    h.insert("orderly-reply-key", HeaderValue::from_static("k1"));
                                    b"hello"
                                }
                                b"plain-default" => b"just the body",
                                b"empty-with-topic" => {
                                    h.insert(
                                        "orderly-reply-topic",
                                        HeaderValue::from_static("answers"),
                                    );
                                    b""
                                }
                                b"json" => {
                                    json(h);
                                    br#"{"replies":[{"value":"one"},{"topic":"t2","key":"aGk=","key_encoding":"base64","value":"two","headers":{"h":"v"}}]}"#
                                }
                                b"bad-json" => {
                                    json(h);
                                    br#"{"replies":[{"valu":"typo"}]}"#
                                }
                                b"big" => {
                                    h.insert(
                                        "orderly-reply-topic",
                                        HeaderValue::from_static("answers"),
                                    );
                                    *r.body_mut() = Full::new(Bytes::from(vec![b'x'; 2 << 20]));
                                    return Ok::<_, Infallible>(r);
                                }
                                _ => b"",
                            }
                        };
                        *r.body_mut() = Full::new(Bytes::from_static(out));
                        Ok::<_, Infallible>(r)
                    },
                );
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

fn record(offset: i64, value: &str) -> Record {
    Record::new(
        TopicPartition::new("in", 0),
        offset,
        Some(Bytes::from_static(b"session-1")),
        Some(Bytes::from(value.to_owned())),
    )
}

fn handler(addr: SocketAddr, reply_with_body: bool) -> HttpHandler {
    let mut c = HttpConfig::new(format!("http://{addr}/"));
    c.reply_with_body = reply_with_body;
    HttpHandler::new(c, SessionRouter::default()).unwrap()
}

#[tokio::test]
async fn a_2xx_body_is_the_reply_in_either_form() {
    let addr = server().await;
    let h = handler(addr, false);
    let a = Attempt::FIRST;
    assert_eq!(
        h.handle_replying(&record(1, "plain"), a).await.unwrap(),
        vec![Reply::new("hello").to_topic("answers").with_key("k1")]
    );
    // Without a default reply topic, a body without the header is no reply.
    assert_eq!(
        h.handle_replying(&record(2, "plain-default"), a).await,
        Ok(Vec::new())
    );
    // With the header, even an empty body is a reply.
    assert_eq!(
        h.handle_replying(&record(3, "empty-with-topic"), a)
            .await
            .unwrap(),
        vec![Reply::new(Bytes::new()).to_topic("answers")]
    );
    assert_eq!(
        h.handle_replying(&record(4, "json"), a).await.unwrap(),
        vec![
            Reply::new("one"),
            Reply::new("two")
                .to_topic("t2")
                .with_key("hi")
                .with_header(Header::new("h", "v"))
        ]
    );
    assert!(matches!(
        h.handle_replying(&record(5, "bad-json"), a).await,
        Err(HandlerError::Permanent { message: e, .. }) if e.contains("invalid replies JSON")
    ));
    assert!(matches!(
        h.handle_replying(&record(6, "big"), a).await,
        Err(HandlerError::Permanent { message: e, .. }) if e.contains("larger than")
    ));

    // With a default reply topic, a non-empty body is the reply; an empty one is none.
    let h = handler(addr, true);
    assert_eq!(
        h.handle_replying(&record(7, "plain-default"), a)
            .await
            .unwrap(),
        vec![Reply::new("just the body")]
    );
    assert_eq!(
        h.handle_replying(&record(8, "nothing"), a).await,
        Ok(Vec::new())
    );
}

#[tokio::test]
async fn a_batch_answer_names_the_record_of_each_reply() {
    let addr = server().await;
    let h = handler(addr, true);
    let recs: Vec<Record> = (10..13).map(|o| record(o, "x")).collect();
    let refs: Vec<&Record> = recs.iter().collect();
    let a = h.handle_batch_replying(&refs, Attempt::FIRST).await;
    assert_eq!(a.outcome.done, 3);
    assert_eq!(
        a.replies,
        vec![
            vec![Reply::new("a1"), Reply::new("a2").to_topic("other")],
            vec![],
            vec![Reply::new("c")],
        ]
    );
}
