//! Out-of-range positions against the real broker: the group's `auto_offset_reset` drives the reset, and skipped records are reported.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use common::{config, wait_until};
use orderly_consumer::Consumer;
use orderly_engine::{Attempt, Handler, HandlerError, Record};
use orderly_group::AutoOffsetReset;
use orderly_protocol::messages::offset_commit::{
    OffsetCommitPartition, OffsetCommitRequest, OffsetCommitTopic,
};
use orderly_protocol::records::{Compression, ProduceRecord};
use orderly_protocol::{ConnectionConfig, ConnectionKind, ConnectionPool};
use orderly_testkit::broker;

/// Counters by `name{topic}`, and every log line, for this test process.
struct Captured {
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
    log: Arc<Mutex<Vec<u8>>>,
}

struct Recorder(&'static Captured);

impl metrics::Recorder for Recorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let topic = key
            .labels()
            .find(|l| l.key() == "topic")
            .map(|l| l.value().to_string())
            .unwrap_or_default();
        let name = format!("{}{{{topic}}}", key.name());
        let c = self
            .0
            .counters
            .lock()
            .unwrap()
            .entry(name)
            .or_default()
            .clone();
        metrics::Counter::from_arc(c)
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

#[derive(Clone)]
struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn captured() -> &'static Captured {
    static C: OnceLock<&'static Captured> = OnceLock::new();
    C.get_or_init(|| {
        let c: &'static Captured = Box::leak(Box::new(Captured {
            counters: Mutex::default(),
            log: Arc::default(),
        }));
        metrics::set_global_recorder(Recorder(c)).unwrap();
        let log = c.log.clone();
        tracing_subscriber::fmt()
            .with_writer(move || LogWriter(log.clone()))
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .init();
        c
    })
}

fn counter(name: &str, topic: &str) -> u64 {
    captured()
        .counters
        .lock()
        .unwrap()
        .get(&format!("{name}{{{topic}}}"))
        .map_or(0, |c| c.load(Ordering::Relaxed))
}

fn log_lines_with(needle: &str) -> Vec<String> {
    let log = captured().log.lock().unwrap();
    String::from_utf8_lossy(&log)
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// Records the offsets it handles.
#[derive(Clone, Default)]
struct Offsets(Arc<Mutex<BTreeSet<i64>>>);

impl Handler for Offsets {
    async fn handle(&self, record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        self.0.lock().unwrap().insert(record.offset);
        Ok(())
    }
}

async fn produce(pool: &ConnectionPool, topic: &str, from: usize, n: usize) {
    let conn = pool.any().await.unwrap();
    let records: Vec<ProduceRecord> = (from..from + n)
        .map(|i| ProduceRecord {
            key: Some(Bytes::from(format!("s{}", i % 5))),
            value: Some(Bytes::from(format!("v{i}"))),
            ..Default::default()
        })
        .collect();
    conn.produce(
        topic,
        0,
        &records,
        Compression::None,
        Duration::from_secs(30),
    )
    .await
    .unwrap();
}

/// Commits `offset` for `group` on partition 0 as a simple (admin) commit, before any member
/// exists: the position a consumer restarting after a long pause would start from.
async fn commit(pool: &ConnectionPool, group: &str, topic: &str, offset: i64) {
    let any = pool.any().await.unwrap();
    // A broker that has just started answers COORDINATOR_NOT_AVAILABLE until
    // __consumer_offsets exists, and COORDINATOR_LOAD_IN_PROGRESS (or NOT_COORDINATOR) to the
    // first commits while its partitions load: retried, as a client does.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let c = any
            .find_coordinator_within(group, Duration::from_secs(60))
            .await
            .unwrap();
        pool.set_broker(c.node_id, format!("{}:{}", c.host, c.port));
        let conn = pool
            .broker(c.node_id, ConnectionKind::Coordination)
            .await
            .unwrap();
        let resp = conn
            .offset_commit(&OffsetCommitRequest {
                group_id: group.to_string(),
                generation_id_or_member_epoch: -1,
                member_id: String::new(),
                group_instance_id: None,
                topics: vec![OffsetCommitTopic {
                    name: topic.to_string(),
                    partitions: vec![OffsetCommitPartition {
                        partition_index: 0,
                        committed_offset: offset,
                        committed_leader_epoch: -1,
                        committed_metadata: None,
                    }],
                }],
            })
            .await
            .unwrap();
        match resp.first_error() {
            None => return,
            Some((_, _, code)) if code.is_retriable() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Some(e) => panic!("commit: {e:?}"),
        }
    }
}

/// A partition with records 0..100, the group's commit at 10, and the log truncated to start at
/// 60 (DeleteRecords, as retention would): the consumer's position 10 is out of range.
async fn truncated_below_commit(prefix: &str) -> (String, String, String, ConnectionPool) {
    let b = broker();
    captured();
    let topic = b.topic(prefix, 1).await.unwrap();
    let dlq = b.topic(&format!("{prefix}-dlq"), 1).await.unwrap();
    let pool = ConnectionPool::new(vec![b.bootstrap().to_string()], ConnectionConfig::default());
    produce(&pool, &topic.name, 0, 100).await;
    let group = b.unique_topic(&format!("{prefix}-group"));
    commit(&pool, &group, &topic.name, 10).await;
    b.delete_records(&topic.name, 0, 60).await.unwrap();
    (topic.name.clone(), dlq.name.clone(), group, pool)
}

