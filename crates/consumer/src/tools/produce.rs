//! Producing many records fast and in order ([`Batcher`]), the generated session workload
//! ([`SessionWorkload`]), and reading a whole topic ([`read_topic`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use orderly_protocol::messages::list_offsets::{EARLIEST, LATEST};
use orderly_protocol::partitioner::partition_for_key;
use orderly_protocol::records::{FetchedRecord, IsolationLevel, ProduceRecord, WireHeader};
use orderly_protocol::{
    ConnectionKind, ConnectionPool, FetchOptions, FetchSpec, Producer, ProducerConfig,
};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::error::DriverError;
use crate::metadata_cache::MetadataCache;

/// How long [`Batcher::new`] and [`read_topic`] wait for a topic to appear in metadata.
const TOPIC_PATIENCE: Duration = Duration::from_secs(5);

/// Reads every record of `topic`, every partition from its earliest offset up to the high
/// watermark (read_committed) at the time of the call. Returns `(partition, record)` pairs,
/// partition by partition, each in offset order. Holds the whole topic in memory: for a topic of
/// any size, read it in chunks with [`TopicReader`].
pub async fn read_topic(
    pool: &Arc<ConnectionPool>,
    cluster: &MetadataCache,
    topic: &str,
) -> Result<Vec<(i32, FetchedRecord)>, DriverError> {
    let mut reader = TopicReader::open(pool, cluster, topic).await?;
    let mut out = Vec::new();
    while let Some(chunk) = reader.next_chunk().await? {
        out.extend(chunk);
    }
    Ok(out)
}

/// Reads a topic from its start up to its end at the time of [`TopicReader::open`], one fetch
/// response (at most 4 MiB per request) at a time: partition by partition, each in offset order,
/// so memory stays bounded whatever the topic's size.
#[derive(Debug)]
pub struct TopicReader {
    pool: Arc<ConnectionPool>,
    cluster: MetadataCache,
    topic: String,
    partitions: i32,
    /// The partition being read, its position and its end.
    at: Option<(i32, i64, i64)>,
    next_partition: i32,
}

impl TopicReader {
    /// A reader of `topic` (waits a few seconds for it to appear in metadata).
    pub async fn open(
        pool: &Arc<ConnectionPool>,
        cluster: &MetadataCache,
        topic: &str,
    ) -> Result<Self, DriverError> {
        let partitions = cluster.wait_for_topic(topic, TOPIC_PATIENCE).await?;
        Ok(TopicReader {
            pool: pool.clone(),
            cluster: cluster.clone(),
            topic: topic.to_owned(),
            partitions,
            at: None,
            next_partition: 0,
        })
    }

    /// The next records as `(partition, record)` pairs; `None` once the end is reached.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<(i32, FetchedRecord)>>, DriverError> {
        loop {
            let (p, pos, end) = match self.at {
                Some((p, pos, end)) if pos < end => (p, pos, end),
                _ => {
                    if self.next_partition >= self.partitions {
                        return Ok(None);
                    }
                    let p = self.next_partition;
                    self.next_partition += 1;
                    let (topic, cluster) = (&self.topic, &self.cluster);
                    let pos = cluster
                        .list_offset(topic, p, EARLIEST, IsolationLevel::ReadCommitted)
                        .await?;
                    let end = cluster
                        .list_offset(topic, p, LATEST, IsolationLevel::ReadCommitted)
                        .await?;
                    self.at = Some((p, pos, end));
                    continue;
                }
            };
            let leader = self
                .cluster
                .leader(&self.topic, p)
                .ok_or_else(|| DriverError::NoLeader(self.topic.clone(), p))?;
            let conn = self
                .pool
                .broker(leader.node_id, ConnectionKind::Fetch)
                .await?;
            let spec = FetchSpec {
                topic: self.topic.clone(),
                topic_id: [0; 16],
                partition: p,
                offset: pos,
                leader_epoch: -1,
                max_bytes: 4 << 20,
            };
            let opts = FetchOptions {
                max_wait: Duration::from_millis(100),
                ..FetchOptions::default()
            };
            let fetched = conn.fetch(&[spec], &opts).await?;
            let Some(pf) = fetched.into_iter().next() else {
                self.at = None;
                continue;
            };
            if let Some(e) = pf.error {
                return Err(e.into());
            }
            if pf.next_offset <= pos {
                // Nothing more readable below the end (the rest was aborted or compacted away).
                self.at = None;
                continue;
            }
            self.at = Some((p, pf.next_offset, end));
            let chunk: Vec<(i32, FetchedRecord)> = pf
                .records
                .into_iter()
                .filter(|r| r.offset < end)
                .map(|r| (p, r))
                .collect();
            if !chunk.is_empty() {
                return Ok(Some(chunk));
            }
        }
    }
}

