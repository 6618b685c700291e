//! Parked sessions ([`DlqMode::ParkSession`](crate::config::DlqMode::ParkSession)): sessions whose
//! records go to the dead-letter queue, in order, until an operator releases them, the
//! [`ParkedStore`] that makes the parked set outlive the process, and the ordered release by a
//! replay round.
//!
//! # Persistence
//!
//! With a store ([`ParkedSessions::set_store`]) every change is written to it before the record
//! that caused it counts as done: a dead letter of a session in park mode (it parks the session or
//! moves its `last_letter`) and the end of a replay round (it releases the session or moves its
//! `since`). A commit past a record therefore implies the store holds what the record did. On
//! `Assigned` the engine loads the parked sessions of the new partitions from the store before it
//! takes any later event from the source, so no record of those partitions reaches a handler
//! before the partition's parked set is known.
//!
//! # Release by a replay round
//!
//! A parked session is released in order by a **replay round**: its dead letters whose origin is
//! at or after the session's `since` are produced again to the session's own partition, in origin
//! order, each with [`REPLAY_ROUND`] (one id per round) and [`REPLAY_ORIGIN`] (the source offset of
//! the record it copies), the last one also with [`REPLAY_LAST`]. A record's *origin* is its
//! [`REPLAY_ORIGIN`] if it has one, else its own offset: the offsets of the original records, whose
//! order is the session's order. While the session is parked:
//!
//! - a record of the round is handled (unless the round failed, see below);
//! - any other record is dead-lettered as `parked` and raises `last_letter` to its origin;
//! - a record of the round that is dead-lettered (the handler refused it again) fails the round:
//!   `since` becomes its origin and the round's later records are dead-lettered as `parked`;
//! - when the round's last record was handled and no letter has an origin above its origin `C`,
//!   the session is released; otherwise records arrived (and were parked) between the moment the
//!   replay read the DLQ and the round: `since` becomes `C + 1` and the session stays parked; the
//!   next round replays exactly those.
//!
//! Live records that arrive during a round therefore never overtake it: they are parked behind it
//! and replayed by the next round, in their order. `since` never passes a letter that was not
//! handled, and no handled letter lies at or above it, so rounds neither skip nor repeat records.
//!
//! The store can run ahead of the commits: a park written for a record that no commit covers yet
//! (a crash before the next commit, or an aborted transaction in the exactly-once mode) is
//! loaded by the partition's next owner, which starts below it. A record whose origin is below
//! the session's `since` (not of the current round) precedes the park, so it is handled, not
//! dead-lettered as `parked` (a round replays from `since` and would never bring it back).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;

use crate::record::{Record, TopicPartition};
use crate::source::{Source, SourceError, SourceEvent};

/// The header naming a replay round (an id the replaying tool chooses).
pub const REPLAY_ROUND: &str = "orderly-replay-round";
/// The header carrying the source offset of the record a replayed record copies.
pub const REPLAY_ORIGIN: &str = "orderly-replay-origin";
/// The header marking the last record of a replay round.
pub const REPLAY_LAST: &str = "orderly-replay-last";

/// One parked session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedSession {
    /// The partition the session lives in.
    pub partition: TopicPartition,
    /// The session id.
    pub session: Bytes,
    /// Origin (source offset) of the first dead letter of the session not handled since: a
    /// replay round starts there.
    pub since_offset: i64,
    /// Highest origin among the session's dead letters.
    pub last_letter: i64,
    /// A replay round that failed (one of its records was dead-lettered again).
    pub failed_round: Option<String>,
    /// Why it was parked (the first dead letter's reason).
    pub reason: String,
    /// Later records sent to the DLQ with reason `parked` by this process so far.
    pub parked_records: u64,
}

/// A parked-store operation failed; the engine retries it with the DLQ's backoff.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parked-session store: {0}")]
pub struct ParkedStoreError(pub String);

/// A store operation: `'static`, so the engine can keep it across its loop turns.
pub type StoreFuture<T> = Pin<Box<dyn Future<Output = Result<T, ParkedStoreError>> + Send>>;

/// Where parked sessions are kept so that every owner of a partition honours them (a Kafka
/// driver keeps them in a compacted topic). Writes must be durable when their future completes.
pub trait ParkedStore: Send + Sync + 'static {
    /// The parked sessions of `partitions` (`parked_records` is not kept).
    fn load(&self, partitions: &[TopicPartition]) -> StoreFuture<Vec<ParkedSession>>;
    /// Writes (or replaces) one session's entry.
    fn put(&self, entry: &ParkedSession) -> StoreFuture<()>;
    /// Removes one session's entry (it was released).
    fn remove(&self, partition: &TopicPartition, session: &[u8]) -> StoreFuture<()>;
}

