//! Worker tasks: session tables, per-session queues, and the per-record future (handle, retry,
//! dead-letter) that runs inside a session.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use hashbrown::HashTable;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::{DlqMode, EngineConfig, SessionIdFrom};
use crate::dedup::{DedupStore, DedupStores};
use crate::handler::{
    Attempt, BatchOutcome, DeadLetter, DeadLetterReason, DeadLetterSink, DlqError, Handler,
    HandlerError,
};
use crate::handoff::control::{PartShared, Stop, guarded, guarded_range, wait_released};
use crate::handoff::work::{BATCH_MAX, Completion, Work, WorkerMsg};
use crate::hash::hash64;
use crate::parked::{Decision, ParkedSessions, ParkedWrite};
use crate::record::{Record, TopicPartition};
use crate::reply::{BatchReplies, Reply, ReplyError, ReplySink};
use crate::stats::EngineStats;
use crate::trace::TraceParent;

/// Records a worker clears to start per loop turn before it starts them.
const READY_BATCH: usize = 2048;

/// Metric handles resolved once, so the hot path does not look names up per record.
pub(crate) struct Metrics {
    handled: metrics::Counter,
    failed_transient: metrics::Counter,
    failed_permanent: metrics::Counter,
    retried: metrics::Counter,
    dead_lettered: metrics::Counter,
    deduplicated: metrics::Counter,
    stuck: metrics::Counter,
    abandoned: metrics::Counter,
    dlq_failures: metrics::Counter,
    dlq_stalled: metrics::Counter,
    replies: metrics::Counter,
    reply_failures: metrics::Counter,
    reply_stalled: metrics::Counter,
    violations: metrics::Counter,
    active_sessions: metrics::Gauge,
    handler_latency: metrics::Histogram,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        Self {
            handled: metrics::counter!("orderly_records_handled_total"),
            failed_transient: metrics::counter!("orderly_records_failed_total", "kind" => "transient"),
            failed_permanent: metrics::counter!("orderly_records_failed_total", "kind" => "permanent"),
            retried: metrics::counter!("orderly_records_retried_total"),
            dead_lettered: metrics::counter!("orderly_records_dead_lettered_total"),
            deduplicated: metrics::counter!("orderly_records_deduplicated_total"),
            stuck: metrics::counter!("orderly_records_stuck_total"),
            abandoned: metrics::counter!("orderly_records_abandoned_total"),
            dlq_failures: metrics::counter!("orderly_dlq_send_failures_total"),
            dlq_stalled: metrics::counter!("orderly_dlq_stalled_total"),
            replies: metrics::counter!("orderly_replies_total"),
            reply_failures: metrics::counter!("orderly_reply_send_failures_total"),
            reply_stalled: metrics::counter!("orderly_reply_stalled_total"),
            violations: metrics::counter!("orderly_ordering_violations_total"),
            active_sessions: metrics::gauge!("orderly_active_sessions"),
            handler_latency: metrics::histogram!("orderly_handler_duration_seconds"),
        }
    }
}

/// What every worker shares (read-only).
pub(crate) struct Ctx<H, D> {
    pub(crate) handler: Arc<H>,
    pub(crate) dlq: Arc<D>,
    /// Where handlers' replies go; `None`: a record with replies is dead-lettered.
    pub(crate) replies: Option<Arc<dyn ReplySink>>,
    pub(crate) config: EngineConfig,
    pub(crate) jitter_seed: u64,
    pub(crate) stats: EngineStats,
    pub(crate) dedup: Arc<dyn DedupStores>,
    pub(crate) parked: ParkedSessions,
    pub(crate) metrics: Metrics,
    /// Batch buffers shared with the core.
    pub(crate) pools: Arc<crate::handoff::recycle::Pools>,
}

/// Most emptied record boxes a worker keeps for reuse (~300 bytes each, see [`Io::boxed`]):
/// enough for the records one loop turn starts (up to `READY_BATCH` cleared, plus the batch that
/// crossed it), so a turn of records that finish at once allocates nothing. Halved at every
/// session sweep, so an idle worker gives them back.
const SPARE_BOXES: usize = READY_BATCH + BATCH_MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Handled,
    DeadLettered,
    Abandoned,
}

struct Finished {
    work: Box<Work>,
    outcome: Outcome,
    /// For a batch (`work.batch` not empty): the outcome of each follower, in order; the
    /// followers past its end were not processed (the session was parked meanwhile) and go back
    /// to the front of the session's queue.
    followers: Vec<Outcome>,
    /// When it finished (the clock reading the latency metric took, reused by the worker loop).
    at: Instant,
}

impl Session {
    /// What a finished record of this session changes in it: a dead letter parks the session
    /// (in `DlqMode::ParkSession`); a handled record's event id is remembered for dedup. Only a
    /// record the handler finished counts as seen: a dead-lettered one comes back through
    /// `dlq replay` with the same event id and must reach the handler then.
    fn after<H, D>(&mut self, ctx: &Ctx<H, D>, w: &Work, outcome: Outcome) {
        if outcome == Outcome::DeadLettered
            && ctx.config.dlq_mode == DlqMode::ParkSession
            && !self.parked
        {
            // The registry (and store) were updated before the dead letter counted as done.
            self.parked = true;
        }
        if outcome == Outcome::Handled {
            if let Some(id) = ctx
                .config
                .event_id_header
                .as_ref()
                .and_then(|n| w.record.header(n))
            {
                self.dedup
                    .get_or_insert_with(|| ctx.dedup.create())
                    .insert(id);
            }
        }
    }
}

