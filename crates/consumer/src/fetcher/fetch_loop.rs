//! The fetch loop: one multi-partition Fetch per leader broker for the partitions not paused,
//! records handed to the engine in turns of at most `HANDOFF_CHUNK` per partition, each tagged
//! with the epoch it was fetched under.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orderly_engine::{Header, Record, SharedBuffer, TopicPartition};
use orderly_group::AutoOffsetReset;
use orderly_protocol::records::DecodeOptions;
use orderly_protocol::{ConnectionKind, ErrorCode};
use orderly_protocol::{FetchOptions, FetchSpec};
use tokio::sync::{mpsc, watch};

use super::config::FetchConfig;
use super::reset::{ResetPlan, out_of_range, report_reset};
use super::state::FetchState;
use crate::handoff::Internal;
use crate::metadata_cache::MetadataCache;

/// The fetch loop proper (see [`run`](super::task::run)).
pub(super) async fn fetch_loop(
    cluster: &MetadataCache,
    state: &FetchState,
    config: &FetchConfig,
    reset: AutoOffsetReset,
    tx: &mpsc::Sender<Internal>,
    mut stop: watch::Receiver<bool>,
) {
    let topic_names: Mutex<HashMap<String, Arc<str>>> = Mutex::default();
    let mut inflight = futures::stream::FuturesUnordered::new();
    let mut busy: HashSet<i32> = HashSet::new();
    // Per broker: consecutive failures and when it may be fetched from again.
    let mut failures: HashMap<i32, (u32, Instant)> = HashMap::new();
    // Per broker: the end of the throttle time its last answer asked for (KIP-219: the broker
    // answers at once and expects nothing from us until then; it would mute the connection).
    let mut throttled: HashMap<i32, Instant> = HashMap::new();
    // The metadata refresh runs beside the fetches, never inside the loop: a refresh waits on
    // whichever broker answers Metadata, which may be the one that just died or stalls, and
    // the partitions of every other leader must keep being fetched meanwhile (a leader kill
    // must not stop the surviving partitions). One refresh at a time; a request that comes
    // while one runs starts another once it ends, but refreshes start at most every
    // `REFRESH_MIN_INTERVAL` (a partition without a leader asks on every turn of the loop).
    let mut refreshing: Option<Refresh> = None;
    let mut want_refresh = false;
    let mut refresh_started: Option<Instant> = None;
    loop {
        if *stop.borrow() || tx.is_closed() {
            return;
        }
        let active = state.plan();

        if !active.is_empty() && cluster.is_stale() {
            want_refresh = true;
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
            want_refresh = true;
        }
        // When a wanted refresh may start (now, or after the minimum interval).
        let refresh_at = refresh_started.map_or(Instant::now(), |t| t + REFRESH_MIN_INTERVAL);
        if want_refresh && refreshing.is_none() && refresh_at <= Instant::now() {
            want_refresh = false;
            refresh_started = Some(Instant::now());
            let cluster = cluster.clone();
            refreshing = Some(Box::pin(async move { cluster.refresh(&[]).await }));
        }
        // Brokers that lead a paused partition long-poll briefly (see `paused_max_wait`).
        let paused_leaders: HashSet<i32> = state
            .paused()
            .into_iter()
            .filter_map(|(tp, _)| cluster.leader(&tp.topic, tp.partition))
            .map(|l| l.node_id)
            .collect();
        let now = Instant::now();
        for (leader, parts) in by_leader {
            let backing_off = failures.get(&leader).is_some_and(|(_, until)| *until > now)
                || throttled.get(&leader).is_some_and(|until| *until > now);
            if busy.contains(&leader) || backing_off {
                continue;
            }
            busy.insert(leader);
            let max_wait = if paused_leaders.contains(&leader) {
                config.max_wait.min(config.paused_max_wait)
            } else {
                config.max_wait
            };
            let fetch = fetch_one(
                cluster,
                state,
                config,
                reset,
                tx,
                &topic_names,
                leader,
                parts,
                max_wait,
            );
            inflight.push(async move { (leader, fetch.await) });
        }

        // Wait for a fetch to finish, a partition to become fetchable, a backoff to pass, or stop.
        let mut idle_wait = Duration::from_millis(200);
        if want_refresh && refreshing.is_none() {
            idle_wait = idle_wait.min(refresh_at.saturating_duration_since(Instant::now()));
        }
        tokio::select! {
            Some((leader, (result, throttle))) = futures::StreamExt::next(&mut inflight), if !inflight.is_empty() => {
                busy.remove(&leader);
                if throttle.is_zero() {
                    throttled.remove(&leader);
                } else {
                    tracing::debug!(broker = leader, ?throttle, "fetch throttled by the broker's quota");
                    metrics::counter!("orderly_fetch_throttled_seconds_total")
                        .increment(throttle.as_secs());
                    throttled.insert(leader, Instant::now() + throttle);
                }
                match result {
                    Ok(()) => {
                        failures.remove(&leader);
                    }
                    Err(()) => {
                        let entry = failures.entry(leader).or_insert((0, now));
                        entry.0 = entry.0.saturating_add(1);
                        // Capped at 1 s like the Java client's reconnect/retry backoff: each
                        // failed attempt refreshes the metadata, so after a leader dies the cap
                        // bounds how long its partitions wait once the new leader is elected.
                        let delay = orderly_protocol::connection::backoff_delay(
                            Duration::from_millis(50),
                            FETCH_BACKOFF_MAX,
                            entry.0.min(16),
                        );
                        entry.1 = Instant::now() + delay;
                        want_refresh = true;
                    }
                }
            }
            result = async {
                match refreshing.as_mut() {
                    Some(r) => r.await,
                    None => std::future::pending().await,
                }
            }, if refreshing.is_some() => {
                refreshing = None;
                if let Err(e) = result {
                    tracing::warn!(%e, "metadata refresh failed");
                }
            }
            _ = state.wake.notified() => {}
            _ = tokio::time::sleep(idle_wait) => {}
            _ = stop.changed() => return,
        }
    }
}

