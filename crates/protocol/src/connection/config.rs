//! What a connection is configured with: [`ConnectionConfig`] (timeouts, sizes, backoff, SASL,
//! TLS), the [`Sasl`] mechanisms, and the [`ConnectionKind`]s a pool keeps apart.

use std::fmt;
use std::time::Duration;

use rskafka::client::{Credentials, SaslConfig};

/// SASL mechanism and credentials. `Debug` never prints the password.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sasl {
    /// SASL/PLAIN.
    Plain {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
    /// SASL/SCRAM-SHA-256.
    ScramSha256 {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
    /// SASL/SCRAM-SHA-512.
    ScramSha512 {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
}

impl fmt::Debug for Sasl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mech, user) = match self {
            Sasl::Plain { username, .. } => ("PLAIN", username),
            Sasl::ScramSha256 { username, .. } => ("SCRAM-SHA-256", username),
            Sasl::ScramSha512 { username, .. } => ("SCRAM-SHA-512", username),
        };
        write!(f, "Sasl({mech}, user={user:?}, password=<redacted>)")
    }
}

impl Sasl {
    /// The same mechanism and credentials in rskafka's terms.
    pub(super) fn to_rskafka(&self) -> SaslConfig {
        match self.clone() {
            Sasl::Plain { username, password } => {
                SaslConfig::Plain(Credentials::new(username, password))
            }
            Sasl::ScramSha256 { username, password } => {
                SaslConfig::ScramSha256(Credentials::new(username, password))
            }
            Sasl::ScramSha512 { username, password } => {
                SaslConfig::ScramSha512(Credentials::new(username, password))
            }
        }
    }
}

/// Connection settings. `Default` gives the documented defaults.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Client id sent in every request header. Default `"orderly"`.
    pub client_id: String,
    /// Limit for TCP connect + ApiVersions + SASL. Default 10 s.
    pub connect_timeout: Duration,
    /// Limit for one request/response round trip, on top of any server-side wait the request itself
    /// asks for (fetch `max_wait_ms`, join rebalance timeout). Default 30 s.
    pub request_timeout: Duration,
    /// Largest response accepted; keep fetch `max_bytes` well below it. Default 128 MiB.
    pub max_message_size: usize,
    /// SASL, if the listener requires it. Default none.
    pub sasl: Option<Sasl>,
    /// TLS, if the listener requires it (feature `tls`, on by default). Default none (plaintext).
    #[cfg(feature = "tls")]
    pub tls: Option<crate::tls::TlsConfig>,
    /// First reconnect backoff. Default 100 ms.
    pub backoff_initial: Duration,
    /// Backoff ceiling. Default 10 s.
    pub backoff_max: Duration,
    /// Connect attempts per [`ConnectionPool::get`](super::ConnectionPool::get) call before giving up. Default 5.
    pub connect_attempts: u32,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            client_id: "orderly".to_string(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_message_size: 128 * 1024 * 1024,
            sasl: None,
            #[cfg(feature = "tls")]
            tls: None,
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            connect_attempts: 5,
        }
    }
}

/// What a connection is used for. The pool keeps one connection per broker and kind, so a fetch long
/// poll never delays a heartbeat or a commit (a broker answers one request per connection at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectionKind {
    /// Fetch long polls.
    Fetch,
    /// Group membership, offset commits and fetches, metadata, list offsets.
    Coordination,
    /// Produce (acks=all waits for replication).
    Produce,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sasl_debug_redacts() {
        let s = Sasl::Plain {
            username: "u".into(),
            password: "secret".into(),
        };
        assert!(!format!("{s:?}").contains("secret"));
    }
}
