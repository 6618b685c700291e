//! `TxnReplies`: the engine's reply sink in the exactly-once mode.

use super::queued::Ack;
use super::*;
use crate::replies::{MAX_RECORD_BYTES, destination, record_bytes_in_request, reply_record};

/// The engine's [`ReplySink`] in exactly-once mode: replies in the open transaction, keyed and
/// routed as [`crate::KafkaReplies`] routes them (own topic or the default one, own key or the
/// session id, murmur2), answered once queued in the open transaction; they become visible to
/// read_committed readers when the transaction holding them commits.
#[derive(Debug, Clone)]
pub(crate) struct TxnReplies {
    txn: Transactions,
    default_topic: Option<String>,
}

impl TxnReplies {
    pub(crate) fn new(txn: Transactions, default_topic: Option<String>) -> Self {
        TxnReplies { txn, default_topic }
    }

    async fn write(
        &self,
        origin: &Record,
        session: Option<&[u8]>,
        replies: &[Reply],
    ) -> Result<(), ReplyError> {
        let mut records = Vec::with_capacity(replies.len());
        for reply in replies {
            let (topic, key) = destination(reply, self.default_topic.as_deref(), session)?;
            let record = reply_record(reply, key);
            // The broker would refuse it, the transaction abort, and the record come back with
            // the same reply: refused here, its record goes to the dead-letter topic instead.
            let size = record_bytes_in_request(&record);
            if size > MAX_RECORD_BYTES {
                return Err(ReplyError::Invalid(format!(
                    "a reply to {topic} takes {size} bytes in a produce request, more than the {MAX_RECORD_BYTES} one may carry"
                )));
            }
            // Nothing is written before every partition is known, so a failed lookup leaves
            // the transaction untouched and the engine simply writes again.
            let partition = self
                .txn
                .partition_of(topic, record.key.as_deref())
                .await
                .map_err(|reason| ReplyError::Write {
                    delivered: 0,
                    reason,
                })?;
            records.push((topic, partition, record));
        }
        self.txn
            .write((&origin.partition, origin.offset), records, Ack::Queued)
            .await
            .map_err(|reason| ReplyError::Write {
                delivered: 0,
                reason,
            })
    }
}

impl ReplySink for TxnReplies {
    fn send<'a>(
        &'a self,
        origin: &'a Record,
        session: Option<&'a [u8]>,
        replies: &'a [Reply],
    ) -> ReplyFuture<'a> {
        Box::pin(self.write(origin, session, replies))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replies::KafkaReplies;
    use orderly_protocol::{ConnectionConfig, Producer, ProducerConfig};

    /// Every reply's future is allocated: kept under 1 KiB, glibc serves it from its small-size
    /// caches, where a larger request first consolidates every freed small chunk. (The partition
    /// lookup's metadata request, inline, made it 2.5 KiB.)
    #[tokio::test]
    async fn a_reply_future_is_small() {
        let pool = Arc::new(ConnectionPool::new(
            vec!["127.0.0.1:1".into()],
            ConnectionConfig::default(),
        ));
        let txn = Transactions::new(
            pool.clone(),
            TxnSettings {
                transactional_id: "t".into(),
                timeout: Duration::from_secs(60),
                group_id: "g".into(),
                instance_id: None,
                metadata_limit: 4000,
            },
        );
        let in_txn = TxnReplies::new(txn, Some("out".into()));
        let at_least_once = KafkaReplies::new(
            Producer::new(pool, ProducerConfig::default()),
            Some("out".into()),
        );
        let origin = Record::new(TopicPartition::new("in", 0), 1, None, None);
        let replies = [Reply::new("x")];
        let sinks: [(&str, &dyn ReplySink); 2] =
            [("exactly-once", &in_txn), ("at-least-once", &at_least_once)];
        for (name, sink) in sinks {
            let fut = sink.send(&origin, Some(b"s"), &replies);
            let size = std::mem::size_of_val(&*fut);
            assert!(size < 1024, "{name}: a reply's future takes {size} bytes");
        }
    }
}
