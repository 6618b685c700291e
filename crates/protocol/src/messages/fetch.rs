//! Fetch (key 1) v10-v18: many partitions per request; topic names up to v12, topic ids from v13;
//! the client rack and the preferred read replica from v11, the last fetched epoch from v12.
//!
//! Records stay raw [`Bytes`] here; [`crate::records::decode_records`] decodes them.

use bytes::Bytes;

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// A partition to fetch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchPartition {
    /// Partition.
    pub partition: i32,
    /// Current leader epoch (-1 = unknown).
    pub current_leader_epoch: i32,
    /// Offset to fetch from.
    pub fetch_offset: i64,
    /// Epoch of the last fetched record (-1 = unknown).
    pub last_fetched_epoch: i32,
    /// -1 for consumers.
    pub log_start_offset: i64,
    /// Per-partition byte limit.
    pub partition_max_bytes: i32,
}

/// A topic to fetch: by name (v12) or id (v13+); fill both from metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchTopic {
    /// Topic name (v12).
    pub topic: String,
    /// Topic id (v13+).
    pub topic_id: [u8; 16],
    /// Partitions.
    pub partitions: Vec<FetchPartition>,
}

/// Fetch request (sessionless by default: session id 0, epoch -1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchRequest {
    /// -1 for consumers (in the body up to v14 only).
    pub replica_id: i32,
    /// Long-poll wait.
    pub max_wait_ms: i32,
    /// Minimum bytes before answering.
    pub min_bytes: i32,
    /// Response byte limit.
    pub max_bytes: i32,
    /// 0 read_uncommitted, 1 read_committed.
    pub isolation_level: i8,
    /// Fetch session id (0 = none).
    pub session_id: i32,
    /// Fetch session epoch (-1 = full fetch without session).
    pub session_epoch: i32,
    /// Topics.
    pub topics: Vec<FetchTopic>,
    /// Forgotten topics (sessions only): (name, id, partitions).
    pub forgotten_topics: Vec<FetchTopic>,
    /// Client rack.
    pub rack_id: String,
}

/// The leader a follower-or-stale fetch should go to (tagged field 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CurrentLeader {
    /// Leader id.
    pub leader_id: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
}

/// A partition's fetch result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchPartitionResponse {
    /// Partition.
    pub partition_index: i32,
    /// Error.
    pub error_code: ErrorCode,
    /// High watermark.
    pub high_watermark: i64,
    /// Last stable offset.
    pub last_stable_offset: i64,
    /// Log start offset.
    pub log_start_offset: i64,
    /// New leader hint (tag 1), if the broker sent one.
    pub current_leader: Option<CurrentLeader>,
    /// Aborted transactions in the returned range (read_committed).
    pub aborted_transactions: Option<Vec<crate::records::AbortedTransaction>>,
    /// Preferred read replica (-1 = none).
    pub preferred_read_replica: i32,
    /// Raw record batches (possibly with a truncated last batch).
    pub records: Option<Bytes>,
}

/// A topic's fetch results.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchTopicResponse {
    /// Topic name (v12).
    pub topic: String,
    /// Topic id (v13+).
    pub topic_id: [u8; 16],
    /// Partitions.
    pub partitions: Vec<FetchPartitionResponse>,
}

/// Fetch response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Top-level error (sessions).
    pub error_code: ErrorCode,
    /// Session id.
    pub session_id: i32,
    /// Topics.
    pub responses: Vec<FetchTopicResponse>,
}

fn encode_topic_ref(e: &mut Encoder<'_>, version: i16, name: &str, id: &[u8; 16]) {
    if version >= 13 {
        e.uuid(id);
    } else {
        e.string(name);
    }
}

fn decode_topic_ref(d: &mut Decoder, version: i16) -> Result<(String, [u8; 16]), DecodeError> {
    if version >= 13 {
        Ok((String::new(), d.uuid()?))
    } else {
        Ok((d.string()?, [0; 16]))
    }
}

