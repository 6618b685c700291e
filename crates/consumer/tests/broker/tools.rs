//! The operator tools as a library user calls them, without the CLI, against the real broker:
//! produce the generated session workload with `Batcher`, replay dead letters in source order with
//! markers (a second replay needs `force`), and read a group's status after a consumer committed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use orderly_consumer::tools::MetadataCache;
use orderly_consumer::tools::dlq::{
    LetterFilter, MARKER, REPLAYED_FROM, ReplayOptions, read_dead_letters, replay,
};
use orderly_consumer::tools::produce::{Batcher, SessionWorkload, read_topic};
use orderly_consumer::tools::status::group_status;
use orderly_consumer::{Consumer, ConsumerConfig};
use orderly_engine::{Attempt, Handler, HandlerError, Record};
use orderly_protocol::{ConnectionConfig, ConnectionPool, ProduceRecord, WireHeader};

#[derive(Clone, Default)]
struct Count(Arc<Mutex<usize>>);

impl Handler for Count {
    async fn handle(&self, _record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        *self.0.lock().unwrap() += 1;
        Ok(())
    }
}

fn letter(source: &str, partition: i32, offset: i64, session: &str) -> ProduceRecord {
    let h = |k: &str, v: String| WireHeader {
        key: k.into(),
        value: Some(Bytes::from(v)),
    };
    ProduceRecord {
        key: Some(Bytes::from(session.to_owned())),
        value: Some(Bytes::from(format!("value@{offset}"))),
        headers: vec![
            h("trace", "t".into()),
            h("orderly-dlq-topic", source.into()),
            h("orderly-dlq-partition", partition.to_string()),
            h("orderly-dlq-offset", offset.to_string()),
            h("orderly-dlq-reason", "permanent".into()),
            h("orderly-dlq-attempts", "1".into()),
        ],
        timestamp: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_replay_and_status_as_library_calls() {
    let b = orderly_testkit::broker();
    let topic = b.topic("tools", 2).await.unwrap();
    let dlq = format!("{}.dlq", topic.name);
    b.create_topic(&dlq, 1).await.unwrap();
    let pool = Arc::new(ConnectionPool::new(
        vec![b.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let cluster = MetadataCache::new(pool.clone(), vec![], Duration::from_secs(300));

    // The generated workload, batched and ordered per partition.
    let mut out = Batcher::new(pool.clone(), &cluster, &topic.name)
        .await
        .unwrap();
    let mut workload = SessionWorkload::new(4, "lib").unwrap();
    for _ in 0..30 {
        out.push(workload.next_record(1)).await.unwrap();
    }
    assert_eq!(out.finish().await.unwrap(), 30);
    let written = read_topic(&pool, &cluster, &topic.name).await.unwrap();
    assert_eq!(written.len(), 30);
    // Each session on one partition, its seq headers 1, 2, 3... in offset order.
    for s in 0..4 {
        let key = orderly_consumer::__private::synthetic::session_key(s);
        let recs: Vec<&(i32, orderly_protocol::FetchedRecord)> = written
            .iter()
            .filter(|(_, r)| r.key.as_deref() == Some(key.as_bytes()))
            .collect();
        assert!(recs.windows(2).all(|w| w[0].0 == w[1].0), "one partition");
        let seqs: Vec<String> = recs
            .iter()
            .map(|(_, r)| {
                let v = r.headers.iter().find(|h| h.key == "seq").unwrap();
                String::from_utf8(v.value.as_deref().unwrap().to_vec()).unwrap()
            })
            .collect();
        let want: Vec<String> = (1..=seqs.len()).map(|i| i.to_string()).collect();
        assert_eq!(seqs, want);
    }

    // Three dead letters, each session's in its order (as the consumer writes them); replay
    // puts each back on its source partition in that order.
    let mut letters = Batcher::new(pool.clone(), &cluster, &dlq).await.unwrap();
    for (p, o, s) in [(1, 3, "s-b"), (0, 5, "s-a"), (1, 9, "s-b")] {
        letters
            .push_to(0, letter(&topic.name, p, o, s))
            .await
            .unwrap();
    }
    letters.finish().await.unwrap();
    let all = LetterFilter::default();
    let read = read_dead_letters(&pool, &cluster, &dlq, &all)
        .await
        .unwrap();
    assert_eq!(read.len(), 3);
    assert!(read.iter().all(|l| !l.replayed));
    let only_b = LetterFilter {
        session: Some("s-b".into()),
        ..LetterFilter::default()
    };
    assert_eq!(
        read_dead_letters(&pool, &cluster, &dlq, &only_b)
            .await
            .unwrap()
            .len(),
        2
    );

    let once = ReplayOptions::default();
    let done = replay(&pool, &cluster, &dlq, &all, &once, |_| {})
        .await
        .unwrap();
    assert_eq!(done.replayed, 3);
    assert_eq!(done.topics, std::slice::from_ref(&topic.name));
    let after = read_topic(&pool, &cluster, &topic.name).await.unwrap();
    assert_eq!(after.len(), 33);
    let replayed: Vec<(i32, String)> = after
        .iter()
        .filter(|(_, r)| r.headers.iter().any(|h| h.key == REPLAYED_FROM))
        .map(|(p, r)| {
            assert!(
                !r.headers.iter().any(|h| h.key.starts_with("orderly-dlq-")),
                "no DLQ headers on a replayed record"
            );
            (
                *p,
                String::from_utf8(r.value.as_deref().unwrap().to_vec()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        replayed,
        [
            (0, "value@5".to_string()),
            (1, "value@3".to_string()),
            (1, "value@9".to_string())
        ],
        "each to its source partition, in source order"
    );
    // Marked: a second replay without force writes nothing; with force it does.
    let read = read_dead_letters(&pool, &cluster, &dlq, &all)
        .await
        .unwrap();
    assert_eq!(read.len(), 3, "markers are not letters");
    assert!(read.iter().all(|l| l.replayed));
    let dlq_records = read_topic(&pool, &cluster, &dlq).await.unwrap();
    assert_eq!(
        dlq_records
            .iter()
            .filter(|(_, r)| r.headers.iter().any(|h| h.key == MARKER))
            .count(),
        3
    );
    let again = replay(&pool, &cluster, &dlq, &all, &once, |_| {})
        .await
        .unwrap();
    assert_eq!((again.replayed, again.skipped_replayed_before), (0, 3));
    let force = ReplayOptions {
        force: true,
        ..ReplayOptions::default()
    };
    let forced = replay(&pool, &cluster, &dlq, &all, &force, |_| {})
        .await
        .unwrap();
    assert_eq!(forced.replayed, 3);
    assert_eq!(
        read_topic(&pool, &cluster, &topic.name)
            .await
            .unwrap()
            .len(),
        36
    );

    // A consumer handles everything and commits; the status shows no lag.
    let group = format!("{}-g", topic.name);
    let mut config = ConsumerConfig::new([b.bootstrap()], group.clone(), [&topic.name]);
    config.dlq_topic = dlq.clone();
    config.group.auto_offset_reset = orderly_group::AutoOffsetReset::Earliest;
    config.group.heartbeat_interval = Duration::from_millis(500);
    let seen = Count::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(
        Consumer::new(config, seen.clone())
            .unwrap()
            .run(async move {
                let _ = stopped.await;
            }),
    );
    let started = Instant::now();
    while *seen.0.lock().unwrap() < 36 {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "consumed too little"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.send(()).unwrap();
    run.await.unwrap().unwrap();
    let status = group_status(&pool, &cluster, &group).await.unwrap();
    assert_eq!(status.group, group);
    assert_eq!(status.state, "Empty", "the consumer left");
    assert_eq!(status.partitions.len(), 2);
    assert_eq!(status.total_lag, 0);
    assert_eq!(
        status.partitions.iter().map(|p| p.committed).sum::<i64>(),
        36
    );
    assert!(
        status
            .partitions
            .iter()
            .all(|p| p.committed == p.end && p.oldest_unfinished.is_none())
    );
}
