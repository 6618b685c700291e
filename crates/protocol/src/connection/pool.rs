//! [`ConnectionPool`]: connections per broker address and [`ConnectionKind`], each kind opened on
//! the runtime set for it, re-established with bounded exponential backoff; brokers that just
//! failed tried last.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tracing::warn;

use super::broker::BrokerConnection;
use super::config::{ConnectionConfig, ConnectionKind};
use crate::error::{Error, Result};

/// Exponential backoff with ±20 % jitter: `initial * 2^attempt`, capped at `max`.
pub fn backoff_delay(initial: Duration, max: Duration, attempt: u32) -> Duration {
    let base = initial
        .checked_mul(1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX))
        .unwrap_or(max)
        .min(max);
    let jitter: f64 = rand::random_range(0.8..1.2);
    base.mul_f64(jitter).min(max)
}

/// A cached connection of one broker and kind; its lock makes concurrent callers wait for one
/// connect.
type Slot = Arc<tokio::sync::Mutex<Option<Arc<BrokerConnection>>>>;

/// Connections per broker address and [`ConnectionKind`], re-established on demand.
///
/// Broker ids learnt from Metadata map to addresses through [`ConnectionPool::set_broker`].
#[derive(Debug)]
pub struct ConnectionPool {
    config: ConnectionConfig,
    bootstrap: Vec<String>,
    slots: std::sync::Mutex<HashMap<(String, ConnectionKind), Slot>>,
    brokers: std::sync::Mutex<HashMap<i32, String>>,
    /// Per address: when a connect to it or a request through [`ConnectionPool::any`] last
    /// failed (cleared by the next successful connect). [`ConnectionPool::any`] tries those last.
    failed: std::sync::Mutex<HashMap<String, tokio::time::Instant>>,
    /// Per kind: the runtime its connections are opened on ([`ConnectionPool::open_on`]).
    runtimes: std::sync::Mutex<HashMap<ConnectionKind, tokio::runtime::Handle>>,
}

