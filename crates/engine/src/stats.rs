//! A cloneable read-only view of the engine's counters, for CLIs, tests and embedding crates.

use std::collections::HashMap;
use std::sync::atomic::{
    AtomicBool, AtomicI64, AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::record::TopicPartition;
use crate::tracker::OldestInFlight;

/// Sessions with ordering violations remembered by [`EngineStats::violations_by_session`];
/// beyond it only the total grows, so a flood of violations cannot grow memory without bound.
const MAX_VIOLATING_SESSIONS: usize = 10_000;

/// Per-partition state as of the last housekeeping tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStats {
    /// The partition.
    pub partition: TopicPartition,
    /// Commit point (next offset to read), i.e. the watermark + 1.
    pub commit_offset: i64,
    /// Last high watermark the source reported.
    pub high_watermark: Option<i64>,
    /// `high_watermark - commit_offset`.
    pub lag: Option<i64>,
    /// Records admitted and not finished.
    pub in_flight: usize,
    /// Bytes charged for them.
    pub buffered_bytes: usize,
    /// Whether fetching is paused for backpressure.
    pub paused: bool,
    /// The record holding the watermark back, if any.
    pub oldest_in_flight: Option<OldestInFlight>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) handled: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) dead_lettered: AtomicU64,
    pub(crate) deduplicated: AtomicU64,
    pub(crate) stuck: AtomicU64,
    pub(crate) abandoned: AtomicU64,
    pub(crate) active_sessions: AtomicI64,
    pub(crate) violations: AtomicU64,
    pub(crate) commits: AtomicU64,
    /// When the last successful commit was acknowledged: µs since the Unix epoch (0: none yet).
    pub(crate) last_commit_us: AtomicU64,
    pub(crate) commit_failures: AtomicU64,
    pub(crate) dlq_stalled: AtomicU64,
    pub(crate) replies: AtomicU64,
    pub(crate) reply_failures: AtomicU64,
    /// The handler reported itself unavailable at the engine's last check.
    pub(crate) handler_unavailable: AtomicBool,
    pub(crate) violations_by_session: Mutex<HashMap<Bytes, u64>>,
    pub(crate) partitions: Mutex<Vec<PartitionStats>>,
    /// The smallest count of terminal records (handled plus dead-lettered) a
    /// [`EngineStats::wait_terminal`] waits for; `u64::MAX` while none waits.
    wake_at: AtomicU64,
    /// Wakes the waiters of [`EngineStats::wait_terminal`] once `wake_at` is reached.
    progress: tokio::sync::Notify,
}

impl Default for Inner {
    fn default() -> Self {
        Self {
            handled: AtomicU64::default(),
            failed: AtomicU64::default(),
            retried: AtomicU64::default(),
            dead_lettered: AtomicU64::default(),
            deduplicated: AtomicU64::default(),
            stuck: AtomicU64::default(),
            abandoned: AtomicU64::default(),
            active_sessions: AtomicI64::default(),
            violations: AtomicU64::default(),
            commits: AtomicU64::default(),
            last_commit_us: AtomicU64::default(),
            commit_failures: AtomicU64::default(),
            dlq_stalled: AtomicU64::default(),
            replies: AtomicU64::default(),
            reply_failures: AtomicU64::default(),
            handler_unavailable: AtomicBool::default(),
            violations_by_session: Mutex::default(),
            partitions: Mutex::default(),
            wake_at: AtomicU64::new(u64::MAX),
            progress: tokio::sync::Notify::new(),
        }
    }
}

impl Inner {
    /// Adds a worker's terminal records (`handled`, `dead_lettered`) to the totals and wakes
    /// the [`EngineStats::wait_terminal`] callers whose count is reached.
    pub(crate) fn add_terminal(&self, handled: u64, dead_lettered: u64) {
        // Sequentially consistent with the waiter's registration (`wait_terminal`): either the
        // waiter sees these counts when it checks after registering, or this sees its target.
        let add = |total: &AtomicU64, n: u64| match n {
            0 => total.load(SeqCst),
            n => total.fetch_add(n, SeqCst).saturating_add(n),
        };
        let h = add(&self.handled, handled);
        let d = add(&self.dead_lettered, dead_lettered);
        if h.saturating_add(d) >= self.wake_at.load(SeqCst) {
            // Every waiter wakes and registers its target again if it is not reached yet.
            self.wake_at.store(u64::MAX, SeqCst);
            self.progress.notify_waiters();
        }
    }
}

/// Live counters of one engine. Cheap to clone; reads never block the engine for long.
#[derive(Debug, Clone, Default)]
pub struct EngineStats(pub(crate) Arc<Inner>);