/// A session task's state between records. It exists while the session is active and is removed
/// after the idle timeout, taking its queue, sequence state and dedup store with it.
struct Session {
    hash: u64,
    /// The partition the session lives in: the same id on another partition (or topic) is
    /// another session, with its own order, dedup store and sequence check.
    tp: TopicPartition,
    /// A private copy of the id: holding a slice of the fetch buffer would pin the whole buffer.
    id: SessionId,
    queue: VecDeque<Work>,
    busy: bool,
    last_active: Instant,
    /// The partition's assignment epoch of the record started last: a new assignment replays
    /// from the committed watermark, so the sequence check starts over.
    epoch: u32,
    last_seq: Option<u64>,
    dedup: Option<Box<dyn DedupStore>>,
    /// Parked after a dead letter ([`DlqMode::ParkSession`]); the registry decides until when.
    parked: bool,
    /// While the session's next record waits for more records to join its batch
    /// (`EngineConfig::batch_linger`): its entry in [`Io::lingers`]. The record waits at the
    /// front of `queue`, and the session counts as busy.
    linger: Option<u64>,
    /// The wait is over: the next record starts without waiting again.
    lingered: bool,
}

/// A session's own copy of its id: up to 23 bytes inline in the session table (no allocation, and
/// comparing it reads the table entry already in cache), longer ones on the heap.
enum SessionId {
    Inline { len: u8, bytes: [u8; 23] },
    Heap(Box<[u8]>),
}

impl SessionId {
    fn new(id: &[u8]) -> Self {
        if id.len() <= 23 {
            let mut bytes = [0u8; 23];
            bytes[..id.len()].copy_from_slice(id);
            Self::Inline {
                len: id.len() as u8,
                bytes,
            }
        } else {
            Self::Heap(id.into())
        }
    }
}

impl std::ops::Deref for SessionId {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Self::Heap(b) => b,
        }
    }
}

pub(crate) fn session_id<'r>(from: &SessionIdFrom, record: &'r Record) -> Option<&'r [u8]> {
    match from {
        SessionIdFrom::Key => record.key.as_deref(),
        SessionIdFrom::Header(name) => record.header(name).map(|b| &b[..]),
    }
}

#[derive(Default)]
struct Counts {
    handled: u64,
    dead_lettered: u64,
    deduplicated: u64,
    abandoned: u64,
    sessions_delta: i64,
}

/// Worker state apart from the session table and the futures, so a session borrowed from the
/// table and this state can be mutated together (disjoint fields).
struct Io<'c, H, D> {
    ctx: &'c Ctx<H, D>,
    parts: Vec<Option<Arc<PartShared>>>,
    /// Records cleared to start; `run` turns them into futures.
    ready: Vec<(Arc<PartShared>, Box<Work>)>,
    /// Emptied boxes for the next records (see [`Io::boxed`]); boxed because their addresses
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
    io: Io<'c, H, D>,
}