/// The shortest time between the starts of two metadata refreshes of the fetch loop (Java's
/// `retry.backoff.ms` default).
pub(super) const REFRESH_MIN_INTERVAL: Duration = Duration::from_millis(100);

/// A metadata refresh running beside the fetch loop.
pub(super) type Refresh = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(), crate::error::DriverError>> + Send>,
>;

/// The most records of one partition handed to the engine at a time; see `fetch_one_inner`.
pub(super) const HANDOFF_CHUNK: usize = 512;

/// The longest a failing leader is left alone before the next fetch attempt (and metadata refresh).
pub(super) const FETCH_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// One fetch to one leader; sends the decoded records. `Err` means back off and refresh metadata;
/// the duration is the throttle time the broker asked for (zero when none or on failure).
#[allow(clippy::too_many_arguments)]
pub(super) async fn fetch_one(
    cluster: &MetadataCache,
    state: &FetchState,
    config: &FetchConfig,
    reset: AutoOffsetReset,
    tx: &mpsc::Sender<Internal>,
    topic_names: &Mutex<HashMap<String, Arc<str>>>,
    leader: i32,
    parts: Vec<(TopicPartition, i64, u64, i32)>,
    max_wait: Duration,
) -> (Result<(), ()>, Duration) {
    let mut throttle = Duration::ZERO;
    let result = fetch_one_inner(
        cluster,
        state,
        config,
        reset,
        tx,
        topic_names,
        leader,
        parts,
        max_wait,
        &mut throttle,
    )
    .await;
    (result, throttle)
}

/// [`fetch_one`]'s body; sets `throttle` from the broker's answer.
#[allow(clippy::too_many_arguments)]
pub(super) async fn fetch_one_inner(
    cluster: &MetadataCache,
    state: &FetchState,
    config: &FetchConfig,
    reset: AutoOffsetReset,
    tx: &mpsc::Sender<Internal>,
    topic_names: &Mutex<HashMap<String, Arc<str>>>,
    leader: i32,
    parts: Vec<(TopicPartition, i64, u64, i32)>,
    max_wait: Duration,
    throttle: &mut Duration,
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
        max_wait,
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
    let results = match conn.fetch_throttled(&specs, &opts).await {
        Ok((r, t)) => {
            *throttle = t;
            r
        }
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
    let mut ready = Vec::with_capacity(results.len());
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
        if pf.error.is_none() {
            state.note_answered(&tp, epoch);
        }
        if let Some(err) = &pf.error {
            match err.code() {
                Some(ErrorCode::OFFSET_OUT_OF_RANGE) => {
                    match out_of_range(cluster, config, reset, &tp, from).await {
                        Ok(ResetPlan::Move { to, skipped }) => {
                            if state.advance(&tp, epoch, from, to) {
                                report_reset(&tp, reset, from, to, skipped);
                            }
                        }
                        Ok(ResetPlan::Retry) => {
                            // The log moved back over the position (or the answer came from a
                            // stale leader): fetch again after this broker's backoff.
                            tracing::warn!(topic = %tp.topic, partition = tp.partition, from, "offset out of range, but inside the log now; fetching again");
                            retry = true;
                        }
                        Ok(ResetPlan::Fail) => {
                            let _ = tx
                                .send(Internal::Fatal(format!(
                                    "offset {from} of {}-{} is out of range and auto.offset.reset is none",
                                    tp.topic, tp.partition
                                )))
                                .await;
                            return Err(());
                        }
                        Err(e) => {
                            tracing::warn!(topic = %tp.topic, partition = tp.partition, %e, "offset reset failed");
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
        ready.push((tp, epoch, pf.high_watermark, pf.records.into_iter()));
    }
    // Hand the records over in turns of at most `HANDOFF_CHUNK` per partition, so every
    // partition of a large response gets its first records to the engine before any gets its
    // rest: handed over partition after partition, the sessions of the last ones would wait for all
    // records before theirs to be routed.
    while !ready.is_empty() {
        for (tp, epoch, hw, rest) in &mut ready {
            let mut records: Vec<Record> = rest
                .by_ref()
                .take(HANDOFF_CHUNK)
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
                    shared: r.shared.map(|s| SharedBuffer {
                        addr: s.addr,
                        len: s.len,
                    }),
                })
                .collect();
            if let Some(hook) = &config.prepare {
                records.iter_mut().for_each(|r| {
                    (hook.0)(r);
                    // A hook that replaced every field leaves nothing in the shared buffer.
                    r.unshare_if_unused();
                });
            }
            metrics::counter!("orderly_fetched_records_total").increment(records.len() as u64);
            if tx
                .send(Internal::Records {
                    tp: tp.clone(),
                    epoch: *epoch,
                    records,
                    hw: Some(*hw),
                })
                .await
                .is_err()
            {
                return Ok(());
            }
        }
        ready.retain(|(_, _, _, rest)| rest.len() > 0);
    }
    if retry { Err(()) } else { Ok(()) }
}