/// An in-process [`ParkedStore`] (tests; several engines of one process can share it).
#[derive(Debug, Clone, Default)]
pub struct MemParkedStore(Arc<Mutex<HashMap<(TopicPartition, Bytes), ParkedSession>>>);

impl MemParkedStore {
    fn lock(&self) -> MutexGuard<'_, HashMap<(TopicPartition, Bytes), ParkedSession>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every entry, ordered by partition and session.
    pub fn entries(&self) -> Vec<ParkedSession> {
        let mut v: Vec<ParkedSession> = self.lock().values().cloned().collect();
        v.sort_by(|a, b| (&a.partition, &a.session).cmp(&(&b.partition, &b.session)));
        v
    }
}

impl ParkedStore for MemParkedStore {
    fn load(&self, partitions: &[TopicPartition]) -> StoreFuture<Vec<ParkedSession>> {
        let v = self
            .lock()
            .values()
            .filter(|p| partitions.contains(&p.partition))
            .cloned()
            .collect();
        Box::pin(std::future::ready(Ok(v)))
    }

    fn put(&self, entry: &ParkedSession) -> StoreFuture<()> {
        let mut e = entry.clone();
        e.parked_records = 0;
        self.lock()
            .insert((e.partition.clone(), e.session.clone()), e);
        Box::pin(std::future::ready(Ok(())))
    }

    fn remove(&self, partition: &TopicPartition, session: &[u8]) -> StoreFuture<()> {
        self.lock()
            .remove(&(partition.clone(), Bytes::copy_from_slice(session)));
        Box::pin(std::future::ready(Ok(())))
    }
}

/// A write the engine must make durable before a record counts as done.
#[derive(Debug, Clone)]
pub(crate) enum ParkedWrite {
    Put(ParkedSession),
    Remove(TopicPartition, Bytes),
}

impl ParkedWrite {
    pub(crate) fn start(&self, store: &dyn ParkedStore) -> StoreFuture<()> {
        match self {
            ParkedWrite::Put(e) => store.put(e),
            ParkedWrite::Remove(tp, s) => store.remove(tp, s),
        }
    }
}

/// What a parked session does with its next record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Not parked (any more).
    Released,
    /// Dead-letter it as `parked`, with this text.
    Parked(String),
    /// A record of the session's replay round: handle it; `first` for the round's first record.
    Replay { first: bool },
    /// A record from before the park (its origin is below `since`: the partition restarted
    /// below a park that no commit covers yet): handle it; the session stays parked.
    Before,
}

type Key = (TopicPartition, Bytes);

#[derive(Debug)]
struct Entry {
    s: ParkedSession,
    /// The replay round whose records this process has started.
    round: Option<String>,
}

#[derive(Default)]
struct Inner {
    map: Mutex<HashMap<Key, Entry>>,
    /// `map.len()`, readable without the lock (the hot path checks it per new session).
    len: AtomicUsize,
    store: OnceLock<Arc<dyn ParkedStore>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParkedSessions")
            .field("len", &self.len)
            .field("store", &self.store.get().is_some())
            .finish_non_exhaustive()
    }
}

/// The engine's set of parked sessions; get it with
/// [`Engine::parked`](crate::Engine::parked). Cheap to clone; shared with the running engine, so
/// [`ParkedSessions::release`] takes effect at the session's next record.
#[derive(Debug, Clone, Default)]
pub struct ParkedSessions(Arc<Inner>);

fn header_str<'r>(r: &'r Record, name: &str) -> Option<&'r str> {
    r.header(name).and_then(|v| std::str::from_utf8(v).ok())
}

/// The record's origin: its [`REPLAY_ORIGIN`], else its own offset.
pub(crate) fn origin(r: &Record) -> i64 {
    header_str(r, REPLAY_ORIGIN)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(r.offset)
}

impl ParkedSessions {
    fn lock(&self) -> MutexGuard<'_, HashMap<Key, Entry>> {
        // Plain data: a panic elsewhere cannot leave it inconsistent.
        self.0
            .map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set_len(&self, n: usize) {
        self.0.len.store(n, Relaxed);
        metrics::gauge!("orderly_parked_sessions").set(n as f64);
    }

    /// Keeps the parked set in `store` from now on (see the module doc). Set it before the
    /// engine runs; a second call is ignored and returns false.
    pub fn set_store(&self, store: Arc<dyn ParkedStore>) -> bool {
        self.0.store.set(store).is_ok()
    }

    pub(crate) fn store(&self) -> Option<&Arc<dyn ParkedStore>> {
        self.0.store.get()
    }

    /// Parked sessions now, ordered by partition and session id.
    pub fn list(&self) -> Vec<ParkedSession> {
        let mut v: Vec<ParkedSession> = self.lock().values().map(|e| e.s.clone()).collect();
        v.sort_by(|a, b| (&a.partition, &a.session).cmp(&(&b.partition, &b.session)));
        v
    }

