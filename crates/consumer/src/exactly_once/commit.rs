//! The end of a transaction: its commit with the group's offsets, and the abort that rewinds
//! (see the parent module's doc).

use super::*;

/// The least time between two requests for a new epoch.
const RECOVER_PACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Why the open transaction must not commit.
enum Refusal {
    /// Abort and rewind it.
    Rewind(String),
    /// Abort it and stop.
    Stop(String),
}

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
        // A commit unanswered for the whole transaction timeout: whether it committed is not
        // known. A new epoch ends it one way or the other, and the group's committed offsets
        // then say which.
        let outcome_unknown = producer.state() == TxnState::Committing;
        if outcome_unknown {
            tracing::warn!(transactional_id = %self.inner.transactional_id,
                "commit not answered within the transaction timeout; taking a new epoch and reading back the committed offsets");
            fenced = true;
        }
        if matches!(
            producer.state(),
            TxnState::InTransaction | TxnState::AbortableError | TxnState::Aborting
        ) {
            match self.until_answered("abort", || producer.abort()).await {
                Ok(()) => {}
                Err(e) if e.is_fenced() => fenced = true,
                Err(e) if e.is_retriable() => {
                    // Unanswered for the whole transaction timeout: the coordinator has aborted
                    // the transaction by now, or does so at once when asked for a new epoch,
                    // which also fences the EndTxn still on its way.
                    tracing::warn!(transactional_id = %self.inner.transactional_id, error = %e,
                        "abort not answered within the transaction timeout; taking a new epoch");
                    fenced = true;
                }
                Err(e) => {
                    self.fail_locked(format!("{reason}; aborting the transaction: {e}"));
                    return;
                }
            }
        }
        if fenced {
            let recovered = self.until_recovered().await;
            if let Err(e) = recovered {
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
        if outcome_unknown {
            if let Err(e) = self.reread_base().await {
                self.fail_locked(format!(
                    "{reason}; reading back the committed offsets of group {}: {e}",
                    self.inner.group_id
                ));
                return;
            }
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

    /// Calls `call` again while it was not answered in time (for `commit` and `abort` the outcome
    /// is unknown until it is), for at most the transaction timeout: by then the coordinator has
    /// ended the transaction one way or the other.
    async fn until_answered<F, Fut>(&self, what: &str, mut call: F) -> Result<(), TxnError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), TxnError>>,
    {
        let started = tokio::time::Instant::now();
        loop {
            match call().await {
                Err(e) if e.is_retriable() && started.elapsed() < self.inner.timeout => {
                    tracing::warn!(transactional_id = %self.inner.transactional_id, error = %e,
                        "{what} not answered in time; sending it again");
                }
                r => return r,
            }
        }
    }

    /// Replaces the base of every partition with what the group committed, as its coordinator
    /// says (waiting for offsets of a transaction still ending), until it answers or the
    /// consumer stops.
    async fn reread_base(&self) -> Result<(), TxnError> {
        let partitions: Vec<(String, i32)> = {
            let st = self.inner.lock();
            st.base
                .keys()
                .map(|tp| (tp.topic.to_string(), tp.partition))
                .collect()
        };
        if partitions.is_empty() {
            return Ok(());
        }
        let committed = loop {
            let t0 = tokio::time::Instant::now();
            match self
                .inner
                .producer
                .committed_offsets(&self.inner.group_id, &partitions)
                .await
            {
                Err(e) if e.is_retriable() && !self.inner.rewind_tx.is_closed() => {
                    tracing::warn!(group = %self.inner.group_id, error = %e,
                        "committed offsets not read yet (the group coordinator does not answer); asking again");
                    tokio::time::sleep_until(t0 + RECOVER_PACE).await;
                }
                r => break r?,
            }
        };
        let mut st = self.inner.lock();
        for c in committed {
            if c.offset < 0 {
                continue;
            }
            let Some(tp) = st
                .base
                .keys()
                .find(|tp| *tp.topic == c.topic && tp.partition == c.partition)
                .cloned()
            else {
                continue;
            };
            st.uncommitted.remove(&tp);
            st.base.insert(
                tp,
                Done::from_point(c.offset, c.metadata.as_deref().unwrap_or("")),
            );
        }
        Ok(())
    }

    /// Asks for a new epoch ([`TransactionalProducer::recover_epoch`]) until the transaction
    /// coordinator answers: while it is unreachable nothing can be produced anyway, and giving up
    /// would stop the consumer where waiting lets it go on. Ends without an answer only once
    /// the consumer stops (the rewind could not be handed over anyway).
    async fn until_recovered(&self) -> Result<(), TxnError> {
        loop {
            let t0 = tokio::time::Instant::now();
            match self.inner.producer.recover_epoch().await {
                Err(e) if e.is_retriable() && !self.inner.rewind_tx.is_closed() => {
                    tracing::warn!(transactional_id = %self.inner.transactional_id, error = %e,
                        "new epoch not granted yet (the transaction coordinator does not answer); asking again");
                    // Each try waits for its answer within the operation timeout; one that
                    // failed at once is not repeated at once.
                    tokio::time::sleep_until(t0 + RECOVER_PACE).await;
                }
                r => return r,
            }
        }
    }

    /// Sends the offsets of `points` in the open transaction, their metadata within the limit
    /// the group coordinator takes: refused as too large, the limit is halved and the offsets
    /// sent again (the last TxnOffsetCommit before the commit counts), down to no metadata. The
    /// completed offsets left out are handled again after a restart, as in the at-least-once
    /// mode.
    async fn send_offsets(
        &self,
        meta: &GroupMetadata,
        points: &HashMap<TopicPartition, Done>,
    ) -> Result<(), TxnError> {
        loop {
            let limit = self.inner.offsets_limit.load(Ordering::Relaxed);
            let list = self.encode(points, limit);
            match self.inner.producer.send_offsets(meta, &list).await {
                Err(e @ TxnError::MetadataTooLarge { .. }) => {
                    if limit == 0 {
                        return Err(e);
                    }
                    let halved = limit / 2;
                    self.inner.offsets_limit.store(halved, Ordering::Relaxed);
                    tracing::warn!(error = %e, limit = halved,
                        "commit metadata refused as too large; halving the metadata limit (records it leaves out are handled again after a restart)");
                }
                r => return r,
            }
        }
    }

    /// The offsets of `points`, each with its completed offsets above the watermark in at most
    /// `limit` characters of metadata (none at 0).
    fn encode(&self, points: &HashMap<TopicPartition, Done>, limit: usize) -> Vec<TxnOffset> {
        let mut list = Vec::with_capacity(points.len());
        for (tp, d) in points {
            let text = if limit == 0 {
                String::new()
            } else {
                let enc = metadata::encode(d.offset, d.runs.iter().cloned(), limit);
                if enc.truncated {
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, offset = d.offset,
                        runs = d.runs.len(), kept = enc.runs_encoded,
                        "completed offsets above the watermark exceed the metadata limit: those left out are handled again after a restart");
                }
                enc.text
            };
            list.push(TxnOffset {
                topic: tp.topic.to_string(),
                partition: tp.partition,
                offset: d.offset,
                leader_epoch: -1,
                metadata: (!text.is_empty()).then_some(text),
            });
        }
        list
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
        let finals = match self.offsets_to_commit(offsets) {
            Ok(x) => x,
            Err(Refusal::Rewind(reason)) => {
                self.rewind(reason.clone()).await;
                return Err(SourceError::Commit(reason));
            }
            Err(Refusal::Stop(reason)) => return Err(self.fail_and_abort(reason).await),
        };
        if self.inner.lock().rewind_due {
            // A write failed, or a partition with output in it was lost, since the last commit:
            // this transaction cannot commit.
            let reason = "a write failed or a partition was lost in this transaction".to_owned();
            self.rewind(reason.clone()).await;
            return Err(SourceError::Commit(reason));
        }
        if finals.is_empty() && !self.inner.lock().open {
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
        if !finals.is_empty() && !group.is_valid() {
            // A member the group reset or dropped (it rejoins): the coordinator would take
            // offsets without a generation unchecked, on top of the partitions' new owner's.
            let reason = format!(
                "the member has no generation in group {} (reset or dropped, rejoining): its offsets must not commit",
                self.inner.group_id
            );
            self.rewind(reason.clone()).await;
            return Err(SourceError::Commit(reason));
        }
        let meta = GroupMetadata {
            group_id: self.inner.group_id.clone(),
            generation_id: group.generation_id,
            member_id: group.member_id,
            group_instance_id: self.inner.instance_id.clone(),
        };
        let result = async {
            if !finals.is_empty() {
                self.send_offsets(&meta, &finals).await?;
            }
            let producer = &self.inner.producer;
            self.until_answered("commit", || producer.commit()).await
        }
        .await;
        tracing::debug!(
            took_us = started.elapsed().as_micros() as u64,
            partitions = finals.len(),
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

    /// The done sets the open transaction commits as the group's offsets (see the module doc);
    /// a refusal if the transaction must not commit.
    fn offsets_to_commit(
        &self,
        offsets: Vec<(TopicPartition, CommitPoint)>,
    ) -> Result<HashMap<TopicPartition, Done>, Refusal> {
        let st = self.inner.lock();
        if let Some(tp) = st.pending.keys().find(|tp| st.lost.contains(*tp)) {
            return Err(Refusal::Rewind(format!(
                "{}/{} was lost while the open transaction holds output of its records",
                tp.topic, tp.partition
            )));
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
                return Err(Refusal::Stop(format!(
                    "no committed point known for {}/{}, which has output in the transaction",
                    tp.topic, tp.partition
                )));
            };
            let d = d.with_offsets(pending.iter().copied());
            points.insert(tp.clone(), d);
        }
        Ok(points)
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
