//! Attempt timeouts of one worker's record futures, with one timer for the worker instead of
//! one per waiting attempt.
//!
//! A tokio timeout around every handler call that waits (an HTTP request, a process, a sleep)
//! registers a timer in tokio's wheel when the call first waits and removes it when the call
//! ends: two trips through the wheel's shared lock per call, for a limit that almost never fires.
//! Every attempt gets the same limit (`EngineConfig::attempt_timeout`), so deadlines fall due in
//! the order attempts start: a queue in start order is a deadline queue. A waiting attempt adds
//! itself to its worker's queue (a lock no other thread takes), leaves it when it ends, and the
//! worker loop keeps a single tokio timer for the earliest deadline; when it fires, the loop takes
//! the due entries off the queue and wakes their attempts, which then end with a timeout. An
//! attempt that ends on its first poll never touches the queue.
//!
//! An attempt pending on a wait for its endpoint (`crate::waiting_for_endpoint`: a circuit
//! hold, a `Retry-After`) leaves the queue; the first poll after which it waits on anything
//! else adds it again with the whole limit from then, so start order stays deadline order.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use crate::handoff::held::poll_held;

/// The waiting attempts of one worker, in the order they started waiting.
#[derive(Default)]
pub(crate) struct Deadlines {
    queue: Mutex<Queue>,
    /// An attempt was added to an empty queue: the worker's timer may not be set for it. The
    /// worker clears it where it sets the timer anyway, and takes it while it waits
    /// ([`Deadlines::take_added`]), when it polls its attempts.
    added: AtomicBool,
}

#[derive(Default)]
struct Queue {
    /// In token order (so in deadline order); `waker: None` marks an attempt that ended, kept
    /// until it reaches the front or the queue is compacted.
    entries: VecDeque<Entry>,
    /// The next attempt's token.
    next: u64,
    /// Entries whose attempt still waits.
    live: usize,
}

struct Entry {
    token: u64,
    at: Instant,
    waker: Option<Waker>,
}

impl Queue {
    fn find(&self, token: u64) -> Option<usize> {
        // Tokens are consecutive until a compaction drops some: then by search.
        let first = self.entries.front()?.token;
        let i = usize::try_from(token.checked_sub(first)?).ok()?;
        if self.entries.get(i).is_some_and(|e| e.token == token) {
            return Some(i);
        }
        self.entries.binary_search_by_key(&token, |e| e.token).ok()
    }

    /// Drops ended entries from the front, and all of them once they outnumber the live ones
    /// (an attempt that waits long keeps the entries behind it from reaching the front).
    fn tidy(&mut self) {
        while self.entries.front().is_some_and(|e| e.waker.is_none()) {
            self.entries.pop_front();
        }
        if self.entries.len() > 2 * self.live + 64 {
            self.entries.retain(|e| e.waker.is_some());
        }
    }
}

impl Deadlines {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an attempt due at `at` (no earlier than any added before) to be woken through
    /// `waker`; returns its token.
    fn add(&self, at: Instant, waker: &Waker) -> u64 {
        let mut q = self.lock();
        let token = q.next;
        q.next += 1;
        if q.live == 0 {
            self.added.store(true, Relaxed);
        }
        q.live += 1;
        q.entries.push_back(Entry {
            token,
            at,
            waker: Some(waker.clone()),
        });
        token
    }

    /// Whether the attempt `token` is past its deadline (the worker took it off the queue);
    /// otherwise keeps `waker` as the one to wake.
    fn expired(&self, token: u64, waker: &Waker) -> bool {
        let mut q = self.lock();
        let Some(i) = q.find(token) else {
            return true;
        };
        if let Some(w) = &mut q.entries[i].waker
            && !w.will_wake(waker)
        {
            w.clone_from(waker);
        }
        false
    }

    /// The attempt `token` ended (or its future was dropped).
    fn remove(&self, token: u64) {
        let mut q = self.lock();
        if let Some(i) = q.find(token)
            && q.entries[i].waker.take().is_some()
        {
            q.live -= 1;
            q.tidy();
        }
    }

    /// Whether an attempt was added to an empty queue since the last call (or
    /// [`Deadlines::clear_added`]).
    pub(crate) fn take_added(&self) -> bool {
        self.added.swap(false, Relaxed)
    }

    /// Forgets the attempts added to an empty queue: the worker is about to set its timer.
    pub(crate) fn clear_added(&self) {
        self.added.store(false, Relaxed);
    }

    /// The earliest deadline of a waiting attempt, if any.
    pub(crate) fn earliest(&self) -> Option<Instant> {
        let mut q = self.lock();
        q.tidy();
        q.entries.front().map(|e| e.at)
    }

    /// Takes every attempt due by `now` off the queue and wakes it; it then ends with a timeout.
    pub(crate) fn expire(&self, now: Instant) {
        let mut due = Vec::new();
        {
            let mut q = self.lock();
            q.tidy();
            while q.entries.front().is_some_and(|e| e.at <= now) {
                if let Some(w) = q.entries.pop_front().and_then(|e| e.waker) {
                    q.live -= 1;
                    due.push(w);
                }
            }
            q.tidy();
        }
        // Woken outside the lock: a waker may poll its future at once.
        due.into_iter().for_each(Waker::wake);
    }
}

/// `fut` limited to `limit` once it waits, through `deadlines`: `Err(())` when it ran out.
pub(crate) fn with_deadline<'a, F: Future>(
    deadlines: &'a Deadlines,
    limit: Duration,
    fut: Pin<&'a mut F>,
) -> WithDeadline<'a, F> {
    WithDeadline {
        deadlines,
        limit,
        fut,
        token: None,
    }
}

