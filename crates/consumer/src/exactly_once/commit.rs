//! The end of a transaction: its commit with the group's offsets, and the abort that rewinds
//! (see the parent module's doc).

use super::*;

impl Transactions {
    /// Aborts the open transaction after a failure it cannot survive, recovering the producer's
    /// epoch if it was fenced, and hands every partition with output in it (or a failed write)
    /// to the bridge to rewind to its last committed point. Fails the mode if the producer
    /// cannot go on. The caller holds the gate exclusively.
    pub(super) async fn rewind(&self, reason: String) {
        self.inner.lock().rewind_due = false;
        if self.failure().is_some() {
            return;
        }
        let producer = &self.inner.producer;
        let mut fenced = producer.state() == TxnState::Fenced;
        if matches!(
            producer.state(),
            TxnState::InTransaction | TxnState::AbortableError | TxnState::Aborting
        ) {
            match producer.abort().await {
                Ok(()) => {}
                Err(e) if e.is_fenced() => fenced = true,
                Err(e) => {
                    self.fail_locked(format!("{reason}; aborting the transaction: {e}"));
                    return;
                }
            }
        }
        if fenced {
            if let Err(e) = producer.recover_epoch().await {
                self.fail_locked(format!(
                    "{reason}; another producer holds transactional id {}: {e}",
                    self.inner.transactional_id
                ));
                return;
            }
        }
        if producer.state() != TxnState::Ready {
            self.fail_locked(format!(
                "{reason}; the producer is {:?} after the abort",
                producer.state()
            ));
            return;
        }
        let list = {
            let mut st = self.inner.lock();
            st.open = false;
            let mut affected: HashSet<TopicPartition> =
                st.pending.drain().map(|(tp, _)| tp).collect();
            affected.extend(st.failed_writes.drain());
            let mut list = Vec::new();
            for tp in affected {
                if st.lost.contains(&tp) {
                    continue;
                }
                let Some(base) = st.base.get(&tp) else {
                    continue;
                };
                let enc = metadata::encode(
                    base.offset,
                    base.runs.iter().cloned(),
                    self.inner.metadata_limit,
                );
                list.push(Assignment {
                    partition: tp.clone(),
                    next_offset: base.offset,
                    metadata: enc.text,
                    committed: !st.uncommitted.contains(&tp),
                });
                st.rewinding.insert(tp);
            }
            list
        };
        self.inner.rewinds.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("orderly_transactions_rewound_total").increment(1);
        tracing::warn!(transactional_id = %self.inner.transactional_id, %reason, partitions = list.len(),
            "transaction aborted: its partitions are rewound to their committed offsets and their records handled again");
        if !list.is_empty() && self.inner.rewind_tx.send(list).is_err() {
            self.fail("the consumer is stopping: an aborted transaction's records are left to the next owner".into());
        }
    }

    /// Commits the open transaction with the group's offsets: the engine's `offsets`, extended
    /// by the records whose output the transaction holds (see the module doc).
    pub(crate) async fn commit(
        &self,
        offsets: Vec<(TopicPartition, CommitPoint)>,
    ) -> Result<(), SourceError> {
        let started = std::time::Instant::now();
        let _gate = self.inner.gate.write().await;
        tracing::debug!(
            waited_us = started.elapsed().as_micros() as u64,
            "commit: the gate"
        );
        if let Some(r) = self.refused() {
            return Err(SourceError::Commit(r));
        }
        let (list, finals) = match self.offsets_to_commit(offsets) {
            Ok(x) => x,
            Err(reason) => return Err(self.fail_and_abort(reason).await),
        };
        if self.inner.lock().rewind_due {
            // A write failed since the last commit: this transaction cannot commit.
            let reason = "a write failed in this transaction".to_owned();
            self.rewind(reason.clone()).await;
            return Err(SourceError::Commit(reason));
        }
        if list.is_empty() && !self.inner.lock().open {
            return Ok(());
        }
        if let Err(e) = self.ensure_open() {
            let reason = format!("beginning a transaction: {e}");
            return Err(match outcome(&e) {
                Outcome::Rewind => {
                    self.rewind(reason.clone()).await;
                    SourceError::Commit(reason)
                }
                Outcome::Stop => self.fail_and_abort(reason).await,
            });
        }
        let group = match self.inner.group.get() {
            Some(g) => g.generation(),
            None => {
                return Err(self
                    .fail_and_abort("no group member to commit under".into())
                    .await);
            }
        };
        let meta = GroupMetadata {
            group_id: self.inner.group_id.clone(),
            generation_id: group.generation_id,
            member_id: group.member_id,
            group_instance_id: self.inner.instance_id.clone(),
        };
        let result = async {
            if !list.is_empty() {
                self.inner.producer.send_offsets(&meta, &list).await?;
            }
            self.inner.producer.commit().await
        }
        .await;
        tracing::debug!(
            took_us = started.elapsed().as_micros() as u64,
            partitions = list.len(),
            "commit: transaction ended"
        );
        match result {
            Ok(()) => {
                let mut st = self.inner.lock();
                st.open = false;
                st.pending.clear();
                for (tp, d) in finals {
                    st.base.insert(tp, d);
                }
                metrics::counter!("orderly_transactions_committed_total").increment(1);
                Ok(())
            }
            Err(e) => {
                let reason = format!("committing the transaction: {e}");
                Err(match outcome(&e) {
                    Outcome::Rewind => {
                        self.rewind(reason.clone()).await;
                        SourceError::Commit(reason)
                    }
                    Outcome::Stop => self.fail_and_abort(reason).await,
                })
            }
        }
    }

