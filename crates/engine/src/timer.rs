//! Sub-millisecond sleeps for short retry backoffs.
//!
//! tokio's timer wheel has a resolution of one millisecond and rounds every deadline up to its
//! next tick, so a drawn backoff of 0.3 ms sleeps 1–2 ms. With a retry policy whose first ceiling
//! is 1 ms, that rounding, not the policy, would set the pace of a retry-heavy session (a backoff
//! of 0.5 ms on average would cost 1–2 ms).
//!
//! [`sleep`] therefore races two timers for delays below [`PRECISE_BELOW`]: tokio's, and one
//! process-wide timer thread that parks on a condition variable (with a 1 ns timer slack on Linux)
//! until the earliest deadline. Whichever fires first ends the sleep. Longer delays use tokio's
//! timer alone; its rounding is then at most a few per cent.
//!
//! Waking a parked thread is not free either: the timer thread wakes some tens of µs after its
//! deadline, and the runtime worker it then wakes adds its own wake-up latency on top, both paid
//! on every retry of a retry-heavy session such as S1 (a 500 µs backoff on average). So the timer
//! thread wakes a sleep [`SPIN_WITHIN`] before its deadline, and the sleep, when polled that
//! close to it, spins the rest on the worker instead of parking again: at most [`SPIN_WITHIN`]
//! of CPU per short sleep (only backoffs below [`PRECISE_BELOW`] take this path), usually less,
//! since the wake-ups themselves take most of it. A sleep never ends before its deadline.
//!
//! The spin pays only while the worker would otherwise sit idle. When more than
//! [`SPIN_MAX_SLEEPERS`] precise sleeps are pending at once, the process is serving many
//! sessions, most of them with records ready, and a spinning sleep would hold a worker away from
//! them; such a sleep has the timer thread wake it at its deadline and does not spin. Deadlines
//! then come thousands a second, microseconds apart, and a wake-up of the timer thread per
//! deadline (a context switch, and one more for the worker it wakes) costs more CPU than the
//! handlers; so while crowded the thread wakes [`COALESCE_WITHIN`] after the earliest deadline
//! and ends every sleep due by then in one go: a sleep ends at most that much late, as the
//! kernel's default timer slack would let it.
//!
//! The race keeps deterministic tests deterministic: under tokio's paused clock the runtime
//! auto-advances to the tokio sleep's deadline as soon as every task waits, and the real-time
//! path ends a sleep only while tokio's clock has kept pace with the real one since the sleep
//! began (it always does unless paused). Otherwise a busy machine, where the real deadline can
//! pass before the paused runtime gets idle enough to advance, would end the sleep at the same
//! virtual instant it began.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Delays below this also get the precise timer thread.
pub(crate) const PRECISE_BELOW: Duration = Duration::from_millis(20);

/// How long before its deadline the timer thread wakes a sleep; the sleep spins the rest when it
/// is polled (see the module docs).
pub(crate) const SPIN_WITHIN: Duration = Duration::from_micros(60);

/// Above this many pending precise sleeps, a sleep does not spin (see the module docs).
pub(crate) const SPIN_MAX_SLEEPERS: usize = 16;

/// With more than [`SPIN_MAX_SLEEPERS`] precise sleeps pending, the timer thread wakes this long
/// after the earliest deadline and ends every sleep due by then (see the module docs).
pub(crate) const COALESCE_WITHIN: Duration = Duration::from_micros(50);

/// Precise sleeps alive now (created with a real-time deadline, not yet dropped).
static SLEEPERS: AtomicUsize = AtomicUsize::new(0);

/// Sleeps for `delay`, precisely when it is short; see the module docs.
pub(crate) fn sleep(delay: Duration) -> Sleep {
    // tokio's clock is read first and the real one after, so without a paused clock tokio's
    // elapsed time, read the other way round in `poll`, is never below the real one.
    let virtual_start = tokio::time::Instant::now();
    let precise = (delay < PRECISE_BELOW && !delay.is_zero())
        .then(|| Instant::now() + delay)
        .filter(|_| wheel().is_some());
    if precise.is_some() {
        SLEEPERS.fetch_add(1, AtomicOrdering::Relaxed);
    }
    Sleep {
        coarse: Box::pin(tokio::time::sleep(delay)),
        precise: precise.map(|at| (at, at - delay, virtual_start)),
        registered: None,
    }
}

