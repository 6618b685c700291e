//! LeaveGroup (key 13) v2-v5: members leave a classic group (batch form from v3; below
//! that one member, the first, leaves).

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// A member leaving.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeavingMember {
    /// Member id.
    pub member_id: String,
    /// Static instance id.
    pub group_instance_id: Option<String>,
    /// Why (v5+).
    pub reason: Option<String>,
}

/// LeaveGroup request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaveGroupRequest {
    /// Group id.
    pub group_id: String,
    /// Members leaving.
    pub members: Vec<LeavingMember>,
}

/// Per-member result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeftMember {
    /// Member id.
    pub member_id: String,
    /// Static instance id.
    pub group_instance_id: Option<String>,
    /// Error for this member.
    pub error_code: ErrorCode,
}

/// LeaveGroup response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaveGroupResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Group-level error.
    pub error_code: ErrorCode,
    /// Per-member results.
    pub members: Vec<LeftMember>,
}

impl Message for LeaveGroupRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.string(&self.group_id);
        if version < 3 {
            e.string(
                self.members
                    .first()
                    .map(|m| m.member_id.as_str())
                    .unwrap_or(""),
            );
            return;
        }
        e.array(&self.members, |e, m| {
            e.string(&m.member_id);
            e.nstring(m.group_instance_id.as_deref());
            if version >= 5 {
                e.nstring(m.reason.as_deref());
            }
            e.tags();
        });
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let group_id = d.string()?;
        if version < 3 {
            let member_id = d.string()?;
            return Ok(Self {
                group_id,
                members: vec![LeavingMember {
                    member_id,
                    ..LeavingMember::default()
                }],
            });
        }
        let members = d.array(|d| {
            let m = LeavingMember {
                member_id: d.string()?,
                group_instance_id: d.nstring()?,
                reason: if version >= 5 { d.nstring()? } else { None },
            };
            d.tags()?;
            Ok(m)
        })?;
        d.tags()?;
        Ok(Self { group_id, members })
    }
}

impl Message for LeaveGroupResponse {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.i32(self.throttle_time_ms);
        e.i16(self.error_code.0);
        if version < 3 {
            return;
        }
        e.array(&self.members, |e, m| {
            e.string(&m.member_id);
            e.nstring(m.group_instance_id.as_deref());
            e.i16(m.error_code.0);
            e.tags();
        });
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = d.i32()?;
        let error_code = ErrorCode(d.i16()?);
        if version < 3 {
            return Ok(Self {
                throttle_time_ms,
                error_code,
                members: Vec::new(),
            });
        }
        let members = d.array(|d| {
            let m = LeftMember {
                member_id: d.string()?,
                group_instance_id: d.nstring()?,
                error_code: ErrorCode(d.i16()?),
            };
            d.tags()?;
            Ok(m)
        })?;
        d.tags()?;
        Ok(Self {
            throttle_time_ms,
            error_code,
            members,
        })
    }
}

impl Request for LeaveGroupRequest {
    type Response = LeaveGroupResponse;
    const API_KEY: i16 = 13;
    const NAME: &'static str = "LeaveGroup";
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
        fn request_rt(g in s(), ms in v((s(), ns(), ns()))) {
            request_round_trip(&LeaveGroupRequest {
                group_id: g,
                members: ms.into_iter().map(|(member_id, group_instance_id, reason)| LeavingMember { member_id, group_instance_id, reason }).collect(),
            })?;
        }
        #[test]
        fn response_rt(t: i32, c: i16, ms in v((s(), ns(), any::<i16>()))) {
            response_round_trip::<LeaveGroupRequest>(&LeaveGroupResponse {
                throttle_time_ms: t, error_code: ErrorCode(c),
                members: ms.into_iter().map(|(member_id, group_instance_id, c)| LeftMember { member_id, group_instance_id, error_code: ErrorCode(c) }).collect(),
            })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<LeaveGroupRequest>(&b);
        }
    }
}
