//! `MetadataCache`, the driver's view of the cluster: partition leaders and leader epochs, refreshed on
//! errors and periodically, and ListOffsets.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orderly_protocol::records::IsolationLevel;
use orderly_protocol::{ConnectionKind, ConnectionPool, ErrorCode};

use crate::error::DriverError;

/// Where a partition lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leader {
    /// Broker id of the leader.
    pub node_id: i32,
    /// The leader epoch, sent in fetches so a stale leader is detected.
    pub epoch: i32,
}

#[derive(Debug, Default)]
struct Snapshot {
    leaders: HashMap<(String, i32), Leader>,
    partition_counts: HashMap<String, i32>,
    refreshed: Option<Instant>,
}

/// A metadata cache over a connection pool. Cheap to clone.
#[derive(Debug, Clone)]
pub struct MetadataCache {
    pool: Arc<ConnectionPool>,
    topics: Arc<Vec<String>>,
    snapshot: Arc<Mutex<Snapshot>>,
    max_age: Duration,
}

impl MetadataCache {
    /// A cache for `topics` (more are added on demand, e.g. the DLQ topic).
    pub fn new(pool: Arc<ConnectionPool>, topics: Vec<String>, max_age: Duration) -> Self {
        MetadataCache {
            pool,
            topics: Arc::new(topics),
            snapshot: Arc::default(),
            max_age,
        }
    }

    /// The pool the cache reads through.
    pub fn pool(&self) -> &Arc<ConnectionPool> {
        &self.pool
    }

    /// Re-reads metadata for our topics plus `extra`, and records broker addresses in the pool.
    pub async fn refresh(&self, extra: &[&str]) -> Result<(), DriverError> {
        let mut names: Vec<String> = self.topics.iter().cloned().collect();
        names.extend(extra.iter().map(|s| s.to_string()));
        {
            // Also keep topics learnt on demand (the DLQ topic) fresh.
            let snap = self.lock();
            names.extend(snap.partition_counts.keys().cloned());
        }
        names.sort();
        names.dedup();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let (_, resp) = self.pool.metadata(Some(&refs)).await?;
        let mut snap = self.lock();
        for t in resp.topics {
            let Some(name) = t.name else { continue };
            if t.error_code != ErrorCode::NONE {
                tracing::debug!(topic = %name, error = %t.error_code, "metadata error for topic");
                continue;
            }
            snap.partition_counts
                .insert(name.clone(), t.partitions.len() as i32);
            for p in t.partitions {
                snap.leaders.insert(
                    (name.clone(), p.partition_index),
                    Leader {
                        node_id: p.leader_id,
                        epoch: p.leader_epoch,
                    },
                );
            }
        }
        snap.refreshed = Some(Instant::now());
        Ok(())
    }

    /// Whether the snapshot is older than the configured maximum age (or was never read).
    pub fn is_stale(&self) -> bool {
        self.lock()
            .refreshed
            .is_none_or(|t| t.elapsed() > self.max_age)
    }

    /// The leader of a partition, if known.
    pub fn leader(&self, topic: &str, partition: i32) -> Option<Leader> {
        self.lock()
            .leaders
            .get(&(topic.to_string(), partition))
            .copied()
            .filter(|l| l.node_id >= 0)
    }

    /// The partition count of a topic, waiting up to `patience` for it to appear in metadata (a
    /// topic created a moment ago takes a little while to reach every broker's metadata cache).
    pub async fn wait_for_topic(
        &self,
        topic: &str,
        patience: Duration,
    ) -> Result<i32, DriverError> {
        let started = Instant::now();
        loop {
            match self.partition_count(topic).await {
                Err(DriverError::UnknownTopic(_)) if started.elapsed() < patience => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => return other,
            }
        }
    }

    /// The partition count of a topic, refreshing metadata once if unknown.
    pub async fn partition_count(&self, topic: &str) -> Result<i32, DriverError> {
        if let Some(n) = self.lock().partition_counts.get(topic).copied() {
            return Ok(n);
        }
        self.refresh(&[topic]).await?;
        self.lock()
            .partition_counts
            .get(topic)
            .copied()
            .ok_or_else(|| DriverError::UnknownTopic(topic.to_string()))
    }

    /// ListOffsets for one partition at its leader: `timestamp` is a time in ms, or
    /// [`orderly_protocol::messages::list_offsets::LATEST`] / `EARLIEST`.
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
        isolation: IsolationLevel,
    ) -> Result<i64, DriverError> {
        let leader = match self.leader(topic, partition) {
            Some(l) => l,
            None => {
                self.refresh(&[topic]).await?;
                self.leader(topic, partition)
                    .ok_or_else(|| DriverError::NoLeader(topic.to_string(), partition))?
            }
        };
        let conn = self
            .pool
            .broker(leader.node_id, ConnectionKind::Coordination)
            .await?;
        let (offset, _epoch) = conn
            .list_offset(topic, partition, timestamp, isolation)
            .await?;
        Ok(offset)
    }

    /// ListOffsets for many partitions led by broker `leader`, in one request. One result per
    /// partition, in order: the offset or the partition's error code.
    pub async fn list_offsets_at(
        &self,
        leader: i32,
        partitions: &[(&str, i32)],
        timestamp: i64,
        isolation: IsolationLevel,
    ) -> Result<Vec<Result<i64, ErrorCode>>, DriverError> {
        let conn = self
            .pool
            .broker(leader, ConnectionKind::Coordination)
            .await?;
        Ok(conn.list_offsets(partitions, timestamp, isolation).await?)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Snapshot> {
        // A poisoned lock only means another thread panicked while holding it; the snapshot is a
        // cache that is always safe to read or overwrite.
        self.snapshot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
