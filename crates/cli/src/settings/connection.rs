//! The connection to the brokers: the SASL and TLS flags every command shares, the one builder
//! that turns them into `ConnectionConfig` settings, and the `--version` text naming the TLS
//! provider this CPU gets.

use std::path::PathBuf;

use anyhow::{Context, Result};
use orderly_protocol::ConnectionConfig;
use serde::{Deserialize, Serialize};

use super::alternatives::variables_beside_flags;
use super::choice::{SaslMechanism, TlsProvider};
use super::secret::{Secret, secret};

/// SASL and TLS to the brokers: flags (and `ORDERLY_*` variables) of every command that connects,
/// and keys of `orderly consume`'s `--config` file.
#[derive(clap::Args, Deserialize, Serialize, Default, Debug, Clone)]
#[serde(rename_all = "kebab-case")]
pub struct ConnectionFlags {
    /// SASL mechanism, in any case. Default none.
    #[arg(long, env = "ORDERLY_SASL_MECHANISM", ignore_case = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_mechanism: Option<SaslMechanism>,
    /// SASL user name.
    #[arg(long, env = "ORDERLY_SASL_USERNAME")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_username: Option<String>,
    /// SASL password; prefer ORDERLY_SASL_PASSWORD or --sasl-password-file (a flag shows in `ps`).
    #[arg(long, env = "ORDERLY_SASL_PASSWORD", hide_env_values = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_password: Option<Secret>,
    /// File holding the SASL password (trailing newline ignored).
    #[arg(long, env = "ORDERLY_SASL_PASSWORD_FILE", value_name = "FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_password_file: Option<PathBuf>,

    /// TLS to the brokers, trusting the public web PKI (compiled in) unless --tls-ca-file is
    /// given. Default false.
    #[arg(
        long,
        env = "ORDERLY_TLS",
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<bool>,
    /// TLS to the brokers: trust the CA certificates in this PEM file (implies --tls; certificate
    /// chain and host name are verified; the crypto provider is picked for the CPU, see
    /// `orderly --version`).
    #[arg(long, env = "ORDERLY_TLS_CA_FILE", value_name = "FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
    /// TLS: verify broker certificates against this name instead of the host reached.
    #[arg(long, env = "ORDERLY_TLS_SERVER_NAME")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_server_name: Option<String>,
    /// TLS crypto provider: auto (graviola where the CPU has its features, else rustcrypto),
    /// graviola or rustcrypto. Default auto.
    #[arg(
        long,
        env = "ORDERLY_TLS_PROVIDER",
        value_name = "NAME",
        ignore_case = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_provider: Option<TlsProvider>,
}

/// The SASL password sources: alternatives, a flag of one drops a variable of the other.
const PASSWORD: &[&str] = &["sasl-password", "sasl-password-file"];

impl ConnectionFlags {
    /// The password given as a flag wins over the other source given as a variable
    /// (`--sasl-password-file` beats `ORDERLY_SASL_PASSWORD`); see
    /// [`super::ConsumeOpts::prefer_flags`].
    pub fn prefer_flags(&mut self, m: &clap::ArgMatches) {
        for key in variables_beside_flags(m, PASSWORD) {
            self.clear(key);
        }
    }

    /// Forgets the setting of `key` (a key of this type's file settings); other keys are not
    /// this type's and are ignored.
    pub(super) fn clear(&mut self, key: &str) {
        match key {
            "sasl-password" => self.sasl_password = None,
            "sasl-password-file" => self.sasl_password_file = None,
            _ => {}
        }
    }

    /// Sets `c`'s SASL and TLS settings from these flags.
    pub fn apply(&self, c: &mut ConnectionConfig) -> Result<()> {
        let password = secret(
            "--sasl-password",
            self.sasl_password.as_ref(),
            "--sasl-password-file",
            self.sasl_password_file.as_deref(),
        )?;
        if let Some(mech) = self.sasl_mechanism {
            let username = self
                .sasl_username
                .clone()
                .context("--sasl-mechanism needs --sasl-username")?;
            let password = password.context(
                "--sasl-mechanism needs a password: ORDERLY_SASL_PASSWORD or --sasl-password-file",
            )?;
            c.sasl = Some(mech.with(username, password));
        }
        if self.tls == Some(true) || self.tls_ca_file.is_some() {
            self.apply_tls(c)?;
        } else {
            anyhow::ensure!(
                self.tls_server_name.is_none(),
                "--tls-server-name needs --tls or --tls-ca-file"
            );
        }
        Ok(())
    }

    #[cfg(feature = "tls")]
    fn apply_tls(&self, c: &mut ConnectionConfig) -> Result<()> {
        use orderly_protocol::tls::{TlsConfig, public_root_store, root_store_from_pem};
        let provider = self.tls_provider.unwrap_or_default().pick();
        let roots = match &self.tls_ca_file {
            Some(path) => {
                let pem = std::fs::read(path)
                    .with_context(|| format!("cannot read --tls-ca-file {}", path.display()))?;
                root_store_from_pem(&pem)
                    .with_context(|| format!("--tls-ca-file {}", path.display()))?
            }
            None => public_root_store(),
        };
        let mut t = TlsConfig::with_root_store_and_provider(roots, provider)?;
        if let Some(name) = &self.tls_server_name {
            t = t.server_name(name);
        }
        tracing::info!(provider = %provider, "TLS to the brokers");
        c.tls = Some(t);
        Ok(())
    }

    #[cfg(not(feature = "tls"))]
    #[allow(clippy::unused_self, clippy::needless_pass_by_ref_mut)]
    fn apply_tls(&self, _c: &mut ConnectionConfig) -> Result<()> {
        anyhow::bail!(
            "--tls, --tls-ca-file: this orderly was built without its default `tls` feature; rebuild it with default features"
        )
    }
}

/// `--version` output: the version and the TLS provider this machine's CPU gets.
#[cfg(feature = "tls")]
pub fn long_version() -> String {
    use orderly_protocol::tls::TlsProvider;
    let detected = TlsProvider::detect();
    let all: Vec<&str> = TlsProvider::ALL.iter().map(|p| p.name()).collect();
    format!(
        "{}\ntls: rustls, providers {} (auto picks {detected} on this CPU)",
        env!("CARGO_PKG_VERSION"),
        all.join(", ")
    )
}

/// `--version` output: the version, and that this build has no TLS.
#[cfg(not(feature = "tls"))]
pub fn long_version() -> String {
    format!("{}\ntls: not built in", env!("CARGO_PKG_VERSION"))
}
