//! Metadata (v10-12) and ListOffsets (v6-9) bodies on `orderly-protocol`'s codec (to move there).
//!
//! Only the fields the group member needs are kept; everything else is read and dropped, so the
//! decoders accept every byte the broker sends at these versions.

use orderly_protocol::codec::{DecodeError, Decoder, Encoder};
use orderly_protocol::messages::{Message, Request};

/// One topic in a Metadata request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataRequestTopic {
    /// Topic name.
    pub name: Option<String>,
}

/// Metadata request (v10-12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataRequest {
    /// Topics; `None` = all.
    pub topics: Option<Vec<MetadataRequestTopic>>,
    /// Whether the broker may auto-create topics.
    pub allow_auto_topic_creation: bool,
}

/// A broker in a Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataBroker {
    /// Node id.
    pub node_id: i32,
    /// Host.
    pub host: String,
    /// Port.
    pub port: i32,
    /// Rack.
    pub rack: Option<String>,
}

/// A partition in a Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataPartition {
    /// Error code.
    pub error_code: i16,
    /// Partition index.
    pub partition_index: i32,
    /// Leader node id (-1 none).
    pub leader_id: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
}

/// A topic in a Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataTopic {
    /// Error code.
    pub error_code: i16,
    /// Name (nullable in v12).
    pub name: Option<String>,
    /// Partitions.
    pub partitions: Vec<MetadataPartition>,
}

/// Metadata response (v10-12), reduced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataResponse {
    /// Brokers.
    pub brokers: Vec<MetadataBroker>,
    /// Topics.
    pub topics: Vec<MetadataTopic>,
}

fn i32_array(d: &mut Decoder) -> Result<Vec<i32>, DecodeError> {
    d.array(Decoder::i32)
}

impl Message for MetadataRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.narray(self.topics.as_deref(), |e, t| {
            e.uuid(&[0; 16]);
            e.nstring(t.name.as_deref());
            e.tags();
        });
        e.bool(self.allow_auto_topic_creation);
        if version <= 10 {
            e.bool(false); // include_cluster_authorized_operations
        }
        e.bool(false); // include_topic_authorized_operations
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let topics = d.narray(|d| {
            d.uuid()?;
            let name = d.nstring()?;
            d.tags()?;
            Ok(MetadataRequestTopic { name })
        })?;
        let allow_auto_topic_creation = d.bool()?;
        if version <= 10 {
            d.bool()?;
        }
        d.bool()?;
        d.tags()?;
        Ok(Self {
            topics,
            allow_auto_topic_creation,
        })
    }
}

impl Message for MetadataResponse {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.i32(0);
        e.array(&self.brokers, |e, b| {
            e.i32(b.node_id);
            e.string(&b.host);
            e.i32(b.port);
            e.nstring(b.rack.as_deref());
            e.tags();
        });
        e.nstring(None);
        e.i32(-1);
        e.array(&self.topics, |e, t| {
            e.i16(t.error_code);
            e.nstring(t.name.as_deref());
            e.uuid(&[0; 16]);
            e.bool(false);
            e.array(&t.partitions, |e, p| {
                e.i16(p.error_code);
                e.i32(p.partition_index);
                e.i32(p.leader_id);
                e.i32(p.leader_epoch);
                e.array(&[] as &[i32], |e, r| e.i32(*r));
                e.array(&[] as &[i32], |e, r| e.i32(*r));
                e.array(&[] as &[i32], |e, r| e.i32(*r));
                e.tags();
            });
            e.i32(i32::MIN);
            e.tags();
        });
        if version <= 10 {
            e.i32(i32::MIN);
        }
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let _throttle = d.i32()?;
        let brokers = d.array(|d| {
            let b = MetadataBroker {
                node_id: d.i32()?,
                host: d.string()?,
                port: d.i32()?,
                rack: d.nstring()?,
            };
            d.tags()?;
            Ok(b)
        })?;
        let _cluster_id = d.nstring()?;
        let _controller = d.i32()?;
        let topics = d.array(|d| {
            let error_code = d.i16()?;
            let name = d.nstring()?;
            d.uuid()?;
            d.bool()?;
            let partitions = d.array(|d| {
                let p = MetadataPartition {
                    error_code: d.i16()?,
                    partition_index: d.i32()?,
                    leader_id: d.i32()?,
                    leader_epoch: d.i32()?,
                };
                i32_array(d)?;
                i32_array(d)?;
                i32_array(d)?;
                d.tags()?;
                Ok(p)
            })?;
            d.i32()?;
            d.tags()?;
            Ok(MetadataTopic {
                error_code,
                name,
                partitions,
            })
        })?;
        if version <= 10 {
            d.i32()?;
        }
        d.tags()?;
        Ok(Self { brokers, topics })
    }
}

impl Request for MetadataRequest {
    type Response = MetadataResponse;
    const API_KEY: i16 = 3;
    const NAME: &'static str = "Metadata";
    const MIN_VERSION: i16 = 10;
    const MAX_VERSION: i16 = 12;
    const FIRST_FLEXIBLE: i16 = 9;
}

/// A partition in a ListOffsets request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsPartition {
    /// Partition.
    pub partition_index: i32,
    /// Current leader epoch (-1 unknown).
    pub current_leader_epoch: i32,
    /// -1 latest, -2 earliest, or a timestamp.
    pub timestamp: i64,
}

