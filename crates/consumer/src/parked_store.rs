//! `KafkaParkedStore`: the engine's [`ParkedStore`] on a compacted Kafka topic.
//!
//! One record per parked session: key `<topic>/<partition>/<session bytes>`, value
//! `v1\n<since>\n<last letter>\n<failed round>\n<reason>`; a release is a tombstone (null value),
//! so compaction keeps the topic as small as the parked set. Writes are acks=all and idempotent;
//! a load reads the topic from its start to its end now (the last record per key wins).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use orderly_engine::{ParkedSession, ParkedStore, ParkedStoreError, StoreFuture, TopicPartition};
use orderly_protocol::{ConnectionPool, ProduceRecord, Producer, ProducerConfig};

use crate::error::DriverError;
use crate::metadata_cache::MetadataCache;
use crate::tools::produce::read_topic;

/// Parked sessions kept in a compacted topic (see the module doc).
#[derive(Debug, Clone)]
pub struct KafkaParkedStore {
    pool: Arc<ConnectionPool>,
    cluster: MetadataCache,
    producer: Arc<Producer>,
    topic: String,
}

/// The store key of a session.
pub fn parked_key(partition: &TopicPartition, session: &[u8]) -> Bytes {
    let mut k = format!("{}/{}/", partition.topic, partition.partition).into_bytes();
    k.extend_from_slice(session);
    Bytes::from(k)
}

fn parse_key(k: &[u8]) -> Option<(TopicPartition, Bytes)> {
    // Topic names cannot contain '/'.
    let slash = k.iter().position(|&b| b == b'/')?;
    let topic = std::str::from_utf8(&k[..slash]).ok()?;
    let rest = &k[slash + 1..];
    let slash2 = rest.iter().position(|&b| b == b'/')?;
    let partition = std::str::from_utf8(&rest[..slash2]).ok()?.parse().ok()?;
    Some((
        TopicPartition::new(topic, partition),
        Bytes::copy_from_slice(&rest[slash2 + 1..]),
    ))
}

fn encode(e: &ParkedSession) -> Bytes {
    Bytes::from(format!(
        "v1\n{}\n{}\n{}\n{}",
        e.since_offset,
        e.last_letter,
        e.failed_round.as_deref().unwrap_or(""),
        e.reason
    ))
}

fn decode(partition: TopicPartition, session: Bytes, v: &[u8]) -> Option<ParkedSession> {
    let text = std::str::from_utf8(v).ok()?;
    let mut it = text.splitn(5, '\n');
    if it.next()? != "v1" {
        return None;
    }
    let since_offset = it.next()?.parse().ok()?;
    let last_letter = it.next()?.parse().ok()?;
    let failed = it.next()?;
    let reason = it.next().unwrap_or("").to_owned();
    Some(ParkedSession {
        partition,
        session,
        since_offset,
        last_letter,
        failed_round: (!failed.is_empty()).then(|| failed.to_owned()),
        reason,
        parked_records: 0,
    })
}

impl KafkaParkedStore {
    /// A store on `topic`, which must exist (see [`KafkaParkedStore::ensure_topic`]).
    pub fn new(
        pool: Arc<ConnectionPool>,
        cluster: MetadataCache,
        topic: impl Into<String>,
    ) -> Self {
        let producer = Arc::new(Producer::new(pool.clone(), ProducerConfig::default()));
        KafkaParkedStore {
            pool,
            cluster,
            producer,
            topic: topic.into(),
        }
    }

