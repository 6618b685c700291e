//! `KafkaSource`: the engine's [`Source`] over the fetch loop and the group member, plus the rebalance bridge.

use std::collections::HashMap;
use std::sync::Arc;

use orderly_engine::{
    Assignment, CommitPoint, Record, Source, SourceError, SourceEvent, TopicPartition,
};
use orderly_group::{CommitOffset, GroupHandle, RebalanceEvent, RebalanceEvents, StartPosition};
use tokio::sync::{mpsc, oneshot};

use crate::fetcher::FetchState;

/// What the fetch loop and the rebalance bridge send to the source, in one FIFO channel.
#[derive(Debug)]
pub(crate) enum Internal {
    Records {
        tp: TopicPartition,
        epoch: u64,
        records: Vec<Record>,
        hw: Option<i64>,
    },
    HighWatermark {
        tp: TopicPartition,
        epoch: u64,
        hw: i64,
    },
    Assigned(Vec<(Assignment, u64)>),
    Revoked(Vec<TopicPartition>, oneshot::Sender<()>),
    Lost(Vec<TopicPartition>),
    Fatal(String),
}

/// The engine's record source on a real Kafka group.
#[derive(Debug)]
pub struct KafkaSource {
    rx: mpsc::Receiver<Internal>,
    /// The epoch of each partition as the engine knows it (updated as events pass through).
    epochs: HashMap<TopicPartition, u64>,
    fetch: Arc<FetchState>,
    group: GroupHandle,
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
            group,
        }
    }
}

impl Source for KafkaSource {
    // Cancel safety: the only await is `recv` on an mpsc receiver, which is cancel safe; the
    // bookkeeping after it is synchronous.
    async fn next_event(&mut self) -> Result<Option<SourceEvent>, SourceError> {
        loop {
            let Some(msg) = self.rx.recv().await else {
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
                Internal::Lost(tps) => {
                    for tp in &tps {
                        self.epochs.remove(tp);
                    }
                    return Ok(Some(SourceEvent::Lost(tps)));
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

    async fn commit(
        &mut self,
        offsets: Vec<(TopicPartition, CommitPoint)>,
    ) -> Result<(), SourceError> {
        let list = offsets
            .into_iter()
            .map(|(tp, cp)| CommitOffset {
                partition: orderly_group::TopicPartition::new(tp.topic.to_string(), tp.partition),
                offset: cp.offset,
                leader_epoch: None,
                metadata: (!cp.metadata.is_empty()).then_some(cp.metadata),
            })
            .collect();
        self.group
            .commit(list)
            .await
            .map_err(|e| SourceError::Commit(e.to_string()))
    }
}

fn engine_tp(
    tp: &orderly_group::TopicPartition,
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

/// Forwards the group member's rebalance events to the engine, keeping the fetch loop in step.
///
/// Runs until the member's event stream ends. If the engine is gone (shutdown), events are
/// acknowledged at once: the engine already committed what it finished. If the stream ends while
/// the engine still runs, the member stopped on a fatal error: the engine is told to stop, and
/// `Consumer::run` returns the member's error.
pub(crate) async fn bridge(
    mut events: RebalanceEvents,
    fetch: Arc<FetchState>,
    tx: mpsc::Sender<Internal>,
) {
    let mut names: HashMap<String, Arc<str>> = HashMap::new();
    while let Some(event) = events.next().await {
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
                    let (next_offset, metadata) = match p.start {
                        StartPosition::Committed {
                            offset, metadata, ..
                        } => (offset, metadata.unwrap_or_default()),
                        StartPosition::Reset { offset, .. } => (offset, String::new()),
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
                if tx.send(Internal::Assigned(list)).await.is_ok() {
                    for (tp, pos, epoch) in starts {
                        fetch.add(tp, pos, epoch);
                    }
                }
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
                }
                let (done_tx, done_rx) = oneshot::channel();
                if tx.send(Internal::Revoked(tps, done_tx)).await.is_ok() {
                    // The engine acks after committing; a dropped sender (engine gone) also ends the wait.
                    let _ = done_rx.await;
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
                for tp in &tps {
                    fetch.remove(tp);
                }
                let _ = tx.send(Internal::Lost(tps)).await;
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