impl<H: Handler, D: DeadLetterSink> Io<'_, H, D> {
    fn part(&self, slot: u32, epoch: u32) -> Option<&Arc<PartShared>> {
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
    /// ([`Io::recycle`]): allocated and freed on this worker's thread, and mostly not at all.
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
                self.io.ctx.pools.works.give(works);
            }
            WorkerMsg::AddPartition(p) => {
                let i = p.slot as usize;
                let parts = &mut self.io.parts;
                if parts.len() <= i {
                    parts.resize(i + 1, None);
                }
                parts[i] = Some(p);
            }
            WorkerMsg::RemovePartition { slot, epoch } => {
                if self.io.part(slot, epoch).is_some() {
                    self.io.parts[slot as usize] = None;
                }
            }
            WorkerMsg::Purge { slot, epoch } => {
                let io = &mut self.io;
                for s in self.sessions.iter_mut() {
                    s.queue.retain(|w| {
                        let keep = !(w.slot == slot && w.epoch == epoch);
                        if !keep {
                            io.out.push(Completion {
                                slot,
                                epoch,
                                offset: w.record.offset,
                                done: false,
                            });
                            io.counts.abandoned += 1;
                        }
                        keep
                    });
                }
            }
        }
    }

    fn on_work(&mut self, w: Work, now: Instant) {
        if self.io.part(w.slot, w.epoch).is_none() {
            return;
        }
        let ctx = self.io.ctx;
        let sid = if w.session {
            session_id(&ctx.config.session_id, &w.record)
        } else {
            None
        };
        let Some(sid) = sid else {
            // Unordered lane: start at once, concurrently with everything else.
            self.io.begin(w, None);
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
                    Self::end_linger(&mut self.io, s, now);
                }
                return;
            }
            Some(s) => s,
            None => {
                self.io.counts.sessions_delta += 1;
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
        if !self.io.begin(w, Some(s)) {
            self.io.next_in_session(s, now);
        }
    }

    /// Ends a session's wait for its batch to fill: its next record starts now, with what its
    /// queue holds.
    fn end_linger(io: &mut Io<'_, H, D>, sess: &mut Session, now: Instant) {
        sess.linger = None;
        sess.lingered = true;
        io.next_in_session(sess, now);
    }

    /// Ends the waits that are due (`EngineConfig::batch_linger`).
    fn expire_lingers(&mut self, now: Instant) {
        while let Some(&(until, hash, token)) = self.io.lingers.front() {
            if until > now {
                break;
            }
            self.io.lingers.pop_front();
            if let Some(s) = self.sessions.find_mut(hash, |s| s.linger == Some(token)) {
                Self::end_linger(&mut self.io, s, now);
            }
        }
    }

    fn on_finished(&mut self, mut f: Finished, now: Instant) {
        let followers = std::mem::take(&mut f.work.batch);
        self.settle(&f.work, f.outcome, followers, &f.followers, now);
        self.io.recycle(f.work);
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
        let io = &mut self.io;
        io.report(w, outcome);
        for (f, o) in followers.iter().zip(outcomes) {
            io.report(f, *o);
        }
        if !w.session {
            return;
        }
        let ctx = io.ctx;
        let Some(sid) = session_id(&ctx.config.session_id, &w.record) else {
            return;
        };
        let tp = &w.record.partition;
        let Some(sess) = self
            .sessions
            .find_mut(w.hash, |s| *s.id == *sid && s.tp == *tp)
        else {
            return;
        };
        sess.after(ctx, w, outcome);
        let mut followers = followers.into_iter();
        for o in outcomes {
            if let Some(f) = followers.next() {
                sess.after(ctx, &f, *o);
            }
        }
        // Not processed (the session was parked meanwhile): they start again, in order.
        for f in followers.rev() {
            sess.queue.push_front(f);
        }
        io.next_in_session(sess, now);
    }

    fn evict(&mut self, now: Instant) {
        let spare = &mut self.io.spare;
        spare.truncate(spare.len() / 2);
        spare.shrink_to_fit();
        let idle = self.io.ctx.config.session_idle_timeout;
        let before = self.sessions.len();
        self.sessions
            .retain(|s| s.busy || now.saturating_duration_since(s.last_active) < idle);
        let removed = before - self.sessions.len();
        self.io.counts.sessions_delta -= removed as i64;
        // Give the table back when it is mostly empty: an evicted session must cost nothing.
        if removed > 0 && self.sessions.len() < self.sessions.capacity() / 4 {
            self.sessions.shrink_to_fit(|s| s.hash);
        }
    }

    fn flush(&mut self, done_tx: &mpsc::UnboundedSender<Vec<Completion>>) {
        let io = &mut self.io;
        if !io.out.is_empty() {
            // If the engine is gone, nobody needs these reports any more. The core hands the
            // buffer back to the pool (see `recycle`).
            let next = io.ctx.pools.done.take();
            let _ = done_tx.send(std::mem::replace(&mut io.out, next));
        }
        let c = std::mem::take(&mut io.counts);
        let (m, s) = (&io.ctx.metrics, &io.ctx.stats.0);
        if c.handled > 0 {
            m.handled.increment(c.handled);
            s.handled.fetch_add(c.handled, Relaxed);
        }
        if c.dead_lettered > 0 {
            m.dead_lettered.increment(c.dead_lettered);
            s.dead_lettered.fetch_add(c.dead_lettered, Relaxed);
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
        io: Io {
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
    // per session: no spawn, no scheduler hop, no JoinHandle, and the future borrows the shared
    // context instead of cloning Arcs.
    let mut futs = FuturesUnordered::new();
    // The box of the last record that finished on its first poll, reused for the next one.
    let mut spare = None;
    let period = (ctx.config.session_idle_timeout / 2).max(Duration::from_millis(10));
    let mut sweep = tokio::time::interval_at(Instant::now() + period, period);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closed = false;
    loop {
        let linger_due = st.io.lingers.front().map(|l| l.0);
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
                    while st.io.ready.len() < READY_BATCH && taken < BATCH_MAX {
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
            _ = sweep.tick() => st.evict(Instant::now()),
        }
        // Start cleared records and poll each right away, in a recycled box: most finish on
        // their first poll (a handler that does not wait), and then they cost no allocation and
        // never enter `futs`. Only a record still pending after its first poll moves into `futs`
        // with its box (it was pinned there; FuturesUnordered polls a pushed future again, with
        // its own waker). Order across sessions does not matter here: each session has at most
        // one cleared record.
        if !st.io.ready.is_empty() {
            // This task's waker, for the first polls (no await below holds a borrow).
            let waker = std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await;
            let mut cx = Context::from_waker(&waker);
            // One clock reading per record: the end of one record's first poll (read for its
            // latency metric) is the start of the next.
            let mut now = Instant::now();
            while let Some((part, w)) = st.io.ready.pop() {
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
        if st.io.ready.capacity() > 4 * READY_BATCH {
            // One huge batch grew it; do not keep that memory for the worker's lifetime.
            st.io.ready = Vec::new();
        }
        st.flush(&done_tx);
        if closed && futs.is_empty() && st.io.lingers.is_empty() {
            break;
        }
    }
    // Sessions die with the worker.
    st.io.counts.sessions_delta -= st.sessions.len() as i64;
    st.sessions.clear();
    st.flush(&done_tx);
}

/// `fut` in the spare box if there is one (dropping the finished future it held), else in a new
/// one.
fn in_box<F: Future>(spare: &mut Option<Pin<Box<F>>>, fut: F) -> Pin<Box<F>> {
    match spare.take() {
        Some(mut b) => {
            b.set(fut);
            b
        }
        None => Box::pin(fut),
    }
}

/// One record's future: handle (with retries) or dead-letter it. `start` is when its first poll
/// begins (the worker loop's clock reading).
async fn process<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: Arc<PartShared>,
    mut w: Box<Work>,
    start: Instant,
) -> Finished {
    // With batching on, every session record goes through `handle_batch`, alone or not, so a
    // handler sees one form of call.
    if ctx.config.batch_max > 1 && w.session && w.parked.is_none() {
        let mut outcomes = Box::pin(run_batch(ctx, &part, &w, start)).await;
        let mut outcome = outcomes.remove(0);
        if outcome == Outcome::Handled && w.batch.is_empty() && ends_round(ctx, &w.record) {
            outcome = Box::pin(round_handled(ctx, &part, &w.record)).await;
        }
        return Finished {
            work: w,
            outcome,
            followers: outcomes,
            at: Instant::now(),
        };
    }
    let (outcome, end) = match w.parked.take() {
        None => {
            let (outcome, end) = run_record(ctx, &part, &w.record, w.hash, w.session, start).await;
            if outcome == Outcome::Handled && w.session && ends_round(ctx, &w.record) {
                (Box::pin(round_handled(ctx, &part, &w.record)).await, end)
            } else {
                (outcome, end)
            }
        }
        Some(reason) => {
            let reason = DeadLetterReason::Parked(reason.into());
            let outcome = Box::pin(dead_letter(
                ctx, &part, &w.record, reason, 0, start, start, w.hash, w.session,
            ))
            .await;
            (outcome, None)
        }
    };
    Finished {
        work: w,
        outcome,
        followers: Vec::new(),
        at: end.unwrap_or_else(Instant::now),
    }
}

/// Bytes of a record that count against `EngineConfig::batch_max_bytes`: key, value, headers.
fn batch_bytes(r: &Record) -> usize {
    r.key.as_ref().map_or(0, bytes::Bytes::len)
        + r.value.as_ref().map_or(0, bytes::Bytes::len)
        + r.headers
            .iter()
            .map(|h| h.key.len() + h.value.as_ref().map_or(0, bytes::Bytes::len))
            .sum::<usize>()
}

/// A batch of one session's consecutive records (`w` and its followers) to terminal states:
/// each handler call takes the records not done yet; those answered done are done, the first
/// one not done gets the single-record rules (a permanent error or exhausted retries
/// dead-letter it, a transient error retries it with backoff, together with the records after
/// it). Returns one outcome per record, in order; shorter when the session got parked by a dead
/// letter in the batch (the rest go back to the session's queue and follow it to the DLQ) or
/// the partition stopped (the rest are abandoned: the caller reports them so).
async fn run_batch<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartShared,
    w: &Work,
    start: Instant,
) -> Vec<Outcome> {
    let cfg = &ctx.config;
    let recs: Vec<&Record> = std::iter::once(&w.record)
        .chain(w.batch.iter().map(|f| &f.record))
        .collect();
    let n = recs.len();
    let lo = recs[0].offset;
    let mut out = Vec::with_capacity(n);
    let park = cfg.dlq_mode == DlqMode::ParkSession;
    // The current record's attempts so far, the backoff drawn before its next one, and when
    // its first attempt started.
    let mut attempts = 0u32;
    let mut delay = Duration::ZERO;
    let mut first = start;
    let mut abandoned = false;
    while out.len() < n {
        let i = out.len();
        let record = recs[i];
        // Between handler calls: a stopping partition starts nothing new.
        if part.stopping() || (part.is_held() && Box::pin(wait_released(part)).await.is_err()) {
            abandoned = true;
            break;
        }
        if attempts == 0 {
            first = Instant::now();
        }
        attempts += 1;
        let at = if attempts == 1 {
            Attempt::FIRST
        } else {
            Attempt::retry(attempts, delay)
        };
        let call = AssertUnwindSafe(ctx.handler.handle_batch_replying(&recs[i..], at))
            .catch_unwind()
            .map(|r| {
                r.unwrap_or_else(|p| {
                    BatchOutcome::failed(HandlerError::Permanent(format!(
                        "handler panicked: {}",
                        panic_text(&*p)
                    )))
                    .into()
                })
            });
        let timed = async {
            match cfg.attempt_timeout {
                Some(t) => tokio::time::timeout(t, call).await.unwrap_or_else(|_| {
                    BatchOutcome::failed(HandlerError::Transient(format!(
                        "attempt timed out after {t:?}"
                    )))
                    .into()
                }),
                None => call.await,
            }
        };
        let answered = guarded_range(part, lo, record.offset, true, false, timed).await;
        ctx.metrics
            .handler_latency
            .record(first.elapsed().as_secs_f64());
        let reason = match answered {
            Err(Stop::Cancelled) => {
                abandoned = true;
                break;
            }
            Err(Stop::Stuck) => DeadLetterReason::Stuck,
            Ok(BatchReplies {
                outcome: BatchOutcome { done, error },
                replies,
            }) => {
                let mut done = done.min(n - i);
                let mut error = error;
                // Each done record's replies, in record order, before it counts as done; a
                // refused or discarded write makes its record the first one not done.
                for (k, replies) in replies.iter().enumerate().take(done) {
                    if replies.is_empty() {
                        continue;
                    }
                    match Box::pin(deliver(ctx, part, recs[i + k], w.session, replies)).await {
                        Delivery::Done => {}
                        Delivery::Abandoned => {
                            out.extend(std::iter::repeat_n(Outcome::Handled, k));
                            abandoned = true;
                            break;
                        }
                        Delivery::Failed(e) => {
                            done = k;
                            error = Some(e);
                            break;
                        }
                    }
                }
                if abandoned {
                    break;
                }
                out.extend(std::iter::repeat_n(Outcome::Handled, done));
                if out.len() == n {
                    break;
                }
                if done > 0 {
                    // The next record was part of this call: this was its first attempt.
                    attempts = 1;
                    first = Instant::now();
                }
                ctx.stats.0.failed.fetch_add(1, Relaxed);
                let text = match error {
                    Some(HandlerError::Permanent(e)) => {
                        ctx.metrics.failed_permanent.increment(1);
                        Some(DeadLetterReason::Permanent(e))
                    }
                    Some(HandlerError::Transient(e)) => {
                        ctx.metrics.failed_transient.increment(1);
                        cfg.retry
                            .max_attempts
                            .is_some_and(|m| attempts >= m)
                            .then_some(DeadLetterReason::RetriesExhausted(e))
                    }
                    None => {
                        ctx.metrics.failed_transient.increment(1);
                        let e = format!("the handler answered for {done} of {} records", n - i);
                        cfg.retry
                            .max_attempts
                            .is_some_and(|m| attempts >= m)
                            .then_some(DeadLetterReason::RetriesExhausted(e))
                    }
                };
                match text {
                    Some(reason) => reason,
                    None => {
                        // Retry the record (and those after it) after a backoff.
                        ctx.metrics.retried.increment(1);
                        ctx.stats.0.retried.fetch_add(1, Relaxed);
                        let salt = part.salt ^ (recs[out.len()].offset as u64);
                        delay = cfg.retry.delay(ctx.jitter_seed, salt, attempts);
                        let at = recs[out.len()].offset;
                        match guarded_range(part, lo, at, true, true, crate::timer::sleep(delay))
                            .await
                        {
                            Ok(()) => continue,
                            Err(Stop::Cancelled) => {
                                abandoned = true;
                                break;
                            }
                            Err(Stop::Stuck) => DeadLetterReason::Stuck,
                        }
                    }
                }
            }
        };
        let record = recs[out.len()];
        let outcome = Box::pin(dead_letter(
            ctx,
            part,
            record,
            reason,
            attempts,
            first,
            Instant::now(),
            w.hash,
            w.session,
        ))
        .await;
        out.push(outcome);
        attempts = 0;
        if outcome == Outcome::Abandoned {
            abandoned = true;
            break;
        }
        if park && outcome == Outcome::DeadLettered {
            // The session is parked now: what follows goes back to its queue and follows the
            // dead letter to the DLQ there, in order.
            return out;
        }
    }
    if abandoned {
        out.resize(n, Outcome::Abandoned);
    }
    out
}

fn wall_clock(at: Instant) -> SystemTime {
    SystemTime::now()
        .checked_sub(at.elapsed())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// The span a record's handler call runs in: `orderly.handle` at DEBUG level, with the record's
/// coordinates and, when it carries a W3C `traceparent`, its trace and parent span ids. DEBUG
/// because a subscriber that formats spans (the fmt layer) pays for every one it sees, once per
/// record; a subscriber that wants it per record (a tracing exporter) enables
/// `orderly_engine=debug`.
fn handler_span(record: &Record) -> tracing::Span {
    let span = tracing::debug_span!(
        "orderly.handle",
        topic = %record.partition.topic,
        partition = record.partition.partition,
        offset = record.offset,
        trace_id = tracing::field::Empty,
        parent_span_id = tracing::field::Empty,
    );
    if !span.is_disabled() {
        if let Some(tp) = record
            .header("traceparent")
            .and_then(|v| TraceParent::parse(v))
        {
            span.record("trace_id", tp.trace_id_hex());
            span.record("parent_span_id", tp.parent_id_hex());
        }
    }
    span
}

/// Handles one record to a terminal state: handled, or dead-lettered (after retries or at once),
/// or abandoned if its partition is cancelled.
///
/// Size matters here: this future is written into a box once per record (see `run`). The
/// common case (first attempt completes on its first poll) keeps only the handler future and a
/// few words; timers, `Notified` guards, retries and the dead-letter path live in boxed futures
/// that are allocated only when a record actually waits or fails.
async fn run_record<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartShared,
    record: &Record,
    session_hash: u64,
    session: bool,
    first: Instant,
) -> (Outcome, Option<Instant>) {
    let offset = record.offset;
    match part.check(offset, true, false) {
        Some(Stop::Cancelled) => return (Outcome::Abandoned, None),
        Some(Stop::Stuck) => {
            let outcome = Box::pin(dead_letter_stuck(
                ctx,
                part,
                record,
                0,
                first,
                session_hash,
                session,
            ))
            .await;
            return (outcome, None);
        }
        None => {}
    }
    if part.is_held() && Box::pin(wait_released(part)).await.is_err() {
        return (Outcome::Abandoned, None);
    }
    let span = handler_span(record);
    let res = {
        let mut fut = pin!(attempt(ctx, record, Attempt::FIRST));
        // One poll inside the span; the guard never lives across an await (it is not Send).
        let polled = std::future::poll_fn(|cx| {
            let _entered = span.enter();
            Poll::Ready(fut.as_mut().poll(cx))
        })
        .await;
        match polled {
            Poll::Ready(r) => Ok(r),
            Poll::Pending => Box::pin(finish_attempt(ctx, part, offset, fut.as_mut(), &span)).await,
        }
        // The first attempt's future ends here, whatever happened: a stuck record's handler
        // (its locks, permits, transactions) is dropped before the dead-letter write below.
    };
    let res = match res {
        Ok(r) => r,
        Err(Stop::Cancelled) => return (Outcome::Abandoned, None),
        Err(Stop::Stuck) => {
            let outcome = Box::pin(dead_letter_stuck(
                ctx,
                part,
                record,
                1,
                first,
                session_hash,
                session,
            ))
            .await;
            return (outcome, None);
        }
    };
    let end = Instant::now();
    ctx.metrics
        .handler_latency
        .record(end.saturating_duration_since(first).as_secs_f64());
    match res {
        Ok(replies) if replies.is_empty() => (Outcome::Handled, Some(end)),
        Ok(replies) => {
            let outcome = Box::pin(replied(
                ctx,
                part,
                record,
                replies,
                first,
                span,
                session_hash,
                session,
            ))
            .await;
            (outcome, None)
        }
        Err(e) => {
            let outcome = Box::pin(after_failure(
                ctx,
                part,
                record,
                e,
                first,
                span,
                session_hash,
                session,
            ))
            .await;
            (outcome, None)
        }
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// One handler attempt. A panic while the handler's future runs becomes a permanent error (the
/// record is dead-lettered with the panic text) instead of taking the worker and every session
/// on it down.
fn attempt<'a, H: Handler, D>(
    ctx: &'a Ctx<H, D>,
    record: &'a Record,
    at: Attempt,
) -> impl Future<Output = Result<Vec<Reply>, HandlerError>> + Send + 'a {
    AssertUnwindSafe(ctx.handler.handle_replying(record, at))
        .catch_unwind()
        .map(|r| {
            r.unwrap_or_else(|p| {
                Err(HandlerError::Permanent(format!(
                    "handler panicked: {}",
                    panic_text(&*p)
                )))
            })
        })
}

/// One dead-letter write; a panicking sink counts as a failed write (retried with backoff).
fn send_letter<'a, H, D: DeadLetterSink>(
    ctx: &'a Ctx<H, D>,
    letter: &'a DeadLetter,
) -> impl Future<Output = Result<(), DlqError>> + Send + 'a {
    AssertUnwindSafe(ctx.dlq.send(letter))
        .catch_unwind()
        .map(|r| {
            r.unwrap_or_else(|p| {
                Err(DlqError(format!(
                    "dead-letter sink panicked: {}",
                    panic_text(&*p)
                )))
            })
        })
}

