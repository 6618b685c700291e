//! The fetch loop: one multi-partition Fetch per leader broker, positions per owned partition, pause and resume.
//!
//! It runs on a thread of its own, `orderly-fetch`, which also owns the fetch connections (see the
//! crate docs, "Threads").
//!
//! # Ordering with rebalances
//!
//! Every assignment of a partition gets a fresh **epoch**. The fetch loop tags the records it
//! sends with the epoch it fetched under, and [`crate::source::KafkaSource`] drops records whose
//! epoch is not the partition's current one. Events travel through one FIFO channel, and the
//! rebalance bridge sends `Assigned` *before* it adds a partition here, and removes a partition
//! here *before* it sends `Revoked`. So the engine sees a partition's records only between its
//! `Assigned` and its `Revoked`/`Lost`, whatever the interleaving of the two tasks.
//!
//! # Hand-off to the engine
//!
//! A new assignment becomes fetchable in one step ([`FetchState::add_all`]), so its first fetch
//! names every partition. A response is handed to the engine in turns of at most 512 records per
//! partition (`HANDOFF_CHUNK`): every partition's first records before any partition's next
//! ones, so the sessions of the partitions at the end of a large response start as soon as those
//! at its start, instead of after every record before theirs was routed.
//!
//! # Lag of paused partitions
//!
//! A paused partition is not fetched, so its high watermark would go stale. A separate lag poller
//! (a future beside the fetch loop, never awaited by it) reads the high watermarks of all paused
//! partitions every `paused_lag_interval`: one ListOffsets request per leader broker for all of
//! that broker's paused partitions, the brokers concurrently. A slow ListOffsets delays only the
//! next lag reading, never a fetch.
//!
//! # Out-of-range positions
//!
//! When the broker says a position is out of range, the log moved under it: retention or
//! DeleteRecords removed the records below its new start, or an unclean leader election cut the log
//! below the position. The fetcher reads the log's bounds and moves the position as the group's
//! `auto_offset_reset` says (one setting for both the no-commit case and this one). Records that
//! will never be handled because of the move are never skipped silently: an error names the range,
//! and `orderly_offset_reset_skipped_records_total` counts them (see `plan_reset`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orderly_engine::{Header, Record, SharedBuffer, TopicPartition};
use orderly_group::AutoOffsetReset;
use orderly_protocol::messages::list_offsets::{EARLIEST, LATEST};
use orderly_protocol::records::{DecodeOptions, IsolationLevel};
use orderly_protocol::{ConnectionKind, ErrorCode};
use orderly_protocol::{FetchOptions, FetchSpec};
use tokio::sync::{Notify, mpsc, watch};

use crate::cluster::Cluster;
use crate::handoff::Internal;

/// Fetch settings (part of [`crate::ConsumerConfig`]).
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// Long-poll wait per fetch. Default 500 ms.
    pub max_wait: Duration,
    /// Long-poll wait per fetch to a broker that also leads a paused partition (paused for the
    /// engine's memory budget). A broker answers one fetch per connection at a time, so a
    /// partition that resumes waits for the fetch in flight, which long-polls up to `max_wait`
    /// when the other partitions are caught up; this bounds that wait, so a small partition
    /// budget does not turn every pause into a long poll. Default 20 ms.
    pub paused_max_wait: Duration,
    /// Response byte limit per fetch. Default 50 MiB (Java `fetch.max.bytes`).
    pub max_bytes: i32,
    /// Byte limit per partition per fetch. Default 1 MiB (Java `max.partition.fetch.bytes`).
    pub partition_max_bytes: i32,
    /// Isolation. Default read_committed (aborted transactions are never handled).
    pub isolation: IsolationLevel,
    /// How often paused partitions' high watermarks are read, so lag stays current: one
    /// ListOffsets per leader broker for all its paused partitions, off the fetch path. Default 1 s.
    ///
    /// (Where a position that is out of range goes is not a fetch setting: the group's
    /// `auto_offset_reset` decides it, see the module docs.)
    pub paused_lag_interval: Duration,
    /// A corrupt batch (CRC, bad compression) is re-fetched this many times before the driver
    /// fails with an error naming topic, partition and offset. Default 3.
    pub corrupt_batch_retries: u32,
    /// Runs on every fetched record before the engine sees it (e.g. to write a session id the
    /// engine can read into a header). Default none.
    pub prepare: Option<RecordHook>,
}

/// A function applied to each fetched record before the engine routes it.
#[derive(Clone)]
pub struct RecordHook(pub Arc<dyn Fn(&mut Record) + Send + Sync>);

