//! TLS flags of `orderly run` (`--tls`, `--tls-ca-file`, `--tls-server-name`, `--tls-provider`) and the `--version` text naming the TLS provider this CPU gets.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use orderly_protocol::tls::{TlsConfig, TlsProvider, public_root_store, root_store_from_pem};

/// TLS to the brokers. The certificate chain and the host name are always verified.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// Connect with TLS, trusting the public web PKI (compiled in) unless --tls-ca-file is given.
    #[arg(long, env = "ORDERLY_TLS")]
    pub tls: bool,
    /// PEM file of the CA certificates to trust instead of the public roots (implies --tls).
    #[arg(long, env = "ORDERLY_TLS_CA_FILE", value_name = "PEM")]
    pub tls_ca_file: Option<PathBuf>,
    /// Verify every broker's certificate against this name instead of the host it is reached at.
    #[arg(long, env = "ORDERLY_TLS_SERVER_NAME", value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// Crypto provider: auto (graviola where the CPU has its features, else rustcrypto),
    /// graviola or rustcrypto.
    #[arg(long, env = "ORDERLY_TLS_PROVIDER", value_name = "NAME")]
    pub tls_provider: Option<String>,
}

impl TlsArgs {
    /// The connection's TLS settings, or `None` for plaintext.
    pub fn config(&self) -> Result<Option<TlsConfig>> {
        build(
            self.tls,
            self.tls_ca_file.as_deref(),
            self.tls_server_name.as_deref(),
            self.tls_provider.as_deref(),
        )
    }
}

/// TLS settings from their parts: `None` unless `enabled` or a CA file is given.
pub fn build(
    enabled: bool,
    ca: Option<&Path>,
    server_name: Option<&str>,
    provider: Option<&str>,
) -> Result<Option<TlsConfig>> {
    if !enabled && ca.is_none() {
        return Ok(None);
    }
    let provider = match provider {
        None | Some("auto") => TlsProvider::detect(),
        Some(name) => name.parse::<TlsProvider>()?,
    };
    let roots = match ca {
        Some(path) => {
            let pem = std::fs::read(path)
                .with_context(|| format!("cannot read --tls-ca-file {}", path.display()))?;
            root_store_from_pem(&pem)
                .with_context(|| format!("--tls-ca-file {}", path.display()))?
        }
        None => public_root_store(),
    };
    let mut config = TlsConfig::with_root_store_and_provider(roots, provider)?;
    if let Some(name) = server_name {
        config = config.server_name(name);
    }
    tracing::info!(provider = %provider, "TLS to the brokers");
    Ok(Some(config))
}

/// `--version` output: the version and the TLS provider this machine's CPU gets.
pub fn long_version() -> String {
    let detected = TlsProvider::detect();
    let all: Vec<&str> = TlsProvider::ALL.iter().map(|p| p.name()).collect();
    format!(
        "{}\ntls: rustls, providers {} (auto picks {detected} on this CPU)",
        env!("CARGO_PKG_VERSION"),
        all.join(", ")
    )
}
