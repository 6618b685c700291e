//! Fetch-and-decode throughput over 12 partitions of 100-byte records, next to Apache Kafka's
//! ConsumerPerformance on the same topic. Run: `cargo run -p orderly-benches --release --bin fetch [records]`.
//! Prints figures; it is not a timed test.
//!
//! The topic is read by orderly-protocol with records copied out of the response in 4 KiB chunks
//! (the default: `DecodeOptions::copy_records` with `copy_chunk`), copied one by one
//! (`copy_chunk: 0`) and zero-copy, twice each, so the cost of the copy is measured on the same
//! data in the same run.
//!
//! `fetch <records> <topic>` only reads an existing 12-partition topic, with the default decode
//! options (the raw-fetch limit of `cargo xtask bench`'s S3, on the topic the systems consume), and
//! prints `fetch_rate=<records/s>`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use orderly_protocol::records::DecodeOptions;
use orderly_protocol::{
    BrokerConnection, ConnectionConfig, ConnectionKind, ConnectionPool, FetchOptions, FetchSpec,
    IsolationLevel,
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let total: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let existing = std::env::args().nth(2);
    let broker = orderly_testkit::broker();
    let topic = existing
        .clone()
        .unwrap_or_else(|| broker.unique_topic("bench-fetch"));
    let pool = Arc::new(ConnectionPool::new(
        vec![broker.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let any = pool.any().await?;
    if existing.is_some() {
        let md = any.metadata(Some(&[topic.as_str()])).await?;
        for b in &md.brokers {
            pool.set_broker(b.node_id, b.addr());
        }
        let t = md.topics.first().context("topic missing")?;
        let leader = t.partitions.first().context("no partitions")?.leader_id;
        let conn = pool.broker(leader, ConnectionKind::Fetch).await?;
        let opts = FetchOptions {
            max_wait: Duration::from_millis(100),
            isolation: IsolationLevel::ReadUncommitted,
            ..Default::default()
        };
        let (records, _, _, secs) = read_all(&conn, &topic, t.topic_id, total, &opts).await?;
        let line = format!(
            "fetch_rate={:.0} records={records} seconds={secs:.3}\n",
            records as f64 / secs
        );
        std::io::Write::write_all(&mut std::io::stdout(), line.as_bytes())?;
        return Ok(());
    }
    any.create_topic(&topic, 12, -1, &[]).await?;
    let out = broker
        .tool(
            "producer-perf",
            &[
                "--topic",
                &topic,
                "--num-records",
                &total.to_string(),
                "--record-size",
                "100",
                "--throughput",
                "-1",
                "--producer-props",
                &format!("bootstrap.servers={}", broker.bootstrap()),
                "linger.ms=5",
                "batch.size=262144",
            ],
        )
        .await?;
    if !out.status.success() {
        bail!(
            "producer-perf failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let md = any.metadata(Some(&[topic.as_str()])).await?;
    for b in &md.brokers {
        pool.set_broker(b.node_id, b.addr());
    }
    let t = md.topics.first().context("topic missing")?;
    let leader = t.partitions.first().context("no partitions")?.leader_id;
    let conn = pool.broker(leader, ConnectionKind::Fetch).await?;
    let mut report = String::new();
    let chunk = orderly_protocol::records::DEFAULT_COPY_CHUNK;
    for (copy_records, copy_chunk) in [(true, chunk), (true, 0), (false, 0)].repeat(2) {
        let opts = FetchOptions {
            max_wait: Duration::from_millis(100),
            isolation: IsolationLevel::ReadUncommitted,
            decode: DecodeOptions {
                copy_records,
                copy_chunk,
                ..Default::default()
            },
            ..Default::default()
        };
        let (records, bytes, requests, secs) =
            read_all(&conn, &topic, t.topic_id, total, &opts).await?;
        report.push_str(&format!(
            "orderly-protocol fetch ({}): {records} records in {secs:.2}s = {:.0} records/s, {:.1} MB/s (values), {requests} requests\n",
            match (copy_records, copy_chunk) {
                (false, _) => "zero-copy",
                (true, 0) => "copied record by record",
                (true, _) => "copied in 4 KiB chunks, the default",
            },
            records as f64 / secs,
            bytes as f64 / secs / 1e6
        ));
    }
    let out = broker
        .tool(
            "consumer-perf",
            &[
                "--bootstrap-server",
                broker.bootstrap(),
                "--topic",
                &topic,
                "--messages",
                &total.to_string(),
                "--timeout",
                "60000",
            ],
        )
        .await?;
    report.push_str("Apache Kafka ConsumerPerformance:\n");
    report.push_str(&String::from_utf8_lossy(&out.stdout));
    std::io::Write::write_all(&mut std::io::stdout(), report.as_bytes())?;
    Ok(())
}

/// Reads all 12 partitions from offset 0 until `total` records; returns records, value bytes,
/// requests and seconds.
async fn read_all(
    conn: &BrokerConnection,
    topic: &str,
    topic_id: [u8; 16],
    total: u64,
    opts: &FetchOptions,
) -> anyhow::Result<(u64, u64, u64, f64)> {
    let mut offsets = [0i64; 12];
    let (mut records, mut bytes, mut requests) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    while records < total && start.elapsed() < Duration::from_secs(120) {
        let specs: Vec<FetchSpec> = (0..12)
            .map(|p| FetchSpec {
                topic: topic.to_string(),
                topic_id,
                partition: p,
                offset: offsets[p as usize],
                leader_epoch: -1,
                max_bytes: 4 << 20,
            })
            .collect();
        requests += 1;
        for pf in conn.fetch(&specs, opts).await? {
            if let Some(e) = pf.error {
                bail!("partition {}: {e}", pf.partition);
            }
            offsets[pf.partition as usize] = pf.next_offset;
            records += pf.records.len() as u64;
            bytes += pf
                .records
                .iter()
                .map(|r| r.value.as_ref().map_or(0, |v| v.len()) as u64)
                .sum::<u64>();
        }
    }
    Ok((records, bytes, requests, start.elapsed().as_secs_f64()))
}
