//! OffsetFetch (key 9) v5-v9: read a group's committed offsets (multi-group form from v8; below
//! that one group, the first, is asked for and answers as the only entry, with an empty group id).
//! `require_stable` exists from v7; below it the flag is not sent.

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// Partitions of one topic to look up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchTopic {
    /// Topic name.
    pub name: String,
    /// Partitions.
    pub partition_indexes: Vec<i32>,
}

/// One group to look up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchGroup {
    /// Group id.
    pub group_id: String,
    /// KIP-848 member id (v9+; null for classic).
    pub member_id: Option<String>,
    /// KIP-848 member epoch (v9+; -1 for classic).
    pub member_epoch: i32,
    /// Topics; `None` = all topics.
    pub topics: Option<Vec<OffsetFetchTopic>>,
}

/// OffsetFetch request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchRequest {
    /// Groups.
    pub groups: Vec<OffsetFetchGroup>,
    /// Fail partitions with pending transactional offsets (UNSTABLE_OFFSET_COMMIT).
    pub require_stable: bool,
}

/// One partition's committed offset.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchPartition {
    /// Partition.
    pub partition_index: i32,
    /// Committed offset, -1 if none.
    pub committed_offset: i64,
    /// Leader epoch, -1 if unknown.
    pub committed_leader_epoch: i32,
    /// Commit metadata.
    pub metadata: Option<String>,
    /// Error.
    pub error_code: ErrorCode,
}

/// One topic's committed offsets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchTopicResult {
    /// Topic name.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<OffsetFetchPartition>,
}

/// One group's result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchGroupResult {
    /// Group id.
    pub group_id: String,
    /// Topics.
    pub topics: Vec<OffsetFetchTopicResult>,
    /// Group-level error.
    pub error_code: ErrorCode,
}

/// OffsetFetch response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Groups.
    pub groups: Vec<OffsetFetchGroupResult>,
}

impl Message for OffsetFetchRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        if version < 8 {
            let empty = OffsetFetchGroup::default();
            let g = self.groups.first().unwrap_or(&empty);
            e.string(&g.group_id);
            e.narray(g.topics.as_deref(), |e, t| {
                e.string(&t.name);
                e.array(&t.partition_indexes, |e, p| e.i32(*p));
                e.tags();
            });
            if version >= 7 {
                e.bool(self.require_stable);
            }
            e.tags();
            return;
        }
        e.array(&self.groups, |e, g| {
            e.string(&g.group_id);
            if version >= 9 {
                e.nstring(g.member_id.as_deref());
                e.i32(g.member_epoch);
            }
            e.narray(g.topics.as_deref(), |e, t| {
                e.string(&t.name);
                e.array(&t.partition_indexes, |e, p| e.i32(*p));
                e.tags();
            });
            e.tags();
        });
        e.bool(self.require_stable);
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        if version < 8 {
            let group_id = d.string()?;
            let topics = d.narray(|d| {
                let t = OffsetFetchTopic {
                    name: d.string()?,
                    partition_indexes: d.array(Decoder::i32)?,
                };
                d.tags()?;
                Ok(t)
            })?;
            let require_stable = if version >= 7 { d.bool()? } else { false };
            d.tags()?;
            return Ok(Self {
                groups: vec![OffsetFetchGroup {
                    group_id,
                    member_id: None,
                    member_epoch: -1,
                    topics,
                }],
                require_stable,
            });
        }
        let groups = d.array(|d| {
            let group_id = d.string()?;
            let (member_id, member_epoch) = if version >= 9 {
                (d.nstring()?, d.i32()?)
            } else {
                (None, -1)
            };
            let topics = d.narray(|d| {
                let t = OffsetFetchTopic {
                    name: d.string()?,
                    partition_indexes: d.array(Decoder::i32)?,
                };
                d.tags()?;
                Ok(t)
            })?;
            d.tags()?;
            Ok(OffsetFetchGroup {
                group_id,
                member_id,
                member_epoch,
                topics,
            })
        })?;
        let require_stable = d.bool()?;
        d.tags()?;
        Ok(Self {
            groups,
            require_stable,
        })
    }
}

