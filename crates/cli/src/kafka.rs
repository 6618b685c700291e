//! The brokers and connection flags the operator commands share (`produce`, `dlq`, `status`) and the connect step.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use orderly_consumer::tools::MetadataCache;
use orderly_protocol::{ConnectionConfig, ConnectionPool};

use crate::settings::ConnectionFlags;

/// A connection pool and its metadata cache.
pub type Connected = (Arc<ConnectionPool>, MetadataCache);

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
    /// SASL and TLS to the brokers.
    #[command(flatten)]
    pub connection: ConnectionFlags,
}

impl KafkaArgs {
    /// The connection settings.
    pub fn connection(&self) -> Result<ConnectionConfig> {
        let mut c = ConnectionConfig {
            connect_attempts: 2,
            ..ConnectionConfig::default()
        };
        self.connection.apply(&mut c)?;
        Ok(c)
    }

    /// A pool and a metadata cache on these brokers, checked reachable.
    pub async fn connect(&self, topics: Vec<String>) -> Result<Connected> {
        let pool = Arc::new(ConnectionPool::new(
            self.bootstrap.clone(),
            self.connection()?,
        ));
        let cluster = MetadataCache::new(pool.clone(), topics, Duration::from_secs(300));
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
