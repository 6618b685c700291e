//! The data-path client API on a [`BrokerConnection`]: multi-partition fetch with record decoding,
//! produce (acks=all), metadata, list offsets, create topics.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::connection::{BrokerConnection, ConnectionPool};
use crate::error::{Context, Error, ErrorCode, Result};
use crate::messages::create_topics::{
    CreatableTopic, CreateTopicsRequest, CreateTopicsResponse, TopicConfig,
};
use crate::messages::fetch::{
    CurrentLeader, FetchPartition, FetchRequest, FetchResponse, FetchTopic,
};
use crate::messages::init_producer_id::InitProducerIdRequest;
use crate::messages::list_offsets::{ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic};
use crate::messages::metadata::{MetadataRequest, MetadataRequestTopic, MetadataResponse};
use crate::messages::produce::{ProducePartition, ProduceRequest, ProduceResponse, ProduceTopic};
use crate::messages::{Message, Request};
use crate::records::{
    BatchSpec, Compression, DecodeOptions, FetchedRecord, IsolationLevel, ProduceRecord,
    decode_records, encode_batch,
};

/// One partition to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSpec {
    /// Topic name.
    pub topic: String,
    /// Topic id from Metadata (all-zero = unknown; then Fetch v12 by name is used).
    pub topic_id: [u8; 16],
    /// Partition.
    pub partition: i32,
    /// Offset to fetch from.
    pub offset: i64,
    /// Current leader epoch (-1 = unknown).
    pub leader_epoch: i32,
    /// Per-partition byte limit.
    pub max_bytes: i32,
}

/// Settings of one fetch round trip. `Default`: 500 ms wait, 1 byte min, 50 MiB max, read_committed.
#[derive(Debug, Clone, Copy)]
pub struct FetchOptions {
    /// Long-poll wait.
    pub max_wait: Duration,
    /// Minimum bytes.
    pub min_bytes: i32,
    /// Response byte limit.
    pub max_bytes: i32,
    /// Isolation level.
    pub isolation: IsolationLevel,
    /// Record decoding options.
    pub decode: DecodeOptions,
}

impl Default for FetchOptions {
    fn default() -> Self {
        Self {
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            max_bytes: 50 * 1024 * 1024,
            isolation: IsolationLevel::ReadCommitted,
            decode: DecodeOptions::default(),
        }
    }
}

/// One partition's fetch outcome.
#[derive(Debug)]
pub struct PartitionFetch {
    /// Topic name.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset this fetch started at.
    pub fetch_offset: i64,
    /// Decoded records (control records and aborted transactions removed).
    pub records: Vec<FetchedRecord>,
    /// Where the next fetch of this partition starts (never behind `fetch_offset`).
    pub next_offset: i64,
    /// High watermark.
    pub high_watermark: i64,
    /// Last stable offset.
    pub last_stable_offset: i64,
    /// Log start offset.
    pub log_start_offset: i64,
    /// A leader hint from the broker (after NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH).
    pub current_leader: Option<CurrentLeader>,
    /// Partition error (Kafka code, or a corrupt batch at `next_offset`). Records before it are valid.
    pub error: Option<Error>,
}

/// Fetch by topic name (v10-v12), for callers that do not know topic ids (brokers before 2.8
/// have none).
#[derive(Debug, Clone, PartialEq, Eq)]
struct FetchByName(FetchRequest);

impl Message for FetchByName {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        self.0.encode(e, version);
    }
    fn decode(d: &mut Decoder, version: i16) -> std::result::Result<Self, DecodeError> {
        FetchRequest::decode(d, version).map(FetchByName)
    }
}

impl Request for FetchByName {
    type Response = FetchResponse;
    const API_KEY: i16 = FetchRequest::API_KEY;
    const NAME: &'static str = FetchRequest::NAME;
    const MIN_VERSION: i16 = FetchRequest::MIN_VERSION;
    const MAX_VERSION: i16 = 12;
    const FIRST_FLEXIBLE: i16 = FetchRequest::FIRST_FLEXIBLE;
}

