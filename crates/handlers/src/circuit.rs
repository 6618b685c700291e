//! The endpoint circuit: tells an outage of the whole endpoint from a failure of one record.
//!
//! A connection that cannot be made (refused, or its connect or TLS handshake timed out), or
//! 502 / 503 / 504 answers to every request for a while, mean the service behind the endpoint is
//! down or being replaced, not that the record is bad. Counting such failures as attempts would
//! use up every record's retries and send records to the dead-letter queue that the service never
//! saw. The circuit instead:
//!
//! * **opens** on the first connection that cannot be made, or on endpoint-wide failures in a
//!   row (502, 503, 504; no other answer between them): [`OPEN_AFTER_MANY`] of them (many
//!   sessions failing at once), or [`OPEN_AFTER`] that span at least [`OPEN_SPAN`] (one session's
//!   retries failing for that long). An endpoint that answers 503 to one record in ten opens it
//!   about once in 10^8 requests, and then only for one probe interval.
//! * while open, **holds** every attempt: the attempt neither fails nor counts, and the engine's
//!   attempt timeout does not run (the handler waits in `orderly_engine::waiting_for_endpoint`);
//!   one request at a time goes out as a **probe**, first after [`PROBE_FIRST`], then at
//!   doubling intervals up to
//!   [`PROBE_MAX`];
//! * **closes** on the first answer that is not an endpoint-wide failure, and every held attempt
//!   goes out at once.
//!
//! A `Retry-After` on a 429 or 503 answer holds every request (not only that record's) until it
//! has passed: the service asked its client to slow down. While the circuit is open or a
//! `Retry-After` holds, the handler reports itself unavailable (`Handler::available`), which
//! suspends the engine's stuck-gap rule: waiting for the service is not being stuck.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Endpoint-wide failures in a row that open the circuit at once.
pub const OPEN_AFTER_MANY: u32 = 8;
/// Endpoint-wide failures in a row that open the circuit when they span [`OPEN_SPAN`].
pub const OPEN_AFTER: u32 = 3;
/// The least time the failures in a row must span to open the circuit.
pub const OPEN_SPAN: Duration = Duration::from_secs(1);
/// The first probe's delay after the circuit opened.
pub const PROBE_FIRST: Duration = Duration::from_millis(100);
/// The longest interval between probes.
pub const PROBE_MAX: Duration = Duration::from_secs(5);

#[derive(Debug)]
struct State {
    /// Endpoint-wide failures in a row, and when the first of them happened.
    failures: u32,
    first_failure: Option<Instant>,
    open: bool,
    /// A probe request is out.
    probing: bool,
    next_probe: Instant,
    probe_interval: Duration,
    /// Requests wait until this instant (a `Retry-After`).
    hold_until: Option<Instant>,
}

/// What [`Circuit::admit`] lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// The circuit is closed: a normal request.
    Normal,
    /// The circuit is open and this request is its probe.
    Probe,
}

/// The circuit of one endpoint (see the module docs). Shared by every attempt of a handler.
#[derive(Debug)]
pub(crate) struct Circuit {
    state: Mutex<State>,
    changed: Notify,
    /// No failure in a row, not open, no hold: the state every request finds while the endpoint
    /// is healthy, read without the lock so a healthy request takes no lock at all. Written
    /// only under the lock.
    quiet: AtomicBool,
}

