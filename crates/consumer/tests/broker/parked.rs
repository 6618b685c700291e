//! Parked sessions (`DlqMode::ParkSession`) across a restart, and their release by an ordered
//! replay, against the real broker.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use orderly_consumer::tools::MetadataCache;
use orderly_consumer::tools::dlq::{
    LetterFilter, RoundResult, read_dead_letters, replay_parked_session, wait_for_round,
};
use orderly_consumer::tools::produce::Batcher;
use orderly_consumer::{Consumer, ConsumerConfig};
use orderly_engine::{Attempt, DlqMode, Handler, HandlerError, Record, TopicPartition};
use orderly_protocol::{ConnectionConfig, ConnectionPool, ProduceRecord};

/// Records the values it handles; a value containing `bad` fails permanently while
/// `fail_bad` is set.
#[derive(Clone, Default)]
struct Log {
    seen: Arc<Mutex<Vec<String>>>,
    fail_bad: bool,
}

impl Handler for Log {
    async fn handle(&self, record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        let v = String::from_utf8_lossy(record.value.as_deref().unwrap_or_default()).into_owned();
        if self.fail_bad && v.contains("bad") {
            return Err(HandlerError::permanent("bad input"));
        }
        self.seen.lock().unwrap().push(v);
        Ok(())
    }
}

impl Log {
    /// The values of one session (they start with its name) in the order handled.
    fn session(&self, s: &str) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|v| v.starts_with(s)).cloned().collect()
    }
}

fn rec(session: &str, value: &str) -> ProduceRecord {
    ProduceRecord {
        key: Some(Bytes::from(session.to_owned())),
        value: Some(Bytes::from(value.to_owned())),
        headers: vec![],
        timestamp: None,
    }
}

struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task:
        tokio::task::JoinHandle<Result<orderly_engine::EngineStats, orderly_consumer::DriverError>>,
}

impl Running {
    async fn stop(self) {
        self.stop.send(()).unwrap();
        self.task.await.unwrap().unwrap();
    }
}

fn start(bootstrap: &str, group: &str, topic: &str, dlq: &str, handler: Log) -> Running {
    let mut config = ConsumerConfig::new([bootstrap], group, [topic]);
    config.dlq_topic = dlq.to_owned();
    config.group.auto_offset_reset = orderly_group::AutoOffsetReset::Earliest;
    config.group.heartbeat_interval = Duration::from_millis(500);
    config.engine.dlq_mode = DlqMode::ParkSession;
    config.engine.commit_interval = Duration::from_millis(200);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(Consumer::new(config, handler).unwrap().run(async move {
        let _ = stopped.await;
    }));
    Running { stop, task }
}