impl ConnectionPool {
    /// Metadata for `topics` (`None` = all topics) from any broker ([`ConnectionPool::any`]),
    /// with the connection that answered. Records every broker's address; when the request
    /// fails, notes the broker, so the next call asks another one first.
    pub async fn metadata(
        &self,
        topics: Option<&[&str]>,
    ) -> Result<(std::sync::Arc<BrokerConnection>, MetadataResponse)> {
        let conn = self.any().await?;
        let resp = match conn.metadata(topics).await {
            Ok(r) => r,
            Err(e) => {
                self.note_failure(conn.broker());
                return Err(e);
            }
        };
        for b in &resp.brokers {
            self.set_broker(b.node_id, b.addr());
        }
        Ok((conn, resp))
    }
}

impl BrokerConnection {
    /// Metadata for `topics` (`None` = all topics); no auto-creation.
    pub async fn metadata(&self, topics: Option<&[&str]>) -> Result<MetadataResponse> {
        self.send(&MetadataRequest {
            topics: topics.map(|ts| {
                ts.iter()
                    .map(|t| MetadataRequestTopic {
                        topic_id: [0; 16],
                        name: Some((*t).to_string()),
                    })
                    .collect()
            }),
            allow_auto_topic_creation: false,
            include_topic_authorized_operations: false,
        })
        .await
    }

