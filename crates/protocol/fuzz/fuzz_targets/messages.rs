//! Fuzz target: every request and response decoder at every supported version (first byte picks the API).
#![no_main]
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use orderly_protocol::messages::*;

fn both<R: Request>(b: &[u8]) {
    for v in R::MIN_VERSION..=R::MAX_VERSION {
        let _ = decode_request::<R>(Bytes::copy_from_slice(b), v);
        let _ = decode_response::<R>(Bytes::copy_from_slice(b), v);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((sel, rest)) = data.split_first() else { return };
    match sel % 14 {
        0 => both::<api_versions::ApiVersionsRequest>(rest),
        1 => both::<find_coordinator::FindCoordinatorRequest>(rest),
        2 => both::<join_group::JoinGroupRequest>(rest),
        3 => both::<sync_group::SyncGroupRequest>(rest),
        4 => both::<heartbeat::HeartbeatRequest>(rest),
        5 => both::<leave_group::LeaveGroupRequest>(rest),
        6 => both::<offset_commit::OffsetCommitRequest>(rest),
        7 => both::<offset_fetch::OffsetFetchRequest>(rest),
        8 => both::<consumer_group_heartbeat::ConsumerGroupHeartbeatRequest>(rest),
        9 => both::<metadata::MetadataRequest>(rest),
        10 => both::<list_offsets::ListOffsetsRequest>(rest),
        11 => both::<create_topics::CreateTopicsRequest>(rest),
        12 => both::<fetch::FetchRequest>(rest),
        _ => both::<produce::ProduceRequest>(rest),
    }
});
