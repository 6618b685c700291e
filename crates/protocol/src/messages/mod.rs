//! Kafka request and response bodies, one file per API, each with the version range orderly speaks.
//!
//! Every body implements [`Message`] (encode and decode at a given version, requests *and* responses,
//! so both directions can be property-tested) and every request implements [`Request`], which names
//! its API key, version range and first flexible version. The connection layer picks
//! `min(our max, broker max)` and refuses to talk below our minimum. Each range starts at the
//! version Apache Kafka [`OLDEST_KAFKA`] served (an API newer than that names its own release in
//! [`Request::SINCE`]); fields a version lacks are left out on the wire and read as their
//! documented defaults.

use bytes::Bytes;

use crate::codec::{DecodeError, Decoder, EncodeError, Encoder};

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod api_versions;
pub mod consumer_group_heartbeat;
pub mod create_topics;
pub mod describe_configs;
pub mod describe_groups;
pub mod end_txn;
pub mod fetch;
pub mod find_coordinator;
pub mod heartbeat;
pub mod init_producer_id;
pub mod join_group;
pub mod leave_group;
pub mod list_offsets;
pub mod metadata;
pub mod offset_commit;
pub mod offset_fetch;
pub mod produce;
pub mod sync_group;
pub mod txn_offset_commit;

/// A body that can be written and read at a given API version.
pub trait Message: Sized {
    /// Writes the body at `version` (the encoder already knows whether the version is flexible).
    fn encode(&self, e: &mut Encoder<'_>, version: i16);
    /// Reads the body at `version`.
    fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError>;
}

/// A request body: its API, the versions orderly speaks, and its response type.
pub trait Request: Message + Send + Sync + 'static {
    /// The response body.
    type Response: Message + Send + 'static;
    /// Kafka API key.
    const API_KEY: i16;
    /// API name for errors and logs.
    const NAME: &'static str;
    /// Lowest version we speak.
    const MIN_VERSION: i16;
    /// Highest version we speak.
    const MAX_VERSION: i16;
    /// First flexible (KIP-482) version of the body.
    const FIRST_FLEXIBLE: i16;
    /// First version whose *response header* has tagged fields (ApiVersions never has: KIP-511).
    const FIRST_FLEXIBLE_RESPONSE_HEADER: i16 = Self::FIRST_FLEXIBLE;
    /// The oldest Apache Kafka release that serves [`Request::MIN_VERSION`].
    const SINCE: &'static str = OLDEST_KAFKA;
}

/// The oldest Apache Kafka release orderly supports: every API it needs, at the version that
/// release had, is the low end of that API's range (as for the Java client 4.x, KIP-896).
pub const OLDEST_KAFKA: &str = "2.1";

/// Encodes a request body at `version`, flexible per `R::FIRST_FLEXIBLE`.
pub fn encode_request<R: Request>(req: &R, version: i16) -> Result<Vec<u8>, EncodeError> {
    let mut buf = Vec::new();
    let mut e = Encoder::new(&mut buf, version >= R::FIRST_FLEXIBLE);
    req.encode(&mut e, version);
    e.finish()?;
    Ok(buf)
}

/// Decodes a whole request body (used by tests and fuzzers; brokers are the usual readers).
pub fn decode_request<R: Request>(buf: Bytes, version: i16) -> Result<R, DecodeError> {
    let mut d = Decoder::new(buf, version >= R::FIRST_FLEXIBLE);
    let r = R::decode(&mut d, version)?;
    d.finish(R::NAME)?;
    Ok(r)
}

/// Encodes a response body of `R` at `version`.
pub fn encode_response<R: Request>(
    resp: &R::Response,
    version: i16,
) -> Result<Vec<u8>, EncodeError> {
    let mut buf = Vec::new();
    let mut e = Encoder::new(&mut buf, version >= R::FIRST_FLEXIBLE);
    resp.encode(&mut e, version);
    e.finish()?;
    Ok(buf)
}

