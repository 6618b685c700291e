//! Fetch, produce, list offsets and metadata against the real broker, including records written by
//! Apache Kafka's own console producer with every compression type.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use orderly_protocol::messages::list_offsets::{EARLIEST, LATEST};
use orderly_protocol::{
    BrokerConnection, Compression, ConnectionConfig, ConnectionKind, ConnectionPool, FetchOptions,
    FetchSpec, FetchedRecord, IsolationLevel, ProduceRecord, Producer, ProducerConfig, WireHeader,
};

fn pool() -> Arc<ConnectionPool> {
    Arc::new(ConnectionPool::new(
        vec![orderly_testkit::broker().bootstrap().to_string()],
        ConnectionConfig::default(),
    ))
}

/// Reads `n` records from every listed partition of `topic`, in one fetch request per round.
async fn read_all(
    conn: &BrokerConnection,
    topic: &str,
    partitions: &[i32],
    n_each: usize,
    iso: IsolationLevel,
) -> Vec<Vec<FetchedRecord>> {
    let mut offsets: Vec<i64> = vec![0; partitions.len()];
    let mut out: Vec<Vec<FetchedRecord>> = vec![Vec::new(); partitions.len()];
    for _ in 0..100 {
        if out.iter().all(|r| r.len() >= n_each) {
            break;
        }
        let specs: Vec<FetchSpec> = partitions
            .iter()
            .zip(&offsets)
            .map(|(p, o)| FetchSpec {
                topic: topic.into(),
                topic_id: [0; 16],
                partition: *p,
                offset: *o,
                leader_epoch: -1,
                max_bytes: 1 << 20,
            })
            .collect();
        let res = conn
            .fetch(
                &specs,
                &FetchOptions {
                    max_wait: Duration::from_millis(200),
                    isolation: iso,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(
            res.len(),
            partitions.len(),
            "one response entry per partition"
        );
        for pf in res {
            assert!(pf.error.is_none(), "{:?}", pf.error);
            let i = partitions.iter().position(|p| *p == pf.partition).unwrap();
            assert!(pf.next_offset >= offsets[i]);
            offsets[i] = pf.next_offset;
            out[i].extend(pf.records);
        }
    }
    out
}

#[tokio::test]
async fn java_console_producer_every_compression_reads_back_exactly() {
    let broker = orderly_testkit::broker();
    let pool = pool();
    let conn = pool.any().await.unwrap();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = broker.unique_topic(&format!("java-{codec}"));
        conn.create_topic(&topic, 1, -1, &[]).await.unwrap();
        let input: String = (0..50)
            .map(|i| {
                format!(
                    "h:a{i},h:b{i},n:NULL\tkey{i}\tvalue-{i}-{}\n",
                    "x".repeat(i * 3)
                )
            })
            .collect();
        let out = broker
            .tool_with_input(
                "console-producer",
                &[
                    "--bootstrap-server",
                    broker.bootstrap(),
                    "--topic",
                    &topic,
                    "--producer-property",
                    &format!("compression.type={codec}"),
                    "--producer-property",
                    "linger.ms=50",
                    "--reader-property",
                    "parse.key=true",
                    "--reader-property",
                    "parse.headers=true",
                    "--reader-property",
                    "null.marker=NULL",
                ],
                &input,
            )
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let recs = read_all(&conn, &topic, &[0], 50, IsolationLevel::ReadCommitted)
            .await
            .remove(0);
        assert_eq!(recs.len(), 50, "{codec}");
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.offset, i as i64, "{codec}");
            assert_eq!(
                r.key.as_deref(),
                Some(format!("key{i}").as_bytes()),
                "{codec}"
            );
            assert_eq!(
                r.value.as_deref(),
                Some(format!("value-{i}-{}", "x".repeat(i * 3)).as_bytes()),
                "{codec}"
            );
            assert_eq!(
                r.headers[..],
                [
                    WireHeader {
                        key: "h".into(),
                        value: Some(Bytes::from(format!("a{i}")))
                    },
                    WireHeader {
                        key: "h".into(),
                        value: Some(Bytes::from(format!("b{i}")))
                    },
                    WireHeader {
                        key: "n".into(),
                        value: None
                    },
                ],
                "{codec}"
            );
        }
    }
}

