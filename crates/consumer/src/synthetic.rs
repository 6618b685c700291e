//! The benchmark's synthetic workload: a seed producer and a handler with deterministic failure injection and an order check.
//!
//! Shared by the `orderly` CLI, the broker tests and the benchmarks, so every figure and every
//! test uses the same records and the same failure rules (BENCHMARKS.md, "The scenarios"):
//! key `s-000042`, 100-byte value, headers `event-id` (unique) and `seq` (1, 2, 3 per session);
//! a record fails transiently on its first attempt when `fnv1a(event-id) % 100 < transient_pct`,
//! and permanently when `fnv1a(event-id) % 1000 == 999` (if enabled).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use orderly_engine::{Attempt, Handler, HandlerError, Record};
use orderly_protocol::partitioner::partition_for_key;
use orderly_protocol::{
    ConnectionConfig, ConnectionPool, Header, ProduceRecord, Producer, ProducerConfig,
};

use crate::error::DriverError;

/// FNV-1a 64: the failure-injection hash (simple enough to reimplement in any peer).
pub fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The session key of session `s`.
pub fn session_key(s: usize) -> String {
    format!("s-{s:06}")
}

/// True if record `i` (event id `e-{i}`) is one of the permanent failures.
pub fn is_permanent(event_id: &[u8]) -> bool {
    fnv1a(event_id) % 1000 == 999
}

/// Produces `records` records for `sessions` sessions (round robin) to `topic`, partitioned like
/// Java's default partitioner, in batches of up to 2,000 per partition, acks=all.
pub async fn produce_seed(
    bootstrap: &[String],
    topic: &str,
    records: usize,
    sessions: usize,
) -> Result<(), DriverError> {
    let pool = Arc::new(ConnectionPool::new(
        bootstrap.to_vec(),
        ConnectionConfig::default(),
    ));
    let producer = Producer::new(pool.clone(), ProducerConfig::default());
    let cluster = crate::Cluster::new(
        pool.clone(),
        vec![topic.to_string()],
        Duration::from_secs(300),
    );
    let partitions = cluster
        .wait_for_topic(topic, Duration::from_secs(10))
        .await?;
    let mut per_partition: BTreeMap<i32, Vec<ProduceRecord>> = BTreeMap::new();
    let mut seq = vec![0u64; sessions.max(1)];
    let value = Bytes::from(vec![b'v'; 100]);
    let now_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    for i in 0..records {
        let s = i % sessions.max(1);
        seq[s] += 1;
        let key = session_key(s);
        let p = partition_for_key(key.as_bytes(), partitions);
        per_partition.entry(p).or_default().push(ProduceRecord {
            key: Some(Bytes::from(key)),
            value: Some(value.clone()),
            headers: vec![
                Header {
                    key: "event-id".into(),
                    value: Some(Bytes::from(format!("e-{i}"))),
                },
                Header {
                    key: "seq".into(),
                    value: Some(Bytes::from(seq[s].to_string())),
                },
            ],
            timestamp: Some(now_ms),
        });
    }
    for (p, recs) in per_partition {
        for chunk in recs.chunks(2000) {
            producer.send_batch(topic, p, chunk).await?;
        }
    }
    Ok(())
}

