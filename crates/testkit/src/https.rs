//! An HTTPS test server on 127.0.0.1 that answers with a service the test gives.
//!
//! [`HttpsServer::start`] listens on `127.0.0.1:0` with the test certificates of this crate
//! (`crates/testkit/certs`, [`cert`]): `server.pem` (valid for `localhost` and `127.0.0.1`,
//! signed by `ca.pem`), rustls on orderly-protocol's crypto provider, HTTP/1.1 or HTTP/2 as the
//! client's ALPN asks (hyper). [`HttpsOptions`] make it require client certificates signed by
//! `ca.pem` (mTLS) or hold each handshake back until the test allows it. A client trusts the
//! server with `cert("ca.pem")` and authenticates with `cert("client.pem")` /
//! `cert("client.key")`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use orderly_protocol::tls::rustls::ServerConfig;
use orderly_protocol::tls::rustls::pki_types::pem::PemObject;
use orderly_protocol::tls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use orderly_protocol::tls::rustls::server::WebPkiClientVerifier;
use orderly_protocol::tls::{TlsProvider, root_store_from_pem};
use tokio::sync::{Semaphore, mpsc};

use crate::{Error, Result};

/// The path of a test certificate or key of this crate: `ca.pem`, `other-ca.pem` (a CA that
/// signed nothing here), `server.pem`, `server.key`, `client.pem`, `client.key`
/// (`crates/testkit/certs/README.md` says what each is).
pub fn cert(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("certs")
        .join(name)
}

/// How an [`HttpsServer`] treats its connections. The default: no client certificate asked
/// for, every handshake at once.
#[derive(Debug, Default, Clone)]
pub struct HttpsOptions {
    /// Require a client certificate signed by `ca.pem` (mTLS); a client without one fails the
    /// handshake.
    pub client_auth: bool,
    /// Each accepted connection takes one permit of this semaphore (and keeps it) before its
    /// handshake: the test adds permits to let handshakes go on.
    pub handshake_permits: Option<Arc<Semaphore>>,
}

/// A running HTTPS test server. It serves until the test's runtime ends, whether or not this
/// value is kept.
#[derive(Debug)]
pub struct HttpsServer {
    addr: SocketAddr,
    accepted: mpsc::UnboundedReceiver<()>,
    failed: Arc<AtomicUsize>,
}

impl HttpsServer {
    /// Starts a server on `127.0.0.1:0` that answers every request with `service(request)`.
    ///
    /// Must be called within a Tokio runtime. Fails when the certificates cannot be read, the
    /// crypto provider does not run on this CPU, or no port can be bound.
    pub async fn start<S, F>(options: HttpsOptions, service: S) -> Result<HttpsServer>
    where
        S: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
        F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
    {
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config(&options)?));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| Error::io("binding", Path::new("127.0.0.1:0"), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("local address of", Path::new("127.0.0.1:0"), e))?;
        let (accepted_tx, accepted) = mpsc::unbounded_channel();
        let failed = Arc::new(AtomicUsize::new(0));
        let failed_count = failed.clone();
        let service = Arc::new(service);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = accepted_tx.send(());
                let (acceptor, failed, service) =
                    (acceptor.clone(), failed_count.clone(), service.clone());
                let permits = options.handshake_permits.clone();
                tokio::spawn(async move {
                    if let Some(permits) = permits {
                        let Ok(permit) = permits.acquire().await else {
                            return;
                        };
                        permit.forget();
                    }
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        failed.fetch_add(1, Ordering::SeqCst);
                        return;
                    };
                    let svc = hyper::service::service_fn(move |req| {
                        let answer = service(req);
                        async move { Ok::<_, Infallible>(answer.await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        Ok(HttpsServer {
            addr,
            accepted,
            failed,
        })
    }

    /// The address it listens on (`127.0.0.1`, a free port).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// How many TLS handshakes failed (a client that did not trust the server, or had no
    /// certificate for an mTLS server).
    pub fn failed_handshakes(&self) -> usize {
        self.failed.load(Ordering::SeqCst)
    }

    /// Waits for the next connection it accepts (announced before its handshake; each accepted
    /// connection once, in order). False when it accepts no more (its listener failed).
    pub async fn accepted(&mut self) -> bool {
        self.accepted.recv().await.is_some()
    }
}

/// The rustls server configuration: `server.pem` with its key, ALPN `h2` and `http/1.1`, and with
/// `client_auth` a verifier of client certificates against `ca.pem`.
fn server_config(options: &HttpsOptions) -> Result<ServerConfig> {
    let failed = |what: &str, e: &dyn std::fmt::Display| Error::Failed {
        what: format!("HTTPS test server: {what}"),
        detail: e.to_string(),
    };
    let provider = TlsProvider::detect()
        .crypto_provider()
        .map_err(|e| failed("crypto provider", &e))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert("server.pem"))
        .and_then(|certs| certs.collect())
        .map_err(|e| failed("reading server.pem", &e))?;
    let key = PrivateKeyDer::from_pem_file(cert("server.key"))
        .map_err(|e| failed("reading server.key", &e))?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| failed("protocol versions", &e))?;
    let builder = if options.client_auth {
        let ca = cert("ca.pem");
        let pem = std::fs::read(&ca).map_err(|e| Error::io("reading", &ca, e))?;
        let roots = root_store_from_pem(&pem).map_err(|e| failed("reading ca.pem", &e))?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| failed("client certificate verifier", &e))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| failed("server certificate", &e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
