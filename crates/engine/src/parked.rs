//! Parked sessions ([`DlqMode::ParkSession`](crate::config::DlqMode::ParkSession)): sessions whose
//! records go to the dead-letter queue, in order, until an operator releases them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use crate::record::TopicPartition;

/// One parked session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedSession {
    /// The partition the session lives in.
    pub partition: TopicPartition,
    /// The session id.
    pub session: Bytes,
    /// Offset of the dead-lettered record that parked it.
    pub since_offset: i64,
    /// Later records sent to the DLQ with reason `parked` so far.
    pub parked_records: u64,
}

#[derive(Debug, Default)]
struct Inner {
    map: Mutex<HashMap<(TopicPartition, Bytes), ParkedSession>>,
    /// `map.len()`, readable without the lock (the hot path checks it per new session).
    len: AtomicUsize,
}

/// The engine's set of parked sessions; get it with
/// [`Engine::parked`](crate::Engine::parked). Cheap to clone; shared with the running engine, so
/// [`ParkedSessions::release`] takes effect at the session's next record.
#[derive(Debug, Clone, Default)]
pub struct ParkedSessions(Arc<Inner>);

impl ParkedSessions {
    fn lock(&self) -> MutexGuard<'_, HashMap<(TopicPartition, Bytes), ParkedSession>> {
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

    /// Parked sessions now, ordered by partition and session id.
    pub fn list(&self) -> Vec<ParkedSession> {
        let mut v: Vec<ParkedSession> = self.lock().values().cloned().collect();
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

    /// Releases a session: its next records are handled again. Returns whether it was parked.
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

    /// Releases every parked session; returns how many there were.
    pub fn release_all(&self) -> usize {
        let n = std::mem::take(&mut *self.lock()).len();
        self.set_len(0);
        n
    }

    /// Parks a session after the dead letter at `offset`.
    pub(crate) fn park(&self, partition: &TopicPartition, session: &[u8], offset: i64) {
        let mut m = self.lock();
        m.entry((partition.clone(), Bytes::copy_from_slice(session)))
            .or_insert_with(|| ParkedSession {
                partition: partition.clone(),
                session: Bytes::copy_from_slice(session),
                since_offset: offset,
                parked_records: 0,
            });
        let n = m.len();
        drop(m);
        tracing::warn!(%partition, session = %String::from_utf8_lossy(session), offset,
            "session parked: its later records go to the DLQ until it is released");
        self.set_len(n);
    }

    /// If the session is parked, counts one more parked record and returns the reason text.
    pub(crate) fn parked_reason(
        &self,
        partition: &TopicPartition,
        session: &[u8],
    ) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut m = self.lock();
        let p = m.get_mut(&(partition.clone(), Bytes::copy_from_slice(session)))?;
        p.parked_records += 1;
        Some(format!(
            "session parked since {}@{}",
            p.partition, p.since_offset
        ))
    }

    /// Whether the session is parked (cheap when none is).
    pub(crate) fn contains(&self, partition: &TopicPartition, session: &[u8]) -> bool {
        !self.is_empty()
            && self
                .lock()
                .contains_key(&(partition.clone(), Bytes::copy_from_slice(session)))
    }
}