impl std::fmt::Debug for RecordHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordHook")
    }
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            max_wait: Duration::from_millis(500),
            paused_max_wait: Duration::from_millis(20),
            max_bytes: 50 * 1024 * 1024,
            partition_max_bytes: 1024 * 1024,
            isolation: IsolationLevel::ReadCommitted,
            paused_lag_interval: Duration::from_secs(1),
            corrupt_batch_retries: 3,
            prepare: None,
        }
    }
}

/// A partition to fetch: where, from which offset, under which assignment epoch.
type Fetchable = (TopicPartition, i64, u64);

#[derive(Debug)]
struct PartState {
    epoch: u64,
    position: i64,
    paused: bool,
    corrupt_seen: u32,
    /// The last fetch response that answered for this partition without an error, or when it
    /// became fetchable (assigned, resumed): the start of the wait for the next response.
    answered: Instant,
}

/// A partition that is being fetched (assigned, not paused) but got no answer lately
/// ([`FetchState::unanswered`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unanswered {
    /// The partition.
    pub partition: TopicPartition,
    /// Time since its last fetch response (or since it became fetchable).
    pub since: Duration,
}

/// Positions of the owned partitions, shared by the fetch loop, the rebalance bridge and the
/// source (pause/resume). Never held across an await.
#[derive(Debug, Default)]
pub struct FetchState {
    parts: Mutex<HashMap<TopicPartition, PartState>>,
    next_epoch: std::sync::atomic::AtomicU64,
    wake: Notify,
    /// Set once the member's latest rebalance gave it an assignment (possibly empty), cleared
    /// when it loses its partitions (out of the group until it rejoins).
    in_group: std::sync::atomic::AtomicBool,
}

impl FetchState {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TopicPartition, PartState>> {
        // Only plain data lives under this lock; a panic elsewhere leaves it consistent.
        self.parts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new epoch for an assignment.
    pub fn new_epoch(&self) -> u64 {
        self.next_epoch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
    }

    /// Starts fetching `tp` at `position` under `epoch`.
    pub fn add(&self, tp: TopicPartition, position: i64, epoch: u64) {
        self.add_all([(tp, position, epoch)]);
    }

    /// Starts fetching each `(partition, position, epoch)`, all at once: the fetch loop, which
    /// runs on its own thread, sees either none or all of them. Added one by one, an assignment's
    /// first fetch could name only the partitions added before the loop woke, and the rest waited
    /// for that fetch to come back (up to the long-poll wait when the first ones had no data).
    pub fn add_all(&self, parts: impl IntoIterator<Item = (TopicPartition, i64, u64)>) {
        let now = Instant::now();
        let mut map = self.lock();
        let mut added = false;
        for (tp, position, epoch) in parts {
            added = true;
            map.insert(
                tp,
                PartState {
                    epoch,
                    position,
                    paused: false,
                    corrupt_seen: 0,
                    answered: now,
                },
            );
        }
        drop(map);
        if added {
            self.wake.notify_one();
        }
    }

    /// Stops fetching `tp`.
    pub fn remove(&self, tp: &TopicPartition) {
        self.lock().remove(tp);
    }

    /// Pauses or resumes `tp` (no-op if not owned).
    pub fn set_paused(&self, tp: &TopicPartition, paused: bool) {
        if let Some(p) = self.lock().get_mut(tp) {
            if p.paused && !paused {
                p.answered = Instant::now();
            }
            p.paused = paused;
        }
        if !paused {
            self.wake.notify_one();
        }
    }

