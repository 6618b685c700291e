//! TLS for broker connections (feature `tls`, on by default): rustls on a pure-Rust crypto provider chosen for the CPU at start-up, the server certificate and host name always verified.
//!
//! Two providers are built in, neither compiles C:
//!
//! - [`TlsProvider::Graviola`] (`rustls-graviola`): fast, formally verified assembly, but only on
//!   x86_64 with AES-NI, PCLMULQDQ, AVX, AVX2, BMI1 and ADX (Haswell/Zen and later) and on aarch64
//!   with the AES, PMULL and SHA2 extensions (not, for example, a Raspberry Pi 4's Cortex-A72).
//! - [`TlsProvider::RustCrypto`] (`rustls-rustcrypto`): portable Rust for every CPU, slower.
//!
//! [`TlsProvider::detect`] picks graviola where the running CPU has what it needs and RustCrypto
//! everywhere else, so an edge node without the crypto extensions still connects.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

use crate::error::{Error, Result};

/// The rustls version this crate is built with, for callers that build their own
/// [`ClientConfig`] (client certificates, custom verifiers).
pub use tokio_rustls::rustls;

/// A rustls crypto provider built into this crate. See the module documentation for what each needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TlsProvider {
    /// `rustls-graviola`: fast assembly, formally verified, for recent x86_64 and aarch64 CPUs.
    Graviola,
    /// `rustls-rustcrypto`: portable pure Rust (the RustCrypto crates), for every CPU.
    RustCrypto,
}

impl TlsProvider {
    /// Every provider, in order of preference.
    pub const ALL: [TlsProvider; 2] = [TlsProvider::Graviola, TlsProvider::RustCrypto];

    /// The fastest provider the running CPU supports: graviola where its CPU features are present,
    /// RustCrypto otherwise.
    pub fn detect() -> Self {
        if TlsProvider::Graviola.is_supported() {
            TlsProvider::Graviola
        } else {
            TlsProvider::RustCrypto
        }
    }

    /// Whether this provider runs on this CPU (checked at run time, not at build time).
    pub fn is_supported(self) -> bool {
        match self {
            TlsProvider::Graviola => graviola_cpu_supported(),
            TlsProvider::RustCrypto => true,
        }
    }

    /// The name used in configuration and reports: `graviola` or `rustcrypto`.
    pub fn name(self) -> &'static str {
        match self {
            TlsProvider::Graviola => "graviola",
            TlsProvider::RustCrypto => "rustcrypto",
        }
    }

    /// The rustls crypto provider, or [`Error::Config`] when this CPU cannot run it (graviola would
    /// abort the process on its first operation).
    pub fn crypto_provider(self) -> Result<Arc<CryptoProvider>> {
        if !self.is_supported() {
            return Err(Error::Config(format!(
                "TLS provider {} needs CPU features this machine lacks ({}); use {} (or auto)",
                self.name(),
                GRAVIOLA_NEEDS,
                TlsProvider::RustCrypto.name()
            )));
        }
        Ok(Arc::new(match self {
            TlsProvider::Graviola => graviola_provider()?,
            TlsProvider::RustCrypto => rustls_rustcrypto::provider(),
        }))
    }
}

impl fmt::Display for TlsProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for TlsProvider {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        TlsProvider::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                Error::Config(format!(
                    "unknown TLS provider {s:?} (expected graviola or rustcrypto)"
                ))
            })
    }
}

/// What graviola needs of the CPU, for error messages and documentation.
#[cfg(target_arch = "x86_64")]
pub const GRAVIOLA_NEEDS: &str = "x86_64 with aes, pclmulqdq, avx, avx2, bmi1 and adx";
/// What graviola needs of the CPU, for error messages and documentation.
#[cfg(target_arch = "aarch64")]
pub const GRAVIOLA_NEEDS: &str = "aarch64 with neon, aes, pmull and sha2";
/// What graviola needs of the CPU, for error messages and documentation.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const GRAVIOLA_NEEDS: &str = "x86_64 or aarch64 (this build is for another architecture)";

/// Exactly the features graviola asserts on its first operation (its `verify_cpu_features`).
#[cfg(target_arch = "x86_64")]
fn graviola_cpu_supported() -> bool {
    std::arch::is_x86_feature_detected!("aes")
        && std::arch::is_x86_feature_detected!("pclmulqdq")
        && std::arch::is_x86_feature_detected!("avx")
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("bmi1")
        && std::arch::is_x86_feature_detected!("adx")
}

/// Exactly the features graviola asserts on its first operation (its `verify_cpu_features`).
#[cfg(target_arch = "aarch64")]
fn graviola_cpu_supported() -> bool {
    std::arch::is_aarch64_feature_detected!("neon")
        && std::arch::is_aarch64_feature_detected!("aes")
        && std::arch::is_aarch64_feature_detected!("pmull")
        && std::arch::is_aarch64_feature_detected!("sha2")
}