/// The future of [`with_deadline`].
pub(crate) struct WithDeadline<'a, F> {
    deadlines: &'a Deadlines,
    limit: Duration,
    fut: Pin<&'a mut F>,
    token: Option<u64>,
}

impl<F: Future> Future for WithDeadline<'_, F> {
    type Output = Result<F::Output, ()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let (polled, held) = poll_held(|| this.fut.as_mut().poll(cx));
        if let Poll::Ready(out) = polled {
            if let Some(token) = this.token.take() {
                this.deadlines.remove(token);
            }
            return Poll::Ready(Ok(out));
        }
        if held {
            // Waiting for the endpoint is not the attempt's work: no deadline meanwhile.
            if let Some(token) = this.token.take() {
                this.deadlines.remove(token);
            }
            return Poll::Pending;
        }
        match this.token {
            None => {
                let at = Instant::now() + this.limit;
                this.token = Some(this.deadlines.add(at, cx.waker()));
            }
            Some(token) => {
                if this.deadlines.expired(token, cx.waker()) {
                    this.token = None;
                    return Poll::Ready(Err(()));
                }
            }
        }
        Poll::Pending
    }
}

impl<F> Drop for WithDeadline<'_, F> {
    fn drop(&mut self) {
        if let Some(token) = self.token.take() {
            self.deadlines.remove(token);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count(AtomicUsize::new(0)));
        (c.clone(), Waker::from(c))
    }

    fn len(d: &Deadlines) -> usize {
        d.lock().entries.len()
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_attempt_ends_when_the_worker_expires_its_deadline() {
        let d = Deadlines::default();
        let (count, w) = waker();
        let mut cx = Context::from_waker(&w);
        let mut never = pin!(std::future::pending::<()>());
        let mut timed = pin!(with_deadline(&d, Duration::from_secs(1), never.as_mut()));
        assert!(timed.as_mut().poll(&mut cx).is_pending());
        let due = d.earliest().unwrap();
        assert_eq!(due, Instant::now() + Duration::from_secs(1));
        // Not due yet: nothing is woken and the attempt waits on.
        d.expire(due - Duration::from_millis(1));
        assert_eq!(count.0.load(Ordering::Relaxed), 0);
        assert!(timed.as_mut().poll(&mut cx).is_pending());
        d.expire(due);
        assert_eq!(count.0.load(Ordering::Relaxed), 1);
        assert_eq!(timed.as_mut().poll(&mut cx), Poll::Ready(Err(())));
        assert_eq!(d.earliest(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_that_ends_first_leaves_the_queue_and_is_not_woken() {
        let d = Deadlines::default();
        let (count, w) = waker();
        let mut cx = Context::from_waker(&w);
        // Dropped while waiting: its entry goes with it.
        let mut never = Box::pin(std::future::pending::<()>());
        let mut timed = Box::pin(with_deadline(&d, Duration::from_secs(1), never.as_mut()));
        assert!(timed.as_mut().poll(&mut cx).is_pending());
        assert!(d.earliest().is_some());
        drop(timed);
        assert_eq!(d.earliest(), None);
        // Ends on its second poll: its entry goes then.
        let mut polls = 0;
        let mut second = Box::pin(std::future::poll_fn(|_| {
            polls += 1;
            if polls == 2 {
                Poll::Ready(7)
            } else {
                Poll::Pending
            }
        }));
        let mut timed = Box::pin(with_deadline(&d, Duration::from_secs(1), second.as_mut()));
        assert!(timed.as_mut().poll(&mut cx).is_pending());
        assert!(d.earliest().is_some());
        assert_eq!(timed.as_mut().poll(&mut cx), Poll::Ready(Ok(7)));
        assert_eq!(d.earliest(), None);
        d.expire(Instant::now() + Duration::from_secs(5));
        assert_eq!(count.0.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_waker_woken_is_the_last_one_polled_with() {
        let d = Deadlines::default();
        let (first, w1) = waker();
        let (second, w2) = waker();
        let mut never = pin!(std::future::pending::<()>());
        let mut timed = pin!(with_deadline(&d, Duration::from_secs(1), never.as_mut()));
        assert!(
            timed
                .as_mut()
                .poll(&mut Context::from_waker(&w1))
                .is_pending()
        );
        assert!(
            timed
                .as_mut()
                .poll(&mut Context::from_waker(&w2))
                .is_pending()
        );
        d.expire(Instant::now() + Duration::from_secs(1));
        assert_eq!(first.0.load(Ordering::Relaxed), 0);
        assert_eq!(second.0.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn ended_attempts_behind_a_long_wait_do_not_pile_up() {
        let d = Deadlines::default();
        let (_count, w) = waker();
        let mut cx = Context::from_waker(&w);
        let mut never = pin!(std::future::pending::<()>());
        let mut long = pin!(with_deadline(&d, Duration::from_secs(30), never.as_mut()));
        assert!(long.as_mut().poll(&mut cx).is_pending());
        for _ in 0..10_000 {
            let mut short = Box::pin(std::future::pending::<()>());
            let mut timed = Box::pin(with_deadline(&d, Duration::from_secs(30), short.as_mut()));
            assert!(timed.as_mut().poll(&mut cx).is_pending());
        }
        // The long wait's entry and at most a bounded tail of ended ones.
        assert!(len(&d) <= 2 + 64 + 1, "{} entries", len(&d));
        assert_eq!(d.lock().live, 1);
        // And the long wait still ends on time.
        d.expire(Instant::now() + Duration::from_secs(30));
        assert_eq!(long.as_mut().poll(&mut cx), Poll::Ready(Err(())));
        assert_eq!(d.earliest(), None);
    }
}