/// The most bytes [`Batcher`] puts in one batch (a larger record goes alone).
const MAX_BATCH_BYTES: usize = 512 << 10;

/// A record's bytes in a batch, roughly (key, value, headers, per-record overhead).
fn record_size(r: &ProduceRecord) -> usize {
    let len = |b: &Option<Bytes>| b.as_ref().map_or(0, Bytes::len);
    32 + len(&r.key)
        + len(&r.value)
        + r.headers
            .iter()
            .map(|h| 8 + h.key.len() + len(&h.value))
            .sum::<usize>()
}

/// Produces records in batches to one topic: one batch in flight per partition (so order per
/// partition holds), partitions in parallel, with the default [`ProducerConfig`] (acks=all,
/// idempotent, 120 s delivery timeout). Keys are partitioned like Java's default partitioner,
/// keyless records round robin.
///
/// Push records with [`Batcher::push`] (or [`Batcher::push_to`] for an explicit partition), call
/// [`Batcher::flush`] when the input pauses, and [`Batcher::finish`] at the end: it returns once
/// every record is acknowledged, or the first error.
#[derive(Debug)]
pub struct Batcher {
    partitions: i32,
    pending: BTreeMap<i32, Vec<ProduceRecord>>,
    /// Approximate bytes of each partition's pending batch.
    pending_bytes: BTreeMap<i32, usize>,
    lanes: BTreeMap<i32, mpsc::Sender<Vec<ProduceRecord>>>,
    tasks: JoinSet<Result<u64, DriverError>>,
    producer: Arc<Producer>,
    topic: String,
    max_batch: usize,
    round_robin: i32,
    /// CreateTime → acknowledged per record (µs), when [`Batcher::measure_acks`] asked for it.
    acks: Option<Arc<std::sync::Mutex<Vec<u64>>>>,
}

impl Batcher {
    /// A batcher for `topic` (which must exist; waits a few seconds for a new one to appear).
    pub async fn new(
        pool: Arc<ConnectionPool>,
        cluster: &MetadataCache,
        topic: &str,
    ) -> Result<Self, DriverError> {
        let producer = Arc::new(Producer::new(pool, ProducerConfig::default()));
        Self::with_producer(producer, cluster, topic).await
    }

    /// A batcher for `topic` on a producer of the caller's (shared between batchers, or with its
    /// own [`ProducerConfig`]).
    pub async fn with_producer(
        producer: Arc<Producer>,
        cluster: &MetadataCache,
        topic: &str,
    ) -> Result<Self, DriverError> {
        let partitions = cluster.wait_for_topic(topic, TOPIC_PATIENCE).await?;
        Ok(Self {
            partitions,
            pending: BTreeMap::new(),
            pending_bytes: BTreeMap::new(),
            lanes: BTreeMap::new(),
            tasks: JoinSet::new(),
            producer,
            topic: topic.to_owned(),
            max_batch: 1000,
            round_robin: 0,
            acks: None,
        })
    }