impl ConnectionPool {
    /// A pool that bootstraps from `bootstrap` ("host:port" list). No connection is opened yet.
    pub fn new(bootstrap: Vec<String>, config: ConnectionConfig) -> Self {
        Self {
            config,
            bootstrap,
            slots: std::sync::Mutex::new(HashMap::new()),
            brokers: std::sync::Mutex::new(HashMap::new()),
            failed: std::sync::Mutex::new(HashMap::new()),
            runtimes: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Opens the connections of `kind` on `runtime` from now on, whichever task asks for them.
    ///
    /// A connection's socket is registered with the runtime it was opened on, and its reader (the
    /// task that takes responses off the socket) runs there: that runtime's threads decide how
    /// soon a response is read. The consumer opens its fetch connections on its fetch thread and
    /// the others on its output thread, so a busy handler runtime never delays reading a
    /// response, and the fetch thread ending never breaks a connection the group still needs.
    /// A connection opened before the call stays where it is until it is replaced.
    pub fn open_on(&self, kind: ConnectionKind, runtime: tokio::runtime::Handle) {
        if let Ok(mut r) = self.runtimes.lock() {
            r.insert(kind, runtime);
        }
    }

    /// Connects to `addr` on the runtime set for `kind`, or on the caller's.
    async fn connect(&self, addr: &str, kind: ConnectionKind) -> Result<BrokerConnection> {
        let runtime = self
            .runtimes
            .lock()
            .ok()
            .and_then(|r| r.get(&kind).cloned());
        let Some(runtime) = runtime else {
            return BrokerConnection::connect(addr, &self.config).await;
        };
        let (owned_addr, config) = (addr.to_string(), self.config.clone());
        match runtime
            .spawn(async move { BrokerConnection::connect(&owned_addr, &config).await })
            .await
        {
            Ok(result) => result,
            // The runtime shut down (or the connect panicked): no connection, and a retry will
            // not help on that runtime.
            Err(e) => Err(Error::Config(format!(
                "cannot open a {kind:?} connection to {addr}: its runtime is gone ({e})"
            ))),
        }
    }

    /// The pool's connection settings.
    pub fn config(&self) -> &ConnectionConfig {
        &self.config
    }

    /// Records (or updates) a broker id's address, e.g. from a Metadata response.
    pub fn set_broker(&self, node_id: i32, addr: String) {
        if let Ok(mut b) = self.brokers.lock() {
            b.insert(node_id, addr);
        }
    }

    /// The address of a broker id, if known.
    pub fn broker_addr(&self, node_id: i32) -> Option<String> {
        self.brokers
            .lock()
            .ok()
            .and_then(|b| b.get(&node_id).cloned())
    }

    /// A live connection of `kind` to the broker with this id.
    pub async fn broker(
        &self,
        node_id: i32,
        kind: ConnectionKind,
    ) -> Result<Arc<BrokerConnection>> {
        let addr = self.broker_addr(node_id).ok_or_else(|| {
            Error::Config(format!("unknown broker id {node_id}; refresh metadata"))
        })?;
        self.get(&addr, kind).await
    }

    /// A live coordination connection to any known or bootstrap broker. Brokers that never
    /// failed come first (known ones before the bootstrap list), then those whose last failure
    /// is oldest: after a broker dies or stalls, the next caller goes elsewhere instead of
    /// waiting out a connect timeout there again.
    pub async fn any(&self) -> Result<Arc<BrokerConnection>> {
        let mut candidates: Vec<String> = self
            .brokers
            .lock()
            .map(|b| b.values().cloned().collect())
            .unwrap_or_default();
        candidates.sort();
        for addr in &self.bootstrap {
            if !candidates.contains(addr) {
                candidates.push(addr.clone());
            }
        }
        if let Ok(failed) = self.failed.lock() {
            // Stable: the order above decides among equals.
            candidates.sort_by_key(|a| failed.get(a).copied());
        }
        let mut last = None;
        for addr in candidates {
            match self.get_once(&addr, ConnectionKind::Coordination).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Config("no bootstrap brokers".to_string())))
    }

    fn slot(&self, addr: &str, kind: ConnectionKind) -> Result<Slot> {
        let mut slots = self
            .slots
            .lock()
            .map_err(|_| Error::Config("connection pool lock poisoned".to_string()))?;
        Ok(Arc::clone(
            slots.entry((addr.to_string(), kind)).or_default(),
        ))
    }

    /// Notes that a request to `addr` failed, so [`ConnectionPool::any`] tries it last until
    /// a new connection to it succeeds.
    pub fn note_failure(&self, addr: &str) {
        if let Ok(mut f) = self.failed.lock() {
            f.insert(addr.to_string(), tokio::time::Instant::now());
        }
    }

    /// Drops the cached connection (e.g. after NOT_COORDINATOR), so the next `get` reconnects.
    pub async fn invalidate(&self, addr: &str, kind: ConnectionKind) {
        if let Ok(slot) = self.slot(addr, kind) {
            *slot.lock().await = None;
        }
    }

    async fn get_once(&self, addr: &str, kind: ConnectionKind) -> Result<Arc<BrokerConnection>> {
        let slot = self.slot(addr, kind)?;
        let mut guard = slot.lock().await;
        if let Some(c) = guard.as_ref().filter(|c| !c.is_broken()) {
            return Ok(Arc::clone(c));
        }
        let conn = match self.connect(addr, kind).await {
            Ok(c) => Arc::new(c),
            Err(e) => {
                self.note_failure(addr);
                return Err(e);
            }
        };
        if let Ok(mut f) = self.failed.lock() {
            f.remove(addr);
        }
        *guard = Some(Arc::clone(&conn));
        Ok(conn)
    }

    /// A live connection of `kind` to `addr`; reconnects with bounded exponential backoff
    /// (`connect_attempts` tries), then gives up with [`Error::RetriesExhausted`].
    ///
    /// Concurrent callers for the same broker and kind wait for one connect instead of racing.
    pub async fn get(&self, addr: &str, kind: ConnectionKind) -> Result<Arc<BrokerConnection>> {
        let attempts = self.config.connect_attempts.max(1);
        let mut attempt = 0;
        loop {
            match self.get_once(addr, kind).await {
                Ok(c) => return Ok(c),
                Err(e) if e.is_retriable() && attempt + 1 < attempts => {
                    let delay = backoff_delay(
                        self.config.backoff_initial,
                        self.config.backoff_max,
                        attempt,
                    );
                    warn!(broker = addr, ?kind, %e, ?delay, "connect failed; backing off");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(e) if attempt == 0 => return Err(e),
                Err(e) => {
                    return Err(Error::RetriesExhausted {
                        attempts: attempt + 1,
                        last: Box::new(e),
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_and_grows() {
        let i = Duration::from_millis(100);
        let m = Duration::from_secs(10);
        assert!(backoff_delay(i, m, 0) <= Duration::from_millis(120));
        assert!(backoff_delay(i, m, 3) >= Duration::from_millis(640));
        assert!(backoff_delay(i, m, 60) <= m);
    }

    /// A connection is opened on the runtime set for its kind: with that runtime gone, asking
    /// for one is a clear error at once (no panic, no retries); other kinds still open on the
    /// caller's runtime.
    #[tokio::test]
    async fn a_kind_opened_on_a_runtime_that_is_gone_fails_clearly() {
        let other = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        let handle = other.handle().clone();
        other.shutdown_background();
        let pool = ConnectionPool::new(
            vec!["127.0.0.1:1".into()],
            ConnectionConfig {
                connect_attempts: 1,
                connect_timeout: Duration::from_secs(2),
                ..Default::default()
            },
        );
        pool.open_on(ConnectionKind::Fetch, handle);
        let err = pool.get("127.0.0.1:1", ConnectionKind::Fetch).await.err();
        assert!(
            matches!(&err, Some(Error::Config(m)) if m.contains("runtime is gone")),
            "{err:?}"
        );
        // Coordination is not pinned: the refused connect comes from the caller's runtime.
        let err = pool
            .get("127.0.0.1:1", ConnectionKind::Coordination)
            .await
            .err();
        assert!(err.as_ref().is_some_and(Error::is_retriable), "{err:?}");
    }
}
