//! TxnOffsetCommit (key 28) v2-v4: commit a consumer group's offsets inside a transaction, sent to
//! the *group* coordinator after AddOffsetsToTxn; they become visible when the transaction commits.
//!
//! Version 3 adds the group generation, member id and group instance id (KIP-447): the group
//! coordinator refuses the commit of a member that is no longer in the generation
//! (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID), which fences a zombie that lost its
//! partitions. Below v3 those fields are not sent and no such check is made. Version 3 is flexible
//! (KIP-482); version 4 adds TRANSACTION_ABORTABLE (KIP-890). Version 5 belongs to transaction
//! protocol 2, which orderly's transactional producer does not use.

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// One partition's offset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnOffsetCommitPartition {
    /// Partition index.
    pub partition_index: i32,
    /// Next offset to consume.
    pub committed_offset: i64,
    /// Leader epoch of the last consumed record, -1 if unknown.
    pub committed_leader_epoch: i32,
    /// Metadata (at most `offset.metadata.max.bytes`).
    pub committed_metadata: Option<String>,
}

/// One topic's offsets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnOffsetCommitTopic {
    /// Topic name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<TxnOffsetCommitPartition>,
}

/// TxnOffsetCommit request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffsetCommitRequest {
    /// The transactional id.
    pub transactional_id: String,
    /// The consumer group.
    pub group_id: String,
    /// Producer id from InitProducerId.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// The member's generation (classic) or member epoch (KIP-848), v3+; -1 skips the check.
    pub generation_id: i32,
    /// The member id, v3+; "" skips the check.
    pub member_id: String,
    /// The static instance id, v3+.
    pub group_instance_id: Option<String>,
    /// Offsets per topic.
    pub topics: Vec<TxnOffsetCommitTopic>,
}

impl Default for TxnOffsetCommitRequest {
    fn default() -> Self {
        Self {
            transactional_id: String::new(),
            group_id: String::new(),
            producer_id: -1,
            producer_epoch: -1,
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
            topics: Vec::new(),
        }
    }
}

/// One partition's result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnOffsetCommitPartitionResult {
    /// Partition index.
    pub partition_index: i32,
    /// Error.
    pub error_code: ErrorCode,
}

/// One topic's results.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnOffsetCommitTopicResult {
    /// Topic name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<TxnOffsetCommitPartitionResult>,
}

/// TxnOffsetCommit response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnOffsetCommitResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Per topic.
    pub topics: Vec<TxnOffsetCommitTopicResult>,
}

impl Message for TxnOffsetCommitRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.string(&self.transactional_id);
        e.string(&self.group_id);
        e.i64(self.producer_id);
        e.i16(self.producer_epoch);
        if version >= 3 {
            e.i32(self.generation_id);
            e.string(&self.member_id);
            e.nstring(self.group_instance_id.as_deref());
        }
        e.array(&self.topics, |e, t| {
            e.string(&t.name);
            e.array(&t.partitions, |e, p| {
                e.i32(p.partition_index);
                e.i64(p.committed_offset);
                e.i32(p.committed_leader_epoch);
                e.nstring(p.committed_metadata.as_deref());
                e.tags();
            });
            e.tags();
        });
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let transactional_id = d.string()?;
        let group_id = d.string()?;
        let producer_id = d.i64()?;
        let producer_epoch = d.i16()?;
        let (generation_id, member_id, group_instance_id) = if version >= 3 {
            (d.i32()?, d.string()?, d.nstring()?)
        } else {
            (-1, String::new(), None)
        };
        let topics = d.array(|d| {
            let name = d.string()?;
            let partitions = d.array(|d| {
                let p = TxnOffsetCommitPartition {
                    partition_index: d.i32()?,
                    committed_offset: d.i64()?,
                    committed_leader_epoch: d.i32()?,
                    committed_metadata: d.nstring()?,
                };
                d.tags()?;
                Ok(p)
            })?;
            d.tags()?;
            Ok(TxnOffsetCommitTopic { name, partitions })
        })?;
        d.tags()?;
        Ok(Self {
            transactional_id,
            group_id,
            producer_id,
            producer_epoch,
            generation_id,
            member_id,
            group_instance_id,
            topics,
        })
    }
}

