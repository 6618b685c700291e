//! The cap on HTTP requests in flight, fixed or adaptive (grows while latency holds, shrinks when requests only queue).
//!
//! Why adaptive: more requests in flight help while the endpoint has idle capacity (a handler
//! that waits on I/O answers in the same time at 10 or 200 in flight), and only cost once it has
//! none: then each extra request waits in a queue (on the server, in the kernel, on the run
//! queue) and adds per-connection state on both sides. A local handler that answers at once is
//! fastest at a few in flight, while a handler with 5 ms of service time needs hundreds. The adaptive limit follows the latency: it
//! starts at [`START`], grows while the smoothed round-trip time stays under 1.5 times the least
//! recent one (the endpoint is not queueing), shrinks when it rises above 3 times (it is), and
//! stays between a floor and the configured cap.
//!
//! It is off by default (`HttpConfig::adaptive_concurrency`): on a loaded host the scheduler's
//! delays look like a queue, and a handler with milliseconds of service time is then held below
//! the concurrency it needs.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::{AcquireError, Semaphore};

/// The adaptive limit's starting value (or the cap, when lower).
pub const START: usize = 16;
/// The adaptive limit never goes below this (or the cap, when lower).
pub const FLOOR: usize = 8;
/// Samples per window of the least round-trip time; the minimum is taken over the last two
/// windows, so a lasting change in the endpoint's latency is learnt after at most two windows.
const WINDOW: u32 = 500;
/// Grow while the smoothed RTT is below this multiple of the least one.
const GROW_BELOW: f64 = 1.5;
/// Shrink while the smoothed RTT is above this multiple of the least one. Not 2: on a loaded host
/// the scheduler alone doubles a 5 ms answer now and then, and a limit that took that for a
/// queue would shrink far below what such a handler needs.
const SHRINK_ABOVE: f64 = 3.0;

/// The limit controller: pure arithmetic over round-trip samples, no clock and no I/O, so it is
/// tested with made-up latencies.
#[derive(Debug, Clone)]
pub struct Controller {
    limit: f64,
    floor: f64,
    cap: f64,
    adaptive: bool,
    /// Smoothed round-trip time in seconds (0 before the first sample).
    srtt: f64,
    win_min: f64,
    prev_min: f64,
    n: u32,
}

impl Controller {
    /// A controller with the cap `cap` (at least 1): adaptive from [`START`] between [`FLOOR`] and
    /// `cap`, or fixed at `cap`.
    pub fn new(cap: usize, adaptive: bool) -> Self {
        let cap = cap.max(1) as f64;
        let (start, floor) = if adaptive {
            ((START as f64).min(cap), (FLOOR as f64).min(cap))
        } else {
            (cap, cap)
        };
        Self {
            limit: start,
            floor,
            cap,
            adaptive,
            srtt: 0.0,
            win_min: f64::INFINITY,
            prev_min: f64::INFINITY,
            n: 0,
        }
    }

    /// Requests allowed in flight now.
    pub fn limit(&self) -> usize {
        self.limit as usize
    }

    /// One request's round-trip time (request sent to response read). A timeout counts as a
    /// sample of the timeout's length.
    pub fn on_sample(&mut self, rtt: Duration) {
        if !self.adaptive {
            return;
        }
        let r = rtt.as_secs_f64().max(1e-6);
        self.srtt = if self.srtt == 0.0 {
            r
        } else {
            self.srtt + (r - self.srtt) / 16.0
        };
        self.win_min = self.win_min.min(r);
        self.n += 1;
        if self.n >= WINDOW {
            self.prev_min = self.win_min;
            self.win_min = f64::INFINITY;
            self.n = 0;
        }
        let least = self.win_min.min(self.prev_min);
        let ratio = self.srtt / least;
        if ratio < GROW_BELOW {
            // About +sqrt(limit) per round of `limit` requests: from 16 to 256 in ~24 rounds.
            self.limit += 1.0 / self.limit.sqrt();
        } else if ratio > SHRINK_ABOVE {
            // About -10 % per round of `limit` requests.
            self.limit -= 0.1;
        }
        self.limit = self.limit.clamp(self.floor, self.cap);
    }
}

/// Permits for requests in flight, as many as the [`Controller`] allows.
///
/// The semaphore's permits are managed by hand: an acquired permit is forgotten at once and
/// given back (or not) by [`Permit`]'s drop, which knows the limit then. `issued` counts the
/// permits that exist (held or available); while it is above the limit, returned permits are
/// dropped, and when the limit grows, new ones are added. Waiters are served first come, first
/// served (tokio's semaphore is fair).
#[derive(Debug)]
pub struct Limiter {
    sem: Semaphore,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    ctl: Controller,
    issued: usize,
}

impl Limiter {
    /// A limiter over `ctl`.
    pub fn new(ctl: Controller) -> Self {
        let n = ctl.limit();
        Self {
            sem: Semaphore::new(n),
            state: Mutex::new(State { ctl, issued: n }),
        }
    }

    /// Requests allowed in flight now.
    pub fn limit(&self) -> usize {
        self.state.lock().map_or(0, |s| s.ctl.limit())
    }

