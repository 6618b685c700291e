//! The seed's synthetic test against the real broker, and a revoke in the middle of a run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Recording, config, fnv, produce_seed, verdict, wait_until};
use orderly_consumer::Consumer;
use orderly_engine::EngineStats;
use orderly_testkit::broker;

/// Lag per partition from Apache Kafka's own consumer-groups tool (an independent client).
async fn lags(bootstrap: &str, group: &str) -> Vec<i64> {
    let out = broker()
        .tool(
            "consumer-groups",
            &[
                "--bootstrap-server",
                bootstrap,
                "--describe",
                "--group",
                group,
            ],
        )
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // Columns: GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
    text.lines()
        .filter(|l| l.starts_with(group))
        .filter_map(|l| l.split_whitespace().nth(5).and_then(|v| v.parse().ok()))
        .collect()
}

fn expected_dead_letters(records: usize) -> usize {
    (0..records)
        .filter(|i| fnv(format!("e-{i}").as_bytes()) % 1000 == 999)
        .count()
}

/// 50,000 records, 10 sessions, 10 % transient failures (and 0.1 % permanent ones), 12
/// partitions: every record handled exactly once in session order, the permanent failures in the
/// DLQ, and the committed offsets (read back by Kafka's own tool) at the log end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_synthetic_test_has_no_ordering_violations_and_loses_nothing() {
    const RECORDS: usize = 50_000;
    let b = broker();
    let topic = b.topic("seed", 12).await.unwrap();
    let dlq = b.topic("seed-dlq", 3).await.unwrap();
    produce_seed(b.bootstrap(), &topic.name, 12, RECORDS, 10).await;
    let group = b.unique_topic("seed-group");

    let log = Arc::new(Mutex::new(Vec::new()));
    let handler = Recording {
        id: 1,
        log: log.clone(),
        work: Duration::ZERO,
    };
    let mut cfg = config(b.bootstrap(), &group, &topic.name, &dlq.name);
    cfg.engine.seq_header = Some("seq".into());
    let consumer = Consumer::new(cfg, handler).unwrap();
    let stats: EngineStats = consumer.stats();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run(async move {
        let _ = stop_rx.await;
    }));

    let dead = expected_dead_letters(RECORDS);
    let t0 = Instant::now();
    wait_until(Duration::from_secs(120), "all records terminal", || {
        stats.handled() + stats.dead_lettered() >= RECORDS as u64
    })
    .await;
    let elapsed = t0.elapsed();
    stop_tx.send(()).unwrap();
    let final_stats = run.await.unwrap().unwrap();

    let v = verdict(&log.lock().unwrap());
    assert!(
        v.violations.is_empty(),
        "ordering violations: {:?}",
        &v.violations[..v.violations.len().min(5)]
    );
    assert_eq!(v.distinct, RECORDS, "every record started");
    assert_eq!(v.replays, 0, "nothing handled twice without a crash");
    assert_eq!(
        final_stats.ordering_violations(),
        0,
        "the engine's own seq checker agrees"
    );
    assert_eq!(final_stats.handled() as usize, RECORDS - dead);
    assert_eq!(final_stats.dead_lettered() as usize, dead);
    assert!(final_stats.retried() > 0, "transient failures were retried");

    // The dead letters are in the DLQ topic, acknowledged by the broker.
    let out = b
        .tool(
            "get-offsets",
            &[
                "--bootstrap-server",
                b.bootstrap(),
                "--topic",
                &dlq.name,
                "--time",
                "-1",
            ],
        )
        .await
        .unwrap();
    let in_dlq: i64 = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            l.rsplit(':')
                .next()
                .and_then(|v| v.trim().parse::<i64>().ok())
        })
        .sum();
    assert_eq!(
        in_dlq as usize, dead,
        "DLQ holds exactly the permanent failures"
    );

    // Committed offsets are at the log end on every partition: nothing left to redo.
    let l = lags(b.bootstrap(), &group).await;
    assert_eq!(
        l.len(),
        12,
        "a commit on every assigned partition, with records or not"
    );
    assert!(l.iter().all(|&x| x == 0), "lag after the run: {l:?}");
    eprintln!(
        "seed test: {RECORDS} records in {elapsed:.2?} ({:.0} records/s), {} retried, {dead} dead-lettered",
        RECORDS as f64 / elapsed.as_secs_f64(),
        final_stats.retried()
    );
}

