//! Each partition's control block (`PartitionControl`), which the dispatch loop flips (drain, cancel,
//! hold, stuck) and every record future of the partition obeys: nothing of a partition starts or
//! goes on once its control says it must not (`guarded`, `wait_released`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, Ordering::Relaxed};
use std::task::Poll;

use tokio::sync::{Notify, oneshot};

use super::held::poll_held;
use crate::source::Lease;

const RUNNING: u8 = 0;

/// Records not yet started are skipped (revoke: the new owner will read them).
const DRAINING: u8 = 1;

/// Everything of the partition stops, running handlers included.
const CANCELLED: u8 = 2;

const NO_STUCK: i64 = i64::MIN;

/// Control state of one partition as one worker sees it. Each worker has its own copy so the
/// per-record `Arc` clone touches a cache line no other core writes; the dispatch loop flips all copies.
#[derive(Debug)]
pub(crate) struct PartitionControl {
    pub(crate) slot: u32,
    pub(crate) epoch: u32,
    /// Hash of topic and partition, salt for the retry jitter.
    pub(crate) salt: u64,
    state: AtomicU8,
    /// Set while the source's ownership is in doubt: no handler call may start (see
    /// [`wait_released`]).
    held: AtomicBool,
    /// The source's lease on its partitions: no handler call starts while it lapsed.
    lease: Option<Arc<dyn Lease>>,
    stuck: AtomicI64,
    /// A stuck flag the record's call set aside because it was waiting for its endpoint, once
    /// that wait ended: the dispatch loop restarts the record's stuck clock
    /// ([`PartitionControl::take_declined`]).
    declined: AtomicI64,
    pub(crate) notify: Notify,
    /// Dropped with the last reference, which every record future of the partition holds:
    /// its receiver ([`PartitionControl::on_release`]) completes once none of them runs any more.
    released: std::sync::Mutex<Option<oneshot::Sender<()>>>,
}

/// Why a guarded future was stopped.
pub(crate) enum Stop {
    Cancelled,
    Stuck,
}

impl PartitionControl {
    pub(crate) fn new(slot: u32, epoch: u32, salt: u64, lease: Option<Arc<dyn Lease>>) -> Self {
        Self {
            slot,
            epoch,
            salt,
            state: AtomicU8::new(RUNNING),
            held: AtomicBool::new(false),
            lease,
            stuck: AtomicI64::new(NO_STUCK),
            declined: AtomicI64::new(NO_STUCK),
            notify: Notify::new(),
            released: std::sync::Mutex::new(None),
        }
    }

    /// Completes once this control block is gone: the engine, the worker and every record
    /// future (handler call, retry wait, reply or dead-letter write) of the partition have let
    /// go of it.
    pub(crate) fn on_release(&self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        *self
            .released
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tx);
        rx
    }

    pub(crate) fn drain(&self) {
        // Only move forward: a cancelled partition must not become draining again.
        let _ = self
            .state
            .compare_exchange(RUNNING, DRAINING, Relaxed, Relaxed);
        // Wakes records held at `wait_released` (they give up); other waiters just re-check.
        self.notify.notify_waiters();
    }

    pub(crate) fn cancel(&self) {
        self.state.store(CANCELLED, Relaxed);
        self.notify.notify_waiters();
    }

    /// Holds (`true`) or releases the start of handler calls of this partition.
    pub(crate) fn hold(&self, held: bool) {
        self.held.store(held, Relaxed);
        if !held {
            self.notify.notify_waiters();
        }
    }

    /// The source's lease on this partition, for a running handler call to read
    /// ([`crate::ownership_holds`]).
    pub(crate) fn lease(&self) -> Option<&Arc<dyn Lease>> {
        self.lease.as_ref()
    }

    /// Whether no handler call of this partition may start now: held, or the source's lease
    /// lapsed.
    pub(crate) fn is_held(&self) -> bool {
        self.held.load(Relaxed) || self.lease_lapsed()
    }

    fn lease_lapsed(&self) -> bool {
        !super::ownership::lease_holds(self.lease.as_ref())
    }

    pub(crate) fn flag_stuck(&self, offset: i64) {
        self.stuck.store(offset, Relaxed);
        self.notify.notify_waiters();
    }

    /// Clears the stuck flag; the offset it named, if any.
    fn take_stuck_flag(&self) -> Option<i64> {
        let offset = self.stuck.swap(NO_STUCK, Relaxed);
        (offset != NO_STUCK).then_some(offset)
    }

    /// The offset whose stuck clock must restart: its call was waiting for its endpoint when
    /// the stuck-gap timeout ran out, and that wait has ended.
    pub(crate) fn take_declined(&self) -> Option<i64> {
        let offset = self.declined.swap(NO_STUCK, Relaxed);
        (offset != NO_STUCK).then_some(offset)
    }

    pub(crate) fn stopping(&self) -> bool {
        self.state.load(Relaxed) != RUNNING
    }

    /// Whether a guarded future of record `offset` must stop. `between_attempts`: the record
    /// waits for its next attempt (a retry backoff), so no handler call runs that a drain could
    /// wait for: a draining partition (revoke, shutdown) abandons it at once, and the next owner
    /// (or the restarted process) handles it from the watermark.
    pub(crate) fn check(
        &self,
        offset: i64,
        stuck_applies: bool,
        between_attempts: bool,
    ) -> Option<Stop> {
        self.check_range(offset, offset, stuck_applies, between_attempts)
    }

    /// [`PartitionControl::check`] for a batch whose records `lo..=hi` are not reported yet: the
    /// stuck flag names the partition's oldest unreported offset, which may be a record of the
    /// batch that is done but waits for the batch to end, so any offset of the range counts.
    pub(crate) fn check_range(
        &self,
        lo: i64,
        hi: i64,
        stuck_applies: bool,
        between_attempts: bool,
    ) -> Option<Stop> {
        let state = self.state.load(Relaxed);
        if state == CANCELLED || (between_attempts && state == DRAINING) {
            Some(Stop::Cancelled)
        } else if stuck_applies && (lo..=hi).contains(&self.stuck.load(Relaxed)) {
            Some(Stop::Stuck)
        } else {
            None
        }
    }
}

