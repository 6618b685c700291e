//! DescribeGroups (key 15) v2-v5: a classic group's state, members and their assignments (for `orderly status`).

use bytes::Bytes;

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// DescribeGroups request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeGroupsRequest {
    /// Group ids.
    pub groups: Vec<String>,
    /// Ask for the authorized operations.
    pub include_authorized_operations: bool,
}

/// One member of a described group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribedMember {
    /// Member id.
    pub member_id: String,
    /// Static instance id.
    pub group_instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub client_host: String,
    /// The member's subscription (consumer protocol).
    pub member_metadata: Bytes,
    /// The member's assignment (consumer protocol).
    pub member_assignment: Bytes,
}

/// One described group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribedGroup {
    /// Error.
    pub error_code: ErrorCode,
    /// Group id.
    pub group_id: String,
    /// State (`Stable`, `PreparingRebalance`, `Empty`, `Dead`, ...).
    pub group_state: String,
    /// Protocol type (`consumer`).
    pub protocol_type: String,
    /// The chosen assignor.
    pub protocol_data: String,
    /// Members.
    pub members: Vec<DescribedMember>,
    /// Authorized operations bit field.
    pub authorized_operations: i32,
}

/// DescribeGroups response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeGroupsResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// Groups.
    pub groups: Vec<DescribedGroup>,
}

impl Message for DescribeGroupsRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.array(&self.groups, |e, g| e.string(g));
        if version >= 3 {
            e.bool(self.include_authorized_operations);
        }
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let r = Self {
            groups: d.array(Decoder::string)?,
            include_authorized_operations: if version >= 3 { d.bool()? } else { false },
        };
        d.tags()?;
        Ok(r)
    }
}

impl Message for DescribeGroupsResponse {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.i32(self.throttle_time_ms);
        e.array(&self.groups, |e, g| {
            e.i16(g.error_code.0);
            e.string(&g.group_id);
            e.string(&g.group_state);
            e.string(&g.protocol_type);
            e.string(&g.protocol_data);
            e.array(&g.members, |e, m| {
                e.string(&m.member_id);
                if version >= 4 {
                    e.nstring(m.group_instance_id.as_deref());
                }
                e.string(&m.client_id);
                e.string(&m.client_host);
                e.bytes(&m.member_metadata);
                e.bytes(&m.member_assignment);
                e.tags();
            });
            if version >= 3 {
                e.i32(g.authorized_operations);
            }
            e.tags();
        });
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = d.i32()?;
        let groups = d.array(|d| {
            let error_code = ErrorCode(d.i16()?);
            let group_id = d.string()?;
            let group_state = d.string()?;
            let protocol_type = d.string()?;
            let protocol_data = d.string()?;
            let members = d.array(|d| {
                let m = DescribedMember {
                    member_id: d.string()?,
                    group_instance_id: if version >= 4 { d.nstring()? } else { None },
                    client_id: d.string()?,
                    client_host: d.string()?,
                    member_metadata: d.bytes()?,
                    member_assignment: d.bytes()?,
                };
                d.tags()?;
                Ok(m)
            })?;
            // Kafka's value for "not asked for".
            let authorized_operations = if version >= 3 { d.i32()? } else { i32::MIN };
            d.tags()?;
            Ok(DescribedGroup {
                error_code,
                group_id,
                group_state,
                protocol_type,
                protocol_data,
                members,
                authorized_operations,
            })
        })?;
        d.tags()?;
        Ok(Self {
            throttle_time_ms,
            groups,
        })
    }
}

impl Request for DescribeGroupsRequest {
    type Response = DescribeGroupsResponse;
    const API_KEY: i16 = 15;
    const NAME: &'static str = "DescribeGroups";
    const MIN_VERSION: i16 = 2;
    const MAX_VERSION: i16 = 5;
    const FIRST_FLEXIBLE: i16 = 5;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn request_rt(gs in proptest::collection::vec(s(), 0..3), inc: bool) {
            request_round_trip(&DescribeGroupsRequest { groups: gs, include_authorized_operations: inc })?;
        }
        #[test]
        fn response_rt(t: i32, c: i16, g in s(), st in s(), m in s(), i in ns(), a in proptest::collection::vec(any::<u8>(), 0..16), ops: i32) {
            response_round_trip::<DescribeGroupsRequest>(&DescribeGroupsResponse {
                throttle_time_ms: t,
                groups: vec![DescribedGroup {
                    error_code: ErrorCode(c),
                    group_id: g.clone(),
                    group_state: st.clone(),
                    protocol_type: "consumer".into(),
                    protocol_data: "range".into(),
                    members: vec![DescribedMember {
                        member_id: m,
                        group_instance_id: i,
                        client_id: g,
                        client_host: st,
                        member_metadata: Bytes::new(),
                        member_assignment: Bytes::from(a),
                    }],
                    authorized_operations: ops,
                }],
            })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<DescribeGroupsRequest>(&b);
        }
    }
}
