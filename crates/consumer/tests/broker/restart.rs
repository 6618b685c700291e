//! Restarts against the real broker: completed offsets above the watermark survive a restart in the
//! commit metadata, and a crash (no drain, no commit, no LeaveGroup) loses nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Recording, Seen, config, produce_seed, verdict, wait_until};
use orderly_consumer::Consumer;
use orderly_engine::{Attempt, Handler, HandlerError, Record};
use orderly_testkit::broker;

/// Session `s-000000` never finishes on the first consumer (its handler hangs), so the partition's
/// watermark stays at its first record while every other session completes.
struct HangsOnFirstSession {
    inner: Recording,
}

impl Handler for HangsOnFirstSession {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        if record.key.as_deref() == Some(b"s-000000".as_slice()) {
            std::future::pending::<()>().await;
        }
        self.inner.handle(record, attempt).await
    }
}

/// The first consumer finishes everything but one session's records, then shuts down (its drain
/// cancels the hanging record). The commit stays at that session's first offset, and the metadata
/// lists the completed offsets above it. The second consumer of the group handles exactly the
/// unfinished session's records: none of the completed ones again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_offsets_above_the_watermark_are_not_redone_after_a_restart() {
    const RECORDS: usize = 400;
    let b = broker();
    let topic = b.topic("metadata", 1).await.unwrap();
    let dlq = b.topic("metadata-dlq", 1).await.unwrap();
    produce_seed(b.bootstrap(), &topic.name, 1, RECORDS, 4).await;
    let group = b.unique_topic("metadata-group");
    let log: Arc<Mutex<Vec<Seen>>> = Arc::new(Mutex::new(Vec::new()));

    let mut cfg = config(b.bootstrap(), &group, &topic.name, &dlq.name);
    cfg.engine.drain_timeout = Duration::from_millis(300);
    let first = Consumer::new(
        cfg,
        HangsOnFirstSession {
            inner: Recording {
                id: 1,
                log: log.clone(),
                work: Duration::ZERO,
            },
        },
    )
    .unwrap();
    let run = common::start(first);
    let stats = run.stats.clone();
    // 3 of 4 sessions complete: 300 records (the transient failures are retried).
    wait_until(Duration::from_secs(60), "three sessions done", || {
        stats.handled() >= 300
    })
    .await;
    run.stop().await;
    let done_by_first = log.lock().unwrap().len();

    let second = Consumer::new(
        config(b.bootstrap(), &group, &topic.name, &dlq.name),
        Recording {
            id: 2,
            log: log.clone(),
            work: Duration::ZERO,
        },
    )
    .unwrap();
    let run2 = common::start(second);
    let stats2 = run2.stats.clone();
    wait_until(
        Duration::from_secs(60),
        "the unfinished session handled",
        || stats2.handled() >= 100,
    )
    .await;
    // Give a wrongly replayed record the chance to show up before stopping.
    tokio::time::sleep(Duration::from_millis(500)).await;
    run2.stop().await;

    let log = log.lock().unwrap();
    let by_second: Vec<&Seen> = log[done_by_first..]
        .iter()
        .filter(|s| s.attempt == 1 && !s.end)
        .collect();
    assert!(
        by_second.iter().all(|s| s.session == "s-000000"),
        "the restarted consumer redid completed records: {:?}",
        by_second
            .iter()
            .filter(|s| s.session != "s-000000")
            .take(5)
            .collect::<Vec<_>>()
    );
    assert_eq!(
        by_second.len(),
        100,
        "exactly the unfinished session's 100 records"
    );
    let v = verdict(&log);
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert_eq!(v.distinct, RECORDS);
}

