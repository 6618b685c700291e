//! One connection to one broker, [`BrokerConnection`]: rskafka's `Messenger` over TCP or TLS,
//! versions negotiated at connect, every request bounded by a timeout, and the connection marked
//! broken when an answer may never come.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rskafka::messenger::{Messenger, RequestError};
use tokio::io::{AsyncRead, AsyncWrite, BufStream};
use tokio::net::TcpStream;
use tracing::{debug, warn};

use super::config::ConnectionConfig;
use super::negotiation::{Negotiated, Versions, check_required, negotiate_versions, negotiated};
use crate::error::{Error, Result};
use crate::messages::{Request, encode_request};
use crate::wire::{WireRequest, WireResponse, pick_version, rs_api_key, rs_range};

/// Object-safe byte stream (TCP, or TLS over TCP) under the messenger.
trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// One connection to one broker: requests are pipelined over it, each bounded by a timeout. After a
/// transport error, a timeout, or a request its caller abandoned before the answer came, the
/// connection is marked broken and must be replaced (the pool does that on the next
/// [`ConnectionPool::get`](super::ConnectionPool::get)).
pub struct BrokerConnection {
    broker: String,
    messenger: Messenger<Box<dyn Io>>,
    versions: Versions,
    broken: AtomicBool,
    request_timeout: Duration,
    /// The end of the throttle time the broker's last Produce answer asked for (KIP-219): the
    /// next Produce on this connection waits until then.
    pub(crate) produce_throttled_until: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl fmt::Debug for BrokerConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerConnection")
            .field("broker", &self.broker)
            .field("broken", &self.is_broken())
            .finish_non_exhaustive()
    }
}

impl BrokerConnection {
    /// Connects to `addr` ("host:port"), sets TCP_NODELAY, negotiates API versions and runs SASL, all
    /// within `config.connect_timeout`.
    pub async fn connect(addr: &str, config: &ConnectionConfig) -> Result<Self> {
        match tokio::time::timeout(config.connect_timeout, Self::connect_inner(addr, config)).await
        {
            Ok(r) => r,
            Err(_) => Err(Error::ConnectTimeout {
                broker: addr.to_string(),
                after: config.connect_timeout,
            }),
        }
    }

