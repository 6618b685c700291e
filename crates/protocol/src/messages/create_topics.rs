//! CreateTopics (key 19) v3-v7 (a topic's partition count and replication factor are answered
//! from v5): create topics (tests, the CLI and DLQ setup need it).

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// A topic config entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicConfig {
    /// Config name.
    pub name: String,
    /// Value.
    pub value: Option<String>,
}

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreatableTopic {
    /// Name.
    pub name: String,
    /// Partitions (-1 = broker default).
    pub num_partitions: i32,
    /// Replication factor (-1 = broker default).
    pub replication_factor: i16,
    /// Configs (e.g. `compression.type`).
    pub configs: Vec<TopicConfig>,
}

/// CreateTopics request (send to any broker; KRaft forwards to the controller).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateTopicsRequest {
    /// Topics.
    pub topics: Vec<CreatableTopic>,
    /// Server-side timeout.
    pub timeout_ms: i32,
    /// Validate only.
    pub validate_only: bool,
}

/// A topic's result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreatableTopicResult {
    /// Name.
    pub name: String,
    /// Topic id (v7+).
    pub topic_id: [u8; 16],
    /// Error.
    pub error_code: ErrorCode,
    /// Error message.
    pub error_message: Option<String>,
    /// Partitions.
    pub num_partitions: i32,
    /// Replication factor.
    pub replication_factor: i16,
}

/// CreateTopics response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateTopicsResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Topics.
    pub topics: Vec<CreatableTopicResult>,
}

impl Message for CreateTopicsRequest {
    fn encode(&self, e: &mut Encoder<'_>, _version: i16) {
        e.array(&self.topics, |e, t| {
            e.string(&t.name);
            e.i32(t.num_partitions);
            e.i16(t.replication_factor);
            e.array::<()>(&[], |_, _| {});
            e.array(&t.configs, |e, c| {
                e.string(&c.name);
                e.nstring(c.value.as_deref());
                e.tags();
            });
            e.tags();
        });
        e.i32(self.timeout_ms);
        e.bool(self.validate_only);
        e.tags();
    }
    fn decode(d: &mut Decoder, _version: i16) -> Result<Self, DecodeError> {
        let topics = d.array(|d| {
            let name = d.string()?;
            let num_partitions = d.i32()?;
            let replication_factor = d.i16()?;
            let _assignments = d.array(|d| {
                let _p = d.i32()?;
                let _b = d.array(Decoder::i32)?;
                d.tags()
            })?;
            let configs = d.array(|d| {
                let c = TopicConfig {
                    name: d.string()?,
                    value: d.nstring()?,
                };
                d.tags()?;
                Ok(c)
            })?;
            d.tags()?;
            Ok(CreatableTopic {
                name,
                num_partitions,
                replication_factor,
                configs,
            })
        })?;
        let timeout_ms = d.i32()?;
        let validate_only = d.bool()?;
        d.tags()?;
        Ok(Self {
            topics,
            timeout_ms,
            validate_only,
        })
    }
}

impl Message for CreateTopicsResponse {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.i32(self.throttle_time_ms);
        e.array(&self.topics, |e, t| {
            e.string(&t.name);
            if version >= 7 {
                e.uuid(&t.topic_id);
            }
            e.i16(t.error_code.0);
            e.nstring(t.error_message.as_deref());
            if version >= 5 {
                e.i32(t.num_partitions);
                e.i16(t.replication_factor);
                e.narray::<()>(None, |_, _| {});
            }
            e.tags();
        });
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = d.i32()?;
        let topics = d.array(|d| {
            let name = d.string()?;
            let topic_id = if version >= 7 { d.uuid()? } else { [0; 16] };
            let error_code = ErrorCode(d.i16()?);
            let error_message = d.nstring()?;
            let (num_partitions, replication_factor) = if version >= 5 {
                let num_partitions = d.i32()?;
                let replication_factor = d.i16()?;
                let _configs = d.narray(|d| {
                    let _name = d.string()?;
                    let _value = d.nstring()?;
                    let _read_only = d.bool()?;
                    let _source = d.i8()?;
                    let _sensitive = d.bool()?;
                    d.tags()
                })?;
                (num_partitions, replication_factor)
            } else {
                (-1, -1)
            };
            d.tags()?;
            Ok(CreatableTopicResult {
                name,
                topic_id,
                error_code,
                error_message,
                num_partitions,
                replication_factor,
            })
        })?;
        d.tags()?;
        Ok(Self {
            throttle_time_ms,
            topics,
        })
    }
}

impl Request for CreateTopicsRequest {
    type Response = CreateTopicsResponse;
    const API_KEY: i16 = 19;
    const NAME: &'static str = "CreateTopics";
    const MIN_VERSION: i16 = 3;
    const MAX_VERSION: i16 = 7;
    const FIRST_FLEXIBLE: i16 = 5;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn request_rt(ts in v((s(), any::<i32>(), any::<i16>(), v((s(), ns())))), t: i32, vo: bool) {
            request_round_trip(&CreateTopicsRequest {
                timeout_ms: t, validate_only: vo,
                topics: ts.into_iter().map(|(name, num_partitions, replication_factor, cs)| CreatableTopic {
                    name, num_partitions, replication_factor, configs: cs.into_iter().map(|(name, value)| TopicConfig { name, value }).collect() }).collect(),
            })?;
        }
        #[test]
        fn response_rt(t: i32, ts in v((s(), any::<[u8; 16]>(), any::<i16>(), ns(), any::<i32>(), any::<i16>()))) {
            response_round_trip::<CreateTopicsRequest>(&CreateTopicsResponse {
                throttle_time_ms: t,
                topics: ts.into_iter().map(|(name, topic_id, c, error_message, num_partitions, replication_factor)| CreatableTopicResult {
                    name, topic_id, error_code: ErrorCode(c), error_message, num_partitions, replication_factor }).collect(),
            })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<CreateTopicsRequest>(&b);
        }
    }
}