    /// One partition's offset at `timestamp` ([`crate::messages::list_offsets::EARLIEST`],
    /// [`crate::messages::list_offsets::LATEST`] or a time in ms). Send to the partition leader.
    /// Returns `(offset, leader_epoch)`; offset -1 means no record at or after that time.
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
        isolation: IsolationLevel,
    ) -> Result<(i64, i32)> {
        let resp = self
            .send(&ListOffsetsRequest {
                replica_id: -1,
                isolation_level: isolation.as_i8(),
                topics: vec![ListOffsetsTopic {
                    name: topic.to_string(),
                    partitions: vec![ListOffsetsPartition {
                        partition_index: partition,
                        current_leader_epoch: -1,
                        timestamp,
                    }],
                }],
                timeout_ms: 30_000,
            })
            .await?;
        let ctx = || Context {
            topic: Some(topic.to_string()),
            partition: Some(partition),
            offset: None,
        };
        let p = resp
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == partition)
            .ok_or_else(|| {
                self.kafka_error(
                    "ListOffsets",
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    ctx(),
                    Some("partition missing from response".into()),
                )
            })?;
        if p.error_code != ErrorCode::NONE {
            return Err(self.kafka_error("ListOffsets", p.error_code, ctx(), None));
        }
        Ok((p.offset, p.leader_epoch))
    }

    /// Many partitions' offsets at one `timestamp` in **one** request (they must share this
    /// leader). Returns one entry per requested partition, in request order: the offset, or the
    /// partition's error code (a partition missing from the response is
    /// UNKNOWN_TOPIC_OR_PARTITION). A request-level failure is the `Err`.
    pub async fn list_offsets(
        &self,
        partitions: &[(&str, i32)],
        timestamp: i64,
        isolation: IsolationLevel,
    ) -> Result<Vec<std::result::Result<i64, ErrorCode>>> {
        let mut topics: Vec<ListOffsetsTopic> = Vec::new();
        for &(topic, partition) in partitions {
            let p = ListOffsetsPartition {
                partition_index: partition,
                current_leader_epoch: -1,
                timestamp,
            };
            match topics.iter_mut().find(|t| t.name == topic) {
                Some(t) => t.partitions.push(p),
                None => topics.push(ListOffsetsTopic {
                    name: topic.to_string(),
                    partitions: vec![p],
                }),
            }
        }
        let resp = self
            .send(&ListOffsetsRequest {
                replica_id: -1,
                isolation_level: isolation.as_i8(),
                topics,
                timeout_ms: 30_000,
            })
            .await?;
        let mut found: HashMap<(&str, i32), std::result::Result<i64, ErrorCode>> = HashMap::new();
        for t in &resp.topics {
            for p in &t.partitions {
                let r = if p.error_code == ErrorCode::NONE {
                    Ok(p.offset)
                } else {
                    Err(p.error_code)
                };
                found.insert((t.name.as_str(), p.partition_index), r);
            }
        }
        Ok(partitions
            .iter()
            .map(|&(topic, partition)| {
                found
                    .get(&(topic, partition))
                    .copied()
                    .unwrap_or(Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION))
            })
            .collect())
    }

    /// Creates a topic (replication factor -1 = broker default). TOPIC_ALREADY_EXISTS is an `Err`.
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: &[(&str, &str)],
    ) -> Result<CreateTopicsResponse> {
        let resp = self
            .send(&CreateTopicsRequest {
                topics: vec![CreatableTopic {
                    name: name.to_string(),
                    num_partitions: partitions,
                    replication_factor,
                    configs: configs
                        .iter()
                        .map(|(k, v)| TopicConfig {
                            name: (*k).to_string(),
                            value: Some((*v).to_string()),
                        })
                        .collect(),
                }],
                timeout_ms: 30_000,
                validate_only: false,
            })
            .await?;
        if let Some(t) = resp.topics.iter().find(|t| t.error_code != ErrorCode::NONE) {
            return Err(self.kafka_error(
                "CreateTopics",
                t.error_code,
                Context {
                    topic: Some(t.name.clone()),
                    ..Default::default()
                },
                t.error_message.clone(),
            ));
        }
        Ok(resp)
    }

    /// Fetches every partition in `specs` in **one** request (they must share this leader), then
    /// decodes each partition's records. Uses Fetch v13+ (topic ids) when every spec has an id,
    /// otherwise v12 (names).
    pub async fn fetch(
        &self,
        specs: &[FetchSpec],
        opts: &FetchOptions,
    ) -> Result<Vec<PartitionFetch>> {
        Ok(self.fetch_throttled(specs, opts).await?.0)
    }

    /// [`BrokerConnection::fetch`], also returning the broker's `throttle_time_ms`: under a quota
    /// (KIP-219) the broker answers at once and expects the client to send nothing more to it
    /// for that long; the consumer's fetch loop waits it out.
    pub async fn fetch_throttled(
        &self,
        specs: &[FetchSpec],
        opts: &FetchOptions,
    ) -> Result<(Vec<PartitionFetch>, Duration)> {
        let mut topics: Vec<FetchTopic> = Vec::new();
        let mut index: HashMap<(String, i32), i64> = HashMap::new();
        for s in specs {
            index.insert((s.topic.clone(), s.partition), s.offset);
            let part = FetchPartition {
                partition: s.partition,
                current_leader_epoch: s.leader_epoch,
                fetch_offset: s.offset,
                last_fetched_epoch: -1,
                log_start_offset: -1,
                partition_max_bytes: s.max_bytes,
            };
            match topics.iter_mut().find(|t| t.topic == s.topic) {
                Some(t) => t.partitions.push(part),
                None => topics.push(FetchTopic {
                    topic: s.topic.clone(),
                    topic_id: s.topic_id,
                    partitions: vec![part],
                }),
            }
        }
        let by_id = specs.iter().all(|s| s.topic_id != [0; 16]);
        let names: HashMap<[u8; 16], String> = topics
            .iter()
            .map(|t| (t.topic_id, t.topic.clone()))
            .collect();
        let req = FetchRequest {
            replica_id: -1,
            max_wait_ms: i32::try_from(opts.max_wait.as_millis()).unwrap_or(i32::MAX),
            min_bytes: opts.min_bytes,
            max_bytes: opts.max_bytes,
            isolation_level: opts.isolation.as_i8(),
            session_id: 0,
            session_epoch: -1,
            topics,
            forgotten_topics: vec![],
            rack_id: String::new(),
        };
        let resp = if by_id {
            self.send_with_extra_timeout(&req, opts.max_wait).await?
        } else {
            self.send_with_extra_timeout(&FetchByName(req), opts.max_wait)
                .await?
        };
        if resp.error_code != ErrorCode::NONE {
            return Err(self.kafka_error("Fetch", resp.error_code, Context::default(), None));
        }
        let throttle = Duration::from_millis(u64::try_from(resp.throttle_time_ms).unwrap_or(0));
        let mut out = Vec::new();
        for t in resp.responses {
            let topic = if t.topic.is_empty() {
                names.get(&t.topic_id).cloned().unwrap_or_default()
            } else {
                t.topic
            };
            for p in t.partitions {
                let fetch_offset = index
                    .get(&(topic.clone(), p.partition_index))
                    .copied()
                    .unwrap_or(0);
                let ctx = |offset| Context {
                    topic: Some(topic.clone()),
                    partition: Some(p.partition_index),
                    offset: Some(offset),
                };
                let mut pf = PartitionFetch {
                    topic: topic.clone(),
                    partition: p.partition_index,
                    fetch_offset,
                    records: Vec::new(),
                    next_offset: fetch_offset,
                    high_watermark: p.high_watermark,
                    last_stable_offset: p.last_stable_offset,
                    log_start_offset: p.log_start_offset,
                    current_leader: p.current_leader,
                    error: None,
                };
                if p.error_code != ErrorCode::NONE {
                    pf.error =
                        Some(self.kafka_error("Fetch", p.error_code, ctx(fetch_offset), None));
                } else if let Some(data) = p.records {
                    let aborted = p.aborted_transactions.unwrap_or_default();
                    let d =
                        decode_records(data, fetch_offset, opts.isolation, &aborted, &opts.decode);
                    pf.records = d.records;
                    pf.next_offset = d.next_offset.unwrap_or(fetch_offset).max(fetch_offset);
                    if let Some((offset, source)) = d.error {
                        pf.error = Some(Error::Batch {
                            context: ctx(offset),
                            source,
                        });
                    }
                }
                out.push(pf);
            }
        }
        Ok((out, throttle))
    }

    /// Produces one batch to one partition with acks=all and returns the base offset. Callers keep
    /// at most one batch per partition in flight (the [`crate::producer::Producer`] does).
    pub async fn produce(
        &self,
        topic: &str,
        partition: i32,
        records: &[ProduceRecord],
        compression: Compression,
        timeout: Duration,
    ) -> Result<i64> {
        self.produce_sequenced(topic, partition, records, compression, timeout, None)
            .await
    }

    /// Like [`BrokerConnection::produce`], with the batch stamped with an idempotent producer's id,
    /// epoch and base sequence when `sequence` is given. The broker then writes a batch at most
    /// once: a batch whose sequence it already holds is answered with the original offset (or
    /// DUPLICATE_SEQUENCE_NUMBER), a gap with OUT_OF_ORDER_SEQUENCE_NUMBER.
    ///
    /// A broker enforcing a produce quota answers at once with `throttle_time_ms` and expects the
    /// client to hold back (KIP-219): the next Produce on this connection waits out that time.
    pub async fn produce_sequenced(
        &self,
        topic: &str,
        partition: i32,
        records: &[ProduceRecord],
        compression: Compression,
        timeout: Duration,
        sequence: Option<BatchSequence>,
    ) -> Result<i64> {
        let now = now_millis();
        let mut spec = BatchSpec {
            compression,
            ..Default::default()
        };
        if let Some(s) = sequence {
            spec.producer_id = s.producer_id;
            spec.producer_epoch = s.producer_epoch;
            spec.base_sequence = s.base_sequence;
        }
        let resp = self
            .send_produce(
                topic,
                vec![produce_partition(partition, &spec, records, now)?],
                timeout,
                None,
            )
            .await?;
        self.produce_answer(&resp, topic, partition)
    }

    /// [`BrokerConnection::produce_partitions`] for a transactional producer's open transaction:
    /// one batch per partition of `topic`, each with the transactional flag and its own stamp,
    /// in one Produce request carrying the transactional id. The partitions must have been added
    /// to the transaction (AddPartitionsToTxn) first. Sent at Produce v11 at most (see
    /// [`TxnProduce`]). Returns each partition's base offset or error, in the order given; `Err`
    /// when the whole request failed.
    pub(crate) async fn produce_transactional_partitions(
        &self,
        topic: &str,
        batches: &[(i32, &[ProduceRecord], BatchSequence)],
        compression: Compression,
        timeout: Duration,
        transactional_id: &str,
    ) -> Result<Vec<Result<i64>>> {
        let now = now_millis();
        let mut partitions = Vec::with_capacity(batches.len());
        for (partition, records, sequence) in batches {
            let spec = BatchSpec {
                compression,
                producer_id: sequence.producer_id,
                producer_epoch: sequence.producer_epoch,
                base_sequence: sequence.base_sequence,
                transactional: true,
                ..Default::default()
            };
            partitions.push(produce_partition(*partition, &spec, records, now)?);
        }
        let resp = self
            .send_produce(topic, partitions, timeout, Some(transactional_id))
            .await?;
        Ok(batches
            .iter()
            .map(|(partition, _, _)| self.produce_answer(&resp, topic, *partition))
            .collect())
    }
}

