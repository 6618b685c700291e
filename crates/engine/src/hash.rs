//! Session routing: a seeded 64-bit hash independent of Kafka's murmur2, and jump consistent hash.
//!
//! Why not `murmur2 % workers`: every key of one Kafka partition already shares a murmur2
//! residue modulo the partition count, so reusing murmur2 (or any hash correlated with it) would
//! leave workers idle. Why jump hash: it needs no ring memory, is O(ln n), and moves only 1/n of
//! the sessions when the worker count changes.

const K0: u64 = 0x9E37_79B9_7F4A_7C15;
const K1: u64 = 0xBF58_476D_1CE4_E5B9;
const K2: u64 = 0x94D0_49BB_1331_11EB;

/// The seed the engine uses unless configured otherwise.
pub const DEFAULT_SEED: u64 = 0x6f72_6465_726c_7931;

/// Finalizer from splitmix64: full avalanche, so every input bit reaches every output bit.
#[inline]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(K1);
    z = (z ^ (z >> 27)).wrapping_mul(K2);
    z ^ (z >> 31)
}

/// A fast seeded 64-bit hash of a byte string (8 bytes per step, then a full finalizer).
#[inline]
pub fn hash64(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = seed ^ (bytes.len() as u64).wrapping_mul(K0);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K1).rotate_left(29);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h ^ u64::from_le_bytes(w) ^ 0xff)
            .wrapping_mul(K2)
            .rotate_left(31);
    }
    mix64(h)
}

/// The routing hash of a session: its id hashed with the seed, mixed with its partition's salt.
/// A session is one id *within one topic-partition*: the same key on two partitions is two
/// sessions, routed independently.
#[inline]
pub fn session_hash(seed: u64, partition_salt: u64, id: &[u8]) -> u64 {
    mix64(hash64(seed, id) ^ partition_salt)
}

/// Jump consistent hash (Lamping & Veach 2014): maps `key` to a bucket in `0..buckets`.
/// Returns 0 when `buckets` is 0 or 1.
#[inline]
pub fn jump_consistent_hash(mut key: u64, buckets: u32) -> u32 {
    let mut b: i64 = -1;
    let mut j: i64 = 0;
    let n = i64::from(buckets.max(1));
    while j < n {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        // The float math is the algorithm's definition; the result is < n by construction.
        let r = ((key >> 33) + 1) as f64;
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / r)) as i64;
    }
    u32::try_from(b.max(0)).unwrap_or(0)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Kafka's murmur2 (the Java client's `Utils.murmur2`), only to generate keys that share a
    /// Kafka partition.
    pub(crate) fn murmur2(data: &[u8]) -> i32 {
        let seed: u32 = 0x9747_b28c;
        let m: u32 = 0x5bd1_e995;
        let r = 24;
        let len = data.len();
        let mut h: u32 = seed ^ (len as u32);
        let mut chunks = data.chunks_exact(4);
        for c in &mut chunks {
            let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            k = k.wrapping_mul(m);
            k ^= k >> r;
            k = k.wrapping_mul(m);
            h = h.wrapping_mul(m);
            h ^= k;
        }
        let rest = chunks.remainder();
        if rest.len() >= 3 {
            h ^= u32::from(rest[2]) << 16;
        }
        if rest.len() >= 2 {
            h ^= u32::from(rest[1]) << 8;
        }
        if !rest.is_empty() {
            h ^= u32::from(rest[0]);
            h = h.wrapping_mul(m);
        }
        h ^= h >> 13;
        h = h.wrapping_mul(m);
        h ^= h >> 15;
        h as i32
    }

    fn kafka_partition(key: &[u8], partitions: i32) -> i32 {
        (murmur2(key) & 0x7fff_ffff) % partitions
    }

    #[test]
    fn murmur2_matches_java_reference_vectors() {
        // Vectors from the Java client's UtilsTest.
        assert_eq!(murmur2(b"21"), -973_932_308);
        assert_eq!(murmur2(b"foobar"), -790_332_482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985_981_536);
    }

    #[test]
    fn keys_of_one_kafka_partition_spread_over_workers() {
        // 12 partitions, 4 workers: with `murmur2 % 4` all keys of partition 0 land on worker 0.
        let keys: Vec<String> = (0..200_000)
            .map(|i| format!("session-{i}"))
            .filter(|k| kafka_partition(k.as_bytes(), 12) == 0)
            .collect();
        assert!(keys.len() > 10_000);
        for workers in [2u32, 4, 7, 16] {
            let mut counts = vec![0usize; workers as usize];
            for k in &keys {
                counts
                    [jump_consistent_hash(hash64(DEFAULT_SEED, k.as_bytes()), workers) as usize] +=
                    1;
            }
            let mean = keys.len() as f64 / f64::from(workers);
            // Within 5 standard deviations of a uniform spread (binomial, sd ≈ sqrt(mean)).
            for c in &counts {
                assert!(
                    (*c as f64 - mean).abs() < 5.0 * mean.sqrt(),
                    "workers={workers} counts={counts:?}"
                );
            }
            // The naive reading would be maximally skewed: document the contrast.
            let naive = keys
                .iter()
                .filter(|k| (murmur2(k.as_bytes()) & 0x7fff_ffff) % 4 == 0)
                .count();
            assert_eq!(naive, keys.len());
        }
    }

    #[test]
    fn jump_hash_moves_few_keys_when_growing() {
        let moved = (0..10_000u64)
            .filter(|i| {
                let h = hash64(1, &i.to_le_bytes());
                jump_consistent_hash(h, 8) != jump_consistent_hash(h, 9)
            })
            .count();
        // Ideal is 1/9 of the keys.
        assert!(moved < 10_000 / 9 + 300, "moved {moved}");
        assert_eq!(jump_consistent_hash(123, 0), 0);
        assert_eq!(jump_consistent_hash(123, 1), 0);
    }
}
