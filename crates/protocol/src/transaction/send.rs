//! The send path: a record to its partition, a batch to one partition, sequenced as the
//! idempotent producer's batches (one in flight per partition) and retried with its sequence.

use std::sync::Arc;

use tokio::time::Instant;

use super::error::{Action, TxnError, action};
use super::producer::{InFlight, TransactionalProducer};
use crate::connection::backoff_delay;
use crate::data::{BatchSequence, TxnStamp};
use crate::error::{Error, ErrorCode};
use crate::partitioner::partition_for_key;
use crate::producer::leader_unreachable;
use crate::records::ProduceRecord;

impl TransactionalProducer {
    /// Sends one record to the partition Java would choose for its key (round robin without a
    /// key) in the open transaction. Returns `(partition, offset)`.
    pub async fn send(&self, topic: &str, record: ProduceRecord) -> Result<(i32, i64), TxnError> {
        self.open_transaction("send")?;
        let n = match self.leaders.partitions(topic).await {
            Ok(n) => n,
            // Nothing was sent: the transaction is as it was.
            Err(e) if e.is_retriable() || matches!(e, Error::DeliveryTimeout { .. }) => {
                return Err(TxnError::Retriable {
                    op: "send",
                    source: Box::new(e),
                });
            }
            Err(e) => return Err(self.send_failed(e, false)),
        };
        let partition = match record.key.as_deref() {
            Some(k) => partition_for_key(k, n),
            None => {
                let r = self
                    .round_robin
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                i32::try_from(r % u32::try_from(n.max(1)).unwrap_or(1)).unwrap_or(0)
            }
        };
        let offset = self
            .send_batch(topic, partition, std::slice::from_ref(&record))
            .await?;
        Ok((partition, offset))
    }

    /// Sends one batch to one partition in the open transaction, adding the partition to the
    /// transaction first if it is new to it. Returns the batch's base offset (-1 when the broker
    /// reported the batch as an already-written duplicate). Waits while another batch for the
    /// same partition is in flight.
    pub async fn send_batch(
        &self,
        topic: &str,
        partition: i32,
        records: &[ProduceRecord],
    ) -> Result<i64, TxnError> {
        let _gate = self.gate.read().await;
        let deadline = Instant::now() + self.config.operation_timeout;
        let (pid, transactional_id) = self.open_transaction("send")?;
        self.add_partition(topic, partition, pid, &transactional_id, deadline)
            .await?;
        let lock = {
            let mut seqs = self
                .sequences
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            Arc::clone(seqs.entry((topic.to_string(), partition)).or_default())
        };
        let mut seq = lock.lock().await;
        if seq.owner != Some(pid) {
            seq.owner = Some(pid);
            seq.next = 0;
        }
        let stamp = BatchSequence {
            producer_id: pid.id,
            producer_epoch: pid.epoch,
            base_sequence: seq.next,
        };
        let mut guard = InFlight {
            producer: self,
            what: "Produce",
            armed: true,
        };
        let mut attempt: u32 = 0;
        loop {
            let result = match tokio::time::timeout_at(
                deadline,
                self.produce(topic, partition, records, &transactional_id, stamp),
            )
            .await
            {
                Ok(r) => r,
                Err(_) => Err(Error::RequestTimeout {
                    broker: String::new(),
                    api: "Produce",
                    after: self.config.operation_timeout,
                }),
            };
            let e = match result {
                Ok(offset) => {
                    guard.armed = false;
                    seq.next = stamp.next_base(records.len());
                    return Ok(offset);
                }
                Err(e) if e.code() == Some(ErrorCode::DUPLICATE_SEQUENCE_NUMBER) => {
                    // The broker holds this batch already: written once, which is the point.
                    guard.armed = false;
                    seq.next = stamp.next_base(records.len());
                    return Ok(-1);
                }
                Err(e) => e,
            };
            let code = e.code();
            if matches!(code.map(action), Some(Action::Fenced)) {
                guard.armed = false;
                return Err(self.fenced(e));
            }
            if matches!(
                code,
                Some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                    | Some(ErrorCode::CLUSTER_AUTHORIZATION_FAILED)
            ) || matches!(e, Error::UnsupportedVersion { .. })
            {
                guard.armed = false;
                return Err(self.fatal(e));
            }
            let retriable = e.is_retriable() || leader_unreachable(&e);
            if retriable && Instant::now() < deadline {
                if code.is_some_and(ErrorCode::needs_metadata_refresh)
                    || e.breaks_connection()
                    || leader_unreachable(&e)
                {
                    let _ = tokio::time::timeout_at(deadline, self.leaders.refresh(topic)).await;
                }
                let cfg = self.pool.config();
                let wait = backoff_delay(cfg.backoff_initial, cfg.backoff_max, attempt);
                tokio::time::sleep_until((Instant::now() + wait).min(deadline)).await;
                if Instant::now() < deadline {
                    attempt = attempt.saturating_add(1);
                    continue;
                }
            }
            // The transaction can only abort now, and the abort takes a new epoch, which
            // restarts every partition's sequence: whether the broker holds this batch is not
            // certain (an answer lost, a refusal the broker logged anyway, its sequence state
            // lost or moved on), and a later batch under this batch's sequence would be answered
            // as its duplicate and never written.
            guard.armed = false;
            return Err(self.send_failed(e, true));
        }
    }

    /// One transactional Produce to the partition's leader.
    async fn produce(
        &self,
        topic: &str,
        partition: i32,
        records: &[ProduceRecord],
        transactional_id: &str,
        stamp: BatchSequence,
    ) -> Result<i64, Error> {
        let conn = self.leaders.leader_connection(topic, partition).await?;
        conn.produce_transactional(
            topic,
            partition,
            records,
            self.config.compression,
            self.config.timeout,
            TxnStamp {
                transactional_id,
                sequence: stamp,
            },
        )
        .await
    }
}