/// The wall clock in milliseconds since the epoch (0 before it), a batch's timestamp base.
fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// One partition's part of a Produce request: `records` encoded as one batch per `spec`.
fn produce_partition(
    partition: i32,
    spec: &BatchSpec,
    records: &[ProduceRecord],
    now: i64,
) -> Result<ProducePartition> {
    let batch = encode_batch(spec, records, now, None).map_err(|source| Error::Encode {
        api: "Produce",
        source,
    })?;
    Ok(ProducePartition {
        index: partition,
        records: Some(Bytes::from(batch)),
    })
}

/// Produce for a transactional producer of transaction protocol 1, capped at v11 as the Java
/// client caps it: from v12 a broker adds a transactional batch's partition to the transaction
/// itself and expects protocol 2's epoch bump per transaction (KIP-890 part 2), which this
/// producer does not follow (it adds partitions with AddPartitionsToTxn v3 and ends with EndTxn
/// v4).
#[derive(Debug, Clone, PartialEq, Eq)]
struct TxnProduce(ProduceRequest);

impl Message for TxnProduce {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        self.0.encode(e, version);
    }
    fn decode(d: &mut Decoder, version: i16) -> std::result::Result<Self, DecodeError> {
        ProduceRequest::decode(d, version).map(TxnProduce)
    }
}