impl Message for TxnOffsetCommitResponse {
    fn encode(&self, e: &mut Encoder<'_>, _version: i16) {
        e.i32(self.throttle_time_ms);
        e.array(&self.topics, |e, t| {
            e.string(&t.name);
            e.array(&t.partitions, |e, p| {
                e.i32(p.partition_index);
                e.i16(p.error_code.0);
                e.tags();
            });
            e.tags();
        });
        e.tags();
    }
    fn decode(d: &mut Decoder, _version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = d.i32()?;
        let topics = d.array(|d| {
            let name = d.string()?;
            let partitions = d.array(|d| {
                let p = TxnOffsetCommitPartitionResult {
                    partition_index: d.i32()?,
                    error_code: ErrorCode(d.i16()?),
                };
                d.tags()?;
                Ok(p)
            })?;
            d.tags()?;
            Ok(TxnOffsetCommitTopicResult { name, partitions })
        })?;
        d.tags()?;
        Ok(Self {
            throttle_time_ms,
            topics,
        })
    }
}

impl Request for TxnOffsetCommitRequest {
    type Response = TxnOffsetCommitResponse;
    const API_KEY: i16 = 28;
    const NAME: &'static str = "TxnOffsetCommit";
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 4;
    const FIRST_FLEXIBLE: i16 = 3;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use crate::messages::{decode_request, encode_request};
    use bytes::Bytes;
    use proptest::prelude::*;

    fn sample() -> TxnOffsetCommitRequest {
        TxnOffsetCommitRequest {
            transactional_id: "t".into(),
            group_id: "g".into(),
            producer_id: 9,
            producer_epoch: 1,
            generation_id: 4,
            member_id: "m".into(),
            group_instance_id: None,
            topics: vec![TxnOffsetCommitTopic {
                name: "x".into(),
                partitions: vec![TxnOffsetCommitPartition {
                    partition_index: 2,
                    committed_offset: 10,
                    committed_leader_epoch: -1,
                    committed_metadata: Some("md".into()),
                }],
            }],
        }
    }

    /// The KIP-447 fields are on the wire from v3, right after the producer epoch.
    #[test]
    fn v3_carries_the_group_generation() {
        let req = sample();
        let b = encode_request(&req, 3).unwrap();
        let mut want = vec![2, b't', 2, b'g'];
        want.extend_from_slice(&9i64.to_be_bytes());
        want.extend_from_slice(&1i16.to_be_bytes());
        want.extend_from_slice(&4i32.to_be_bytes());
        want.extend_from_slice(&[2, b'm', 0]);
        assert_eq!(&b[..want.len()], &want[..]);
        // v2 leaves them out: they read back as "no check".
        let back: TxnOffsetCommitRequest =
            decode_request(Bytes::from(encode_request(&req, 2).unwrap()), 2).unwrap();
        assert_eq!(back.generation_id, -1);
        assert_eq!(back.member_id, "");
        assert_eq!(back.topics, req.topics);
    }

    proptest! {
        #[test]
        fn request_rt(t in s(), g in s(), id: i64, ep: i16, gen_id: i32, m in s(), i in ns(),
                      ts in v((s(), v((any::<i32>(), any::<i64>(), any::<i32>(), ns()))))) {
            request_round_trip(&TxnOffsetCommitRequest {
                transactional_id: t, group_id: g, producer_id: id, producer_epoch: ep,
                generation_id: gen_id, member_id: m, group_instance_id: i,
                topics: ts.into_iter().map(|(name, ps)| TxnOffsetCommitTopic { name, partitions: ps.into_iter().map(|(a, b, c, d)| TxnOffsetCommitPartition {
                    partition_index: a, committed_offset: b, committed_leader_epoch: c, committed_metadata: d }).collect() }).collect(),
            })?;
        }
        #[test]
        fn response_rt(t: i32, ts in v((s(), v((any::<i32>(), any::<i16>()))))) {
            response_round_trip::<TxnOffsetCommitRequest>(&TxnOffsetCommitResponse {
                throttle_time_ms: t,
                topics: ts.into_iter().map(|(name, ps)| TxnOffsetCommitTopicResult { name, partitions: ps.into_iter().map(|(a, c)| TxnOffsetCommitPartitionResult {
                    partition_index: a, error_code: ErrorCode(c) }).collect() }).collect(),
            })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<TxnOffsetCommitRequest>(&b);
        }
    }
}
