//! FindCoordinator (key 10) v1-v6: which broker coordinates a group (or transaction).

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// Key type: a consumer group.
pub const KEY_TYPE_GROUP: i8 = 0;
/// Key type: a transactional id.
pub const KEY_TYPE_TRANSACTION: i8 = 1;

/// FindCoordinator request. Below v4 only the first key is sent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FindCoordinatorRequest {
    /// 0 group, 1 transaction.
    pub key_type: i8,
    /// The group ids (v4+ sends all; v1-3 the first).
    pub keys: Vec<String>,
}

/// One coordinator in the response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Coordinator {
    /// The key (group id); empty below v4.
    pub key: String,
    /// Broker id.
    pub node_id: i32,
    /// Broker host.
    pub host: String,
    /// Broker port.
    pub port: i32,
    /// Error for this key.
    pub error_code: ErrorCode,
    /// Error message.
    pub error_message: Option<String>,
}

/// FindCoordinator response (below v4 the single top-level answer becomes one entry).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FindCoordinatorResponse {
    /// Throttle time.
    pub throttle_time_ms: i32,
    /// One entry per key.
    pub coordinators: Vec<Coordinator>,
}

impl Message for FindCoordinatorRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        if version < 4 {
            e.string(self.keys.first().map(String::as_str).unwrap_or(""));
            e.i8(self.key_type);
        } else {
            e.i8(self.key_type);
            e.array(&self.keys, |e, k| e.string(k));
        }
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let r = if version < 4 {
            let key = d.string()?;
            Self {
                key_type: d.i8()?,
                keys: vec![key],
            }
        } else {
            let key_type = d.i8()?;
            Self {
                key_type,
                keys: d.array(Decoder::string)?,
            }
        };
        d.tags()?;
        Ok(r)
    }
}

impl Message for FindCoordinatorResponse {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.i32(self.throttle_time_ms);
        if version < 4 {
            let empty = Coordinator::default();
            let c = self.coordinators.first().unwrap_or(&empty);
            e.i16(c.error_code.0);
            e.nstring(c.error_message.as_deref());
            e.i32(c.node_id);
            e.string(&c.host);
            e.i32(c.port);
        } else {
            e.array(&self.coordinators, |e, c| {
                e.string(&c.key);
                e.i32(c.node_id);
                e.string(&c.host);
                e.i32(c.port);
                e.i16(c.error_code.0);
                e.nstring(c.error_message.as_deref());
                e.tags();
            });
        }
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let throttle_time_ms = d.i32()?;
        let coordinators = if version < 4 {
            let error_code = ErrorCode(d.i16()?);
            let error_message = d.nstring()?;
            vec![Coordinator {
                key: String::new(),
                error_code,
                error_message,
                node_id: d.i32()?,
                host: d.string()?,
                port: d.i32()?,
            }]
        } else {
            d.array(|d| {
                let c = Coordinator {
                    key: d.string()?,
                    node_id: d.i32()?,
                    host: d.string()?,
                    port: d.i32()?,
                    error_code: ErrorCode(d.i16()?),
                    error_message: d.nstring()?,
                };
                d.tags()?;
                Ok(c)
            })?
        };
        d.tags()?;
        Ok(Self {
            throttle_time_ms,
            coordinators,
        })
    }
}

impl Request for FindCoordinatorRequest {
    type Response = FindCoordinatorResponse;
    const API_KEY: i16 = 10;
    const NAME: &'static str = "FindCoordinator";
    const MIN_VERSION: i16 = 1;
    const MAX_VERSION: i16 = 6;
    const FIRST_FLEXIBLE: i16 = 3;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    fn coord() -> impl Strategy<Value = Coordinator> {
        (s(), any::<i32>(), s(), any::<i32>(), any::<i16>(), ns()).prop_map(
            |(key, node_id, host, port, c, error_message)| Coordinator {
                key,
                node_id,
                host,
                port,
                error_code: ErrorCode(c),
                error_message,
            },
        )
    }

    proptest! {
        #[test]
        fn request_rt(key_type: i8, keys in v(s())) {
            request_round_trip(&FindCoordinatorRequest { key_type, keys })?;
        }
        #[test]
        fn response_rt(t: i32, cs in v(coord())) {
            response_round_trip::<FindCoordinatorRequest>(&FindCoordinatorResponse { throttle_time_ms: t, coordinators: cs })?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<FindCoordinatorRequest>(&b);
        }
    }
}
