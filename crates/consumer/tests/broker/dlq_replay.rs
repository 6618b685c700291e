//! `orderly dlq replay` as a library call against the real broker: selection by source topic,
//! one replay per source record, the original timestamp, no synthetic session header, replay to
//! another topic, and a DLQ read in bounded chunks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use orderly_consumer::tools::MetadataCache;
use orderly_consumer::tools::dlq::{LetterFilter, ReplayOptions, read_dead_letters, replay};
use orderly_consumer::tools::produce::{Batcher, TopicReader, read_topic};
use orderly_protocol::{ConnectionConfig, ConnectionPool, ProduceRecord, WireHeader};

/// A record's original CreateTime in these tests (2020-09-13).
const ORIGINAL_TS: i64 = 1_600_000_000_000;

fn letter(source: &str, partition: i32, offset: i64, session: &str) -> ProduceRecord {
    let h = |k: &str, v: String| WireHeader {
        key: k.into(),
        value: Some(Bytes::from(v)),
    };
    ProduceRecord {
        key: Some(Bytes::from(session.to_owned())),
        value: Some(Bytes::from(format!("{source}@{offset}"))),
        headers: vec![
            h("trace", "t".into()),
            // Written by a session router on the consumer side (routing by a JSON field).
            h("orderly-session-id", format!("stale-{session}")),
            h("orderly-dlq-topic", source.into()),
            h("orderly-dlq-partition", partition.to_string()),
            h("orderly-dlq-offset", offset.to_string()),
            h("orderly-dlq-reason", "permanent".into()),
            h("orderly-dlq-attempts", "1".into()),
        ],
        timestamp: Some(ORIGINAL_TS),
    }
}

struct Setup {
    pool: Arc<ConnectionPool>,
    cluster: MetadataCache,
}

