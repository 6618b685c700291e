//! InitProducerId (key 22) v1-v4: a producer id and epoch for the idempotent producer.
//!
//! A producer without a transactional id sends `transactional_id: null`; any broker answers with a
//! fresh producer id at epoch 0. Version 3 adds `producer_id`/`producer_epoch` to the request (a
//! transactional producer resuming after INVALID_PRODUCER_EPOCH; -1 otherwise); version 4 only adds
//! the PRODUCER_FENCED error code. Versions 2+ are flexible (KIP-482); v1 has the v2 fields in the
//! classic encoding.

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// InitProducerId request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitProducerIdRequest {
    /// Transactional id; `None` for an idempotent (non-transactional) producer.
    pub transactional_id: Option<String>,
    /// Transaction timeout; only meaningful with a transactional id.
    pub transaction_timeout_ms: i32,
    /// The current producer id (v3+), -1 for none.
    pub producer_id: i64,
    /// The current producer epoch (v3+), -1 for none.
    pub producer_epoch: i16,
}

impl Default for InitProducerIdRequest {
    fn default() -> Self {
        Self {
            transactional_id: None,
            transaction_timeout_ms: i32::MAX,
            producer_id: -1,
            producer_epoch: -1,
        }
    }
}

/// InitProducerId response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InitProducerIdResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Error.
    pub error_code: ErrorCode,
    /// The producer id.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
}

impl Message for InitProducerIdRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.nstring(self.transactional_id.as_deref());
        e.i32(self.transaction_timeout_ms);
        if version >= 3 {
            e.i64(self.producer_id);
            e.i16(self.producer_epoch);
        }
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let transactional_id = d.nstring()?;
        let transaction_timeout_ms = d.i32()?;
        let (producer_id, producer_epoch) = if version >= 3 {
            (d.i64()?, d.i16()?)
        } else {
            (-1, -1)
        };
        d.tags()?;
        Ok(Self {
            transactional_id,
            transaction_timeout_ms,
            producer_id,
            producer_epoch,
        })
    }
}

impl Message for InitProducerIdResponse {
    fn encode(&self, e: &mut Encoder<'_>, _version: i16) {
        e.i32(self.throttle_time_ms);
        e.i16(self.error_code.0);
        e.i64(self.producer_id);
        e.i16(self.producer_epoch);
        e.tags();
    }
    fn decode(d: &mut Decoder, _version: i16) -> Result<Self, DecodeError> {
        let r = Self {
            throttle_time_ms: d.i32()?,
            error_code: ErrorCode(d.i16()?),
            producer_id: d.i64()?,
            producer_epoch: d.i16()?,
        };
        d.tags()?;
        Ok(r)
    }
}

impl Request for InitProducerIdRequest {
    type Response = InitProducerIdResponse;
    const API_KEY: i16 = 22;
    const NAME: &'static str = "InitProducerId";
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 4;
    const FIRST_FLEXIBLE: i16 = 2;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use crate::messages::{decode_response, encode_request};
    use bytes::Bytes;
    use proptest::prelude::*;

    /// The request an idempotent producer sends, byte by byte as Kafka's generated code writes it.
    #[test]
    fn idempotent_request_bytes() {
        let req = InitProducerIdRequest::default();
        let v4 = encode_request(&req, 4).unwrap();
        assert_eq!(
            v4,
            [
                0x00, // transactional_id: compact nullable string, null
                0x7f, 0xff, 0xff, 0xff, // transaction_timeout_ms
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // producer_id -1
                0xff, 0xff, // producer_epoch -1
                0x00, // no tagged fields
            ]
        );
        // v2 has neither producer_id nor producer_epoch.
        let v2 = encode_request(&req, 2).unwrap();
        assert_eq!(v2, [0x00, 0x7f, 0xff, 0xff, 0xff, 0x00]);
    }

    /// A broker's answer, assembled by hand: throttle 0, no error, producer id 4711, epoch 3.
    #[test]
    fn response_bytes_decode() {
        let mut b = vec![0, 0, 0, 0, 0, 0];
        b.extend_from_slice(&4711i64.to_be_bytes());
        b.extend_from_slice(&3i16.to_be_bytes());
        b.push(0);
        let r = decode_response::<InitProducerIdRequest>(Bytes::from(b.clone()), 4).unwrap();
        assert_eq!(
            r,
            InitProducerIdResponse {
                throttle_time_ms: 0,
                error_code: ErrorCode::NONE,
                producer_id: 4711,
                producer_epoch: 3,
            }
        );
        // A truncated answer is an error, not a default.
        assert!(
            decode_response::<InitProducerIdRequest>(Bytes::from(b[..10].to_vec()), 4).is_err()
        );
    }

    proptest! {
        #[test]
        fn request_rt(t in ns(), ms: i32, id: i64, ep: i16) {
            request_round_trip(&InitProducerIdRequest { transactional_id: t, transaction_timeout_ms: ms, producer_id: id, producer_epoch: ep })?;
        }
        #[test]
        fn response_rt(t: i32, c: i16, id: i64, ep: i16) {
            response_round_trip::<InitProducerIdRequest>(&InitProducerIdResponse { throttle_time_ms: t, error_code: ErrorCode(c), producer_id: id, producer_epoch: ep })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<InitProducerIdRequest>(&b);
        }
    }
}