impl Request for TxnProduce {
    type Response = ProduceResponse;
    const API_KEY: i16 = ProduceRequest::API_KEY;
    const NAME: &'static str = ProduceRequest::NAME;
    const MIN_VERSION: i16 = ProduceRequest::MIN_VERSION;
    const MAX_VERSION: i16 = 11;
    const FIRST_FLEXIBLE: i16 = ProduceRequest::FIRST_FLEXIBLE;
}

impl BrokerConnection {
    /// One acks=all Produce request for `partitions` of `topic` (of a transaction when
    /// `transactional_id` is given). Waits out the throttle time the broker's last Produce answer
    /// on this connection asked for, and notes the new one (KIP-219).
    async fn send_produce(
        &self,
        topic: &str,
        partitions: Vec<ProducePartition>,
        timeout: Duration,
        transactional_id: Option<&str>,
    ) -> Result<ProduceResponse> {
        let throttled = *self
            .produce_throttled_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(until) = throttled {
            tokio::time::sleep_until(until).await;
        }
        let req = ProduceRequest {
            transactional_id: transactional_id.map(str::to_string),
            acks: -1,
            timeout_ms: i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX),
            topics: vec![ProduceTopic {
                name: topic.to_string(),
                partitions,
            }],
        };
        let resp = if transactional_id.is_some() {
            self.send_with_extra_timeout(&TxnProduce(req), timeout)
                .await?
        } else {
            self.send_with_extra_timeout(&req, timeout).await?
        };
        let throttle = Duration::from_millis(u64::try_from(resp.throttle_time_ms).unwrap_or(0));
        if !throttle.is_zero() {
            tracing::debug!(broker = %self.broker(), ?throttle, "produce throttled by the broker's quota");
        }
        *self
            .produce_throttled_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            (!throttle.is_zero()).then(|| tokio::time::Instant::now() + throttle);
        Ok(resp)
    }

    /// Writes one batch to each of several partitions of `topic` in **one** Produce request
    /// (acks=all, not idempotent), as a Kafka producer sends every ready partition's batch to a
    /// leader at once: a broker answers the requests of one connection one at a time, so one
    /// request for many partitions is answered sooner than as many requests. The partitions must
    /// share this leader. Returns, in the order given, each partition's base offset or its own
    /// error: the broker writes or refuses each partition's batch on its own, so a caller that
    /// retries must send again only the partitions that failed. The `Err` is a failure of the
    /// whole request (where the batches may or may not have been written). A broker's throttle
    /// time is waited out as in [`BrokerConnection::produce_sequenced`].
    pub async fn produce_partitions(
        &self,
        topic: &str,
        batches: &[(i32, &[ProduceRecord])],
        compression: Compression,
        timeout: Duration,
    ) -> Result<Vec<Result<i64>>> {
        let now = now_millis();
        let spec = BatchSpec {
            compression,
            ..Default::default()
        };
        let mut partitions = Vec::with_capacity(batches.len());
        for (partition, records) in batches {
            partitions.push(produce_partition(*partition, &spec, records, now)?);
        }
        let resp = self.send_produce(topic, partitions, timeout, None).await?;
        Ok(batches
            .iter()
            .map(|(partition, _)| self.produce_answer(&resp, topic, *partition))
            .collect())
    }

    /// A partition's part of a Produce answer: its base offset, or its error (also when the
    /// broker left it out).
    fn produce_answer(&self, resp: &ProduceResponse, topic: &str, partition: i32) -> Result<i64> {
        let ctx = Context {
            topic: Some(topic.to_string()),
            partition: Some(partition),
            offset: None,
        };
        match resp
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.index == partition)
        {
            None => Err(self.kafka_error(
                "Produce",
                ErrorCode::UNKNOWN_SERVER_ERROR,
                ctx,
                Some("partition missing from response".into()),
            )),
            Some(p) if p.error_code != ErrorCode::NONE => {
                Err(self.kafka_error("Produce", p.error_code, ctx, p.error_message.clone()))
            }
            Some(p) => Ok(p.base_offset),
        }
    }
}

