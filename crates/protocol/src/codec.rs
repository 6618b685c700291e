//! Kafka primitive types: an [`Encoder`] and a [`Decoder`] that know the classic and the flexible (KIP-482) forms.
//!
//! Both carry a `flexible` flag, so a message body writes each field once (`e.string(..)`) and the
//! codec picks `STRING` or `COMPACT_STRING`. The decoder works on [`Bytes`], so byte fields are
//! zero-copy slices of the response buffer, and it never panics: every read checks the remaining length.

use bytes::{Buf, BufMut, Bytes};

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended before the field did.
    #[error("unexpected end of input reading {what}: needed {needed} bytes, {remaining} left")]
    UnexpectedEof {
        /// The field being read.
        what: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// A value that the format does not allow (negative length, varint too long, bad UTF-8...).
    #[error("invalid {what}: {detail}")]
    Invalid {
        /// The field being read.
        what: &'static str,
        /// What was wrong.
        detail: String,
    },
}

impl DecodeError {
    pub(crate) fn invalid(what: &'static str, detail: impl Into<String>) -> Self {
        Self::Invalid {
            what,
            detail: detail.into(),
        }
    }
}

/// Why a value could not be encoded (a length that does not fit its wire type).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A length or count does not fit the wire type.
    #[error("{what} too long for the wire format: {len}")]
    TooLong {
        /// The field being written.
        what: &'static str,
        /// Its length.
        len: usize,
    },
    /// A value that cannot be represented in the negotiated version.
    #[error("{0}")]
    Unsupported(String),
}

/// `VARINT`'s zigzag mapping: small magnitudes, negative or not, to small unsigned values.
fn zigzag32(v: i32) -> u64 {
    u64::from(((v << 1) ^ (v >> 31)) as u32)
}

/// `VARLONG`'s zigzag mapping.
fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The bytes [`Encoder::uvarint`] writes for `v`.
pub fn uvarint_len(v: u64) -> usize {
    // One byte per started 7 bits, at least one.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// The bytes [`Encoder::varint`] writes for `v`.
pub fn varint_len(v: i32) -> usize {
    uvarint_len(zigzag32(v))
}

/// The bytes [`Encoder::varlong`] writes for `v`.
pub fn varlong_len(v: i64) -> usize {
    uvarint_len(zigzag64(v))
}

/// Writes Kafka primitives into a `Vec<u8>`; the first error is kept and returned by [`Encoder::finish`].
#[derive(Debug)]
pub struct Encoder<'a> {
    buf: &'a mut Vec<u8>,
    flexible: bool,
    error: Option<EncodeError>,
}

impl<'a> Encoder<'a> {
    /// An encoder appending to `buf`; `flexible` selects the compact (KIP-482) forms.
    pub fn new(buf: &'a mut Vec<u8>, flexible: bool) -> Self {
        Self {
            buf,
            flexible,
            error: None,
        }
    }

    /// Whether compact forms and tagged fields are written.
    pub fn flexible(&self) -> bool {
        self.flexible
    }