#[tokio::test]
async fn produce_then_fetch_twelve_partitions_in_one_request() {
    let broker = orderly_testkit::broker();
    let pool = pool();
    let topic = broker.unique_topic("twelve");
    pool.any()
        .await
        .unwrap()
        .create_topic(&topic, 12, -1, &[])
        .await
        .unwrap();
    let producer = Producer::new(
        Arc::clone(&pool),
        ProducerConfig {
            compression: Compression::Zstd,
            ..Default::default()
        },
    );
    for p in 0..12 {
        let recs: Vec<ProduceRecord> = (0..3)
            .map(|i| ProduceRecord {
                key: Some(Bytes::from(format!("k{p}-{i}"))),
                value: Some(Bytes::from(format!("v{p}-{i}"))),
                headers: vec![
                    WireHeader {
                        key: "trace".into(),
                        value: Some(Bytes::from_static(b"abc")),
                    },
                    WireHeader {
                        key: "trace".into(),
                        value: None,
                    },
                ],
                timestamp: Some(1_700_000_000_000 + i),
            })
            .collect();
        assert_eq!(producer.send_batch(&topic, p, &recs).await.unwrap(), 0);
    }
    // Leader of every partition is the single broker: one fetch request covers all 12.
    let md = pool
        .any()
        .await
        .unwrap()
        .metadata(Some(&[topic.as_str()]))
        .await
        .unwrap();
    let t = &md.topics[0];
    assert_eq!(t.partitions.len(), 12);
    let leader = t.partitions[0].leader_id;
    assert!(t.partitions.iter().all(|p| p.leader_id == leader));
    for b in &md.brokers {
        pool.set_broker(b.node_id, b.addr());
    }
    let conn = pool.broker(leader, ConnectionKind::Fetch).await.unwrap();
    let parts: Vec<i32> = (0..12).collect();
    let got = read_all(&conn, &topic, &parts, 3, IsolationLevel::ReadUncommitted).await;
    for (p, recs) in got.iter().enumerate() {
        assert_eq!(recs.len(), 3);
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.value.as_deref(), Some(format!("v{p}-{i}").as_bytes()));
            assert_eq!(r.timestamp, 1_700_000_000_000 + i as i64);
            assert_eq!(r.headers.len(), 2);
            assert_eq!(r.headers[1].value, None);
        }
    }

    // Fetch v13+ by topic id gives the same.
    let specs: Vec<FetchSpec> = (0..12)
        .map(|p| FetchSpec {
            topic: topic.clone(),
            topic_id: t.topic_id,
            partition: p,
            offset: 1,
            leader_epoch: -1,
            max_bytes: 1 << 20,
        })
        .collect();
    let res = conn.fetch(&specs, &FetchOptions::default()).await.unwrap();
    assert_eq!(res.len(), 12);
    assert!(
        res.iter()
            .all(|pf| pf.topic == topic && pf.records.len() == 2 && pf.next_offset == 3)
    );

    // Keyed send lands where Java's partitioner puts it.
    let (p, _) = producer
        .send(
            &topic,
            ProduceRecord {
                key: Some(Bytes::from_static(b"foobar")),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        p,
        orderly_protocol::partitioner::partition_for_key(b"foobar", 12)
    );

    // ListOffsets earliest / latest.
    let c = pool
        .broker(leader, ConnectionKind::Coordination)
        .await
        .unwrap();
    assert_eq!(
        c.list_offset(&topic, 5, EARLIEST, IsolationLevel::ReadCommitted)
            .await
            .unwrap()
            .0,
        0
    );
    assert_eq!(
        c.list_offset(&topic, 5, LATEST, IsolationLevel::ReadCommitted)
            .await
            .unwrap()
            .0,
        3
    );
    assert_eq!(
        c.list_offset(&topic, 5, 1_700_000_000_001, IsolationLevel::ReadCommitted)
            .await
            .unwrap()
            .0,
        1
    );
}

