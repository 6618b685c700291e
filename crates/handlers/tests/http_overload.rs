//! The adaptive limit of `HttpHandler` against a real server that sheds load: fast 429 and 503
//! answers lower the limit on requests in flight instead of raising it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use orderly_engine::{Attempt, Handler, HandlerError, Record, TopicPartition};
use orderly_handlers::{HttpConfig, HttpHandler, SessionRouter};

/// A server that answers every request with `status` after 50 ms (a steady latency, which
/// the limit would grow on if the answers counted as latency samples).
async fn shedding_server(status: StatusCode) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |_req: Request<hyper::body::Incoming>| async move {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        let mut r = Response::new(Full::new(Bytes::from_static(b"busy")));
                        *r.status_mut() = status;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_shedding_lowers_the_adaptive_limit() {
    for status in [
        StatusCode::TOO_MANY_REQUESTS,
        StatusCode::SERVICE_UNAVAILABLE,
    ] {
        let addr = shedding_server(status).await;
        let mut cfg = HttpConfig::new(format!("http://{addr}/in"));
        cfg.adaptive_concurrency = true;
        // Without the endpoint circuit, which would hold the attempts once only 503s come: each
        // answer ends its attempt, and this test is about the limit.
        cfg.wait_while_unreachable = false;
        let h = Arc::new(HttpHandler::new(cfg, SessionRouter::default()).unwrap());
        assert_eq!(h.concurrency_limit(), orderly_handlers::limit::START);
        let mut tasks = Vec::new();
        for c in 0..64 {
            let h = h.clone();
            tasks.push(tokio::spawn(async move {
                for i in 0..6 {
                    let r = Record::new(
                        TopicPartition::new("t", 0),
                        c * 1000 + i,
                        Some(Bytes::from_static(b"k")),
                        Some(Bytes::from_static(b"v")),
                    );
                    let out = h.handle(&r, Attempt::FIRST).await;
                    assert!(
                        matches!(out, Err(HandlerError::Transient { .. })),
                        "{out:?}"
                    );
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(
            h.concurrency_limit(),
            orderly_handlers::limit::FLOOR,
            "after {status}"
        );
    }
}
