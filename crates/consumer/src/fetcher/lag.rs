//! The lag poller of paused partitions: their high watermarks read by ListOffsets, one request
//! per leader broker, beside the fetch loop and never awaited by it.

use std::collections::BTreeMap;
use std::time::Duration;

use orderly_engine::TopicPartition;
use orderly_protocol::messages::list_offsets::LATEST;
use tokio::sync::{mpsc, watch};

use super::config::FetchConfig;
use super::state::FetchState;
use crate::handoff::Internal;
use crate::metadata_cache::MetadataCache;

/// Reads the high watermarks of the paused partitions every `paused_lag_interval`: one
/// ListOffsets per leader broker, the brokers concurrently.
pub(super) async fn lag_loop(
    cluster: &MetadataCache,
    state: &FetchState,
    config: &FetchConfig,
    tx: &mpsc::Sender<Internal>,
    mut stop: watch::Receiver<bool>,
) {
    let period = config.paused_lag_interval.max(Duration::from_millis(1));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            // A dropped sender also means stop.
            _ = stop.changed() => {}
        }
        if *stop.borrow() || tx.is_closed() || stop.has_changed().is_err() {
            return;
        }
        let paused = state.paused();
        if paused.is_empty() {
            continue;
        }
        let mut by_leader: BTreeMap<i32, Vec<(TopicPartition, u64)>> = BTreeMap::new();
        for (tp, epoch) in paused {
            match cluster.leader(&tp.topic, tp.partition) {
                Some(l) => by_leader.entry(l.node_id).or_default().push((tp, epoch)),
                None => {
                    tracing::debug!(topic = %tp.topic, partition = tp.partition, "lag poll: no leader known")
                }
            }
        }
        let polls = by_leader.into_iter().map(|(leader, parts)| async move {
            let req: Vec<(&str, i32)> = parts
                .iter()
                .map(|(tp, _)| (&*tp.topic, tp.partition))
                .collect();
            let result = cluster
                .list_offsets_at(leader, &req, LATEST, config.isolation)
                .await;
            (leader, parts, result)
        });
        let results = tokio::select! {
            r = futures::future::join_all(polls) => r,
            _ = stop.changed() => return,
        };
        let mut refresh = false;
        for (leader, parts, result) in results {
            let offsets = match result {
                Ok(o) => o,
                Err(e) => {
                    tracing::debug!(broker = leader, %e, partitions = parts.len(), "lag poll failed");
                    refresh = true;
                    continue;
                }
            };
            for ((tp, epoch), hw) in parts.into_iter().zip(offsets) {
                match hw {
                    Ok(hw) => {
                        if tx
                            .send(Internal::HighWatermark { tp, epoch, hw })
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(code) => {
                        tracing::debug!(topic = %tp.topic, partition = tp.partition, ?code, "lag poll failed for a partition");
                        refresh = true;
                    }
                }
            }
        }
        if refresh {
            if let Err(e) = cluster.refresh(&[]).await {
                tracing::warn!(%e, "metadata refresh failed");
            }
        }
    }
}