    /// How many sessions are parked.
    pub fn len(&self) -> usize {
        self.0.len.load(Relaxed)
    }

    /// True when no session is parked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Releases a session in this process: its next records are handled again. Returns whether
    /// it was parked. With a store, use [`ParkedSessions::release_durably`]: this one leaves the
    /// store's entry, so the next owner of the partition parks the session again.
    pub fn release(&self, partition: &TopicPartition, session: &[u8]) -> bool {
        let mut m = self.lock();
        let removed = m
            .remove(&(partition.clone(), Bytes::copy_from_slice(session)))
            .is_some();
        let n = m.len();
        drop(m);
        if removed {
            tracing::info!(%partition, session = %String::from_utf8_lossy(session), "parked session released");
            self.set_len(n);
        }
        removed
    }

    /// Releases a session here and in the store (if any). Its dead letters are not replayed:
    /// the session's order resumes with its next record.
    pub async fn release_durably(
        &self,
        partition: &TopicPartition,
        session: &[u8],
    ) -> Result<bool, ParkedStoreError> {
        if let Some(store) = self.store() {
            store.remove(partition, session).await?;
        }
        Ok(self.release(partition, session))
    }

    /// Releases every parked session in this process; returns how many there were.
    pub fn release_all(&self) -> usize {
        let n = std::mem::take(&mut *self.lock()).len();
        self.set_len(0);
        n
    }

    /// Replaces what is known about `partitions` with `entries` (a store's load).
    pub(crate) fn replace(&self, partitions: &[TopicPartition], entries: Vec<ParkedSession>) {
        let mut m = self.lock();
        m.retain(|(tp, _), _| !partitions.contains(tp));
        for s in entries {
            if partitions.contains(&s.partition) {
                tracing::info!(partition = %s.partition, session = %String::from_utf8_lossy(&s.session),
                    since = s.since_offset, "session parked (loaded from the parked-session store)");
                m.insert(
                    (s.partition.clone(), s.session.clone()),
                    Entry { s, round: None },
                );
            }
        }
        let n = m.len();
        drop(m);
        self.set_len(n);
    }

    /// Decides what the parked session's record does, counting parked records.
    pub(crate) fn decide(
        &self,
        partition: &TopicPartition,
        session: &[u8],
        record: &Record,
    ) -> Decision {
        if self.is_empty() {
            return Decision::Released;
        }
        let mut m = self.lock();
        let Some(e) = m.get_mut(&(partition.clone(), Bytes::copy_from_slice(session))) else {
            return Decision::Released;
        };
        if let Some(round) = header_str(record, REPLAY_ROUND) {
            if e.s.failed_round.as_deref() != Some(round) {
                let first = e.round.as_deref() != Some(round);
                e.round = Some(round.to_owned());
                return Decision::Replay { first };
            }
        }
        if origin(record) < e.s.since_offset {
            return Decision::Before;
        }
        e.s.parked_records += 1;
        Decision::Parked(format!(
            "session parked since {}@{}",
            e.s.partition, e.s.since_offset
        ))
    }

    /// A record of a session in park mode was dead-lettered (the write is acknowledged): parks
    /// the session, or records the letter. Returns what the store must hold before the record
    /// counts as done.
    pub(crate) fn dead_lettered(
        &self,
        partition: &TopicPartition,
        session: &[u8],
        record: &Record,
        reason: &str,
        parked: bool,
    ) -> ParkedWrite {
        let o = origin(record);
        let mut m = self.lock();
        let e = m
            .entry((partition.clone(), Bytes::copy_from_slice(session)))
            .or_insert_with(|| {
                tracing::warn!(%partition, session = %String::from_utf8_lossy(session), offset = record.offset,
                    "session parked: its later records go to the DLQ until it is released");
                Entry {
                    s: ParkedSession {
                        partition: partition.clone(),
                        session: Bytes::copy_from_slice(session),
                        since_offset: o,
                        last_letter: o,
                        failed_round: None,
                        reason: reason.to_owned(),
                        parked_records: 0,
                    },
                    round: None,
                }
            });
        e.s.last_letter = e.s.last_letter.max(o);
        if !parked && o < e.s.since_offset && header_str(record, REPLAY_ROUND).is_none() {
            // A record from before the park (see `Decision::Before`) refused after all: a
            // round starts at its letter.
            e.s.since_offset = o;
        }
        if let Some(round) = header_str(record, REPLAY_ROUND) {
            // A record of the round refused again: the round stops here.
            if !parked && e.s.failed_round.as_deref() != Some(round) {
                tracing::warn!(%partition, session = %String::from_utf8_lossy(session), origin = o, round,
                    "a replayed record of a parked session was dead-lettered again: the session stays parked from it");
                e.s.failed_round = Some(round.to_owned());
                e.s.since_offset = o;
            }
        }
        let w = ParkedWrite::Put(e.s.clone());
        let n = m.len();
        drop(m);
        self.set_len(n);
        w
    }

