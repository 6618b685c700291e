//! The shared workload of the side-by-side benchmarks: the failure-injection hash and rules, and
//! the records each session is expected to get, identical for every system (Rust, Go, Java).
//!
//! - Keys `s-000042` (session id), values of 100 bytes, headers `event-id` (`e-<i>`) and `seq`
//!   (1, 2, 3 per session), record `i` belongs to session `i % sessions` (round robin).
//! - A record fails transiently on its first attempt when `fnv1a64(event-id) % fail_mod == 0`
//!   (`fail_mod` 10 = 10 %, 100 = 1 %, 0 = never) and succeeds on its retry.
//! - Retry policy: full jitter over `min(100 ms, 1 ms · 2^(n-1))` before retry `n`.
//!
//! The Go peer (`benches/peers/go-seed/main.go`) and the Java peer
//! (`benches/peers/parallel-consumer/.../PcPeer.java`) implement the same hash and rules.

use std::time::Duration;

/// FNV-1a, 64 bits: the failure-injection hash.
pub fn fnv1a64(data: &[u8]) -> u64 {
    orderly_consumer::__private::synthetic::fnv1a(data)
}

/// True if the record with this event id fails transiently on its first attempt.
pub fn fails_first_attempt(event_id: &[u8], fail_mod: u64) -> bool {
    fail_mod != 0 && fnv1a64(event_id) % fail_mod == 0
}

/// True if the record with this event id fails transiently on its first attempt by the rule of the
/// HTTP scenarios' endpoint (that of `orderly_testkit::webhook`): `fnv1a64(event-id) % 100 < pct`.
pub fn fails_first_attempt_pct(event_id: &[u8], pct: u64) -> bool {
    pct != 0 && fnv1a64(event_id) % 100 < pct
}

/// Base of the shared retry policy.
pub const RETRY_BASE: Duration = Duration::from_millis(1);
/// Growth factor of the shared retry policy.
pub const RETRY_FACTOR: f64 = 2.0;
/// Cap of the shared retry policy.
pub const RETRY_CAP: Duration = Duration::from_millis(100);

/// The shared retry policy as orderly's engine takes it (retry forever; nothing goes to the DLQ).
pub fn retry_policy() -> orderly_engine::RetryPolicy {
    orderly_engine::RetryPolicy {
        base: RETRY_BASE,
        factor: RETRY_FACTOR,
        cap: RETRY_CAP,
        max_attempts: None,
    }
}

/// Session key of session `s`.
pub fn session_key(s: usize) -> String {
    orderly_consumer::__private::synthetic::session_key(s)
}

/// How many records session `s` gets out of `records` spread round robin over `sessions`.
pub fn records_of_session(records: u64, sessions: u64, s: u64) -> u64 {
    records / sessions + u64::from(s < records % sessions)
}

/// The floor the retry policy alone imposes on a backlog run: sessions run their records one after
/// another, so the run lasts at least as long as the slowest session's backoff delays added up.
/// Every injected failure is retried once, after a delay drawn uniformly from `[0, base]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffFloor {
    /// The most failing records of one session.
    pub slowest_k: u64,
    /// The largest expected sum over the sessions, `slowest_k · base / 2`. It understates the floor, since the run waits for whichever
    /// session drew the largest sum, and the expected largest sum exceeds the largest expected
    /// sum.
    pub max_expected: Duration,
    /// The expected largest sum over the sessions, `E[max_s Σ draws of s]`: the floor a run
    /// meets on average (a Monte Carlo mean over [`FLOOR_TRIALS`] fixed-seed trials).
    pub expected_max: Duration,
}

/// Trials behind [`BackoffFloor::expected_max`]; its standard error is about the spread of the
/// largest sum (a few ms in S1) over √trials.
pub const FLOOR_TRIALS: u32 = 4000;

/// The [`BackoffFloor`] of a workload.
pub fn backoff_floor(records: u64, sessions: u64, fail_mod: u64) -> BackoffFloor {
    if fail_mod == 0 || sessions == 0 {
        return BackoffFloor {
            slowest_k: 0,
            max_expected: Duration::ZERO,
            expected_max: Duration::ZERO,
        };
    }
    let mut per_session = vec![0u64; sessions as usize];
    for i in 0..records {
        if fails_first_attempt(format!("e-{i}").as_bytes(), fail_mod) {
            per_session[(i % sessions) as usize] += 1;
        }
    }
    let k = per_session.iter().copied().max().unwrap_or(0);
    // splitmix64: a fixed seed, so every report of the same workload gives the same figure.
    let mut state = 0x5eed_u64;
    let mut uniform = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as f64 / u64::MAX as f64
    };
    let base = RETRY_BASE.as_secs_f64();
    let mut total = 0.0;
    for _ in 0..FLOOR_TRIALS {
        let mut largest = 0.0f64;
        for &n in per_session.iter().filter(|&&n| n > 0) {
            let sum: f64 = (0..n).map(|_| uniform() * base).sum();
            largest = largest.max(sum);
        }
        total += largest;
    }
    BackoffFloor {
        slowest_k: k,
        max_expected: RETRY_BASE.mul_f64(k as f64 / 2.0),
        expected_max: Duration::from_secs_f64(total / f64::from(FLOOR_TRIALS)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_published_vectors() {
        // Reference values of FNV-1a 64 (the Go and Java peers are checked against the same).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn about_ten_percent_fail_with_mod_ten() {
        let n = (0..100_000)
            .filter(|i| fails_first_attempt(format!("e-{i}").as_bytes(), 10))
            .count();
        assert!((9_000..11_000).contains(&n), "{n}");
        assert!(!fails_first_attempt(b"e-1", 0));
    }

    #[test]
    fn the_expected_largest_sum_exceeds_the_largest_expected_sum() {
        // One session: the two agree (the mean of k uniform draws, k · base / 2), to within the
        // Monte Carlo error.
        let one = backoff_floor(50_000, 1, 10);
        let gap = one.expected_max.as_secs_f64() - one.max_expected.as_secs_f64();
        assert!(gap.abs() < 0.000_5, "{one:?}");
        // S1: ten sessions of about 500 failing records, each sum with a spread of
        // √(k/12) ≈ 6.5 ms; the largest of ten lands about 1.5 spreads above the mean.
        let s1 = backoff_floor(50_000, 10, 10);
        let gap = s1.expected_max.as_secs_f64() - s1.max_expected.as_secs_f64();
        assert!((0.002..0.015).contains(&gap), "{s1:?}");
        assert_eq!(backoff_floor(50_000, 10, 10), s1, "not deterministic");
        assert_eq!(backoff_floor(50_000, 10, 0).expected_max, Duration::ZERO);
    }

    #[test]
    fn round_robin_counts_add_up() {
        let total: u64 = (0..7).map(|s| records_of_session(50, 7, s)).sum();
        assert_eq!(total, 50);
        assert_eq!(records_of_session(50, 7, 0), 8);
        assert_eq!(records_of_session(50, 7, 6), 7);
    }
}
