//! A worker's loop: its table of active sessions and a `FuturesUnordered` holding at most one
//! record future per session, so a session's records start one after another while sessions run
//! side by side. Biased to record futures that woke (a retry come due) before new records, and
//! about one batch from its channel per turn.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use hashbrown::HashTable;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::attempt::process;
use super::context::{Ctx, Finished, Outcome};
use super::session::{Counts, Session, SessionId, session_id};
use crate::config::DlqMode;
use crate::handler::{DeadLetterSink, Handler};
use crate::handoff::control::PartitionControl;
use crate::handoff::work::{BATCH_MAX, Completion, Work, WorkerMsg};
use crate::parked::Decision;
use crate::record::Record;

/// Records a worker clears to start per loop turn before it starts them.
pub(super) const READY_BATCH: usize = 2048;

/// Most emptied record boxes a worker keeps for reuse (~300 bytes each, see [`Scheduler::boxed`]):
/// enough for the records one loop turn starts (up to `READY_BATCH` cleared, plus the batch that
/// crossed it), so a turn of records that finish at once allocates nothing. Halved at every
/// session sweep, so an idle worker gives them back.
pub(super) const SPARE_BOXES: usize = READY_BATCH + BATCH_MAX;

/// What decides when a worker's records start, and what it reports back: the partitions'
/// control blocks, the records cleared to start and the boxes they start in, sessions lingering
/// for a batch, and the completions and counts for the dispatch loop. Kept apart from the session
/// table and the futures, so a session borrowed from the table and this can be mutated together
/// (disjoint fields).
struct Scheduler<'c, H, D> {
    ctx: &'c Ctx<H, D>,
    parts: Vec<Option<Arc<PartitionControl>>>,
    /// Records cleared to start; `run` turns them into futures.
    ready: Vec<(Arc<PartitionControl>, Box<Work>)>,
    /// Emptied boxes for the next records (see [`Scheduler::boxed`]); boxed because their addresses
    /// are what moves.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Work>>,
    out: Vec<Completion>,
    counts: Counts,
    /// Sessions whose next record waits for its batch to fill (`EngineConfig::batch_linger`):
    /// (until when, session hash, the session's `linger` token), in deadline order (every wait
    /// is equally long). An entry whose session started early, or is gone, is skipped.
    lingers: VecDeque<(Instant, u64, u64)>,
    /// The next `linger` token.
    linger_token: u64,
}

struct State<'c, H, D> {
    sessions: HashTable<Session>,
    sched: Scheduler<'c, H, D>,
}

