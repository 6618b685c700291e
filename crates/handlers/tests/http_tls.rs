//! `HttpHandler` on `https://` against a real rustls server started here (certificates in
//! `tests/certs`): the server certificate is verified against the CA file, a server that
//! requires client certificates gets one (mTLS) and refuses a client without, HTTP/2 by ALPN.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use orderly_engine::{Attempt, Handler, HandlerError, Record, TopicPartition};
use orderly_handlers::{HttpConfig, HttpHandler, SessionRouter};
use orderly_protocol::tls::rustls::ServerConfig;
use orderly_protocol::tls::rustls::pki_types::pem::PemObject;
use orderly_protocol::tls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use orderly_protocol::tls::rustls::server::WebPkiClientVerifier;
use orderly_protocol::tls::{TlsProvider, root_store_from_pem};

fn cert(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/certs")
        .join(name)
}

/// What the server saw: the HTTP versions of the requests its application code received.
type Seen = Arc<Mutex<Vec<hyper::Version>>>;

/// An HTTPS server on 127.0.0.1 with `server.pem`; with `mtls`, client certificates signed by
/// `ca.pem` are required. Returns its address, the requests seen and the handshakes that failed.
async fn https_server(mtls: bool) -> (SocketAddr, Seen, Arc<AtomicUsize>) {
    let provider = TlsProvider::detect().crypto_provider().unwrap();
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert("server.pem"))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(cert("server.key")).unwrap();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = if mtls {
        let roots = root_store_from_pem(&std::fs::read(cert("ca.pem")).unwrap()).unwrap();
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap();
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut config: ServerConfig = builder.with_single_cert(chain, key).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let failed = Arc::new(AtomicUsize::new(0));
    let (seen2, failed2) = (seen.clone(), failed.clone());
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let (acceptor, seen, failed) = (acceptor.clone(), seen2.clone(), failed2.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    failed.fetch_add(1, Ordering::SeqCst);
                    return;
                };
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        seen.lock().unwrap().push(req.version());
                        let _ = req.into_body().collect().await;
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, seen, failed)
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
    let (addr, seen, _) = https_server(false).await;
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
    let (addr, seen, _) = https_server(false).await;
    let mut c = config(addr, "localhost");
    c.ca_file = Some(cert("ca.pem"));
    c.h2c = true;
    let h = HttpHandler::new(c, SessionRouter::default()).unwrap();
    assert_eq!(h.handle(&record(), Attempt::FIRST).await, Ok(()));
    assert_eq!(seen.lock().unwrap().as_slice(), [hyper::Version::HTTP_2]);
}

#[tokio::test]
async fn an_mtls_server_gets_the_client_certificate_and_refuses_a_client_without() {
    let (addr, seen, failed) = https_server(true).await;
    let mut c = config(addr, "localhost");
    c.ca_file = Some(cert("ca.pem"));
    c.client_cert = Some(cert("client.pem"));
    c.client_key = Some(cert("client.key"));
    let h = HttpHandler::new(c, SessionRouter::default()).unwrap();
    assert_eq!(h.handle(&record(), Attempt::FIRST).await, Ok(()));
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(failed.load(Ordering::SeqCst), 0);

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
    assert_eq!(failed.load(Ordering::SeqCst), 1);
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