/// Drives a handler attempt that did not finish on its first poll: with the attempt timeout,
/// inside the span, and stoppable by its partition.
async fn finish_attempt<H, D, F>(
    ctx: &Ctx<H, D>,
    part: &PartShared,
    offset: i64,
    fut: Pin<&mut F>,
    span: &tracing::Span,
) -> Result<F::Output, Stop>
where
    F: Future<Output = Result<Vec<Reply>, HandlerError>>,
{
    let timed = async move {
        match ctx.config.attempt_timeout {
            Some(t) => tokio::time::timeout(t, fut).await.unwrap_or_else(|_| {
                Err(HandlerError::Transient(format!(
                    "attempt timed out after {t:?}"
                )))
            }),
            None => fut.await,
        }
    };
    guarded(part, offset, true, false, timed.instrument(span.clone())).await
}

/// The slow path after a failed first attempt: count, back off and retry in place (later records
/// of the session wait), then dead-letter when the error is permanent or attempts run out.
#[allow(clippy::too_many_arguments)]
async fn after_failure<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartShared,
    record: &Record,
    mut err: HandlerError,
    first: Instant,
    span: tracing::Span,
    session_hash: u64,
    session: bool,
) -> Outcome {
    let cfg = &ctx.config;
    let offset = record.offset;
    let salt = part.salt ^ (offset as u64);
    let mut attempts = 1u32;
    let mut last = first;
    let reason = loop {
        ctx.stats.0.failed.fetch_add(1, Relaxed);
        let text = match err {
            HandlerError::Permanent(e) => {
                ctx.metrics.failed_permanent.increment(1);
                break DeadLetterReason::Permanent(e);
            }
            HandlerError::Transient(e) => {
                ctx.metrics.failed_transient.increment(1);
                e
            }
        };
        if cfg.retry.max_attempts.is_some_and(|m| attempts >= m) {
            break DeadLetterReason::RetriesExhausted(text);
        }
        ctx.metrics.retried.increment(1);
        ctx.stats.0.retried.fetch_add(1, Relaxed);
        let delay = cfg.retry.delay(ctx.jitter_seed, salt, attempts);
        tracing::debug!(parent: &span, attempt = attempts, ?delay, error = %text, "transient failure, retrying");
        match guarded(part, offset, true, true, crate::timer::sleep(delay)).await {
            Ok(()) => {}
            Err(Stop::Cancelled) => return Outcome::Abandoned,
            Err(Stop::Stuck) => break DeadLetterReason::Stuck,
        }
        if part.is_held() && Box::pin(wait_released(part)).await.is_err() {
            return Outcome::Abandoned;
        }
        attempts += 1;
        last = Instant::now();
        let fut = pin!(attempt(ctx, record, Attempt::retry(attempts, delay)));
        match finish_attempt(ctx, part, offset, fut, &span).await {
            Ok(Ok(replies)) => {
                ctx.metrics
                    .handler_latency
                    .record(last.elapsed().as_secs_f64());
                if replies.is_empty() {
                    return Outcome::Handled;
                }
                match deliver(ctx, part, record, session, &replies).await {
                    Delivery::Done => return Outcome::Handled,
                    Delivery::Abandoned => return Outcome::Abandoned,
                    Delivery::Failed(e) => err = e,
                }
            }
            Ok(Err(e)) => {
                ctx.metrics
                    .handler_latency
                    .record(last.elapsed().as_secs_f64());
                err = e;
            }
            Err(Stop::Cancelled) => return Outcome::Abandoned,
            Err(Stop::Stuck) => break DeadLetterReason::Stuck,
        }
    };
    dead_letter(
        ctx,
        part,
        record,
        reason,
        attempts,
        first,
        last,
        session_hash,
        session,
    )
    .await
}

