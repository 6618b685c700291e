//! Fuzz target: the record-batch v2 decoder, with and without CRC checks, both isolation levels.
#![no_main]
use libfuzzer_sys::fuzz_target;
use orderly_protocol::records::{AbortedTransaction, DecodeOptions, IsolationLevel, decode_records};

fuzz_target!(|data: &[u8]| {
    let aborted = [AbortedTransaction { producer_id: 1, first_offset: 0 }];
    for (iso, crc) in [(IsolationLevel::ReadCommitted, false), (IsolationLevel::ReadUncommitted, true)] {
        let _ = decode_records(bytes::Bytes::copy_from_slice(data), 0, iso, &aborted, &DecodeOptions { check_crc: crc, max_decompressed: 1 << 20, copy_records: crc });
    }
});
