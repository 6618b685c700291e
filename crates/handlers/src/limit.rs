//! The cap on HTTP requests in flight, fixed or adaptive (grows while latency holds, shrinks when requests only queue or the endpoint sheds load).
//!
//! Why adaptive: more requests in flight help while the endpoint has idle capacity (a handler
//! that waits on I/O answers in the same time at 10 or 200 in flight), and only cost once it has
//! none: then each extra request waits in a queue (on the server, in the kernel, on the run
//! queue) and adds per-connection state on both sides. A local handler that answers at once is
//! fastest at a few in flight, while a handler with 5 ms of service time needs hundreds. The
//! adaptive limit follows the latency: it starts at [`START`], grows while the smoothed
//! round-trip time stays under 1.5 times the endpoint's own latency (the base: it is not
//! queueing), shrinks when it rises above 3 times (it is), and stays between a floor and the
//! configured cap.
//!
//! The base is the least round trip seen, and only a round trip measured with few requests in
//! flight may raise it: a queue that stands as long as the limit keeps it standing must never
//! pass for the endpoint's latency, or the limit would climb on top of it. So the base rises
//! only after a window of samples at the floor (the limit came down to it and the latency stayed
//! high: the endpoint itself got slower), or after a probe: every [`PROBE_EVERY`] samples
//! without a new least round trip, the limit drops to the floor for one window, the least round
//! trip of that window becomes the base, and the limit returns to where it was.
//!
//! Answers that shed load (429, 503) are not latency samples: they come fast exactly when the
//! endpoint is overloaded. Each one lowers the limit by half a request, so a round of them
//! halves it.
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
/// Samples a base is measured over (at the floor, or in a probe).
const WINDOW: u32 = 500;
/// Samples without a new least round trip after which a probe measures the base again.
pub const PROBE_EVERY: u32 = 20 * WINDOW;
/// Grow while the smoothed RTT is below this multiple of the base.
const GROW_BELOW: f64 = 1.5;
/// Shrink while the smoothed RTT is above this multiple of the base. Not 2: on a loaded host
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
    /// The endpoint's own latency, in seconds (infinite before the first sample).
    base: f64,
    /// Samples since `base` was last set.
    since_base: u32,
    /// The least round trip of the current stretch at the floor (or probe), and its length.
    low_min: f64,
    low_n: u32,
    /// While probing: the limit to return to.
    resume: Option<f64>,
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
            base: f64::INFINITY,
            since_base: 0,
            low_min: f64::INFINITY,
            low_n: 0,
            resume: None,
        }
    }

    /// Requests allowed in flight now.
    pub fn limit(&self) -> usize {
        self.limit as usize
    }

    /// One request's round-trip time (request sent to response read) for an answer that is not
    /// load shedding. A timeout counts as a sample of the timeout's length.
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
        self.since_base = self.since_base.saturating_add(1);
        if r <= self.base {
            self.base = r;
            self.since_base = 0;
        }
        // A stretch at the floor (or a probe) measures the endpoint with the fewest requests
        // of ours in flight: its least round trip is the base, even if higher than before.
        if self.resume.is_some() || self.limit <= self.floor {
            self.low_min = self.low_min.min(r);
            self.low_n += 1;
            if self.low_n >= WINDOW {
                self.base = self.low_min;
                self.since_base = 0;
                self.low_min = f64::INFINITY;
                self.low_n = 0;
                if let Some(l) = self.resume.take() {
                    self.limit = l;
                    return;
                }
            }
        } else {
            self.low_min = f64::INFINITY;
            self.low_n = 0;
        }
        if self.resume.is_some() {
            return;
        }
        if self.since_base >= PROBE_EVERY && self.limit > self.floor {
            self.resume = Some(self.limit);
            self.limit = self.floor;
            return;
        }
        let ratio = self.srtt / self.base;
        if ratio < GROW_BELOW {
            // About +sqrt(limit) per round of `limit` requests: from 16 to 256 in ~24 rounds.
            self.limit += 1.0 / self.limit.sqrt();
        } else if ratio > SHRINK_ABOVE {
            // About -10 % per round of `limit` requests.
            self.limit -= 0.1;
        }
        self.limit = self.limit.clamp(self.floor, self.cap);
    }

    /// An answer that sheds load (429, 503): not a latency sample (it is fast because the
    /// endpoint refuses work); the limit comes down by half a request.
    pub fn on_overload(&mut self) {
        if !self.adaptive {
            return;
        }
        match self.resume.as_mut() {
            Some(l) => *l = (*l - 0.5).max(self.floor),
            None => self.limit = (self.limit - 0.5).clamp(self.floor, self.cap),
        }
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

    fn release(&self, sample: Option<Sample>) {
        let Ok(mut s) = self.state.lock() else {
            // A poisoned lock (a panic while holding it, which the code above cannot do): give
            // the permit back so nothing waits forever.
            self.sem.add_permits(1);
            return;
        };
        match sample {
            Some(Sample::Rtt(rtt)) => s.ctl.on_sample(rtt),
            Some(Sample::Overload) => s.ctl.on_overload(),
            None => {}
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

/// What a finished request tells the controller.
#[derive(Debug, Clone, Copy)]
enum Sample {
    Rtt(Duration),
    Overload,
}

/// One request in flight; dropping it gives the slot back (with what it told, if set).
#[derive(Debug)]
pub struct Permit<'a> {
    limiter: &'a Limiter,
    sample: Option<Sample>,
}

impl Permit<'_> {
    /// Records the request's round-trip time, fed to the controller when the permit is dropped.
    pub fn sample(&mut self, rtt: Duration) {
        self.sample = Some(Sample::Rtt(rtt));
    }

    /// Records that the endpoint shed this request (429, 503): the controller lowers the limit
    /// when the permit is dropped (see [`Controller::on_overload`]).
    pub fn overloaded(&mut self) {
        self.sample = Some(Sample::Overload);
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
    fn a_standing_queue_is_not_learnt_as_the_endpoint_latency() {
        // A saturated endpoint with steady answers: each request in flight waits for the ones
        // before it (40 µs of service each, 5 % jitter). The round trip follows the limit;
        // whatever the limit, a longer queue is only slower, so it must stay low, however
        // long the queue stands.
        let mut c = Controller::new(256, true);
        let mut high = 0;
        for i in 0..100_000u64 {
            let l = c.limit() as u64;
            c.on_sample(us(l * 40 * (95 + (i * 7919) % 10) / 100));
            high = high.max(c.limit());
        }
        assert!(c.limit() <= 2 * START, "limit {}", c.limit());
        assert!(high < 64, "went up to {high}");
    }

    #[test]
    fn a_lucky_fast_sample_is_forgotten() {
        // One answer far faster than the endpoint's latency (a cached reply) sets the base; the
        // steady 250 µs after it is 2.5 times that, neither growth nor shrinking. A probe
        // measures the base again and the limit grows.
        let mut c = Controller::new(256, true);
        c.on_sample(us(100));
        for _ in 0..3 * PROBE_EVERY {
            c.on_sample(us(250));
        }
        assert_eq!(c.limit(), 256);
    }

    #[test]
    fn load_shedding_lowers_the_limit() {
        let mut c = Controller::new(256, true);
        for _ in 0..20_000 {
            c.on_sample(us(1_000));
        }
        assert_eq!(c.limit(), 256);
        // Fast 429/503 answers: half a request off for each, so one round halves the limit.
        for _ in 0..256 {
            c.on_overload();
        }
        assert!(c.limit() <= 128, "limit {}", c.limit());
        for _ in 0..1_000 {
            c.on_overload();
        }
        assert_eq!(c.limit(), FLOOR);
        // Fixed: unchanged.
        let mut f = Controller::new(64, false);
        f.on_overload();
        assert_eq!(f.limit(), 64);
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
        // A lasting change is learnt (a window at the floor still answered in 10 ms: that is
        // the endpoint's latency now): at a steady 10 ms the limit grows again.
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
