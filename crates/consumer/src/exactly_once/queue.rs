//! Writes in the open transaction: a record's output queued per output partition, one produce
//! round per output topic in flight (see the parent module's doc).

use crate::replies::{batch_len, record_bytes};

use super::queued::{Ack, Share, Waiter, room_permits};
use super::*;

impl Transactions {
    /// Writes `records` (each with its topic and partition) in the open transaction as the
    /// output of the record at `origin`: queues them for their partitions' next produce requests
    /// and returns then ([`Ack::Queued`]) or once the broker acknowledged every one
    /// ([`Ack::Written`]). All or nothing for the transaction: a
    /// failure after the first write rewinds it or fails the transactions, also when nobody
    /// waits for it any more.
    pub(super) async fn write(
        &self,
        origin: (&TopicPartition, i64),
        records: Vec<(&str, i32, ProduceRecord)>,
        ack: Ack,
    ) -> Result<(), String> {
        // Room in the queues first (never while holding the gate: a commit waiting for the gate
        // must not wait for room that only its own end would make).
        let bytes: usize = records.iter().map(|(_, _, r)| record_bytes(r)).sum();
        let room = Arc::clone(&self.inner.room)
            .acquire_many_owned(room_permits(bytes))
            .await
            .map_err(|_| "the transaction's queues are closed".to_owned())?;
        let gate = Arc::clone(&self.inner.gate).read_owned().await;
        if let Some(r) = self.refused() {
            return Err(r);
        }
        {
            let mut st = self.inner.lock();
            if st.lost.contains(origin.0) {
                return Err(format!(
                    "{}/{} is lost: its records are not ours to answer",
                    origin.0.topic, origin.0.partition
                ));
            }
            if st.handed_back.contains(origin.0) {
                return Err(format!(
                    "{}/{} was handed back: its records are the next owner's to answer",
                    origin.0.topic, origin.0.partition
                ));
            }
            if st.rewinding.contains(origin.0) {
                return Err(format!(
                    "{}/{} is being rewound after an aborted transaction",
                    origin.0.topic, origin.0.partition
                ));
            }
            if !st.open {
                if let Err(e) = self.inner.producer.begin() {
                    drop(st);
                    return Err(self.write_failed(
                        origin.0,
                        format!("beginning a transaction: {e}"),
                        &e,
                    ));
                }
                st.open = true;
            }
            // From here the open transaction holds output of the origin's partition, acknowledged
            // or not: losing the partition now fails the transaction (see `Transactions::lost`),
            // also if its records are acknowledged only after it was lost and assigned again.
            let offsets = std::iter::once(origin.1).filter(|_| records.is_empty());
            add_pending(&mut st.pending, origin.0, offsets);
            if records.is_empty() {
                return Ok(());
            }
        }
        let wait = ack == Ack::Written;
        let shares = Share::split(gate, room, records.len());
        let acks: Vec<_> = records
            .into_iter()
            .zip(shares)
            .filter_map(|((topic, partition, record), share)| {
                let origin = (origin.0.clone(), origin.1);
                self.enqueue(topic, partition, record, origin, share, wait)
            })
            .collect();
        for ack in acks {
            ack.await
                .unwrap_or_else(|_| Err("the transaction's sending task ended".to_owned()))?;
        }
        Ok(())
    }