    /// Keeps, for every record acknowledged from now on that carries a timestamp, the time from
    /// that timestamp (its CreateTime) to its acknowledgement, readable from the returned handle
    /// (also after [`Batcher::finish`]). Eight bytes per record: meant for bounded runs such as a
    /// generated workload.
    pub fn measure_acks(&mut self) -> AckLatencies {
        AckLatencies(self.acks.get_or_insert_with(Default::default).clone())
    }

    /// The partition a record goes to.
    pub fn partition_of(&mut self, r: &ProduceRecord) -> i32 {
        match r.key.as_deref() {
            Some(k) => partition_for_key(k, self.partitions),
            None => {
                self.round_robin = (self.round_robin + 1) % self.partitions.max(1);
                self.round_robin
            }
        }
    }

    /// Queues one record to an explicit partition.
    pub async fn push_to(&mut self, p: i32, r: ProduceRecord) -> Result<(), DriverError> {
        let size = record_size(&r);
        if self
            .pending_bytes
            .get(&p)
            .is_some_and(|b| b + size > MAX_BATCH_BYTES)
        {
            // Within the broker's default `message.max.bytes` (1 MB) per batch.
            self.flush_partition(p).await?;
        }
        *self.pending_bytes.entry(p).or_default() += size;
        let q = self.pending.entry(p).or_default();
        q.push(r);
        if q.len() >= self.max_batch {
            self.flush_partition(p).await?;
        }
        Ok(())
    }

    /// Queues one record to the partition of its key.
    pub async fn push(&mut self, r: ProduceRecord) -> Result<(), DriverError> {
        let p = self.partition_of(&r);
        self.push_to(p, r).await
    }

    async fn flush_partition(&mut self, p: i32) -> Result<(), DriverError> {
        self.pending_bytes.remove(&p);
        let Some(batch) = self.pending.remove(&p).filter(|b| !b.is_empty()) else {
            return Ok(());
        };
        if !self.lanes.contains_key(&p) {
            let (tx, mut rx) = mpsc::channel::<Vec<ProduceRecord>>(4);
            let (producer, topic) = (self.producer.clone(), self.topic.clone());
            let acks = self.acks.clone();
            self.tasks.spawn(async move {
                let mut n = 0u64;
                while let Some(b) = rx.recv().await {
                    producer.send_batch(&topic, p, &b).await?;
                    n += b.len() as u64;
                    if let Some(acks) = &acks {
                        let now_us = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
                        if let Ok(mut acks) = acks.lock() {
                            acks.extend(b.iter().filter_map(|r| {
                                let ts = r.timestamp?;
                                u64::try_from(now_us - ts.saturating_mul(1000)).ok()
                            }));
                        }
                    }
                }
                Ok(n)
            });
            self.lanes.insert(p, tx);
        }
        if let Some(tx) = self.lanes.get(&p)
            && tx.send(batch).await.is_err()
        {
            // The lane failed; its error is the one to report.
            return self.finish_err().await;
        }
        Ok(())
    }

    async fn finish_err(&mut self) -> Result<(), DriverError> {
        self.lanes.clear();
        while let Some(r) = self.tasks.join_next().await {
            r.map_err(|e| DriverError::Task(format!("producer lane: {e}")))??;
        }
        Err(DriverError::Task("a producer lane stopped".into()))
    }

    /// Sends whatever is queued (without waiting for the acknowledgements).
    pub async fn flush(&mut self) -> Result<(), DriverError> {
        let ps: Vec<i32> = self.pending.keys().copied().collect();
        for p in ps {
            self.flush_partition(p).await?;
        }
        Ok(())
    }

    /// Flushes, waits for every acknowledgement and returns the number of records written.
    pub async fn finish(mut self) -> Result<u64, DriverError> {
        self.flush().await?;
        self.lanes.clear();
        let mut n = 0;
        while let Some(r) = self.tasks.join_next().await {
            n += r.map_err(|e| DriverError::Task(format!("producer lane: {e}")))??;
        }
        Ok(n)
    }
}