impl<H: Handler, D: DeadLetterSink> Scheduler<'_, H, D> {
    fn part(&self, slot: u32, epoch: u32) -> Option<&Arc<PartitionControl>> {
        self.parts
            .get(slot as usize)
            .and_then(Option::as_ref)
            .filter(|p| p.epoch == epoch)
    }

    /// Puts a record cleared to start in a box of this worker's own (a spare one if there is
    /// one), so the ready list, the record's future and its report move a pointer, not the
    /// ~300-byte record, a copy a saturated worker would otherwise pay several times per record.
    /// Queued records wait in their session's queue unboxed, so the boxes in use are the
    /// records running at once; a finished record's box is emptied in place and reused
    /// ([`Scheduler::recycle`]): allocated and freed on this worker's thread, and mostly not at all.
    fn boxed(&mut self, w: Work) -> Box<Work> {
        match self.spare.pop() {
            Some(mut b) => {
                *b = w;
                b
            }
            None => Box::new(w),
        }
    }

    /// Drops a record (in its box) and keeps the box for the next one.
    fn recycle(&mut self, mut b: Box<Work>) {
        b.empty();
        if self.spare.len() < SPARE_BOXES {
            self.spare.push(b);
        }
    }

    /// Clears a record to start. Returns false when it finished on the spot (partition stopping,
    /// duplicate event id); then the caller moves on to the session's next record.
    fn begin(&mut self, mut w: Work, sess: Option<&mut Session>) -> bool {
        let Some(part) = self.part(w.slot, w.epoch).cloned() else {
            return false;
        };
        if part.stopping() {
            self.out.push(Completion {
                slot: w.slot,
                epoch: w.epoch,
                offset: w.record.offset,
                done: false,
            });
            self.counts.abandoned += 1;
            return false;
        }
        let ctx = self.ctx;
        if let Some(sess) = sess {
            let cfg = &ctx.config;
            if cfg.batch_max > 1
                && !cfg.batch_linger.is_zero()
                && !sess.lingered
                && !sess.parked
                && w.parked.is_none()
                && sess.queue.len() + 1 < cfg.batch_max
            {
                // Wait for the batch to fill: the record goes back to the front of the queue,
                // and the session stays busy until the wait ends (`State::end_linger`).
                let token = self.linger_token;
                self.linger_token += 1;
                self.lingers
                    .push_back((Instant::now() + cfg.batch_linger, sess.hash, token));
                sess.linger = Some(token);
                sess.busy = true;
                sess.queue.push_front(w);
                return true;
            }
            if sess.epoch != w.epoch && ctx.config.dlq_mode == DlqMode::ParkSession {
                // A new assignment: the parked set was loaded for it since.
                sess.parked = ctx.parked.contains(&sess.tp, &sess.id);
            }
            if sess.parked {
                match ctx.parked.decide(&sess.tp, &sess.id, &w.record) {
                    Decision::Parked(reason) => w.parked = Some(reason.into_boxed_str()),
                    // A replay round restarts the session's sequence.
                    Decision::Replay { first } => {
                        if first {
                            sess.last_seq = None;
                        }
                    }
                    Decision::Before => {}
                    Decision::Released => {
                        // Released: what follows is normally the replay of the parked records,
                        // which restarts the session's sequence.
                        sess.parked = false;
                        sess.last_seq = None;
                    }
                }
            }
            if !self.screen(&w, sess) {
                return false;
            }
            sess.busy = true;
            sess.lingered = false;
            // A parked session's records are decided one by one (a replay round's record is
            // handled, the records behind it may not be): no batch while it is parked.
            if ctx.config.batch_max > 1 && w.parked.is_none() && !sess.parked {
                self.gather(&mut w, sess);
            }
        }
        let w = self.boxed(w);
        self.ready.push((part, w));
        true
    }

    /// The per-record checks before a session's record starts: a duplicate event id finishes it
    /// on the spot (returns false, reported done); the sequence checker counts a violation.
    fn screen(&mut self, w: &Work, sess: &mut Session) -> bool {
        let ctx = self.ctx;
        if let Some(name) = &ctx.config.event_id_header {
            if let (Some(store), Some(id)) = (&sess.dedup, w.record.header(name)) {
                if store.seen(id) {
                    self.out.push(Completion {
                        slot: w.slot,
                        epoch: w.epoch,
                        offset: w.record.offset,
                        done: true,
                    });
                    self.counts.deduplicated += 1;
                    return false;
                }
            }
        }
        if sess.epoch != w.epoch {
            sess.epoch = w.epoch;
            sess.last_seq = None;
        }
        if let Some(name) = &ctx.config.seq_header {
            if let Some(seq) = w
                .record
                .header(name)
                .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse::<u64>().ok())
            {
                if sess.last_seq.is_some_and(|last| seq <= last) {
                    ctx.stats.add_violation(&sess.id);
                    ctx.metrics.violations.increment(1);
                    tracing::warn!(session = %String::from_utf8_lossy(&sess.id), seq, last = sess.last_seq, "ordering violation: sequence did not increase");
                }
                sess.last_seq = Some(seq);
            }
        }
        true
    }

    /// Moves the session's queued records that follow `w` into its batch, up to
    /// `batch_max` records and `batch_max_bytes` (the first record always goes).
    fn gather(&mut self, w: &mut Work, sess: &mut Session) {
        let cfg = &self.ctx.config;
        let mut bytes = batch_bytes(&w.record);
        while w.batch.len() + 1 < cfg.batch_max {
            let Some(next) = sess.queue.front() else {
                break;
            };
            let b = batch_bytes(&next.record);
            if next.slot != w.slot || next.epoch != w.epoch || bytes + b > cfg.batch_max_bytes {
                break;
            }
            let Some(next) = sess.queue.pop_front() else {
                break;
            };
            if self.screen(&next, sess) {
                bytes += b;
                w.batch.push(next);
            }
        }
    }

    /// Counts a finished record and queues its completion report.
    fn report(&mut self, w: &Work, outcome: Outcome) {
        match outcome {
            Outcome::Handled => self.counts.handled += 1,
            Outcome::DeadLettered => self.counts.dead_lettered += 1,
            Outcome::Abandoned => self.counts.abandoned += 1,
        }
        self.out.push(Completion {
            slot: w.slot,
            epoch: w.epoch,
            offset: w.record.offset,
            done: outcome != Outcome::Abandoned,
        });
    }

    /// Starts the session's next queued record, or marks it idle.
    fn next_in_session(&mut self, sess: &mut Session, now: Instant) {
        sess.busy = false;
        while let Some(w) = sess.queue.pop_front() {
            if self.begin(w, Some(sess)) {
                return;
            }
        }
        sess.last_active = now;
        // Give back a queue that grew during a burst: memory follows the active load.
        if sess.queue.capacity() > 16 {
            sess.queue = VecDeque::new();
        }
    }
}

