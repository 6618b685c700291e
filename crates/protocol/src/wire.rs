//! The adapter to rskafka's `Messenger`: wraps our [`Request`] bodies in rskafka's `RequestBody` traits.
//!
//! This and the `connection` module are the only modules that name rskafka types. The request body is encoded
//! by us before it is handed over (so encode errors are ours), and the response buffer is taken out of
//! rskafka's cursor without copying and decoded by our [`Decoder`].

use std::io::Cursor;
use std::marker::PhantomData;

use bytes::Bytes;
use rskafka::protocol::api_key::ApiKey;
use rskafka::protocol::api_version::{ApiVersion, ApiVersionRange};
use rskafka::protocol::messages::{
    ReadVersionedError, ReadVersionedType, RequestBody, WriteVersionedError, WriteVersionedType,
};
use rskafka::protocol::primitives::Int16;
use rskafka::protocol::traits::WriteError;

use crate::codec::DecodeError;
use crate::messages::{Request, decode_response};

/// Maps a Kafka API key to rskafka's enum exactly as rskafka's `From<Int16>` does, so the broker's
/// advertised ranges (keyed by that enum) are found for our requests.
const fn api_key(k: i16) -> ApiKey {
    match k {
        0 => ApiKey::Produce,
        1 => ApiKey::Fetch,
        2 => ApiKey::ListOffsets,
        3 => ApiKey::Metadata,
        8 => ApiKey::OffsetCommit,
        9 => ApiKey::OffsetFetch,
        10 => ApiKey::FindCoordinator,
        11 => ApiKey::JoinGroup,
        12 => ApiKey::Heartbeat,
        13 => ApiKey::LeaveGroup,
        14 => ApiKey::SyncGroup,
        15 => ApiKey::DescribeGroups,
        16 => ApiKey::ListGroups,
        17 => ApiKey::SaslHandshake,
        18 => ApiKey::ApiVersions,
        19 => ApiKey::CreateTopics,
        20 => ApiKey::DeleteTopics,
        22 => ApiKey::InitProducerId,
        24 => ApiKey::AddPartitionsToTxn,
        25 => ApiKey::AddOffsetsToTxn,
        26 => ApiKey::EndTxn,
        28 => ApiKey::TxnOffsetCommit,
        32 => ApiKey::DescribeConfigs,
        36 => ApiKey::SaslAuthenticate,
        other => ApiKey::Unknown(Int16(other)),
    }
}

/// The rskafka key for an API key number (for version-range maps).
pub(crate) fn rs_api_key(k: i16) -> ApiKey {
    ApiKey::from(Int16(k))
}

/// An rskafka range from our numbers; `None` if `min > max`.
pub(crate) fn rs_range(min: i16, max: i16) -> Option<ApiVersionRange> {
    (min <= max).then(|| ApiVersionRange::new(ApiVersion(Int16(min)), ApiVersion(Int16(max))))
}

/// Picks the version rskafka's messenger will pick: `min(our max, broker max)` if the ranges overlap.
pub(crate) fn pick_version(ours: (i16, i16), broker: (i16, i16)) -> Option<i16> {
    (ours.0 <= broker.1 && broker.0 <= ours.1).then(|| ours.1.min(broker.1))
}

/// A request body already encoded at `version`.
pub(crate) struct WireRequest<R> {
    body: Vec<u8>,
    version: i16,
    _r: PhantomData<fn() -> R>,
}

impl<R> WireRequest<R> {
    pub(crate) fn new(body: Vec<u8>, version: i16) -> Self {
        Self {
            body,
            version,
            _r: PhantomData,
        }
    }
}

/// A response as our decoder saw it: a decode error is carried, not raised, so rskafka does not
/// turn it into a connection-level error.
pub(crate) struct WireResponse<R: Request>(pub(crate) Result<R::Response, DecodeError>);