/// A record's first attempt succeeded with replies: write them; a write the sink refuses or
/// discards continues as that attempt's failure would.
#[allow(clippy::too_many_arguments)]
async fn replied<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartShared,
    record: &Record,
    replies: Vec<Reply>,
    first: Instant,
    span: tracing::Span,
    session_hash: u64,
    session: bool,
) -> Outcome {
    match deliver(ctx, part, record, session, &replies).await {
        Delivery::Done => Outcome::Handled,
        Delivery::Abandoned => Outcome::Abandoned,
        Delivery::Failed(e) => {
            drop(replies);
            after_failure(ctx, part, record, e, first, span, session_hash, session).await
        }
    }
}

/// How writing a record's replies ended.
enum Delivery {
    /// Every reply is acknowledged: the record may count as done.
    Done,
    /// The partition was cancelled (or drained while held) before that.
    Abandoned,
    /// The sink refused the replies (permanent) or discarded them (transient): the record
    /// continues as after a handler failure with this error.
    Failed(HandlerError),
}

/// Writes a handled record's replies through the reply sink, retrying failed writes (from the
/// first reply not acknowledged) with the dead-letter backoff until all are acknowledged or the
/// partition is cancelled. Like a dead-letter write, this is the record's terminal step: the
/// stuck-gap rule cannot skip it (that would lose its replies), but a write still failing when
/// the stuck timeout passes is reported once.
async fn deliver<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartShared,
    record: &Record,
    session: bool,
    replies: &[Reply],
) -> Delivery {
    let Some(sink) = ctx.replies.as_deref() else {
        return Delivery::Failed(HandlerError::Permanent(format!(
            "the handler returned {} replies but no reply sink is configured",
            replies.len()
        )));
    };
    let sid = if session {
        session_id(&ctx.config.session_id, record)
    } else {
        None
    };
    let salt = part.salt ^ (record.offset as u64) ^ 0x3c3c;
    let mut from = 0usize;
    let mut failures = 0u32;
    let mut stalled = false;
    loop {
        if part.is_held() && Box::pin(wait_released(part)).await.is_err() {
            return Delivery::Abandoned;
        }
        let send = async {
            match AssertUnwindSafe(sink.send(record, sid, &replies[from..]))
                .catch_unwind()
                .await
            {
                Ok(r) => r,
                Err(p) => Err(ReplyError::Write {
                    delivered: 0,
                    reason: format!("reply sink panicked: {}", panic_text(&*p)),
                }),
            }
        };
        let sent = watch_terminal(ctx, part, record, &mut stalled, Step::Reply, send).await;
        let (delivered, reason) = match sent {
            None => return Delivery::Abandoned,
            Some(Ok(())) => {
                let n = (replies.len() - from) as u64;
                ctx.metrics.replies.increment(n);
                ctx.stats.0.replies.fetch_add(n, Relaxed);
                return Delivery::Done;
            }
            Some(Err(ReplyError::Invalid(e))) => {
                return Delivery::Failed(HandlerError::Permanent(format!("reply refused: {e}")));
            }
            Some(Err(ReplyError::Discarded(e))) => {
                return Delivery::Failed(HandlerError::Transient(format!(
                    "replies discarded: {e}"
                )));
            }
            Some(Err(ReplyError::Write { delivered, reason })) => (delivered, reason),
        };
        let delivered = delivered.min(replies.len() - from);
        from += delivered;
        ctx.metrics.replies.increment(delivered as u64);
        ctx.stats.0.replies.fetch_add(delivered as u64, Relaxed);
        failures += 1;
        ctx.metrics.reply_failures.increment(1);
        ctx.stats.0.reply_failures.fetch_add(1, Relaxed);
        let delay = ctx.config.dlq_retry.delay(ctx.jitter_seed, salt, failures);
        tracing::warn!(topic = %record.partition.topic, partition = record.partition.partition,
            offset = record.offset, failures, ?delay, error = %reason, "reply write failed; retrying");
        let wait = watch_terminal(
            ctx,
            part,
            record,
            &mut stalled,
            Step::Reply,
            tokio::time::sleep(delay),
        );
        if wait.await.is_none() {
            return Delivery::Abandoned;
        }
    }
}

