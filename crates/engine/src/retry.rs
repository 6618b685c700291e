//! Exponential backoff with full jitter, deterministic for a given seed.

use std::time::Duration;

use crate::hash::mix64;

/// Retry schedule for transient handler errors (and, without the attempt limit, for DLQ writes).
///
/// The delay before retry `n` (1-based) is uniform in `[0, min(cap, base * factor^(n-1))]`
/// ("full jitter"): retries of many sessions that failed together spread out instead of
/// hammering the dependency in lockstep.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// First backoff ceiling. Default 100 ms.
    pub base: Duration,
    /// Growth per retry. Default 2.0.
    pub factor: f64,
    /// Largest backoff ceiling. Default 30 s.
    pub cap: Duration,
    /// Attempts (first try included) before the record is dead-lettered with reason
    /// `retries-exhausted`; `None` retries forever (the stuck-gap timeout still applies).
    /// Default `Some(10)`.
    pub max_attempts: Option<u32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(100),
            factor: 2.0,
            cap: Duration::from_secs(30),
            max_attempts: Some(10),
        }
    }
}

impl RetryPolicy {
    /// The ceiling for retry `retry` (1-based), before jitter.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let exp = i32::try_from(retry.saturating_sub(1)).unwrap_or(i32::MAX);
        let secs = self.base.as_secs_f64() * self.factor.max(1.0).powi(exp);
        if !secs.is_finite() || secs >= self.cap.as_secs_f64() {
            self.cap
        } else {
            Duration::from_secs_f64(secs.max(0.0))
        }
    }

    /// The jittered delay for retry `retry` of the record identified by `salt` (its partition and
    /// offset). The jitter is a hash of `(seed, salt, retry)`, not a shared RNG: no lock on the
    /// hot path, and a fixed seed replays the exact same schedule in tests.
    pub fn delay(&self, seed: u64, salt: u64, retry: u32) -> Duration {
        let r = mix64(seed ^ mix64(salt ^ u64::from(retry).rotate_left(48)));
        // 53 random bits as a fraction in [0, 1].
        let frac = (r >> 11) as f64 / ((1u64 << 53) - 1) as f64;
        self.ceiling(retry).mul_f64(frac)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_grows_then_caps_and_jitter_stays_below_it() {
        let p = RetryPolicy {
            base: Duration::from_millis(10),
            factor: 3.0,
            cap: Duration::from_secs(1),
            max_attempts: None,
        };
        assert_eq!(p.ceiling(1), Duration::from_millis(10));
        assert_eq!(p.ceiling(2), Duration::from_millis(30));
        assert_eq!(p.ceiling(20), Duration::from_secs(1));
        assert_eq!(p.ceiling(u32::MAX), Duration::from_secs(1));
        let mut sum = 0.0;
        for salt in 0..1000 {
            let d = p.delay(42, salt, 3);
            assert!(d <= p.ceiling(3));
            sum += d.as_secs_f64();
        }
        // Full jitter: the mean is about half the ceiling.
        let mean = sum / 1000.0;
        assert!((mean - 0.045).abs() < 0.005, "mean {mean}");
        assert_eq!(p.delay(1, 2, 3), p.delay(1, 2, 3));
        assert_ne!(p.delay(1, 2, 3), p.delay(2, 2, 3));
    }
}
