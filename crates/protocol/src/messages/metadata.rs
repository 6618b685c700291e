//! Metadata (key 3) v7-v12: brokers, partition leaders and leader epochs, topic ids.

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// A topic to describe.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataRequestTopic {
    /// Topic id (v10+, all-zero = unknown).
    pub topic_id: [u8; 16],
    /// Topic name (nullable v10+).
    pub name: Option<String>,
}

/// Metadata request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataRequest {
    /// Topics; `None` = all topics.
    pub topics: Option<Vec<MetadataRequestTopic>>,
    /// Let the broker auto-create topics.
    pub allow_auto_topic_creation: bool,
    /// Include topic ACL operations.
    pub include_topic_authorized_operations: bool,
}

/// A broker.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataBroker {
    /// Broker id.
    pub node_id: i32,
    /// Host.
    pub host: String,
    /// Port.
    pub port: i32,
    /// Rack.
    pub rack: Option<String>,
}

impl MetadataBroker {
    /// `host:port` (`[host]:port` for an IPv6 literal).
    pub fn addr(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// A partition.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataPartition {
    /// Error.
    pub error_code: ErrorCode,
    /// Partition.
    pub partition_index: i32,
    /// Leader broker id (-1 = none).
    pub leader_id: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Replicas.
    pub replica_nodes: Vec<i32>,
    /// In-sync replicas.
    pub isr_nodes: Vec<i32>,
    /// Offline replicas.
    pub offline_replicas: Vec<i32>,
}

/// A topic.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataTopic {
    /// Error.
    pub error_code: ErrorCode,
    /// Name (nullable v12+ when looked up by id).
    pub name: Option<String>,
    /// Topic id (v10+).
    pub topic_id: [u8; 16],
    /// Internal topic.
    pub is_internal: bool,
    /// Partitions.
    pub partitions: Vec<MetadataPartition>,
    /// ACL operations bitfield.
    pub topic_authorized_operations: i32,
}

/// Metadata response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Brokers.
    pub brokers: Vec<MetadataBroker>,
    /// Cluster id.
    pub cluster_id: Option<String>,
    /// Controller id.
    pub controller_id: i32,
    /// Topics.
    pub topics: Vec<MetadataTopic>,
    /// Cluster ACL operations (v8-v10).
    pub cluster_authorized_operations: i32,
}

impl Message for MetadataRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.narray(self.topics.as_deref(), |e, t| {
            if version >= 10 {
                e.uuid(&t.topic_id);
                e.nstring(t.name.as_deref());
            } else {
                e.string(t.name.as_deref().unwrap_or(""));
            }
            e.tags();
        });
        e.bool(self.allow_auto_topic_creation);
        if version >= 8 {
            if version <= 10 {
                e.bool(false);
            }
            e.bool(self.include_topic_authorized_operations);
        }
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let topics = d.narray(|d| {
            let t = if version >= 10 {
                MetadataRequestTopic {
                    topic_id: d.uuid()?,
                    name: d.nstring()?,
                }
            } else {
                MetadataRequestTopic {
                    topic_id: [0; 16],
                    name: Some(d.string()?),
                }
            };
            d.tags()?;
            Ok(t)
        })?;
        let allow_auto_topic_creation = d.bool()?;
        let mut include_topic_authorized_operations = false;
        if version >= 8 {
            if version <= 10 {
                let _cluster_ops = d.bool()?;
            }
            include_topic_authorized_operations = d.bool()?;
        }
        d.tags()?;
        Ok(Self {
            topics,
            allow_auto_topic_creation,
            include_topic_authorized_operations,
        })
    }
}

