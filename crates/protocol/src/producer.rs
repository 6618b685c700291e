//! A small producer for the DLQ and the CLI: acks=all, idempotent, Java-compatible key
//! partitioning, and at most one batch in flight per partition, so order within a partition holds
//! across retries.
//!
//! # Idempotence
//! With [`ProducerConfig::idempotent`] (the default) the producer asks for a producer id
//! (InitProducerId) before its first batch and stamps every batch with that id, its epoch and a
//! per-partition base sequence. The broker keeps the last sequences per producer and partition, so
//! a retry of a batch whose first attempt was written (its response lost to a timeout or a broken
//! connection) is answered with the original offset instead of being appended again. The rules:
//!
//! - A partition's sequence advances only when its batch is acknowledged. One batch in flight per
//!   partition means a batch is always the broker's next expected one.
//! - A batch keeps its producer id and base sequence through all its retries.
//! - DUPLICATE_SEQUENCE_NUMBER is success: the broker holds the batch already (offset unknown,
//!   reported as -1).
//! - UNKNOWN_PRODUCER_ID, INVALID_PRODUCER_EPOCH and PRODUCER_FENCED say the batch was not written
//!   under that id: the producer takes a new id (every partition restarts at sequence 0 on its next
//!   batch) and retries.
//! - OUT_OF_ORDER_SEQUENCE_NUMBER means the broker lost this producer's state (the Java client
//!   fails the batch too): the batch fails with that error and the producer takes a new id.
//! - A batch that fails after an attempt whose outcome is unknown (timeout, broken connection,
//!   delivery timeout) also makes the producer take a new id: its sequence may or may not be
//!   written, and a later batch reusing it could be taken for a duplicate and dropped.
//!
//! - A `send`/`send_batch` future dropped while its batch is in flight (a caller's timeout, a
//!   cancelled task) leaves the outcome unknown just the same: the request may still reach the
//!   broker and be written. The partition remembers the batch as unsettled, and its next batch
//!   retires that producer id first. Reusing the sequence would be worse than a duplicate: the
//!   broker would answer the next batch with the dropped batch's offset and not write it.
//!
//! A new producer id rather than a bumped epoch keeps batches of other partitions that are still
//! retrying under the old id valid (a bump would fence them).
//!
//! A broker that does not serve InitProducerId (Kafka 2.8's KRaft preview) gets acks=all batches
//! without a stamp, as the Java client sends them: logged once, and a batch retried after an
//! attempt of unknown outcome may then be written twice ([`Producer::is_idempotent`] tells).
//!
//! # Delivery timeout
//! Retries are bounded by time, like the Java client's `delivery.timeout.ms`:
//! [`ProducerConfig::delivery_timeout`] (default 120 s) is the longest a `send` or `send_batch`
//! call takes, from the call (waiting for the partition's previous batch included) to success or
//! [`Error::DeliveryTimeout`]. [`ProducerConfig::retries`] can bound the attempts too (default
//! unbounded). A leader election after a broker failure takes seconds; a count of retries with
//! backoff can run out first, a time budget does not.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::connection::{BrokerConnection, ConnectionKind, ConnectionPool, backoff_delay};
use crate::data::BatchSequence;
use crate::error::{Context, Error, ErrorCode, Result};
use crate::partitioner::partition_for_key;
use crate::records::{Compression, ProduceRecord};

/// Producer settings. `Default`: idempotent, no compression, 30 s produce timeout, retries bounded
/// only by the 120 s delivery timeout.
#[derive(Debug, Clone, Copy)]
pub struct ProducerConfig {
    /// Batch compression.
    pub compression: Compression,
    /// Server-side produce timeout (replication wait for acks=all).
    pub timeout: Duration,
    /// Retries of retriable errors per batch. Default `u32::MAX`: the delivery timeout bounds them.
    pub retries: u32,
    /// Upper bound on one `send`/`send_batch` call, retries and the wait for the partition's
    /// previous batch included (Java's `delivery.timeout.ms`). Default 120 s.
    pub delivery_timeout: Duration,
    /// Idempotent writes (producer id and sequence numbers), so a retry never writes a batch twice.
    /// Default true. Needs a broker of Kafka 0.11 or later and, with ACLs, `IdempotentWrite` on
    /// the cluster (implied by `Write` on the topic since Kafka 2.8).
    pub idempotent: bool,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            compression: Compression::None,
            timeout: Duration::from_secs(30),
            retries: u32::MAX,
            delivery_timeout: Duration::from_secs(120),
            idempotent: true,
        }
    }
}

