//! `KafkaReplies` against the real broker: the default topic and the session id as the default
//! key (so a session's replies share one partition, in order, while many sessions write at
//! once), a reply's own topic and key, and a reply with no topic at all refused, not retried.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use orderly_consumer::__private::KafkaReplies;
use orderly_consumer::tools::MetadataCache;
use orderly_consumer::tools::produce::read_topic;
use orderly_engine::{Header, Record, Reply, ReplyError, ReplySink, TopicPartition};
use orderly_protocol::partitioner::partition_for_key;
use orderly_protocol::{ConnectionConfig, ConnectionPool, Producer, ProducerConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_are_keyed_by_session_and_written_in_order() {
    let b = orderly_testkit::broker();
    let out = b.topic("replies-out", 3).await.unwrap().name.clone();
    let other = b.topic("replies-other", 1).await.unwrap().name.clone();
    let pool = Arc::new(ConnectionPool::new(
        vec![b.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let sink = KafkaReplies::new(
        Producer::new(pool.clone(), ProducerConfig::default()),
        Some(out.clone()),
    );
    let origin = Record::new(TopicPartition::new("in", 0), 7, None, None);

    // 20 sessions, each writing 10 records' replies one after the other (as the engine does),
    // all sessions at once.
    let mut tasks = Vec::new();
    for s in 0..20 {
        let (sink, origin) = (sink.clone(), origin.clone());
        tasks.push(tokio::spawn(async move {
            let session = format!("s{s}");
            for i in 0..10 {
                let replies = [Reply::new(format!("{session}-{i}"))
                    .with_header(Header::new("n", i.to_string()))];
                sink.send(&origin, Some(session.as_bytes()), &replies)
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // A reply's own topic and key win over the defaults.
    sink.send(
        &origin,
        Some(b"s0"),
        &[Reply::new("elsewhere").to_topic(&other).with_key("own")],
    )
    .await
    .unwrap();
    tokio::time::timeout(Duration::from_secs(30), sink.idle())
        .await
        .unwrap();

    let cluster = MetadataCache::new(pool.clone(), vec![], Duration::from_secs(300));
    let mut by_session: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (p, r) in read_topic(&pool, &cluster, &out).await.unwrap() {
        let key = r.key.unwrap();
        assert_eq!(p, partition_for_key(&key, 3), "the session id is the key");
        by_session
            .entry(String::from_utf8(key.to_vec()).unwrap())
            .or_default()
            .push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        assert_eq!(r.headers.len(), 1);
    }
    assert_eq!(by_session.len(), 20);
    for (s, values) in &by_session {
        let want: Vec<String> = (0..10).map(|i| format!("{s}-{i}")).collect();
        assert_eq!(values, &want, "{s}: each reply once, in order");
    }
    let elsewhere = read_topic(&pool, &cluster, &other).await.unwrap();
    assert_eq!(elsewhere.len(), 1);
    assert_eq!(elsewhere[0].1.key, Some(Bytes::from_static(b"own")));

    // Without a default topic, a reply that names none is refused (its record is
    // dead-lettered), not retried forever.
    let bare = KafkaReplies::new(Producer::new(pool, ProducerConfig::default()), None);
    let e = bare
        .send(&origin, Some(b"s0"), &[Reply::new("nowhere")])
        .await
        .unwrap_err();
    assert!(matches!(e, ReplyError::Invalid(_)), "{e:?}");
}
