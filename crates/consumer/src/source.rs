//! `KafkaSource`: the engine's [`Source`] over the fetch loop and the group member, plus the rebalance bridge.

use std::collections::HashMap;
use std::sync::Arc;

use orderly_engine::{Assignment, CommitPoint, Source, SourceError, SourceEvent, TopicPartition};
use orderly_group::codes::ErrorCode;
use orderly_group::{
    CommitError, CommitOffset, GroupHandle, RebalanceEvent, RebalanceEvents, StartPosition,
};
use tokio::sync::{mpsc, oneshot, watch};

use crate::exactly_once::Transactions;
use crate::fetcher::FetchState;
use crate::handoff::Internal;

/// The engine's record source on a real Kafka group.
#[derive(Debug)]
pub struct KafkaSource {
    rx: mpsc::Receiver<Internal>,
    /// The epoch of each partition as the engine knows it (updated as events pass through).
    epochs: HashMap<TopicPartition, u64>,
    fetch: Arc<FetchState>,
    group: GroupHandle,
    /// The member's "ownership in doubt" flag ([`GroupHandle::in_doubt`]); `None` once the
    /// member is gone.
    doubt: Option<watch::Receiver<bool>>,
    /// What the engine was told last.
    told_doubt: bool,
    /// Exactly-once mode: commits go through the transactions, which also learn assignments
    /// and losses.
    txn: Option<Transactions>,
}

impl KafkaSource {
    pub(crate) fn new(
        rx: mpsc::Receiver<Internal>,
        fetch: Arc<FetchState>,
        group: GroupHandle,
    ) -> Self {
        KafkaSource {
            rx,
            epochs: HashMap::new(),
            fetch,
            doubt: Some(group.in_doubt()),
            group,
            told_doubt: false,
            txn: None,
        }
    }

    /// Commits through `txn` (exactly-once mode) instead of the group's OffsetCommit.
    pub(crate) fn with_transactions(mut self, txn: Option<Transactions>) -> Self {
        self.txn = txn;
        self
    }
}

/// The group member's lease as the engine reads it.
#[derive(Debug)]
struct GroupLease(orderly_group::OwnershipLease);

impl orderly_engine::Lease for GroupLease {
    fn holds(&self, now: tokio::time::Instant) -> bool {
        self.0.holds(now)
    }
}

impl Source for KafkaSource {
    // Cancel safety: the awaits are `recv` on an mpsc receiver and `changed` on a watch
    // receiver, both cancel safe; the bookkeeping after them is synchronous.
    //
    // The doubt flag is read first (biased), so the engine holds dispatch before it takes more
    // records. It can never tell the engine "confirmed" for partitions the member reported lost
    // before the engine saw that loss: the member clears the flag only after the engine
    // acknowledged the `Lost` it read from this same channel.
    async fn next_event(&mut self) -> Result<Option<SourceEvent>, SourceError> {
        loop {
            let msg = tokio::select! {
                biased;
                changed = changed(&mut self.doubt) => {
                    match changed {
                        Some(doubt) if doubt != self.told_doubt => {
                            self.told_doubt = doubt;
                            return Ok(Some(if doubt {
                                SourceEvent::OwnershipInDoubt
                            } else {
                                SourceEvent::OwnershipConfirmed
                            }));
                        }
                        Some(_) => continue,
                        // The member is gone; its last word (if any) reaches the engine through
                        // the bridge.
                        None => {
                            self.doubt = None;
                            continue;
                        }
                    }
                }
                msg = self.rx.recv() => msg,
            };
            let Some(msg) = msg else {
                return Ok(None);
            };
            match msg {
                Internal::Records {
                    tp,
                    epoch,
                    records,
                    hw,
                } => {
                    if self.epochs.get(&tp) == Some(&epoch) {
                        return Ok(Some(SourceEvent::Records {
                            partition: tp,
                            records,
                            high_watermark: hw,
                        }));
                    }
                    // Fetched under an assignment that has ended: its offsets are above the
                    // committed watermark and will be fetched again by their owner.
                }
                Internal::HighWatermark { tp, epoch, hw } => {
                    if self.epochs.get(&tp) == Some(&epoch) {
                        return Ok(Some(SourceEvent::HighWatermark(tp, hw)));
                    }
                }
                Internal::Assigned(list) => {
                    let mut out = Vec::with_capacity(list.len());
                    for (a, epoch) in list {
                        if let Some(txn) = &self.txn {
                            txn.assigned(&a);
                        }
                        self.epochs.insert(a.partition.clone(), epoch);
                        out.push(a);
                    }
                    return Ok(Some(SourceEvent::Assigned(out)));
                }
                Internal::Revoked(tps, ack) => {
                    for tp in &tps {
                        self.epochs.remove(tp);
                    }
                    return Ok(Some(SourceEvent::Revoked(tps, ack)));
                }
                Internal::Lost(tps, ack) => {
                    if let Some(txn) = &self.txn {
                        txn.lost(&tps);
                    }
                    for tp in &tps {
                        self.epochs.remove(tp);
                    }
                    return Ok(Some(SourceEvent::Lost(tps, ack)));
                }
                Internal::Fatal(e) => return Err(SourceError::Fatal(e)),
            }
        }
    }