/// The future returned by [`sleep`].
pub(crate) struct Sleep {
    coarse: Pin<Box<tokio::time::Sleep>>,
    /// The real-time deadline, when the timer thread takes part, with the real and tokio clock
    /// readings at the start.
    precise: Option<(Instant, Instant, tokio::time::Instant)>,
    /// The waker last handed to the timer thread, and when the thread is to wake it.
    registered: Option<(Waker, Instant)>,
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if self.precise.is_some() {
            SLEEPERS.fetch_sub(1, AtomicOrdering::Relaxed);
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.coarse.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        let Some((at, real_start, virtual_start)) = self.precise else {
            return Poll::Pending;
        };
        let now = Instant::now();
        if tokio::time::Instant::now() - virtual_start < now - real_start {
            // tokio's clock is paused and lags: its own timer ends the sleep.
            return Poll::Pending;
        }
        if now >= at {
            return Poll::Ready(());
        }
        let crowded = SLEEPERS.load(AtomicOrdering::Relaxed) > spin_max_sleepers();
        if spins(at - now, crowded) {
            while Instant::now() < at {
                std::hint::spin_loop();
            }
            return Poll::Ready(());
        }
        let wake_at = if crowded {
            at
        } else {
            at.checked_sub(SPIN_WITHIN).unwrap_or(at)
        };
        // Registered again when polled by another task's waker, or when woken (early, for the
        // spin) and still not done.
        let fresh = self
            .registered
            .as_ref()
            .is_none_or(|(w, due)| !w.will_wake(cx.waker()) || *due <= now);
        if fresh && let Some(wheel) = wheel() {
            wheel.add(wake_at, cx.waker().clone());
            self.registered = Some((cx.waker().clone(), wake_at));
        }
        Poll::Pending
    }
}

#[cfg(not(test))]
fn spin_max_sleepers() -> usize {
    SPIN_MAX_SLEEPERS
}

/// Tests of the spin itself lift the limit on their own thread: sleeps of other tests running
/// at the same time must not decide whether theirs spins.
#[cfg(test)]
fn spin_max_sleepers() -> usize {
    tests::CROWD_LIMIT.with(std::cell::Cell::get)
}

/// Whether a sleep `left` before its deadline spins the rest on its worker: within
/// [`SPIN_WITHIN`], unless the process is `crowded` with sleeps (see the module docs).
fn spins(left: Duration, crowded: bool) -> bool {
    !crowded && left <= SPIN_WITHIN
}

struct Entry {
    at: Instant,
    waker: Waker,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// Reversed, so the max-heap yields the earliest deadline.
    fn cmp(&self, other: &Self) -> Ordering {
        other.at.cmp(&self.at)
    }
}

struct Wheel {
    timers: Mutex<Timers>,
    wake: Condvar,
}

/// The pending deadlines, and when the timer thread is to wake next (`None`: it waits for a
/// deadline to be added).
struct Timers {
    heap: BinaryHeap<Entry>,
    wake_at: Option<Instant>,
}

/// When the timer thread wakes for the `earliest` pending deadline: at it, or, when the process
/// is `crowded` with sleeps, [`COALESCE_WITHIN`] after it, so that one wake-up serves every
/// deadline in that window (see the module docs).
fn wake_time(earliest: Instant, crowded: bool) -> Instant {
    if crowded {
        earliest + COALESCE_WITHIN
    } else {
        earliest
    }
}

impl Timers {
    /// Wakes every sleep due at `now` and sets when the thread wakes next (see [`wake_time`]).
    /// Returns how many it woke.
    fn serve(&mut self, now: Instant, crowded: bool) -> usize {
        let mut woken = 0;
        while self.heap.peek().is_some_and(|e| e.at <= now) {
            if let Some(e) = self.heap.pop() {
                e.waker.wake();
                woken += 1;
            }
        }
        self.wake_at = self.heap.peek().map(|e| wake_time(e.at, crowded));
        woken
    }
}

