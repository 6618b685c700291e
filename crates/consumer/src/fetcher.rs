//! The fetch loop: one multi-partition Fetch per leader broker, positions per owned partition, pause and resume.
//!
//! # Ordering with rebalances
//!
//! Every assignment of a partition gets a fresh **epoch**. The fetch loop tags the records it
//! sends with the epoch it fetched under, and [`crate::source::KafkaSource`] drops records whose
//! epoch is not the partition's current one. Events travel through one FIFO channel, and the
//! rebalance bridge sends `Assigned` *before* it adds a partition here, and removes a partition
//! here *before* it sends `Revoked`. So the engine sees a partition's records only between its
//! `Assigned` and its `Revoked`/`Lost`, whatever the interleaving of the two tasks.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orderly_engine::{Header, Record, TopicPartition};
use orderly_protocol::messages::list_offsets::{EARLIEST, LATEST};
use orderly_protocol::records::{DecodeOptions, IsolationLevel};
use orderly_protocol::{ConnectionKind, ErrorCode};
use orderly_protocol::{FetchOptions, FetchSpec};
use tokio::sync::{Notify, mpsc, watch};

use crate::cluster::Cluster;
use crate::source::Internal;

/// Fetch settings (part of [`crate::ConsumerConfig`]).
#[derive(Debug, Clone)]
pub struct FetchConfig {
    /// Long-poll wait per fetch. Default 500 ms.
    pub max_wait: Duration,
    /// Response byte limit per fetch. Default 50 MiB (Java `fetch.max.bytes`).
    pub max_bytes: i32,
    /// Byte limit per partition per fetch. Default 1 MiB (Java `max.partition.fetch.bytes`).
    pub partition_max_bytes: i32,
    /// Isolation. Default read_committed (aborted transactions are never handled).
    pub isolation: IsolationLevel,
    /// Where to go when a position is out of range: `true` = earliest (default), `false` = latest.
    pub reset_to_earliest: bool,
    /// How often paused partitions' high watermarks are read, so lag stays current. Default 1 s.
    pub paused_lag_interval: Duration,
    /// A corrupt batch (CRC, bad compression) is re-fetched this many times before the driver
    /// fails with an error naming topic, partition and offset. Default 3.
    pub corrupt_batch_retries: u32,
    /// Runs on every fetched record before the engine sees it (e.g. to write a session id the
    /// engine can read into a header). Default none.
    pub prepare: Option<RecordHook>,
}

/// A function applied to each fetched record before the engine routes it.
#[derive(Clone)]
pub struct RecordHook(pub Arc<dyn Fn(&mut Record) + Send + Sync>);

impl std::fmt::Debug for RecordHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordHook")
    }
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            max_wait: Duration::from_millis(500),
            max_bytes: 50 * 1024 * 1024,
            partition_max_bytes: 1024 * 1024,
            isolation: IsolationLevel::ReadCommitted,
            reset_to_earliest: true,
            paused_lag_interval: Duration::from_secs(1),
            corrupt_batch_retries: 3,
            prepare: None,
        }
    }
}

/// A partition to fetch: where, from which offset, under which assignment epoch.
type Fetchable = (TopicPartition, i64, u64);

#[derive(Debug)]
struct PartState {
    epoch: u64,
    position: i64,
    paused: bool,
    corrupt_seen: u32,
}

/// Positions of the owned partitions, shared by the fetch loop, the rebalance bridge and the
/// source (pause/resume). Never held across an await.
#[derive(Debug, Default)]
pub struct FetchState {
    parts: Mutex<HashMap<TopicPartition, PartState>>,
    next_epoch: std::sync::atomic::AtomicU64,
    wake: Notify,
}

impl FetchState {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TopicPartition, PartState>> {
        // Only plain data lives under this lock; a panic elsewhere leaves it consistent.
        self.parts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A new epoch for an assignment.
    pub fn new_epoch(&self) -> u64 {
        self.next_epoch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
    }

    /// Starts fetching `tp` at `position` under `epoch`.
    pub fn add(&self, tp: TopicPartition, position: i64, epoch: u64) {
        self.lock().insert(
            tp,
            PartState {
                epoch,
                position,
                paused: false,
                corrupt_seen: 0,
            },
        );
        self.wake.notify_one();
    }

    /// Stops fetching `tp`.
    pub fn remove(&self, tp: &TopicPartition) {
        self.lock().remove(tp);
    }

    /// Pauses or resumes `tp` (no-op if not owned).
    pub fn set_paused(&self, tp: &TopicPartition, paused: bool) {
        if let Some(p) = self.lock().get_mut(tp) {
            p.paused = paused;
        }
        if !paused {
            self.wake.notify_one();
        }
    }

    /// The fetchable partitions `(tp, position, epoch)` and the paused ones `(tp, epoch)`.
    fn plan(&self) -> (Vec<Fetchable>, Vec<(TopicPartition, u64)>) {
        let parts = self.lock();
        let mut active = Vec::new();
        let mut paused = Vec::new();
        for (tp, p) in parts.iter() {
            if p.paused {
                paused.push((tp.clone(), p.epoch));
            } else {
                active.push((tp.clone(), p.position, p.epoch));
            }
        }
        (active, paused)
    }