/// Produces the seed's records **live**: `rate` records per second for `sessions` sessions (round
/// robin, `seq` 1, 2, 3 per session, CreateTime = the moment of sending) until `stop` completes.
/// Returns how many records were written (acks=all). The rate holds on average: a late tick sends
/// what it owes.
pub async fn produce_live(
    bootstrap: &[String],
    topic: &str,
    sessions: usize,
    rate: u64,
    stop: impl std::future::Future<Output = ()>,
) -> Result<u64, DriverError> {
    let pool = Arc::new(ConnectionPool::new(
        bootstrap.to_vec(),
        ConnectionConfig::default(),
    ));
    let producer = Producer::new(pool.clone(), ProducerConfig::default());
    let cluster = crate::Cluster::new(
        pool.clone(),
        vec![topic.to_string()],
        Duration::from_secs(300),
    );
    let partitions = cluster
        .wait_for_topic(topic, Duration::from_secs(10))
        .await?;
    let sessions = sessions.max(1);
    let mut seq = vec![0u64; sessions];
    let value = Bytes::from(vec![b'v'; 100]);
    let start = Instant::now();
    let mut sent: u64 = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(sent),
            _ = tick.tick() => {}
        }
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        if due <= sent {
            continue;
        }
        let now_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut per_partition: BTreeMap<i32, Vec<ProduceRecord>> = BTreeMap::new();
        for i in sent..due {
            let s = (i % sessions as u64) as usize;
            seq[s] += 1;
            let key = session_key(s);
            let p = partition_for_key(key.as_bytes(), partitions);
            per_partition.entry(p).or_default().push(ProduceRecord {
                key: Some(Bytes::from(key)),
                value: Some(value.clone()),
                headers: vec![
                    Header {
                        key: "event-id".into(),
                        value: Some(Bytes::from(format!("e-{i}"))),
                    },
                    Header {
                        key: "seq".into(),
                        value: Some(Bytes::from(seq[s].to_string())),
                    },
                ],
                timestamp: Some(now_ms),
            });
        }
        let sends = per_partition
            .iter()
            .map(|(p, recs)| producer.send_batch(topic, *p, recs));
        for r in futures::future::join_all(sends).await {
            r?;
        }
        sent = due;
    }
}

/// What the synthetic handler observed.
#[derive(Debug, Default)]
pub struct Observed {
    /// Highest `seq` handled per session.
    pub last_seq: HashMap<Bytes, u64>,
    /// Records whose `seq` was not the session's previous `seq + 1` on its first attempt.
    pub violations: u64,
    /// First attempts of a `seq` at or below the session's highest (replays).
    pub replays: u64,
    /// Record latencies (handler success − CreateTime), in microseconds.
    pub latencies_us: Vec<u64>,
    /// When the first record was handed to the handler.
    pub first_handled: Option<Instant>,
}

/// A handler applying the failure rules, checking order and measuring latency.
#[derive(Debug, Clone)]
pub struct Synthetic {
    transient_pct: u64,
    permanent: bool,
    work: Duration,
    /// What it saw (lock held only for a few instructions per record).
    pub observed: Arc<Mutex<Observed>>,
}

impl Synthetic {
    /// A handler failing `transient_pct` % of records once, 0.1 % permanently if `permanent`, each
    /// attempt taking `work` (an async sleep).
    pub fn new(transient_pct: u64, permanent: bool, work: Duration) -> Self {
        Synthetic {
            transient_pct,
            permanent,
            work,
            observed: Arc::default(),
        }
    }
}

impl Handler for Synthetic {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        let id = record.header("event-id").cloned().unwrap_or_default();
        let h = fnv1a(&id);
        if attempt.number == 1 {
            let seq: u64 = record
                .header("seq")
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let key = record.key.clone().unwrap_or_default();
            let mut o = self
                .observed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            o.first_handled.get_or_insert_with(Instant::now);
            let last = o.last_seq.get(&key).copied().unwrap_or(0);
            if seq == last + 1 {
                o.last_seq.insert(key, seq);
            } else if seq <= last {
                o.replays += 1;
            } else {
                o.violations += 1;
                o.last_seq.insert(key, seq);
            }
        }
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        if self.permanent && h % 1000 == 999 {
            return Err(HandlerError::Permanent(format!(
                "invalid data in {}",
                String::from_utf8_lossy(&id)
            )));
        }
        if attempt.number == 1 && h % 100 < self.transient_pct {
            return Err(HandlerError::Transient("dependency timed out".into()));
        }
        let now_us = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64);
        let lat = (now_us - record.timestamp_ms * 1000).max(0) as u64;
        self.observed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .latencies_us
            .push(lat);
        Ok(())
    }
}

/// The `p`-th percentile (0..=100) of sorted values.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let idx = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// A future that completes once `target` records are terminal (handled or dead-lettered), or
/// on Ctrl-C; with no target only on Ctrl-C.
pub async fn stop_after(stats: orderly_engine::EngineStats, target: Option<u64>) {
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let started = Instant::now();
    loop {
        if let Some(t) = target
            && stats.handled() + stats.dead_lettered() >= t
        {
            tracing::info!(after = ?started.elapsed(), "target reached; shutting down");
            return;
        }
        tokio::select! {
            _ = &mut ctrl_c => return,
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
}