/// A consumer stops abruptly in the middle of a run: its `run` future is dropped (no drain, no
/// final commit) and, being a static member, it sends no LeaveGroup, so the broker notices only
/// when its session times out, as after a crash. A second consumer then takes over from the last
/// committed watermark: nothing is lost, order holds, and only records above that watermark are
/// replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_in_the_middle_of_a_run_loses_nothing() {
    const RECORDS: usize = 10_000;
    let b = broker();
    let topic = b.topic("crash", 4).await.unwrap();
    let dlq = b.topic("crash-dlq", 1).await.unwrap();
    produce_seed(b.bootstrap(), &topic.name, 4, RECORDS, 20).await;
    let group = b.unique_topic("crash-group");
    let log: Arc<Mutex<Vec<Seen>>> = Arc::new(Mutex::new(Vec::new()));

    let mut crashing = config(b.bootstrap(), &group, &topic.name, &dlq.name);
    crashing.group.instance_id = Some("crashes".into());
    crashing.group.session_timeout = Duration::from_secs(3);
    crashing.group.heartbeat_interval = Duration::from_millis(300);
    let first = Consumer::new(
        crashing,
        Recording {
            id: 1,
            log: log.clone(),
            work: Duration::from_millis(5),
        },
    )
    .unwrap();
    let stats = first.stats();
    let run = tokio::spawn(first.run(std::future::pending::<()>()));
    wait_until(Duration::from_secs(60), "first consumer under way", || {
        stats.handled() > 2_000
    })
    .await;
    run.abort();
    let _ = run.await;
    let crashed_at = Instant::now();

    let second = Consumer::new(
        config(b.bootstrap(), &group, &topic.name, &dlq.name),
        Recording {
            id: 2,
            log: log.clone(),
            work: Duration::ZERO,
        },
    )
    .unwrap();
    let run2 = common::start(second);
    let stats2 = run2.stats.clone();
    let distinct = || verdict(&log.lock().unwrap()).distinct;
    wait_until(
        Duration::from_secs(90),
        "every record handled after the crash",
        || distinct() >= RECORDS,
    )
    .await;
    let took_over_after = crashed_at.elapsed();
    assert!(stats2.handled() > 0, "the second consumer took over");
    run2.stop().await;

    let v = verdict(&log.lock().unwrap());
    assert!(
        v.violations.is_empty(),
        "{:?}",
        &v.violations[..v.violations.len().min(5)]
    );
    assert_eq!(v.distinct, RECORDS, "nothing lost");
    assert!(
        took_over_after >= Duration::from_secs(2),
        "the partitions moved only after the session timeout ({took_over_after:?})"
    );
    // With a 100 ms commit interval, replays are bounded by what finished after the last commit.
    assert!(v.replays < RECORDS / 2, "replays: {}", v.replays);
    eprintln!(
        "crash test: {} replays after the crash, all records handled {took_over_after:.2?} after it",
        v.replays
    );
}

/// The broker itself is restarted in the middle of a run (a private broker, so other tests are not
/// disturbed). Fetch and group connections break, the consumer reconnects, rejoins and carries on:
/// nothing is lost and order per session holds; records above the last commit may be replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_in_the_middle_of_a_run_loses_nothing() {
    const RECORDS: usize = 20_000;
    let mut kafka = orderly_testkit::DedicatedBroker::start().unwrap();
    let bs = kafka.bootstrap().to_string();
    let topic = format!("restart-{}", std::process::id());
    let dlq = format!("{topic}.dlq");
    orderly_testkit::create_topic(&bs, &topic, 4).await.unwrap();
    orderly_testkit::create_topic(&bs, &dlq, 1).await.unwrap();
    produce_seed(&bs, &topic, 4, RECORDS, 20).await;
    let log: Arc<Mutex<Vec<Seen>>> = Arc::new(Mutex::new(Vec::new()));

    let mut cfg = config(&bs, "restart-group", &topic, &dlq);
    cfg.group.session_timeout = Duration::from_secs(10);
    cfg.group.heartbeat_interval = Duration::from_secs(1);
    // A small budget keeps most records in the broker, so the run cannot finish from its buffers
    // while the broker is down.
    cfg.engine.partition_budget_bytes = 64 * 1024;
    let consumer = Consumer::new(
        cfg,
        Recording {
            id: 1,
            log: log.clone(),
            work: Duration::from_millis(5),
        },
    )
    .unwrap();
    let run = common::start(consumer);
    let stats = run.stats.clone();
    wait_until(Duration::from_secs(60), "consumer under way", || {
        stats.handled() > 3_000
    })
    .await;
    let before = stats.handled();
    // Stop and start the broker on the same port and data (blocking: run it off the runtime).
    let restarted = tokio::task::spawn_blocking(move || kafka.restart().map(|()| kafka))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("broker restart failed: {e}"));
    assert!(
        stats.handled() < RECORDS as u64,
        "the run was still going when the broker came back"
    );
    let distinct = || verdict(&log.lock().unwrap()).distinct;
    wait_until(
        Duration::from_secs(180),
        "every record handled after the restart",
        || distinct() >= RECORDS,
    )
    .await;
    run.stop().await;
    drop(restarted);

    let v = verdict(&log.lock().unwrap());
    assert!(
        v.violations.is_empty(),
        "{:?}",
        &v.violations[..v.violations.len().min(5)]
    );
    assert_eq!(v.distinct, RECORDS, "nothing lost");
    eprintln!(
        "broker restart test: {before} handled before the restart, {} replays after it",
        v.replays
    );
}
