//! AddPartitionsToTxn (key 24) v1-v3: register partitions in a producer's open transaction before
//! producing to them.
//!
//! Versions 4 and later batch several transactions and are sent by brokers to the transaction
//! coordinator (partition verification), never by clients; a client speaks v3 at most. Version 2
//! adds the PRODUCER_FENCED error code; version 3 is flexible (KIP-482).

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// One topic's partitions to add.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddPartitionsToTxnTopic {
    /// Topic name.
    pub name: String,
    /// Partition indexes.
    pub partitions: Vec<i32>,
}

/// AddPartitionsToTxn request, sent to the transaction coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddPartitionsToTxnRequest {
    /// The transactional id.
    pub transactional_id: String,
    /// Producer id from InitProducerId.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// The partitions to add.
    pub topics: Vec<AddPartitionsToTxnTopic>,
}

/// One partition's result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddPartitionsToTxnPartitionResult {
    /// Partition index.
    pub partition_index: i32,
    /// Error (OPERATION_NOT_ATTEMPTED when another partition of the request failed).
    pub error_code: ErrorCode,
}

/// One topic's results.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddPartitionsToTxnTopicResult {
    /// Topic name.
    pub name: String,
    /// Per partition.
    pub partitions: Vec<AddPartitionsToTxnPartitionResult>,
}

/// AddPartitionsToTxn response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddPartitionsToTxnResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Per topic.
    pub topics: Vec<AddPartitionsToTxnTopicResult>,
}

impl Message for AddPartitionsToTxnRequest {
    fn encode(&self, e: &mut Encoder<'_>, _version: i16) {
        e.string(&self.transactional_id);
        e.i64(self.producer_id);
        e.i16(self.producer_epoch);
        e.array(&self.topics, |e, t| {
            e.string(&t.name);
            e.array(&t.partitions, |e, p| e.i32(*p));
            e.tags();
        });
        e.tags();
    }
    fn decode(d: &mut Decoder, _version: i16) -> Result<Self, DecodeError> {
        let transactional_id = d.string()?;
        let producer_id = d.i64()?;
        let producer_epoch = d.i16()?;
        let topics = d.array(|d| {
            let name = d.string()?;
            let partitions = d.array(Decoder::i32)?;
            d.tags()?;
            Ok(AddPartitionsToTxnTopic { name, partitions })
        })?;
        d.tags()?;
        Ok(Self {
            transactional_id,
            producer_id,
            producer_epoch,
            topics,
        })
    }
}

impl Message for AddPartitionsToTxnResponse {
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
                let p = AddPartitionsToTxnPartitionResult {
                    partition_index: d.i32()?,
                    error_code: ErrorCode(d.i16()?),
                };
                d.tags()?;
                Ok(p)
            })?;
            d.tags()?;
            Ok(AddPartitionsToTxnTopicResult { name, partitions })
        })?;
        d.tags()?;
        Ok(Self {
            throttle_time_ms,
            topics,
        })
    }
}

impl Request for AddPartitionsToTxnRequest {
    type Response = AddPartitionsToTxnResponse;
    const API_KEY: i16 = 24;
    const NAME: &'static str = "AddPartitionsToTxn";
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 3;
    const FIRST_FLEXIBLE: i16 = 3;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use crate::messages::{decode_response, encode_request};
    use bytes::Bytes;
    use proptest::prelude::*;

    /// v3 bytes as Kafka's generated code writes them: compact strings and arrays (length + 1),
    /// an empty tag section after each struct.
    #[test]
    fn v3_request_bytes() {
        let req = AddPartitionsToTxnRequest {
            transactional_id: "t".into(),
            producer_id: 7,
            producer_epoch: 2,
            topics: vec![AddPartitionsToTxnTopic {
                name: "x".into(),
                partitions: vec![0, 3],
            }],
        };
        let mut want = vec![2, b't'];
        want.extend_from_slice(&7i64.to_be_bytes());
        want.extend_from_slice(&2i16.to_be_bytes());
        want.extend_from_slice(&[2, 2, b'x', 3, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0]);
        assert_eq!(encode_request(&req, 3).unwrap(), want);
        // v1: INT16-length string, INT32-count arrays, no tags.
        let v1 = encode_request(&req, 1).unwrap();
        assert_eq!(&v1[..3], &[0, 1, b't']);
        assert_eq!(v1.len(), 3 + 8 + 2 + 4 + 3 + 4 + 8);
    }

    #[test]
    fn v1_response_decodes() {
        let mut b = vec![0, 0, 0, 5, 0, 0, 0, 1, 0, 1, b'x', 0, 0, 0, 1];
        b.extend_from_slice(&4i32.to_be_bytes());
        b.extend_from_slice(&51i16.to_be_bytes());
        let r = decode_response::<AddPartitionsToTxnRequest>(Bytes::from(b), 1).unwrap();
        assert_eq!(r.throttle_time_ms, 5);
        assert_eq!(
            r.topics[0].partitions[0],
            AddPartitionsToTxnPartitionResult {
                partition_index: 4,
                error_code: ErrorCode::CONCURRENT_TRANSACTIONS
            }
        );
    }

    proptest! {
        #[test]
        fn request_rt(t in s(), id: i64, ep: i16, ts in v((s(), v(any::<i32>())))) {
            request_round_trip(&AddPartitionsToTxnRequest {
                transactional_id: t, producer_id: id, producer_epoch: ep,
                topics: ts.into_iter().map(|(name, partitions)| AddPartitionsToTxnTopic { name, partitions }).collect(),
            })?;
        }
        #[test]
        fn response_rt(t: i32, ts in v((s(), v((any::<i32>(), any::<i16>()))))) {
            response_round_trip::<AddPartitionsToTxnRequest>(&AddPartitionsToTxnResponse {
                throttle_time_ms: t,
                topics: ts.into_iter().map(|(name, ps)| AddPartitionsToTxnTopicResult { name,
                    partitions: ps.into_iter().map(|(p, c)| AddPartitionsToTxnPartitionResult { partition_index: p, error_code: ErrorCode(c) }).collect() }).collect(),
            })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<AddPartitionsToTxnRequest>(&b);
        }
    }
}