impl Message for MetadataResponse {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.i32(self.throttle_time_ms);
        e.array(&self.brokers, |e, b| {
            e.i32(b.node_id);
            e.string(&b.host);
            e.i32(b.port);
            e.nstring(b.rack.as_deref());
            e.tags();
        });
        e.nstring(self.cluster_id.as_deref());
        e.i32(self.controller_id);
        e.array(&self.topics, |e, t| {
            e.i16(t.error_code.0);
            if version >= 12 {
                e.nstring(t.name.as_deref());
            } else {
                e.string(t.name.as_deref().unwrap_or(""));
            }
            if version >= 10 {
                e.uuid(&t.topic_id);
            }
            e.bool(t.is_internal);
            e.array(&t.partitions, |e, p| {
                e.i16(p.error_code.0);
                e.i32(p.partition_index);
                e.i32(p.leader_id);
                e.i32(p.leader_epoch);
                e.array(&p.replica_nodes, |e, n| e.i32(*n));
                e.array(&p.isr_nodes, |e, n| e.i32(*n));
                e.array(&p.offline_replicas, |e, n| e.i32(*n));
                e.tags();
            });
            if version >= 8 {
                e.i32(t.topic_authorized_operations);
            }
            e.tags();
        });
        if (8..=10).contains(&version) {
            e.i32(self.cluster_authorized_operations);
        }
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = d.i32()?;
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
        let cluster_id = d.nstring()?;
        let controller_id = d.i32()?;
        let topics = d.array(|d| {
            let error_code = ErrorCode(d.i16()?);
            let name = if version >= 12 {
                d.nstring()?
            } else {
                Some(d.string()?)
            };
            let topic_id = if version >= 10 { d.uuid()? } else { [0; 16] };
            let is_internal = d.bool()?;
            let partitions = d.array(|d| {
                let p = MetadataPartition {
                    error_code: ErrorCode(d.i16()?),
                    partition_index: d.i32()?,
                    leader_id: d.i32()?,
                    leader_epoch: d.i32()?,
                    replica_nodes: d.array(Decoder::i32)?,
                    isr_nodes: d.array(Decoder::i32)?,
                    offline_replicas: d.array(Decoder::i32)?,
                };
                d.tags()?;
                Ok(p)
            })?;
            let topic_authorized_operations = if version >= 8 { d.i32()? } else { i32::MIN };
            d.tags()?;
            Ok(MetadataTopic {
                error_code,
                name,
                topic_id,
                is_internal,
                partitions,
                topic_authorized_operations,
            })
        })?;
        let cluster_authorized_operations = if (8..=10).contains(&version) {
            d.i32()?
        } else {
            0
        };
        d.tags()?;
        Ok(Self {
            throttle_time_ms,
            brokers,
            cluster_id,
            controller_id,
            topics,
            cluster_authorized_operations,
        })
    }
}

impl Request for MetadataRequest {
    type Response = MetadataResponse;
    const API_KEY: i16 = 3;
    const NAME: &'static str = "Metadata";
    const MIN_VERSION: i16 = 7;
    const MAX_VERSION: i16 = 12;
    const FIRST_FLEXIBLE: i16 = 9;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    #[test]
    fn a_broker_address_brackets_an_ipv6_host() {
        let b = |host: &str| MetadataBroker {
            host: host.into(),
            port: 9092,
            ..Default::default()
        };
        assert_eq!(b("::1").addr(), "[::1]:9092");
        assert_eq!(b("[::1]").addr(), "[::1]:9092");
        assert_eq!(b("kafka-1").addr(), "kafka-1:9092");
    }

    proptest! {
        #[test]
        fn request_rt(ts in proptest::option::of(v((any::<[u8; 16]>(), ns()))), a: bool, b: bool) {
            request_round_trip(&MetadataRequest {
                topics: ts.map(|ts| ts.into_iter().map(|(topic_id, name)| MetadataRequestTopic { topic_id, name }).collect()),
                allow_auto_topic_creation: a, include_topic_authorized_operations: b,
            })?;
        }
        #[test]
        fn response_rt(t: i32, bs in v((any::<i32>(), s(), any::<i32>(), ns())), cid in ns(), ctrl: i32,
                       ts in v((any::<i16>(), ns(), any::<[u8; 16]>(), any::<bool>(), v((any::<i16>(), any::<i32>(), any::<i32>(), any::<i32>(), v(any::<i32>()), v(any::<i32>()), v(any::<i32>()))), any::<i32>()))) {
            response_round_trip::<MetadataRequest>(&MetadataResponse {
                throttle_time_ms: t,
                brokers: bs.into_iter().map(|(node_id, host, port, rack)| MetadataBroker { node_id, host, port, rack }).collect(),
                cluster_id: cid, controller_id: ctrl,
                topics: ts.into_iter().map(|(c, name, topic_id, is_internal, ps, ops)| MetadataTopic {
                    error_code: ErrorCode(c), name, topic_id, is_internal, topic_authorized_operations: ops,
                    partitions: ps.into_iter().map(|(c, i, l, le, r, isr, off)| MetadataPartition {
                        error_code: ErrorCode(c), partition_index: i, leader_id: l, leader_epoch: le, replica_nodes: r, isr_nodes: isr, offline_replicas: off,
                    }).collect(),
                }).collect(),
                cluster_authorized_operations: 0,
            })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<MetadataRequest>(&b);
        }
    }
}
