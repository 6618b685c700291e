//! orderly-consumer: the Kafka driver of orderly, and the library to embed.
//!
//! It wires the Kafka-agnostic ordering engine (`orderly-engine`) to a real Kafka cluster: a
//! consumer-group member (`orderly-group`) decides which partitions this process owns, a fetch
//! loop reads them with one multi-partition Fetch per leader through `orderly-protocol`, and the
//! engine runs the application's [`Handler`] on one record of a session at a time; dead letters
//! and the handler's replies are written with acks=all before their record counts as done.
//!
//! It holds no ordering logic (the engine does) and speaks no wire format itself (the protocol
//! crate does). It installs no tracing subscriber and no metrics recorder.
//!
//! # Using it
//!
//! An embedding application depends on this crate (and tokio) only: everything it names is
//! re-exported here.
//!
//! ```no_run
//! use orderly_consumer::{
//!     Attempt, AutoOffsetReset, Consumer, ConsumerConfig, Handler, HandlerError, Record,
//! };
//!
//! struct Work;
//! impl Handler for Work {
//!     async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
//!         match record.value.as_deref() {
//!             Some(b"") | None => Err(HandlerError::permanent("an empty message")),
//!             Some(_) if attempt.number == 1 => Err(HandlerError::transient("not yet")),
//!             Some(_) => Ok(()),
//!         }
//!     }
//! }
//!
//! # async fn demo() -> Result<(), orderly_consumer::DriverError> {
//! let mut config = ConsumerConfig::new(["127.0.0.1:9092"], "my-group", ["chat-events"]);
//! config.group.auto_offset_reset = AutoOffsetReset::Earliest;
//! let consumer = Consumer::new(config, Work)?;
//! consumer.run(async { let _ = tokio::signal::ctrl_c().await; }).await?;
//! # Ok(()) }
//! ```
//!
//! # The public surface
//!
//! - Running: [`Consumer`] (with [`StopHandle`], [`EngineStats`] and [`PartitionStats`],
//!   [`ParkedSessions`], [`FetchState`] for readiness probes, [`Transactions`] in the
//!   [`exactly_once`] mode), [`DriverError`] (wrapping [`WireError`], [`GroupError`],
//!   [`EngineError`]).
//! - The handler contract: [`Handler`], [`Attempt`], [`HandlerError`] (transient or permanent,
//!   with an optional source and retry-after hint), [`Record`] with its [`Header`]s and
//!   [`TopicPartition`], [`Reply`] for handlers that answer, [`BatchOutcome`] and
//!   [`BatchReplies`] for handlers that take a session's records in batches.
//! - Settings: [`ConsumerConfig`] and the types of its fields: [`ConnectionConfig`] ([`Sasl`],
//!   [`TlsConfig`]), [`GroupConfig`] ([`AutoOffsetReset`], [`GroupProtocol`], the
//!   [`Assignor`]s), [`EngineConfig`] ([`RetryPolicy`], [`DlqMode`], [`SessionIdFrom`]),
//!   [`FetchConfig`] ([`IsolationLevel`], [`RecordHook`]).
//! - [`tools`]: the operator tools as functions: a batching producer and the generated session
//!   workload, reading and replaying the DLQ, a group's status (the CLI's `produce`, `dlq` and
//!   `status` print what these return), on a [`tools::MetadataCache`].
//!
//! The fetch loop, the engine's source, the Kafka dead-letter, reply and parked-session sinks
//! and the metadata cache are internal. So is the benchmark workload, which the CLI, the
//! benchmarks and the tests reach through a hidden module that is not part of the API.
//!
//! # Threads
//!
//! [`Consumer::run`] runs the engine, the group member and the handlers on the caller's tokio
//! runtime, and two threads of its own, each a single-threaded tokio runtime: `orderly-fetch`
//! runs the fetch loop and owns the fetch connections, `orderly-output` owns the produce and
//! coordination connections and runs the reply sinks' sending tasks. Reading a response
//! and starting the next produce round never wait for a runtime busy with handlers, and a
//! handler that blocks its thread stops neither fetching nor replies. Decoded records reach
//! the engine through a channel.
//!
//! # Shutdown
//!
//! When `shutdown` completes: the engine starts no further record (queued records and records
//! waiting for a retry stay above the commit, for the next owner), lets the attempts already
//! running finish within [`EngineConfig::drain_timeout`] (then cancels them), flushes dead-letter
//! writes and commits; then fetching stops, the member leaves the group, and `run` returns once
//! every task it spawned has ended.
//!
//! [`Consumer::stop_handle`] gives an operator's "stop now" (a second Ctrl-C): the drain is cut
//! short, records still running are cancelled, the contiguous done watermark of each partition is
//! committed, and the member leaves the group as above. The cancelled records are handled again
//! by the next owner.
//!
//! # Layout
//! - `metadata_cache.rs`: `MetadataCache`, leaders and leader epochs, ListOffsets.
//! - `fetcher/`: the fetch loop and the per-partition positions.
//! - `output.rs`: the output thread and where the sinks spawn their sending tasks.
//! - `source.rs`: the engine's `Source` and the rebalance bridge.
//! - `dlq.rs`, `replies.rs`, `parked_store.rs`: the dead-letter sink, the reply sink (the
//!   handler's output records) and the parked-session store on a compacted topic.
//! - [`exactly_once`]: the exactly-once mode.
//! - `synthetic.rs`: the benchmark workload (seed producer, failure-injecting handler).
//! - [`tools`]: the operator tools.
//! - [`metric_specs`]: every metric this crate emits, described.
//! - `error.rs`: [`DriverError`].

