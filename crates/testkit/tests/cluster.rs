//! The three-node cluster: an RF=3 topic keeps taking writes (acks=all) and serving reads after its partition leader is SIGKILLed, and the node rejoins after a restart.
//!
//! The writes go through the cluster's SASL_PLAINTEXT listeners with SCRAM-SHA-512 (the idempotent
//! producer authenticates to every node it meets, the new leader included), and the read-back is
//! repeated over SCRAM-SHA-256; a wrong password is refused by the cluster.
#![allow(clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use orderly_protocol::{
    BrokerConnection, ConnectionConfig, ConnectionKind, ConnectionPool, FetchOptions, FetchSpec,
    ProduceRecord, Producer, ProducerConfig, Sasl,
};
use orderly_testkit::cluster::{ClusterOptions, TestCluster};
use rskafka::client::partition::{OffsetAt, UnknownTopicHandling};

/// `(leader, isr)` of `topic`/`partition` as node 1..n see it (the first live node that answers).
async fn leader(cluster: &TestCluster, topic: &str, partition: i32) -> Option<(i32, Vec<i32>)> {
    for node in cluster.nodes() {
        if !cluster.is_running(node.id) {
            continue;
        }
        let Ok(conn) =
            BrokerConnection::connect(&node.address(), &ConnectionConfig::default()).await
        else {
            continue;
        };
        let Ok(md) = conn.metadata(Some(&[topic])).await else {
            continue;
        };
        let p = md
            .topics
            .first()?
            .partitions
            .iter()
            .find(|p| p.partition_index == partition)?;
        return Some((p.leader_id, p.isr_nodes.clone()));
    }
    None
}

async fn produce(producer: &Producer, topic: &str, from: usize, to: usize) -> Result<(), String> {
    for i in from..to {
        let rec = ProduceRecord {
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from(format!("v{i}"))),
            headers: Vec::new(),
            timestamp: None,
        };
        producer
            .send(topic, rec)
            .await
            .map_err(|e| format!("record {i}: {e}"))?;
    }
    Ok(())
}

const PASSWORD: &str = "cluster-Pa55-xyzzy";

fn scram(sasl: Sasl) -> ConnectionConfig {
    ConnectionConfig {
        sasl: Some(sasl),
        ..ConnectionConfig::default()
    }
}