impl Circuit {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State {
                failures: 0,
                first_failure: None,
                open: false,
                probing: false,
                next_probe: Instant::now(),
                probe_interval: PROBE_FIRST,
                hold_until: None,
            }),
            changed: Notify::new(),
            quiet: AtomicBool::new(true),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Plain data: a panic elsewhere cannot leave it inconsistent.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// False while the circuit is open or a `Retry-After` holds requests.
    pub(crate) fn available(&self) -> bool {
        if self.quiet.load(SeqCst) {
            return true;
        }
        let s = self.lock();
        !s.open && s.hold_until.is_none_or(|t| Instant::now() >= t)
    }

    /// Waits until a request may go out. Cancel safe: a caller dropped while it waits takes
    /// nothing; one dropped after it got [`Pass::Probe`] must call [`Circuit::probe_abandoned`]
    /// (the handler does so through a guard).
    pub(crate) async fn admit(&self) -> Pass {
        if self.quiet.load(SeqCst) {
            return Pass::Normal;
        }
        loop {
            // Registered before the state is read, so a change in between is not missed.
            let changed = self.changed.notified();
            let wait_until = {
                let mut s = self.lock();
                let now = Instant::now();
                match s.hold_until {
                    Some(t) if now < t => Some(t),
                    _ => {
                        s.hold_until = None;
                        if !s.open && s.failures == 0 {
                            self.quiet.store(true, SeqCst);
                        }
                        if !s.open {
                            return Pass::Normal;
                        }
                        if !s.probing && now >= s.next_probe {
                            s.probing = true;
                            return Pass::Probe;
                        }
                        // The probe's answer wakes us through `changed`; the next probe time
                        // is the latest we sleep.
                        Some(if s.probing {
                            now + PROBE_MAX
                        } else {
                            s.next_probe
                        })
                    }
                }
            };
            if let Some(t) = wait_until {
                tokio::select! {
                    () = changed => {}
                    () = tokio::time::sleep_until(t) => {}
                }
            }
        }
    }

    /// An answer that is not an endpoint-wide failure: the endpoint works. Closes the circuit.
    pub(crate) fn on_answer(&self) {
        if self.quiet.load(SeqCst) {
            return;
        }
        let mut s = self.lock();
        s.failures = 0;
        s.first_failure = None;
        s.probing = false;
        if s.hold_until.is_none() {
            self.quiet.store(true, SeqCst);
        }
        if s.open {
            s.open = false;
            s.probe_interval = PROBE_FIRST;
            drop(s);
            tracing::info!("handler endpoint answers again; held records go out");
            self.changed.notify_waiters();
        }
    }

    /// An endpoint-wide failure (a refused connection when `refused`, else a 502/503/504).
    /// Returns true when the circuit is open afterwards: the attempt is then held (the caller
    /// goes back to [`Circuit::admit`]) instead of failing.
    pub(crate) fn on_endpoint_failure(&self, refused: bool, pass: Pass) -> bool {
        let mut s = self.lock();
        self.quiet.store(false, SeqCst);
        let now = Instant::now();
        s.failures = s.failures.saturating_add(1);
        let first = *s.first_failure.get_or_insert(now);
        if pass == Pass::Probe {
            s.probing = false;
            s.probe_interval = (s.probe_interval * 2).min(PROBE_MAX);
            s.next_probe = now + s.probe_interval;
        }
        if !s.open
            && (refused
                || s.failures >= OPEN_AFTER_MANY
                || (s.failures >= OPEN_AFTER && now.saturating_duration_since(first) >= OPEN_SPAN))
        {
            s.open = true;
            s.probing = false;
            s.probe_interval = PROBE_FIRST;
            s.next_probe = now + PROBE_FIRST;
            tracing::warn!(
                failures = s.failures,
                "handler endpoint down (refused connections or 502/503/504 only): records are held, not retried or dead-lettered; probing with one request at a time"
            );
        }
        s.open
    }

    /// A probe whose answer never came (timed out, cancelled): another may go.
    pub(crate) fn probe_abandoned(&self) {
        let mut s = self.lock();
        if s.probing {
            s.probing = false;
            s.probe_interval = (s.probe_interval * 2).min(PROBE_MAX);
            s.next_probe = Instant::now() + s.probe_interval;
        }
        drop(s);
        self.changed.notify_waiters();
    }

    /// Holds every request until `until` (a `Retry-After`).
    pub(crate) fn hold(&self, until: Instant) {
        let mut s = self.lock();
        self.quiet.store(false, SeqCst);
        if s.hold_until.is_none_or(|t| t < until) {
            s.hold_until = Some(until);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_refused_connection_opens_and_an_answer_closes() {
        let c = Circuit::new();
        assert!(c.available());
        assert_eq!(c.admit().await, Pass::Normal);
        assert!(c.on_endpoint_failure(true, Pass::Normal));
        assert!(!c.available());
        let t0 = Instant::now();
        assert_eq!(c.admit().await, Pass::Probe);
        assert!(Instant::now() - t0 >= PROBE_FIRST);
        // A second caller waits while the probe is out; the probe's success lets it through.
        let waiter = async { c.admit().await };
        let answer = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            c.on_answer();
        };
        let (pass, ()) = tokio::join!(waiter, answer);
        assert_eq!(pass, Pass::Normal);
        assert!(c.available());
    }

    #[tokio::test(start_paused = true)]
    async fn failures_open_only_when_they_are_all_there_is_for_a_while() {
        let c = Circuit::new();
        // Many 503s within the span, with answers between them: stays closed.
        for _ in 0..100 {
            assert!(!c.on_endpoint_failure(false, Pass::Normal));
            assert!(!c.on_endpoint_failure(false, Pass::Normal));
            c.on_answer();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // A few in a row within less than the span: closed.
        for _ in 0..OPEN_AFTER {
            assert!(!c.on_endpoint_failure(false, Pass::Normal));
        }
        // Only failures for the whole span: open.
        tokio::time::sleep(OPEN_SPAN).await;
        assert!(c.on_endpoint_failure(false, Pass::Normal));
        assert!(!c.available());
    }

    #[tokio::test(start_paused = true)]
    async fn many_failures_in_a_row_open_at_once() {
        let c = Circuit::new();
        for _ in 1..OPEN_AFTER_MANY {
            assert!(!c.on_endpoint_failure(false, Pass::Normal));
        }
        assert!(c.on_endpoint_failure(false, Pass::Normal));
    }

    #[tokio::test(start_paused = true)]
    async fn failed_probes_back_off_to_the_maximum() {
        let c = Circuit::new();
        assert!(c.on_endpoint_failure(true, Pass::Normal));
        let mut last = Instant::now();
        let mut gaps = Vec::new();
        for _ in 0..8 {
            assert_eq!(c.admit().await, Pass::Probe);
            gaps.push(Instant::now() - last);
            last = Instant::now();
            assert!(c.on_endpoint_failure(true, Pass::Probe));
        }
        assert_eq!(gaps[0], PROBE_FIRST);
        assert_eq!(gaps[1], PROBE_FIRST * 2);
        assert_eq!(*gaps.last().unwrap_or(&Duration::ZERO), PROBE_MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_holds_every_request() {
        let c = Circuit::new();
        c.hold(Instant::now() + Duration::from_secs(3));
        assert!(!c.available());
        let t0 = Instant::now();
        assert_eq!(c.admit().await, Pass::Normal);
        assert_eq!(Instant::now() - t0, Duration::from_secs(3));
        assert!(c.available());
    }
}