    fn pause(&mut self, partition: &TopicPartition) {
        metrics::gauge!("orderly_fetch_paused", "topic" => partition.topic.to_string(), "partition" => partition.partition.to_string()).set(1.0);
        self.fetch.set_paused(partition, true);
    }

    fn resume(&mut self, partition: &TopicPartition) {
        metrics::gauge!("orderly_fetch_paused", "topic" => partition.topic.to_string(), "partition" => partition.partition.to_string()).set(0.0);
        self.fetch.set_paused(partition, false);
    }

    fn commit(
        &mut self,
        offsets: Vec<(TopicPartition, CommitPoint)>,
    ) -> impl std::future::Future<Output = Result<(), SourceError>> + Send + 'static {
        let txn = self.txn.clone();
        let (offsets, list): (_, Vec<CommitOffset>) = if txn.is_some() {
            (offsets, Vec::new())
        } else {
            let list = offsets
                .into_iter()
                .map(|(tp, cp)| CommitOffset {
                    partition: orderly_group::GroupPartition::new(
                        tp.topic.to_string(),
                        tp.partition,
                    ),
                    offset: cp.offset,
                    leader_epoch: None,
                    metadata: (!cp.metadata.is_empty()).then_some(cp.metadata),
                })
                .collect();
            (Vec::new(), list)
        };
        let group = self.group.clone();
        async move {
            match txn {
                Some(txn) => txn.commit(offsets).await,
                None => group.commit(list).await.map_err(commit_error),
            }
        }
    }

    fn lease(&self) -> Option<Arc<dyn orderly_engine::Lease>> {
        Some(Arc::new(GroupLease(self.group.lease())))
    }
}

/// The next value of the member's doubt flag; `None` once the member is gone; pending without one.
async fn changed(doubt: &mut Option<watch::Receiver<bool>>) -> Option<bool> {
    match doubt {
        Some(rx) => match rx.changed().await {
            Ok(()) => Some(*rx.borrow_and_update()),
            Err(_) => None,
        },
        None => std::future::pending().await,
    }
}

/// Maps a group commit error onto the engine's: metadata refused as too large (by our own check
/// or by the broker) lets the engine shrink its metadata; everything else is retried.
fn commit_error(e: CommitError) -> SourceError {
    let too_large = match &e {
        CommitError::MetadataTooLarge { .. } => true,
        CommitError::Partitions { partitions, .. } => partitions
            .iter()
            .any(|(_, c)| *c == ErrorCode::OFFSET_METADATA_TOO_LARGE),
        _ => false,
    };
    if too_large {
        SourceError::MetadataTooLarge(e.to_string())
    } else {
        SourceError::Commit(e.to_string())
    }
}

fn engine_tp(
    tp: &orderly_group::GroupPartition,
    names: &mut HashMap<String, Arc<str>>,
) -> TopicPartition {
    let topic = names
        .entry(tp.topic.clone())
        .or_insert_with(|| Arc::from(tp.topic.as_str()))
        .clone();
    TopicPartition {
        topic,
        partition: tp.partition,
    }
}