    async fn connect_inner(addr: &str, config: &ConnectionConfig) -> Result<Self> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|source| Error::Connect {
                broker: addr.to_string(),
                source,
            })?;
        tcp.set_nodelay(true).map_err(|source| Error::Connect {
            broker: addr.to_string(),
            source,
        })?;
        #[cfg(feature = "tls")]
        let stream: Box<dyn Io> = match &config.tls {
            Some(tls) => Box::new(BufStream::new(tls.connect(addr, tcp).await?)),
            None => Box::new(BufStream::new(tcp)),
        };
        #[cfg(not(feature = "tls"))]
        let stream: Box<dyn Io> = Box::new(BufStream::new(tcp));
        let mut messenger = Messenger::new(
            stream,
            config.max_message_size,
            Arc::from(config.client_id.as_str()),
        );
        let versions = negotiate_versions(&mut messenger, addr).await?;
        let ranges = versions
            .iter()
            .filter_map(|(k, (min, max))| rs_range(*min, *max).map(|r| (rs_api_key(*k), r)))
            .collect();
        messenger.override_version_ranges(ranges);
        if let Some(sasl) = &config.sasl {
            messenger
                .do_sasl(sasl.to_rskafka())
                .await
                .map_err(|e| Error::Sasl {
                    broker: addr.to_string(),
                    detail: e.to_string(),
                })?;
        }
        debug!(broker = addr, apis = versions.len(), "connected");
        let conn = Self {
            broker: addr.to_string(),
            messenger,
            versions,
            broken: AtomicBool::new(false),
            request_timeout: config.request_timeout,
            produce_throttled_until: std::sync::Mutex::new(None),
        };
        check_required(&conn.broker, &conn.versions)?;
        Ok(conn)
    }

    /// What was negotiated with this broker for every API orderly may use: the APIs every
    /// command needs, the optional ones, then the connection's own exchanges (ApiVersions and,
    /// with [`ConnectionConfig::sasl`], SaslHandshake and SaslAuthenticate).
    pub fn negotiated(&self) -> Vec<Negotiated> {
        negotiated(&self.versions)
    }

    /// The broker address this connection goes to.
    pub fn broker(&self) -> &str {
        &self.broker
    }

    /// The broker's advertised `(min, max)` version of an API, if it has the API at all.
    pub fn broker_versions(&self, api_key: i16) -> Option<(i16, i16)> {
        self.versions.get(&api_key).copied()
    }

    /// The version a request of type `R` is sent at: `min(our max, broker max)`.
    pub fn version_for<R: Request>(&self) -> Result<i16> {
        let offered = self.broker_versions(R::API_KEY);
        offered
            .and_then(|b| pick_version((R::MIN_VERSION, R::MAX_VERSION), b))
            .ok_or_else(|| Error::UnsupportedVersion {
                broker: self.broker.clone(),
                api: R::NAME,
                min: R::MIN_VERSION,
                max: R::MAX_VERSION,
                offered,
                needs: R::SINCE,
            })
    }

    /// Whether the broker serves `R` in a version we speak.
    pub fn supports<R: Request>(&self) -> bool {
        self.version_for::<R>().is_ok()
    }

    /// Whether a transport error or a timeout made this connection unusable.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    fn mark_broken(&self) {
        self.broken.store(true, Ordering::Release);
    }

    /// Sends `req` and waits for its response, within the configured request timeout.
    ///
    /// Cancel safety: dropping the future never leaves a half-written frame on the wire (rskafka
    /// finishes the write), but the response of a cancelled request is discarded, and the
    /// connection is marked broken (see [`send_with_extra_timeout`](Self::send_with_extra_timeout)).
    pub async fn send<R: Request>(&self, req: &R) -> Result<R::Response> {
        self.send_with_extra_timeout(req, Duration::ZERO).await
    }

    /// Like [`send`](Self::send), allowing `extra` on top of the request timeout for requests the
    /// broker deliberately holds (fetch `max_wait_ms`, JoinGroup up to the rebalance timeout).
    pub async fn send_with_extra_timeout<R: Request>(
        &self,
        req: &R,
        extra: Duration,
    ) -> Result<R::Response> {
        if self.is_broken() {
            return Err(Error::Transport {
                broker: self.broker.clone(),
                api: R::NAME,
                detail: "connection is broken; reconnect".to_string(),
            });
        }
        let version = self.version_for::<R>()?;
        let body = encode_request(req, version).map_err(|source| Error::Encode {
            api: R::NAME,
            source,
        })?;
        let limit = self.request_timeout + extra;
        let fut = self.messenger.request(WireRequest::<R>::new(body, version));
        // Callers bound requests with deadlines of their own, often equal to or shorter than this
        // one (a heartbeat within the session timeout, the group's request timeout set a moment
        // before this one): theirs fires first and drops this future, so the timeout arm below
        // never runs. If that answer never comes (a half-open connection, a lost frame), nothing
        // queued behind it on this connection is answered either, and without this guard the
        // pool would keep handing the dead connection out: a group member then retried
        // FindCoordinator on it forever, with its heartbeats stopped.
        let abandoned = AbandonGuard {
            conn: self,
            api: R::NAME,
            armed: true,
        };
        let outcome = tokio::time::timeout(limit, fut).await;
        abandoned.disarm();
        match outcome {
            Err(_) => {
                // The response may still arrive later and would then belong to no one; the broker also
                // answers in order, so everything behind it is late too. Drop the connection.
                self.mark_broken();
                warn!(broker = %self.broker, api = R::NAME, ?limit, "request timed out; dropping connection");
                Err(Error::RequestTimeout {
                    broker: self.broker.clone(),
                    api: R::NAME,
                    after: limit,
                })
            }
            Ok(Ok(WireResponse(Ok(resp)))) => Ok(resp),
            Ok(Ok(WireResponse(Err(source)))) => Err(Error::Decode {
                broker: self.broker.clone(),
                api: R::NAME,
                source,
            }),
            Ok(Err(e)) => Err(self.map_request_error(R::NAME, e)),
        }
    }

    fn map_request_error(&self, api: &'static str, e: RequestError) -> Error {
        match e {
            RequestError::NoVersionMatch { .. } => Error::Transport {
                broker: self.broker.clone(),
                api,
                detail: "no matching version".to_string(),
            },
            other => {
                self.mark_broken();
                Error::Transport {
                    broker: self.broker.clone(),
                    api,
                    detail: other.to_string(),
                }
            }
        }
    }
}

/// Marks its connection broken when dropped armed, i.e. when the caller abandoned a request before
/// its answer (or its timeout) came. Cheap for a healthy connection (one reconnect on next use),
/// and the only safe choice for a dead one.
struct AbandonGuard<'a> {
    conn: &'a BrokerConnection,
    api: &'static str,
    armed: bool,
}

impl AbandonGuard<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for AbandonGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.conn.mark_broken();
            debug!(broker = %self.conn.broker, api = self.api,
                "request abandoned by its caller before the answer; dropping connection");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connect_refused_is_retriable_error() {
        let cfg = ConnectionConfig {
            connect_timeout: Duration::from_secs(2),
            ..Default::default()
        };
        let err = BrokerConnection::connect("127.0.0.1:1", &cfg).await.err();
        assert!(err.as_ref().is_some_and(Error::is_retriable), "{err:?}");
    }
}