impl Message for FetchRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        if version <= 14 {
            e.i32(self.replica_id);
        }
        e.i32(self.max_wait_ms);
        e.i32(self.min_bytes);
        e.i32(self.max_bytes);
        e.i8(self.isolation_level);
        e.i32(self.session_id);
        e.i32(self.session_epoch);
        e.array(&self.topics, |e, t| {
            encode_topic_ref(e, version, &t.topic, &t.topic_id);
            e.array(&t.partitions, |e, p| {
                e.i32(p.partition);
                e.i32(p.current_leader_epoch);
                e.i64(p.fetch_offset);
                if version >= 12 {
                    e.i32(p.last_fetched_epoch);
                }
                e.i64(p.log_start_offset);
                e.i32(p.partition_max_bytes);
                e.tags();
            });
            e.tags();
        });
        e.array(&self.forgotten_topics, |e, t| {
            encode_topic_ref(e, version, &t.topic, &t.topic_id);
            e.array(&t.partitions, |e, p| e.i32(p.partition));
            e.tags();
        });
        if version >= 11 {
            e.string(&self.rack_id);
        }
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let replica_id = if version <= 14 { d.i32()? } else { -1 };
        let max_wait_ms = d.i32()?;
        let min_bytes = d.i32()?;
        let max_bytes = d.i32()?;
        let isolation_level = d.i8()?;
        let session_id = d.i32()?;
        let session_epoch = d.i32()?;
        let topics = d.array(|d| {
            let (topic, topic_id) = decode_topic_ref(d, version)?;
            let partitions = d.array(|d| {
                let p = FetchPartition {
                    partition: d.i32()?,
                    current_leader_epoch: d.i32()?,
                    fetch_offset: d.i64()?,
                    last_fetched_epoch: if version >= 12 { d.i32()? } else { -1 },
                    log_start_offset: d.i64()?,
                    partition_max_bytes: d.i32()?,
                };
                d.tags()?;
                Ok(p)
            })?;
            d.tags()?;
            Ok(FetchTopic {
                topic,
                topic_id,
                partitions,
            })
        })?;
        let forgotten_topics = d.array(|d| {
            let (topic, topic_id) = decode_topic_ref(d, version)?;
            let partitions = d.array(|d| {
                Ok(FetchPartition {
                    partition: d.i32()?,
                    ..Default::default()
                })
            })?;
            d.tags()?;
            Ok(FetchTopic {
                topic,
                topic_id,
                partitions,
            })
        })?;
        let rack_id = if version >= 11 {
            d.string()?
        } else {
            String::new()
        };
        d.tags()?;
        Ok(Self {
            replica_id,
            max_wait_ms,
            min_bytes,
            max_bytes,
            isolation_level,
            session_id,
            session_epoch,
            topics,
            forgotten_topics,
            rack_id,
        })
    }
}

impl Message for FetchResponse {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.i32(self.throttle_time_ms);
        e.i16(self.error_code.0);
        e.i32(self.session_id);
        e.array(&self.responses, |e, t| {
            encode_topic_ref(e, version, &t.topic, &t.topic_id);
            e.array(&t.partitions, |e, p| {
                e.i32(p.partition_index);
                e.i16(p.error_code.0);
                e.i64(p.high_watermark);
                e.i64(p.last_stable_offset);
                e.i64(p.log_start_offset);
                e.narray(p.aborted_transactions.as_deref(), |e, a| {
                    e.i64(a.producer_id);
                    e.i64(a.first_offset);
                    e.tags();
                });
                if version >= 11 {
                    e.i32(p.preferred_read_replica);
                }
                e.nbytes(p.records.as_deref());
                match p.current_leader {
                    None => e.tags(),
                    Some(l) => {
                        let payload = e.nested(|e| {
                            e.i32(l.leader_id);
                            e.i32(l.leader_epoch);
                            e.tags();
                        });
                        e.tags_with(&[(1, payload)]);
                    }
                }
            });
            e.tags();
        });
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = d.i32()?;
        let error_code = ErrorCode(d.i16()?);
        let session_id = d.i32()?;
        let responses = d.array(|d| {
            let (topic, topic_id) = decode_topic_ref(d, version)?;
            let partitions = d.array(|d| {
                let mut p = FetchPartitionResponse {
                    partition_index: d.i32()?,
                    error_code: ErrorCode(d.i16()?),
                    high_watermark: d.i64()?,
                    last_stable_offset: d.i64()?,
                    log_start_offset: d.i64()?,
                    current_leader: None,
                    aborted_transactions: d.narray(|d| {
                        let a = crate::records::AbortedTransaction {
                            producer_id: d.i64()?,
                            first_offset: d.i64()?,
                        };
                        d.tags()?;
                        Ok(a)
                    })?,
                    preferred_read_replica: if version >= 11 { d.i32()? } else { -1 },
                    records: d.nbytes()?,
                };
                let flexible = d.flexible();
                d.tags_with(|tag, payload| {
                    if tag == 1 {
                        let mut t = Decoder::new(payload, flexible);
                        p.current_leader = Some(CurrentLeader {
                            leader_id: t.i32()?,
                            leader_epoch: t.i32()?,
                        });
                    }
                    Ok(())
                })?;
                Ok(p)
            })?;
            d.tags()?;
            Ok(FetchTopicResponse {
                topic,
                topic_id,
                partitions,
            })
        })?;
        d.tags()?;
        Ok(Self {
            throttle_time_ms,
            error_code,
            session_id,
            responses,
        })
    }
}