/// Forwards the group member's rebalance events to the engine, keeping the fetch loop in step,
/// and carries out the rewinds of the exactly-once mode (`rewinds`): a partition to rewind is
/// taken from the engine as lost (fetching stopped first, the engine's acknowledgement awaited)
/// and assigned again at the point given, under a new epoch, as a rebalance would; a partition
/// no longer owned by then is left alone. Both go through this one task, so a rewind never
/// interleaves with a rebalance. In the exactly-once mode (`txn`) a revoke is acknowledged to
/// the member only after the transactions fenced its partitions
/// ([`Transactions::handed_back`]).
///
/// Runs until the member's event stream ends. If the engine is gone (shutdown), events are
/// acknowledged at once: the engine already committed what it finished. If the stream ends while
/// the engine still runs, the member stopped on a fatal error: the engine is told to stop, and
/// `Consumer::run` returns the member's error.
pub(crate) async fn bridge(
    mut events: RebalanceEvents,
    fetch: Arc<FetchState>,
    tx: mpsc::Sender<Internal>,
    mut rewinds: Option<mpsc::UnboundedReceiver<Vec<Assignment>>>,
    txn: Option<Transactions>,
) {
    let mut names: HashMap<String, Arc<str>> = HashMap::new();
    let mut owned: std::collections::HashSet<TopicPartition> = std::collections::HashSet::new();
    loop {
        // Both arms are cancel safe (mpsc receives).
        let event = tokio::select! {
            event = events.next() => event,
            Some(list) = next_rewind(&mut rewinds) => {
                rewind(list, &owned, &fetch, &tx).await;
                continue;
            }
        };
        let Some(event) = event else { break };
        match event {
            RebalanceEvent::Assigned {
                partitions,
                ack,
                generation,
            } => {
                let mut list = Vec::with_capacity(partitions.len());
                let mut missing = Vec::new();
                for p in partitions {
                    let tp = engine_tp(&p.partition, &mut names);
                    let (next_offset, metadata, committed) = match p.start {
                        StartPosition::Committed {
                            offset, metadata, ..
                        } => (offset, metadata.unwrap_or_default(), true),
                        StartPosition::Reset { offset, .. } => (offset, String::new(), false),
                        StartPosition::Missing => {
                            missing.push(format!("{}-{}", tp.topic, tp.partition));
                            continue;
                        }
                    };
                    list.push((
                        Assignment {
                            partition: tp,
                            next_offset,
                            metadata,
                            committed,
                        },
                        fetch.new_epoch(),
                    ));
                }
                tracing::info!(generation, partitions = list.len(), "partitions assigned");
                if !missing.is_empty() {
                    let msg = format!(
                        "no committed offset for {} and auto.offset.reset is none",
                        missing.join(", ")
                    );
                    let _ = tx.send(Internal::Fatal(msg)).await;
                }
                // Assigned goes into the channel before fetching starts, so no record of the new
                // assignment can precede it (see the fetcher's module docs).
                let starts: Vec<(TopicPartition, i64, u64)> = list
                    .iter()
                    .map(|(a, e)| (a.partition.clone(), a.next_offset, *e))
                    .collect();
                owned.extend(list.iter().map(|(a, _)| a.partition.clone()));
                if tx.send(Internal::Assigned(list)).await.is_ok() {
                    fetch.add_all(starts);
                }
                fetch.set_in_group(true);
                ack.done();
            }
            RebalanceEvent::Revoked {
                partitions,
                ack,
                generation,
            } => {
                let tps: Vec<TopicPartition> = partitions
                    .iter()
                    .map(|p| engine_tp(p, &mut names))
                    .collect();
                tracing::info!(
                    generation,
                    partitions = tps.len(),
                    "partitions revoked; draining"
                );
                // Stop fetching first, then let the engine drain and commit.
                for tp in &tps {
                    fetch.remove(tp);
                    owned.remove(tp);
                }
                let (done_tx, done_rx) = oneshot::channel();
                if tx
                    .send(Internal::Revoked(tps.clone(), done_tx))
                    .await
                    .is_ok()
                {
                    // The engine acks after committing; a dropped sender (engine gone) also ends the wait.
                    let _ = done_rx.await;
                }
                if let Some(txn) = &txn {
                    txn.handed_back(&tps).await;
                }
                ack.done();
            }
            RebalanceEvent::Lost {
                partitions,
                ack,
                reason,
            } => {
                let tps: Vec<TopicPartition> = partitions
                    .iter()
                    .map(|p| engine_tp(p, &mut names))
                    .collect();
                tracing::warn!(
                    ?reason,
                    partitions = tps.len(),
                    "partitions lost; dropping their work without commit"
                );
                fetch.set_in_group(false);
                for tp in &tps {
                    fetch.remove(tp);
                    owned.remove(tp);
                }
                // The member may rejoin (a new generation) only once the engine has dropped the
                // partitions and no commit naming them is in flight: acknowledging earlier let a
                // queued commit land under the new generation.
                let (done_tx, done_rx) = oneshot::channel();
                if tx.send(Internal::Lost(tps, done_tx)).await.is_ok() {
                    let _ = done_rx.await;
                }
                ack.done();
            }
            _ => {}
        }
    }
    // Reaches the engine only if it is still running (during a normal close its receiver is gone).
    let _ = tx
        .send(Internal::Fatal(
            "the group member stopped; see its error".into(),
        ))
        .await;
}