impl<R: Request> RequestBody for WireRequest<R> {
    type ResponseBody = WireResponse<R>;
    const API_KEY: ApiKey = api_key(R::API_KEY);
    const API_VERSION_RANGE: ApiVersionRange = ApiVersionRange::new(
        ApiVersion(Int16(R::MIN_VERSION)),
        ApiVersion(Int16(R::MAX_VERSION)),
    );
    const FIRST_TAGGED_FIELD_IN_REQUEST_VERSION: ApiVersion = ApiVersion(Int16(R::FIRST_FLEXIBLE));
    const FIRST_TAGGED_FIELD_IN_RESPONSE_VERSION: ApiVersion =
        ApiVersion(Int16(R::FIRST_FLEXIBLE_RESPONSE_HEADER));
}

impl<R: Request> WriteVersionedType<Vec<u8>> for WireRequest<R> {
    fn write_versioned(
        &self,
        writer: &mut Vec<u8>,
        version: ApiVersion,
    ) -> Result<(), WriteVersionedError> {
        if version.0.0 != self.version {
            // Our version choice and the messenger's disagree; never send a body of the wrong version.
            return Err(WriteVersionedError::WriteError(WriteError::Malformed(
                format!(
                    "{} encoded at v{} but the messenger chose v{}",
                    R::NAME,
                    self.version,
                    version.0.0
                )
                .into(),
            )));
        }
        writer.extend_from_slice(&self.body);
        Ok(())
    }
}

impl<R: Request> ReadVersionedType<Cursor<Vec<u8>>> for WireResponse<R> {
    fn read_versioned(
        reader: &mut Cursor<Vec<u8>>,
        version: ApiVersion,
    ) -> Result<Self, ReadVersionedError> {
        // Take the buffer (no copy) and leave an empty cursor at position 0, so rskafka's
        // "did you read everything" check passes; we do our own check below.
        let pos = usize::try_from(reader.position()).unwrap_or(usize::MAX);
        let buf = std::mem::take(reader.get_mut());
        reader.set_position(0);
        let mut bytes = Bytes::from(buf);
        if pos > bytes.len() {
            return Ok(WireResponse(Err(DecodeError::invalid(
                "response",
                "header longer than message",
            ))));
        }
        let body = bytes.split_off(pos);
        Ok(WireResponse(decode_response::<R>(body, version.0.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::*;

    /// Every request type's key maps to rskafka's enum as rskafka itself maps it: the messenger
    /// finds the broker's advertised range by that enum, and a key mapped differently is refused
    /// at send time with "no matching version".
    #[test]
    fn every_request_key_maps_like_rskafka() {
        let keys = [
            add_offsets_to_txn::AddOffsetsToTxnRequest::API_KEY,
            add_partitions_to_txn::AddPartitionsToTxnRequest::API_KEY,
            api_versions::ApiVersionsRequest::API_KEY,
            consumer_group_heartbeat::ConsumerGroupHeartbeatRequest::API_KEY,
            create_topics::CreateTopicsRequest::API_KEY,
            describe_configs::DescribeConfigsRequest::API_KEY,
            describe_groups::DescribeGroupsRequest::API_KEY,
            end_txn::EndTxnRequest::API_KEY,
            fetch::FetchRequest::API_KEY,
            find_coordinator::FindCoordinatorRequest::API_KEY,
            heartbeat::HeartbeatRequest::API_KEY,
            init_producer_id::InitProducerIdRequest::API_KEY,
            join_group::JoinGroupRequest::API_KEY,
            leave_group::LeaveGroupRequest::API_KEY,
            list_offsets::ListOffsetsRequest::API_KEY,
            metadata::MetadataRequest::API_KEY,
            offset_commit::OffsetCommitRequest::API_KEY,
            offset_fetch::OffsetFetchRequest::API_KEY,
            produce::ProduceRequest::API_KEY,
            sync_group::SyncGroupRequest::API_KEY,
            txn_offset_commit::TxnOffsetCommitRequest::API_KEY,
        ];
        for k in keys {
            assert_eq!(api_key(k), rs_api_key(k), "API key {k}");
        }
    }
}