/// Runs `fut` until it completes or the partition stops it.
///
/// A stuck flag does not stop a call that is waiting for its endpoint
/// ([`crate::waiting_for_endpoint`]: a circuit holding requests, a `Retry-After`, a queue for a
/// connection): the record is not stuck, the endpoint is. The flag is set aside, and once the
/// wait ends the dispatch loop restarts the record's stuck clock ([`PartitionControl::take_declined`]),
/// so the record's own work gets the whole stuck-gap timeout.
///
/// Race walk-through: the `Notified` is created before the flags are read, and tokio guarantees
/// a `Notified` sees every `notify_waiters` issued after its creation even before it is polled.
/// So if the engine flips a flag after our read, the `Notified` fires and we re-read; if it
/// flipped before, our read sees it. A wake-up for another offset just loops.
pub(crate) fn guarded<'a, F: Future>(
    part: &'a PartitionControl,
    offset: i64,
    stuck_applies: bool,
    between_attempts: bool,
    fut: Pin<&'a mut F>,
) -> impl Future<Output = Result<F::Output, Stop>> + 'a {
    guarded_range(part, offset, offset, stuck_applies, between_attempts, fut)
}

/// [`guarded`] for a batch whose unreported records are `lo..=hi`.
///
/// `fut` is pinned by the caller: taken by value, it would be stored twice in this future (once
/// as the argument, once pinned), and these futures are allocated per retried record.
pub(crate) async fn guarded_range<F: Future>(
    part: &PartitionControl,
    lo: i64,
    hi: i64,
    stuck_applies: bool,
    between_attempts: bool,
    mut fut: Pin<&mut F>,
) -> Result<F::Output, Stop> {
    // Whether the call was waiting for its endpoint when last polled, and a stuck flag set
    // aside meanwhile.
    let mut held = false;
    let mut declined = None;
    loop {
        let mut notified = std::pin::pin!(part.notify.notified());
        match part.check_range(lo, hi, stuck_applies, between_attempts) {
            Some(Stop::Stuck) if held => declined = part.take_stuck_flag().or(declined),
            Some(stop) => return Err(stop),
            None => {}
        }
        let step = std::future::poll_fn(|cx| {
            let (polled, now_held) = poll_held(|| fut.as_mut().poll(cx));
            if let Poll::Ready(out) = polled {
                return Poll::Ready(Some(out));
            }
            if !now_held {
                if let Some(offset) = declined.take() {
                    part.declined.store(offset, Relaxed);
                }
            }
            held = now_held;
            notified.as_mut().poll(cx).map(|()| None)
        })
        .await;
        if let Some(out) = step {
            return Ok(out);
        }
    }
}

/// Waits while the partition is held (its ownership is in doubt), before a handler call or a
/// dead-letter write starts; callers check [`PartitionControl::is_held`] first (one atomic load,
/// and a clock read when the source has a lease) and box this slow path. `Ok` to go on; `Err` when the partition is cancelled, or drains (a revoke
/// or shutdown) while held: the record was not started, so it is abandoned like a queued one and
/// the next owner handles it.
///
/// Race walk-through as in [`guarded`]: the `Notified` exists before the flags are read, and a
/// release (`hold(false)`) or a cancel notifies after it changed its flag.
pub(crate) async fn wait_released(part: &PartitionControl) -> Result<(), Stop> {
    loop {
        let notified = part.notify.notified();
        let state = part.state.load(Relaxed);
        if state == CANCELLED {
            return Err(Stop::Cancelled);
        }
        if !part.is_held() {
            return Ok(());
        }
        if state == DRAINING {
            return Err(Stop::Cancelled);
        }
        if part.held.load(Relaxed) {
            notified.await;
        } else {
            // Only the lease holds it, and a renewal sends no notification.
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(LEASE_RECHECK) => {}
            }
        }
    }
}

/// How often a call held only by a lapsed lease looks at it again.
const LEASE_RECHECK: std::time::Duration = std::time::Duration::from_millis(50);