/// Dead-letters a record that held its partition's watermark past the stuck timeout.
async fn dead_letter_stuck<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartShared,
    record: &Record,
    attempts: u32,
    first: Instant,
    session_hash: u64,
    session: bool,
) -> Outcome {
    let reason = DeadLetterReason::Stuck;
    dead_letter(
        ctx,
        part,
        record,
        reason,
        attempts,
        first,
        first,
        session_hash,
        session,
    )
    .await
}

/// Writes the dead letter, retrying failed writes with backoff until acknowledged or cancelled.
#[allow(clippy::too_many_arguments)]
async fn dead_letter<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartShared,
    record: &Record,
    reason: DeadLetterReason,
    attempts: u32,
    first: Instant,
    last: Instant,
    session_hash: u64,
    session: bool,
) -> Outcome {
    let cfg = &ctx.config;
    let offset = record.offset;
    let salt = part.salt ^ (offset as u64) ^ 0x5a5a;
    if reason == DeadLetterReason::Stuck {
        ctx.metrics.stuck.increment(1);
        ctx.stats.0.stuck.fetch_add(1, Relaxed);
        let sid = session_id(&cfg.session_id, record)
            .filter(|_| session)
            .map(String::from_utf8_lossy);
        tracing::error!(
            topic = %record.partition.topic,
            partition = record.partition.partition,
            offset,
            session = ?sid,
            session_hash,
            attempts,
            "stuck record held the watermark past the stuck-gap timeout; cancelled and sent to the DLQ"
        );
    }
    let letter = DeadLetter {
        record: record.clone(),
        reason,
        attempts,
        first_attempt: wall_clock(first),
        last_attempt: wall_clock(last),
    };
    let mut failures = 0u32;
    // A record dead-lettered *because* it was stuck has already used up its stuck flag.
    let mut stalled = letter.reason == DeadLetterReason::Stuck;
    loop {
        if part.is_held() && Box::pin(wait_released(part)).await.is_err() {
            return Outcome::Abandoned;
        }
        // The dead-letter write is the terminal step: the stuck-gap rule cannot skip it (that
        // would lose the record), but when the stuck timeout passes while it is still failing
        // the stall is reported once, loudly; the held watermark then pauses the partition.
        let send = watch_dead_letter(ctx, part, record, &mut stalled, send_letter(ctx, &letter));
        match send.await {
            None => return Outcome::Abandoned,
            Some(Ok(())) => {
                if session && cfg.dlq_mode == DlqMode::ParkSession {
                    if let Some(sid) = session_id(&cfg.session_id, record) {
                        let parked = matches!(letter.reason, DeadLetterReason::Parked(_));
                        let write = ctx.parked.dead_lettered(
                            &record.partition,
                            sid,
                            record,
                            letter.reason.code(),
                            parked,
                        );
                        if !Box::pin(persist_parked(ctx, part, record, &write)).await {
                            return Outcome::Abandoned;
                        }
                    }
                }
                return Outcome::DeadLettered;
            }
            Some(Err(e)) => {
                failures += 1;
                ctx.metrics.dlq_failures.increment(1);
                let delay = cfg.dlq_retry.delay(ctx.jitter_seed, salt, failures);
                tracing::warn!(topic = %record.partition.topic, partition = record.partition.partition, offset, failures, ?delay, error = %e, "dead-letter write failed; retrying");
                let wait =
                    watch_dead_letter(ctx, part, record, &mut stalled, tokio::time::sleep(delay));
                if wait.await.is_none() {
                    return Outcome::Abandoned;
                }
            }
        }
    }
}