impl EngineStats {
    /// Records handled successfully.
    pub fn handled(&self) -> u64 {
        self.0.handled.load(Relaxed)
    }
    /// Handler attempts that failed (transient, permanent or timed out).
    pub fn failed(&self) -> u64 {
        self.0.failed.load(Relaxed)
    }
    /// Retries scheduled.
    pub fn retried(&self) -> u64 {
        self.0.retried.load(Relaxed)
    }
    /// Records whose dead-letter write was acknowledged.
    pub fn dead_lettered(&self) -> u64 {
        self.0.dead_lettered.load(Relaxed)
    }
    /// Records in a terminal state: handled plus dead-lettered.
    pub fn terminal(&self) -> u64 {
        self.handled().saturating_add(self.dead_lettered())
    }
    /// Completes once at least `n` records are terminal (handled plus dead-lettered): at the
    /// worker's report of the record that reaches `n`, not at a later poll. Cancel safe; any
    /// number of callers may wait at once.
    pub async fn wait_terminal(&self, n: u64) {
        loop {
            let notified = self.0.progress.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the target and the check below, so a report between the check
            // and the await still wakes this waiter.
            notified.as_mut().enable();
            self.0.wake_at.fetch_min(n, SeqCst);
            if self
                .0
                .handled
                .load(SeqCst)
                .saturating_add(self.0.dead_lettered.load(SeqCst))
                >= n
            {
                return;
            }
            notified.await;
        }
    }
    /// Records skipped as duplicates by event id.
    pub fn deduplicated(&self) -> u64 {
        self.0.deduplicated.load(Relaxed)
    }
    /// Records cancelled by the stuck-gap timeout.
    pub fn stuck(&self) -> u64 {
        self.0.stuck.load(Relaxed)
    }
    /// Records given up without finishing (revoke, loss, shutdown deadline): never committed.
    pub fn abandoned(&self) -> u64 {
        self.0.abandoned.load(Relaxed)
    }
    /// Whether the handler was available at the engine's last check (`Handler::available`,
    /// read every tick): while it is not, records wait for it and the stuck-gap rule is
    /// suspended.
    pub fn handler_available(&self) -> bool {
        !self.0.handler_unavailable.load(Relaxed)
    }
    /// Session tasks alive now.
    pub fn active_sessions(&self) -> i64 {
        self.0.active_sessions.load(Relaxed)
    }
    /// Ordering violations seen by the sequence-header checker.
    pub fn ordering_violations(&self) -> u64 {
        self.0.violations.load(Relaxed)
    }
    /// Successful commits.
    pub fn commits(&self) -> u64 {
        self.0.commits.load(Relaxed)
    }
    /// When the last successful commit was acknowledged (wall clock), `None` before the first.
    /// After [`crate::Engine::run`] returned from a clean shutdown this is when the final
    /// watermarks were committed (or, if the drain found nothing new to commit, when the commit
    /// that already covered them was): the end of a run as a throughput figure counts it, and how
    /// long ago a consumer last made progress on the group's offsets while it runs.
    pub fn last_commit(&self) -> Option<std::time::SystemTime> {
        match self.0.last_commit_us.load(Relaxed) {
            0 => None,
            us => Some(std::time::UNIX_EPOCH + std::time::Duration::from_micros(us)),
        }
    }
    pub(crate) fn set_last_commit(&self, at: std::time::SystemTime) {
        let us = at.duration_since(std::time::UNIX_EPOCH).map_or(1, |d| {
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
        });
        self.0.last_commit_us.store(us, Relaxed);
    }
    /// Commits that failed (each is retried; see [`crate::EngineConfig::final_commit_timeout`]).
    pub fn commit_failures(&self) -> u64 {
        self.0.commit_failures.load(Relaxed)
    }
    /// Records whose dead-letter write had not been acknowledged when the stuck-gap timeout
    /// passed (the DLQ is failing; the watermark stays held and the write is retried).
    pub fn dlq_stalled(&self) -> u64 {
        self.0.dlq_stalled.load(Relaxed)
    }
    /// Replies acknowledged by the reply sink.
    pub fn replies(&self) -> u64 {
        self.0.replies.load(Relaxed)
    }
    /// Reply writes that failed (each is retried; the record waits).
    pub fn reply_failures(&self) -> u64 {
        self.0.reply_failures.load(Relaxed)
    }
    /// Ordering violations per session id (at most 10,000 sessions are remembered).
    pub fn violations_by_session(&self) -> HashMap<Bytes, u64> {
        self.0
            .violations_by_session
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }
    /// Per-partition state as of the last housekeeping tick.
    pub fn partitions(&self) -> Vec<PartitionStats> {
        self.0
            .partitions
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default()
    }

    pub(crate) fn add_violation(&self, session: &[u8]) {
        self.0.violations.fetch_add(1, Relaxed);
        if let Ok(mut m) = self.0.violations_by_session.lock() {
            if let Some(c) = m.get_mut(session) {
                *c += 1;
            } else if m.len() < MAX_VIOLATING_SESSIONS {
                m.insert(Bytes::copy_from_slice(session), 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    fn poll_once(f: std::pin::Pin<&mut impl Future<Output = ()>>) -> Poll<()> {
        f.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_wait_for_terminal_records_ends_at_the_report_that_reaches_its_count() {
        let stats = EngineStats::default();
        let mut three = pin!(stats.wait_terminal(3));
        let mut five = pin!(stats.wait_terminal(5));
        assert!(poll_once(three.as_mut()).is_pending());
        assert!(poll_once(five.as_mut()).is_pending());
        stats.0.add_terminal(2, 0);
        assert!(poll_once(three.as_mut()).is_pending());
        // A dead letter is terminal too.
        stats.0.add_terminal(0, 1);
        assert_eq!(stats.terminal(), 3);
        assert!(poll_once(three.as_mut()).is_ready());
        // The other waiter woke as well, found its count not reached and waits on.
        assert!(poll_once(five.as_mut()).is_pending());
        stats.0.add_terminal(1, 0);
        assert!(poll_once(five.as_mut()).is_pending());
        stats.0.add_terminal(1, 0);
        assert!(poll_once(five.as_mut()).is_ready());
        // A count already reached completes at once.
        assert!(poll_once(pin!(stats.wait_terminal(4))).is_ready());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_for_terminal_records_wakes_from_another_thread() {
        let stats = EngineStats::default();
        let waiter = tokio::spawn({
            let stats = stats.clone();
            async move { stats.wait_terminal(1_000).await }
        });
        let reporter = std::thread::spawn({
            let stats = stats.clone();
            move || {
                for _ in 0..1_000 {
                    stats.0.add_terminal(1, 0);
                }
            }
        });
        waiter.await.unwrap();
        reporter.join().unwrap();
        assert_eq!(stats.handled(), 1_000);
    }
}