/// CreateTime → acknowledged of the records a [`Batcher`] wrote (see [`Batcher::measure_acks`]).
#[derive(Debug, Clone)]
pub struct AckLatencies(Arc<std::sync::Mutex<Vec<u64>>>);

impl AckLatencies {
    /// The latencies so far, in microseconds, sorted.
    pub fn sorted_us(&self) -> Vec<u64> {
        let mut v = self.0.lock().map(|v| v.clone()).unwrap_or_default();
        v.sort_unstable();
        v
    }
}

/// The generated session workload of `orderly produce --generate`: record `i` belongs to session
/// `i % sessions` (keys `s-000000`, `s-000001`, ..., as the benchmark workload names them),
/// carries the headers `event-id` (`<prefix>-<i>`) and `seq` (1, 2, 3... per session) and a
/// 100-byte value.
#[derive(Debug, Clone)]
pub struct SessionWorkload {
    prefix: String,
    seq: Vec<u64>,
    next: u64,
    value: Bytes,
}

impl SessionWorkload {
    /// A workload over `sessions` sessions (at least 1) whose event ids start with `prefix`.
    pub fn new(sessions: usize, prefix: impl Into<String>) -> Result<Self, DriverError> {
        if sessions == 0 {
            return Err(DriverError::Config(
                "the workload needs at least 1 session".into(),
            ));
        }
        Ok(Self {
            prefix: prefix.into(),
            seq: vec![0; sessions],
            next: 0,
            value: Bytes::from(vec![b'v'; 100]),
        })
    }

    /// Records generated so far.
    pub fn generated(&self) -> u64 {
        self.next
    }

    /// The next record, stamped with `now_ms` as its CreateTime.
    pub fn next_record(&mut self, now_ms: i64) -> ProduceRecord {
        let i = self.next;
        self.next += 1;
        let n = self.seq.len() as u64;
        let s = usize::try_from(i % n).unwrap_or(0);
        let seq = match self.seq.get_mut(s) {
            Some(c) => {
                *c += 1;
                *c
            }
            None => 0,
        };
        ProduceRecord {
            key: Some(Bytes::from(crate::synthetic::session_key(s))),
            value: Some(self.value.clone()),
            headers: vec![
                WireHeader {
                    key: "event-id".into(),
                    value: Some(Bytes::from(format!("{}-{i}", self.prefix))),
                },
                WireHeader {
                    key: "seq".into(),
                    value: Some(Bytes::from(seq.to_string())),
                },
            ],
            timestamp: Some(now_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(r: &ProduceRecord, k: &str) -> String {
        let h = r
            .headers
            .iter()
            .find(|h| h.key == k)
            .and_then(|h| h.value.clone());
        String::from_utf8(h.map(|b| b.to_vec()).unwrap_or_default()).unwrap_or_default()
    }

    #[test]
    fn workload_numbers_each_session_from_one() {
        let mut w = SessionWorkload::new(3, "e1").unwrap_or_else(|e| panic!("{e}"));
        let rs: Vec<ProduceRecord> = (0..7).map(|_| w.next_record(5)).collect();
        assert_eq!(w.generated(), 7);
        let keys: Vec<_> = rs
            .iter()
            .map(|r| r.key.clone().unwrap_or_default())
            .collect();
        assert_eq!(keys[0], keys[3]);
        assert_eq!(keys[0], keys[6]);
        assert_ne!(keys[0], keys[1]);
        let seqs: Vec<String> = rs.iter().map(|r| header(r, "seq")).collect();
        assert_eq!(seqs, ["1", "1", "1", "2", "2", "2", "3"]);
        assert_eq!(header(&rs[4], "event-id"), "e1-4");
        assert_eq!(rs[4].timestamp, Some(5));
        assert!(SessionWorkload::new(0, "x").is_err());
    }
}