/// Two consumers: the second joins in the middle of the first one's run, so the first must hand
/// partitions over (revoke: drain, commit, release). Every record is handled, order per session
/// holds across the handover, and only records above the committed watermark may be replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_in_the_middle_of_a_run_loses_nothing() {
    const RECORDS: usize = 20_000;
    let b = broker();
    let topic = b.topic("revoke", 12).await.unwrap();
    let dlq = b.topic("revoke-dlq", 3).await.unwrap();
    produce_seed(b.bootstrap(), &topic.name, 12, RECORDS, 24).await;
    let group = b.unique_topic("revoke-group");
    let log = Arc::new(Mutex::new(Vec::new()));

    let spawn = |id: u32| {
        let handler = Recording {
            id,
            log: log.clone(),
            work: Duration::from_millis(10),
        };
        let consumer = Consumer::new(
            config(b.bootstrap(), &group, &topic.name, &dlq.name),
            handler,
        )
        .unwrap();
        common::start(consumer)
    };

    let run1 = spawn(1);
    let s1 = run1.stats.clone();
    wait_until(Duration::from_secs(60), "first consumer under way", || {
        s1.handled() > 2_000
    })
    .await;
    assert!(
        s1.handled() < RECORDS as u64 / 2,
        "the first consumer must still be mid-run"
    );
    let run2 = spawn(2);
    let s2 = run2.stats.clone();

    let dead = expected_dead_letters(RECORDS) as u64;
    let distinct = || verdict(&log.lock().unwrap()).distinct;
    wait_until(Duration::from_secs(120), "every record handled", || {
        distinct() >= RECORDS
    })
    .await;
    assert!(s2.handled() > 0, "the second consumer took over partitions");
    let (r2, r1) = (run2.stop().await, run1.stop().await);

    let v = verdict(&log.lock().unwrap());
    assert!(
        v.violations.is_empty(),
        "ordering violations: {:?}",
        &v.violations[..v.violations.len().min(5)]
    );
    assert_eq!(v.distinct, RECORDS, "nothing lost");
    assert!(
        r1.dead_lettered() + r2.dead_lettered() >= dead,
        "every permanent failure dead-lettered"
    );
    let l = lags(b.bootstrap(), &group).await;
    assert!(l.iter().all(|&x| x == 0), "lag after both stopped: {l:?}");
    eprintln!(
        "revoke test: consumer 1 handled {}, consumer 2 handled {}, replays {}",
        r1.handled(),
        r2.handled(),
        v.replays
    );
}

/// Two processes with one static instance id: the broker fences the older one, whose `run`
/// returns a clear error instead of hanging or consuming on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_static_member_stops_with_a_clear_error() {
    let b = broker();
    let topic = b.topic("fenced", 2).await.unwrap();
    let dlq = b.topic("fenced-dlq", 1).await.unwrap();
    produce_seed(b.bootstrap(), &topic.name, 2, 100, 4).await;
    let group = b.unique_topic("fenced-group");
    let log = Arc::new(Mutex::new(Vec::new()));
    let spawn = |id: u32| {
        let mut cfg = config(b.bootstrap(), &group, &topic.name, &dlq.name);
        cfg.group.instance_id = Some("the-only-instance".into());
        let handler = Recording {
            id,
            log: log.clone(),
            work: Duration::ZERO,
        };
        let consumer = Consumer::new(cfg, handler).unwrap();
        common::start(consumer)
    };
    let run1 = spawn(1);
    let s1 = run1.stats.clone();
    wait_until(Duration::from_secs(60), "first member consuming", || {
        s1.handled() > 0
    })
    .await;
    let run2 = spawn(2);
    let err = tokio::time::timeout(Duration::from_secs(60), run1.task)
        .await
        .expect("the fenced member stops within a minute")
        .unwrap()
        .expect_err("the fenced member reports an error");
    let text = err.to_string();
    eprintln!("fenced member error: {text}");
    assert!(
        text.to_lowercase().contains("fenced"),
        "error names the fencing: {text}"
    );
    run2.stop().await;
}

/// Holds every record until the gate opens, then behaves like [`Recording`].
struct Gated {
    inner: Recording,
    gate: tokio::sync::watch::Receiver<bool>,
}

impl orderly_engine::Handler for Gated {
    async fn handle(
        &self,
        record: &orderly_engine::Record,
        attempt: orderly_engine::Attempt,
    ) -> Result<(), orderly_engine::HandlerError> {
        let mut gate = self.gate.clone();
        let _ = gate.wait_for(|open| *open).await;
        self.inner.handle(record, attempt).await
    }
}

