//! EndTxn (key 26) v1-v4: commit or abort the producer's open transaction (the coordinator then
//! writes the COMMIT or ABORT markers to every partition in it).
//!
//! Version 2 adds the PRODUCER_FENCED error code, version 3 is flexible (KIP-482), version 4 adds
//! TRANSACTION_ABORTABLE (KIP-890). Version 5 belongs to transaction protocol 2 (KIP-890 part 2:
//! a new epoch after every transaction, partitions added implicitly by Produce), which orderly's
//! transactional producer does not use, so v4 is the highest spoken.

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// EndTxn request, sent to the transaction coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndTxnRequest {
    /// The transactional id.
    pub transactional_id: String,
    /// Producer id from InitProducerId.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// True to commit, false to abort.
    pub committed: bool,
}

/// EndTxn response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndTxnResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Error.
    pub error_code: ErrorCode,
}

impl Message for EndTxnRequest {
    fn encode(&self, e: &mut Encoder<'_>, _version: i16) {
        e.string(&self.transactional_id);
        e.i64(self.producer_id);
        e.i16(self.producer_epoch);
        e.bool(self.committed);
        e.tags();
    }
    fn decode(d: &mut Decoder, _version: i16) -> Result<Self, DecodeError> {
        let r = Self {
            transactional_id: d.string()?,
            producer_id: d.i64()?,
            producer_epoch: d.i16()?,
            committed: d.bool()?,
        };
        d.tags()?;
        Ok(r)
    }
}

impl Message for EndTxnResponse {
    fn encode(&self, e: &mut Encoder<'_>, _version: i16) {
        e.i32(self.throttle_time_ms);
        e.i16(self.error_code.0);
        e.tags();
    }
    fn decode(d: &mut Decoder, _version: i16) -> Result<Self, DecodeError> {
        let r = Self {
            throttle_time_ms: d.i32()?,
            error_code: ErrorCode(d.i16()?),
        };
        d.tags()?;
        Ok(r)
    }
}

impl Request for EndTxnRequest {
    type Response = EndTxnResponse;
    const API_KEY: i16 = 26;
    const NAME: &'static str = "EndTxn";
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 4;
    const FIRST_FLEXIBLE: i16 = 3;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use crate::messages::{decode_response, encode_request};
    use bytes::Bytes;
    use proptest::prelude::*;

    #[test]
    fn bytes_both_encodings() {
        let req = EndTxnRequest {
            transactional_id: "t".into(),
            producer_id: 1,
            producer_epoch: 3,
            committed: true,
        };
        assert_eq!(
            encode_request(&req, 4).unwrap(),
            [2, b't', 0, 0, 0, 0, 0, 0, 0, 1, 0, 3, 1, 0]
        );
        assert_eq!(
            encode_request(&req, 1).unwrap(),
            [0, 1, b't', 0, 0, 0, 0, 0, 0, 0, 1, 0, 3, 1]
        );
        // PRODUCER_FENCED (90) in a v4 answer.
        let r = decode_response::<EndTxnRequest>(Bytes::from_static(&[0, 0, 0, 0, 0, 90, 0]), 4)
            .unwrap();
        assert_eq!(r.error_code, ErrorCode::PRODUCER_FENCED);
    }

    proptest! {
        #[test]
        fn request_rt(t in s(), id: i64, ep: i16, c: bool) {
            request_round_trip(&EndTxnRequest { transactional_id: t, producer_id: id, producer_epoch: ep, committed: c })?;
        }
        #[test]
        fn response_rt(t: i32, c: i16) {
            response_round_trip::<EndTxnRequest>(&EndTxnResponse { throttle_time_ms: t, error_code: ErrorCode(c) })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<EndTxnRequest>(&b);
        }
    }
}
