//! `Transactions`: the exactly-once mode. Replies, dead letters and the group's offsets commit in
//! one Kafka transaction per engine commit.
//!
//! One [`TransactionalProducer`] per consumer instance writes every reply and dead letter and,
//! at each [`Source::commit`](orderly_engine::Source::commit) of the engine, adds the group's
//! offsets (watermark + completed-offset metadata) with the member's generation and member id
//! (KIP-447: the group coordinator refuses them from a member it has moved past) and commits.
//!
//! - A write holds a shared gate for every reply of one record, so a record's output is in one
//!   transaction; once acknowledged, the record's offset joins the transaction's *pending* set.
//! - A commit holds the gate exclusively: writes in flight finish first, later ones wait for the
//!   next transaction. It commits, per partition, the union of the engine's commit point, the
//!   last point committed here (or the assignment's) and the pending offsets. The engine built
//!   its point from records whose writes had ended before the commit started, so every record
//!   the commit counts as done has its output in this transaction or an earlier committed one,
//!   and every record with output in this transaction is counted.
//! - Any failure of the transaction aborts it and marks the mode failed: every later write and
//!   commit is refused, and [`Transactions::failed`] tells the consumer to stop at once. The
//!   engine's in-memory state is then ahead of what committed; the next owner of the partitions
//!   starts from the committed offsets, so the records whose output was aborted are handled again.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use orderly_engine::{
    Assignment, CommitPoint, DeadLetter, Record, Reply, ReplyError, ReplyFuture, ReplySink,
    SourceError, TopicPartition, metadata,
};
use orderly_group::GroupHandle;
use orderly_protocol::partitioner::partition_for_key;
use orderly_protocol::{
    ConnectionPool, GroupMetadata, Header, ProduceRecord, Producer, ProducerConfig,
    TransactionalConfig, TransactionalProducer, TxnError, TxnOffset, TxnState,
};
use tokio::sync::watch;

/// The exactly-once mode's shared state: the transactional producer, the open transaction's
/// pending offsets and the points last committed. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Transactions {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    producer: TransactionalProducer,
    /// Partition counts of output topics (never writes).
    meta: Producer,
    transactional_id: String,
    timeout: Duration,
    group_id: String,
    instance_id: Option<String>,
    metadata_limit: usize,
    group: OnceLock<GroupHandle>,
    /// Shared by the writes of one record, exclusive for a commit.
    gate: tokio::sync::RwLock<()>,
    state: Mutex<State>,
    failed: watch::Sender<Option<String>>,
}

#[derive(Debug, Default)]
struct State {
    /// A transaction was begun and not yet ended.
    open: bool,
    /// Offsets of records whose output is in the open transaction.
    pending: HashMap<TopicPartition, BTreeSet<i64>>,
    /// Per partition, the done set last committed here or read at assignment.
    base: HashMap<TopicPartition, Done>,
    /// Partitions lost since they were assigned.
    lost: HashSet<TopicPartition>,
}

/// A done set: every offset below `offset`, and the `runs` above it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Done {
    offset: i64,
    runs: Vec<Range<i64>>,
}

impl Done {
    fn from_point(offset: i64, text: &str) -> Self {
        let runs = metadata::decode(offset, text).unwrap_or_default();
        Done { offset, runs }.normalized()
    }

    fn union(&self, other: &Done) -> Done {
        let mut runs = self.runs.clone();
        runs.extend(other.runs.iter().cloned());
        Done {
            offset: self.offset.max(other.offset),
            runs,
        }
        .normalized()
    }

    fn with_offsets(&self, offsets: impl IntoIterator<Item = i64>) -> Done {
        let mut runs = self.runs.clone();
        runs.extend(offsets.into_iter().map(|o| o..o.saturating_add(1)));
        Done {
            offset: self.offset,
            runs,
        }
        .normalized()
    }

    /// Sorts and merges the runs and moves the watermark over those that touch it.
    fn normalized(mut self) -> Done {
        self.runs.retain(|r| r.start < r.end);
        self.runs.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<i64>> = Vec::with_capacity(self.runs.len());
        for r in self.runs {
            if r.end <= self.offset {
                continue;
            }
            if r.start <= self.offset {
                self.offset = r.end;
                continue;
            }
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        // A watermark moved by a later run may now reach earlier merged runs.
        let mut out = Vec::with_capacity(merged.len());
        for r in merged {
            if r.start <= self.offset {
                self.offset = self.offset.max(r.end);
            } else {
                out.push(r);
            }
        }
        self.runs = out;
        self
    }
}

/// What [`Transactions::new`] needs.
#[derive(Debug, Clone)]
pub(crate) struct TxnSettings {
    pub transactional_id: String,
    pub timeout: Duration,
    pub group_id: String,
    pub instance_id: Option<String>,
    pub metadata_limit: usize,
}

impl Transactions {
    pub(crate) fn new(pool: Arc<ConnectionPool>, settings: TxnSettings) -> Self {
        let producer = TransactionalProducer::new(pool.clone(), TransactionalConfig::default());
        let meta = Producer::new(
            pool,
            ProducerConfig {
                idempotent: false,
                ..ProducerConfig::default()
            },
        );
        let (failed, _) = watch::channel(None);
        Transactions {
            inner: Arc::new(Inner {
                producer,
                meta,
                transactional_id: settings.transactional_id,
                timeout: settings.timeout,
                group_id: settings.group_id,
                instance_id: settings.instance_id,
                metadata_limit: settings.metadata_limit,
                group: OnceLock::new(),
                gate: tokio::sync::RwLock::new(()),
                state: Mutex::new(State::default()),
                failed,
            }),
        }
    }