/// An idempotent producer's stamp on one batch: producer id, epoch and the sequence number of the
/// batch's first record (each record takes one number; they wrap from `i32::MAX` to 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSequence {
    /// Producer id from InitProducerId.
    pub producer_id: i64,
    /// Producer epoch from InitProducerId.
    pub producer_epoch: i16,
    /// Sequence of the batch's first record in its partition.
    pub base_sequence: i32,
}

impl BatchSequence {
    /// The base sequence of the batch after one of `records` records, wrapping as Kafka does.
    pub fn next_base(self, records: usize) -> i32 {
        let n = i64::try_from(records).unwrap_or(i64::MAX);
        let next = (i64::from(self.base_sequence) + n) % (i64::from(i32::MAX) + 1);
        i32::try_from(next).unwrap_or(0)
    }
}

impl BrokerConnection {
    /// InitProducerId without a transactional id: a fresh producer id at epoch 0 (any broker
    /// answers). A Kafka error code is the `Err`.
    pub async fn init_producer_id(&self) -> Result<(i64, i16)> {
        let resp = self.send(&InitProducerIdRequest::default()).await?;
        if resp.error_code != ErrorCode::NONE {
            return Err(self.kafka_error(
                "InitProducerId",
                resp.error_code,
                Context::default(),
                None,
            ));
        }
        Ok((resp.producer_id, resp.producer_epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::BatchSequence;

    #[test]
    fn sequences_wrap_like_kafka() {
        let s = |base_sequence| BatchSequence {
            producer_id: 1,
            producer_epoch: 0,
            base_sequence,
        };
        assert_eq!(s(0).next_base(5), 5);
        assert_eq!(s(i32::MAX - 1).next_base(1), i32::MAX);
        assert_eq!(s(i32::MAX).next_base(1), 0);
        assert_eq!(s(i32::MAX - 1).next_base(5), 3);
    }
}
