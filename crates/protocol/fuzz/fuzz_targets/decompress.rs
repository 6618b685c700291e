//! Fuzz target: every decompression codec (gzip, snappy raw and xerial, lz4 frame, zstd), bounded.
#![no_main]
use libfuzzer_sys::fuzz_target;
use orderly_protocol::records::compression::{Compression, decompress};

fuzz_target!(|data: &[u8]| {
    for c in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
        let _ = decompress(c, data, 1 << 20);
    }
});
