//! SyncGroup (key 14) v2-v5: the leader hands out assignments; every member receives its own.

use bytes::Bytes;

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// One member's assignment (sent by the leader).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncGroupAssignment {
    /// Member id.
    pub member_id: String,
    /// Encoded [`crate::consumer_protocol::Assignment`].
    pub assignment: Bytes,
}

/// SyncGroup request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncGroupRequest {
    /// Group id.
    pub group_id: String,
    /// Generation from JoinGroup.
    pub generation_id: i32,
    /// Member id.
    pub member_id: String,
    /// Static instance id.
    pub group_instance_id: Option<String>,
    /// "consumer" (v5+).
    pub protocol_type: Option<String>,
    /// Selected assignor (v5+).
    pub protocol_name: Option<String>,
    /// Leader: one entry per member; followers: empty.
    pub assignments: Vec<SyncGroupAssignment>,
}

/// SyncGroup response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncGroupResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Error.
    pub error_code: ErrorCode,
    /// Protocol type (v5+).
    pub protocol_type: Option<String>,
    /// Protocol name (v5+).
    pub protocol_name: Option<String>,
    /// This member's encoded assignment (may be empty).
    pub assignment: Bytes,
}

impl Message for SyncGroupRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.string(&self.group_id);
        e.i32(self.generation_id);
        e.string(&self.member_id);
        if version >= 3 {
            e.nstring(self.group_instance_id.as_deref());
        }
        if version >= 5 {
            e.nstring(self.protocol_type.as_deref());
            e.nstring(self.protocol_name.as_deref());
        }
        e.array(&self.assignments, |e, a| {
            e.string(&a.member_id);
            e.bytes(&a.assignment);
            e.tags();
        });
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let group_id = d.string()?;
        let generation_id = d.i32()?;
        let member_id = d.string()?;
        let group_instance_id = if version >= 3 { d.nstring()? } else { None };
        let (protocol_type, protocol_name) = if version >= 5 {
            (d.nstring()?, d.nstring()?)
        } else {
            (None, None)
        };
        let assignments = d.array(|d| {
            let a = SyncGroupAssignment {
                member_id: d.string()?,
                assignment: d.bytes()?,
            };
            d.tags()?;
            Ok(a)
        })?;
        d.tags()?;
        Ok(Self {
            group_id,
            generation_id,
            member_id,
            group_instance_id,
            protocol_type,
            protocol_name,
            assignments,
        })
    }
}

impl Message for SyncGroupResponse {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.i32(self.throttle_time_ms);
        e.i16(self.error_code.0);
        if version >= 5 {
            e.nstring(self.protocol_type.as_deref());
            e.nstring(self.protocol_name.as_deref());
        }
        e.bytes(&self.assignment);
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = d.i32()?;
        let error_code = ErrorCode(d.i16()?);
        let (protocol_type, protocol_name) = if version >= 5 {
            (d.nstring()?, d.nstring()?)
        } else {
            (None, None)
        };
        let assignment = d.bytes()?;
        d.tags()?;
        Ok(Self {
            throttle_time_ms,
            error_code,
            protocol_type,
            protocol_name,
            assignment,
        })
    }
}

impl Request for SyncGroupRequest {
    type Response = SyncGroupResponse;
    const API_KEY: i16 = 14;
    const NAME: &'static str = "SyncGroup";
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 5;
    const FIRST_FLEXIBLE: i16 = 4;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn request_rt(g in s(), gen_id: i32, m in s(), i in ns(), pt in ns(), pn in ns(), a in v((s(), by()))) {
            request_round_trip(&SyncGroupRequest {
                group_id: g, generation_id: gen_id, member_id: m, group_instance_id: i, protocol_type: pt, protocol_name: pn,
                assignments: a.into_iter().map(|(member_id, assignment)| SyncGroupAssignment { member_id, assignment }).collect(),
            })?;
        }
        #[test]
        fn response_rt(t: i32, c: i16, pt in ns(), pn in ns(), a in by()) {
            response_round_trip::<SyncGroupRequest>(&SyncGroupResponse {
                throttle_time_ms: t, error_code: ErrorCode(c), protocol_type: pt, protocol_name: pn, assignment: a,
            })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<SyncGroupRequest>(&b);
        }
    }
}
