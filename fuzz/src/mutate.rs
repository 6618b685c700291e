//! The mutator: byte- and Kafka-primitive-level edits of a valid encoding, and splices of two.
//!
//! Kafka encodings are sequences of big-endian integers, unsigned varints (compact lengths) and
//! length-prefixed strings and byte arrays, so the edits that reach past the first length check
//! are those that put *plausible* values there: boundary integers (0, -1, 1, the type's extremes),
//! small varints (a compact array of one or two elements), a short string, a null marker. Bit
//! flips and random bytes cover the rest.

use rand::Rng;
use rand::rngs::StdRng;

/// Values that sit on a decoder's boundaries, as big-endian `int32`s.
const INTERESTING_I32: [i32; 12] = [
    0,
    1,
    -1,
    2,
    16,
    127,
    128,
    255,
    0x7fff,
    0x1_0000,
    i32::MAX,
    i32::MIN,
];

/// Inserted whole: a compact string "ab", a null compact string, an empty tag buffer, small
/// varints, a varint with the continuation bit and nothing after it, a 5-byte varint.
const TOKENS: [&[u8]; 9] = [
    &[3, b'a', b'b'],
    &[0],
    &[1],
    &[2],
    &[0x80],
    &[0xff, 0xff, 0xff, 0xff, 0x0f],
    &[0, 2, b'a', b'b'],
    &[0xff, 0xff],
    &[0, 0, 0, 1],
];

/// Applies one to four edits to `buf`; `other` is another corpus entry for splices.
pub fn mutate(rng: &mut StdRng, buf: &mut Vec<u8>, other: &[u8], max_len: usize) {
    let edits = rng.random_range(1..=4);
    for _ in 0..edits {
        edit(rng, buf, other);
    }
    buf.truncate(max_len);
}

fn pos(rng: &mut StdRng, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        rng.random_range(0..len)
    }
}

fn edit(rng: &mut StdRng, buf: &mut Vec<u8>, other: &[u8]) {
    let len = buf.len();
    match rng.random_range(0..13) {
        // Flip one bit.
        0 if len > 0 => {
            let i = pos(rng, len);
            buf[i] ^= 1 << rng.random_range(0..8);
        }
        // A random byte.
        1 if len > 0 => {
            let i = pos(rng, len);
            buf[i] = rng.random();
        }
        // Nudge a byte (a length one more or less).
        2 if len > 0 => {
            let i = pos(rng, len);
            buf[i] = buf[i].wrapping_add(if rng.random() { 1 } else { 255 });
        }
        // Overwrite an int16 / int32 / int64 with a boundary value.
        3..=5 => {
            let v = INTERESTING_I32[rng.random_range(0..INTERESTING_I32.len())];
            let bytes: Vec<u8> = match rng.random_range(0..3) {
                0 => (v as i16).to_be_bytes().to_vec(),
                1 => v.to_be_bytes().to_vec(),
                _ => i64::from(v).to_be_bytes().to_vec(),
            };
            if len >= bytes.len() {
                let i = pos(rng, len - bytes.len() + 1);
                buf[i..i + bytes.len()].copy_from_slice(&bytes);
            }
        }
        // Insert a token.
        6 => {
            let t = TOKENS[rng.random_range(0..TOKENS.len())];
            let i = pos(rng, len + 1);
            buf.splice(i..i, t.iter().copied());
        }
        // Insert a few random bytes.
        7 => {
            let n = rng.random_range(1..=8);
            let i = pos(rng, len + 1);
            let bytes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
            buf.splice(i..i, bytes);
        }
        // Delete a range.
        8 if len > 0 => {
            let i = pos(rng, len);
            let n = rng.random_range(1..=(len - i).min(16));
            buf.drain(i..i + n);
        }
        // Duplicate a range (a repeated array element).
        9 if len > 0 => {
            let i = pos(rng, len);
            let n = rng.random_range(1..=(len - i).min(64));
            let chunk = buf[i..i + n].to_vec();
            let at = pos(rng, len + 1);
            buf.splice(at..at, chunk);
        }
        // Truncate.
        10 if len > 0 => {
            let n = pos(rng, len);
            buf.truncate(n);
        }
        // Splice: our head, the other entry's tail.
        11 if !other.is_empty() => {
            let i = pos(rng, len + 1);
            let j = pos(rng, other.len());
            buf.truncate(i);
            buf.extend_from_slice(&other[j..]);
        }
        // Copy a chunk of the other entry over ours.
        12 if !other.is_empty() && len > 0 => {
            let j = pos(rng, other.len());
            let n = rng.random_range(1..=(other.len() - j).min(32));
            let i = pos(rng, len);
            let end = (i + n).min(len);
            buf[i..end].copy_from_slice(&other[j..j + (end - i)]);
        }
        _ => {
            let i = pos(rng, len + 1);
            buf.insert(i, rng.random());
        }
    }
}