mod burst_log;
mod dlq;
mod error;
pub mod exactly_once;
mod fetcher;
mod handoff;
mod metadata_cache;
pub mod metric_specs;
mod output;
mod parked_store;
mod replies;
mod runtime_thread;
mod source;
mod synthetic;
pub mod tools;

/// Not public API: what the `orderly` CLI, the benchmarks and the tests of this workspace use
/// beyond the library's surface. It changes without notice.
#[doc(hidden)]
pub mod __private {
    pub use crate::replies::KafkaReplies;

    /// The benchmark workload (seed producer, failure-injecting order-checking handler).
    pub mod synthetic {
        pub use crate::synthetic::*;
    }
}

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use orderly_engine::Engine;
use orderly_group::GroupMember;
use orderly_group::wire::WireTransport;
use orderly_protocol::{ConnectionKind, ConnectionPool, Producer, ProducerConfig};
use tokio::sync::{mpsc, watch};

use dlq::KafkaDeadLetters;
use exactly_once::TxnReplies;
use metadata_cache::MetadataCache;
use parked_store::KafkaParkedStore;
use replies::KafkaReplies;
use source::KafkaSource;

/// The first wait before asking an unanswering transaction coordinator again at start-up.
const INIT_RETRY_FIRST: Duration = Duration::from_millis(500);
/// The longest such wait.
const INIT_RETRY_MAX: Duration = Duration::from_secs(10);

pub use error::DriverError;
pub use exactly_once::Transactions;
pub use fetcher::{FetchConfig, FetchState, RecordHook, Unanswered};

