//! `KafkaDeadLetters`: the engine's dead-letter sink on a Kafka topic (acks=all, session-keyed partitioning).

use orderly_engine::{DeadLetter, DeadLetterSink, DlqError, SessionIdFrom};
use orderly_protocol::partitioner::partition_for_key;
use orderly_protocol::{ProduceRecord, Producer, WireHeader};

use crate::burst_log::BurstLog;
use crate::exactly_once::Transactions;

/// Writes dead letters to one topic.
///
/// The record keeps its key. Its DLQ partition is chosen like Java's default partitioner
/// (murmur2, which our producer copies) would for the **session id** (the key, or the header
/// named by [`KafkaDeadLetters::with_session_id`]), so every dead letter of a session lands on one
/// DLQ partition, in the order the session produced them: the DLQ can be replayed in session
/// order even when one session's records carry different keys. Headers are the original ones, in order, then
/// `orderly-dlq-*` headers naming the source and the failure (see [`DeadLetter::headers`]), plus
/// the record's `traceparent` carried along as an original header. `send` returns only after the
/// broker acknowledged the write with acks=all.
///
/// The producer is idempotent by default ([`orderly_protocol::ProducerConfig::idempotent`]): a
/// write retried after a lost acknowledgement is recognised by the broker from its producer id and
/// sequence, so one dead letter is one DLQ record. A write that cannot be acknowledged within the
/// producer's delivery timeout (120 s by default) is the sink's error.
#[derive(Debug)]
pub struct KafkaDeadLetters {
    producer: Producer,
    topic: String,
    session_id: SessionIdFrom,
    /// In exactly-once mode, dead letters are written in the open transaction instead.
    txn: Option<Transactions>,
    /// A line per dead letter (INFO), a summary (WARN) for a burst.
    lines: BurstLog,
}

impl KafkaDeadLetters {
    /// A sink writing to `topic` through `producer`.
    pub fn new(producer: Producer, topic: impl Into<String>) -> Self {
        KafkaDeadLetters {
            producer,
            topic: topic.into(),
            session_id: SessionIdFrom::Key,
            txn: None,
            lines: BurstLog::default(),
        }
    }

    /// Writes the dead letters in `txn`'s open transaction (exactly-once mode): a dead letter
    /// becomes visible, and its record done for the committed offsets, when that transaction
    /// commits.
    pub(crate) fn in_transactions(mut self, txn: Transactions) -> Self {
        self.txn = Some(txn);
        self
    }

    /// Where the session id is read from (as the engine reads it); the key by default.
    pub fn with_session_id(mut self, from: SessionIdFrom) -> Self {
        self.session_id = from;
        self
    }
}

impl DeadLetterSink for KafkaDeadLetters {
    async fn send(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        let record = ProduceRecord {
            key: letter.record.key.clone(),
            value: letter.record.value.clone(),
            headers: letter
                .headers()
                .into_iter()
                .map(|h| WireHeader {
                    key: h.key,
                    value: h.value,
                })
                .collect(),
            timestamp: Some(letter.record.timestamp_ms),
        };
        let session = match &self.session_id {
            SessionIdFrom::Key => None,
            SessionIdFrom::Header(name) => letter.record.header(name),
        };
        if let Some(txn) = &self.txn {
            return match txn
                .write_dead_letter(letter, &self.topic, session.map(|s| &s[..]), record)
                .await
            {
                Ok((partition, _)) => {
                    if self.lines.line(&self.topic) {
                        tracing::info!(
                        dlq = %self.topic, dlq_partition = partition,
                        topic = %letter.record.partition.topic, partition = letter.record.partition.partition,
                        offset = letter.record.offset, reason = letter.reason.code(),
                        "record dead-lettered (in the open transaction)"
                        );
                    }
                    Ok(())
                }
                Err(e) => Err(DlqError(format!("writing to {}: {e}", self.topic))),
            };
        }
        let sent = match session {
            Some(s) => match self.producer.partitions(&self.topic).await {
                Ok(n) => {
                    let p = partition_for_key(s, n);
                    self.producer
                        .send_batch(&self.topic, p, std::slice::from_ref(&record))
                        .await
                        .map(|o| (p, o))
                }
                Err(e) => Err(e),
            },
            None => self.producer.send(&self.topic, record).await,
        };
        match sent {
            Ok((partition, offset)) => {
                if self.lines.line(&self.topic) {
                    tracing::info!(
                        dlq = %self.topic, dlq_partition = partition, dlq_offset = offset,
                        topic = %letter.record.partition.topic, partition = letter.record.partition.partition,
                        offset = letter.record.offset, reason = letter.reason.code(), "record dead-lettered"
                    );
                }
                Ok(())
            }
            Err(e) => Err(DlqError(format!("writing to {}: {e}", self.topic))),
        }
    }
}