impl Wheel {
    fn add(&self, at: Instant, waker: Waker) {
        let mut t = self.timers.lock().unwrap_or_else(|e| e.into_inner());
        t.heap.push(Entry { at, waker });
        // The thread wakes again by itself for anything due no earlier than its next wake-up.
        let sooner = t.wake_at.is_none_or(|w| at < w);
        if sooner {
            t.wake_at = Some(at);
        }
        drop(t);
        if sooner {
            self.wake.notify_one();
        }
    }

    fn run(&self) {
        // Linux lets a timed futex wait end up to the thread's timer slack late (50 µs by default)
        // so that nearby wake-ups can be merged; this thread exists to wake on time, so it asks
        // for 1 ns.
        #[cfg(target_os = "linux")]
        SLACK_SET.store(
            rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1)).is_ok(),
            std::sync::atomic::Ordering::Relaxed,
        );
        let mut t = self.timers.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = Instant::now();
            let crowded = SLEEPERS.load(AtomicOrdering::Relaxed) > spin_max_sleepers();
            t.serve(now, crowded);
            t = match t.wake_at {
                Some(at) => {
                    self.wake
                        .wait_timeout(t, at.saturating_duration_since(now))
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self.wake.wait(t).unwrap_or_else(|e| e.into_inner()),
            };
        }
    }
}