// What an embedding application names, so that it depends on this crate alone: the handler
// contract,
#[doc(inline)]
pub use orderly_engine::{
    Attempt, BatchOutcome, BatchReplies, ErrorSource, Handler, HandlerError, Header, Headers,
    Record, Reply, TopicPartition,
};
// the settings inside `ConsumerConfig`,
#[doc(inline)]
pub use orderly_engine::{DlqMode, EngineConfig, RetryPolicy, SessionIdFrom};
#[doc(inline)]
pub use orderly_group::{
    Assignor, AutoOffsetReset, CooperativeStickyAssignor, GroupConfig, GroupProtocol,
    RangeAssignor, RoundRobinAssignor,
};
#[doc(inline)]
pub use orderly_protocol::{ConnectionConfig, IsolationLevel, Sasl, TlsConfig};
// and what a running consumer hands back.
/// The byte buffer of record keys, values and header values.
pub use bytes::Bytes;
#[doc(inline)]
pub use orderly_engine::{
    EngineError, EngineStats, ParkedSession, ParkedSessions, PartitionStats, StopHandle,
};
#[doc(inline)]
pub use orderly_group::GroupError;
#[doc(inline)]
pub use orderly_protocol::{Error as WireError, ErrorCode};

/// Everything a consumer needs. [`ConsumerConfig::new`] gives the documented defaults.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Bootstrap brokers, `host:port`.
    pub bootstrap: Vec<String>,
    /// Connections: client id, timeouts, SASL.
    pub connection: ConnectionConfig,
    /// The group: id, topics, timeouts, assignors, and `auto_offset_reset`, which decides both where
    /// a partition without a committed offset starts and where a position the broker reports out
    /// of range goes (the fetcher follows it: every record skipped by such a move is logged as an
    /// error and counted in `orderly_offset_reset_skipped_records_total`).
    pub group: GroupConfig,
    /// The engine: workers, retries, budgets, timeouts.
    pub engine: EngineConfig,
    /// Fetching.
    pub fetch: FetchConfig,
    /// The dead-letter topic. Default `<group id>.dlq`. It must exist.
    pub dlq_topic: String,
    /// Where the handler's replies ([`Handler::handle_replying`]) go when they
    /// name no topic. Default `None`: every reply must name its topic (one that names none
    /// dead-letters its record). Replies are keyed by the session id unless they carry a key,
    /// and written (idempotent, acks=all) before their record counts as done. It must exist.
    pub reply_topic: Option<String>,
    /// The compacted topic that keeps parked sessions (`DlqMode::ParkSession`) across restarts
    /// and rebalances (one record per parked session, a tombstone on release). Default (`None`): `<dlq topic>.parked`. Created
    /// (one partition, compacted) if missing.
    pub parked_topic: Option<String>,
    /// How old cached metadata may get before a refresh. Default 5 min (Java `metadata.max.age.ms`).
    pub metadata_max_age: Duration,
    /// Exactly-once mode: replies, dead letters and the group's offsets commit in one Kafka
    /// transaction per engine commit, under the member's generation (see [`exactly_once`]).
    /// Default `false` (replies and dead letters at-least-once, offsets by OffsetCommit).
    pub exactly_once: bool,
    /// The transactional id of the exactly-once mode. Default (`None`): `<group>.<instance id>`
    /// for a static member, else `<group>.<random>`. A stable id lets a restarted instance abort
    /// what its predecessor left open at once; a new one leaves it to the transaction timeout.
    pub transactional_id: Option<String>,
    /// The transaction timeout of the exactly-once mode (the broker aborts a transaction open
    /// longer, and caps it at its `transaction.max.timeout.ms`). Default 60 s; the engine's commit
    /// interval must be at most a third of it.
    pub transaction_timeout: Duration,
}

impl ConsumerConfig {
    /// A consumer of `topics` in group `group_id`, with every default.
    pub fn new(
        bootstrap: impl IntoIterator<Item = impl Into<String>>,
        group_id: impl Into<String>,
        topics: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        let group = GroupConfig::new(group_id, topics);
        let dlq_topic = format!("{}.dlq", group.group_id);
        ConsumerConfig {
            bootstrap: bootstrap.into_iter().map(Into::into).collect(),
            connection: ConnectionConfig::default(),
            group,
            engine: EngineConfig::default(),
            fetch: FetchConfig::default(),
            dlq_topic,
            reply_topic: None,
            parked_topic: None,
            metadata_max_age: Duration::from_secs(300),
            exactly_once: false,
            transactional_id: None,
            transaction_timeout: Duration::from_secs(60),
        }
    }
}