/// graviola is built for x86_64 and aarch64 only.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn graviola_cpu_supported() -> bool {
    false
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn graviola_provider() -> Result<CryptoProvider> {
    Ok(rustls_graviola::default_provider())
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn graviola_provider() -> Result<CryptoProvider> {
    Err(Error::Config(format!(
        "TLS provider graviola needs {GRAVIOLA_NEEDS}"
    )))
}

/// Parses one or more PEM `BEGIN CERTIFICATE` blocks into a root store; no certificate is an error.
pub fn root_store_from_pem(pem: &[u8]) -> Result<RootCertStore> {
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
    Ok(roots)
}

/// The public web PKI's roots (Mozilla's root programme, compiled in from `webpki-roots`).
pub fn public_root_store() -> RootCertStore {
    RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    }
}

/// TLS settings of a connection. `Debug` prints no key material.
///
/// The server certificate is verified against the configured roots and the broker's host name (or IP
/// address), as given in the bootstrap list or advertised in Metadata, unless
/// [`TlsConfig::server_name`] overrides it.
#[derive(Clone)]
pub struct TlsConfig {
    client: Arc<ClientConfig>,
    server_name: Option<String>,
    provider: Option<TlsProvider>,
}

impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("server_name", &self.server_name)
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

impl TlsConfig {
    /// Trusts exactly the CA certificates in `pem` (one or more `BEGIN CERTIFICATE` blocks), on the
    /// provider [`TlsProvider::detect`] picks.
    pub fn with_root_certificates_pem(pem: &[u8]) -> Result<Self> {
        Self::with_root_store(root_store_from_pem(pem)?)
    }

    /// Trusts the public web PKI (Mozilla's root programme, compiled in from `webpki-roots`, so it
    /// works in an empty container image too), on the provider [`TlsProvider::detect`] picks.
    pub fn with_public_roots() -> Result<Self> {
        Self::with_root_store(public_root_store())
    }

    /// Trusts the certificates of `roots`, on the provider [`TlsProvider::detect`] picks.
    pub fn with_root_store(roots: RootCertStore) -> Result<Self> {
        Self::with_root_store_and_provider(roots, TlsProvider::detect())
    }

    /// Trusts the certificates of `roots` with rustls's safe default protocol versions (TLS 1.2 and
    /// 1.3) on `provider`, and no client certificate. Fails when this CPU cannot run `provider`.
    pub fn with_root_store_and_provider(
        roots: RootCertStore,
        provider: TlsProvider,
    ) -> Result<Self> {
        let client = ClientConfig::builder_with_provider(provider.crypto_provider()?)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(format!("TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut config = Self::from_client_config(Arc::new(client));
        config.provider = Some(provider);
        Ok(config)
    }

    /// Uses a caller-built rustls configuration as is (client certificates, custom verifiers, another
    /// crypto provider).
    pub fn from_client_config(client: Arc<ClientConfig>) -> Self {
        Self {
            client,
            server_name: None,
            provider: None,
        }
    }

    /// The built-in provider this configuration uses (`None` for [`TlsConfig::from_client_config`]).
    pub fn provider(&self) -> Option<TlsProvider> {
        self.provider
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
    fn providers_parse_by_name_and_detection_picks_a_supported_one() {
        for p in TlsProvider::ALL {
            assert_eq!(p.name().parse::<TlsProvider>().ok(), Some(p));
            assert_eq!(p.to_string(), p.name());
        }
        assert_eq!(
            "GRAVIOLA".parse::<TlsProvider>().ok(),
            Some(TlsProvider::Graviola)
        );
        assert!(matches!(
            "ring".parse::<TlsProvider>(),
            Err(Error::Config(_))
        ));
        let detected = TlsProvider::detect();
        assert!(detected.is_supported());
        // Graviola is chosen exactly when the CPU supports it.
        assert_eq!(
            detected == TlsProvider::Graviola,
            TlsProvider::Graviola.is_supported()
        );
        assert!(TlsProvider::RustCrypto.is_supported());
    }

    #[test]
    fn every_supported_provider_builds_a_config_and_an_unsupported_one_is_refused() {
        for p in TlsProvider::ALL {
            let r = TlsConfig::with_root_store_and_provider(public_root_store(), p);
            if p.is_supported() {
                let cfg = r.unwrap();
                assert_eq!(cfg.provider(), Some(p));
                assert!(!cfg.client.crypto_provider().cipher_suites.is_empty());
            } else {
                assert!(matches!(r, Err(Error::Config(_))), "{p}");
            }
        }
        assert!(TlsConfig::with_public_roots().unwrap().provider().is_some());
    }

    #[test]
    fn pem_without_certificates_is_a_config_error() {
        let err = TlsConfig::with_root_certificates_pem(b"not a pem").err();
        assert!(matches!(err, Some(Error::Config(_))), "{err:?}");
    }
}
