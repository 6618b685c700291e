//! `cargo xtask demo`: start the local broker, produce records for a few sessions, consume them back, report.
//!
//! This is the foundation's main job: it proves the broker, the Maven-resolved jars and a pure-Rust
//! client work together on this machine. The `orderly` CLI's real consume run replaces it.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rskafka::chrono::{DateTime, Utc};
use rskafka::client::partition::{Compression, UnknownTopicHandling};
use rskafka::record::Record;

/// Produces `records` records for `sessions` sessions over `partitions` partitions, reads them all
/// back, checks each session's `seq` header is 1, 2, 3, ... and prints a report.
pub async fn run(records: usize, sessions: usize, partitions: i32) -> Result<()> {
    let broker = crate::kafka::start(None, "768m")?;
    let bs = broker.bootstrap.clone();
    let topic = format!("orderly-demo-{}", now().timestamp_millis());
    orderly_testkit::create_topic(&bs, &topic, partitions).await?;
    let client = orderly_testkit::client(&bs).await?;

    // A session always goes to the same partition, so its order is the partition's order.
    let mut per_partition: BTreeMap<i32, Vec<Record>> = BTreeMap::new();
    let mut seq: HashMap<usize, u64> = HashMap::new();
    for i in 0..records {
        let s = i % sessions;
        let n = seq.entry(s).or_insert(0);
        *n += 1;
        let key = format!("s-{s:06}");
        let headers = BTreeMap::from([
            ("event-id".to_string(), format!("e-{i}").into_bytes()),
            ("seq".to_string(), n.to_string().into_bytes()),
        ]);
        let p = (s as i32) % partitions;
        per_partition.entry(p).or_default().push(Record {
            key: Some(key.into_bytes()),
            value: Some(vec![b'x'; 100]),
            headers,
            timestamp: now(),
        });
    }
    let t0 = Instant::now();
    for (p, recs) in per_partition {
        let pc = client
            .partition_client(&topic, p, UnknownTopicHandling::Retry)
            .await?;
        for chunk in recs.chunks(500) {
            pc.produce(chunk.to_vec(), Compression::NoCompression)
                .await
                .context("produce")?;
        }
    }
    let produced_in = t0.elapsed();

    let t1 = Instant::now();
    let mut last_seq: HashMap<String, u64> = HashMap::new();
    let (mut consumed, mut violations) = (0usize, 0usize);
    for p in 0..partitions {
        let pc = client
            .partition_client(&topic, p, UnknownTopicHandling::Retry)
            .await?;
        let mut offset = 0;
        loop {
            let (batch, high_watermark) = tokio::time::timeout(
                Duration::from_secs(10),
                pc.fetch_records(offset, 1..1_000_000, 200),
            )
            .await
            .context("fetch timed out")??;
            for r in &batch {
                let key = String::from_utf8_lossy(r.record.key.as_deref().unwrap_or_default())
                    .into_owned();
                let s: u64 = r
                    .record
                    .headers
                    .get("seq")
                    .and_then(|v| std::str::from_utf8(v).ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let prev = last_seq.insert(key, s).unwrap_or(0);
                if s != prev + 1 {
                    violations += 1;
                }
                consumed += 1;
                offset = r.offset + 1;
            }
            if offset >= high_watermark {
                break;
            }
        }
    }
    let consumed_in = t1.elapsed();

    println!("orderly demo report");
    println!(
        "  broker          {bs} (Apache Kafka {}, pid {})",
        orderly_testkit::KAFKA_VERSION,
        broker.pid
    );
    println!("  topic           {topic} ({partitions} partitions)");
    println!("  produced        {records} records for {sessions} sessions in {produced_in:.2?}");
    println!("  consumed        {consumed} records in {consumed_in:.2?}");
    println!("  sessions seen   {}", last_seq.len());
    println!("  order violations {violations}");
    println!("  lost            {}", records.saturating_sub(consumed));
    println!("  broker log      {}", broker.log().display());
    println!("  stop the broker with: cargo xtask kafka stop");
    if consumed != records || violations != 0 {
        bail!("demo failed: consumed {consumed} of {records}, {violations} ordering violations");
    }
    Ok(())
}

/// The wall clock as chrono time (rskafka's chrono is built without its clock feature).
fn now() -> DateTime<Utc> {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}
