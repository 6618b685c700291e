//! TLS for broker connections (feature `tls`): rustls with the ring provider, the server certificate verified against given roots.

use std::fmt;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

use crate::error::{Error, Result};

/// The rustls version this crate is built with, for callers that build their own
/// [`ClientConfig`] (client certificates, custom verifiers).
pub use tokio_rustls::rustls;

/// TLS settings of a connection. `Debug` prints no key material.
///
/// The server certificate is verified against the configured roots and the broker's host name (or IP
/// address), as given in the bootstrap list or advertised in Metadata, unless
/// [`TlsConfig::server_name`] overrides it.
#[derive(Clone)]
pub struct TlsConfig {
    client: Arc<ClientConfig>,
    server_name: Option<String>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Trusts exactly the CA certificates in `pem` (one or more `BEGIN CERTIFICATE` blocks).
    pub fn with_root_certificates_pem(pem: &[u8]) -> Result<Self> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| Error::Config(format!("TLS root certificates: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| Error::Config(format!("TLS root certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(Error::Config(
                "TLS root certificates: no certificate in the PEM input".to_string(),
            ));
        }
        Self::with_root_store(roots)
    }

    /// Trusts the certificates of `roots`, with rustls's safe default protocol versions (TLS 1.2
    /// and 1.3) on the ring provider and no client certificate.
    pub fn with_root_store(roots: RootCertStore) -> Result<Self> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self::from_client_config(Arc::new(client)))
    }

    /// Uses a caller-built rustls configuration as is.
    pub fn from_client_config(client: Arc<ClientConfig>) -> Self {
        Self {
            client,
            server_name: None,
        }
    }

    /// Verifies every broker's certificate against `name` instead of the host it is reached at.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// Runs the TLS handshake on `tcp`, connected to `addr` ("host:port").
    ///
    /// A rejected certificate or a failed handshake is [`Error::Tls`] (fatal); an I/O error during
    /// the handshake is [`Error::Connect`] (retriable).
    pub(crate) async fn connect(&self, addr: &str, tcp: TcpStream) -> Result<TlsStream<TcpStream>> {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => host_of(addr).to_string(),
        };
        let server_name = ServerName::try_from(name.clone()).map_err(|e| Error::Tls {
            broker: addr.to_string(),
            detail: format!("invalid server name {name:?}: {e}"),
        })?;
        TlsConnector::from(Arc::clone(&self.client))
            .connect(server_name, tcp)
            .await
            .map_err(|e| {
                // rustls reports its own failures (certificate, alert, protocol) as InvalidData.
                if e.kind() == std::io::ErrorKind::InvalidData {
                    Error::Tls {
                        broker: addr.to_string(),
                        detail: e.to_string(),
                    }
                } else {
                    Error::Connect {
                        broker: addr.to_string(),
                        source: e,
                    }
                }
            })
    }
}

/// The host part of "host:port" or "[v6]:port".
fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    addr.rsplit_once(':').map_or(addr, |(h, _)| h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_is_split_from_port() {
        assert_eq!(host_of("127.0.0.1:9093"), "127.0.0.1");
        assert_eq!(host_of("broker-1.example:9093"), "broker-1.example");
        assert_eq!(host_of("[::1]:9093"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
    }

    #[test]
    fn pem_without_certificates_is_a_config_error() {
        let err = TlsConfig::with_root_certificates_pem(b"not a pem").err();
        assert!(matches!(err, Some(Error::Config(_))), "{err:?}");
    }
}
