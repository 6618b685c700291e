//! A session as a worker keeps it: its id (`SessionId`, inline when short), its queue of records
//! waiting behind the one in flight, and what its next record may start with.

use std::collections::VecDeque;

use tokio::time::Instant;

use super::context::{Ctx, Outcome};
use crate::config::{DlqMode, SessionIdFrom};
use crate::dedup::DedupStore;
use crate::handoff::work::Work;
use crate::record::{Record, TopicPartition};

impl Session {
    /// What a finished record of this session changes in it: a dead letter parks the session
    /// (in `DlqMode::ParkSession`); a handled record's event id is remembered for dedup. Only a
    /// record the handler finished counts as seen: a dead-lettered one comes back through
    /// `dlq replay` with the same event id and must reach the handler then. A record of an
    /// assignment that is no longer `live` is not remembered.
    pub(super) fn after<H, D>(&mut self, ctx: &Ctx<H, D>, w: &Work, outcome: Outcome, live: bool) {
        if outcome == Outcome::DeadLettered
            && ctx.config.dlq_mode == DlqMode::ParkSession
            && !self.parked
        {
            // The registry (and store) were updated before the dead letter counted as done.
            self.parked = true;
        }
        if outcome == Outcome::Handled && live {
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
pub(super) struct Session {
    pub(super) hash: u64,
    /// The partition the session lives in: the same id on another partition (or topic) is
    /// another session, with its own order, dedup store and sequence check.
    pub(super) tp: TopicPartition,
    /// A private copy of the id: holding a slice of the fetch buffer would pin the whole buffer.
    pub(super) id: SessionId,
    pub(super) queue: VecDeque<Work>,
    pub(super) busy: bool,
    pub(super) last_active: Instant,
    /// The partition's assignment epoch of the record started last: a new assignment replays
    /// from the committed watermark, so the sequence check starts over.
    pub(super) epoch: u32,
    pub(super) last_seq: Option<u64>,
    pub(super) dedup: Option<Box<dyn DedupStore>>,
    /// Parked after a dead letter ([`DlqMode::ParkSession`]); the registry decides until when.
    pub(super) parked: bool,
    /// While the session's next record waits for more records to join its batch
    /// (`EngineConfig::batch_linger`): its entry in `Scheduler::lingers` (`run.rs`). The record waits at the
    /// front of `queue`, and the session counts as busy.
    pub(super) linger: Option<u64>,
    /// The wait is over: the next record starts without waiting again.
    pub(super) lingered: bool,
}

/// A session's own copy of its id: up to 23 bytes inline in the session table (no allocation, and
/// comparing it reads the table entry already in cache), longer ones on the heap.
pub(super) enum SessionId {
    Inline { len: u8, bytes: [u8; 23] },
    Heap(Box<[u8]>),
}

impl SessionId {
    pub(super) fn new(id: &[u8]) -> Self {
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
pub(super) struct Counts {
    pub(super) handled: u64,
    pub(super) dead_lettered: u64,
    pub(super) deduplicated: u64,
    pub(super) abandoned: u64,
    pub(super) sessions_delta: i64,
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