/// A Kafka consumer running the orderly engine.
pub struct Consumer<H> {
    config: ConsumerConfig,
    pool: Arc<ConnectionPool>,
    engine: Engine<H, KafkaDeadLetters>,
    /// The at-least-once reply sink (`None` in exactly-once mode).
    replies: Option<KafkaReplies>,
    txn: Option<Transactions>,
    fetch_state: Arc<fetcher::FetchState>,
}

impl<H> std::fmt::Debug for Consumer<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<H: Handler> Consumer<H> {
    /// Builds the consumer; nothing connects until [`Consumer::run`].
    pub fn new(mut config: ConsumerConfig, handler: H) -> Result<Self, DriverError> {
        // One setting for the broker's `offset.metadata.max.bytes`: the engine encodes within
        // it and the group member checks against the same value.
        config.group.max_metadata_chars = config.engine.metadata_limit;
        if config.bootstrap.is_empty() {
            return Err(DriverError::Config("no bootstrap brokers".into()));
        }
        if config.group.topics.is_empty() {
            return Err(DriverError::Config("no topics to consume".into()));
        }
        if config.group.topics.contains(&config.dlq_topic) {
            return Err(DriverError::Config(format!(
                "the dead-letter topic {} is also consumed; that would loop",
                config.dlq_topic
            )));
        }
        if let Some(t) = config
            .reply_topic
            .as_ref()
            .filter(|t| config.group.topics.contains(t))
        {
            return Err(DriverError::Config(format!(
                "the reply topic {t} is also consumed; that would loop"
            )));
        }
        config.group.validate()?;
        let pool = Arc::new(ConnectionPool::new(
            config.bootstrap.clone(),
            config.connection.clone(),
        ));
        let producer = Producer::new(pool.clone(), ProducerConfig::default());
        let dlq = KafkaDeadLetters::new(producer, config.dlq_topic.clone())
            .with_session_id(config.engine.session_id.clone());
        let (engine, replies, txn) = if config.exactly_once {
            if config.engine.commit_interval.saturating_mul(3) > config.transaction_timeout {
                return Err(DriverError::Config(format!(
                    "the commit interval ({:?}) must be at most a third of the transaction timeout ({:?}): each commit ends a transaction",
                    config.engine.commit_interval, config.transaction_timeout
                )));
            }
            let transactional_id = config.transactional_id.clone().unwrap_or_else(|| {
                exactly_once::default_transactional_id(
                    &config.group.group_id,
                    config.group.instance_id.as_deref(),
                )
            });
            let txn = Transactions::new(
                pool.clone(),
                exactly_once::TxnSettings {
                    transactional_id,
                    timeout: config.transaction_timeout,
                    group_id: config.group.group_id.clone(),
                    instance_id: config.group.instance_id.clone(),
                    metadata_limit: config.engine.metadata_limit,
                },
            );
            let engine = Engine::new(
                config.engine.clone(),
                handler,
                dlq.in_transactions(txn.clone()),
            )
            .with_replies(TxnReplies::new(txn.clone(), config.reply_topic.clone()));
            (engine, None, Some(txn))
        } else {
            let replies = KafkaReplies::new(
                Producer::new(pool.clone(), ProducerConfig::default()),
                config.reply_topic.clone(),
            );
            let engine =
                Engine::new(config.engine.clone(), handler, dlq).with_replies(replies.clone());
            (engine, Some(replies), None)
        };
        Ok(Consumer {
            config,
            pool,
            engine,
            replies,
            txn,
            fetch_state: Arc::new(fetcher::FetchState::default()),
        })
    }

    /// The exactly-once mode's transactions (`None` without [`ConsumerConfig::exactly_once`]).
    pub fn transactions(&self) -> Option<&Transactions> {
        self.txn.as_ref()
    }