/// One Produce request for several partitions writes each partition's batch; a partition the
/// broker refuses (one that does not exist) is reported on its own and the others are written.
#[tokio::test]
async fn produce_partitions_writes_each_batch_and_reports_each_partition() {
    let broker = orderly_testkit::broker();
    let pool = pool();
    let topic = broker.unique_topic("multi-produce");
    let any = pool.any().await.unwrap();
    any.create_topic(&topic, 3, -1, &[]).await.unwrap();
    // A loaded broker answered the first metadata request with no partitions yet.
    super::wait_for_leader(&any, &topic).await;
    let md = any.metadata(Some(&[topic.as_str()])).await.unwrap();
    for b in &md.brokers {
        pool.set_broker(b.node_id, b.addr());
    }
    let leader = md.topics[0].partitions[0].leader_id;
    let conn = pool.broker(leader, ConnectionKind::Produce).await.unwrap();
    let recs = |p: i32, n: usize| -> Vec<ProduceRecord> {
        (0..n)
            .map(|i| ProduceRecord {
                key: Some(Bytes::from(format!("k{p}"))),
                value: Some(Bytes::from(format!("v{p}-{i}"))),
                ..Default::default()
            })
            .collect()
    };
    let (r0, r2, r9) = (recs(0, 2), recs(2, 3), recs(9, 1));
    // A topic just created may not have every leader ready (NOT_LEADER_OR_FOLLOWER for a moment):
    // the partitions refused are sent again, alone, until only the one that does not exist is left.
    let mut pending: Vec<(i32, &[ProduceRecord])> = vec![(2, &r2), (9, &r9), (0, &r0)];
    let mut outcome = std::collections::HashMap::new();
    for _ in 0..50 {
        let results = conn
            .produce_partitions(&topic, &pending, Compression::None, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(results.len(), pending.len(), "one result per partition");
        let mut again = Vec::new();
        for (batch, result) in pending.into_iter().zip(results) {
            if result.is_err() {
                again.push(batch);
            }
            outcome.insert(batch.0, result);
        }
        pending = again;
        if pending.iter().all(|(p, _)| *p == 9) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        outcome[&2].as_ref().ok(),
        Some(&0),
        "partition 2: {:?}",
        outcome[&2]
    );
    assert!(
        outcome[&9].is_err(),
        "partition 9 does not exist: {:?}",
        outcome[&9]
    );
    assert_eq!(
        outcome[&0].as_ref().ok(),
        Some(&0),
        "partition 0: {:?}",
        outcome[&0]
    );
    let fetch = pool.broker(leader, ConnectionKind::Fetch).await.unwrap();
    let values = |recs: &[FetchedRecord]| -> Vec<String> {
        recs.iter()
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
            .collect()
    };
    let p0 = read_all(&fetch, &topic, &[0], 2, IsolationLevel::ReadUncommitted).await;
    assert_eq!(values(&p0[0]), ["v0-0", "v0-1"]);
    let p2 = read_all(&fetch, &topic, &[2], 3, IsolationLevel::ReadUncommitted).await;
    assert_eq!(values(&p2[0]), ["v2-0", "v2-1", "v2-2"]);
    let empty = fetch
        .fetch(
            &[FetchSpec {
                topic: topic.clone(),
                topic_id: [0; 16],
                partition: 1,
                offset: 0,
                leader_epoch: -1,
                max_bytes: 1 << 20,
            }],
            &FetchOptions {
                max_wait: Duration::from_millis(100),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(empty[0].records.is_empty() && empty[0].high_watermark == 0);
}

#[tokio::test]
async fn any_tries_a_broker_that_just_failed_last() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    // Accept and hold every connection, never answer.
    let _hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let pool = ConnectionPool::new(
        vec![
            silent_addr.clone(),
            orderly_testkit::broker().bootstrap().to_string(),
        ],
        ConnectionConfig {
            connect_timeout: Duration::from_secs(2),
            ..ConnectionConfig::default()
        },
    );
    let t0 = std::time::Instant::now();
    let first = pool.any().await.unwrap();
    assert_eq!(first.broker(), orderly_testkit::broker().bootstrap());
    assert!(
        t0.elapsed() >= Duration::from_secs(2),
        "the silent listener was tried first (bootstrap order)"
    );
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let c = pool.any().await.unwrap();
        assert_eq!(c.broker(), orderly_testkit::broker().bootstrap());
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "the broker that just failed was tried first again: {:?}",
            t.elapsed()
        );
    }
}

/// A topic the test kit creates takes a produce on every partition the moment `topic` returns:
/// the broker applies a new topic a moment after CreateTopics answers, and the kit waits for it.
#[tokio::test]
async fn a_topic_the_kit_creates_takes_a_produce_at_once() {
    let b = orderly_testkit::broker();
    let conn = pool().any().await.unwrap();
    for _ in 0..5 {
        let topic = b.topic("served", 8).await.unwrap();
        for p in 0..8 {
            let record = ProduceRecord {
                value: Some(Bytes::from_static(b"v")),
                ..Default::default()
            };
            conn.produce(
                &topic.name,
                p,
                &[record],
                Compression::None,
                Duration::from_secs(10),
            )
            .await
            .unwrap_or_else(|e| panic!("produce to {}-{p}: {e}", topic.name));
        }
    }
}