    /// Moves `tp` to `next` if it is still at `from` under `epoch` (a rebalance or a reset in
    /// between wins). Returns whether it moved.
    fn advance(&self, tp: &TopicPartition, epoch: u64, from: i64, next: i64) -> bool {
        match self.lock().get_mut(tp) {
            Some(p) if p.epoch == epoch && p.position == from => {
                p.position = next;
                p.corrupt_seen = 0;
                true
            }
            _ => false,
        }
    }

    fn note_corrupt(&self, tp: &TopicPartition, epoch: u64) -> u32 {
        match self.lock().get_mut(tp) {
            Some(p) if p.epoch == epoch => {
                p.corrupt_seen += 1;
                p.corrupt_seen
            }
            _ => 0,
        }
    }
}

/// Runs the fetch loop until `stop` turns true or the source side is gone.
///
/// Each leader broker has at most one fetch in flight, and brokers are independent: a long poll
/// waiting on an idle broker never holds back the fetches of a busy one. A broker whose fetch
/// failed is left alone for a backoff that grows with its consecutive failures.
pub(crate) async fn run(
    cluster: Cluster,
    state: Arc<FetchState>,
    config: FetchConfig,
    tx: mpsc::Sender<Internal>,
    mut stop: watch::Receiver<bool>,
) {
    let mut last_lag_poll = Instant::now();
    let topic_names: Mutex<HashMap<String, Arc<str>>> = Mutex::default();
    let mut inflight = futures::stream::FuturesUnordered::new();
    let mut busy: HashSet<i32> = HashSet::new();
    // Per broker: consecutive failures and when it may be fetched from again.
    let mut failures: HashMap<i32, (u32, Instant)> = HashMap::new();
    loop {
        if *stop.borrow() || tx.is_closed() {
            return;
        }
        let (active, paused) = state.plan();

        if !paused.is_empty() && last_lag_poll.elapsed() >= config.paused_lag_interval {
            last_lag_poll = Instant::now();
            for (tp, epoch) in paused {
                match cluster
                    .list_offset(&tp.topic, tp.partition, LATEST, config.isolation)
                    .await
                {
                    Ok(hw) => {
                        if tx
                            .send(Internal::HighWatermark { tp, epoch, hw })
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::debug!(topic = %tp.topic, partition = tp.partition, %e, "lag poll failed")
                    }
                }
            }
        }

        if !active.is_empty() {
            if let Err(e) = cluster.refresh_if_stale().await {
                tracing::warn!(%e, "metadata refresh failed");
            }
        }
        // Group the fetchable partitions by leader; one request per idle leader broker.
        let mut by_leader: BTreeMap<i32, Vec<(TopicPartition, i64, u64, i32)>> = BTreeMap::new();
        let mut missing_leader = false;
        for (tp, pos, epoch) in active {
            match cluster.leader(&tp.topic, tp.partition) {
                Some(l) => by_leader
                    .entry(l.node_id)
                    .or_default()
                    .push((tp, pos, epoch, l.epoch)),
                None => missing_leader = true,
            }
        }
        if missing_leader {
            if let Err(e) = cluster.refresh(&[]).await {
                tracing::warn!(%e, "metadata refresh failed");
            }
        }
        let now = Instant::now();
        for (leader, parts) in by_leader {
            let backing_off = failures.get(&leader).is_some_and(|(_, until)| *until > now);
            if busy.contains(&leader) || backing_off {
                continue;
            }
            busy.insert(leader);
            let fetch = fetch_one(&cluster, &state, &config, &tx, &topic_names, leader, parts);
            inflight.push(async move { (leader, fetch.await) });
        }

        // Wait for a fetch to finish, a partition to become fetchable, a backoff to pass, or stop.
        let idle_wait = if missing_leader {
            Duration::from_millis(200)
        } else {
            config.paused_lag_interval.min(Duration::from_millis(200))
        };
        tokio::select! {
            Some((leader, result)) = futures::StreamExt::next(&mut inflight), if !inflight.is_empty() => {
                busy.remove(&leader);
                match result {
                    Ok(()) => {
                        failures.remove(&leader);
                    }
                    Err(()) => {
                        let entry = failures.entry(leader).or_insert((0, now));
                        entry.0 = entry.0.saturating_add(1);
                        let delay = orderly_protocol::connection::backoff_delay(
                            Duration::from_millis(50),
                            Duration::from_secs(5),
                            entry.0.min(16),
                        );
                        entry.1 = Instant::now() + delay;
                        if let Err(e) = cluster.refresh(&[]).await {
                            tracing::warn!(%e, "metadata refresh failed");
                        }
                    }
                }
            }
            _ = state.wake.notified() => {}
            _ = tokio::time::sleep(idle_wait) => {}
            _ = stop.changed() => return,
        }
    }
}

/// One fetch to one leader; sends the decoded records. `Err` means back off and refresh metadata.
async fn fetch_one(
    cluster: &Cluster,
    state: &FetchState,
    config: &FetchConfig,
    tx: &mpsc::Sender<Internal>,
    topic_names: &Mutex<HashMap<String, Arc<str>>>,
    leader: i32,
    parts: Vec<(TopicPartition, i64, u64, i32)>,
) -> Result<(), ()> {
    let specs: Vec<FetchSpec> = parts
        .iter()
        .map(|(tp, pos, _, leader_epoch)| FetchSpec {
            topic: tp.topic.to_string(),
            topic_id: [0; 16],
            partition: tp.partition,
            offset: *pos,
            leader_epoch: *leader_epoch,
            max_bytes: config.partition_max_bytes,
        })
        .collect();
    let opts = FetchOptions {
        max_wait: config.max_wait,
        min_bytes: 1,
        max_bytes: config.max_bytes,
        isolation: config.isolation,
        decode: DecodeOptions::default(),
    };
    let pool = cluster.pool();
    let conn = match pool.broker(leader, ConnectionKind::Fetch).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(broker = leader, %e, "no fetch connection");
            return Err(());
        }
    };
    let started = Instant::now();
    let results = match conn.fetch(&specs, &opts).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(broker = leader, %e, "fetch failed");
            pool.invalidate(conn.broker(), ConnectionKind::Fetch).await;
            return Err(());
        }
    };
    metrics::histogram!("orderly_fetch_seconds").record(started.elapsed().as_secs_f64());

    let epochs: HashMap<(&str, i32), u64> = parts
        .iter()
        .map(|(tp, _, epoch, _)| ((&*tp.topic, tp.partition), *epoch))
        .collect();
    let mut retry = false;
    for pf in results {
        let Some(&epoch) = epochs.get(&(pf.topic.as_str(), pf.partition)) else {
            continue;
        };
        let topic: Arc<str> = {
            let mut names = topic_names
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            names
                .entry(pf.topic.clone())
                .or_insert_with(|| Arc::from(pf.topic.as_str()))
                .clone()
        };
        let tp = TopicPartition {
            topic,
            partition: pf.partition,
        };
        let from = pf.fetch_offset;
        if let Some(err) = &pf.error {
            match err.code() {
                Some(ErrorCode::OFFSET_OUT_OF_RANGE) => {
                    let target = if config.reset_to_earliest {
                        EARLIEST
                    } else {
                        LATEST
                    };
                    match cluster
                        .list_offset(&tp.topic, tp.partition, target, config.isolation)
                        .await
                    {
                        Ok(to) => {
                            tracing::warn!(topic = %tp.topic, partition = tp.partition, from, to, "offset out of range; reset");
                            state.advance(&tp, epoch, from, to);
                        }
                        Err(e) => {
                            tracing::warn!(%e, "offset reset failed");
                            retry = true;
                        }
                    }
                    continue;
                }
                Some(code) => {
                    tracing::debug!(topic = %tp.topic, partition = tp.partition, ?code, "fetch partition error");
                    retry = true;
                    if pf.records.is_empty() {
                        continue;
                    }
                }
                None => {
                    // A corrupt or undecodable batch at `next_offset`; the records before it are valid.
                    let seen = state.note_corrupt(&tp, epoch);
                    tracing::error!(topic = %tp.topic, partition = tp.partition, offset = pf.next_offset, %err, seen, "undecodable batch");
                    if seen > config.corrupt_batch_retries {
                        let _ = tx
                            .send(Internal::Fatal(format!(
                                "undecodable record batch at {}-{} offset {} after {seen} fetches: {err}",
                                tp.topic, tp.partition, pf.next_offset
                            )))
                            .await;
                        return Err(());
                    }
                    retry = true;
                }
            }
        }
        if pf.next_offset <= from && pf.records.is_empty() {
            if tx
                .send(Internal::HighWatermark {
                    tp,
                    epoch,
                    hw: pf.high_watermark,
                })
                .await
                .is_err()
            {
                return Ok(());
            }
            continue;
        }
        if !state.advance(&tp, epoch, from, pf.next_offset) {
            // Revoked, reassigned or reset while the fetch was in flight: drop the data.
            continue;
        }
        let mut records: Vec<Record> = pf
            .records
            .into_iter()
            .map(|r| Record {
                partition: tp.clone(),
                offset: r.offset,
                key: r.key,
                value: r.value,
                headers: r
                    .headers
                    .into_iter()
                    .map(|h| Header {
                        key: h.key,
                        value: h.value,
                    })
                    .collect(),
                timestamp_ms: r.timestamp,
            })
            .collect();
        if let Some(hook) = &config.prepare {
            records.iter_mut().for_each(|r| (hook.0)(r));
        }
        metrics::counter!("orderly_fetched_records_total").increment(records.len() as u64);
        let hw = Some(pf.high_watermark);
        if tx
            .send(Internal::Records {
                tp,
                epoch,
                records,
                hw,
            })
            .await
            .is_err()
        {
            return Ok(());
        }
    }
    if retry { Err(()) } else { Ok(()) }
}