    /// The transactional id.
    pub fn transactional_id(&self) -> &str {
        &self.inner.transactional_id
    }

    /// Registers the producer's transactional id (InitProducerId), which aborts whatever a
    /// previous producer with this id left open and fences it.
    pub(crate) async fn init(&self) -> Result<(), TxnError> {
        self.inner
            .producer
            .init(&self.inner.transactional_id, self.inner.timeout)
            .await
    }

    /// The group member whose generation the offsets are committed under.
    pub(crate) fn set_group(&self, group: GroupHandle) {
        let _ = self.inner.group.set(group);
    }

    /// `Some(reason)` once the transactions failed: the consumer must stop.
    pub fn failed(&self) -> watch::Receiver<Option<String>> {
        self.inner.failed.subscribe()
    }

    /// The reason the transactions failed, if they did.
    pub fn failure(&self) -> Option<String> {
        self.inner.failed.borrow().clone()
    }

    /// Notes where an assigned partition starts, the base of its commits.
    pub(crate) fn assigned(&self, a: &Assignment) {
        let mut st = self.inner.lock();
        st.lost.remove(&a.partition);
        st.base.insert(
            a.partition.clone(),
            Done::from_point(a.next_offset, &a.metadata),
        );
    }

    /// Notes lost partitions. Output of theirs in the open transaction must not commit (the next
    /// owner handles those records again), so the transaction fails.
    pub(crate) fn lost(&self, partitions: &[TopicPartition]) {
        let pending = {
            let mut st = self.inner.lock();
            for tp in partitions {
                st.lost.insert(tp.clone());
                st.base.remove(tp);
            }
            partitions.iter().any(|tp| st.pending.contains_key(tp))
        };
        if pending {
            self.fail("partitions lost while the open transaction holds output of theirs".into());
        }
    }

    fn fail(&self, reason: String) {
        self.inner.failed.send_if_modified(|f| {
            if f.is_none() {
                tracing::error!(transactional_id = %self.inner.transactional_id, %reason,
                    "transaction failed: stopping; the records of the aborted transaction are handled again by the next owner");
                metrics::counter!("orderly_transactions_failed_total").increment(1);
                *f = Some(reason);
                true
            } else {
                false
            }
        });
    }

    fn refused(&self) -> Option<String> {
        self.failure()
            .map(|r| format!("transactions stopped after a failure: {r}"))
    }

    /// Aborts the open transaction, if any (after a failure, or a shutdown whose final commit
    /// did not complete). Errors are logged: the broker aborts it at its timeout anyway.
    pub(crate) async fn abort_open(&self) {
        let _gate = self.inner.gate.write().await;
        let state = self.inner.producer.state();
        if matches!(
            state,
            TxnState::InTransaction | TxnState::AbortableError | TxnState::Aborting
        ) {
            if let Err(e) = self.inner.producer.abort().await {
                tracing::warn!(error = %e, "aborting the open transaction failed");
            }
        }
        let mut st = self.inner.lock();
        st.open = false;
        st.pending.clear();
    }

    /// Opens a transaction if none is open.
    fn ensure_open(&self) -> Result<(), TxnError> {
        let mut st = self.inner.lock();
        if !st.open {
            self.inner.producer.begin()?;
            st.open = true;
        }
        Ok(())
    }

