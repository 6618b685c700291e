//! ApiVersions (key 18) v0-v3: which versions of each API the broker speaks.

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::ErrorCode;
use crate::messages::{Message, Request};

/// ApiVersions request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiVersionsRequest {
    /// Client software name (v3+), `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`.
    pub client_software_name: String,
    /// Client software version (v3+), same pattern.
    pub client_software_version: String,
}

/// One API's version range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiVersionRange {
    /// API key.
    pub api_key: i16,
    /// Lowest version.
    pub min_version: i16,
    /// Highest version.
    pub max_version: i16,
}

/// ApiVersions response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiVersionsResponse {
    /// Error code.
    pub error_code: ErrorCode,
    /// Supported ranges.
    pub api_keys: Vec<ApiVersionRange>,
    /// Throttle time (v1+).
    pub throttle_time_ms: i32,
}

impl Message for ApiVersionsRequest {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        if version >= 3 {
            e.string(&self.client_software_name);
            e.string(&self.client_software_version);
            e.tags();
        }
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let mut r = Self::default();
        if version >= 3 {
            r.client_software_name = d.string()?;
            r.client_software_version = d.string()?;
            d.tags()?;
        }
        Ok(r)
    }
}

impl Message for ApiVersionsResponse {
    fn encode(&self, e: &mut Encoder<'_>, version: i16) {
        e.i16(self.error_code.0);
        e.array(&self.api_keys, |e, k| {
            e.i16(k.api_key);
            e.i16(k.min_version);
            e.i16(k.max_version);
            e.tags();
        });
        if version >= 1 {
            e.i32(self.throttle_time_ms);
        }
        e.tags();
    }
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {
        let error_code = ErrorCode(d.i16()?);
        let api_keys = d.array(|d| {
            let k = ApiVersionRange {
                api_key: d.i16()?,
                min_version: d.i16()?,
                max_version: d.i16()?,
            };
            d.tags()?;
            Ok(k)
        })?;
        let throttle_time_ms = if version >= 1 { d.i32()? } else { 0 };
        d.tags()?;
        Ok(Self {
            error_code,
            api_keys,
            throttle_time_ms,
        })
    }
}

impl Request for ApiVersionsRequest {
    type Response = ApiVersionsResponse;
    const API_KEY: i16 = 18;
    const NAME: &'static str = "ApiVersions";
    const MIN_VERSION: i16 = 0;
    const MAX_VERSION: i16 = 3;
    const FIRST_FLEXIBLE: i16 = 3;
    // KIP-511: the ApiVersions response header is always v0, even for flexible bodies.
    const FIRST_FLEXIBLE_RESPONSE_HEADER: i16 = i16::MAX;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn request_rt(a in s(), b in s()) {
            request_round_trip(&ApiVersionsRequest { client_software_name: a, client_software_version: b })?;
        }
        #[test]
        fn response_rt(code: i16, keys in v((any::<i16>(), any::<i16>(), any::<i16>())), t: i32) {
            let r = ApiVersionsResponse {
                error_code: ErrorCode(code),
                api_keys: keys.into_iter().map(|(a, b, c)| ApiVersionRange { api_key: a, min_version: b, max_version: c }).collect(),
                throttle_time_ms: t,
            };
            response_round_trip::<ApiVersionsRequest>(&r)?;
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            never_panics::<ApiVersionsRequest>(&b);
        }
    }
}