    /// Records whether the member is in the group with an assignment (see [`FetchState::in_group`]).
    pub fn set_in_group(&self, yes: bool) {
        self.in_group
            .store(yes, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the member joined the group and received its assignment, which may be empty: a
    /// member beyond the partition count is a standby in the group, not a failure. False before
    /// the first assignment and after a loss until the member's next assignment.
    pub fn in_group(&self) -> bool {
        self.in_group.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether any partition is owned (assigned to this member and not yet revoked).
    pub fn owns_any(&self) -> bool {
        !self.lock().is_empty()
    }

    /// The partitions being fetched (owned, not paused for backpressure) whose last fetch
    /// response is older than `bound`, the longest first: what a readiness probe reports as "not
    /// fetching". A paused partition is not fetched on purpose, so it never counts; one that
    /// became fetchable gets `bound` from that moment.
    pub fn unanswered(&self, bound: Duration) -> Vec<Unanswered> {
        let now = Instant::now();
        let mut out: Vec<Unanswered> = self
            .lock()
            .iter()
            .filter(|(_, p)| !p.paused)
            .map(|(tp, p)| Unanswered {
                partition: tp.clone(),
                since: now.saturating_duration_since(p.answered),
            })
            .filter(|u| u.since > bound)
            .collect();
        out.sort_by_key(|u| std::cmp::Reverse(u.since));
        out
    }

    /// Notes a fetch response without error for `tp` under `epoch`.
    fn note_answered(&self, tp: &TopicPartition, epoch: u64) {
        if let Some(p) = self.lock().get_mut(tp) {
            if p.epoch == epoch {
                p.answered = Instant::now();
            }
        }
    }

    /// The fetchable partitions `(tp, position, epoch)`.
    fn plan(&self) -> Vec<Fetchable> {
        self.lock()
            .iter()
            .filter(|(_, p)| !p.paused)
            .map(|(tp, p)| (tp.clone(), p.position, p.epoch))
            .collect()
    }

    /// The paused partitions `(tp, epoch)`.
    fn paused(&self) -> Vec<(TopicPartition, u64)> {
        self.lock()
            .iter()
            .filter(|(_, p)| p.paused)
            .map(|(tp, p)| (tp.clone(), p.epoch))
            .collect()
    }

    /// Moves `tp` to `next` if it is still at `from` under `epoch` (a rebalance or a reset in
    /// between wins). Returns whether it moved.
    fn advance(&self, tp: &TopicPartition, epoch: u64, from: i64, next: i64) -> bool {
        match self.lock().get_mut(tp) {
            Some(p) if p.epoch == epoch && p.position == from => {
                p.position = next;
                p.corrupt_seen = 0;
                true
            }
            _ => false,
        }
    }

    fn note_corrupt(&self, tp: &TopicPartition, epoch: u64) -> u32 {
        match self.lock().get_mut(tp) {
            Some(p) if p.epoch == epoch => {
                p.corrupt_seen += 1;
                p.corrupt_seen
            }
            _ => 0,
        }
    }
}

/// Runs the fetch loop and the lag poller of paused partitions until `stop` turns true or the
/// source side is gone. `reset` is the group's `auto_offset_reset`, applied to positions the
/// broker reports out of range.
///
/// Each leader broker has at most one fetch in flight, and brokers are independent: a long poll
/// waiting on an idle broker never holds back the fetches of a busy one. A broker whose fetch
/// failed is left alone for a backoff that grows with its consecutive failures.
pub(crate) async fn run(
    cluster: Cluster,
    state: Arc<FetchState>,
    config: FetchConfig,
    reset: AutoOffsetReset,
    tx: mpsc::Sender<Internal>,
    stop: watch::Receiver<bool>,
) {
    // Two futures of one task: the fetch loop never awaits the lag poller, and `run` returns only
    // when both have ended.
    tokio::join!(
        fetch_loop(&cluster, &state, &config, reset, &tx, stop.clone()),
        lag_loop(&cluster, &state, &config, &tx, stop),
    );
}

/// The fetch loop running on its own thread, or as a task where no thread could be started
/// ([`spawn`]).
pub(crate) enum FetchTask {
    /// Answered (or dropped, if the thread panicked) when the thread's loop has ended.
    Thread(tokio::sync::oneshot::Receiver<()>),
    /// The loop as a task of the caller's runtime.
    Task(tokio::task::JoinHandle<()>),
}

impl FetchTask {
    /// Waits until the fetch loop has ended (after `stop`, or once the source side is gone).
    pub(crate) async fn wait(self) {
        match self {
            FetchTask::Thread(done) => {
                let _ = done.await;
            }
            FetchTask::Task(task) => {
                let _ = task.await;
            }
        }
    }
}

/// Starts [`run`] on a thread of its own (`orderly-fetch`, a single-threaded tokio runtime),
/// where the fetch connections are opened too (`ConnectionPool::open_on`); the other connections
/// stay on the caller's runtime.
///
/// Why a thread: the fetch loop is I/O and decoding, the engine's workers are the handlers' CPU.
/// On one runtime, a response waits to be read until a runtime thread is free to poll its I/O
/// driver, which a runtime busy with handlers does only between task polls, and the fetch loop
/// (one fetch in flight per broker) stalls behind it; a handler that blocks its thread stops
/// fetching altogether (test `fetching_goes_on_while_a_handler_blocks_the_runtime_thread`). The
/// operating system shares the cores among threads, and a thread woken by its socket runs soon.
/// If the thread cannot be started, the loop runs as a task of the caller's runtime.
pub(crate) fn spawn(
    cluster: Cluster,
    state: Arc<FetchState>,
    config: FetchConfig,
    reset: AutoOffsetReset,
    tx: mpsc::Sender<Internal>,
    stop: watch::Receiver<bool>,
) -> FetchTask {
    let (done_tx, done) = tokio::sync::oneshot::channel();
    // Every other kind of connection stays on the caller's runtime, whoever opens it (the fetch
    // loop refreshes metadata and reads offsets over coordination connections): the fetch thread
    // ends at shutdown before the final commit and the LeaveGroup.
    let caller = tokio::runtime::Handle::current();
    cluster
        .pool()
        .open_on(ConnectionKind::Coordination, caller.clone());
    cluster.pool().open_on(ConnectionKind::Produce, caller);
    // The loop's arguments go to the thread once it has started; if it cannot start, they are
    // still here for the fallback.
    type Args = (
        Cluster,
        Arc<FetchState>,
        FetchConfig,
        mpsc::Sender<Internal>,
        watch::Receiver<bool>,
    );
    let (args_tx, args_rx) = std::sync::mpsc::channel::<Args>();
    let thread = std::thread::Builder::new()
        .name("orderly-fetch".into())
        .spawn(move || {
            let Ok((cluster, state, config, tx, stop)) = args_rx.recv() else {
                return;
            };
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => {
                    cluster
                        .pool()
                        .open_on(ConnectionKind::Fetch, rt.handle().clone());
                    rt.block_on(run(cluster, state, config, reset, tx, stop));
                }
                Err(e) => {
                    tracing::error!(%e, "cannot start the fetch thread's runtime");
                    let _ = tx.try_send(Internal::Fatal(format!(
                        "cannot start the fetch thread's runtime: {e}"
                    )));
                }
            }
            let _ = done_tx.send(());
        });
    match thread {
        Ok(_) => {
            // The thread only ends before receiving if it panicked; `done` then reports it ended.
            let _ = args_tx.send((cluster, state, config, tx, stop));
            FetchTask::Thread(done)
        }
        Err(e) => {
            tracing::warn!(%e, "cannot start the fetch thread; fetching on the caller's runtime");
            FetchTask::Task(tokio::spawn(run(cluster, state, config, reset, tx, stop)))
        }
    }
}

/// Reads the high watermarks of the paused partitions every `paused_lag_interval`: one
/// ListOffsets per leader broker, the brokers concurrently.
async fn lag_loop(
    cluster: &Cluster,
    state: &FetchState,
    config: &FetchConfig,
    tx: &mpsc::Sender<Internal>,
    mut stop: watch::Receiver<bool>,
) {
    let period = config.paused_lag_interval.max(Duration::from_millis(1));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            // A dropped sender also means stop.
            _ = stop.changed() => {}
        }
        if *stop.borrow() || tx.is_closed() || stop.has_changed().is_err() {
            return;
        }
        let paused = state.paused();
        if paused.is_empty() {
            continue;
        }
        let mut by_leader: BTreeMap<i32, Vec<(TopicPartition, u64)>> = BTreeMap::new();
        for (tp, epoch) in paused {
            match cluster.leader(&tp.topic, tp.partition) {
                Some(l) => by_leader.entry(l.node_id).or_default().push((tp, epoch)),
                None => {
                    tracing::debug!(topic = %tp.topic, partition = tp.partition, "lag poll: no leader known")
                }
            }
        }
        let polls = by_leader.into_iter().map(|(leader, parts)| async move {
            let req: Vec<(&str, i32)> = parts
                .iter()
                .map(|(tp, _)| (&*tp.topic, tp.partition))
                .collect();
            let result = cluster
                .list_offsets_at(leader, &req, LATEST, config.isolation)
                .await;
            (leader, parts, result)
        });
        let results = tokio::select! {
            r = futures::future::join_all(polls) => r,
            _ = stop.changed() => return,
        };
        let mut refresh = false;
        for (leader, parts, result) in results {
            let offsets = match result {
                Ok(o) => o,
                Err(e) => {
                    tracing::debug!(broker = leader, %e, partitions = parts.len(), "lag poll failed");
                    refresh = true;
                    continue;
                }
            };
            for ((tp, epoch), hw) in parts.into_iter().zip(offsets) {
                match hw {
                    Ok(hw) => {
                        if tx
                            .send(Internal::HighWatermark { tp, epoch, hw })
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(code) => {
                        tracing::debug!(topic = %tp.topic, partition = tp.partition, ?code, "lag poll failed for a partition");
                        refresh = true;
                    }
                }
            }
        }
        if refresh {
            if let Err(e) = cluster.refresh(&[]).await {
                tracing::warn!(%e, "metadata refresh failed");
            }
        }
    }
}

/// The fetch loop proper (see [`run`]).
async fn fetch_loop(
    cluster: &Cluster,
    state: &FetchState,
    config: &FetchConfig,
    reset: AutoOffsetReset,
    tx: &mpsc::Sender<Internal>,
    mut stop: watch::Receiver<bool>,
) {
    let topic_names: Mutex<HashMap<String, Arc<str>>> = Mutex::default();
    let mut inflight = futures::stream::FuturesUnordered::new();
    let mut busy: HashSet<i32> = HashSet::new();
    // Per broker: consecutive failures and when it may be fetched from again.
    let mut failures: HashMap<i32, (u32, Instant)> = HashMap::new();
    // Per broker: the end of the throttle time its last answer asked for (KIP-219: the broker
    // answers at once and expects nothing from us until then; it would mute the connection).
    let mut throttled: HashMap<i32, Instant> = HashMap::new();
    // The metadata refresh runs beside the fetches, never inside the loop: a refresh waits on
    // whichever broker answers Metadata, which may be the one that just died or stalls, and
    // the partitions of every other leader must keep being fetched meanwhile (a leader kill
    // must not stop the surviving partitions). One refresh at a time; a request that comes
    // while one runs starts another once it ends, but refreshes start at most every
    // `REFRESH_MIN_INTERVAL` (a partition without a leader asks on every turn of the loop).
    let mut refreshing: Option<Refresh> = None;
    let mut want_refresh = false;
    let mut refresh_started: Option<Instant> = None;
    loop {
        if *stop.borrow() || tx.is_closed() {
            return;
        }
        let active = state.plan();

        if !active.is_empty() && cluster.is_stale() {
            want_refresh = true;
        }
        // Group the fetchable partitions by leader; one request per idle leader broker.
        let mut by_leader: BTreeMap<i32, Vec<(TopicPartition, i64, u64, i32)>> = BTreeMap::new();
        let mut missing_leader = false;
        for (tp, pos, epoch) in active {
            match cluster.leader(&tp.topic, tp.partition) {
                Some(l) => by_leader
                    .entry(l.node_id)
                    .or_default()
                    .push((tp, pos, epoch, l.epoch)),
                None => missing_leader = true,
            }
        }
        if missing_leader {
            want_refresh = true;
        }
        // When a wanted refresh may start (now, or after the minimum interval).
        let refresh_at = refresh_started.map_or(Instant::now(), |t| t + REFRESH_MIN_INTERVAL);
        if want_refresh && refreshing.is_none() && refresh_at <= Instant::now() {
            want_refresh = false;
            refresh_started = Some(Instant::now());
            let cluster = cluster.clone();
            refreshing = Some(Box::pin(async move { cluster.refresh(&[]).await }));
        }
        // Brokers that lead a paused partition long-poll briefly (see `paused_max_wait`).
        let paused_leaders: HashSet<i32> = state
            .paused()
            .into_iter()
            .filter_map(|(tp, _)| cluster.leader(&tp.topic, tp.partition))
            .map(|l| l.node_id)
            .collect();
        let now = Instant::now();
        for (leader, parts) in by_leader {
            let backing_off = failures.get(&leader).is_some_and(|(_, until)| *until > now)
                || throttled.get(&leader).is_some_and(|until| *until > now);
            if busy.contains(&leader) || backing_off {
                continue;
            }
            busy.insert(leader);
            let max_wait = if paused_leaders.contains(&leader) {
                config.max_wait.min(config.paused_max_wait)
            } else {
                config.max_wait
            };
            let fetch = fetch_one(
                cluster,
                state,
                config,
                reset,
                tx,
                &topic_names,
                leader,
                parts,
                max_wait,
            );
            inflight.push(async move { (leader, fetch.await) });
        }

        // Wait for a fetch to finish, a partition to become fetchable, a backoff to pass, or stop.
        let mut idle_wait = Duration::from_millis(200);
        if want_refresh && refreshing.is_none() {
            idle_wait = idle_wait.min(refresh_at.saturating_duration_since(Instant::now()));
        }
        tokio::select! {
            Some((leader, (result, throttle))) = futures::StreamExt::next(&mut inflight), if !inflight.is_empty() => {
                busy.remove(&leader);
                if throttle.is_zero() {
                    throttled.remove(&leader);
                } else {
                    tracing::debug!(broker = leader, ?throttle, "fetch throttled by the broker's quota");
                    metrics::counter!("orderly_fetch_throttled_seconds_total")
                        .increment(throttle.as_secs());
                    throttled.insert(leader, Instant::now() + throttle);
                }
                match result {
                    Ok(()) => {
                        failures.remove(&leader);
                    }
                    Err(()) => {
                        let entry = failures.entry(leader).or_insert((0, now));
                        entry.0 = entry.0.saturating_add(1);
                        // Capped at 1 s like the Java client's reconnect/retry backoff: each
                        // failed attempt refreshes the metadata, so after a leader dies the cap
                        // bounds how long its partitions wait once the new leader is elected.
                        let delay = orderly_protocol::connection::backoff_delay(
                            Duration::from_millis(50),
                            FETCH_BACKOFF_MAX,
                            entry.0.min(16),
                        );
                        entry.1 = Instant::now() + delay;
                        want_refresh = true;
                    }
                }
            }
            result = async {
                match refreshing.as_mut() {
                    Some(r) => r.await,
                    None => std::future::pending().await,
                }
            }, if refreshing.is_some() => {
                refreshing = None;
                if let Err(e) = result {
                    tracing::warn!(%e, "metadata refresh failed");
                }
            }
            _ = state.wake.notified() => {}
            _ = tokio::time::sleep(idle_wait) => {}
            _ = stop.changed() => return,
        }
    }
}

/// The shortest time between the starts of two metadata refreshes of the fetch loop (Java's
/// `retry.backoff.ms` default).
const REFRESH_MIN_INTERVAL: Duration = Duration::from_millis(100);

/// A metadata refresh running beside the fetch loop.
type Refresh = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(), crate::error::DriverError>> + Send>,
>;

/// The most records of one partition handed to the engine at a time; see `fetch_one_inner`.
const HANDOFF_CHUNK: usize = 512;

/// The longest a failing leader is left alone before the next fetch attempt (and metadata refresh).
const FETCH_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// One fetch to one leader; sends the decoded records. `Err` means back off and refresh metadata;
/// the duration is the throttle time the broker asked for (zero when none or on failure).
#[allow(clippy::too_many_arguments)]
async fn fetch_one(
    cluster: &Cluster,
    state: &FetchState,
    config: &FetchConfig,
    reset: AutoOffsetReset,
    tx: &mpsc::Sender<Internal>,
    topic_names: &Mutex<HashMap<String, Arc<str>>>,
    leader: i32,
    parts: Vec<(TopicPartition, i64, u64, i32)>,
    max_wait: Duration,
) -> (Result<(), ()>, Duration) {
    let mut throttle = Duration::ZERO;
    let result = fetch_one_inner(
        cluster,
        state,
        config,
        reset,
        tx,
        topic_names,
        leader,
        parts,
        max_wait,
        &mut throttle,
    )
    .await;
    (result, throttle)
}

/// [`fetch_one`]'s body; sets `throttle` from the broker's answer.
#[allow(clippy::too_many_arguments)]
async fn fetch_one_inner(
    cluster: &Cluster,
    state: &FetchState,
    config: &FetchConfig,
    reset: AutoOffsetReset,
    tx: &mpsc::Sender<Internal>,
    topic_names: &Mutex<HashMap<String, Arc<str>>>,
    leader: i32,
    parts: Vec<(TopicPartition, i64, u64, i32)>,
    max_wait: Duration,
    throttle: &mut Duration,
) -> Result<(), ()> {
    let specs: Vec<FetchSpec> = parts
        .iter()
        .map(|(tp, pos, _, leader_epoch)| FetchSpec {
            topic: tp.topic.to_string(),
            topic_id: [0; 16],
            partition: tp.partition,
            offset: *pos,
            leader_epoch: *leader_epoch,
            max_bytes: config.partition_max_bytes,
        })
        .collect();
    let opts = FetchOptions {
        max_wait,
        min_bytes: 1,
        max_bytes: config.max_bytes,
        isolation: config.isolation,
        decode: DecodeOptions::default(),
    };
    let pool = cluster.pool();
    let conn = match pool.broker(leader, ConnectionKind::Fetch).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(broker = leader, %e, "no fetch connection");
            return Err(());
        }
    };
    let started = Instant::now();
    let results = match conn.fetch_throttled(&specs, &opts).await {
        Ok((r, t)) => {
            *throttle = t;
            r
        }
        Err(e) => {
            tracing::warn!(broker = leader, %e, "fetch failed");
            pool.invalidate(conn.broker(), ConnectionKind::Fetch).await;
            return Err(());
        }
    };
    metrics::histogram!("orderly_fetch_seconds").record(started.elapsed().as_secs_f64());