impl<H: Handler, D: DeadLetterSink> State<'_, H, D> {
    fn on_msg(&mut self, msg: WorkerMsg) {
        match msg {
            WorkerMsg::Batch(mut works) => {
                let now = Instant::now();
                for w in works.drain(..) {
                    self.on_work(w, now);
                }
                self.sched.ctx.pools.works.give(works);
            }
            WorkerMsg::AddPartition(p) => {
                let i = p.slot as usize;
                let parts = &mut self.sched.parts;
                if parts.len() <= i {
                    parts.resize(i + 1, None);
                }
                parts[i] = Some(p);
            }
            WorkerMsg::RemovePartition {
                slot,
                epoch,
                partition,
            } => {
                if self.sched.part(slot, epoch).is_some() {
                    self.sched.parts[slot as usize] = None;
                }
                for s in self.sessions.iter_mut().filter(|s| s.tp == partition) {
                    s.dedup = None;
                }
            }
            WorkerMsg::Purge { slot, epoch } => {
                let sched = &mut self.sched;
                for s in self.sessions.iter_mut() {
                    s.queue.retain(|w| {
                        let keep = !(w.slot == slot && w.epoch == epoch);
                        if !keep {
                            sched.out.push(Completion {
                                slot,
                                epoch,
                                offset: w.record.offset,
                                done: false,
                            });
                            sched.counts.abandoned += 1;
                        }
                        keep
                    });
                }
            }
        }
    }

    fn on_work(&mut self, w: Work, now: Instant) {
        if self.sched.part(w.slot, w.epoch).is_none() {
            return;
        }
        let ctx = self.sched.ctx;
        let sid = if w.session {
            session_id(&ctx.config.session_id, &w.record)
        } else {
            None
        };
        let Some(sid) = sid else {
            // Unordered lane: start at once, concurrently with everything else.
            self.sched.begin(w, None);
            return;
        };
        let hash = w.hash;
        let tp = &w.record.partition;
        let s = match self
            .sessions
            .find_mut(hash, |s| *s.id == *sid && s.tp == *tp)
        {
            Some(s) if s.busy => {
                s.queue.push_back(w);
                if s.linger.is_some() && s.queue.len() >= ctx.config.batch_max {
                    // The batch is full: it goes now.
                    Self::end_linger(&mut self.sched, s, now);
                }
                return;
            }
            Some(s) => s,
            None => {
                self.sched.counts.sessions_delta += 1;
                let s = Session {
                    hash,
                    tp: tp.clone(),
                    id: SessionId::new(sid),
                    queue: VecDeque::new(),
                    busy: false,
                    last_active: now,
                    epoch: w.epoch,
                    last_seq: None,
                    dedup: None,
                    parked: ctx.config.dlq_mode == DlqMode::ParkSession
                        && ctx.parked.contains(tp, sid),
                    linger: None,
                    lingered: false,
                };
                self.sessions.insert_unique(hash, s, |s| s.hash).into_mut()
            }
        };
        if !self.sched.begin(w, Some(s)) {
            self.sched.next_in_session(s, now);
        }
    }

    /// Ends a session's wait for its batch to fill: its next record starts now, with what its
    /// queue holds.
    fn end_linger(sched: &mut Scheduler<'_, H, D>, sess: &mut Session, now: Instant) {
        sess.linger = None;
        sess.lingered = true;
        sched.next_in_session(sess, now);
    }

    /// Ends the waits that are due (`EngineConfig::batch_linger`).
    fn expire_lingers(&mut self, now: Instant) {
        while let Some(&(until, hash, token)) = self.sched.lingers.front() {
            if until > now {
                break;
            }
            self.sched.lingers.pop_front();
            if let Some(s) = self.sessions.find_mut(hash, |s| s.linger == Some(token)) {
                Self::end_linger(&mut self.sched, s, now);
            }
        }
    }

    fn on_finished(&mut self, mut f: Finished, now: Instant) {
        let followers = std::mem::take(&mut f.work.batch);
        self.settle(&f.work, f.outcome, followers, &f.followers, now);
        self.sched.recycle(f.work);
    }

    /// Reports a finished record (and the followers of its batch, with `outcomes`) and moves
    /// its session on. Followers without an outcome go back to the front of the session's queue.
    fn settle(
        &mut self,
        w: &Work,
        outcome: Outcome,
        followers: Vec<Work>,
        outcomes: &[Outcome],
        now: Instant,
    ) {
        let sched = &mut self.sched;
        sched.report(w, outcome);
        for (f, o) in followers.iter().zip(outcomes) {
            sched.report(f, *o);
        }
        if !w.session {
            return;
        }
        let ctx = sched.ctx;
        let Some(sid) = session_id(&ctx.config.session_id, &w.record) else {
            return;
        };
        let tp = &w.record.partition;
        // A record of an assignment that ended is not remembered as seen: the partition was
        // lost or handed over, and a later assignment may bring it again.
        let live = sched.part(w.slot, w.epoch).is_some();
        let Some(sess) = self
            .sessions
            .find_mut(w.hash, |s| *s.id == *sid && s.tp == *tp)
        else {
            return;
        };
        sess.after(ctx, w, outcome, live);
        let mut followers = followers.into_iter();
        for o in outcomes {
            if let Some(f) = followers.next() {
                sess.after(ctx, &f, *o, live);
            }
        }
        // Not processed (the session was parked meanwhile): they start again, in order.
        for f in followers.rev() {
            sess.queue.push_front(f);
        }
        sched.next_in_session(sess, now);
    }

    fn evict(&mut self, now: Instant) {
        let spare = &mut self.sched.spare;
        spare.truncate(spare.len() / 2);
        spare.shrink_to_fit();
        let idle = self.sched.ctx.config.session_idle_timeout;
        let before = self.sessions.len();
        self.sessions
            .retain(|s| s.busy || now.saturating_duration_since(s.last_active) < idle);
        let removed = before - self.sessions.len();
        self.sched.counts.sessions_delta -= removed as i64;
        // Give the table back when it is mostly empty: an evicted session must cost nothing.
        if removed > 0 && self.sessions.len() < self.sessions.capacity() / 4 {
            self.sessions.shrink_to_fit(|s| s.hash);
        }
    }

    fn flush(&mut self, done_tx: &mpsc::UnboundedSender<Vec<Completion>>) {
        let sched = &mut self.sched;
        if !sched.out.is_empty() {
            // If the engine is gone, nobody needs these reports any more. The dispatch loop hands the
            // buffer back to the pool (see `recycle`).
            let next = sched.ctx.pools.done.take();
            let _ = done_tx.send(std::mem::replace(&mut sched.out, next));
        }
        let c = std::mem::take(&mut sched.counts);
        let (m, s) = (&sched.ctx.metrics, &sched.ctx.stats.0);
        if c.handled > 0 {
            m.handled.increment(c.handled);
        }
        if c.dead_lettered > 0 {
            m.dead_lettered.increment(c.dead_lettered);
        }
        if c.handled > 0 || c.dead_lettered > 0 {
            s.add_terminal(c.handled, c.dead_lettered);
        }
        if c.deduplicated > 0 {
            m.deduplicated.increment(c.deduplicated);
            s.deduplicated.fetch_add(c.deduplicated, Relaxed);
        }
        if c.abandoned > 0 {
            m.abandoned.increment(c.abandoned);
            s.abandoned.fetch_add(c.abandoned, Relaxed);
        }
        if c.sessions_delta != 0 {
            m.active_sessions.increment(c.sessions_delta as f64);
            s.active_sessions.fetch_add(c.sessions_delta, Relaxed);
        }
    }
}

