//! JoinGroup (key 11) v3-v9: join a classic group and learn the generation, leader and (for the leader) all members.

use bytes::Bytes;

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// The protocol type every consumer uses.
pub const PROTOCOL_TYPE_CONSUMER: &str = "consumer";

/// One assignor the member supports, with its subscription metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupProtocol {
    /// Assignor name ("range", "cooperative-sticky"...).
    pub name: String,
    /// Encoded [`crate::consumer_protocol::Subscription`].
    pub metadata: Bytes,
}

/// JoinGroup request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupRequest {
    /// Group id.
    pub group_id: String,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Rebalance timeout (max.poll.interval.ms in Java).
    pub rebalance_timeout_ms: i32,
    /// Member id, "" on the first join.
    pub member_id: String,
    /// Static membership instance id.
    pub group_instance_id: Option<String>,
    /// "consumer".
    pub protocol_type: String,
    /// Supported assignors in preference order.
    pub protocols: Vec<JoinGroupProtocol>,
    /// Why the member (re)joins (v8+).
    pub reason: Option<String>,
}

/// A group member as the leader sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupMember {
    /// Member id.
    pub member_id: String,
    /// Static instance id.
    pub group_instance_id: Option<String>,
    /// The member's subscription for the selected protocol.
    pub metadata: Bytes,
}

/// JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Error (MEMBER_ID_REQUIRED carries the id to rejoin with in `member_id`).
    pub error_code: ErrorCode,
    /// Generation.
    pub generation_id: i32,
    /// Protocol type (v7+).
    pub protocol_type: Option<String>,
    /// Selected assignor (nullable v7+).
    pub protocol_name: Option<String>,
    /// Leader member id.
    pub leader: String,
    /// A restarted static leader must not assign (v9+, KIP-814).
    pub skip_assignment: bool,
    /// This member's id.
    pub member_id: String,
    /// All members (leader only).
    pub members: Vec<JoinGroupMember>,
}

impl Message for JoinGroupRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.string(&self.group_id);
        e.i32(self.session_timeout_ms);
        e.i32(self.rebalance_timeout_ms);
        e.string(&self.member_id);
        if version >= 5 {
            e.nstring(self.group_instance_id.as_deref());
        }
        e.string(&self.protocol_type);
        e.array(&self.protocols, |e, p| {
            e.string(&p.name);
            e.bytes(&p.metadata);
            e.tags();
        });
        if version >= 8 {
            e.nstring(self.reason.as_deref());
        }
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let r = Self {
            group_id: d.string()?,
            session_timeout_ms: d.i32()?,
            rebalance_timeout_ms: d.i32()?,
            member_id: d.string()?,
            group_instance_id: if version >= 5 { d.nstring()? } else { None },
            protocol_type: d.string()?,
            protocols: d.array(|d| {
                let p = JoinGroupProtocol {
                    name: d.string()?,
                    metadata: d.bytes()?,
                };
                d.tags()?;
                Ok(p)
            })?,
            reason: if version >= 8 { d.nstring()? } else { None },
        };
        d.tags()?;
        Ok(r)
    }
}

impl Message for JoinGroupResponse {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.i32(self.throttle_time_ms);
        e.i16(self.error_code.0);
        e.i32(self.generation_id);
        if version >= 7 {
            e.nstring(self.protocol_type.as_deref());
            e.nstring(self.protocol_name.as_deref());
        } else {
            e.string(self.protocol_name.as_deref().unwrap_or(""));
        }
        e.string(&self.leader);
        if version >= 9 {
            e.bool(self.skip_assignment);
        }
        e.string(&self.member_id);
        e.array(&self.members, |e, m| {
            e.string(&m.member_id);
            if version >= 5 {
                e.nstring(m.group_instance_id.as_deref());
            }
            e.bytes(&m.metadata);
            e.tags();
        });
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = d.i32()?;
        let error_code = ErrorCode(d.i16()?);
        let generation_id = d.i32()?;
        let (protocol_type, protocol_name) = if version >= 7 {
            (d.nstring()?, d.nstring()?)
        } else {
            (None, Some(d.string()?))
        };
        let r = Self {
            throttle_time_ms,
            error_code,
            generation_id,
            protocol_type,
            protocol_name,
            leader: d.string()?,
            skip_assignment: if version >= 9 { d.bool()? } else { false },
            member_id: d.string()?,
            members: d.array(|d| {
                let m = JoinGroupMember {
                    member_id: d.string()?,
                    group_instance_id: if version >= 5 { d.nstring()? } else { None },
                    metadata: d.bytes()?,
                };
                d.tags()?;
                Ok(m)
            })?,
        };
        d.tags()?;
        Ok(r)
    }
}

impl Request for JoinGroupRequest {
    type Response = JoinGroupResponse;
    const API_KEY: i16 = 11;
    const NAME: &'static str = "JoinGroup";
    const MIN_VERSION: i16 = 3;
    const MAX_VERSION: i16 = 9;
    const FIRST_FLEXIBLE: i16 = 6;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn request_rt(g in s(), st: i32, rt: i32, m in s(), i in ns(), pt in s(),
                      ps in v((s(), by())), reason in ns()) {
            request_round_trip(&JoinGroupRequest {
                group_id: g, session_timeout_ms: st, rebalance_timeout_ms: rt, member_id: m,
                group_instance_id: i, protocol_type: pt,
                protocols: ps.into_iter().map(|(name, metadata)| JoinGroupProtocol { name, metadata }).collect(),
                reason,
            })?;
        }
        #[test]
        fn response_rt(t: i32, c: i16, gen_id: i32, pt in ns(), pn in ns(), l in s(), skip: bool, m in s(),
                       ms in v((s(), ns(), by()))) {
            response_round_trip::<JoinGroupRequest>(&JoinGroupResponse {
                throttle_time_ms: t, error_code: ErrorCode(c), generation_id: gen_id, protocol_type: pt,
                protocol_name: pn, leader: l, skip_assignment: skip, member_id: m,
                members: ms.into_iter().map(|(member_id, group_instance_id, metadata)| JoinGroupMember { member_id, group_instance_id, metadata }).collect(),
            })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..96)) {
            never_panics::<JoinGroupRequest>(&b);
        }
    }
}