/// A topic in a ListOffsets request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsTopic {
    /// Topic.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<ListOffsetsPartition>,
}

/// ListOffsets request (v6-9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsRequest {
    /// -1 for consumers.
    pub replica_id: i32,
    /// 0 read_uncommitted, 1 read_committed.
    pub isolation_level: i8,
    /// Topics.
    pub topics: Vec<ListOffsetsTopic>,
}

/// A partition in a ListOffsets response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsPartitionResponse {
    /// Partition.
    pub partition_index: i32,
    /// Error code.
    pub error_code: i16,
    /// Timestamp.
    pub timestamp: i64,
    /// Offset.
    pub offset: i64,
    /// Leader epoch.
    pub leader_epoch: i32,
}

/// A topic in a ListOffsets response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListOffsetsTopicResponse {
    /// Topic.
    pub name: String,
    /// Partitions.
    pub partitions: Vec<ListOffsetsPartitionResponse>,
}

/// ListOffsets response (v6-9).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListOffsetsResponse {
    /// Topics.
    pub topics: Vec<ListOffsetsTopicResponse>,
}

impl Message for ListOffsetsRequest {
    fn encode(&self, e: &mut Encoder<'_>, _version: i16) {
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
        e.tags();
    }
    fn decode(d: &mut Decoder, _version: i16) -> Result<Self, DecodeError> {
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
        d.tags()?;
        Ok(Self {
            replica_id,
            isolation_level,
            topics,
        })
    }
}

impl Message for ListOffsetsResponse {
    fn encode(&self, e: &mut Encoder<'_>, _version: i16) {
        e.i32(0);
        e.array(&self.topics, |e, t| {
            e.string(&t.name);
            e.array(&t.partitions, |e, p| {
                e.i32(p.partition_index);
                e.i16(p.error_code);
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
        let _throttle = d.i32()?;
        let topics = d.array(|d| {
            let name = d.string()?;
            let partitions = d.array(|d| {
                let p = ListOffsetsPartitionResponse {
                    partition_index: d.i32()?,
                    error_code: d.i16()?,
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
        Ok(Self { topics })
    }
}

impl Request for ListOffsetsRequest {
    type Response = ListOffsetsResponse;
    const API_KEY: i16 = 2;
    const NAME: &'static str = "ListOffsets";
    const MIN_VERSION: i16 = 6;
    const MAX_VERSION: i16 = 9;
    const FIRST_FLEXIBLE: i16 = 6;
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use orderly_protocol::messages::{
        decode_request, decode_response, encode_request, encode_response,
    };

    #[test]
    fn metadata_round_trips() {
        for v in 10..=12 {
            let req = MetadataRequest {
                topics: Some(vec![MetadataRequestTopic {
                    name: Some("t".into()),
                }]),
                allow_auto_topic_creation: false,
            };
            let b = encode_request(&req, v).unwrap();
            assert_eq!(
                decode_request::<MetadataRequest>(Bytes::from(b), v).unwrap(),
                req
            );
            let resp = MetadataResponse {
                brokers: vec![MetadataBroker {
                    node_id: 1,
                    host: "h".into(),
                    port: 9092,
                    rack: None,
                }],
                topics: vec![MetadataTopic {
                    error_code: 0,
                    name: Some("t".into()),
                    partitions: vec![MetadataPartition {
                        error_code: 0,
                        partition_index: 0,
                        leader_id: 1,
                        leader_epoch: 3,
                    }],
                }],
            };
            let b = encode_response::<MetadataRequest>(&resp, v).unwrap();
            assert_eq!(
                decode_response::<MetadataRequest>(Bytes::from(b), v).unwrap(),
                resp
            );
        }
    }

    #[test]
    fn list_offsets_round_trips() {
        let req = ListOffsetsRequest {
            replica_id: -1,
            isolation_level: 1,
            topics: vec![ListOffsetsTopic {
                name: "t".into(),
                partitions: vec![ListOffsetsPartition {
                    partition_index: 2,
                    current_leader_epoch: -1,
                    timestamp: -2,
                }],
            }],
        };
        let b = encode_request(&req, 9).unwrap();
        assert_eq!(
            decode_request::<ListOffsetsRequest>(Bytes::from(b), 9).unwrap(),
            req
        );
        let resp = ListOffsetsResponse {
            topics: vec![ListOffsetsTopicResponse {
                name: "t".into(),
                partitions: vec![ListOffsetsPartitionResponse {
                    partition_index: 2,
                    error_code: 0,
                    timestamp: -1,
                    offset: 17,
                    leader_epoch: 0,
                }],
            }],
        };
        let b = encode_response::<ListOffsetsRequest>(&resp, 9).unwrap();
        assert_eq!(
            decode_response::<ListOffsetsRequest>(Bytes::from(b), 9).unwrap(),
            resp
        );
    }

    #[test]
    fn garbage_never_panics() {
        for n in 0..64u8 {
            let b: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37)).collect();
            let _ = decode_response::<MetadataRequest>(Bytes::from(b.clone()), 12);
            let _ = decode_response::<ListOffsetsRequest>(Bytes::from(b), 9);
        }
    }
}