fn setup(b: &orderly_testkit::TestBroker) -> Setup {
    let pool = Arc::new(ConnectionPool::new(
        vec![b.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let cluster = MetadataCache::new(pool.clone(), vec![], Duration::from_secs(300));
    Setup { pool, cluster }
}

async fn write_letters(s: &Setup, dlq: &str, letters: Vec<ProduceRecord>) {
    let mut out = Batcher::new(s.pool.clone(), &s.cluster, dlq).await.unwrap();
    for l in letters {
        out.push(l).await.unwrap();
    }
    out.finish().await.unwrap();
}

/// A record dead-lettered twice (a redelivery after a crash dead-letters it again) is replayed
/// once; the replayed record keeps the original timestamp and carries no synthetic session header
/// (the consumer's router writes a fresh one; a stale one must not win).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_dead_lettered_twice_is_replayed_once_as_it_was() {
    let b = orderly_testkit::broker();
    let topic = b.topic("replay-once", 1).await.unwrap();
    let dlq = format!("{}.dlq", topic.name);
    b.create_topic(&dlq, 1).await.unwrap();
    let s = setup(b);
    let t = &topic.name;
    write_letters(
        &s,
        &dlq,
        vec![
            letter(t, 0, 0, "a"),
            letter(t, 0, 1, "a"),
            letter(t, 0, 1, "a"),
            letter(t, 0, 2, "a"),
        ],
    )
    .await;
    let letters = read_dead_letters(&s.pool, &s.cluster, &dlq, &LetterFilter::default())
        .await
        .unwrap();
    assert_eq!(letters.len(), 4);
    let done = replay(
        &s.pool,
        &s.cluster,
        &dlq,
        &LetterFilter::default(),
        &ReplayOptions::default(),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!((done.replayed, done.skipped_duplicates), (3, 1));
    let out = read_topic(&s.pool, &s.cluster, t).await.unwrap();
    let values: Vec<String> = out
        .iter()
        .map(|(_, r)| String::from_utf8(r.value.as_deref().unwrap().to_vec()).unwrap())
        .collect();
    assert_eq!(
        values,
        [format!("{t}@0"), format!("{t}@1"), format!("{t}@2")]
    );
    for (_, r) in &out {
        assert_eq!(r.timestamp, ORIGINAL_TS, "the original timestamp");
        assert!(
            !r.headers.iter().any(|h| h.key == "orderly-session-id"),
            "no synthetic session header"
        );
        assert!(r.headers.iter().any(|h| h.key == "trace"));
    }
}

fn values(records: &[(i32, orderly_protocol::FetchedRecord)]) -> Vec<String> {
    records
        .iter()
        .map(|(_, r)| String::from_utf8(r.value.as_deref().unwrap().to_vec()).unwrap())
        .collect()
}

/// `--source-topic` with `--source-partition` selects that partition of that topic only, not the
/// partition of that number in every topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_topic_filter_selects_one_topic() {
    let b = orderly_testkit::broker();
    let one = b.topic("replay-one", 2).await.unwrap();
    let two = b.topic("replay-two", 2).await.unwrap();
    let dlq = format!("{}.dlq", one.name);
    b.create_topic(&dlq, 1).await.unwrap();
    let s = setup(b);
    write_letters(
        &s,
        &dlq,
        vec![
            letter(&one.name, 1, 4, "a"),
            letter(&two.name, 1, 4, "b"),
            letter(&one.name, 0, 2, "c"),
        ],
    )
    .await;
    let filter = LetterFilter {
        source_topic: Some(one.name.clone()),
        source_partition: Some(1),
        ..LetterFilter::default()
    };
    let done = replay(
        &s.pool,
        &s.cluster,
        &dlq,
        &filter,
        &ReplayOptions::default(),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(done.replayed, 1);
    assert_eq!(done.topics, std::slice::from_ref(&one.name));
    let out = read_topic(&s.pool, &s.cluster, &one.name).await.unwrap();
    assert_eq!(values(&out), [format!("{}@4", one.name)]);
    assert!(
        read_topic(&s.pool, &s.cluster, &two.name)
            .await
            .unwrap()
            .is_empty()
    );
}

/// `--to-topic` writes to another topic, on the source partition's number, in DLQ order, and
/// nothing to the source topic (whose every consumer group would see it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_to_another_topic_leaves_the_source_alone() {
    let b = orderly_testkit::broker();
    let source = b.topic("replay-src", 2).await.unwrap();
    let other = b.topic("replay-other", 2).await.unwrap();
    let dlq = format!("{}.dlq", source.name);
    b.create_topic(&dlq, 1).await.unwrap();
    let s = setup(b);
    let t = &source.name;
    write_letters(
        &s,
        &dlq,
        vec![
            letter(t, 1, 3, "a"),
            letter(t, 1, 8, "a"),
            letter(t, 0, 5, "b"),
        ],
    )
    .await;
    let opts = ReplayOptions {
        to_topic: Some(other.name.clone()),
        ..ReplayOptions::default()
    };
    let done = replay(
        &s.pool,
        &s.cluster,
        &dlq,
        &LetterFilter::default(),
        &opts,
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(done.replayed, 3);
    assert_eq!(done.topics, std::slice::from_ref(&other.name));
    assert!(read_topic(&s.pool, &s.cluster, t).await.unwrap().is_empty());
    let out = read_topic(&s.pool, &s.cluster, &other.name).await.unwrap();
    let placed: Vec<(i32, String)> = out
        .iter()
        .map(|(p, r)| {
            (
                *p,
                String::from_utf8(r.value.as_deref().unwrap().to_vec()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        placed,
        [
            (0, format!("{t}@5")),
            (1, format!("{t}@3")),
            (1, format!("{t}@8"))
        ]
    );
    assert!(
        out.iter()
            .all(|(_, r)| !r.headers.iter().any(|h| h.key == "orderly-replay-origin")),
        "an origin names the source topic only"
    );
    let marked = read_dead_letters(&s.pool, &s.cluster, &dlq, &LetterFilter::default())
        .await
        .unwrap();
    assert!(marked.iter().all(|l| l.replayed));
}

/// The DLQ is read in chunks of at most one fetch response (4 MiB), not whole: a 12 MiB DLQ
/// arrives in several chunks, and a replay of it writes every letter once, in DLQ order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dlq_is_streamed_in_bounded_chunks() {
    let b = orderly_testkit::broker();
    let source = b.topic("replay-big", 1).await.unwrap();
    let dlq = format!("{}.dlq", source.name);
    b.create_topic(&dlq, 1).await.unwrap();
    let s = setup(b);
    let n = 3000;
    let pad = "x".repeat(4096);
    write_letters(
        &s,
        &dlq,
        (0..n)
            .map(|i| {
                let mut l = letter(&source.name, 0, i, "s");
                l.value = Some(Bytes::from(format!("{i}:{pad}")));
                l
            })
            .collect(),
    )
    .await;
    let mut reader = TopicReader::open(&s.pool, &s.cluster, &dlq).await.unwrap();
    let (mut chunks, mut records) = (0, 0);
    while let Some(chunk) = reader.next_chunk().await.unwrap() {
        let bytes: usize = chunk
            .iter()
            .map(|(_, r)| r.value.as_ref().map_or(0, Bytes::len))
            .sum();
        assert!(bytes <= 5 << 20, "a chunk of {bytes} bytes");
        chunks += 1;
        records += chunk.len();
    }
    assert_eq!(records, n as usize);
    assert!(chunks >= 3, "{chunks} chunks");
    let done = replay(
        &s.pool,
        &s.cluster,
        &dlq,
        &LetterFilter::default(),
        &ReplayOptions::default(),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(done.replayed, n as u64);
    let out = read_topic(&s.pool, &s.cluster, &source.name).await.unwrap();
    let firsts: Vec<i64> = values(&out)
        .iter()
        .map(|v| v.split(':').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(firsts, (0..n).collect::<Vec<_>>(), "in DLQ order");
}