    /// Creates the store topic (one partition, `cleanup.policy=compact`) unless it exists, with
    /// the broker's default replication factor; a broker before Apache Kafka 2.4 (CreateTopics
    /// below v4) cannot fill that in, so there it gets one replica per broker, at most three.
    pub async fn ensure_topic(&self) -> Result<(), DriverError> {
        use orderly_protocol::messages::create_topics::CreateTopicsRequest;
        if self.cluster.partition_count(&self.topic).await.is_ok() {
            return Ok(());
        }
        let conn = self.pool.any().await?;
        let replication = if conn.version_for::<CreateTopicsRequest>()? >= 4 {
            -1
        } else {
            let brokers = conn.metadata(Some(&[])).await?.brokers.len();
            i16::try_from(brokers.clamp(1, 3)).unwrap_or(1)
        };
        if let Err(e) = conn
            .create_topic(
                &self.topic,
                1,
                replication,
                &[("cleanup.policy", "compact")],
            )
            .await
        {
            // Someone else may have created it meanwhile.
            if self
                .cluster
                .wait_for_topic(&self.topic, Duration::from_secs(2))
                .await
                .is_err()
            {
                return Err(e.into());
            }
        }
        self.cluster
            .wait_for_topic(&self.topic, Duration::from_secs(10))
            .await?;
        tracing::info!(topic = %self.topic, "parked-session store ready");
        Ok(())
    }

    /// Every parked session in the store now.
    pub async fn read_all(&self) -> Result<Vec<ParkedSession>, DriverError> {
        let records = read_topic(&self.pool, &self.cluster, &self.topic).await?;
        let mut last: HashMap<(TopicPartition, Bytes), Option<ParkedSession>> = HashMap::new();
        for (_, r) in records {
            let Some((tp, session)) = r.key.as_deref().and_then(parse_key) else {
                continue;
            };
            let entry = r
                .value
                .as_deref()
                .and_then(|v| decode(tp.clone(), session.clone(), v));
            last.insert((tp, session), entry);
        }
        let mut v: Vec<ParkedSession> = last.into_values().flatten().collect();
        v.sort_by(|a, b| (&a.partition, &a.session).cmp(&(&b.partition, &b.session)));
        Ok(v)
    }

    async fn write(&self, key: Bytes, value: Option<Bytes>) -> Result<(), ParkedStoreError> {
        let record = ProduceRecord {
            key: Some(key),
            value,
            headers: vec![],
            timestamp: None,
        };
        self.producer
            .send(&self.topic, record)
            .await
            .map(|_| ())
            .map_err(|e| ParkedStoreError(format!("writing to {}: {e}", self.topic)))
    }
}

impl ParkedStore for KafkaParkedStore {
    fn load(&self, partitions: &[TopicPartition]) -> StoreFuture<Vec<ParkedSession>> {
        let this = self.clone();
        let partitions = partitions.to_vec();
        Box::pin(async move {
            let all = this
                .read_all()
                .await
                .map_err(|e| ParkedStoreError(format!("reading {}: {e}", this.topic)))?;
            Ok(all
                .into_iter()
                .filter(|e| partitions.contains(&e.partition))
                .collect())
        })
    }

    fn put(&self, entry: &ParkedSession) -> StoreFuture<()> {
        let this = self.clone();
        let key = parked_key(&entry.partition, &entry.session);
        let value = encode(entry);
        Box::pin(async move { this.write(key, Some(value)).await })
    }

    fn remove(&self, partition: &TopicPartition, session: &[u8]) -> StoreFuture<()> {
        let this = self.clone();
        let key = parked_key(partition, session);
        Box::pin(async move { this.write(key, None).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_round_trip() {
        let tp = TopicPartition::new("orders", 3);
        let k = parked_key(&tp, b"a/b\0c");
        assert_eq!(
            parse_key(&k),
            Some((tp.clone(), Bytes::from_static(b"a/b\0c")))
        );
        let e = ParkedSession {
            partition: tp.clone(),
            session: Bytes::from_static(b"s"),
            since_offset: 7,
            last_letter: 12,
            failed_round: Some("r1".into()),
            reason: "permanent: bad\ninput".into(),
            parked_records: 0,
        };
        assert_eq!(
            decode(tp.clone(), e.session.clone(), &encode(&e)),
            Some(e.clone())
        );
        let none = ParkedSession {
            failed_round: None,
            ..e
        };
        assert_eq!(decode(tp, none.session.clone(), &encode(&none)), Some(none));
    }
}