    let epochs: HashMap<(&str, i32), u64> = parts
        .iter()
        .map(|(tp, _, epoch, _)| ((&*tp.topic, tp.partition), *epoch))
        .collect();
    let mut retry = false;
    let mut ready = Vec::with_capacity(results.len());
    for pf in results {
        let Some(&epoch) = epochs.get(&(pf.topic.as_str(), pf.partition)) else {
            continue;
        };
        let topic: Arc<str> = {
            let mut names = topic_names
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            names
                .entry(pf.topic.clone())
                .or_insert_with(|| Arc::from(pf.topic.as_str()))
                .clone()
        };
        let tp = TopicPartition {
            topic,
            partition: pf.partition,
        };
        let from = pf.fetch_offset;
        if pf.error.is_none() {
            state.note_answered(&tp, epoch);
        }
        if let Some(err) = &pf.error {
            match err.code() {
                Some(ErrorCode::OFFSET_OUT_OF_RANGE) => {
                    match out_of_range(cluster, config, reset, &tp, from).await {
                        Ok(ResetPlan::Move { to, skipped }) => {
                            if state.advance(&tp, epoch, from, to) {
                                report_reset(&tp, reset, from, to, skipped);
                            }
                        }
                        Ok(ResetPlan::Retry) => {
                            // The log moved back over the position (or the answer came from a
                            // stale leader): fetch again after this broker's backoff.
                            tracing::warn!(topic = %tp.topic, partition = tp.partition, from, "offset out of range, but inside the log now; fetching again");
                            retry = true;
                        }
                        Ok(ResetPlan::Fail) => {
                            let _ = tx
                                .send(Internal::Fatal(format!(
                                    "offset {from} of {}-{} is out of range and auto.offset.reset is none",
                                    tp.topic, tp.partition
                                )))
                                .await;
                            return Err(());
                        }
                        Err(e) => {
                            tracing::warn!(topic = %tp.topic, partition = tp.partition, %e, "offset reset failed");
                            retry = true;
                        }
                    }
                    continue;
                }
                Some(code) => {
                    tracing::debug!(topic = %tp.topic, partition = tp.partition, ?code, "fetch partition error");
                    retry = true;
                    if pf.records.is_empty() {
                        continue;
                    }
                }
                None => {
                    // A corrupt or undecodable batch at `next_offset`; the records before it are valid.
                    let seen = state.note_corrupt(&tp, epoch);
                    tracing::error!(topic = %tp.topic, partition = tp.partition, offset = pf.next_offset, %err, seen, "undecodable batch");
                    if seen > config.corrupt_batch_retries {
                        let _ = tx
                            .send(Internal::Fatal(format!(
                                "undecodable record batch at {}-{} offset {} after {seen} fetches: {err}",
                                tp.topic, tp.partition, pf.next_offset
                            )))
                            .await;
                        return Err(());
                    }
                    retry = true;
                }
            }
        }
        if pf.next_offset <= from && pf.records.is_empty() {
            if tx
                .send(Internal::HighWatermark {
                    tp,
                    epoch,
                    hw: pf.high_watermark,
                })
                .await
                .is_err()
            {
                return Ok(());
            }
            continue;
        }
        if !state.advance(&tp, epoch, from, pf.next_offset) {
            // Revoked, reassigned or reset while the fetch was in flight: drop the data.
            continue;
        }
        ready.push((tp, epoch, pf.high_watermark, pf.records.into_iter()));
    }
    // Hand the records over in turns of at most `HANDOFF_CHUNK` per partition, so every
    // partition of a large response gets its first records to the engine before any gets its
    // rest: handed over partition after partition, the sessions of the last ones would wait for all
    // records before theirs to be routed.
    while !ready.is_empty() {
        for (tp, epoch, hw, rest) in &mut ready {
            let mut records: Vec<Record> = rest
                .by_ref()
                .take(HANDOFF_CHUNK)
                .map(|r| Record {
                    partition: tp.clone(),
                    offset: r.offset,
                    key: r.key,
                    value: r.value,
                    headers: r
                        .headers
                        .into_iter()
                        .map(|h| Header {
                            key: h.key,
                            value: h.value,
                        })
                        .collect(),
                    timestamp_ms: r.timestamp,
                    shared: r.shared.map(|s| SharedBuffer {
                        addr: s.addr,
                        len: s.len,
                    }),
                })
                .collect();
            if let Some(hook) = &config.prepare {
                records.iter_mut().for_each(|r| {
                    (hook.0)(r);
                    // A hook that replaced every field leaves nothing in the shared buffer.
                    r.unshare_if_unused();
                });
            }
            metrics::counter!("orderly_fetched_records_total").increment(records.len() as u64);
            if tx
                .send(Internal::Records {
                    tp: tp.clone(),
                    epoch: *epoch,
                    records,
                    hw: Some(*hw),
                })
                .await
                .is_err()
            {
                return Ok(());
            }
        }
        ready.retain(|(_, _, _, rest)| rest.len() > 0);
    }
    if retry { Err(()) } else { Ok(()) }
}