/// Whether the timer thread got a 1 ns timer slack (Linux).
#[cfg(target_os = "linux")]
static SLACK_SET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The process-wide timer thread, started on first use; `None` if it could not be started (the
/// sleeps then use tokio's timer alone).
fn wheel() -> Option<&'static Wheel> {
    static WHEEL: OnceLock<Option<&'static Wheel>> = OnceLock::new();
    *WHEEL.get_or_init(|| {
        let wheel: &'static Wheel = Box::leak(Box::new(Wheel {
            timers: Mutex::new(Timers {
                heap: BinaryHeap::new(),
                wake_at: None,
            }),
            wake: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("orderly-timer".into())
            .spawn(move || wheel.run())
            .ok()
            .map(|_| wheel)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        pub(super) static CROWD_LIMIT: std::cell::Cell<usize> =
            const { std::cell::Cell::new(SPIN_MAX_SLEEPERS) };
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn short_sleeps_beat_the_millisecond_wheel_measured_side_by_side() {
        // 300 µs sleeps, alternating with tokio's own sleep so machine load hits both alike. The
        // wheel rounds each deadline up to a 1 ms tick; the timer thread does not.
        let delay = Duration::from_micros(300);
        let (mut precise, mut wheel_only) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..200 {
            let t = Instant::now();
            sleep(delay).await;
            let took = t.elapsed();
            assert!(took >= delay, "woke before its deadline: {took:?}");
            precise += took;
            let t = Instant::now();
            tokio::time::sleep(delay).await;
            wheel_only += t.elapsed();
        }
        assert!(
            precise < wheel_only,
            "precise {:?} vs wheel {:?} per sleep",
            precise / 200,
            wheel_only / 200
        );
    }

    #[test]
    fn a_sleep_polled_within_the_spin_window_ends_on_that_poll_and_never_early() {
        CROWD_LIMIT.with(|c| c.set(usize::MAX));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        rt.block_on(async {
            for micros in [1u64, 10, 30, 59] {
                let delay = Duration::from_micros(micros);
                let t = Instant::now();
                let mut s = std::pin::pin!(sleep(delay));
                // One poll, no wake-up in between: the deadline is within the window, so it
                // spins to it instead of returning Pending.
                let polled = std::future::poll_fn(|cx| Poll::Ready(s.as_mut().poll(cx))).await;
                assert!(polled.is_ready(), "{micros} µs: pending on its first poll");
                assert!(t.elapsed() >= delay, "{micros} µs: ended early");
            }
            // Beyond the window the first poll parks (it is woken later by either timer).
            let mut s = std::pin::pin!(sleep(Duration::from_millis(15)));
            let polled = std::future::poll_fn(|cx| Poll::Ready(s.as_mut().poll(cx))).await;
            assert!(polled.is_pending());
        });
    }

    /// The timer thread's wake-ups over deadlines 5, 15, 45 and 120 µs ahead: how many sleeps
    /// each one ends. Crowded, the first wake-up (50 µs after the earliest deadline) serves the
    /// three within that window; otherwise each deadline has a wake-up of its own. `serve` ends
    /// only sleeps whose deadline has passed, so none ends early either way.
    #[test]
    fn a_crowded_timer_thread_wakes_once_for_the_deadlines_within_the_window() {
        let t0 = Instant::now();
        let wake_ups = |crowded: bool| -> Vec<usize> {
            let mut timers = Timers {
                heap: BinaryHeap::new(),
                wake_at: None,
            };
            for us in [5u64, 15, 45, 120] {
                timers.heap.push(Entry {
                    at: t0 + Duration::from_micros(us),
                    waker: Waker::noop().clone(),
                });
            }
            assert_eq!(timers.serve(t0, crowded), 0, "nothing is due yet");
            let mut woken = Vec::new();
            while let Some(at) = timers.wake_at {
                woken.push(timers.serve(at, crowded));
            }
            woken
        };
        assert_eq!(wake_ups(false), [1, 1, 1, 1]);
        assert_eq!(COALESCE_WITHIN, Duration::from_micros(50));
        assert_eq!(wake_ups(true), [3, 1]);
    }

    #[test]
    fn a_sleep_spins_only_within_the_window_and_only_when_few_sleeps_are_pending() {
        assert!(spins(Duration::from_micros(1), false));
        assert!(spins(SPIN_WITHIN, false));
        assert!(!spins(SPIN_WITHIN + Duration::from_nanos(1), false));
        assert!(!spins(Duration::from_micros(1), true));
        assert!(!spins(Duration::ZERO + Duration::from_nanos(1), true));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn with_many_sleeps_pending_short_sleeps_still_end_on_time_and_never_early() {
        // More sleeps pending than the spin allows: the short ones are woken by the timer thread
        // at their deadline instead of spinning, and each still ends, none before its deadline.
        let crowd: Vec<Sleep> = (0..=SPIN_MAX_SLEEPERS)
            .map(|_| sleep(Duration::from_millis(19)))
            .collect();
        assert!(SLEEPERS.load(AtomicOrdering::Relaxed) > SPIN_MAX_SLEEPERS);
        for micros in [30u64, 100, 300] {
            let delay = Duration::from_micros(micros);
            let t = Instant::now();
            sleep(delay).await;
            assert!(t.elapsed() >= delay, "{micros} µs: ended early");
        }
        drop(crowd);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_timer_thread_asks_for_a_one_nanosecond_timer_slack() {
        let wheel = wheel().expect("the timer thread starts");
        // The thread sets its slack before it first waits; a wake-up it has served proves it ran.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        struct Tell(Mutex<std::sync::mpsc::Sender<()>>);
        impl std::task::Wake for Tell {
            fn wake(self: std::sync::Arc<Self>) {
                let _ = self.0.lock().map(|t| t.send(()));
            }
        }
        let waker = Waker::from(std::sync::Arc::new(Tell(Mutex::new(tx))));
        wheel.add(Instant::now() + Duration::from_micros(100), waker);
        rx.recv_timeout(Duration::from_secs(30))
            .expect("the timer thread woke the waker");
        assert!(SLACK_SET.load(std::sync::atomic::Ordering::Relaxed));
    }

    #[tokio::test(start_paused = true)]
    async fn under_the_paused_clock_the_tokio_deadline_still_ends_the_sleep() {
        let t = tokio::time::Instant::now();
        sleep(Duration::from_millis(5)).await;
        assert!(t.elapsed() >= Duration::from_millis(5));
        let t = tokio::time::Instant::now();
        sleep(Duration::from_secs(60)).await;
        assert_eq!(t.elapsed().as_secs(), 60);
    }

    #[tokio::test]
    async fn many_concurrent_sleeps_all_end() {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..500u64 {
            set.spawn(sleep(Duration::from_micros(50 + (i * 37) % 900)));
        }
        while let Some(r) = set.join_next().await {
            assert!(r.is_ok());
        }
    }
}