    /// The first error met while encoding, if any.
    pub fn finish(self) -> Result<(), EncodeError> {
        match self.error {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// Records an error (only the first one is kept).
    pub fn fail(&mut self, e: EncodeError) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    fn len_i32(&mut self, what: &'static str, len: usize) -> i32 {
        match i32::try_from(len) {
            Ok(v) => v,
            Err(_) => {
                self.fail(EncodeError::TooLong { what, len });
                0
            }
        }
    }

    /// Raw bytes without a length.
    pub fn raw(&mut self, b: &[u8]) {
        self.buf.put_slice(b);
    }
    /// `BOOLEAN`.
    pub fn bool(&mut self, v: bool) {
        self.buf.put_u8(u8::from(v));
    }
    /// `INT8`.
    pub fn i8(&mut self, v: i8) {
        self.buf.put_i8(v);
    }
    /// `INT16`.
    pub fn i16(&mut self, v: i16) {
        self.buf.put_i16(v);
    }
    /// `INT32`.
    pub fn i32(&mut self, v: i32) {
        self.buf.put_i32(v);
    }
    /// `INT64`.
    pub fn i64(&mut self, v: i64) {
        self.buf.put_i64(v);
    }
    /// `UUID` (16 raw bytes).
    pub fn uuid(&mut self, v: &[u8; 16]) {
        self.buf.put_slice(v);
    }
    /// `UNSIGNED_VARINT` (LEB128).
    pub fn uvarint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.put_u8(v as u8);
    }
    /// `VARINT` (zigzag).
    pub fn varint(&mut self, v: i32) {
        self.uvarint(zigzag32(v));
    }
    /// `VARLONG` (zigzag).
    pub fn varlong(&mut self, v: i64) {
        self.uvarint(zigzag64(v));
    }

    fn compact_len(&mut self, len: Option<usize>) {
        match len {
            None => self.uvarint(0),
            Some(n) => self.uvarint(n as u64 + 1),
        }
    }

    /// `STRING` / `COMPACT_STRING`.
    pub fn string(&mut self, s: &str) {
        self.nstring(Some(s));
    }
    /// `NULLABLE_STRING` / `COMPACT_NULLABLE_STRING`.
    pub fn nstring(&mut self, s: Option<&str>) {
        if self.flexible {
            self.compact_len(s.map(str::len));
        } else {
            match s {
                None => self.i16(-1),
                Some(s) => match i16::try_from(s.len()) {
                    Ok(n) => self.i16(n),
                    Err(_) => self.fail(EncodeError::TooLong {
                        what: "string",
                        len: s.len(),
                    }),
                },
            }
        }
        if let Some(s) = s {
            self.buf.put_slice(s.as_bytes());
        }
    }
    /// `BYTES` / `COMPACT_BYTES`.
    pub fn bytes(&mut self, b: &[u8]) {
        self.nbytes(Some(b));
    }
    /// `NULLABLE_BYTES` / `COMPACT_NULLABLE_BYTES`.
    pub fn nbytes(&mut self, b: Option<&[u8]>) {
        if self.flexible {
            self.compact_len(b.map(<[u8]>::len));
        } else {
            match b {
                None => self.i32(-1),
                Some(b) => {
                    let n = self.len_i32("bytes", b.len());
                    self.i32(n);
                }
            }
        }
        if let Some(b) = b {
            self.buf.put_slice(b);
        }
    }
    /// `ARRAY` / `COMPACT_ARRAY`.
    pub fn array<T>(&mut self, items: &[T], f: impl FnMut(&mut Self, &T)) {
        self.narray(Some(items), f);
    }
    /// Nullable `ARRAY` / `COMPACT_ARRAY` (null = -1 / 0).
    pub fn narray<T>(&mut self, items: Option<&[T]>, mut f: impl FnMut(&mut Self, &T)) {
        if self.flexible {
            self.compact_len(items.map(<[T]>::len));
        } else {
            match items {
                None => self.i32(-1),
                Some(items) => {
                    let n = self.len_i32("array", items.len());
                    self.i32(n);
                }
            }
        }
        for item in items.unwrap_or(&[]) {
            f(self, item);
        }
    }
    /// An empty tagged-field section (only in flexible versions).
    pub fn tags(&mut self) {
        if self.flexible {
            self.uvarint(0);
        }
    }
    /// A tagged-field section with the given `(tag, payload)` pairs, which must be in ascending tag order.
    pub fn tags_with(&mut self, fields: &[(u32, Vec<u8>)]) {
        if self.flexible {
            self.uvarint(fields.len() as u64);
            for (tag, payload) in fields {
                self.uvarint(u64::from(*tag));
                self.uvarint(payload.len() as u64);
                self.buf.put_slice(payload);
            }
        }
    }
    /// Encodes `f` into a separate buffer (same flexibility), e.g. the payload of a tagged field.
    pub fn nested(&mut self, f: impl FnOnce(&mut Encoder<'_>)) -> Vec<u8> {
        let mut out = Vec::new();
        let mut e = Encoder::new(&mut out, self.flexible);
        f(&mut e);
        if let Some(err) = e.error {
            self.fail(err);
        }
        out
    }
}

/// Reads Kafka primitives from [`Bytes`]; never panics on malformed input.
#[derive(Debug, Clone)]
pub struct Decoder {
    buf: Bytes,
    flexible: bool,
}

/// Upper bound for the element count we pre-allocate; larger arrays grow as elements really arrive.
const MAX_PREALLOC: usize = 1024;

impl Decoder {
    /// A decoder over `buf`; `flexible` selects the compact (KIP-482) forms.
    pub fn new(buf: Bytes, flexible: bool) -> Self {
        Self { buf, flexible }
    }

    /// Whether compact forms and tagged fields are expected.
    pub fn flexible(&self) -> bool {
        self.flexible
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.remaining()
    }

    /// Fails unless every byte was consumed.
    pub fn finish(&self, what: &'static str) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::invalid(
                what,
                format!("{} trailing bytes", self.buf.len()),
            ))
        }
    }

    fn need(&self, what: &'static str, n: usize) -> Result<(), DecodeError> {
        if self.buf.remaining() < n {
            Err(DecodeError::UnexpectedEof {
                what,
                needed: n,
                remaining: self.buf.remaining(),
            })
        } else {
            Ok(())
        }
    }

    /// `n` raw bytes.
    pub fn raw(&mut self, what: &'static str, n: usize) -> Result<Bytes, DecodeError> {
        self.need(what, n)?;
        Ok(self.buf.split_to(n))
    }
    /// Skips `n` bytes.
    pub fn skip(&mut self, what: &'static str, n: usize) -> Result<(), DecodeError> {
        self.need(what, n)?;
        self.buf.advance(n);
        Ok(())
    }
    /// `n` raw bytes copied into their own allocation, so the result does not keep the buffer
    /// being decoded alive.
    pub fn raw_copied(&mut self, what: &'static str, n: usize) -> Result<Bytes, DecodeError> {
        self.need(what, n)?;
        let out = Bytes::copy_from_slice(&self.buf[..n]);
        self.buf.advance(n);
        Ok(out)
    }
    /// Everything that is left.
    pub fn rest(&mut self) -> Bytes {
        self.buf.split_off(0)
    }
    /// `BOOLEAN`.
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        self.need("bool", 1)?;
        Ok(self.buf.get_u8() != 0)
    }
    /// `INT8`.
    pub fn i8(&mut self) -> Result<i8, DecodeError> {
        self.need("int8", 1)?;
        Ok(self.buf.get_i8())
    }
    /// `INT16`.
    pub fn i16(&mut self) -> Result<i16, DecodeError> {
        self.need("int16", 2)?;
        Ok(self.buf.get_i16())
    }
    /// `INT32`.
    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        self.need("int32", 4)?;
        Ok(self.buf.get_i32())
    }
    /// `UINT32`.
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        self.need("uint32", 4)?;
        Ok(self.buf.get_u32())
    }
    /// `INT64`.
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        self.need("int64", 8)?;
        Ok(self.buf.get_i64())
    }
    /// `UUID`.
    pub fn uuid(&mut self) -> Result<[u8; 16], DecodeError> {
        self.need("uuid", 16)?;
        let mut out = [0u8; 16];
        self.buf.copy_to_slice(&mut out);
        Ok(out)
    }
    /// `UNSIGNED_VARINT` of at most 64 bits.
    pub fn uvarint(&mut self) -> Result<u64, DecodeError> {
        let mut value: u64 = 0;
        for i in 0..10 {
            self.need("varint", 1)?;
            let b = self.buf.get_u8();
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::invalid("varint", "more than 10 bytes"))
    }
    /// `UNSIGNED_VARINT` that must fit 32 bits.
    pub fn uvarint32(&mut self) -> Result<u32, DecodeError> {
        let v = self.uvarint()?;
        u32::try_from(v).map_err(|_| DecodeError::invalid("varint", "exceeds 32 bits"))
    }
    /// `VARINT` (zigzag, 32 bits).
    pub fn varint(&mut self) -> Result<i32, DecodeError> {
        let u = self.uvarint32()?;
        Ok(((u >> 1) as i32) ^ -((u & 1) as i32))
    }
    /// `VARLONG` (zigzag, 64 bits).
    pub fn varlong(&mut self) -> Result<i64, DecodeError> {
        let u = self.uvarint()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    /// A length prefix: `Ok(None)` for null.
    fn len(&mut self, what: &'static str, wide: bool) -> Result<Option<usize>, DecodeError> {
        let n: i64 = if self.flexible {
            i64::from(self.uvarint32()?) - 1
        } else if wide {
            i64::from(self.i32()?)
        } else {
            i64::from(self.i16()?)
        };
        match n {
            -1 => Ok(None),
            n if n < -1 => Err(DecodeError::invalid(what, format!("negative length {n}"))),
            n => Ok(Some(n as usize)),
        }
    }

    /// `STRING` / `COMPACT_STRING` (null is an error).
    pub fn string(&mut self) -> Result<String, DecodeError> {
        self.nstring()?
            .ok_or_else(|| DecodeError::invalid("string", "null where a string is required"))
    }
    /// `NULLABLE_STRING` / `COMPACT_NULLABLE_STRING`.
    pub fn nstring(&mut self) -> Result<Option<String>, DecodeError> {
        match self.len("string", false)? {
            None => Ok(None),
            Some(n) => {
                let b = self.raw("string", n)?;
                String::from_utf8(b.to_vec())
                    .map(Some)
                    .map_err(|e| DecodeError::invalid("string", e.to_string()))
            }
        }
    }
    /// `BYTES` / `COMPACT_BYTES` (null is an error).
    pub fn bytes(&mut self) -> Result<Bytes, DecodeError> {
        self.nbytes()?
            .ok_or_else(|| DecodeError::invalid("bytes", "null where bytes are required"))
    }
    /// `NULLABLE_BYTES` / `COMPACT_NULLABLE_BYTES`.
    pub fn nbytes(&mut self) -> Result<Option<Bytes>, DecodeError> {
        match self.len("bytes", true)? {
            None => Ok(None),
            Some(n) => self.raw("bytes", n).map(Some),
        }
    }
    /// `ARRAY` / `COMPACT_ARRAY` (null reads as empty).
    pub fn array<T>(
        &mut self,
        f: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        Ok(self.narray(f)?.unwrap_or_default())
    }
    /// Nullable `ARRAY` / `COMPACT_ARRAY`.
    pub fn narray<T>(
        &mut self,
        mut f: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Option<Vec<T>>, DecodeError> {
        match self.len("array", true)? {
            None => Ok(None),
            Some(n) => {
                // Every element takes at least one byte, so a count above the remaining length is corrupt.
                if n > self.remaining() {
                    return Err(DecodeError::invalid(
                        "array",
                        format!("count {n} exceeds {} remaining bytes", self.remaining()),
                    ));
                }
                let mut out = Vec::with_capacity(n.min(MAX_PREALLOC));
                for _ in 0..n {
                    out.push(f(self)?);
                }
                Ok(Some(out))
            }
        }
    }
    /// Skips a tagged-field section (only in flexible versions).
    pub fn tags(&mut self) -> Result<(), DecodeError> {
        self.tags_with(|_, _| Ok(()))
    }
    /// Reads a tagged-field section, handing each `(tag, payload)` to `f`.
    pub fn tags_with(
        &mut self,
        mut f: impl FnMut(u32, Bytes) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        if !self.flexible {
            return Ok(());
        }
        let n = self.uvarint32()?;
        for _ in 0..n {
            let tag = self.uvarint32()?;
            let size = self.uvarint32()? as usize;
            let payload = self.raw("tagged field", size)?;
            f(tag, payload)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varints_round_trip(a: i32, b: i64, c: u64) {
            let mut buf = Vec::new();
            let mut e = Encoder::new(&mut buf, true);
            e.varint(a);
            e.varlong(b);
            e.uvarint(c);
            prop_assert!(e.finish().is_ok());
            prop_assert_eq!(buf.len(), varint_len(a) + varlong_len(b) + uvarint_len(c));
            let mut d = Decoder::new(Bytes::from(buf), true);
            prop_assert_eq!(d.varint().ok(), Some(a));
            prop_assert_eq!(d.varlong().ok(), Some(b));
            prop_assert_eq!(d.uvarint().ok(), Some(c));
        }

        #[test]
        fn strings_round_trip(flex: bool, s: Option<String>, b: Option<Vec<u8>>) {
            let mut buf = Vec::new();
            let mut e = Encoder::new(&mut buf, flex);
            e.nstring(s.as_deref());
            e.nbytes(b.as_deref());
            e.tags();
            prop_assert!(e.finish().is_ok());
            let mut d = Decoder::new(Bytes::from(buf), flex);
            prop_assert_eq!(d.nstring().ok(), Some(s));
            prop_assert_eq!(d.nbytes().ok().map(|o| o.map(|b| b.to_vec())), Some(b));
            prop_assert!(d.tags().is_ok());
            prop_assert!(d.finish("test").is_ok());
        }
    }

    #[test]
    fn zigzag_known_values() {
        let mut buf = Vec::new();
        let mut e = Encoder::new(&mut buf, false);
        e.varint(-1);
        e.varint(1);
        e.varint(-64);
        assert_eq!(buf, vec![0x01, 0x02, 0x7f]);
    }
}