/// What to do about a position the broker said is out of range, given the log's bounds now.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ResetPlan {
    /// Move the position to `to`; the records at `skipped` will never be handled.
    Move {
        to: i64,
        skipped: Option<Range<i64>>,
    },
    /// The position is inside the log again (the log moved, or the leader changed): fetch again.
    Retry,
    /// `auto_offset_reset` is `none`: the driver stops with an error.
    Fail,
}

/// Decides where a position `from` goes when the broker said it is out of range, with the log
/// now spanning `[start, end)` (`end` is the high watermark; `latest` is where the `Latest`
/// policy starts, the last stable offset under read_committed).
///
/// - `from < start` (retention or DeleteRecords removed records below the new start): `Earliest`
///   moves to `start` and skips `[from, start)`; `Latest` moves to `latest` and skips
///   `[from, latest)`.
/// - `from > end` (the log was cut below the position: an unclean leader election): both policies
///   move to `end`. The engine has already taken every offset below `from`, so the records
///   written at `[end, from)` from now on are taken for records it has seen and are not handled:
///   that range is reported as skipped. (Going back to `start`, as Java does for `Earliest`, would
///   only re-read records the engine drops as already seen.)
/// - `none` fails in both cases; a position inside the log is fetched again.
fn plan_reset(policy: AutoOffsetReset, from: i64, start: i64, end: i64, latest: i64) -> ResetPlan {
    let skip = |r: Range<i64>| (!r.is_empty()).then_some(r);
    if from < start {
        match policy {
            AutoOffsetReset::Earliest => ResetPlan::Move {
                to: start,
                skipped: skip(from..start),
            },
            AutoOffsetReset::Latest => ResetPlan::Move {
                to: latest.max(start),
                skipped: skip(from..latest.max(start)),
            },
            AutoOffsetReset::None => ResetPlan::Fail,
        }
    } else if from > end {
        match policy {
            AutoOffsetReset::None => ResetPlan::Fail,
            AutoOffsetReset::Earliest | AutoOffsetReset::Latest => ResetPlan::Move {
                to: end,
                skipped: skip(end..from),
            },
        }
    } else {
        ResetPlan::Retry
    }
}