impl Request for FetchRequest {
    type Response = FetchResponse;
    const API_KEY: i16 = 1;
    const NAME: &'static str = "Fetch";
    const MIN_VERSION: i16 = 10;
    const MAX_VERSION: i16 = 18;
    const FIRST_FLEXIBLE: i16 = 12;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    fn part() -> impl Strategy<Value = FetchPartition> {
        (
            any::<i32>(),
            any::<i32>(),
            any::<i64>(),
            any::<i32>(),
            any::<i64>(),
            any::<i32>(),
        )
            .prop_map(|(a, b, c, d, e, f)| FetchPartition {
                partition: a,
                current_leader_epoch: b,
                fetch_offset: c,
                last_fetched_epoch: d,
                log_start_offset: e,
                partition_max_bytes: f,
            })
    }

    proptest! {
        #[test]
        fn request_rt(mw: i32, mb: i32, xb: i32, iso: i8, sid: i32, se: i32, ts in v((s(), any::<[u8; 16]>(), v(part()))),
                      fs in v((s(), any::<[u8; 16]>(), v(any::<i32>()))), rack in s()) {
            request_round_trip(&FetchRequest {
                replica_id: -1, max_wait_ms: mw, min_bytes: mb, max_bytes: xb, isolation_level: iso, session_id: sid, session_epoch: se,
                // At the highest version only ids are on the wire.
                topics: ts.into_iter().map(|(_, topic_id, partitions)| FetchTopic { topic: String::new(), topic_id, partitions }).collect(),
                forgotten_topics: fs.into_iter().map(|(_, topic_id, ps)| FetchTopic { topic: String::new(), topic_id,
                    partitions: ps.into_iter().map(|partition| FetchPartition { partition, ..Default::default() }).collect() }).collect(),
                rack_id: rack,
            })?;
        }
        #[test]
        fn response_rt(t: i32, c: i16, sid: i32,
                       ts in v((any::<[u8; 16]>(), v((any::<i32>(), any::<i16>(), any::<i64>(), any::<i64>(), any::<i64>(),
                           proptest::option::of((any::<i32>(), any::<i32>())), proptest::option::of(v((any::<i64>(), any::<i64>()))), any::<i32>(), nby()))))) {
            response_round_trip::<FetchRequest>(&FetchResponse {
                throttle_time_ms: t, error_code: ErrorCode(c), session_id: sid,
                responses: ts.into_iter().map(|(topic_id, ps)| FetchTopicResponse { topic: String::new(), topic_id,
                    partitions: ps.into_iter().map(|(i, c, hw, lso, lst, cl, ab, prr, rec)| FetchPartitionResponse {
                        partition_index: i, error_code: ErrorCode(c), high_watermark: hw, last_stable_offset: lso, log_start_offset: lst,
                        current_leader: cl.map(|(leader_id, leader_epoch)| CurrentLeader { leader_id, leader_epoch }),
                        aborted_transactions: ab.map(|a| a.into_iter().map(|(producer_id, first_offset)| crate::records::AbortedTransaction { producer_id, first_offset }).collect()),
                        preferred_read_replica: prr, records: rec,
                    }).collect() }).collect(),
            })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..96)) {
            never_panics::<FetchRequest>(&b);
        }
    }
}