/// Whether a handled record may end a parked session's replay round (see `parked`).
fn ends_round<H, D>(ctx: &Ctx<H, D>, record: &Record) -> bool {
    ctx.config.dlq_mode == DlqMode::ParkSession
        && record.header(crate::parked::REPLAY_LAST).is_some()
}

/// The last record of a replay round was handled: the session's release (or its next `since`)
/// is made durable before the record counts as done.
async fn round_handled<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartShared,
    record: &Record,
) -> Outcome {
    let write = session_id(&ctx.config.session_id, record)
        .and_then(|sid| ctx.parked.round_handled(&record.partition, sid, record));
    match write {
        Some(w) if !persist_parked(ctx, part, record, &w).await => Outcome::Abandoned,
        _ => Outcome::Handled,
    }
}

/// Writes a parked-session change to the store (if one is set), retried with the DLQ's backoff
/// until it succeeds (true) or the partition is cancelled (false).
async fn persist_parked<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartShared,
    record: &Record,
    write: &ParkedWrite,
) -> bool {
    let Some(store) = ctx.parked.store() else {
        return true;
    };
    let salt = part.salt ^ (record.offset as u64) ^ 0xa5a5;
    let mut failures = 0u32;
    // No stuck report for this step: the record's terminal write is already done.
    let mut stalled = true;
    loop {
        match watch_dead_letter(ctx, part, record, &mut stalled, write.start(&**store)).await {
            None => return false,
            Some(Ok(())) => return true,
            Some(Err(e)) => {
                failures += 1;
                let delay = ctx.config.dlq_retry.delay(ctx.jitter_seed, salt, failures);
                tracing::warn!(topic = %record.partition.topic, partition = record.partition.partition,
                    offset = record.offset, failures, ?delay, error = %e, "parked-session store write failed; retrying");
                let wait =
                    watch_dead_letter(ctx, part, record, &mut stalled, tokio::time::sleep(delay));
                if wait.await.is_none() {
                    return false;
                }
            }
        }
    }
}