/// A producer id and epoch from InitProducerId.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProducerId {
    id: i64,
    epoch: i16,
}

/// One partition's sequence state; its mutex is held while a batch is in flight.
#[derive(Debug, Default)]
struct PartitionState {
    /// The producer id `next_sequence` counts for (`None`: not yet written).
    owner: Option<ProducerId>,
    /// Base sequence of the partition's next batch under `owner`.
    next_sequence: i32,
    /// Set while a stamped batch is in flight and cleared when its outcome is known: still set
    /// when the next batch starts means the last one's `send_batch` was dropped mid-attempt, so
    /// `owner`'s sequence here is unknown.
    unsettled: Option<ProducerId>,
}

/// Held while a batch for one partition is in flight.
type PartitionLock = Arc<tokio::sync::Mutex<PartitionState>>;

#[derive(Debug, Default)]
struct TopicInfo {
    /// Leader broker id per partition index.
    leaders: Vec<i32>,
}

/// Produces over the pool's [`ConnectionKind::Produce`] connections.
#[derive(Debug)]
pub struct Producer {
    pool: Arc<ConnectionPool>,
    config: ProducerConfig,
    /// Never held across an await.
    topics: std::sync::Mutex<HashMap<String, TopicInfo>>,
    partition_locks: std::sync::Mutex<HashMap<(String, i32), PartitionLock>>,
    round_robin: std::sync::atomic::AtomicU32,
    /// The current producer id (`None`: ask for one before the next batch).
    producer_id: tokio::sync::Mutex<Option<ProducerId>>,
    /// Set once a broker turned out not to serve InitProducerId: batches go out unstamped.
    not_idempotent: std::sync::atomic::AtomicBool,
}

