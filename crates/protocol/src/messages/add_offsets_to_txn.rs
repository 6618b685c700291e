//! AddOffsetsToTxn (key 25) v1-v4: tell the transaction coordinator that the open transaction will
//! carry offsets of a consumer group (the coordinator adds that group's `__consumer_offsets`
//! partition to the transaction), before TxnOffsetCommit goes to the group coordinator.
//!
//! Version 2 adds the PRODUCER_FENCED error code, version 3 is flexible (KIP-482), version 4 adds
//! TRANSACTION_ABORTABLE (KIP-890).

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// AddOffsetsToTxn request, sent to the transaction coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddOffsetsToTxnRequest {
    /// The transactional id.
    pub transactional_id: String,
    /// Producer id from InitProducerId.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// The consumer group whose offsets the transaction will commit.
    pub group_id: String,
}

/// AddOffsetsToTxn response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddOffsetsToTxnResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Error.
    pub error_code: ErrorCode,
}

impl Message for AddOffsetsToTxnRequest {
    fn encode(&self, e: &mut Encoder<'_>, _version: i16) {
        e.string(&self.transactional_id);
        e.i64(self.producer_id);
        e.i16(self.producer_epoch);
        e.string(&self.group_id);
        e.tags();
    }
    fn decode(d: &mut Decoder, _version: i16) -> Result<Self, DecodeError> {
        let r = Self {
            transactional_id: d.string()?,
            producer_id: d.i64()?,
            producer_epoch: d.i16()?,
            group_id: d.string()?,
        };
        d.tags()?;
        Ok(r)
    }
}

impl Message for AddOffsetsToTxnResponse {
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

impl Request for AddOffsetsToTxnRequest {
    type Response = AddOffsetsToTxnResponse;
    const API_KEY: i16 = 25;
    const NAME: &'static str = "AddOffsetsToTxn";
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 4;
    const FIRST_FLEXIBLE: i16 = 3;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::encode_request;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    #[test]
    fn request_bytes() {
        let req = AddOffsetsToTxnRequest {
            transactional_id: "t".into(),
            producer_id: 1,
            producer_epoch: 0,
            group_id: "g".into(),
        };
        let mut want = vec![2, b't', 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 2, b'g', 0];
        assert_eq!(encode_request(&req, 4).unwrap(), want);
        want = vec![0, 1, b't', 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, b'g'];
        assert_eq!(encode_request(&req, 1).unwrap(), want);
    }

    proptest! {
        #[test]
        fn request_rt(t in s(), id: i64, ep: i16, g in s()) {
            request_round_trip(&AddOffsetsToTxnRequest { transactional_id: t, producer_id: id, producer_epoch: ep, group_id: g })?;
        }
        #[test]
        fn response_rt(t: i32, c: i16) {
            response_round_trip::<AddOffsetsToTxnRequest>(&AddOffsetsToTxnResponse { throttle_time_ms: t, error_code: ErrorCode(c) })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<AddOffsetsToTxnRequest>(&b);
        }
    }
}
