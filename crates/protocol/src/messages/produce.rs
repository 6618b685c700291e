//! Produce (key 0) v7-v12 (per-record errors and the error message are answered from v8): write record batches (by topic name).

use bytes::Bytes;

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// One partition's batches.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducePartition {
    /// Partition.
    pub index: i32,
    /// Encoded record batches.
    pub records: Option<Bytes>,
}

/// One topic's partitions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceTopic {
    /// Topic name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<ProducePartition>,
}

/// Produce request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceRequest {
    /// Transactional id.
    pub transactional_id: Option<String>,
    /// 0, 1 or -1 (all).
    pub acks: i16,
    /// Server-side timeout.
    pub timeout_ms: i32,
    /// Topics.
    pub topics: Vec<ProduceTopic>,
}

/// A per-batch record error.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecordError {
    /// Index of the bad record in the batch.
    pub batch_index: i32,
    /// Message.
    pub message: Option<String>,
}

/// One partition's result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducePartitionResponse {
    /// Partition.
    pub index: i32,
    /// Error.
    pub error_code: ErrorCode,
    /// Offset of the first record.
    pub base_offset: i64,
    /// LogAppendTime, or -1.
    pub log_append_time_ms: i64,
    /// Log start offset.
    pub log_start_offset: i64,
    /// Record errors.
    pub record_errors: Vec<RecordError>,
    /// Error message.
    pub error_message: Option<String>,
}

/// One topic's results.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceTopicResponse {
    /// Topic name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<ProducePartitionResponse>,
}

/// Produce response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceResponse {
    /// Topics.
    pub responses: Vec<ProduceTopicResponse>,
    /// Throttle time.
    pub throttle_time_ms: i32,
}

impl Message for ProduceRequest {
    fn encode(&self, e: &mut Encoder<'_>, _version: i16) {
        e.nstring(self.transactional_id.as_deref());
        e.i16(self.acks);
        e.i32(self.timeout_ms);
        e.array(&self.topics, |e, t| {
            e.string(&t.name);
            e.array(&t.partitions, |e, p| {
                e.i32(p.index);
                e.nbytes(p.records.as_deref());
                e.tags();
            });
            e.tags();
        });
        e.tags();
    }
    fn decode(d: &mut Decoder, _version: i16) -> Result<Self, DecodeError> {
        let transactional_id = d.nstring()?;
        let acks = d.i16()?;
        let timeout_ms = d.i32()?;
        let topics = d.array(|d| {
            let name = d.string()?;
            let partitions = d.array(|d| {
                let p = ProducePartition {
                    index: d.i32()?,
                    records: d.nbytes()?,
                };
                d.tags()?;
                Ok(p)
            })?;
            d.tags()?;
            Ok(ProduceTopic { name, partitions })
        })?;
        d.tags()?;
        Ok(Self {
            transactional_id,
            acks,
            timeout_ms,
            topics,
        })
    }
}

impl Message for ProduceResponse {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.array(&self.responses, |e, t| {
            e.string(&t.name);
            e.array(&t.partitions, |e, p| {
                e.i32(p.index);
                e.i16(p.error_code.0);
                e.i64(p.base_offset);
                e.i64(p.log_append_time_ms);
                e.i64(p.log_start_offset);
                if version >= 8 {
                    e.array(&p.record_errors, |e, r| {
                        e.i32(r.batch_index);
                        e.nstring(r.message.as_deref());
                        e.tags();
                    });
                    e.nstring(p.error_message.as_deref());
                }
                e.tags();
            });
            e.tags();
        });
        e.i32(self.throttle_time_ms);
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let responses = d.array(|d| {
            let name = d.string()?;
            let partitions = d.array(|d| {
                let p = ProducePartitionResponse {
                    index: d.i32()?,
                    error_code: ErrorCode(d.i16()?),
                    base_offset: d.i64()?,
                    log_append_time_ms: d.i64()?,
                    log_start_offset: d.i64()?,
                    record_errors: if version >= 8 {
                        d.array(|d| {
                            let r = RecordError {
                                batch_index: d.i32()?,
                                message: d.nstring()?,
                            };
                            d.tags()?;
                            Ok(r)
                        })?
                    } else {
                        Vec::new()
                    },
                    error_message: if version >= 8 { d.nstring()? } else { None },
                };
                d.tags()?;
                Ok(p)
            })?;
            d.tags()?;
            Ok(ProduceTopicResponse { name, partitions })
        })?;
        let throttle_time_ms = d.i32()?;
        d.tags()?;
        Ok(Self {
            responses,
            throttle_time_ms,
        })
    }
}

impl Request for ProduceRequest {
    type Response = ProduceResponse;
    const API_KEY: i16 = 0;
    const NAME: &'static str = "Produce";
    const MIN_VERSION: i16 = 7;
    const MAX_VERSION: i16 = 12;
    const FIRST_FLEXIBLE: i16 = 9;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn request_rt(tid in ns(), acks: i16, t: i32, ts in v((s(), v((any::<i32>(), nby()))))) {
            request_round_trip(&ProduceRequest {
                transactional_id: tid, acks, timeout_ms: t,
                topics: ts.into_iter().map(|(name, ps)| ProduceTopic { name, partitions: ps.into_iter().map(|(index, records)| ProducePartition { index, records }).collect() }).collect(),
            })?;
        }
        #[test]
        fn response_rt(t: i32, ts in v((s(), v((any::<i32>(), any::<i16>(), any::<i64>(), any::<i64>(), any::<i64>(), v((any::<i32>(), ns())), ns()))))) {
            response_round_trip::<ProduceRequest>(&ProduceResponse {
                throttle_time_ms: t,
                responses: ts.into_iter().map(|(name, ps)| ProduceTopicResponse { name, partitions: ps.into_iter().map(|(i, c, b, l, s, re, m)| ProducePartitionResponse {
                    index: i, error_code: ErrorCode(c), base_offset: b, log_append_time_ms: l, log_start_offset: s,
                    record_errors: re.into_iter().map(|(batch_index, message)| RecordError { batch_index, message }).collect(), error_message: m,
                }).collect() }).collect(),
            })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<ProduceRequest>(&b);
        }
    }
}