/// `Earliest`: the position moves to the new log start 60; 10..60 are reported (error log with
/// the range, counter) and 60..100 are handled. Before the fix the reset was a warning only and
/// no metric counted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn earliest_reset_after_truncation_reports_the_skipped_range() {
    let (topic, dlq, group, _pool) = truncated_below_commit("reset-earliest").await;
    let mut cfg = config(broker().bootstrap(), &group, &topic, &dlq);
    cfg.group.auto_offset_reset = AutoOffsetReset::Earliest;
    let handled = Offsets::default();
    let running = common::start(Consumer::new(cfg, handled.clone()).unwrap());
    wait_until(Duration::from_secs(60), "records 60..100 handled", || {
        handled.0.lock().unwrap().len() >= 40
    })
    .await;
    running.stop().await;

    let got: Vec<i64> = handled.0.lock().unwrap().iter().copied().collect();
    assert_eq!(got, (60..100).collect::<Vec<_>>());
    assert_eq!(
        counter("orderly_offset_reset_skipped_records_total", &topic),
        50
    );
    let errors = log_lines_with(&topic);
    assert!(
        errors.iter().any(|l| l.contains("ERROR")
            && l.contains("skipped_from=10")
            && l.contains("skipped_to=60")),
        "no error log naming the skipped range: {errors:?}"
    );
}

/// `Latest`: the group's policy also governs the out-of-range reset. The position moves to the log
/// end 100 (not to the log start, as the fetcher did before whatever the group said); 10..100 are
/// reported; only records produced afterwards are handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latest_reset_after_truncation_follows_the_group_policy() {
    let (topic, dlq, group, pool) = truncated_below_commit("reset-latest").await;
    let mut cfg = config(broker().bootstrap(), &group, &topic, &dlq);
    cfg.group.auto_offset_reset = AutoOffsetReset::Latest;
    let handled = Offsets::default();
    let running = common::start(Consumer::new(cfg, handled.clone()).unwrap());
    wait_until(Duration::from_secs(60), "the reset", || {
        counter("orderly_offset_resets_total", &topic) >= 1 || !handled.0.lock().unwrap().is_empty()
    })
    .await;
    produce(&pool, &topic, 100, 5).await;
    // Every new record, not just the last: records of different sessions finish in any order.
    wait_until(Duration::from_secs(60), "the new records handled", || {
        let h = handled.0.lock().unwrap();
        (100..105).all(|o| h.contains(&o)) || h.len() >= 45
    })
    .await;
    running.stop().await;

    let got: Vec<i64> = handled.0.lock().unwrap().iter().copied().collect();
    assert_eq!(got, (100..105).collect::<Vec<_>>());
    assert_eq!(
        counter("orderly_offset_reset_skipped_records_total", &topic),
        90
    );
}

/// A committed position beyond the log end (what an unclean leader election leaves behind: the
/// log was cut below it). The position moves to the log end 100, and the records that will be
/// written at 100..500 are reported as skipped: the engine has already passed those offsets (its
/// commit point is 500) and drops them as seen. They are reported, not handled; handling them
/// would need the engine to rewind a partition's tracker. Before the fix the fetcher moved to the
/// log start without a word, and the engine dropped everything below 500 silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_beyond_the_log_end_reports_the_offsets_it_will_skip() {
    let b = broker();
    captured();
    let topic = b.topic("reset-beyond", 1).await.unwrap();
    let dlq = b.topic("reset-beyond-dlq", 1).await.unwrap();
    let pool = ConnectionPool::new(vec![b.bootstrap().to_string()], ConnectionConfig::default());
    produce(&pool, &topic.name, 0, 100).await;
    let group = b.unique_topic("reset-beyond-group");
    commit(&pool, &group, &topic.name, 500).await;

    let mut cfg = config(b.bootstrap(), &group, &topic.name, &dlq.name);
    cfg.group.auto_offset_reset = AutoOffsetReset::Earliest;
    let handled = Offsets::default();
    let running = common::start(Consumer::new(cfg, handled.clone()).unwrap());
    wait_until(Duration::from_secs(60), "the reset", || {
        counter("orderly_offset_resets_total", &topic.name) >= 1
    })
    .await;
    running.stop().await;

    assert_eq!(
        counter("orderly_offset_reset_skipped_records_total", &topic.name),
        400
    );
    let lines = log_lines_with(&topic.name);
    assert!(
        lines.iter().any(|l| l.contains("ERROR")
            && l.contains("skipped_from=100")
            && l.contains("skipped_to=500")),
        "no error log naming the skipped range: {lines:?}"
    );
    assert!(handled.0.lock().unwrap().is_empty());
}
