//! ListOffsets (key 2) v4-v10: earliest / latest / by-timestamp offsets per partition.

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// Timestamp sentinel: the latest offset (the LSO under read_committed).
pub const LATEST: i64 = -1;
/// Timestamp sentinel: the earliest offset.
pub const EARLIEST: i64 = -2;

/// A partition to look up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsPartition {
    /// Partition.
    pub partition_index: i32,
    /// Current leader epoch (-1 = unknown).
    pub current_leader_epoch: i32,
    /// Timestamp (ms) or [`LATEST`] / [`EARLIEST`].
    pub timestamp: i64,
}

/// A topic to look up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsTopic {
    /// Topic name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<ListOffsetsPartition>,
}

/// ListOffsets request (send to each partition's leader).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsRequest {
    /// -1 for consumers.
    pub replica_id: i32,
    /// 0 read_uncommitted, 1 read_committed.
    pub isolation_level: i8,
    /// Topics.
    pub topics: Vec<ListOffsetsTopic>,
    /// Server-side timeout (v10+).
    pub timeout_ms: i32,
}

/// A partition's answer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsPartitionResponse {
    /// Partition.
    pub partition_index: i32,
    /// Error.
    pub error_code: ErrorCode,
    /// Timestamp of the found offset (-1 if none).
    pub timestamp: i64,
    /// Offset (-1 if none).
    pub offset: i64,
    /// Leader epoch.
    pub leader_epoch: i32,
}

/// A topic's answers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsTopicResponse {
    /// Topic name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<ListOffsetsPartitionResponse>,
}

/// ListOffsets response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Topics.
    pub topics: Vec<ListOffsetsTopicResponse>,
}

impl Message for ListOffsetsRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.i32(self.replica_id);
        e.i8(self.isolation_level);
        e.array(&self.topics, |e, t| {
            e.string(&t.name);
            e.array(&t.partitions, |e, p| {
                e.i32(p.partition_index);
                e.i32(p.current_leader_epoch);
                e.i64(p.timestamp);
                e.tags();
            });
            e.tags();
        });
        if version >= 10 {
            e.i32(self.timeout_ms);
        }
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let replica_id = d.i32()?;
        let isolation_level = d.i8()?;
        let topics = d.array(|d| {
            let name = d.string()?;
            let partitions = d.array(|d| {
                let p = ListOffsetsPartition {
                    partition_index: d.i32()?,
                    current_leader_epoch: d.i32()?,
                    timestamp: d.i64()?,
                };
                d.tags()?;
                Ok(p)
            })?;
            d.tags()?;
            Ok(ListOffsetsTopic { name, partitions })
        })?;
        let timeout_ms = if version >= 10 { d.i32()? } else { 0 };
        d.tags()?;
        Ok(Self {
            replica_id,
            isolation_level,
            topics,
            timeout_ms,
        })
    }
}

impl Message for ListOffsetsResponse {
    fn encode(&self, e: &mut Encoder<'_>, _version: i16) {
        e.i32(self.throttle_time_ms);
        e.array(&self.topics, |e, t| {
            e.string(&t.name);
            e.array(&t.partitions, |e, p| {
                e.i32(p.partition_index);
                e.i16(p.error_code.0);
                e.i64(p.timestamp);
                e.i64(p.offset);
                e.i32(p.leader_epoch);
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
                let p = ListOffsetsPartitionResponse {
                    partition_index: d.i32()?,
                    error_code: ErrorCode(d.i16()?),
                    timestamp: d.i64()?,
                    offset: d.i64()?,
                    leader_epoch: d.i32()?,
                };
                d.tags()?;
                Ok(p)
            })?;
            d.tags()?;
            Ok(ListOffsetsTopicResponse { name, partitions })
        })?;
        d.tags()?;
        Ok(Self {
            throttle_time_ms,
            topics,
        })
    }
}

impl Request for ListOffsetsRequest {
    type Response = ListOffsetsResponse;
    const API_KEY: i16 = 2;
    const NAME: &'static str = "ListOffsets";
    const MIN_VERSION: i16 = 4;
    const MAX_VERSION: i16 = 10;
    const FIRST_FLEXIBLE: i16 = 6;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn request_rt(r: i32, i: i8, ts in v((s(), v((any::<i32>(), any::<i32>(), any::<i64>())))), t: i32) {
            request_round_trip(&ListOffsetsRequest {
                replica_id: r, isolation_level: i, timeout_ms: t,
                topics: ts.into_iter().map(|(name, ps)| ListOffsetsTopic { name, partitions: ps.into_iter().map(|(a, b, c)| ListOffsetsPartition {
                    partition_index: a, current_leader_epoch: b, timestamp: c }).collect() }).collect(),
            })?;
        }
        #[test]
        fn response_rt(t: i32, ts in v((s(), v((any::<i32>(), any::<i16>(), any::<i64>(), any::<i64>(), any::<i32>()))))) {
            response_round_trip::<ListOffsetsRequest>(&ListOffsetsResponse {
                throttle_time_ms: t,
                topics: ts.into_iter().map(|(name, ps)| ListOffsetsTopicResponse { name, partitions: ps.into_iter().map(|(a, c, ts, o, le)| ListOffsetsPartitionResponse {
                    partition_index: a, error_code: ErrorCode(c), timestamp: ts, offset: o, leader_epoch: le }).collect() }).collect(),
            })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<ListOffsetsRequest>(&b);
        }
    }
}