/// The values of `topic`/`partition` below `end`, fetched over `conn`.
async fn read_all(conn: &BrokerConnection, topic: &str, partition: i32, end: i64) -> Vec<String> {
    let mut out = Vec::new();
    let mut offset = 0;
    for _ in 0..1_000 {
        if offset >= end {
            break;
        }
        let res = conn
            .fetch(
                &[FetchSpec {
                    topic: topic.into(),
                    topic_id: [0; 16],
                    partition,
                    offset,
                    leader_epoch: -1,
                    max_bytes: 1 << 20,
                }],
                &FetchOptions {
                    max_wait: Duration::from_millis(100),
                    ..FetchOptions::default()
                },
            )
            .await
            .expect("fetch");
        let pf = res.into_iter().next().expect("partition in the answer");
        assert!(pf.error.is_none(), "{:?}", pf.error);
        offset = pf.next_offset;
        out.extend(
            pf.records.iter().map(|r| {
                String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned()
            }),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_kill_keeps_produce_and_consume_going() {
    let dir = orderly_testkit::kafka_home()
        .join("test-runs")
        .join(format!("{}-cluster", std::process::id()));
    let opts = ClusterOptions {
        scram_users: vec![("alice".into(), PASSWORD.into())],
        ..ClusterOptions::default()
    };
    let mut cluster = TestCluster::start(&dir, &opts, true).expect("cluster starts");
    let sasl_bootstrap = cluster.sasl_bootstrap().expect("SASL listeners");
    let topic = format!("cluster-{}", std::process::id());
    orderly_testkit::create_topic_rf(cluster.nodes()[0].address().as_str(), &topic, 3, 3)
        .await
        .expect("RF=3 topic");

    // Wait until the topic is fully replicated (all three in the ISR).
    let deadline = Instant::now() + Duration::from_secs(60);
    let (key_partition, old_leader) = loop {
        let p = orderly_protocol::partitioner::partition_for_key(b"k", 3);
        if let Some((l, isr)) = leader(&cluster, &topic, p).await {
            if l >= 0 && isr.len() == 3 {
                break (p, l);
            }
        }
        assert!(
            Instant::now() < deadline,
            "partition never got three in-sync replicas"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    let pool = Arc::new(ConnectionPool::new(
        sasl_bootstrap.split(',').map(str::to_string).collect(),
        scram(Sasl::ScramSha512 {
            username: "alice".into(),
            password: PASSWORD.into(),
        }),
    ));
    // The default 5 retries give up before a SIGKILLed leader is fenced (broker.session.timeout.ms).
    let producer = Producer::new(
        pool,
        ProducerConfig {
            retries: 40,
            ..ProducerConfig::default()
        },
    );
    produce(&producer, &topic, 0, 50).await.expect("produce");

    cluster.kill(old_leader).expect("kill the leader");
    assert!(!cluster.is_running(old_leader));
    // acks=all with min.insync.replicas=2: the two survivors keep accepting writes.
    produce(&producer, &topic, 50, 100)
        .await
        .expect("produce after the leader kill");
    let (new_leader, isr) = leader(&cluster, &topic, key_partition)
        .await
        .expect("metadata");
    assert_ne!(
        new_leader, old_leader,
        "leadership moved off the killed node"
    );
    assert!(isr.len() >= 2, "ISR {isr:?} keeps min.insync.replicas");

    // Every record, before and after the kill, reads back in order from the new leader.
    let survivors: Vec<String> = cluster
        .nodes()
        .iter()
        .filter(|n| n.id != old_leader)
        .map(|n| n.address())
        .collect();
    let client = rskafka::client::ClientBuilder::new(survivors)
        .build()
        .await
        .expect("client");
    let pc = client
        .partition_client(&topic, key_partition, UnknownTopicHandling::Retry)
        .await
        .expect("partition client");
    let end = pc.get_offset(OffsetAt::Latest).await.expect("latest");
    assert_eq!(
        end, 100,
        "exactly the 100 acknowledged records are in the log"
    );
    let mut values = Vec::new();
    let mut offset = 0;
    while offset < end {
        let (recs, _) = pc
            .fetch_records(offset, 1..1_000_000, 1_000)
            .await
            .expect("fetch");
        for r in recs {
            values.push(String::from_utf8(r.record.value.unwrap_or_default()).unwrap());
            offset = r.offset + 1;
        }
    }
    let want: Vec<String> = (0..100).map(|i| format!("v{i}")).collect();
    assert_eq!(values, want);

    // The same read over SCRAM-SHA-256, from the new leader's SASL listener as Metadata names it.
    let survivors_sasl: Vec<String> = cluster
        .nodes()
        .iter()
        .filter(|n| n.id != old_leader)
        .filter_map(|n| n.sasl.map(|p| format!("127.0.0.1:{p}")))
        .collect();
    let survivor_sasl = survivors_sasl.first().expect("a surviving node").clone();
    let pool256 = ConnectionPool::new(
        survivors_sasl,
        scram(Sasl::ScramSha256 {
            username: "alice".into(),
            password: PASSWORD.into(),
        }),
    );
    let md = pool256
        .any()
        .await
        .expect("SCRAM-SHA-256 connection")
        .metadata(Some(&[topic.as_str()]))
        .await
        .expect("metadata");
    for b in &md.brokers {
        let node = cluster.node(b.node_id).expect("node");
        assert_eq!(
            Some(u16::try_from(b.port).expect("port")),
            node.sasl,
            "Metadata over SASL names the SASL listeners"
        );
        pool256.set_broker(b.node_id, b.addr());
    }
    let conn = pool256
        .broker(new_leader, ConnectionKind::Fetch)
        .await
        .expect("the new leader over SCRAM");
    assert_eq!(read_all(&conn, &topic, key_partition, end).await, want);

    // A wrong password is refused.
    // (At a surviving node: the killed one is still down.)
    let bad = ConnectionPool::new(
        vec![survivor_sasl.clone()],
        scram(Sasl::ScramSha512 {
            username: "alice".into(),
            password: "not-the-password".into(),
        }),
    );
    let err = bad.any().await.expect_err("a wrong password fails");
    assert!(err.to_string().contains("SASL authentication"), "{err}");

    // The killed node comes back and rejoins the ISR.
    cluster.restart(old_leader).expect("restart");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some((_, isr)) = leader(&cluster, &topic, key_partition).await {
            if isr.contains(&old_leader) {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "restarted node never rejoined the ISR"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    cluster.stop_all().expect("stop");
}