impl Producer {
    /// A producer on `pool`.
    pub fn new(pool: Arc<ConnectionPool>, config: ProducerConfig) -> Self {
        Self {
            pool,
            config,
            topics: std::sync::Mutex::new(HashMap::new()),
            partition_locks: std::sync::Mutex::new(HashMap::new()),
            round_robin: std::sync::atomic::AtomicU32::new(0),
            producer_id: tokio::sync::Mutex::new(None),
            not_idempotent: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether batches are written idempotently: configured so, and the brokers serve
    /// InitProducerId (checked with the first batch).
    pub fn is_idempotent(&self) -> bool {
        self.config.idempotent
            && !self
                .not_idempotent
                .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The settings.
    pub fn config(&self) -> &ProducerConfig {
        &self.config
    }

    /// Readies the producer for writes to `topic` before the first one: its metadata, a
    /// connection to each partition's leader and (idempotent producers) the producer id, so the
    /// first write does not wait for them. Failures are left for the writes to meet.
    pub async fn prepare(&self, topic: &str) {
        if let Ok(n) = self.partitions(topic).await {
            for p in 0..n {
                let _ = self.leader_connection(topic, p).await;
            }
        }
        if self.config.idempotent {
            let deadline = Instant::now() + self.config.delivery_timeout;
            let _ = self.current_producer_id(deadline).await;
        }
    }

    /// The producer id and epoch in use, if one was obtained (idempotent producers only).
    pub async fn producer_id(&self) -> Option<(i64, i16)> {
        self.producer_id.lock().await.map(|p| (p.id, p.epoch))
    }

    /// The current producer id, asking a broker for one if there is none; `None` if the brokers
    /// do not serve InitProducerId (then the producer writes without idempotence from now on).
    /// Retriable errors are retried with backoff until `deadline`.
    async fn current_producer_id(&self, deadline: Instant) -> Result<Option<ProducerId>> {
        let mut current = self.producer_id.lock().await;
        if let Some(p) = *current {
            return Ok(Some(p));
        }
        if !self.is_idempotent() {
            return Ok(None);
        }
        let mut attempt = 0;
        loop {
            let result = match self.pool.any().await {
                Ok(conn) => conn.init_producer_id().await,
                Err(e) => Err(e),
            };
            match result {
                Ok((id, epoch)) => {
                    let p = ProducerId { id, epoch };
                    tracing::debug!(producer_id = id, epoch, "idempotent producer id");
                    *current = Some(p);
                    return Ok(Some(p));
                }
                Err(e @ Error::UnsupportedVersion { .. }) => {
                    // As the Java client does with such a broker: acks=all without idempotence.
                    // A batch retried after an attempt of unknown outcome may then be written
                    // twice (README, "Broker versions").
                    tracing::warn!(error = %e,
                        "writing without idempotence (acks=all): a retried batch may be written twice");
                    self.not_idempotent
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    return Ok(None);
                }
                Err(e) if e.is_retriable() || leader_unreachable(&e) => {
                    let cfg = self.pool.config();
                    let wait = backoff_delay(cfg.backoff_initial, cfg.backoff_max, attempt);
                    tokio::time::sleep_until((Instant::now() + wait).min(deadline)).await;
                    if Instant::now() >= deadline {
                        return Err(e);
                    }
                    attempt = attempt.saturating_add(1);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Drops `stale` as the current producer id (no-op if another batch replaced it already), so
    /// the next batch asks for a new one.
    async fn retire_producer_id(&self, stale: ProducerId) {
        let mut current = self.producer_id.lock().await;
        if *current == Some(stale) {
            tracing::info!(
                producer_id = stale.id,
                epoch = stale.epoch,
                "retiring the producer id; the next batch takes a new one"
            );
            *current = None;
        }
    }

    fn lock_topics(&self) -> std::sync::MutexGuard<'_, HashMap<String, TopicInfo>> {
        self.topics
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Refreshes `topic`'s leaders from Metadata; returns its partition count.
    pub(crate) async fn refresh(&self, topic: &str) -> Result<usize> {
        let (conn, md) = self.pool.metadata(Some(&[topic])).await?;
        let t = md
            .topics
            .iter()
            .find(|t| t.name.as_deref() == Some(topic))
            .ok_or_else(|| {
                conn.kafka_error(
                    "Metadata",
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    ctx(topic, None),
                    None,
                )
            })?;
        if t.error_code != ErrorCode::NONE {
            return Err(conn.kafka_error("Metadata", t.error_code, ctx(topic, None), None));
        }
        let mut leaders = vec![-1; t.partitions.len()];
        for p in &t.partitions {
            if let Some(slot) = usize::try_from(p.partition_index)
                .ok()
                .and_then(|i| leaders.get_mut(i))
            {
                *slot = p.leader_id;
            }
        }
        let n = leaders.len();
        self.lock_topics()
            .insert(topic.to_string(), TopicInfo { leaders });
        Ok(n)
    }

    /// The partition count of `topic` (from cached metadata, fetched on first use). A retriable
    /// answer (a topic just created whose metadata has not reached every broker yet answers
    /// UNKNOWN_TOPIC_OR_PARTITION or LEADER_NOT_AVAILABLE) is asked again with backoff until the
    /// delivery timeout, as `send_batch` retries; then [`Error::DeliveryTimeout`].
    pub async fn partitions(&self, topic: &str) -> Result<i32> {
        let cached = self.lock_topics().get(topic).map(|t| t.leaders.len());
        let n = match cached {
            Some(n) => n,
            // Boxed: the lookup is on every reply's path, and the metadata request's state would
            // make every caller's future (allocated per reply) several times larger.
            None => Box::pin(self.fetch_partitions(topic)).await?,
        };
        i32::try_from(n).map_err(|_| Error::Config("too many partitions".into()))
    }

    /// The partition count of `topic` from a metadata request, asked again with backoff while
    /// the answer is retriable (see [`Producer::partitions`]).
    async fn fetch_partitions(&self, topic: &str) -> Result<usize> {
        let deadline = Instant::now() + self.config.delivery_timeout;
        let mut attempt = 0u32;
        loop {
            match self.refresh(topic).await {
                Ok(n) => return Ok(n),
                Err(e) if e.is_retriable() => {
                    let delay =
                        backoff_delay(Duration::from_millis(50), Duration::from_secs(1), attempt);
                    if Instant::now() + delay >= deadline {
                        return Err(Error::DeliveryTimeout {
                            context: ctx(topic, None),
                            after: self.config.delivery_timeout,
                            last: Box::new(e),
                        });
                    }
                    attempt = attempt.saturating_add(1);
                    tokio::time::sleep(delay).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends one record to the partition Java would choose for its key (round robin without a key).
    /// Returns `(partition, offset)`.
    pub async fn send(&self, topic: &str, record: ProduceRecord) -> Result<(i32, i64)> {
        let n = self.partitions(topic).await?;
        let partition = match record.key.as_deref() {
            Some(k) => partition_for_key(k, n),
            None => {
                let r = self
                    .round_robin
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                i32::try_from(r % u32::try_from(n.max(1)).unwrap_or(1)).unwrap_or(0)
            }
        };
        let offset = self
            .send_batch(topic, partition, std::slice::from_ref(&record))
            .await?;
        Ok((partition, offset))
    }

    /// Sends one batch to one partition and returns its base offset (-1 when the broker reported
    /// the batch as an already-written duplicate without its offset). Waits while another batch
    /// for the same partition is in flight; retries retriable errors with backoff, refreshing
    /// metadata when the leader moved, until the delivery timeout. See the module doc for how
    /// idempotence shapes the retries.
    pub async fn send_batch(
        &self,
        topic: &str,
        partition: i32,
        records: &[ProduceRecord],
    ) -> Result<i64> {
        let deadline = Instant::now() + self.config.delivery_timeout;
        let lock = {
            let mut locks = self
                .partition_locks
                .lock()
                .map_err(|_| Error::Config("producer lock poisoned".into()))?;
            Arc::clone(locks.entry((topic.to_string(), partition)).or_default())
        };
        let timed_out = |last: Error| Error::DeliveryTimeout {
            context: ctx(topic, Some(partition)),
            after: self.config.delivery_timeout,
            last: Box::new(last),
        };
        let Ok(mut state) = tokio::time::timeout_at(deadline, lock.lock()).await else {
            return Err(timed_out(Error::Config(
                "the partition's previous batch was still in flight".into(),
            )));
        };
        if let Some(stale) = state.unsettled.take() {
            // The previous batch was dropped mid-flight: it may yet be written under its
            // sequence, so that sequence (and the id's count here) cannot be used again.
            tracing::info!(
                topic,
                partition,
                producer_id = stale.id,
                "the partition's previous batch was abandoned in flight"
            );
            self.retire_producer_id(stale).await;
            state.owner = None;
        }
        let mut attempt: u32 = 0;
        // The id and base sequence of this batch: fixed once chosen, so every retry is recognised
        // as the same batch; changed only when the broker says nothing was written under them.
        let mut stamp: Option<(ProducerId, BatchSequence)> = None;
        // Whether an attempt may have been written although we saw no acknowledgement.
        let mut outcome_unknown = false;
        loop {
            if self.is_idempotent() && stamp.is_none() {
                let pid = match self.current_producer_id(deadline).await {
                    Ok(Some(p)) => Some(p),
                    Ok(None) => None,
                    Err(e) if Instant::now() >= deadline => return Err(timed_out(e)),
                    Err(e) => return Err(e),
                };
                if let Some(pid) = pid {
                    if state.owner != Some(pid) {
                        state.owner = Some(pid);
                        state.next_sequence = 0;
                    }
                    stamp = Some((
                        pid,
                        BatchSequence {
                            producer_id: pid.id,
                            producer_epoch: pid.epoch,
                            base_sequence: state.next_sequence,
                        },
                    ));
                }
            }
            let sequence = stamp.map(|(_, s)| s);
            // Cleared where the outcome becomes known (written, duplicate, id retired, failed);
            // left set through retries and their backoff, and if this future is dropped.
            state.unsettled = stamp.map(|(pid, _)| pid);
            let result = match tokio::time::timeout_at(
                deadline,
                self.try_send(topic, partition, records, sequence),
            )
            .await
            {
                Ok(r) => r,
                Err(_) => {
                    // Abandoned mid-request: it may have been written.
                    outcome_unknown = true;
                    Err(Error::RequestTimeout {
                        broker: String::new(),
                        api: "Produce",
                        after: self.config.delivery_timeout,
                    })
                }
            };
            let e = match result {
                Ok(offset) => {
                    state.unsettled = None;
                    if let Some((_, s)) = stamp {
                        state.next_sequence = s.next_base(records.len());
                    }
                    return Ok(offset);
                }
                Err(e) => e,
            };
            let code = e.code();
            if let Some((pid, s)) = stamp {
                if code == Some(ErrorCode::DUPLICATE_SEQUENCE_NUMBER) {
                    // The broker holds this batch already: written once, which is the point.
                    tracing::debug!(
                        topic,
                        partition,
                        base_sequence = s.base_sequence,
                        "duplicate batch acknowledged"
                    );
                    state.next_sequence = s.next_base(records.len());
                    state.unsettled = None;
                    return Ok(-1);
                }
                if matches!(
                    code,
                    Some(
                        ErrorCode::UNKNOWN_PRODUCER_ID
                            | ErrorCode::INVALID_PRODUCER_EPOCH
                            | ErrorCode::PRODUCER_FENCED
                    )
                ) && Instant::now() < deadline
                    && attempt < self.config.retries
                {
                    tracing::info!(topic, partition, error = %e, "producer id refused; taking a new one");
                    self.retire_producer_id(pid).await;
                    state.unsettled = None;
                    stamp = None;
                    attempt = attempt.saturating_add(1);
                    continue;
                }
            }
            let retriable = e.is_retriable() || leader_unreachable(&e);
            outcome_unknown |= e.breaks_connection() || matches!(e, Error::RequestTimeout { .. });
            let cfg = self.pool.config();
            let wait = backoff_delay(cfg.backoff_initial, cfg.backoff_max, attempt);
            if retriable && attempt < self.config.retries && Instant::now() < deadline {
                if code.is_some_and(ErrorCode::needs_metadata_refresh)
                    || e.breaks_connection()
                    || leader_unreachable(&e)
                {
                    let _ = tokio::time::timeout_at(deadline, self.refresh(topic)).await;
                }
                // The backoff, cut short at the deadline: the last attempt is made in time.
                tokio::time::sleep_until((Instant::now() + wait).min(deadline)).await;
                if Instant::now() < deadline {
                    attempt = attempt.saturating_add(1);
                    continue;
                }
            }
            // The batch fails. Under idempotence, a sequence the broker may hold must not be
            // reused, and after OUT_OF_ORDER_SEQUENCE_NUMBER the broker's state is unknown.
            if let Some((pid, _)) = stamp
                && (outcome_unknown || code == Some(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER))
            {
                self.retire_producer_id(pid).await;
                state.owner = None;
            }
            state.unsettled = None;
            return Err(if !retriable {
                e
            } else if attempt >= self.config.retries {
                Error::RetriesExhausted {
                    attempts: attempt.saturating_add(1),
                    last: Box::new(e),
                }
            } else {
                timed_out(e)
            });
        }
    }

    async fn try_send(
        &self,
        topic: &str,
        partition: i32,
        records: &[ProduceRecord],
        sequence: Option<BatchSequence>,
    ) -> Result<i64> {
        let conn = self.leader_connection(topic, partition).await?;
        conn.produce_sequenced(
            topic,
            partition,
            records,
            self.config.compression,
            self.config.timeout,
            sequence,
        )
        .await
    }

    /// A produce connection to the partition's leader, from cached metadata (fetched when the
    /// topic or a leader is not known).
    pub(crate) async fn leader_connection(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Arc<BrokerConnection>> {
        let leader = {
            let topics = self.lock_topics();
            topics.get(topic).and_then(|t| {
                usize::try_from(partition)
                    .ok()
                    .and_then(|i| t.leaders.get(i))
                    .copied()
            })
        };
        let leader = match leader {
            Some(l) if l >= 0 => l,
            _ => {
                self.refresh(topic).await?;
                let topics = self.lock_topics();
                topics
                    .get(topic)
                    .and_then(|t| {
                        usize::try_from(partition)
                            .ok()
                            .and_then(|i| t.leaders.get(i))
                            .copied()
                    })
                    .filter(|l| *l >= 0)
                    .ok_or_else(|| Error::Kafka {
                        broker: String::new(),
                        api: "Produce",
                        code: ErrorCode::LEADER_NOT_AVAILABLE,
                        context: ctx(topic, Some(partition)),
                        message: None,
                    })?
            }
        };
        self.pool.broker(leader, ConnectionKind::Produce).await
    }
}

fn ctx(topic: &str, partition: Option<i32>) -> Context {
    Context {
        topic: Some(topic.to_string()),
        partition,
        offset: None,
    }
}

/// True if `e` says the pool could not get a working connection to the broker: every connect
/// attempt failed, whether at TCP connect or in the connection's set-up (ApiVersions cut off by
/// a proxy whose upstream is gone, a broker still starting). Retried like any transport error,
/// with the batch's stamp kept: an earlier attempt of the batch may have been written, and only a
/// retry under the same sequence lets the broker recognise it.
pub(crate) fn leader_unreachable(e: &Error) -> bool {
    match e {
        Error::RetriesExhausted { last, .. } => matches!(
            **last,
            Error::Connect { .. }
                | Error::ConnectTimeout { .. }
                | Error::Transport { .. }
                | Error::RequestTimeout { .. }
        ),
        Error::Connect { .. } | Error::ConnectTimeout { .. } => true,
        _ => false,
    }
}
