//! Heartbeat (key 12) v2-v4: keeps a classic member alive and reports a pending rebalance.

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// Heartbeat request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeartbeatRequest {
    /// Group id.
    pub group_id: String,
    /// Generation.
    pub generation_id: i32,
    /// Member id.
    pub member_id: String,
    /// Static instance id.
    pub group_instance_id: Option<String>,
}

/// Heartbeat response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeartbeatResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Error (REBALANCE_IN_PROGRESS means: rejoin).
    pub error_code: ErrorCode,
}

impl Message for HeartbeatRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.string(&self.group_id);
        e.i32(self.generation_id);
        e.string(&self.member_id);
        if version >= 3 {
            e.nstring(self.group_instance_id.as_deref());
        }
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let r = Self {
            group_id: d.string()?,
            generation_id: d.i32()?,
            member_id: d.string()?,
            group_instance_id: if version >= 3 { d.nstring()? } else { None },
        };
        d.tags()?;
        Ok(r)
    }
}

impl Message for HeartbeatResponse {
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

impl Request for HeartbeatRequest {
    type Response = HeartbeatResponse;
    const API_KEY: i16 = 12;
    const NAME: &'static str = "Heartbeat";
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 4;
    const FIRST_FLEXIBLE: i16 = 4;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn request_rt(g in s(), gen_id: i32, m in s(), i in ns()) {
            request_round_trip(&HeartbeatRequest { group_id: g, generation_id: gen_id, member_id: m, group_instance_id: i })?;
        }
        #[test]
        fn response_rt(t: i32, c: i16) {
            response_round_trip::<HeartbeatRequest>(&HeartbeatResponse { throttle_time_ms: t, error_code: ErrorCode(c) })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<HeartbeatRequest>(&b);
        }
    }
}