impl Message for OffsetFetchResponse {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.i32(self.throttle_time_ms);
        let topics = |e: &mut Encoder<'_>, topics: &[OffsetFetchTopicResult]| {
            e.array(topics, |e, t| {
                e.string(&t.name);
                e.array(&t.partitions, |e, p| {
                    e.i32(p.partition_index);
                    e.i64(p.committed_offset);
                    e.i32(p.committed_leader_epoch);
                    e.nstring(p.metadata.as_deref());
                    e.i16(p.error_code.0);
                    e.tags();
                });
                e.tags();
            });
        };
        if version < 8 {
            let empty = OffsetFetchGroupResult::default();
            let g = self.groups.first().unwrap_or(&empty);
            topics(e, &g.topics);
            e.i16(g.error_code.0);
            e.tags();
            return;
        }
        e.array(&self.groups, |e, g| {
            e.string(&g.group_id);
            topics(e, &g.topics);
            e.i16(g.error_code.0);
            e.tags();
        });
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = d.i32()?;
        let topics = |d: &mut Decoder| {
            d.array(|d| {
                let name = d.string()?;
                let partitions = d.array(|d| {
                    let p = OffsetFetchPartition {
                        partition_index: d.i32()?,
                        committed_offset: d.i64()?,
                        committed_leader_epoch: d.i32()?,
                        metadata: d.nstring()?,
                        error_code: ErrorCode(d.i16()?),
                    };
                    d.tags()?;
                    Ok(p)
                })?;
                d.tags()?;
                Ok(OffsetFetchTopicResult { name, partitions })
            })
        };
        if version < 8 {
            let topics = topics(d)?;
            let error_code = ErrorCode(d.i16()?);
            d.tags()?;
            return Ok(Self {
                throttle_time_ms,
                groups: vec![OffsetFetchGroupResult {
                    group_id: String::new(),
                    topics,
                    error_code,
                }],
            });
        }
        let groups = d.array(|d| {
            let group_id = d.string()?;
            let topics = topics(d)?;
            let error_code = ErrorCode(d.i16()?);
            d.tags()?;
            Ok(OffsetFetchGroupResult {
                group_id,
                topics,
                error_code,
            })
        })?;
        d.tags()?;
        Ok(Self {
            throttle_time_ms,
            groups,
        })
    }
}

impl Request for OffsetFetchRequest {
    type Response = OffsetFetchResponse;
    const API_KEY: i16 = 9;
    const NAME: &'static str = "OffsetFetch";
    const MIN_VERSION: i16 = 5;
    const MAX_VERSION: i16 = 9;
    const FIRST_FLEXIBLE: i16 = 6;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn request_rt(gs in v((s(), ns(), any::<i32>(), proptest::option::of(v((s(), v(any::<i32>())))))), rs: bool) {
            request_round_trip(&OffsetFetchRequest {
                groups: gs.into_iter().map(|(group_id, member_id, member_epoch, topics)| OffsetFetchGroup {
                    group_id, member_id, member_epoch,
                    topics: topics.map(|ts| ts.into_iter().map(|(name, partition_indexes)| OffsetFetchTopic { name, partition_indexes }).collect()),
                }).collect(),
                require_stable: rs,
            })?;
        }
        #[test]
        fn response_rt(t: i32, gs in v((s(), v((s(), v((any::<i32>(), any::<i64>(), any::<i32>(), ns(), any::<i16>())))), any::<i16>()))) {
            response_round_trip::<OffsetFetchRequest>(&OffsetFetchResponse {
                throttle_time_ms: t,
                groups: gs.into_iter().map(|(group_id, ts, c)| OffsetFetchGroupResult {
                    group_id, error_code: ErrorCode(c),
                    topics: ts.into_iter().map(|(name, ps)| OffsetFetchTopicResult { name, partitions: ps.into_iter().map(|(a, b, c, m, e)| OffsetFetchPartition {
                        partition_index: a, committed_offset: b, committed_leader_epoch: c, metadata: m, error_code: ErrorCode(e) }).collect() }).collect(),
                }).collect(),
            })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<OffsetFetchRequest>(&b);
        }
    }
}
