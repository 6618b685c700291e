//! A small producer for the DLQ and the CLI: acks=all, Java-compatible key partitioning, and at most
//! one batch in flight per partition, so order within a partition holds across retries.
//!
//! It is not idempotent: a retry after a lost response can write a batch twice (at-least-once).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::connection::{ConnectionKind, ConnectionPool, backoff_delay};
use crate::error::{Context, Error, ErrorCode, Result};
use crate::partitioner::partition_for_key;
use crate::records::{Compression, ProduceRecord};

/// Producer settings. `Default`: no compression, 30 s produce timeout, 5 retries.
#[derive(Debug, Clone, Copy)]
pub struct ProducerConfig {
    /// Batch compression.
    pub compression: Compression,
    /// Server-side produce timeout (replication wait for acks=all).
    pub timeout: Duration,
    /// Retries of retriable errors per batch.
    pub retries: u32,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        Self {
            compression: Compression::None,
            timeout: Duration::from_secs(30),
            retries: 5,
        }
    }
}

/// Held while a batch for one partition is in flight.
type PartitionLock = Arc<tokio::sync::Mutex<()>>;

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
    topics: tokio::sync::Mutex<HashMap<String, TopicInfo>>,
    partition_locks: std::sync::Mutex<HashMap<(String, i32), PartitionLock>>,
    round_robin: std::sync::atomic::AtomicU32,
}

impl Producer {
    /// A producer on `pool`.
    pub fn new(pool: Arc<ConnectionPool>, config: ProducerConfig) -> Self {
        Self {
            pool,
            config,
            topics: tokio::sync::Mutex::new(HashMap::new()),
            partition_locks: std::sync::Mutex::new(HashMap::new()),
            round_robin: std::sync::atomic::AtomicU32::new(0),
        }
    }

    async fn refresh(&self, topic: &str) -> Result<usize> {
        let conn = self.pool.any().await?;
        let md = conn.metadata(Some(&[topic])).await?;
        for b in &md.brokers {
            self.pool.set_broker(b.node_id, b.addr());
        }
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
        self.topics
            .lock()
            .await
            .insert(topic.to_string(), TopicInfo { leaders });
        Ok(n)
    }

    /// The partition count of `topic` (from cached metadata, fetched on first use).
    pub async fn partitions(&self, topic: &str) -> Result<i32> {
        let cached = self.topics.lock().await.get(topic).map(|t| t.leaders.len());
        let n = match cached {
            Some(n) => n,
            None => self.refresh(topic).await?,
        };
        i32::try_from(n).map_err(|_| Error::Config("too many partitions".into()))
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

    /// Sends one batch to one partition and returns its base offset. Waits while another batch for
    /// the same partition is in flight; retries retriable errors with backoff, refreshing metadata
    /// when the leader moved.
    pub async fn send_batch(
        &self,
        topic: &str,
        partition: i32,
        records: &[ProduceRecord],
    ) -> Result<i64> {
        let lock = {
            let mut locks = self
                .partition_locks
                .lock()
                .map_err(|_| Error::Config("producer lock poisoned".into()))?;
            Arc::clone(locks.entry((topic.to_string(), partition)).or_default())
        };
        let _in_flight = lock.lock().await;
        let mut attempt = 0;
        loop {
            let result = self.try_send(topic, partition, records).await;
            match result {
                Ok(o) => return Ok(o),
                // A leader that cannot be reached at all (the pool gave up connecting: the broker
                // died) is retried too, after asking the cluster who leads now.
                Err(e)
                    if (e.is_retriable() || leader_unreachable(&e))
                        && attempt < self.config.retries =>
                {
                    if e.code().is_some_and(ErrorCode::needs_metadata_refresh)
                        || e.breaks_connection()
                        || leader_unreachable(&e)
                    {
                        let _ = self.refresh(topic).await;
                    }
                    let cfg = self.pool.config();
                    tokio::time::sleep(backoff_delay(
                        cfg.backoff_initial,
                        cfg.backoff_max,
                        attempt,
                    ))
                    .await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn try_send(
        &self,
        topic: &str,
        partition: i32,
        records: &[ProduceRecord],
    ) -> Result<i64> {
        let leader = {
            let topics = self.topics.lock().await;
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
                let topics = self.topics.lock().await;
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
        let conn = self.pool.broker(leader, ConnectionKind::Produce).await?;
        conn.produce(
            topic,
            partition,
            records,
            self.config.compression,
            self.config.timeout,
        )
        .await
    }
}

fn ctx(topic: &str, partition: Option<i32>) -> Context {
    Context {
        topic: Some(topic.to_string()),
        partition,
        offset: None,
    }
}

/// True if `e` says the pool could not connect to a broker at all (every connect attempt failed).
fn leader_unreachable(e: &Error) -> bool {
    match e {
        Error::RetriesExhausted { last, .. } => {
            matches!(**last, Error::Connect { .. } | Error::ConnectTimeout { .. })
        }
        Error::Connect { .. } | Error::ConnectTimeout { .. } => true,
        _ => false,
    }
}