    /// Waits for a permit. Cancel safe: dropping the future before it completes takes nothing.
    pub async fn acquire(&self) -> Result<Permit<'_>, AcquireError> {
        let p = self.sem.acquire().await?;
        p.forget();
        Ok(Permit {
            limiter: self,
            sample: None,
        })
    }

    fn release(&self, sample: Option<Duration>) {
        let Ok(mut s) = self.state.lock() else {
            // A poisoned lock (a panic while holding it, which the code above cannot do): give
            // the permit back so nothing waits forever.
            self.sem.add_permits(1);
            return;
        };
        if let Some(rtt) = sample {
            s.ctl.on_sample(rtt);
        }
        let target = s.ctl.limit().max(1);
        if s.issued > target {
            s.issued -= 1;
        } else {
            let add = 1 + (target - s.issued);
            s.issued = target;
            self.sem.add_permits(add);
        }
    }
}

/// One request in flight; dropping it gives the slot back (with the round-trip sample, if set).
#[derive(Debug)]
pub struct Permit<'a> {
    limiter: &'a Limiter,
    sample: Option<Duration>,
}

impl Permit<'_> {
    /// Records the request's round-trip time, fed to the controller when the permit is dropped.
    pub fn sample(&mut self, rtt: Duration) {
        self.sample = Some(rtt);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.limiter.release(self.sample);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn fixed_stays_at_the_cap() {
        let mut c = Controller::new(256, false);
        assert_eq!(c.limit(), 256);
        for i in 0..10_000 {
            c.on_sample(us(100 + i));
        }
        assert_eq!(c.limit(), 256);
    }

    #[test]
    fn grows_to_the_cap_while_latency_holds() {
        // An endpoint with idle capacity: 5 ms whatever the load (plus a little noise).
        let mut c = Controller::new(256, true);
        assert_eq!(c.limit(), START);
        for i in 0..20_000u64 {
            c.on_sample(us(5_000 + (i * 7919) % 500));
        }
        assert_eq!(c.limit(), 256);
    }

    #[test]
    fn stays_low_when_requests_only_queue() {
        // A saturated endpoint: every request in flight waits for the ones before it, so the
        // round trip is the limit times the service time (40 µs), with some jitter.
        let mut c = Controller::new(256, true);
        let mut high = 0;
        for i in 0..50_000u64 {
            let l = c.limit() as u64;
            c.on_sample(us(l * 40 * (50 + (i * 7919) % 100) / 100 + 20));
            high = high.max(c.limit());
        }
        assert!(c.limit() <= 2 * START, "limit {}", c.limit());
        assert!(c.limit() >= FLOOR);
        assert!(high < 64, "went up to {high}");
    }

    #[test]
    fn shrinks_when_latency_rises_and_recovers_after() {
        let mut c = Controller::new(256, true);
        for _ in 0..20_000 {
            c.on_sample(us(1_000));
        }
        assert_eq!(c.limit(), 256);
        // The endpoint slows down (a queue builds): the limit comes down to the floor.
        for _ in 0..400 {
            c.on_sample(us(10_000));
        }
        let low = c.limit();
        assert!(low < 256, "limit {low}");
        // A lasting change is learnt (the least RTT comes from the last two windows): at a
        // steady 10 ms the limit grows again.
        for _ in 0..20_000 {
            c.on_sample(us(10_000));
        }
        assert_eq!(c.limit(), 256);
    }

    #[test]
    fn a_low_cap_bounds_start_and_floor() {
        let mut c = Controller::new(4, true);
        assert_eq!(c.limit(), 4);
        for _ in 0..1000 {
            c.on_sample(us(1_000_000));
        }
        assert_eq!(c.limit(), 4);
    }

    #[tokio::test]
    async fn permits_follow_the_limit() {
        let l = Limiter::new(Controller::new(64, true));
        assert_eq!(l.limit(), START);
        // START permits can be held at once, not one more.
        let mut held = Vec::new();
        for _ in 0..START {
            held.push(l.acquire().await.unwrap());
        }
        assert!(
            tokio::time::timeout(Duration::from_millis(20), l.acquire())
                .await
                .is_err()
        );
        // Fast answers raise the limit; the permits follow.
        for mut p in held.drain(..) {
            p.sample(us(100));
        }
        for _ in 0..2_000 {
            let mut p = l.acquire().await.unwrap();
            p.sample(us(100));
        }
        assert_eq!(l.limit(), 64);
        for _ in 0..64 {
            held.push(l.acquire().await.unwrap());
        }
        assert!(
            tokio::time::timeout(Duration::from_millis(20), l.acquire())
                .await
                .is_err()
        );
        // Slow answers lower it: returned permits above the limit are retired.
        for mut p in held.drain(..) {
            p.sample(us(100_000));
        }
        let lim = l.limit();
        assert!(lim < 64, "limit {lim}");
        for _ in 0..lim {
            held.push(l.acquire().await.unwrap());
        }
        assert!(
            tokio::time::timeout(Duration::from_millis(20), l.acquire())
                .await
                .is_err()
        );
    }
}
