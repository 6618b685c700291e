//! Broker connections: [`BrokerConnection`] (one rskafka `Messenger` over TCP or TLS with negotiated versions and
//! timeouts) and [`ConnectionPool`] (per broker, separate connections per [`ConnectionKind`], reconnect with
//! bounded exponential backoff).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rskafka::client::{Credentials, SaslConfig};
use rskafka::messenger::{Messenger, RequestError};
use tokio::io::{AsyncRead, AsyncWrite, BufStream};
use tokio::net::TcpStream;
use tracing::{debug, warn};

use crate::error::{Error, ErrorCode, Result};
use crate::messages::api_versions::ApiVersionsRequest;
use crate::messages::{Request, encode_request};
use crate::wire::{WireRequest, WireResponse, pick_version, rs_api_key, rs_range};

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
    fn to_rskafka(&self) -> SaslConfig {
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
    /// Connect attempts per [`ConnectionPool::get`] call before giving up. Default 5.
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

/// Object-safe byte stream (TCP, or TLS over TCP) under the messenger.
trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// One connection to one broker: requests are pipelined over it, each bounded by a timeout. After a
/// transport error, a timeout, or a request its caller abandoned before the answer came, the
/// connection is marked broken and must be replaced (the pool does that on the next
/// [`ConnectionPool::get`]).
pub struct BrokerConnection {
    broker: String,
    messenger: Messenger<Box<dyn Io>>,
    versions: HashMap<i16, (i16, i16)>,
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
        conn.check_required()?;
        Ok(conn)
    }

    /// Fails with [`Error::UnsupportedVersion`] (not retriable) unless the broker serves every API
    /// each command needs ([`REQUIRED_APIS`]) in a version we speak: a broker older than
    /// [`OLDEST_KAFKA`](crate::messages::OLDEST_KAFKA) is refused at the first connection, before a
    /// group is joined or a record is written, rather than failing one request type later.
    fn check_required(&self) -> Result<()> {
        for api in REQUIRED_APIS {
            let n = (api.describe)(self, api.required);
            if n.chosen.is_none() {
                return Err(Error::UnsupportedVersion {
                    broker: self.broker.clone(),
                    api: n.api,
                    min: n.ours.0,
                    max: n.ours.1,
                    offered: n.offered,
                    needs: crate::messages::OLDEST_KAFKA,
                });
            }
        }
        Ok(())
    }

    /// What was negotiated with this broker for every API orderly may use: the APIs every
    /// command needs, the optional ones, then the connection's own exchanges (ApiVersions and,
    /// with [`ConnectionConfig::sasl`], SaslHandshake and SaslAuthenticate).
    pub fn negotiated(&self) -> Vec<Negotiated> {
        let mut out: Vec<Negotiated> = REQUIRED_APIS
            .iter()
            .chain(OPTIONAL_APIS)
            .map(|api| (api.describe)(self, api.required))
            .collect();
        for &(api, api_key, ours, required) in CONNECTION_APIS {
            let offered = self.broker_versions(api_key);
            let chosen = offered.and_then(|(min, max)| {
                if api_key == API_VERSIONS_KEY {
                    // `negotiate_versions` asks at v3, else at v0.
                    Some(if max >= 3 { 3 } else { 0 })
                } else {
                    let v = max.min(ours.1);
                    (v >= min.max(ours.0)).then_some(v)
                }
            });
            out.push(Negotiated {
                api,
                api_key,
                ours,
                offered,
                chosen,
                required,
            });
        }
        out
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

/// One API's negotiation with a broker, for logs and the compatibility report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// API name.
    pub api: &'static str,
    /// Kafka API key.
    pub api_key: i16,
    /// The versions orderly speaks.
    pub ours: (i16, i16),
    /// The broker's advertised range, if it has the API.
    pub offered: Option<(i16, i16)>,
    /// The version requests are sent at, if the ranges meet.
    pub chosen: Option<i16>,
    /// Whether every command needs it (a broker without it is refused at connect).
    pub required: bool,
}

struct ApiCheck {
    describe: fn(&BrokerConnection, bool) -> Negotiated,
    required: bool,
}

const fn api<R: Request>(required: bool) -> ApiCheck {
    ApiCheck {
        describe: describe::<R>,
        required,
    }
}

fn describe<R: Request>(c: &BrokerConnection, required: bool) -> Negotiated {
    Negotiated {
        api: R::NAME,
        api_key: R::API_KEY,
        ours: (R::MIN_VERSION, R::MAX_VERSION),
        offered: c.broker_versions(R::API_KEY),
        chosen: c.version_for::<R>().ok(),
        required,
    }
}

/// The APIs every command (and the library's consumer) needs: a broker without one of them in a
/// version we speak is older than [`OLDEST_KAFKA`](crate::messages::OLDEST_KAFKA) and refused.
const REQUIRED_APIS: &[ApiCheck] = {
    use crate::messages::*;
    &[
        api::<produce::ProduceRequest>(true),
        api::<fetch::FetchRequest>(true),
        api::<list_offsets::ListOffsetsRequest>(true),
        api::<metadata::MetadataRequest>(true),
        api::<offset_commit::OffsetCommitRequest>(true),
        api::<offset_fetch::OffsetFetchRequest>(true),
        api::<find_coordinator::FindCoordinatorRequest>(true),
        api::<join_group::JoinGroupRequest>(true),
        api::<heartbeat::HeartbeatRequest>(true),
        api::<leave_group::LeaveGroupRequest>(true),
        api::<sync_group::SyncGroupRequest>(true),
    ]
};

/// APIs that only some features use; each feature says what it does without one.
const OPTIONAL_APIS: &[ApiCheck] = {
    use crate::messages::*;
    &[
        api::<describe_groups::DescribeGroupsRequest>(false),
        api::<create_topics::CreateTopicsRequest>(false),
        api::<init_producer_id::InitProducerIdRequest>(false),
        api::<consumer_group_heartbeat::ConsumerGroupHeartbeatRequest>(false),
        api::<add_partitions_to_txn::AddPartitionsToTxnRequest>(false),
        api::<add_offsets_to_txn::AddOffsetsToTxnRequest>(false),
        api::<txn_offset_commit::TxnOffsetCommitRequest>(false),
        api::<end_txn::EndTxnRequest>(false),
    ]
};

/// ApiVersions' API key.
const API_VERSIONS_KEY: i16 = 18;

/// The exchanges of the connection itself, spoken before any request: ApiVersions (v3, else v0:
/// [`negotiate_versions`]) and the SASL exchange of rskafka's messenger (SaslHandshake v1, the
/// version that frames the tokens in SaslAuthenticate, and SaslAuthenticate v0-v2, the highest
/// the broker offers). Name, key, the versions spoken, whether every connection uses it.
const CONNECTION_APIS: &[(&str, i16, (i16, i16), bool)] = &[
    ("ApiVersions", API_VERSIONS_KEY, (0, 3), true),
    ("SaslHandshake", 17, (1, 1), false),
    ("SaslAuthenticate", 36, (0, 2), false),
];

/// ApiVersions v3 (flexible body, v0 response header), falling back to v0 if the broker refuses v3.
async fn negotiate_versions(
    messenger: &mut Messenger<Box<dyn Io>>,
    addr: &str,
) -> Result<HashMap<i16, (i16, i16)>> {
    let req = ApiVersionsRequest {
        client_software_name: "orderly-protocol".to_string(),
        client_software_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let mut last = ErrorCode::NONE;
    for version in [3i16, 0] {
        let range = rs_range(version, version)
            .into_iter()
            .map(|r| (rs_api_key(18), r));
        messenger.override_version_ranges(range.collect());
        let body = encode_request(&req, version).map_err(|source| Error::Encode {
            api: ApiVersionsRequest::NAME,
            source,
        })?;
        let resp = messenger
            .request(WireRequest::<ApiVersionsRequest>::new(body, version))
            .await
            .map_err(|e| Error::Transport {
                broker: addr.to_string(),
                api: ApiVersionsRequest::NAME,
                detail: e.to_string(),
            })?;
        let resp = match resp.0 {
            Ok(r) => r,
            // A broker that refuses v3 answers in the v0 layout, which v3 cannot decode.
            Err(e) if version > 0 => {
                debug!(broker = addr, %e, "ApiVersions v{version} unreadable; trying v0");
                continue;
            }
            Err(source) => {
                return Err(Error::Decode {
                    broker: addr.to_string(),
                    api: ApiVersionsRequest::NAME,
                    source,
                });
            }
        };
        if resp.error_code == ErrorCode::NONE {
            return Ok(resp
                .api_keys
                .iter()
                .filter(|k| k.min_version <= k.max_version)
                .map(|k| (k.api_key, (k.min_version, k.max_version)))
                .collect());
        }
        last = resp.error_code;
    }
    Err(Error::Kafka {
        broker: addr.to_string(),
        api: ApiVersionsRequest::NAME,
        code: last,
        context: Default::default(),
        message: None,
    })
}

/// Exponential backoff with ±20 % jitter: `initial * 2^attempt`, capped at `max`.
pub fn backoff_delay(initial: Duration, max: Duration, attempt: u32) -> Duration {
    let base = initial
        .checked_mul(1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX))
        .unwrap_or(max)
        .min(max);
    let jitter: f64 = rand::random_range(0.8..1.2);
    base.mul_f64(jitter).min(max)
}

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
    /// the others on the caller's runtime, so a busy handler runtime never delays reading a fetch
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

    #[test]
    fn sasl_debug_redacts() {
        let s = Sasl::Plain {
            username: "u".into(),
            password: "secret".into(),
        };
        assert!(!format!("{s:?}").contains("secret"));
    }

    #[tokio::test]
    async fn connect_refused_is_retriable_error() {
        let cfg = ConnectionConfig {
            connect_timeout: Duration::from_secs(2),
            ..Default::default()
        };
        let err = BrokerConnection::connect("127.0.0.1:1", &cfg).await.err();
        assert!(err.as_ref().is_some_and(Error::is_retriable), "{err:?}");
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
