//! `HttpHandler` on `https://` against a real rustls server started here (testkit's HTTPS server
//! and certificates): the server certificate is verified against the CA file, a server that
//! requires client certificates gets one (mTLS) and refuses a client without, HTTP/2 by ALPN.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Response;
use orderly_engine::{Attempt, Handler, HandlerError, Record, TopicPartition};
use orderly_handlers::{HttpConfig, HttpHandler, SessionRouter};
use orderly_testkit::https::{HttpsOptions, HttpsServer, cert};

/// What the server saw: the HTTP versions of the requests its application code received.
type Seen = Arc<Mutex<Vec<hyper::Version>>>;

/// An HTTPS server on 127.0.0.1 with `server.pem`; with `mtls`, client certificates signed by
/// `ca.pem` are required. Returns it and the requests seen.
async fn https_server(mtls: bool) -> (HttpsServer, Seen) {
    let seen = Seen::default();
    let options = HttpsOptions {
        client_auth: mtls,
        ..HttpsOptions::default()
    };
    let seen2 = seen.clone();
    let server = HttpsServer::start(options, move |req| {
        let seen = seen2.clone();
        async move {
            seen.lock().unwrap().push(req.version());
            let _ = req.into_body().collect().await;
            Response::new(Full::new(Bytes::new()))
        }
    })
    .await
    .unwrap();
    (server, seen)
}

fn record() -> Record {
    Record::new(
        TopicPartition::new("orders", 0),
        7,
        Some(Bytes::from_static(b"s-1")),
        Some(Bytes::from_static(b"v")),
    )
}

fn config(addr: SocketAddr, host: &str) -> HttpConfig {
    let mut c = HttpConfig::new(format!("https://{host}:{}/in", addr.port()));
    // A refused handshake is reported, not waited out, so the test sees it.
    c.wait_while_unreachable = false;
    c
}

#[tokio::test]
async fn the_server_certificate_is_verified_against_the_ca_file() {
    let (server, seen) = https_server(false).await;
    let addr = server.addr();
    for host in ["127.0.0.1", "localhost"] {
        let mut c = config(addr, host);
        c.ca_file = Some(cert("ca.pem"));
        let h = HttpHandler::new(c, SessionRouter::default()).unwrap();
        assert_eq!(h.handle(&record(), Attempt::FIRST).await, Ok(()), "{host}");
    }
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        [hyper::Version::HTTP_11; 2]
    );

    // A CA that did not sign the server's certificate, and the public roots: refused.
    let mut c = config(addr, "127.0.0.1");
    c.ca_file = Some(cert("other-ca.pem"));
    let h = HttpHandler::new(c, SessionRouter::default()).unwrap();
    let Err(HandlerError::Transient { message: e, .. }) = h.handle(&record(), Attempt::FIRST).await
    else {
        panic!("an untrusted server certificate must fail");
    };
    assert!(e.contains("certificate"), "{e}");
    let h = HttpHandler::new(config(addr, "127.0.0.1"), SessionRouter::default()).unwrap();
    assert!(h.handle(&record(), Attempt::FIRST).await.is_err());
    assert_eq!(seen.lock().unwrap().len(), 2, "no request got through");
}

#[tokio::test]
async fn http2_is_negotiated_by_alpn() {
    let (server, seen) = https_server(false).await;
    let mut c = config(server.addr(), "localhost");
    c.ca_file = Some(cert("ca.pem"));
    c.h2c = true;
    let h = HttpHandler::new(c, SessionRouter::default()).unwrap();
    assert_eq!(h.handle(&record(), Attempt::FIRST).await, Ok(()));
    assert_eq!(seen.lock().unwrap().as_slice(), [hyper::Version::HTTP_2]);
}

#[tokio::test]
async fn an_mtls_server_gets_the_client_certificate_and_refuses_a_client_without() {
    let (server, seen) = https_server(true).await;
    let addr = server.addr();
    let mut c = config(addr, "localhost");
    c.ca_file = Some(cert("ca.pem"));
    c.client_cert = Some(cert("client.pem"));
    c.client_key = Some(cert("client.key"));
    let h = HttpHandler::new(c, SessionRouter::default()).unwrap();
    assert_eq!(h.handle(&record(), Attempt::FIRST).await, Ok(()));
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(server.failed_handshakes(), 0);

    let mut c = config(addr, "localhost");
    c.ca_file = Some(cert("ca.pem"));
    let h = HttpHandler::new(c, SessionRouter::default()).unwrap();
    let r = h.handle(&record(), Attempt::FIRST).await;
    assert!(matches!(r, Err(HandlerError::Transient { .. })), "{r:?}");
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the request without a certificate never reached the service"
    );
    assert_eq!(server.failed_handshakes(), 1);
}

#[test]
fn tls_settings_are_checked_when_the_handler_is_built() {
    let r = SessionRouter::default();
    let mut c = HttpConfig::new("https://localhost:1/in");
    c.ca_file = Some(cert("missing.pem"));
    assert!(HttpHandler::new(c, r.clone()).is_err());
    let mut c = HttpConfig::new("https://localhost:1/in");
    c.client_cert = Some(cert("client.pem"));
    assert!(
        HttpHandler::new(c, r.clone()).is_err(),
        "a certificate needs its key"
    );
    let mut c = HttpConfig::new("http://localhost:1/in");
    c.ca_file = Some(cert("ca.pem"));
    assert!(
        HttpHandler::new(c, r).is_err(),
        "TLS files with http:// are a mistake"
    );
}
