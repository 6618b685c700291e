//! Tests of the fetch loop: out-of-range reset plans, and lag polls that never stall fetching (real broker behind a proxy).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use bytes::Bytes;
use orderly_protocol::records::{Compression, ProduceRecord};
use orderly_protocol::{BrokerConnection, ConnectionConfig, ConnectionPool};
use orderly_testkit::proxy::KafkaProxy;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use orderly_engine::TopicPartition;
use orderly_group::AutoOffsetReset;
use orderly_protocol::messages::list_offsets::LATEST;
use orderly_protocol::records::IsolationLevel;
use tokio::sync::{mpsc, watch};

use super::fetch_loop::HANDOFF_CHUNK;
use super::reset::{ResetPlan, plan_reset};
use super::task::run;
use super::{FetchConfig, FetchState};
use crate::handoff::Internal;
use crate::metadata_cache::MetadataCache;

#[test]
fn reset_below_the_log_start_follows_the_policy_and_reports_the_skip() {
    use AutoOffsetReset::*;
    // Log [60, 100), last stable offset 100; position 10.
    assert_eq!(
        plan_reset(Earliest, 10, 60, 100, 100),
        ResetPlan::Move {
            to: 60,
            skipped: Some(10..60)
        }
    );
    assert_eq!(
        plan_reset(Latest, 10, 60, 100, 95),
        ResetPlan::Move {
            to: 95,
            skipped: Some(10..95)
        }
    );
    assert_eq!(plan_reset(None, 10, 60, 100, 100), ResetPlan::Fail);
}

#[test]
fn reset_above_the_log_end_reports_the_cut_range() {
    use AutoOffsetReset::*;
    // The log was cut to [0, 70) while the position was 90: whatever is written at 70..90 now
    // is taken by the engine for records it has seen.
    for policy in [Earliest, Latest] {
        assert_eq!(
            plan_reset(policy, 90, 0, 70, 70),
            ResetPlan::Move {
                to: 70,
                skipped: Some(70..90)
            }
        );
    }
    assert_eq!(plan_reset(None, 90, 0, 70, 70), ResetPlan::Fail);
}

#[test]
fn a_position_inside_the_log_is_fetched_again() {
    for policy in [
        AutoOffsetReset::Earliest,
        AutoOffsetReset::Latest,
        AutoOffsetReset::None,
    ] {
        for from in [60, 80, 100] {
            assert_eq!(plan_reset(policy, from, 60, 100, 100), ResetPlan::Retry);
        }
    }
}

/// Writes record `i` (key `k<i>`) to partition 0 of `topic`, waiting for a leader of a topic
/// created a moment ago.
async fn produce_one(conn: &BrokerConnection, topic: &str, i: i64) {
    produce_to(conn, topic, 0, i).await;
}