    /// Live counters of the engine (handled, dead-lettered, violations, per-partition state).
    pub fn stats(&self) -> EngineStats {
        self.engine.stats()
    }

    /// Stops [`Consumer::run`] without waiting for records in flight: it cancels them, commits
    /// what is done and leaves the group (see [`StopHandle`]). Take it before
    /// `run`; it works before and during the shutdown drain.
    pub fn stop_handle(&self) -> StopHandle {
        self.engine.stop_handle()
    }

    /// The fetch positions of the owned partitions, for readiness probes: which partitions are
    /// owned, and which of them got no fetch response lately ([`FetchState::unanswered`]).
    pub fn fetch_state(&self) -> Arc<FetchState> {
        self.fetch_state.clone()
    }

    /// The engine's parked sessions (`DlqMode::ParkSession`): list them, release them.
    pub fn parked(&self) -> ParkedSessions {
        self.engine.parked()
    }

    /// Joins the group and consumes until `shutdown` completes or a fatal error occurs.
    ///
    /// Returns only when every task it spawned has ended. See the crate docs for the shutdown
    /// sequence.
    ///
    /// # Cancellation
    ///
    /// Dropping the returned future is an abrupt stop, like a crash: no drain and no final
    /// commit, so the next owner replays from the last committed watermark (at-least-once; nothing
    /// is lost). The spawned tasks notice and end on their own; a dynamic member leaves the group,
    /// a static member (`group.instance.id`) does not, so its partitions move after the session
    /// timeout. Complete the `shutdown` future instead for an orderly stop.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<EngineStats, DriverError> {
        let mut shutdown = std::pin::pin!(shutdown);
        let Consumer {
            mut config,
            pool,
            engine,
            replies,
            txn,
            fetch_state,
        } = self;
        // Produce and coordination connections (and the reply rounds) live on the output
        // thread, fetch connections on the fetch thread: the handlers' runtime reads no answer.
        let output = output::OutputThread::start();
        pool.open_on(ConnectionKind::Produce, output.handle());
        pool.open_on(ConnectionKind::Coordination, output.handle());
        if let Some(txn) = &txn {
            txn.set_output(output.handle());
        }
        if let Some(replies) = &replies {
            replies.set_output(output.handle());
        }
        let cluster = MetadataCache::new(
            pool.clone(),
            config.group.topics.clone(),
            config.metadata_max_age,
        );
        // Fail early and clearly if a topic is missing, rather than joining a group for nothing.
        cluster.refresh(&[config.dlq_topic.as_str()]).await?;
        for t in config
            .group
            .topics
            .iter()
            .chain(std::iter::once(&config.dlq_topic))
            .chain(config.reply_topic.as_ref())
        {
            cluster.wait_for_topic(t, Duration::from_secs(10)).await?;
        }
        if config.engine.dlq_mode == orderly_engine::DlqMode::ParkSession {
            let topic = config
                .parked_topic
                .clone()
                .unwrap_or_else(|| format!("{}.parked", config.dlq_topic));
            let store = KafkaParkedStore::new(pool.clone(), cluster.clone(), topic);
            store.ensure_topic().await?;
            engine.parked().set_store(Arc::new(store));
        }