    /// Queues `record` for `topic`/`partition` and starts the topic's sending task if none runs.
    /// With `wait`, the receiver returned learns the outcome.
    fn enqueue(
        &self,
        topic: &str,
        partition: i32,
        record: ProduceRecord,
        origin: (TopicPartition, i64),
        share: Share,
        wait: bool,
    ) -> Option<oneshot::Receiver<Result<(), String>>> {
        let (ack, rx) = if wait {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let waiter = Waiter {
            origin,
            ack,
            _share: share,
        };
        let start = {
            let mut queues = self
                .inner
                .queues
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let q = queues.entry(topic);
            q.push(partition, record, waiter);
            !std::mem::replace(&mut q.sending, true)
        };
        if start {
            let txn = self.clone();
            let topic = topic.to_owned();
            self.inner
                .output
                .spawn(async move { txn.send_queued(topic).await });
        }
        rx
    }

    /// Sends the topic's queued records until its queue is empty: each round takes a batch from
    /// every partition with records waiting and sends them together (one Produce request per
    /// leader, [`TransactionalProducer::send_batches`]); the next round takes what queued
    /// meanwhile. A batch's origins join the pending set before their writes learn of the
    /// acknowledgement; a failed batch rewinds the transaction or fails the mode.
    async fn send_queued(&self, topic: String) {
        let mut partitions: Vec<i32> = Vec::new();
        let mut records: Vec<Vec<ProduceRecord>> = Vec::new();
        let mut waiters: Vec<Vec<Waiter>> = Vec::new();
        loop {
            partitions.clear();
            records.clear();
            waiters.clear();
            {
                let mut queues = self
                    .inner
                    .queues
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let Some(q) = queues.get_mut(topic.as_str()) else {
                    return;
                };
                if q.is_empty() {
                    // The queue stays, with its capacity, for the next write.
                    q.sending = false;
                    return;
                }
                for w in q.waiting.iter_mut().filter(|w| !w.records.is_empty()) {
                    let n = batch_len(&w.records);
                    partitions.push(w.partition);
                    records.push(w.records.drain(..n).collect());
                    waiters.push(w.waiters.drain(..n).collect());
                }
            }
            let batches: Vec<(i32, &[ProduceRecord])> = partitions
                .iter()
                .zip(&records)
                .map(|(p, r)| (*p, r.as_slice()))
                .collect();
            let started = std::time::Instant::now();
            let answers = self.inner.producer.send_batches(&topic, &batches).await;
            tracing::debug!(%topic, partitions = batches.len(),
                records = records.iter().map(Vec::len).sum::<usize>(),
                took_us = started.elapsed().as_micros() as u64, "produce round");
            let answers: Vec<Result<(), TxnError>> = match answers {
                Ok(per) => per.into_iter().map(|r| r.map(|_| ())).collect(),
                Err(e) => {
                    let reason = format!("writing to {topic} in a transaction: {e}");
                    self.round_failed(waiters.drain(..).flatten(), &reason, &e);
                    continue;
                }
            };
            for ((partition, answer), waiters) in
                partitions.iter().zip(answers).zip(waiters.drain(..))
            {
                match answer {
                    Ok(()) => {
                        {
                            let mut st = self.inner.lock();
                            let mut rest = waiters.as_slice();
                            while let Some(first) = rest.first() {
                                let tp = &first.origin.0;
                                let run = rest.iter().take_while(|w| &w.origin.0 == tp).count();
                                let (same, later) = rest.split_at(run);
                                add_pending(&mut st.pending, tp, same.iter().map(|w| w.origin.1));
                                rest = later;
                            }
                        }
                        for w in waiters {
                            if let Some(ack) = w.ack {
                                let _ = ack.send(Ok(()));
                            }
                        }
                    }
                    Err(e) => {
                        let reason =
                            format!("writing to {topic}/{partition} in a transaction: {e}");
                        self.round_failed(waiters, &reason, &e);
                    }
                }
            }
        }
    }

    /// A request for `waiters`' records failed with `e`: their origins' transaction rewinds or
    /// the mode fails, and those waiting learn why.
    fn round_failed(&self, waiters: impl IntoIterator<Item = Waiter>, reason: &str, e: &TxnError) {
        let waiters: Vec<Waiter> = waiters.into_iter().collect();
        let origins: HashSet<&TopicPartition> = waiters.iter().map(|w| &w.origin.0).collect();
        for tp in origins {
            self.write_failed(tp, reason.to_owned(), e);
        }
        for w in waiters {
            if let Some(ack) = w.ack {
                let _ = ack.send(Err(reason.to_owned()));
            }
        }
    }

    /// A write of `origin`'s output failed with `e`: the transaction is rewound (the rewind runs
    /// on its own task once the writes in flight ended) or the mode fails. Returns `reason`.
    fn write_failed(&self, origin: &TopicPartition, reason: String, e: &TxnError) -> String {
        if outcome(e) == Outcome::Stop {
            self.fail(reason.clone());
            return reason;
        }
        self.inner.lock().failed_writes.insert(origin.clone());
        self.schedule_rewind(reason.clone());
        reason
    }

    pub(super) async fn partition_of(
        &self,
        topic: &str,
        key: Option<&[u8]>,
    ) -> Result<i32, String> {
        let n = self
            .inner
            .producer
            .partitions(topic)
            .await
            .map_err(|e| format!("output topic {topic}: {e}"))?;
        Ok(match key {
            Some(k) => partition_for_key(k, n),
            None => 0,
        })
    }

    /// Writes a dead letter (already built as a record for `topic`, partitioned by `session`
    /// or its key) in the open transaction.
    pub(crate) async fn write_dead_letter(
        &self,
        letter: &DeadLetter,
        topic: &str,
        session: Option<&[u8]>,
        record: ProduceRecord,
    ) -> Result<(i32, i64), String> {
        let key = session.or(record.key.as_deref()).map(<[u8]>::to_vec);
        let partition = self.partition_of(topic, key.as_deref()).await?;
        self.write(
            (&letter.record.partition, letter.record.offset),
            vec![(topic, partition, record)],
            Ack::Written,
        )
        .await?;
        Ok((partition, -1))
    }
}

/// Adds `offsets` of `tp` to the open transaction's pending offsets.
fn add_pending(
    pending: &mut HashMap<TopicPartition, Vec<i64>>,
    tp: &TopicPartition,
    offsets: impl Iterator<Item = i64>,
) {
    match pending.get_mut(tp) {
        Some(v) => v.extend(offsets),
        None => {
            pending.insert(tp.clone(), offsets.collect());
        }
    }
}
