//! What the dispatch loop sends a worker (`WorkerMsg`, carrying `Work`) and what a worker reports
//! back (`Completion`).

use std::sync::Arc;

use super::control::PartitionControl;
use crate::record::Record;

/// One record on its way to a worker.
pub(crate) struct Work {
    pub(crate) slot: u32,
    pub(crate) epoch: u32,
    /// Routing hash of the session id (meaningless when `session` is false).
    pub(crate) hash: u64,
    /// False for the unordered lane.
    pub(crate) session: bool,
    /// Set when the record's session is parked: it goes to the DLQ with this reason text.
    pub(crate) parked: Option<Box<str>>,
    pub(crate) record: Record,
    /// Later records of the same session that start with this one in one handler call
    /// (`EngineConfig::batch_max`); empty for a record on its own.
    pub(crate) batch: Vec<Work>,
}

impl Work {
    /// Drops what the record holds (its bytes, and with them its share of a fetch buffer), so an
    /// emptied box keeps nothing alive. Every field is named: a new one must be decided on here.
    pub(crate) fn empty(&mut self) {
        let Work {
            slot: _,
            epoch: _,
            hash: _,
            session: _,
            parked,
            record,
            batch,
        } = self;
        *parked = None;
        *batch = Vec::new();
        let Record {
            partition: _,
            offset: _,
            key,
            value,
            headers,
            timestamp_ms: _,
            shared,
        } = record;
        *key = None;
        *value = None;
        *headers = crate::record::Headers::new();
        *shared = None;
    }
}

pub(crate) enum WorkerMsg {
    Batch(Vec<Work>),
    /// A partition was assigned; sent before any of its records.
    AddPartition(Arc<PartitionControl>),
    /// Forget a partition; its queued records are dropped without a report, and its sessions
    /// forget the event ids they remember (see `EngineConfig::event_id_header`).
    RemovePartition {
        slot: u32,
        epoch: u32,
        partition: crate::record::TopicPartition,
    },
    /// Skip queued records of a partition now (reported as abandoned), so a revoke only waits for
    /// records whose handler already runs.
    Purge {
        slot: u32,
        epoch: u32,
    },
}

impl WorkerMsg {
    /// Records the message carries.
    pub(crate) fn records(&self) -> usize {
        match self {
            WorkerMsg::Batch(b) => b.len(),
            _ => 0,
        }
    }
}

/// A record reached a terminal state (`done`) or was given up (`!done`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Completion {
    pub(crate) slot: u32,
    pub(crate) epoch: u32,
    pub(crate) offset: i64,
    pub(crate) done: bool,
}

/// Most records one batch to a worker carries; a fuller batch is sent at once. A fetch response
/// brings a few thousand records per partition: collected whole, a worker's batch (~300 bytes a
/// record) would outgrow what the buffer pool keeps (`recycle::KEEP_BYTES`, checked there), and
/// every batch would be grown from empty again, through reallocations and fresh pages.
pub(crate) const BATCH_MAX: usize = 1024;

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