/// Reads the log's bounds for `tp` and plans the reset of position `from` (see [`plan_reset`]).
async fn out_of_range(
    cluster: &Cluster,
    config: &FetchConfig,
    policy: AutoOffsetReset,
    tp: &TopicPartition,
    from: i64,
) -> Result<ResetPlan, crate::DriverError> {
    let (topic, partition) = (&*tp.topic, tp.partition);
    let start = cluster
        .list_offset(topic, partition, EARLIEST, IsolationLevel::ReadUncommitted)
        .await?;
    let end = cluster
        .list_offset(topic, partition, LATEST, IsolationLevel::ReadUncommitted)
        .await?;
    let latest = if config.isolation == IsolationLevel::ReadUncommitted {
        end
    } else {
        cluster
            .list_offset(topic, partition, LATEST, config.isolation)
            .await?
    };
    Ok(plan_reset(policy, from, start, end, latest))
}

/// Logs a reset; an error with the range if records are skipped, which are also counted in
/// `orderly_offset_reset_skipped_records_total` (offsets, so compacted gaps count too).
fn report_reset(
    tp: &TopicPartition,
    policy: AutoOffsetReset,
    from: i64,
    to: i64,
    skipped: Option<Range<i64>>,
) {
    let labels = [
        ("topic", tp.topic.to_string()),
        ("partition", tp.partition.to_string()),
    ];
    metrics::counter!("orderly_offset_resets_total", &labels).increment(1);
    match skipped {
        Some(r) => {
            let n = u64::try_from(r.end - r.start).unwrap_or(0);
            metrics::counter!("orderly_offset_reset_skipped_records_total", &labels).increment(n);
            tracing::error!(
                topic = %tp.topic,
                partition = tp.partition,
                ?policy,
                from,
                to,
                skipped_from = r.start,
                skipped_to = r.end,
                skipped = n,
                "offset out of range: position reset; the records at offsets [{}, {}) will not be handled",
                r.start,
                r.end
            );
        }
        None => {
            tracing::warn!(topic = %tp.topic, partition = tp.partition, ?policy, from, to, "offset out of range: position reset, nothing skipped");
        }
    }
}

#[cfg(test)]
mod tests;
