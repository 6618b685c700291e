//! Fuzz target: consumer-protocol Subscription and Assignment decoders.
#![no_main]
use libfuzzer_sys::fuzz_target;
use orderly_protocol::consumer_protocol::{Assignment, Subscription};

fuzz_target!(|data: &[u8]| {
    let _ = Subscription::decode(bytes::Bytes::copy_from_slice(data));
    let _ = Assignment::decode(bytes::Bytes::copy_from_slice(data));
});