/// A tiny per-partition byte budget while the handler is held: the partition is paused (nothing
/// dropped), its lag keeps up with records produced while it is paused (read by polling, since a
/// paused partition is not fetched), and once the handler runs everything is handled in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_budget_pauses_fetching_keeps_lag_current_and_loses_nothing() {
    let b = broker();
    let topic = b.topic("budget", 1).await.unwrap();
    let dlq = b.topic("budget-dlq", 1).await.unwrap();
    produce_seed(b.bootstrap(), &topic.name, 1, 300, 5).await;
    let group = b.unique_topic("budget-group");
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut cfg = config(b.bootstrap(), &group, &topic.name, &dlq.name);
    cfg.engine.partition_budget_bytes = 4096;
    // The second seed run reuses event ids; dedup must not hide its records.
    cfg.engine.event_id_header = None;
    cfg.fetch.paused_lag_interval = Duration::from_millis(100);
    let (open, gate) = tokio::sync::watch::channel(false);
    let handler = Gated {
        inner: Recording {
            id: 1,
            log: log.clone(),
            work: Duration::ZERO,
        },
        gate,
    };
    let consumer = Consumer::new(cfg, handler).unwrap();
    let run = common::start(consumer);
    let stats = run.stats.clone();

    let paused = || stats.partitions().first().is_some_and(|p| p.paused);
    wait_until(
        Duration::from_secs(60),
        "the partition paused by its budget",
        paused,
    )
    .await;
    // Let a fetch that was already in flight when the pause came (a long poll of up to 500 ms)
    // end, so that from now on only the paused-partition polling can learn the high watermark.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(paused(), "still paused");
    // More records arrive while the partition is paused: its lag must show them.
    produce_seed(b.bootstrap(), &topic.name, 1, 300, 5).await;
    wait_until(Duration::from_secs(30), "lag visible while paused", || {
        stats
            .partitions()
            .first()
            .is_some_and(|p| p.paused && p.high_watermark == Some(600))
    })
    .await;
    assert_eq!(stats.handled(), 0, "the handler was held the whole time");
    open.send(true).unwrap();
    wait_until(Duration::from_secs(120), "every record handled", || {
        stats.handled() + stats.dead_lettered() >= 600
    })
    .await;
    run.stop().await;

    // The second batch is a second seed run: seq 1..=60 again per session. So each session must
    // have started exactly 1..=60 and then 1..=60 again, in that order.
    let log = log.lock().unwrap();
    let expected: Vec<u64> = (1..=60).chain(1..=60).collect();
    for s in 0..5 {
        let key = format!("s-{s:06}");
        let seen: Vec<u64> = log
            .iter()
            .filter(|e| e.attempt == 1 && !e.end && e.session == key)
            .map(|e| e.seq)
            .collect();
        assert_eq!(
            seen, expected,
            "session {key}: records lost, repeated or reordered"
        );
    }
}

/// Blocks its thread on the first call until the fetch hook has seen every record (or `limit`
/// passed), and notes how many it had seen then; later calls just succeed.
struct BlockUntilFetched {
    fetched: Arc<std::sync::atomic::AtomicUsize>,
    want: usize,
    limit: Duration,
    seen_when_released: Arc<Mutex<Option<usize>>>,
}

impl orderly_engine::Handler for BlockUntilFetched {
    async fn handle(
        &self,
        _record: &orderly_engine::Record,
        _attempt: orderly_engine::Attempt,
    ) -> Result<(), orderly_engine::HandlerError> {
        let mut released = self.seen_when_released.lock().unwrap();
        if released.is_none() {
            let t0 = Instant::now();
            let load = || self.fetched.load(std::sync::atomic::Ordering::SeqCst);
            // Blocking on purpose: this handler holds its runtime's only thread.
            while load() < self.want && t0.elapsed() < self.limit {
                std::thread::sleep(Duration::from_millis(5));
            }
            *released = Some(load());
        }
        Ok(())
    }
}

/// The fetch loop does not share the handlers' runtime: on a current-thread runtime whose only
/// thread a handler blocks, the records still arrive (read, decoded and handed over by the
/// `orderly-fetch` thread). When fetching ran as a task of the caller's runtime, nothing was read
/// while the handler held the thread, and the handler gave up after 30 s having seen only the
/// first response's records.
#[tokio::test(flavor = "current_thread")]
async fn fetching_goes_on_while_a_handler_blocks_the_runtime_thread() {
    const RECORDS: usize = 3_000;
    let b = broker();
    let topic = b.topic("fetch-thread", 3).await.unwrap();
    let dlq = b.topic("fetch-thread-dlq", 1).await.unwrap();
    produce_seed(b.bootstrap(), &topic.name, 3, RECORDS, 10).await;
    let group = b.unique_topic("fetch-thread-group");

    let fetched = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut cfg = config(b.bootstrap(), &group, &topic.name, &dlq.name);
    // Small responses: the first one cannot hold every record, so the rest must be fetched while
    // the handler blocks.
    cfg.fetch.partition_max_bytes = 16 * 1024;
    let counter = fetched.clone();
    cfg.fetch.prepare = Some(orderly_consumer::RecordHook(Arc::new(move |_| {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    })));
    let seen = Arc::new(Mutex::new(None));
    let handler = BlockUntilFetched {
        fetched: fetched.clone(),
        want: RECORDS,
        limit: Duration::from_secs(30),
        seen_when_released: seen.clone(),
    };
    let consumer = Consumer::new(cfg, handler).unwrap();
    let stats = consumer.stats();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(consumer.run(async move {
        let _ = stop_rx.await;
    }));
    wait_until(Duration::from_secs(120), "all records handled", || {
        stats.handled() >= RECORDS as u64
    })
    .await;
    stop_tx.send(()).unwrap();
    run.await.unwrap().unwrap();
    let seen = seen.lock().unwrap().expect("the handler ran");
    assert_eq!(
        seen, RECORDS,
        "records fetched while the handler blocked the runtime's thread"
    );
    assert_eq!(stats.handled(), RECORDS as u64);
}
