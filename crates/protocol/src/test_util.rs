//! Rewriting a broker's answers in tests (feature `test-util`): a proxy between client and
//! broker (`orderly_testkit::proxy::KafkaProxy::rewrite_responses`) hands each response frame,
//! after its correlation id, to a function that may return another.

use bytes::Bytes;

use crate::codec::Decoder;
use crate::error::ErrorCode;
use crate::messages::produce::ProduceResponse;
use crate::messages::{Request, decode_response, encode_response};

/// Rewrites `frame`, a response to an `R` request at `version` as it follows the correlation id
/// (the response header's tagged fields first where `version` has them): decodes the body, lets
/// `edit` change it and encodes it again behind the same header. `None`, the frame left as it
/// is, where `edit` returns `false` or the body does not decode.
pub fn rewrite_response<R: Request>(
    version: i16,
    frame: &[u8],
    edit: impl FnOnce(&mut R::Response) -> bool,
) -> Option<Vec<u8>> {
    let header_len = if version >= R::FIRST_FLEXIBLE_RESPONSE_HEADER {
        let mut d = Decoder::new(Bytes::copy_from_slice(frame), true);
        d.tags().ok()?;
        frame.len() - d.remaining()
    } else {
        0
    };
    let (header, body) = frame.split_at(header_len);
    let mut resp = decode_response::<R>(Bytes::copy_from_slice(body), version).ok()?;
    if !edit(&mut resp) {
        return None;
    }
    let mut out = header.to_vec();
    out.extend(encode_response::<R>(&resp, version).ok()?);
    Some(out)
}

/// Answers every partition of a Produce response with `code` and no offset (-1): a refusal,
/// whatever the broker did with the batches.
pub fn refuse_every_partition(resp: &mut ProduceResponse, code: ErrorCode) {
    for p in resp
        .responses
        .iter_mut()
        .flat_map(|t| t.partitions.iter_mut())
    {
        p.error_code = code;
        p.base_offset = -1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::api_versions::{ApiVersionsRequest, ApiVersionsResponse};
    use crate::messages::produce::{
        ProducePartitionResponse, ProduceRequest, ProduceTopicResponse,
    };

    fn written() -> ProduceResponse {
        ProduceResponse {
            responses: vec![ProduceTopicResponse {
                name: "t".into(),
                partitions: vec![ProducePartitionResponse {
                    index: 0,
                    base_offset: 42,
                    ..Default::default()
                }],
            }],
            throttle_time_ms: 0,
        }
    }

    /// A frame as the proxy sees it: the header's tagged fields (an empty section) where the
    /// version has them, then the body.
    fn framed<R: Request>(resp: &R::Response, version: i16) -> Vec<u8> {
        let mut out = if version >= R::FIRST_FLEXIBLE_RESPONSE_HEADER {
            vec![0]
        } else {
            vec![]
        };
        out.extend(encode_response::<R>(resp, version).unwrap());
        out
    }

    /// A Produce answer refused at every version orderly speaks, its header kept.
    #[test]
    fn a_refused_produce_answer_keeps_its_header_and_says_refused() {
        for version in ProduceRequest::MIN_VERSION..=ProduceRequest::MAX_VERSION {
            let frame = framed::<ProduceRequest>(&written(), version);
            let out = rewrite_response::<ProduceRequest>(version, &frame, |r| {
                refuse_every_partition(r, ErrorCode::INVALID_RECORD);
                true
            })
            .unwrap();
            let mut want = written();
            want.responses[0].partitions[0].error_code = ErrorCode::INVALID_RECORD;
            want.responses[0].partitions[0].base_offset = -1;
            assert_eq!(out, framed::<ProduceRequest>(&want, version), "v{version}");
        }
    }

    /// An edit that declines, or a body that does not decode, leaves the frame alone; so does a
    /// header that is not there (ApiVersions never has one).
    #[test]
    fn a_declined_edit_or_an_unreadable_frame_is_left_alone() {
        let frame = framed::<ProduceRequest>(&written(), 9);
        assert_eq!(
            rewrite_response::<ProduceRequest>(9, &frame, |_| false),
            None
        );
        assert_eq!(
            rewrite_response::<ProduceRequest>(9, &frame[..frame.len() - 1], |_| true),
            None
        );
        let versions = ApiVersionsResponse::default();
        let frame = framed::<ApiVersionsRequest>(&versions, 3);
        assert_eq!(
            rewrite_response::<ApiVersionsRequest>(3, &frame, |_| true),
            Some(frame)
        );
    }
}