/// The next list of partitions to rewind; pending without a receiver or once it is closed.
async fn next_rewind(
    rewinds: &mut Option<mpsc::UnboundedReceiver<Vec<Assignment>>>,
) -> Option<Vec<Assignment>> {
    match rewinds {
        Some(rx) => match rx.recv().await {
            Some(list) => Some(list),
            None => {
                *rewinds = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
    }
}

/// Takes the owned partitions of `list` from the engine (as lost: their work is dropped without
/// a commit) and assigns them again at the points `list` gives, under new epochs.
async fn rewind(
    list: Vec<Assignment>,
    owned: &std::collections::HashSet<TopicPartition>,
    fetch: &FetchState,
    tx: &mpsc::Sender<Internal>,
) {
    let list: Vec<Assignment> = list
        .into_iter()
        .filter(|a| owned.contains(&a.partition))
        .collect();
    if list.is_empty() {
        return;
    }
    let tps: Vec<TopicPartition> = list.iter().map(|a| a.partition.clone()).collect();
    tracing::warn!(
        partitions = tps.len(),
        "rewinding partitions to their last committed offsets"
    );
    for tp in &tps {
        fetch.remove(tp);
    }
    let (done_tx, done_rx) = oneshot::channel();
    if tx.send(Internal::Lost(tps, done_tx)).await.is_err() || done_rx.await.is_err() {
        return;
    }
    let list: Vec<(Assignment, u64)> = list.into_iter().map(|a| (a, fetch.new_epoch())).collect();
    let starts: Vec<(TopicPartition, i64, u64)> = list
        .iter()
        .map(|(a, e)| (a.partition.clone(), a.next_offset, *e))
        .collect();
    if tx.send(Internal::Assigned(list)).await.is_ok() {
        fetch.add_all(starts);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::time::Duration;

    use orderly_group::codes::{Api, ErrorCode as E};
    use orderly_group::testing::{FakeCoordinator, Reply};
    use orderly_group::{GroupConfig, GroupMember};

    use super::*;

    async fn recv(rx: &mut mpsc::Receiver<Internal>) -> Internal {
        tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("no event within 60 s")
            .expect("bridge ended")
    }

    /// The member may not go on (rejoin under a new generation) after a loss until the engine
    /// has handled it: a bridge that acknowledged `Lost` as soon as it was queued would let the
    /// member rejoin while a commit the engine had queued could still land under the new
    /// generation.
    #[tokio::test(start_paused = true)]
    async fn lost_is_acknowledged_only_after_the_engine_handled_it() {
        let fake = Arc::new(FakeCoordinator::new([("t", 2)]));
        let mut cfg = GroupConfig::new("g", ["t"]);
        cfg.session_timeout = Duration::from_secs(10);
        cfg.heartbeat_interval = Duration::from_secs(1);
        cfg.retry_backoff = Duration::from_millis(10);
        cfg.retry_backoff_max = Duration::from_millis(50);
        let GroupMember {
            handle,
            events,
            task,
        } = GroupMember::spawn(cfg, fake.clone(), std::future::pending()).unwrap();
        let fetch = Arc::new(FetchState::default());
        let (tx, mut rx) = mpsc::channel(256);
        assert!(
            !fetch.in_group(),
            "not in the group before the first assignment"
        );
        let bridge_task = tokio::spawn(bridge(events, fetch.clone(), tx, None, None));

        assert!(matches!(recv(&mut rx).await, Internal::Assigned(l) if l.len() == 2));
        let joins_before = fake.count(Api::JoinGroup);
        fake.script(Api::Heartbeat, [Reply::Code(E::UNKNOWN_MEMBER_ID)]);
        // The engine is busy: it has not read the Lost event yet. The member must wait.
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert_eq!(
            fake.count(Api::JoinGroup),
            joins_before,
            "the member rejoined before the engine handled the loss"
        );
        let Internal::Lost(tps, ack) = recv(&mut rx).await else {
            panic!("expected Lost");
        };
        assert_eq!(tps.len(), 2);
        assert!(
            !fetch.in_group(),
            "out of the group once the partitions are lost"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(fake.count(Api::JoinGroup), joins_before);
        ack.send(()).unwrap();
        assert!(matches!(recv(&mut rx).await, Internal::Assigned(l) if l.len() == 2));
        assert!(fake.count(Api::JoinGroup) > joins_before);
        // The bridge marks the member in the group right after it forwarded the assignment.
        tokio::time::timeout(Duration::from_secs(60), async {
            while !fetch.in_group() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("in the group again after the new assignment");

        handle.close();
        drop(rx);
        task.wait().await.unwrap();
        bridge_task.await.unwrap();
    }
}
