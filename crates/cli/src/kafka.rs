//! The connection flags the operator commands share (`produce`, `dlq`, `status`) and the connect step.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use orderly_consumer::Cluster;
use orderly_protocol::{ConnectionConfig, ConnectionPool};

use crate::settings::Secret;

/// A connection pool and its metadata cache.
pub type Connected = (Arc<ConnectionPool>, Cluster);

/// Brokers and credentials, shared by `produce`, `dlq` and `status`.
#[derive(clap::Args, Debug, Clone)]
pub struct KafkaArgs {
    /// Bootstrap brokers, `host:port[,host:port]`.
    #[arg(
        long,
        env = "ORDERLY_BOOTSTRAP",
        value_delimiter = ',',
        required = true
    )]
    pub bootstrap: Vec<String>,
    /// SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, env = "ORDERLY_SASL_MECHANISM")]
    pub sasl_mechanism: Option<String>,
    /// SASL user name.
    #[arg(long, env = "ORDERLY_SASL_USERNAME")]
    pub sasl_username: Option<String>,
    /// SASL password (prefer the variable or --sasl-password-file).
    #[arg(long, env = "ORDERLY_SASL_PASSWORD", hide_env_values = true)]
    pub sasl_password: Option<Secret>,
    /// File holding the SASL password.
    #[arg(long, env = "ORDERLY_SASL_PASSWORD_FILE")]
    pub sasl_password_file: Option<PathBuf>,
    /// TLS: trust the CA certificates in this PEM file (certificate and host name are verified).
    #[arg(long, env = "ORDERLY_TLS_CA_FILE")]
    pub tls_ca_file: Option<PathBuf>,
    /// TLS: verify broker certificates against this name.
    #[arg(long, env = "ORDERLY_TLS_SERVER_NAME")]
    pub tls_server_name: Option<String>,
}

impl KafkaArgs {
    /// The connection settings.
    pub fn connection(&self) -> Result<ConnectionConfig> {
        let mut c = ConnectionConfig {
            connect_attempts: 2,
            ..ConnectionConfig::default()
        };
        if let Some(m) = &self.sasl_mechanism {
            let username = self
                .sasl_username
                .clone()
                .context("--sasl-mechanism needs --sasl-username")?;
            let password = match (&self.sasl_password, &self.sasl_password_file) {
                (Some(p), _) => p.expose().to_owned(),
                (None, Some(f)) => std::fs::read_to_string(f)
                    .with_context(|| format!("cannot read {}", f.display()))?
                    .trim_end_matches(['\n', '\r'])
                    .to_owned(),
                (None, None) => anyhow::bail!(
                    "--sasl-mechanism needs a password: ORDERLY_SASL_PASSWORD or --sasl-password-file"
                ),
            };
            c.sasl = Some(crate::settings::sasl(m, username, password)?);
        }
        crate::settings::apply_tls(
            &mut c,
            self.tls_ca_file.as_deref(),
            self.tls_server_name.as_deref(),
        )?;
        Ok(c)
    }

    /// A pool and a metadata cache on these brokers, checked reachable.
    pub async fn connect(&self, topics: Vec<String>) -> Result<Connected> {
        let pool = Arc::new(ConnectionPool::new(
            self.bootstrap.clone(),
            self.connection()?,
        ));
        let cluster = Cluster::new(pool.clone(), topics, Duration::from_secs(300));
        match cluster.refresh(&[]).await {
            Ok(()) => {}
            // The brokers answered but are too old: their own line says so, naming the API.
            Err(
                e @ orderly_consumer::DriverError::Wire(
                    orderly_protocol::Error::UnsupportedVersion { .. },
                ),
            ) => return Err(e.into()),
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "cannot reach the brokers {}",
                    self.bootstrap.join(",")
                )));
            }
        }
        Ok((pool, cluster))
    }
}