/// Decodes a whole response body of `R` at `version`; trailing bytes are an error.
pub fn decode_response<R: Request>(buf: Bytes, version: i16) -> Result<R::Response, DecodeError> {
    let mut d = Decoder::new(buf, version >= R::FIRST_FLEXIBLE);
    let r = R::Response::decode(&mut d, version)?;
    d.finish(R::NAME)?;
    Ok(r)
}

/// Reads an optional struct marked by an `INT8` (-1 = null, 1 = present), as Kafka's generator writes
/// nullable struct fields.
pub(crate) fn decode_nullable_struct<T>(
    d: &mut Decoder,
    f: impl FnOnce(&mut Decoder) -> Result<T, DecodeError>,
) -> Result<Option<T>, DecodeError> {
    match d.i8()? {
        -1 => Ok(None),
        1 => f(d).map(Some),
        other => Err(DecodeError::invalid(
            "nullable struct marker",
            format!("{other}"),
        )),
    }
}

/// Writes an optional struct with the `INT8` presence marker.
pub(crate) fn encode_nullable_struct<T>(
    e: &mut Encoder<'_>,
    v: Option<&T>,
    f: impl FnOnce(&mut Encoder<'_>, &T),
) {
    match v {
        None => e.i8(-1),
        Some(v) => {
            e.i8(1);
            f(e, v);
        }
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Strategies and the round-trip property shared by the message tests.
    use super::*;
    use proptest::prelude::*;

    pub fn s() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9._-]{0,12}"
    }
    pub fn ns() -> impl Strategy<Value = Option<String>> {
        proptest::option::of(s())
    }
    pub fn by() -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
    }
    pub fn nby() -> impl Strategy<Value = Option<Bytes>> {
        proptest::option::of(by())
    }
    pub fn v<T: std::fmt::Debug>(st: impl Strategy<Value = T>) -> impl Strategy<Value = Vec<T>> {
        proptest::collection::vec(st, 0..4)
    }

    /// At every version: encode, decode, re-encode gives identical bytes; at the highest version the
    /// decoded value equals the original (every field exists there).
    pub fn request_round_trip<R>(req: &R) -> Result<(), TestCaseError>
    where
        R: Request + PartialEq + std::fmt::Debug,
    {
        for version in R::MIN_VERSION..=R::MAX_VERSION {
            let b1 =
                encode_request(req, version).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back: R = decode_request(Bytes::from(b1.clone()), version)
                .map_err(|e| TestCaseError::fail(format!("v{version}: {e}")))?;
            let b2 =
                encode_request(&back, version).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&b1, &b2, "v{}", version);
            if version == R::MAX_VERSION {
                prop_assert_eq!(&back, req);
            }
        }
        Ok(())
    }

    /// Same property for the response type of `R`.
    pub fn response_round_trip<R>(resp: &R::Response) -> Result<(), TestCaseError>
    where
        R: Request,
        R::Response: PartialEq + std::fmt::Debug,
    {
        for version in R::MIN_VERSION..=R::MAX_VERSION {
            let b1 = encode_response::<R>(resp, version)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back = decode_response::<R>(Bytes::from(b1.clone()), version)
                .map_err(|e| TestCaseError::fail(format!("v{version}: {e}")))?;
            let b2 = encode_response::<R>(&back, version)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&b1, &b2, "v{}", version);
            if version == R::MAX_VERSION {
                prop_assert_eq!(&back, resp);
            }
        }
        Ok(())
    }

    /// Decoding arbitrary bytes at every version returns (Ok or Err) without panicking.
    pub fn never_panics<R: Request>(bytes: &[u8]) {
        for version in R::MIN_VERSION..=R::MAX_VERSION {
            let _ = decode_request::<R>(Bytes::copy_from_slice(bytes), version);
            let _ = decode_response::<R>(Bytes::copy_from_slice(bytes), version);
        }
    }
}