        degrade_for_broker(&pool, &mut config).await?;
        if let Some(txn) = &txn {
            // A transaction coordinator that does not answer yet (unreachable, or loading its
            // log after a failover) is waited for, until the shutdown; any other refusal ends
            // the start.
            let registered = async {
                let mut delay = INIT_RETRY_FIRST;
                loop {
                    match txn.init().await {
                        Err(e) if e.is_retriable() => {
                            tracing::warn!(transactional_id = %txn.transactional_id(), error = %e, retry_in = ?delay,
                                "the transaction coordinator does not answer yet; asking again");
                            tokio::time::sleep(delay).await;
                            delay = (delay * 2).min(INIT_RETRY_MAX);
                        }
                        r => return r,
                    }
                }
            };
            tokio::select! {
                r = registered => r.map_err(|e| {
                    DriverError::Transaction(format!(
                        "registering transactional id {}: {e}",
                        txn.transactional_id()
                    ))
                })?,
                () = &mut shutdown => {
                    tracing::info!("stopped before the transactional id was registered");
                    return Ok(engine.stats());
                }
            }
            tracing::info!(transactional_id = %txn.transactional_id(), "exactly-once mode");
        }
        // The reply producer's metadata, leader connections and producer id, before the first
        // reply waits for them (bounded: whatever is not ready by then the first reply meets).
        if let Some(topic) = &config.reply_topic {
            let prepare = async {
                match (&txn, &replies) {
                    (Some(txn), _) => txn.prepare(topic).await,
                    (None, Some(replies)) => replies.prepare(topic).await,
                    (None, None) => {}
                }
            };
            let _ = tokio::time::timeout(Duration::from_secs(10), prepare).await;
        }

        let transport =
            Arc::new(WireTransport::new(pool.clone()).with_isolation(config.fetch.isolation));
        // The member is closed explicitly after the engine finished, so the engine can still
        // commit during its drain.
        let (leave_tx, mut leave_rx) = watch::channel(false);
        let member = GroupMember::spawn(config.group.clone(), transport, async move {
            let _ = leave_rx.wait_for(|v| *v).await;
        })?;
        let GroupMember {
            handle,
            events,
            task,
        } = member;

        let (tx, rx) = mpsc::channel(256);
        let (stop_tx, stop_rx) = watch::channel(false);
        // On shutdown, fetching stops first: the engine drains what it holds and nothing more
        // is read from the brokers.
        let stop_fetching = &stop_tx;
        let shutdown = async move {
            shutdown.await;
            let _ = stop_fetching.send(true);
        };
        let fetch_task = fetcher::spawn(
            cluster.clone(),
            fetch_state.clone(),
            config.fetch.clone(),
            config.group.auto_offset_reset,
            tx.clone(),
            stop_rx,
        );
        let rewinds = txn.as_ref().and_then(Transactions::take_rewinds);
        let bridge_task = tokio::spawn(source::bridge(
            events,
            fetch_state.clone(),
            tx,
            rewinds,
            txn.clone(),
        ));

        if let Some(txn) = &txn {
            txn.set_group(handle.clone());
        }
        let source =
            KafkaSource::new(rx, fetch_state, handle.clone()).with_transactions(txn.clone());
        let stop = engine.stop_handle();
        let run = engine.run(source, shutdown);
        let result = match &txn {
            None => run.await,
            Some(txn) => {
                // A failed transaction stops the engine at once: what it holds as done is ahead
                // of what committed, and every further commit is refused anyway. (An aborted
                // one that the producer survives is rewound instead, through the bridge.)
                let mut failed = txn.failed();
                // The watch's borrow is dropped inside, so the future stays `Send`.
                let failed = async move {
                    let _ = failed.wait_for(Option::is_some).await;
                };
                tokio::pin!(run);
                tokio::select! {
                    r = &mut run => r,
                    () = failed => {
                        stop.stop_now();
                        run.await
                    }
                }
            }
        };
        if let Some(replies) = &replies {
            // A reply write the engine stopped waiting for (its record was cancelled) may still
            // be in flight: give it the final commit's time to end, so no task outlives `run`
            // for long.
            let _ = tokio::time::timeout(config.engine.final_commit_timeout, replies.idle()).await;
        }
        let txn_failure = match &txn {
            Some(txn) => {
                // Output of a transaction the final commit did not end must not wait for the
                // broker's timeout (read_committed readers stall behind an open transaction).
                txn.abort_open().await;
                txn.failure()
            }
            None => None,
        };