async fn wait_for(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let started = Instant::now();
    while !cond().await {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Letters of the DLQ as `(source offset, reason)`.
async fn letters(
    pool: &Arc<ConnectionPool>,
    cluster: &MetadataCache,
    dlq: &str,
) -> Vec<(i64, String)> {
    read_dead_letters(pool, cluster, dlq, &LetterFilter::default())
        .await
        .unwrap()
        .into_iter()
        .map(|l| (l.source_offset, l.reason))
        .collect()
}

/// A session parked by one consumer stays parked for the next one: after a restart (a new
/// engine), a later record of the session is dead-lettered as `parked`, not handled, while
/// another session goes on. Then a release by replay rounds hands the session's records to the
/// handler in their order, a record that arrived before the round but after the replay read the
/// DLQ included (it is parked behind the round, and the next round replays it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_session_stays_parked_after_a_restart_and_is_released_in_order() {
    let b = orderly_testkit::broker();
    let topic = b.topic("parked-restart", 1).await.unwrap();
    let dlq = format!("{}.dlq", topic.name);
    b.create_topic(&dlq, 1).await.unwrap();
    let group = format!("{}-g", topic.name);
    let pool = Arc::new(ConnectionPool::new(
        vec![b.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let cluster = MetadataCache::new(pool.clone(), vec![], Duration::from_secs(300));
    let produce = async |records: Vec<ProduceRecord>| {
        let mut out = Batcher::new(pool.clone(), &cluster, &topic.name)
            .await
            .unwrap();
        for r in records {
            out.push(r).await.unwrap();
        }
        out.finish().await.unwrap();
    };

    // s:1 handled, s:2 fails permanently and parks s, s:3 follows it as `parked`.
    produce(vec![
        rec("s", "s1"),
        rec("s", "s2bad"),
        rec("s", "s3"),
        rec("o", "o1"),
    ])
    .await;
    let first = Log {
        fail_bad: true,
        ..Log::default()
    };
    let run = start(b.bootstrap(), &group, &topic.name, &dlq, first.clone());
    wait_for("the first two dead letters", async || {
        letters(&pool, &cluster, &dlq).await.len() == 2
    })
    .await;
    wait_for("o1", async || {
        first.seen.lock().unwrap().contains(&"o1".to_owned())
    })
    .await;
    run.stop().await;
    assert_eq!(first.session("s"), ["s1"]);
    assert_eq!(
        letters(&pool, &cluster, &dlq).await,
        [(1, "permanent".to_owned()), (2, "parked".to_owned())]
    );

    // A new consumer (a new engine: nothing shared in memory) sees s:4 and o:2.
    let second = Log::default();
    let run = start(b.bootstrap(), &group, &topic.name, &dlq, second.clone());
    produce(vec![rec("s", "s4"), rec("o", "o2")]).await;
    wait_for("o2", async || {
        second.seen.lock().unwrap().contains(&"o2".to_owned())
    })
    .await;
    wait_for("s4 in some terminal state", async || {
        letters(&pool, &cluster, &dlq).await.len() == 3
            || second.seen.lock().unwrap().contains(&"s4".to_owned())
    })
    .await;
    assert_eq!(
        second.session("s"),
        Vec::<String>::new(),
        "s4 must not be handled"
    );
    assert_eq!(
        letters(&pool, &cluster, &dlq).await[2],
        (4, "parked".to_owned())
    );
    run.stop().await;

    // While no consumer runs, s:5 arrives; then the first round is replayed: the replay read
    // the DLQ without s:5, and its records land behind s:5 in the partition.
    produce(vec![rec("s", "s5")]).await;
    let parked_topic = format!("{dlq}.parked");
    let tp = TopicPartition::new(topic.name.as_str(), 0);
    let round1 = replay_parked_session(&pool, &cluster, &dlq, &parked_topic, &tp, "s")
        .await
        .unwrap();
    assert_eq!(round1.parked.since_offset, 1);
    assert_eq!(round1.origins, [1, 2, 4]);
    let third = Log::default();
    let run = start(b.bootstrap(), &group, &topic.name, &dlq, third.clone());
    let wait = Duration::from_secs(120);
    assert_eq!(
        wait_for_round(&pool, &cluster, &parked_topic, &round1, wait)
            .await
            .unwrap(),
        RoundResult::ParkedBehind(5),
        "s:5 (offset 6) was parked behind the round"
    );
    assert_eq!(third.session("s"), ["s2bad", "s3", "s4"]);
    let round2 = replay_parked_session(&pool, &cluster, &dlq, &parked_topic, &tp, "s")
        .await
        .unwrap();
    assert_eq!(round2.origins, [6]);
    assert_eq!(
        wait_for_round(&pool, &cluster, &parked_topic, &round2, wait)
            .await
            .unwrap(),
        RoundResult::Released
    );
    produce(vec![rec("s", "s6")]).await;
    wait_for("s6", async || third.session("s").len() == 5).await;
    assert_eq!(third.session("s"), ["s2bad", "s3", "s4", "s5", "s6"]);
    run.stop().await;
}

/// A rebalance moves the partition of a parked session to a member that was already running:
/// the new owner loads the parked set when the partition is assigned to it and parks the
/// session's next record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_session_stays_parked_on_the_member_a_rebalance_hands_it_to() {
    let b = orderly_testkit::broker();
    let topic = b.topic("parked-rebalance", 1).await.unwrap();
    let dlq = format!("{}.dlq", topic.name);
    b.create_topic(&dlq, 1).await.unwrap();
    let group = format!("{}-g", topic.name);
    let pool = Arc::new(ConnectionPool::new(
        vec![b.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let cluster = MetadataCache::new(pool.clone(), vec![], Duration::from_secs(300));
    let produce = async |records: Vec<ProduceRecord>| {
        let mut out = Batcher::new(pool.clone(), &cluster, &topic.name)
            .await
            .unwrap();
        for r in records {
            out.push(r).await.unwrap();
        }
        out.finish().await.unwrap();
    };
    produce(vec![rec("s", "s1"), rec("s", "s2bad"), rec("s", "s3")]).await;
    let first = Log {
        fail_bad: true,
        ..Log::default()
    };
    let a = start(b.bootstrap(), &group, &topic.name, &dlq, first.clone());
    wait_for("the first two dead letters", async || {
        letters(&pool, &cluster, &dlq).await.len() == 2
    })
    .await;
    // B joins (a rebalance), then A leaves (another one): B owns the partition in the end.
    let second = Log::default();
    let b2 = start(b.bootstrap(), &group, &topic.name, &dlq, second.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.stop().await;
    produce(vec![rec("s", "s4"), rec("o", "o1")]).await;
    wait_for("o1", async || second.session("o") == ["o1"]).await;
    wait_for("s4 in some terminal state", async || {
        letters(&pool, &cluster, &dlq).await.len() == 3 || !second.session("s").is_empty()
    })
    .await;
    assert!(second.session("s").is_empty(), "s4 must not be handled");
    assert_eq!(
        letters(&pool, &cluster, &dlq).await[2],
        (3, "parked".to_owned())
    );
    assert_eq!(first.session("s"), ["s1"]);
    b2.stop().await;
}