/// A record's terminal write that the stuck-gap rule cannot skip.
#[derive(Clone, Copy)]
enum Step {
    DeadLetter,
    Reply,
}

/// Runs one step of a dead-letter write until it completes (`Some`) or the partition is
/// cancelled (`None`). A stuck flag for this record does not stop it; it is reported once.
async fn watch_dead_letter<H, D, F: Future>(
    ctx: &Ctx<H, D>,
    part: &PartShared,
    record: &Record,
    stalled: &mut bool,
    fut: F,
) -> Option<F::Output> {
    watch_terminal(ctx, part, record, stalled, Step::DeadLetter, fut).await
}

/// Runs one step of a terminal write (`step`) until it completes (`Some`) or the partition is
/// cancelled (`None`). A stuck flag for this record does not stop it; it is reported once.
async fn watch_terminal<H, D, F: Future>(
    ctx: &Ctx<H, D>,
    part: &PartShared,
    record: &Record,
    stalled: &mut bool,
    step: Step,
    fut: F,
) -> Option<F::Output> {
    let mut fut = pin!(fut);
    loop {
        let notified = part.notify.notified();
        match part.check(record.offset, !*stalled, false) {
            Some(Stop::Cancelled) => return None,
            Some(Stop::Stuck) => {
                *stalled = true;
                match step {
                    Step::DeadLetter => {
                        ctx.metrics.dlq_stalled.increment(1);
                        ctx.stats.0.dlq_stalled.fetch_add(1, Relaxed);
                        tracing::error!(
                            topic = %record.partition.topic,
                            partition = record.partition.partition,
                            offset = record.offset,
                            "dead-letter write still not acknowledged after the stuck-gap timeout: the DLQ is failing; the partition's watermark stays held (and fetching pauses) until it succeeds"
                        );
                    }
                    Step::Reply => {
                        ctx.metrics.reply_stalled.increment(1);
                        tracing::error!(
                            topic = %record.partition.topic,
                            partition = record.partition.partition,
                            offset = record.offset,
                            "reply write still not acknowledged after the stuck-gap timeout: the reply sink is failing; the partition's watermark stays held (and fetching pauses) until it succeeds"
                        );
                    }
                }
                continue;
            }
            None => {}
        }
        tokio::select! {
            biased;
            out = &mut fut => return Some(out),
            () = notified => {}
        }
    }
}

/// Salt for a partition's jitter: independent of the slot number, which is reused.
pub(crate) fn partition_salt(seed: u64, topic: &str, partition: i32) -> u64 {
    hash64(seed, topic.as_bytes()) ^ (u64::from(partition as u32) << 40)
}

#[cfg(test)]
mod session_id_tests {
    use super::SessionId;

    #[test]
    fn ids_keep_their_bytes_inline_or_on_the_heap() {
        for len in [0usize, 1, 22, 23, 24, 100] {
            let id: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
            let s = SessionId::new(&id);
            assert_eq!(&*s, &id[..], "len {len}");
            assert_eq!(
                matches!(s, SessionId::Inline { .. }),
                len <= 23,
                "len {len}"
            );
        }
        // No larger than the `Bytes` it replaced.
        assert!(std::mem::size_of::<SessionId>() <= std::mem::size_of::<bytes::Bytes>());
    }
}

#[cfg(test)]
mod boxed_tests {
    use super::Work;
    use crate::record::{Header, Record, TopicPartition};
    use bytes::Bytes;

    #[test]
    fn an_emptied_work_keeps_none_of_its_records_bytes_alive() {
        let buf = Bytes::from(b"key-value-header".to_vec());
        let mut record = Record::new(
            TopicPartition::new("t", 0),
            7,
            Some(buf.slice(0..3)),
            Some(buf.slice(4..9)),
        );
        record.headers.push(Header::new("h", buf.slice(10..16)));
        record.headers.push(Header::new("i", buf.slice(10..16)));
        record.headers.push(Header::new("j", buf.slice(10..16)));
        let mut w = Work {
            slot: 1,
            epoch: 2,
            hash: 3,
            session: true,
            parked: Some("parked".into()),
            record,
            batch: Vec::new(),
        };
        assert!(!buf.is_unique());
        w.empty();
        assert!(buf.is_unique(), "the emptied work still holds the buffer");
        assert!(w.parked.is_none() && w.record.headers.is_empty());
        assert_eq!(w.record.offset, 7);
    }
}