/// [`produce_one`] to `partition`.
async fn produce_to(conn: &BrokerConnection, topic: &str, partition: i32, i: i64) {
    let rec = ProduceRecord {
        key: Some(Bytes::from(format!("k{i}"))),
        value: Some(Bytes::from_static(b"v")),
        ..Default::default()
    };
    let t0 = Instant::now();
    while let Err(e) = conn
        .produce(
            topic,
            partition,
            std::slice::from_ref(&rec),
            Compression::None,
            Duration::from_secs(30),
        )
        .await
    {
        assert!(t0.elapsed() < Duration::from_secs(30), "produce: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A metadata cache for `topic` whose every request goes through `proxy`.
fn cluster_behind(proxy: &KafkaProxy, topic: &str, max_age: Duration) -> MetadataCache {
    let pool = Arc::new(ConnectionPool::new(
        vec![proxy.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    MetadataCache::new(pool, vec![topic.to_string()], max_age)
}

/// The fetch loop of `cluster` over `state`, running in a task until [`Running::stop`].
fn spawn_loop(
    cluster: MetadataCache,
    state: Arc<FetchState>,
    config: FetchConfig,
) -> (mpsc::Receiver<Internal>, Running) {
    let (tx, rx) = mpsc::channel(1024);
    let (stop_tx, stop_rx) = watch::channel(false);
    let task = tokio::spawn(run(
        cluster,
        state,
        config,
        AutoOffsetReset::Earliest,
        tx,
        stop_rx,
    ));
    (rx, Running { stop_tx, task })
}

struct Running {
    stop_tx: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops the loop and waits for it to return.
    async fn stop(self) {
        self.stop_tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("run returns after stop")
            .unwrap();
    }
}

/// Waits until the proxy holds a request of `api_key` (`what` names it in the failure).
async fn wait_held(proxy: &KafkaProxy, api_key: i16, what: &str) {
    let t0 = Instant::now();
    while proxy.held_now(api_key) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "no {what} started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const LIST_OFFSETS: i16 = 2;

/// 40 paused partitions and one active one; the broker's ListOffsets answers
/// are held back by a proxy. Records of the active partition must keep arriving while a lag poll
/// waits, and the lag poll must ask for all 40 partitions in one request (a fetch loop that polled
/// the paused partitions one by one and inside the loop would fetch nothing while a ListOffsets
/// was outstanding).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lag_polls_of_paused_partitions_never_stall_fetching() {
    const PAUSED: i32 = 40;
    let b = orderly_testkit::broker();
    let topic = b.topic("lag-poll", PAUSED + 1).await.unwrap();
    // Every partition of a topic created a moment ago answers ListOffsets only once its leader
    // is ready; wait for that, so the lag poll below cannot see a partition error.
    let direct = ConnectionPool::new(vec![b.bootstrap().to_string()], ConnectionConfig::default());
    let conn = direct.any().await.unwrap();
    let all: Vec<(&str, i32)> = (0..=PAUSED).map(|p| (topic.name.as_str(), p)).collect();
    let t0 = Instant::now();
    loop {
        let r = conn
            .list_offsets(&all, LATEST, IsolationLevel::ReadCommitted)
            .await;
        if r.is_ok_and(|v| v.iter().all(Result::is_ok)) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "topic not ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    let cluster = cluster_behind(&proxy, &topic.name, Duration::from_secs(300));
    cluster.refresh(&[]).await.unwrap();
    let tp = |p: i32| TopicPartition::new(topic.name.as_str(), p);

    let state = Arc::new(FetchState::default());
    for p in 0..=PAUSED {
        let epoch = state.new_epoch();
        state.add(tp(p), 0, epoch);
        if p > 0 {
            state.set_paused(&tp(p), true);
        }
    }
    proxy.hold(LIST_OFFSETS);
    let config = FetchConfig {
        max_wait: Duration::from_millis(100),
        paused_lag_interval: Duration::from_millis(100),
        ..FetchConfig::default()
    };
    let (mut rx, running) = spawn_loop(cluster, state, config);

    wait_held(&proxy, LIST_OFFSETS, "lag poll").await;

    // Produce to the active partition, one record at a time, and see each one fetched while
    // the lag poll still waits.
    let mut hws = HashSet::new();
    for i in 0..3i64 {
        produce_one(&conn, &topic.name, i).await;
        let got = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                match rx.recv().await.expect("fetch loop ended") {
                    Internal::Records { tp: t, records, .. } if t.partition == 0 => {
                        return records.iter().map(|r| r.offset).collect::<Vec<_>>();
                    }
                    // The fetch loop reports the active partition's high watermark itself.
                    Internal::HighWatermark { tp: t, .. } if t.partition > 0 => {
                        hws.insert(t.partition);
                    }
                    _ => {}
                }
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!("record {i} of the active partition was not fetched while a lag poll waited")
        });
        assert_eq!(got, vec![i]);
        assert!(
            proxy.held_now(LIST_OFFSETS) >= 1,
            "the lag poll finished early"
        );
    }
    assert!(
        hws.is_empty(),
        "high watermarks arrived while held: {hws:?}"
    );
    // All paused partitions of the (only) leader in one request.
    assert_eq!(proxy.seen(LIST_OFFSETS), 1);

    // Let only the outstanding request through (later ones stay held): it alone must bring the
    // high watermark of every paused partition.
    proxy.let_through(LIST_OFFSETS);
    tokio::time::timeout(Duration::from_secs(20), async {
        while hws.len() < PAUSED as usize {
            if let Internal::HighWatermark { tp: t, hw, .. } = rx.recv().await.unwrap() {
                if t.partition == 0 {
                    continue;
                }
                assert_eq!(hw, 0);
                hws.insert(t.partition);
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "one ListOffsets brought {} of {PAUSED} high watermarks: not batched per leader",
            hws.len()
        )
    });
    proxy.release(LIST_OFFSETS);
    running.stop().await;
}

const FETCH: i16 = 1;

/// A partition that resumes after a pause (the engine's memory budget) is fetched soon, not after
/// the long poll its broker holds for the caught-up partitions. Partition 0 is empty, so each
/// fetch for it waits `max_wait` (30 s here) for data; partition 1 has a record and is paused.
/// Before `paused_max_wait`, the fetch in flight when partition 1 resumed held it for the whole
/// 30 s (an S1 run under a 256 KiB budget took 2.5–4× as long).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_partition_is_not_held_behind_a_long_poll() {
    let b = orderly_testkit::broker();
    let topic = b.topic("resume-wait", 2).await.unwrap();
    let direct = ConnectionPool::new(vec![b.bootstrap().to_string()], ConnectionConfig::default());
    let conn = direct.any().await.unwrap();
    produce_to(&conn, &topic.name, 1, 0).await;
    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    let cluster = cluster_behind(&proxy, &topic.name, Duration::from_secs(300));
    cluster.refresh(&[]).await.unwrap();
    let tp = |p: i32| TopicPartition::new(topic.name.as_str(), p);
    let state = Arc::new(FetchState::default());
    for p in 0..2 {
        let epoch = state.new_epoch();
        state.add(tp(p), 0, epoch);
    }
    state.set_paused(&tp(1), true);
    let config = FetchConfig {
        max_wait: Duration::from_secs(30),
        ..FetchConfig::default()
    };
    assert!(config.paused_max_wait < Duration::from_secs(1));
    let (mut rx, running) = spawn_loop(cluster, state.clone(), config);
    // A fetch of partition 0 is in flight (long-polling) when partition 1 resumes.
    let t0 = Instant::now();
    while proxy.seen(FETCH) == 0 {
        assert!(t0.elapsed() < Duration::from_secs(30), "no fetch started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    state.set_paused(&tp(1), false);
    // It takes ~20 ms plus a fetch; the 10 s bound is loose for a busy machine, and the bug it
    // catches waits 29.8 s.
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Internal::Records { tp: t, records, .. } =
                rx.recv().await.expect("fetch loop ended")
            {
                if t.partition == 1 {
                    assert_eq!(records.iter().map(|r| r.offset).collect::<Vec<_>>(), [0]);
                    return;
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!("the resumed partition waited more than 10 s: behind the 30 s long poll")
    });
    running.stop().await;
}

const METADATA: i16 = 3;

/// Records flow again on surviving partitions after a leader kill: a metadata refresh
/// that hangs (its broker died or stalls; here the proxy holds every Metadata request) must not
/// stop the fetches from a leader that answers (a fetch loop that awaited the refresh inline would
/// fetch nothing after a failed fetch or with stale metadata until the refresh ended, up to the
/// request timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_metadata_refresh_never_stalls_fetching() {
    let b = orderly_testkit::broker();
    let topic = b.topic("refresh-hangs", 1).await.unwrap();
    let direct = ConnectionPool::new(vec![b.bootstrap().to_string()], ConnectionConfig::default());
    let conn = direct.any().await.unwrap();
    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    // Metadata older than 50 ms is stale: the loop asks for a refresh at once and keeps asking.
    let cluster = cluster_behind(&proxy, &topic.name, Duration::from_millis(50));
    // A topic created a moment ago may have no leader in the metadata yet; with every later
    // refresh held, the loop would never learn one (found on a freshly started broker).
    let t0 = Instant::now();
    loop {
        cluster.refresh(&[]).await.unwrap();
        if cluster.leader(&topic.name, 0).is_some() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "no leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    proxy.hold(METADATA);

    let state = Arc::new(FetchState::default());
    let tp = TopicPartition::new(topic.name.as_str(), 0);
    state.add(tp.clone(), 0, state.new_epoch());
    let config = FetchConfig {
        max_wait: Duration::from_millis(100),
        ..FetchConfig::default()
    };
    let (mut rx, running) = spawn_loop(cluster, state, config);
    wait_held(&proxy, METADATA, "refresh").await;

    for i in 0..3i64 {
        produce_one(&conn, &topic.name, i).await;
        let got = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                if let Internal::Records { records, .. } =
                    rx.recv().await.expect("fetch loop ended")
                {
                    return records.iter().map(|r| r.offset).collect::<Vec<_>>();
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("record {i} was not fetched while a metadata refresh hung"));
        assert_eq!(got, vec![i]);
        assert!(proxy.held_now(METADATA) >= 1, "the refresh finished early");
    }
    // One refresh at a time, however often the loop asked for one.
    assert_eq!(proxy.held_now(METADATA), 1);
    proxy.release(METADATA);
    running.stop().await;
}

/// A partition without a leader (here one the topic does not have) asks for a metadata refresh
/// on every turn of the fetch loop. Refreshes must be spaced (`REFRESH_MIN_INTERVAL`, 100 ms),
/// not sent back to back: with the refresh beside the loop, each one's end was the next turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refreshes_for_a_leaderless_partition_are_spaced() {
    let b = orderly_testkit::broker();
    let topic = b.topic("leaderless", 1).await.unwrap();
    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    let cluster = cluster_behind(&proxy, &topic.name, Duration::from_secs(300));
    cluster.refresh(&[]).await.unwrap();
    let state = Arc::new(FetchState::default());
    state.add(
        TopicPartition::new(topic.name.as_str(), 7),
        0,
        state.new_epoch(),
    );
    let before = proxy.seen(METADATA);
    let t0 = Instant::now();
    let (_rx, running) = spawn_loop(cluster, state, FetchConfig::default());
    tokio::time::sleep(Duration::from_secs(1)).await;
    let asked = proxy.seen(METADATA) - before;
    let elapsed = t0.elapsed();
    running.stop().await;
    // At most one start per 100 ms (plus the first); a busy machine can only make it fewer.
    let most = elapsed.as_millis() / 100 + 1;
    assert!(
        (2..=most as usize).contains(&asked),
        "{asked} Metadata requests in {elapsed:?} (at most {most})"
    );
}

/// An assignment is added all at once: the fetch loop (on its own thread) plans either none or
/// all of its partitions. Added one by one, a plan between two adds named only some, and the
/// first fetch left the rest waiting for its answer (up to the long-poll wait).
#[test]
fn an_assignment_is_seen_by_the_fetch_loop_whole_or_not_at_all() {
    const PARTS: i32 = 2_000;
    let state = Arc::new(FetchState::default());
    let started = std::sync::Barrier::new(2);
    let seen = std::thread::scope(|s| {
        let planner = s.spawn(|| {
            let mut sizes = HashSet::new();
            started.wait();
            loop {
                let n = state.plan().len();
                sizes.insert(n);
                if n == PARTS as usize {
                    return sizes;
                }
                std::hint::spin_loop();
            }
        });
        let epoch = state.new_epoch();
        started.wait();
        state.add_all((0..PARTS).map(|p| (TopicPartition::new("t", p), 0, epoch)));
        planner.join().unwrap()
    });
    assert!(
        seen.iter().all(|&n| n == 0 || n == PARTS as usize),
        "the fetch loop planned part of an assignment: sizes {seen:?}"
    );
}

/// A large response is handed to the engine in turns: every partition's first
/// `HANDOFF_CHUNK` records before any partition's next ones, each partition's records in
/// offset order and none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_response_reaches_the_engine_partition_by_partition_in_turns() {
    const PARTS: i32 = 3;
    // More than two turns' worth per partition.
    const PER: i64 = 1_124;
    const _: () = assert!(HANDOFF_CHUNK as i64 * 2 < PER);
    let b = orderly_testkit::broker();
    let topic = b.topic("handoff", PARTS).await.unwrap();
    let direct = ConnectionPool::new(vec![b.bootstrap().to_string()], ConnectionConfig::default());
    let conn = direct.any().await.unwrap();
    for p in 0..PARTS {
        let recs: Vec<ProduceRecord> = (0..PER)
            .map(|i| ProduceRecord {
                key: Some(Bytes::from(format!("k{i}"))),
                value: Some(Bytes::from_static(b"v")),
                ..Default::default()
            })
            .collect();
        let t0 = Instant::now();
        while let Err(e) = conn
            .produce(
                &topic.name,
                p,
                &recs,
                Compression::None,
                Duration::from_secs(30),
            )
            .await
        {
            assert!(t0.elapsed() < Duration::from_secs(30), "produce: {e}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let pool = Arc::new(ConnectionPool::new(
        vec![b.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let cluster = MetadataCache::new(pool, vec![topic.name.clone()], Duration::from_secs(300));
    cluster.refresh(&[]).await.unwrap();
    let state = Arc::new(FetchState::default());
    let epoch = state.new_epoch();
    state.add_all((0..PARTS).map(|p| (TopicPartition::new(topic.name.as_str(), p), 0, epoch)));
    let (mut rx, running) = spawn_loop(cluster, state, FetchConfig::default());

    // (partition, first offset, count) of each Records message, in arrival order.
    let mut chunks: Vec<(i32, i64, usize)> = Vec::new();
    let mut next: HashMap<i32, i64> = HashMap::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while next.values().sum::<i64>() < PER * i64::from(PARTS) {
            if let Internal::Records { tp, records, .. } = rx.recv().await.expect("loop ended") {
                let at = next.entry(tp.partition).or_insert(0);
                for r in &records {
                    assert_eq!(r.offset, *at, "partition {} out of order", tp.partition);
                    *at += 1;
                }
                chunks.push((tp.partition, records[0].offset, records.len()));
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not every record arrived: {next:?}"));
    running.stop().await;
    assert!(
        chunks
            .iter()
            .all(|c| c.2 <= HANDOFF_CHUNK && (c.2 as i64) < PER),
        "a message carried more than one turn: {chunks:?}"
    );
    // One fetch brought all three partitions (each well under the 1 MiB partition limit), so
    // the first turn is one chunk of each partition, then the next turn, and so on.
    let firsts: HashSet<i32> = chunks.iter().take(PARTS as usize).map(|c| c.0).collect();
    assert_eq!(firsts.len(), PARTS as usize, "first turn: {chunks:?}");
    assert!(
        chunks.iter().take(PARTS as usize).all(|c| c.1 == 0),
        "a partition's later records came before another's first: {chunks:?}"
    );
}
