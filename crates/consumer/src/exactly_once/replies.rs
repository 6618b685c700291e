//! `TxnReplies`: the engine's reply sink in the exactly-once mode.

use super::queued::Ack;
use super::*;
use crate::replies::{destination, reply_record};

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
            // Nothing is written before every partition is known, so a failed lookup leaves
            // the transaction untouched and the engine simply writes again.
            let partition =
                self.txn
                    .partition_of(topic, key.as_deref())
                    .await
                    .map_err(|reason| ReplyError::Write {
                        delivered: 0,
                        reason,
                    })?;
            records.push((topic, partition, reply_record(reply, key)));
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
