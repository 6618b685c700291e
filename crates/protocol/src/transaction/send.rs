//! The send path: a record to its partition, a batch to one partition, sequenced as the
//! idempotent producer's batches (one in flight per partition) and retried with its sequence.

use std::sync::Arc;

use tokio::time::Instant;

use super::error::{Action, TxnError, action};
use super::producer::{InFlight, TransactionalProducer};
use crate::connection::backoff_delay;
use crate::data::BatchSequence;
use crate::error::{Error, ErrorCode};
use crate::partitioner::partition_for_key;
use crate::producer::leader_unreachable;
use crate::records::ProduceRecord;

/// The most partitions a topic may have to join a transaction whole ([`TransactionalProducer::send_batches`]).
const REGISTER_WHOLE_TOPIC: i32 = 64;

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
    /// transaction first if it is new to it ([`TransactionalProducer::send_batches`] with one
    /// batch). Returns the batch's base offset (-1 when the broker reported the batch as an
    /// already-written duplicate). Waits while another batch for the same partition is in flight.
    pub async fn send_batch(
        &self,
        topic: &str,
        partition: i32,
        records: &[ProduceRecord],
    ) -> Result<i64, TxnError> {
        self.send_batches(topic, &[(partition, records)])
            .await?
            .pop()
            .unwrap_or_else(|| {
                Err(self.send_failed(Error::Config("no answer for the batch".into()), true))
            })
    }

    /// Readies the producer for writes to `topic` before the first one (its metadata and a
    /// connection to each partition's leader); the number of its partitions.
    pub async fn prepare(&self, topic: &str) -> Result<i32, Error> {
        self.leaders.prepare(topic).await;
        self.leaders.partitions(topic).await
    }

    /// The partition count of `topic`, from the metadata this producer caches (fetched on first
    /// use, retried while the topic is not known yet, up to the operation timeout).
    pub async fn partitions(&self, topic: &str) -> Result<i32, Error> {
        self.leaders.partitions(topic).await
    }

    /// Sends one batch to each of several partitions of `topic` (each partition once) in the open
    /// transaction, as a Kafka producer sends every ready partition's batch to its leader at
    /// once: the partitions new to the transaction are added in one AddPartitionsToTxn (every
    /// partition of a topic of at most 64), and each
    /// leader gets one Produce request for all of its partitions (a broker answers one
    /// connection's requests one at a time, so one request for many partitions is answered
    /// sooner than as many). Each batch is sequenced as [`TransactionalProducer::send_batch`]
    /// sequences it, and a partition refused with a retriable error is sent again with its
    /// sequence until the operation timeout. Returns each partition's base offset (-1 for a
    /// duplicate) or error, in the order given, or `Err` when nothing was sent. A whole request
    /// that failed (a connection broken, no answer in time) counts as a retriable refusal of
    /// each of its batches.
    pub async fn send_batches(
        &self,
        topic: &str,
        batches: &[(i32, &[ProduceRecord])],
    ) -> Result<Vec<Result<i64, TxnError>>, TxnError> {
        let _gate = self.gate.read().await;
        let deadline = Instant::now() + self.config.operation_timeout;
        let (pid, transactional_id) = self.open_transaction("send")?;
        // A topic of up to `REGISTER_WHOLE_TOPIC` partitions joins the transaction whole at its
        // first batch: one AddPartitionsToTxn per topic and transaction instead of one more for
        // each partition a later round touches first (a coordinator can take tens of ms to
        // answer one), for an abort or commit marker on the few partitions left unwritten.
        let mut partitions: Vec<i32> = batches.iter().map(|(p, _)| *p).collect();
        if let Ok(n) = self.leaders.partitions(topic).await
            && n <= REGISTER_WHOLE_TOPIC
        {
            partitions = (0..n).collect();
        }
        let started = Instant::now();
        self.add_partitions(topic, &partitions, pid, &transactional_id, deadline)
            .await?;
        tracing::trace!(
            topic,
            took_us = started.elapsed().as_micros() as u64,
            "partitions in the transaction"
        );
        // Every partition's sequence, locked in partition order (as any caller locks them).
        let mut order: Vec<usize> = (0..batches.len()).collect();
        order.sort_by_key(|&i| batches[i].0);
        let mut seqs: Vec<Option<tokio::sync::OwnedMutexGuard<super::state::Sequence>>> =
            (0..batches.len()).map(|_| None).collect();
        for &i in &order {
            let lock = {
                let mut all = self
                    .sequences
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                Arc::clone(all.entry((topic.to_string(), batches[i].0)).or_default())
            };
            let mut seq = lock.lock_owned().await;
            if seq.owner != Some(pid) {
                seq.owner = Some(pid);
                seq.next = 0;
            }
            seqs[i] = Some(seq);
        }
        let stamps: Vec<BatchSequence> = seqs
            .iter()
            .map(|s| BatchSequence {
                producer_id: pid.id,
                producer_epoch: pid.epoch,
                base_sequence: s.as_ref().map_or(0, |s| s.next),
            })
            .collect();
        let mut guard = InFlight {
            producer: self,
            what: "Produce",
            armed: true,
        };
        let mut results: Vec<Option<Result<i64, TxnError>>> =
            (0..batches.len()).map(|_| None).collect();
        let mut attempt: u32 = 0;
        loop {
            let pending: Vec<usize> = (0..batches.len())
                .filter(|&i| results[i].is_none())
                .collect();
            if pending.is_empty() {
                break;
            }
            let answers = self
                .produce_partitions(
                    topic,
                    batches,
                    &stamps,
                    &pending,
                    &transactional_id,
                    deadline,
                )
                .await;
            let mut retry = false;
            let mut refresh = false;
            for (i, answer) in pending.iter().copied().zip(answers) {
                let e = match answer {
                    Ok(offset) => {
                        if let Some(seq) = seqs[i].as_mut() {
                            seq.next = stamps[i].next_base(batches[i].1.len());
                        }
                        results[i] = Some(Ok(offset));
                        continue;
                    }
                    Err(e) if e.code() == Some(ErrorCode::DUPLICATE_SEQUENCE_NUMBER) => {
                        // The broker holds this batch already: written once, which is the point.
                        if let Some(seq) = seqs[i].as_mut() {
                            seq.next = stamps[i].next_base(batches[i].1.len());
                        }
                        results[i] = Some(Ok(-1));
                        continue;
                    }
                    Err(e) => e,
                };
                let code = e.code();
                if matches!(code.map(action), Some(Action::Fenced)) {
                    results[i] = Some(Err(self.fenced(owned(e))));
                } else if matches!(
                    code,
                    Some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
                        | Some(ErrorCode::CLUSTER_AUTHORIZATION_FAILED)
                ) || matches!(*e, Error::UnsupportedVersion { .. })
                {
                    results[i] = Some(Err(self.fatal(owned(e))));
                } else if (e.is_retriable() || leader_unreachable(&e)) && Instant::now() < deadline
                {
                    tracing::debug!(topic, partition = batches[i].0, error = %e, attempt,
                        "transactional produce refused for now; sending again");
                    refresh |= code.is_some_and(ErrorCode::needs_metadata_refresh)
                        || e.breaks_connection()
                        || leader_unreachable(&e);
                    retry = true;
                } else {
                    // The transaction can only abort now, and the abort takes a new epoch,
                    // which restarts every partition's sequence: whether the broker holds this
                    // batch is not certain (an answer lost, a refusal the broker logged anyway,
                    // its sequence state lost or moved on), and a later batch under this
                    // batch's sequence would be answered as its duplicate and never written.
                    results[i] = Some(Err(self.send_failed(owned(e), true)));
                }
            }
            if !retry {
                continue;
            }
            if self.state() != super::state::TxnState::InTransaction {
                // Another partition failed for good: the transaction can only abort, and the
                // partitions still waiting for a retry fail with it.
                for r in results.iter_mut().filter(|r| r.is_none()) {
                    let inner = self.lock();
                    *r = Some(Err(Self::refusal("send", inner.state, &inner)));
                }
                break;
            }
            if refresh {
                let _ = tokio::time::timeout_at(deadline, self.leaders.refresh(topic)).await;
            }
            let cfg = self.pool.config();
            let wait = backoff_delay(cfg.backoff_initial, cfg.backoff_max, attempt);
            tokio::time::sleep_until((Instant::now() + wait).min(deadline)).await;
            attempt = attempt.saturating_add(1);
        }
        guard.armed = false;
        Ok(results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(self.send_failed(Error::Config("a batch left unsent".into()), true))
                })
            })
            .collect())
    }

    /// One transactional Produce per leader for the batches `which` of `batches`, side by side;
    /// each batch's answer, in the order of `which` (a request that failed as a whole answers
    /// each of its batches with its error).
    async fn produce_partitions(
        &self,
        topic: &str,
        batches: &[(i32, &[ProduceRecord])],
        stamps: &[BatchSequence],
        which: &[usize],
        transactional_id: &str,
        deadline: Instant,
    ) -> Vec<Result<i64, Arc<Error>>> {
        let mut answers: Vec<Option<Result<i64, Arc<Error>>>> =
            which.iter().map(|_| None).collect();
        // Batches by leader connection (positions in `which`).
        let mut groups: Vec<(Arc<crate::BrokerConnection>, Vec<usize>)> = Vec::new();
        for (k, &i) in which.iter().enumerate() {
            match self.leaders.leader_connection(topic, batches[i].0).await {
                Ok(conn) => match groups.iter_mut().find(|(c, _)| Arc::ptr_eq(c, &conn)) {
                    Some((_, ks)) => ks.push(k),
                    None => groups.push((conn, vec![k])),
                },
                Err(e) => answers[k] = Some(Err(Arc::new(e))),
            }
        }
        let timeout = self.config.timeout;
        let compression = self.config.compression;
        let requests = groups.iter().map(|(conn, ks)| {
            let parts: Vec<(i32, &[ProduceRecord], BatchSequence)> = ks
                .iter()
                .map(|&k| {
                    let i = which[k];
                    (batches[i].0, batches[i].1, stamps[i])
                })
                .collect();
            async move {
                match tokio::time::timeout_at(
                    deadline,
                    conn.produce_transactional_partitions(
                        topic,
                        &parts,
                        compression,
                        timeout,
                        transactional_id,
                    ),
                )
                .await
                {
                    Ok(r) => r,
                    Err(_) => Err(Error::RequestTimeout {
                        broker: String::new(),
                        api: "Produce",
                        after: self.config.operation_timeout,
                    }),
                }
            }
        });
        let results = futures::future::join_all(requests).await;
        for ((_, ks), result) in groups.iter().zip(results) {
            match result {
                Ok(per) => {
                    for (&k, r) in ks.iter().zip(per) {
                        answers[k] = Some(r.map_err(Arc::new));
                    }
                }
                Err(e) => {
                    // One error for the whole request: each of its batches shares it.
                    let e = Arc::new(e);
                    for &k in ks {
                        answers[k] = Some(Err(Arc::clone(&e)));
                    }
                }
            }
        }
        answers
            .into_iter()
            .map(|a| {
                a.unwrap_or_else(|| Err(Arc::new(Error::Config("no answer for a batch".into()))))
            })
            .collect()
    }
}

/// The error itself when this answer is its only holder, else a copy (a request's error shared by
/// its batches).
fn owned(e: Arc<Error>) -> Error {
    Arc::try_unwrap(e).unwrap_or_else(|shared| super::error::copy_error(&shared))
}