        // The engine has drained and committed (or failed). Stop fetching, leave the group, and
        // wait for every task. The source (and its receiver) is gone, so the bridge acknowledges
        // the final revoke at once.
        let _ = stop_tx.send(true);
        let _ = leave_tx.send(true);
        handle.close();
        let member_result = task.wait().await;
        fetch_task.wait().await;
        let _ = bridge_task.await;
        output.close().await;
        if let Some(reason) = txn_failure {
            return Err(DriverError::Transaction(reason));
        }
        match (result, member_result) {
            // A member that stopped on its own (fenced, fatal coordinator error) is the cause of
            // whatever the engine saw afterwards, so its error is the one to report.
            (_, Err(e)) => Err(e.into()),
            (Err(e), Ok(())) => Err(e.into()),
            (Ok(stats), Ok(())) => Ok(stats),
        }
    }
}

/// Adapts the configuration to what the brokers serve, once at start-up, logging each feature
/// that an older broker lacks (every broker since Apache Kafka 2.1 passed the connection check):
///
/// - static membership (`group.instance.id`) needs JoinGroup v5 (Kafka 2.3): below it the member
///   joins as a dynamic member (and leaves the group on shutdown, as a dynamic member does);
/// - the consumer group protocol (KIP-848) needs ConsumerGroupHeartbeat (Kafka 4.0): without it
///   the start fails with one line saying so;
/// - idempotent dead-letter writes need InitProducerId: without it the DLQ writes with acks=all
///   only, and a write retried after a lost answer may appear twice in the DLQ;
/// - reading committed offsets with `require_stable` needs OffsetFetch v7 (Kafka 2.5): below it a
///   transactional commit still pending is not waited for.
async fn degrade_for_broker(
    pool: &ConnectionPool,
    config: &mut ConsumerConfig,
) -> Result<(), DriverError> {
    use orderly_protocol::messages::Request;
    use orderly_protocol::messages::consumer_group_heartbeat::ConsumerGroupHeartbeatRequest;
    use orderly_protocol::messages::init_producer_id::InitProducerIdRequest;
    use orderly_protocol::messages::join_group::JoinGroupRequest;
    use orderly_protocol::messages::offset_fetch::OffsetFetchRequest;

    let conn = pool.any().await?;
    let broker = conn.broker().to_owned();
    if config.group.protocol == orderly_group::GroupProtocol::Consumer {
        if conn.version_for::<ConsumerGroupHeartbeatRequest>().is_err() {
            let offered = conn
                .broker_versions(ConsumerGroupHeartbeatRequest::API_KEY)
                .map_or_else(|| "in no version".to_owned(), |(a, b)| format!("v{a}-v{b}"));
            return Err(orderly_group::GroupError::Unsupported {
                group: config.group.group_id.clone(),
                detail: format!(
                    "broker {broker} offers ConsumerGroupHeartbeat {offered}, orderly speaks v{}-v{}: the consumer group protocol (KIP-848) needs Apache Kafka {} or later; use group.protocol=classic",
                    ConsumerGroupHeartbeatRequest::MIN_VERSION,
                    ConsumerGroupHeartbeatRequest::MAX_VERSION,
                    ConsumerGroupHeartbeatRequest::SINCE,
                ),
            }
            .into());
        }
    } else if config.group.instance_id.is_some() && conn.version_for::<JoinGroupRequest>()? < 5 {
        tracing::warn!(%broker, instance_id = ?config.group.instance_id,
            "static membership needs Apache Kafka 2.3 (JoinGroup v5); joining as a dynamic member");
        config.group.instance_id = None;
    }
    if !conn.supports::<InitProducerIdRequest>() {
        tracing::warn!(%broker, api = InitProducerIdRequest::NAME,
            "the broker has no producer ids: dead letters are written with acks=all without idempotence, so a retried write may appear twice");
    }
    if conn.version_for::<OffsetFetchRequest>()? < 7 {
        tracing::info!(%broker,
            "OffsetFetch below v7 (Apache Kafka 2.5): offsets of a transaction still pending are read without waiting for it");
    }
    Ok(())
}
