//! The webhook's connections: TCP for `http://`, rustls over TCP for `https://` (orderly-protocol's
//! pure-Rust crypto providers, no C), each connection tagged with how many answers it carried so a
//! failure on a reused connection can be told from one on a fresh connection.

use std::fmt;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use orderly_protocol::tls::rustls::ClientConfig;
use orderly_protocol::tls::rustls::pki_types::pem::PemObject;
use orderly_protocol::tls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use orderly_protocol::tls::{TlsProvider, public_root_store, root_store_from_pem};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Answers carried by one connection (a connection `extra`): more than zero means the connection
/// came from the pool.
#[derive(Debug, Clone, Default)]
pub(crate) struct Uses(Arc<AtomicU64>);

impl Uses {
    /// Counts one answer.
    pub(crate) fn answered(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the connection carried an answer before.
    pub(crate) fn reused(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 0
    }

    /// The counter of the connection `c` describes.
    pub(crate) fn of(c: &Connected) -> Option<Self> {
        let mut ext = hyper::http::Extensions::new();
        c.get_extras(&mut ext);
        ext.get::<Uses>().cloned()
    }
}

/// Where the TLS material of the HTTPS client comes from.
pub(crate) struct TlsFiles<'a> {
    pub ca_file: Option<&'a Path>,
    pub client_cert: Option<&'a Path>,
    pub client_key: Option<&'a Path>,
    pub h2: bool,
}

/// The rustls client configuration: the CA file's certificates (or the public web PKI, compiled
/// in), a client certificate when given, ALPN `h2` or `http/1.1`.
pub(crate) fn tls_client(files: &TlsFiles<'_>) -> Result<ClientConfig, String> {
    let read = |flag: &str, p: &Path| {
        std::fs::read(p).map_err(|e| format!("cannot read {flag} {}: {e}", p.display()))
    };
    let roots = match files.ca_file {
        Some(p) => root_store_from_pem(&read("the CA file", p)?)
            .map_err(|e| format!("CA file {}: {e}", p.display()))?,
        None => public_root_store(),
    };
    let provider = TlsProvider::detect()
        .crypto_provider()
        .map_err(|e| e.to_string())?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots);
    let mut config = match (files.client_cert, files.client_key) {
        (Some(cert), Some(key)) => {
            let pem = read("the client certificate", cert)?;
            let chain = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("client certificate {}: {e}", cert.display()))?;
            if chain.is_empty() {
                return Err(format!(
                    "client certificate {}: no certificate in the PEM file",
                    cert.display()
                ));
            }
            let key_pem = read("the client key", key)?;
            let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
                .map_err(|e| format!("client key {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| format!("client certificate and key: {e}"))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => return Err("a client certificate needs both the certificate and its key".into()),
    };
    config.alpn_protocols = vec![if files.h2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    Ok(config)
}

/// `http://` over TCP, `https://` over rustls; both with `TCP_NODELAY`, a connect timeout (name
/// resolution included) and, for TLS, a handshake timeout. Running out of either is a failure to
/// connect, as a refused connection is.
#[derive(Clone)]
pub(crate) struct Connector {
    tcp: HttpConnector,
    connect_timeout: Duration,
    handshake_timeout: Duration,
    tls: Option<TlsConnector>,
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connector")
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Connector {
    pub(crate) fn new(
        connect_timeout: Duration,
        handshake_timeout: Duration,
        tls: Option<ClientConfig>,
    ) -> Self {
        let mut tcp = HttpConnector::new();
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(Some(connect_timeout));
        tcp.enforce_http(false);
        Self {
            tcp,
            connect_timeout,
            handshake_timeout,
            tls: tls.map(|c| TlsConnector::from(Arc::new(c))),
        }
    }
}

/// A new connection's stream, before either HTTP client wraps it.
pub(crate) enum RawIo {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// The HTTP/1.1 client reads and writes a connection through tokio's traits.
impl tokio::io::AsyncRead for RawIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            RawIo::Plain(s) => Pin::new(s).poll_read(cx, buf),
            RawIo::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for RawIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            RawIo::Plain(s) => Pin::new(s).poll_write(cx, buf),
            RawIo::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            RawIo::Plain(s) => Pin::new(s).poll_flush(cx),
            RawIo::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            RawIo::Plain(s) => Pin::new(s).poll_shutdown(cx),
            RawIo::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            RawIo::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            RawIo::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            RawIo::Plain(s) => s.is_write_vectored(),
            RawIo::Tls(s) => s.is_write_vectored(),
        }
    }
}

impl Connector {
    /// Connects to the URI's host: TCP (with `TCP_NODELAY`, within the connect timeout), then
    /// TLS for `https://` (server name from the URI, ALPN as configured, within the handshake
    /// timeout).
    pub(crate) fn connect_io(
        &self,
        uri: Uri,
    ) -> impl Future<Output = Result<RawIo, BoxError>> + Send + 'static {
        let https = uri.scheme_str() == Some("https");
        let tcp = tower_service::Service::call(&mut self.tcp.clone(), uri.clone());
        let tls = self.tls.clone();
        let (connect_timeout, handshake_timeout) = (self.connect_timeout, self.handshake_timeout);
        async move {
            let tcp = tokio::time::timeout(connect_timeout, tcp)
                .await
                .map_err(|_| format!("connect timed out after {connect_timeout:?}"))??
                .into_inner();
            if !https {
                return Ok(RawIo::Plain(tcp));
            }
            let tls = tls.ok_or("https:// needs TLS settings")?;
            let host = uri.host().unwrap_or_default();
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let name = ServerName::try_from(host.to_owned())
                .map_err(|e| format!("invalid server name {host:?}: {e}"))?;
            let tls = tokio::time::timeout(handshake_timeout, tls.connect(name, tcp))
                .await
                .map_err(|_| format!("TLS handshake timed out after {handshake_timeout:?}"))??;
            Ok(RawIo::Tls(Box::new(tls)))
        }
    }
}

impl tower_service::Service<Uri> for Connector {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let io = self.connect_io(uri);
        Box::pin(async move {
            let io = match io.await? {
                RawIo::Plain(s) => Io::Plain(TokioIo::new(s)),
                RawIo::Tls(s) => Io::Tls(Box::new(TokioIo::new(*s))),
            };
            Ok(Stream {
                io,
                uses: Uses::default(),
            })
        })
    }
}

enum Io {
    Plain(TokioIo<TcpStream>),
    Tls(Box<TokioIo<TlsStream<TcpStream>>>),
}

/// One connection to the endpoint.
pub(crate) struct Stream {
    io: Io,
    uses: Uses,
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        let c = match &self.io {
            Io::Plain(s) => s.connected(),
            Io::Tls(s) => {
                let (tcp, session) = s.inner().get_ref();
                let c = tcp.connected();
                if session.alpn_protocol() == Some(b"h2") {
                    c.negotiated_h2()
                } else {
                    c
                }
            }
        };
        c.extra(self.uses.clone())
    }
}

impl hyper::rt::Read for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
}

/// An error's text with its sources (hyper-util's own text is only "client error (Connect)").
pub(crate) fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        if !text.contains(&t) {
            text = format!("{text}: {t}");
        }
        src = s.source();
    }
    text
}
