//! Record-batch compression codecs in pure Rust: gzip (flate2/miniz_oxide), snappy (raw and xerial
//! framing, via `snap`), lz4 frames (`lz4_flex`) and zstd (`ruzstd`). Decompression is bounded.

use std::io::{Read, Write};

use crate::error::BatchError;

/// A batch's compression codec (attribute bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// No compression.
    #[default]
    None,
    /// gzip.
    Gzip,
    /// snappy (xerial framing on write, as Java does).
    Snappy,
    /// LZ4 frame.
    Lz4,
    /// zstd.
    Zstd,
}

impl Compression {
    /// The codec for attribute bits 0-2.
    pub fn from_attributes(attributes: i16) -> Result<Self, BatchError> {
        match attributes & 0x7 {
            0 => Ok(Self::None),
            1 => Ok(Self::Gzip),
            2 => Ok(Self::Snappy),
            3 => Ok(Self::Lz4),
            4 => Ok(Self::Zstd),
            other => Err(BatchError::UnknownCompression(other as u8)),
        }
    }

    /// Attribute bits 0-2 for this codec.
    pub fn attribute_bits(self) -> i16 {
        match self {
            Self::None => 0,
            Self::Gzip => 1,
            Self::Snappy => 2,
            Self::Lz4 => 3,
            Self::Zstd => 4,
        }
    }

    /// The name Kafka uses (`compression.type`).
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }
}

const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";

fn err(codec: &'static str, e: impl std::fmt::Display) -> BatchError {
    BatchError::Decompress {
        codec,
        detail: e.to_string(),
    }
}

fn read_bounded(codec: &'static str, r: impl Read, limit: usize) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    r.take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| err(codec, e))?;
    if out.len() > limit {
        return Err(BatchError::TooLarge { limit });
    }
    Ok(out)
}

fn snappy_raw(block: &[u8], limit: usize, out: &mut Vec<u8>) -> Result<(), BatchError> {
    let len = snap::raw::decompress_len(block).map_err(|e| err("snappy", e))?;
    if out.len() + len > limit {
        return Err(BatchError::TooLarge { limit });
    }
    let start = out.len();
    out.resize(start + len, 0);
    let n = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| err("snappy", e))?;
    out.truncate(start + n);
    Ok(())
}

/// Decompresses `data`; the result may not exceed `limit` bytes.
pub fn decompress(codec: Compression, data: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
    match codec {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => read_bounded("gzip", flate2::read::MultiGzDecoder::new(data), limit),
        Compression::Lz4 => read_bounded("lz4", lz4_flex::frame::FrameDecoder::new(data), limit),
        Compression::Zstd => {
            let dec = ruzstd::decoding::StreamingDecoder::new(data).map_err(|e| err("zstd", e))?;
            read_bounded("zstd", dec, limit)
        }
        Compression::Snappy => {
            let mut out = Vec::new();
            if data.starts_with(XERIAL_MAGIC) && data.len() >= 16 {
                // xerial framing: magic(8) version(4) compatible(4), then [int32 len][raw block]*.
                let mut rest = &data[16..];
                while !rest.is_empty() {
                    let Some((len, tail)) = rest.split_first_chunk::<4>() else {
                        return Err(err("snappy", "truncated xerial block length"));
                    };
                    let len = usize::try_from(u32::from_be_bytes(*len)).unwrap_or(usize::MAX);
                    if tail.len() < len {
                        return Err(err("snappy", "truncated xerial block"));
                    }
                    snappy_raw(&tail[..len], limit, &mut out)?;
                    rest = &tail[len..];
                }
            } else {
                snappy_raw(data, limit, &mut out)?;
            }
            Ok(out)
        }
    }
}

/// Compresses `data` the way the Java producer does (snappy in xerial framing, lz4 frames with
/// independent blocks, gzip, zstd).
pub fn compress(codec: Compression, data: &[u8]) -> Result<Vec<u8>, std::io::Error> {
    match codec {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(data)?;
            e.finish()
        }
        Compression::Lz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(data)?;
            e.finish().map_err(std::io::Error::other)
        }
        Compression::Zstd => Ok(ruzstd::encoding::compress_to_vec(
            data,
            ruzstd::encoding::CompressionLevel::Fastest,
        )),
        Compression::Snappy => {
            let mut out = Vec::with_capacity(data.len() / 2 + 32);
            out.extend_from_slice(XERIAL_MAGIC);
            out.extend_from_slice(&1i32.to_be_bytes());
            out.extend_from_slice(&1i32.to_be_bytes());
            let mut enc = snap::raw::Encoder::new();
            // Java's SnappyOutputStream uses 32 KiB blocks.
            for chunk in data.chunks(32 * 1024) {
                let block = enc.compress_vec(chunk).map_err(std::io::Error::other)?;
                let len = u32::try_from(block.len()).map_err(std::io::Error::other)?;
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&block);
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn codecs_round_trip(data in proptest::collection::vec(any::<u8>(), 0..5000), c in 0usize..5) {
            let codec = [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd][c];
            let packed = compress(codec, &data).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let back = decompress(codec, &packed, 1 << 20).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back, data);
        }

        #[test]
        fn decompress_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256), c in 0usize..5) {
            let codec = [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd][c];
            let _ = decompress(codec, &data, 1 << 16);
            let mut framed = XERIAL_MAGIC.to_vec();
            framed.extend_from_slice(&data);
            let _ = decompress(Compression::Snappy, &framed, 1 << 16);
        }
    }

    #[test]
    fn raw_snappy_is_accepted() {
        let data = b"hello hello hello hello".repeat(10);
        let raw = snap::raw::Encoder::new()
            .compress_vec(&data)
            .unwrap_or_default();
        assert_eq!(
            decompress(Compression::Snappy, &raw, 1 << 20).ok(),
            Some(data)
        );
    }

    #[test]
    fn limit_is_enforced() {
        let data = vec![0u8; 100_000];
        let packed = compress(Compression::Gzip, &data).unwrap_or_default();
        assert_eq!(
            decompress(Compression::Gzip, &packed, 1000),
            Err(BatchError::TooLarge { limit: 1000 })
        );
    }
}