    /// The offsets the open transaction commits (see the module doc), and the done sets they
    /// stand for; an error if the transaction must not commit.
    #[allow(clippy::type_complexity)]
    fn offsets_to_commit(
        &self,
        offsets: Vec<(TopicPartition, CommitPoint)>,
    ) -> Result<(Vec<TxnOffset>, HashMap<TopicPartition, Done>), String> {
        let st = self.inner.lock();
        if let Some(tp) = st.pending.keys().find(|tp| st.lost.contains(*tp)) {
            return Err(format!(
                "{}/{} was lost while the open transaction holds output of its records",
                tp.topic, tp.partition
            ));
        }
        let mut points: HashMap<TopicPartition, Done> = HashMap::new();
        for (tp, cp) in offsets {
            // The engine's point for a partition being rewound counts records whose output was
            // aborted.
            if st.lost.contains(&tp) || st.rewinding.contains(&tp) {
                continue;
            }
            let d = Done::from_point(cp.offset, &cp.metadata);
            let d = match st.base.get(&tp) {
                Some(b) => d.union(b),
                None => d,
            };
            points.insert(tp, d);
        }
        for (tp, pending) in &st.pending {
            let Some(d) = points.get(tp).or_else(|| st.base.get(tp)) else {
                return Err(format!(
                    "no committed point known for {}/{}, which has output in the transaction",
                    tp.topic, tp.partition
                ));
            };
            let d = d.with_offsets(pending.iter().copied());
            points.insert(tp.clone(), d);
        }
        let mut list = Vec::with_capacity(points.len());
        for (tp, d) in &points {
            let enc = metadata::encode(d.offset, d.runs.iter().cloned(), self.inner.metadata_limit);
            if enc.truncated {
                tracing::warn!(topic = %tp.topic, partition = tp.partition, offset = d.offset,
                    runs = d.runs.len(), kept = enc.runs_encoded,
                    "completed offsets above the watermark exceed the metadata limit: those left out are handled again after a restart");
            }
            list.push(TxnOffset {
                topic: tp.topic.to_string(),
                partition: tp.partition,
                offset: d.offset,
                leader_epoch: -1,
                metadata: (!enc.text.is_empty()).then_some(enc.text),
            });
        }
        Ok((list, points))
    }

    /// Marks the transactions failed, aborts the open transaction (the gate is held by the
    /// caller) and returns the commit error for the engine.
    async fn fail_and_abort(&self, reason: String) -> SourceError {
        self.fail(reason.clone());
        if matches!(
            self.inner.producer.state(),
            TxnState::InTransaction | TxnState::AbortableError | TxnState::Aborting
        ) {
            if let Err(e) = self.inner.producer.abort().await {
                tracing::warn!(error = %e, "aborting the failed transaction failed");
            }
        }
        let mut st = self.inner.lock();
        st.open = false;
        st.pending.clear();
        st.failed_writes.clear();
        SourceError::Commit(reason)
    }
}