    /// The last record of a replay round was handled: releases the session, or moves its
    /// `since` past the round when letters arrived behind it. `None` if the session is not
    /// parked (nothing to write).
    pub(crate) fn round_handled(
        &self,
        partition: &TopicPartition,
        session: &[u8],
        record: &Record,
    ) -> Option<ParkedWrite> {
        header_str(record, REPLAY_LAST)?;
        let round = header_str(record, REPLAY_ROUND)?;
        let c = origin(record);
        let key = (partition.clone(), Bytes::copy_from_slice(session));
        let mut m = self.lock();
        let e = m.get_mut(&key)?;
        if e.s.failed_round.as_deref() == Some(round) {
            return None;
        }
        if e.s.last_letter <= c {
            m.remove(&key);
            let n = m.len();
            drop(m);
            self.set_len(n);
            tracing::info!(%partition, session = %String::from_utf8_lossy(session), round,
                "parked session released: its replay round was handled");
            return Some(ParkedWrite::Remove(key.0, key.1));
        }
        e.s.since_offset = c + 1;
        e.s.failed_round = None;
        e.round = None;
        tracing::warn!(%partition, session = %String::from_utf8_lossy(session), round, since = c + 1,
            "replay round handled, but records of the session were parked behind it: it stays parked for the next round");
        Some(ParkedWrite::Put(e.s.clone()))
    }

    /// Whether the session is parked (cheap when none is).
    pub(crate) fn contains(&self, partition: &TopicPartition, session: &[u8]) -> bool {
        !self.is_empty()
            && self
                .lock()
                .contains_key(&(partition.clone(), Bytes::copy_from_slice(session)))
    }
}

/// A load in progress (retried until it succeeds).
type Loading = Pin<Box<dyn Future<Output = Vec<ParkedSession>> + Send>>;

/// The engine's view of its source when a store is set: an `Assigned` is passed on only after
/// the parked sessions of its partitions were loaded (retried with backoff until the store
/// answers). Cancel safe: the event and the load in progress are kept across calls.
pub(crate) struct LoadingSource<S> {
    pub(crate) inner: S,
    pub(crate) parked: ParkedSessions,
    pending: Option<(Vec<crate::source::Assignment>, Loading)>,
}

impl<S> LoadingSource<S> {
    pub(crate) fn new(inner: S, parked: ParkedSessions) -> Self {
        Self {
            inner,
            parked,
            pending: None,
        }
    }
}

fn load_until_done(store: Arc<dyn ParkedStore>, partitions: Vec<TopicPartition>) -> Loading {
    Box::pin(async move {
        let mut delay = std::time::Duration::from_millis(100);
        loop {
            match store.load(&partitions).await {
                Ok(v) => return v,
                Err(e) => {
                    tracing::error!(error = %e, ?delay, "loading parked sessions failed; the assigned partitions wait");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(std::time::Duration::from_secs(5));
                }
            }
        }
    })
}

impl<S: Source> Source for LoadingSource<S> {
    async fn next_event(&mut self) -> Result<Option<SourceEvent>, SourceError> {
        loop {
            if let Some((list, load)) = self.pending.as_mut() {
                let entries = load.as_mut().await;
                let parts: Vec<TopicPartition> = list.iter().map(|a| a.partition.clone()).collect();
                self.parked.replace(&parts, entries);
                let list = std::mem::take(list);
                self.pending = None;
                return Ok(Some(SourceEvent::Assigned(list)));
            }
            match self.inner.next_event().await? {
                Some(SourceEvent::Assigned(list)) => match self.parked.store() {
                    Some(store) => {
                        let parts = list.iter().map(|a| a.partition.clone()).collect();
                        self.pending = Some((list, load_until_done(store.clone(), parts)));
                    }
                    None => return Ok(Some(SourceEvent::Assigned(list))),
                },
                other => return Ok(other),
            }
        }
    }

    fn pause(&mut self, partition: &TopicPartition) {
        self.inner.pause(partition);
    }

    fn resume(&mut self, partition: &TopicPartition) {
        self.inner.resume(partition);
    }

    fn commit(
        &mut self,
        offsets: Vec<(TopicPartition, crate::source::CommitPoint)>,
    ) -> impl Future<Output = Result<(), SourceError>> + Send + 'static {
        self.inner.commit(offsets)
    }

    fn lease(&self) -> Option<Arc<dyn crate::source::Lease>> {
        self.inner.lease()
    }
}
