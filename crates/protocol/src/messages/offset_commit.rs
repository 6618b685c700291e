//! OffsetCommit (key 8) v6-v9: commit next-offsets-to-consume (plus leader epoch and metadata) for a group.

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// One partition's commit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitPartition {
    /// Partition.
    pub partition_index: i32,
    /// Next offset to consume (last processed + 1).
    pub committed_offset: i64,
    /// Leader epoch of the last consumed record, -1 if unknown.
    pub committed_leader_epoch: i32,
    /// Metadata (at most `offset.metadata.max.bytes`, 4096 UTF-16 units by default).
    pub committed_metadata: Option<String>,
}

/// One topic's commits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitTopic {
    /// Topic name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<OffsetCommitPartition>,
}

/// OffsetCommit request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitRequest {
    /// Group id.
    pub group_id: String,
    /// Classic: generation; KIP-848: member epoch; -1: simple (admin) commit.
    pub generation_id_or_member_epoch: i32,
    /// Member id ("" for simple commits).
    pub member_id: String,
    /// Static instance id.
    pub group_instance_id: Option<String>,
    /// Topics.
    pub topics: Vec<OffsetCommitTopic>,
}

/// Per-partition result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitPartitionResult {
    /// Partition.
    pub partition_index: i32,
    /// Error (group-level failures repeat here; there is no top-level code).
    pub error_code: ErrorCode,
}

/// Per-topic result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitTopicResult {
    /// Topic name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<OffsetCommitPartitionResult>,
}

/// OffsetCommit response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Topics.
    pub topics: Vec<OffsetCommitTopicResult>,
}

impl OffsetCommitResponse {
    /// The first partition error, with its topic and partition.
    pub fn first_error(&self) -> Option<(&str, i32, ErrorCode)> {
        self.topics.iter().find_map(|t| {
            t.partitions
                .iter()
                .find(|p| p.error_code != ErrorCode::NONE)
                .map(|p| (t.name.as_str(), p.partition_index, p.error_code))
        })
    }
}

impl Message for OffsetCommitRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.string(&self.group_id);
        e.i32(self.generation_id_or_member_epoch);
        e.string(&self.member_id);
        if version >= 7 {
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
        let group_id = d.string()?;
        let generation_id_or_member_epoch = d.i32()?;
        let member_id = d.string()?;
        let group_instance_id = if version >= 7 { d.nstring()? } else { None };
        let topics = d.array(|d| {
            let name = d.string()?;
            let partitions = d.array(|d| {
                let p = OffsetCommitPartition {
                    partition_index: d.i32()?,
                    committed_offset: d.i64()?,
                    committed_leader_epoch: d.i32()?,
                    committed_metadata: d.nstring()?,
                };
                d.tags()?;
                Ok(p)
            })?;
            d.tags()?;
            Ok(OffsetCommitTopic { name, partitions })
        })?;
        d.tags()?;
        Ok(Self {
            group_id,
            generation_id_or_member_epoch,
            member_id,
            group_instance_id,
            topics,
        })
    }
}

impl Message for OffsetCommitResponse {
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
                let p = OffsetCommitPartitionResult {
                    partition_index: d.i32()?,
                    error_code: ErrorCode(d.i16()?),
                };
                d.tags()?;
                Ok(p)
            })?;
            d.tags()?;
            Ok(OffsetCommitTopicResult { name, partitions })
        })?;
        d.tags()?;
        Ok(Self {
            throttle_time_ms,
            topics,
        })
    }
}

impl Request for OffsetCommitRequest {
    type Response = OffsetCommitResponse;
    const API_KEY: i16 = 8;
    const NAME: &'static str = "OffsetCommit";
    const MIN_VERSION: i16 = 6;
    const MAX_VERSION: i16 = 9;
    const FIRST_FLEXIBLE: i16 = 8;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn request_rt(g in s(), gen_id: i32, m in s(), i in ns(),
                      ts in v((s(), v((any::<i32>(), any::<i64>(), any::<i32>(), ns()))))) {
            request_round_trip(&OffsetCommitRequest {
                group_id: g, generation_id_or_member_epoch: gen_id, member_id: m, group_instance_id: i,
                topics: ts.into_iter().map(|(name, ps)| OffsetCommitTopic { name, partitions: ps.into_iter().map(|(a, b, c, d)| OffsetCommitPartition {
                    partition_index: a, committed_offset: b, committed_leader_epoch: c, committed_metadata: d }).collect() }).collect(),
            })?;
        }
        #[test]
        fn response_rt(t: i32, ts in v((s(), v((any::<i32>(), any::<i16>()))))) {
            response_round_trip::<OffsetCommitRequest>(&OffsetCommitResponse {
                throttle_time_ms: t,
                topics: ts.into_iter().map(|(name, ps)| OffsetCommitTopicResult { name, partitions: ps.into_iter().map(|(a, c)| OffsetCommitPartitionResult {
                    partition_index: a, error_code: ErrorCode(c) }).collect() }).collect(),
            })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<OffsetCommitRequest>(&b);
        }
    }
}