/// One worker task. Ends when the engine closed its channel and every record future finished.
pub(crate) async fn run<H: Handler, D: DeadLetterSink>(
    ctx: Arc<Ctx<H, D>>,
    mut rx: mpsc::UnboundedReceiver<WorkerMsg>,
    done_tx: mpsc::UnboundedSender<Vec<Completion>>,
) {
    let ctx: &Ctx<H, D> = &ctx;
    let mut st = State {
        sessions: HashTable::new(),
        sched: Scheduler {
            ctx,
            parts: Vec::new(),
            ready: Vec::new(),
            spare: Vec::new(),
            out: Vec::new(),
            counts: Counts::default(),
            lingers: VecDeque::new(),
            linger_token: 0,
        },
    };
    // Session futures of this worker. A FuturesUnordered rather than a tokio task per record or
    // per session: no spawn, no hop through tokio's scheduler, no JoinHandle, and the future borrows the shared
    // context instead of cloning Arcs.
    let mut futs = FuturesUnordered::new();
    // The box of the last record that finished on its first poll, reused for the next one.
    let mut spare = None;
    let period = (ctx.config.session_idle_timeout / 2).max(Duration::from_millis(10));
    let mut sweep = tokio::time::interval_at(Instant::now() + period, period);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // One timer for the attempt timeouts of every waiting record (see `deadline.rs`), set for
    // the earliest deadline when there is one and not set already.
    let mut deadline_timer = std::pin::pin!(tokio::time::sleep_until(Instant::now()));
    let mut deadline_set = false;
    let mut closed = false;
    loop {
        let linger_due = st.sched.lingers.front().map(|l| l.0);
        ctx.deadlines.clear_added();
        if !deadline_set && let Some(at) = ctx.deadlines.earliest() {
            deadline_timer.as_mut().reset(at);
            deadline_set = true;
        }
        tokio::select! {
            biased;
            Some(f) = futs.next(), if !futs.is_empty() => {
                let now = Instant::now();
                st.on_finished(f, now);
                // Collect everything else already finished before reporting, to batch reports.
                while let Some(Some(f)) = futs.next().now_or_never() {
                    st.on_finished(f, now);
                }
            }
            // An attempt polled above (a retry, one whose wait for its endpoint ended) started
            // waiting with no timer set for it: back to the top, which sets it. Set only while
            // the futures above are polled, so no waker is needed.
            () = std::future::poll_fn(|_| if ctx.deadlines.take_added() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }) => {}
            msg = rx.recv(), if !closed => match msg {
                Some(m) => {
                    let mut taken = m.records();
                    st.on_msg(m);
                    // Take what else is queued, so one wake-up serves several batches, but
                    // start what is ready before it piles up (it is moved again into futures),
                    // and take about one batch (`BATCH_MAX` records) a turn even when none of
                    // them is ready: records of sessions that wait (in a retry's backoff) only
                    // queue, and a turn that took a whole backlog would keep the loop from the
                    // retries that fell due meanwhile (biased: due futures come first in the next
                    // turn), so those retries would start late by the time the backlog takes.
                    while st.sched.ready.len() < READY_BATCH && taken < BATCH_MAX {
                        match rx.try_recv() {
                            Ok(m) => {
                                taken += m.records();
                                st.on_msg(m);
                            }
                            Err(_) => break,
                        }
                    }
                }
                None => closed = true,
            },
            () = tokio::time::sleep_until(linger_due.unwrap_or_else(Instant::now)), if linger_due.is_some() => {
                st.expire_lingers(Instant::now());
            }
            () = deadline_timer.as_mut(), if deadline_set => {
                ctx.deadlines.expire(Instant::now());
                deadline_set = false;
            }
            _ = sweep.tick() => st.evict(Instant::now()),
        }
        // Start cleared records and poll each right away, in a recycled box: most finish on
        // their first poll (a handler that does not wait), and then they cost no allocation and
        // never enter `futs`. Only a record still pending after its first poll moves into `futs`
        // with its box (it was pinned there; FuturesUnordered polls a pushed future again, with
        // its own waker). Order across sessions does not matter here: each session has at most
        // one cleared record.
        if !st.sched.ready.is_empty() {
            // This task's waker, for the first polls (no await below holds a borrow).
            let waker = std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
            let mut cx = Context::from_waker(&waker);
            // One clock reading per record: the end of one record's first poll (read for its
            // latency metric) is the start of the next.
            let mut now = Instant::now();
            while let Some((part, w)) = st.sched.ready.pop() {
                // Without tokio's cooperative budget: it is per task, and this task drives
                // thousands of record futures. Once one turn spent its 128 units, every tokio
                // operation of every other record (a timer, a channel, `select!`) would return
                // `Pending` and wake its future again, so a turn would finish a few records and
                // re-poll all the others (futures-rs#2053) when many handlers wake together. Each
                // record's future runs as a task of its own would, unbudgeted; the worker
                // itself still yields, through its channel and through `FuturesUnordered`, which
                // yields after a full round.
                let fut = tokio::task::unconstrained(process(ctx, part, w, now));
                let mut fut = in_box(&mut spare, fut);
                match fut.as_mut().poll(&mut cx) {
                    Poll::Ready(f) => {
                        // A finished async fn holds nothing; its box takes the next record.
                        spare = Some(fut);
                        now = f.at;
                        st.on_finished(f, now);
                    }
                    Poll::Pending => {
                        futs.push(fut);
                        now = Instant::now();
                    }
                }
            }
        }
        if st.sched.ready.capacity() > 4 * READY_BATCH {
            // One huge batch grew it; do not keep that memory for the worker's lifetime.
            st.sched.ready = Vec::new();
        }
        st.flush(&done_tx);
        if closed && futs.is_empty() && st.sched.lingers.is_empty() {
            break;
        }
    }
    // Sessions die with the worker.
    st.sched.counts.sessions_delta -= st.sessions.len() as i64;
    st.sessions.clear();
    st.flush(&done_tx);
}

/// `fut` in the spare box if there is one (dropping the finished future it held), else in a new
/// one.
pub(super) fn in_box<F: Future>(spare: &mut Option<Pin<Box<F>>>, fut: F) -> Pin<Box<F>> {
    match spare.take() {
        Some(mut b) => {
            b.set(fut);
            b
        }
        None => Box::pin(fut),
    }
}

/// Bytes of a record that count against `EngineConfig::batch_max_bytes`: key, value, headers.
pub(super) fn batch_bytes(r: &Record) -> usize {
    r.key.as_ref().map_or(0, bytes::Bytes::len)
        + r.value.as_ref().map_or(0, bytes::Bytes::len)
        + r.headers
            .iter()
            .map(|h| h.key.len() + h.value.as_ref().map_or(0, bytes::Bytes::len))
            .sum::<usize>()
}