    /// Writes `records` (each with its topic and partition) in the open transaction as the
    /// output of the record at `origin`. All or nothing for the transaction: a failure after the
    /// first write fails the transactions.
    async fn write(
        &self,
        origin: (&TopicPartition, i64),
        records: Vec<(String, i32, ProduceRecord)>,
    ) -> Result<(), String> {
        let _gate = self.inner.gate.read().await;
        if let Some(r) = self.refused() {
            return Err(r);
        }
        if self.inner.lock().lost.contains(origin.0) {
            return Err(format!(
                "{}/{} is lost: its records are not ours to answer",
                origin.0.topic, origin.0.partition
            ));
        }
        if let Err(e) = self.ensure_open() {
            let reason = format!("beginning a transaction: {e}");
            self.fail(reason.clone());
            return Err(reason);
        }
        for (topic, partition, record) in &records {
            if let Err(e) = self
                .inner
                .producer
                .send_batch(topic, *partition, std::slice::from_ref(record))
                .await
            {
                let reason = format!("writing to {topic}/{partition} in a transaction: {e}");
                self.fail(reason.clone());
                return Err(reason);
            }
        }
        self.inner
            .lock()
            .pending
            .entry(origin.0.clone())
            .or_default()
            .insert(origin.1);
        Ok(())
    }

    async fn partition_of(&self, topic: &str, key: Option<&[u8]>) -> Result<i32, String> {
        let n = self
            .inner
            .meta
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
            vec![(topic.to_owned(), partition, record)],
        )
        .await?;
        Ok((partition, -1))
    }

    /// Commits the open transaction with the group's offsets: the engine's `offsets`, extended
    /// by the records whose output the transaction holds (see the module doc).
    pub(crate) async fn commit(
        &self,
        offsets: Vec<(TopicPartition, CommitPoint)>,
    ) -> Result<(), SourceError> {
        let _gate = self.inner.gate.write().await;
        if let Some(r) = self.refused() {
            return Err(SourceError::Commit(r));
        }
        let (list, finals) = match self.offsets_to_commit(offsets) {
            Ok(x) => x,
            Err(reason) => return Err(self.fail_and_abort(reason).await),
        };
        if list.is_empty() && !self.inner.lock().open {
            return Ok(());
        }
        if let Err(e) = self.ensure_open() {
            return Err(self
                .fail_and_abort(format!("beginning a transaction: {e}"))
                .await);
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
            Err(e) => Err(self
                .fail_and_abort(format!("committing the transaction: {e}"))
                .await),
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
            if st.lost.contains(&tp) {
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
        SourceError::Commit(reason)
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The engine's [`ReplySink`] in exactly-once mode: replies in the open transaction, keyed and
/// routed as [`crate::KafkaReplies`] routes them (own topic or the default one, own key or the
/// session id, murmur2), acknowledged once written to the transaction; they become visible to
/// read_committed readers when the transaction holding them commits.
#[derive(Debug, Clone)]
pub struct TxnReplies {
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
            let topic = match reply.topic.as_deref().or(self.default_topic.as_deref()) {
                Some(t) if !t.is_empty() => t.to_owned(),
                _ => {
                    return Err(ReplyError::Invalid(
                        "the reply names no topic and no default reply topic is set".into(),
                    ));
                }
            };
            let key = reply
                .key
                .clone()
                .or_else(|| session.map(bytes::Bytes::copy_from_slice));
            // Nothing is written before every partition is known, so a failed lookup leaves
            // the transaction untouched and the engine simply writes again.
            let partition = self
                .txn
                .partition_of(&topic, key.as_deref())
                .await
                .map_err(|reason| ReplyError::Write {
                    delivered: 0,
                    reason,
                })?;
            records.push((
                topic,
                partition,
                ProduceRecord {
                    key,
                    value: reply.value.clone(),
                    headers: reply
                        .headers
                        .iter()
                        .map(|h| Header {
                            key: h.key.clone(),
                            value: h.value.clone(),
                        })
                        .collect(),
                    timestamp: None,
                },
            ));
        }
        self.txn
            .write((&origin.partition, origin.offset), records)
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

/// The default transactional id: `<group>.<instance id>` for a static member, else
/// `<group>.<random>`.
pub(crate) fn default_transactional_id(group: &str, instance_id: Option<&str>) -> String {
    match instance_id {
        Some(i) => format!("{group}.{i}"),
        None => {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            format!("{group}.{:016x}", h.finish())
        }
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::Done;

    #[test]
    fn union_moves_the_watermark_over_touching_runs() {
        let a = Done {
            offset: 10,
            runs: vec![12..14, 20..21],
        };
        let d = a.with_offsets([10, 11, 14, 30]);
        assert_eq!(
            d,
            Done {
                offset: 15,
                runs: vec![20..21, 30..31]
            }
        );
        let b = Done {
            offset: 21,
            runs: vec![25..26],
        };
        assert_eq!(
            d.union(&b),
            Done {
                offset: 21,
                runs: vec![25..26, 30..31]
            }
        );
    }

    #[test]
    fn a_point_round_trips_through_the_metadata() {
        let d = Done {
            offset: 5,
            runs: vec![7..9, 11..12],
        };
        let enc = orderly_engine::metadata::encode(d.offset, d.runs.iter().cloned(), 4096);
        assert_eq!(Done::from_point(5, &enc.text), d);
    }
}
