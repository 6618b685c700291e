//! The load generator of the side-by-side benchmarks (`cargo xtask bench`), a process of its own.
//!
//! Records follow `orderly_benches::workload`: record `i` has key `s-<i % sessions>`, a 100-byte
//! value, headers `event-id` = `e-<i>` and `seq` (1, 2, 3 per session), partitioned like Java's
//! default partitioner, acks=all.
//!
//! - `--rate 0`: backlog mode, writes `--records` records as fast as it can (before a consumer
//!   starts), stamped with the time of writing.
//! - `--rate R --seconds D`: open loop: record `i` is due at `i / R` seconds after the start; every
//!   2 ms the generator creates whatever is due, stamped with CreateTime = that moment, and queues it
//!   to its partition's sender without waiting for earlier sends (one request in flight per
//!   partition; what queued meanwhile goes out as the next batch, so producer delay counts as
//!   latency). It prints the rate it actually achieved (records acknowledged / time to the last
//!   acknowledgement).

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use clap::Parser;
use orderly_protocol::partitioner::partition_for_key;
use orderly_protocol::{
    ConnectionConfig, ConnectionPool, Header, ProduceRecord, Producer, ProducerConfig,
};

/// Most records one produce request carries (~160 bytes each on the wire: ~320 KB, well under
/// the broker's default `message.max.bytes` of 1 MiB).
const SEND_CHUNK: usize = 2000;

#[derive(Parser)]
struct Args {
    #[arg(long, env = "ORDERLY_BOOTSTRAP")]
    bootstrap: String,
    #[arg(long)]
    topic: String,
    #[arg(long)]
    sessions: usize,
    /// Records (backlog mode); in open-loop mode `rate × seconds`.
    #[arg(long, default_value_t = 0)]
    records: u64,
    /// Records per second offered; 0 = backlog mode.
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Seconds to offer load (open-loop mode).
    #[arg(long, default_value_t = 0.0)]
    seconds: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    anyhow::ensure!(a.sessions > 0, "--sessions must be at least 1");
    if a.rate == 0 {
        let t0 = Instant::now();
        orderly_consumer::synthetic::produce_seed(
            std::slice::from_ref(&a.bootstrap),
            &a.topic,
            a.records as usize,
            a.sessions,
        )
        .await?;
        let secs = t0.elapsed().as_secs_f64();
        println!(
            "produced={} seconds={secs:.3} achieved_rate={:.0}",
            a.records,
            a.records as f64 / secs
        );
        return Ok(());
    }
    let total = (a.rate as f64 * a.seconds).round() as u64;
    let pool = Arc::new(ConnectionPool::new(
        vec![a.bootstrap.clone()],
        ConnectionConfig::default(),
    ));
    let producer = Arc::new(Producer::new(pool, ProducerConfig::default()));
    let partitions = producer
        .partitions(&a.topic)
        .await
        .context("topic metadata")?;
    let value = Bytes::from(vec![b'v'; 100]);
    let keys: Vec<Bytes> = (0..a.sessions)
        .map(|s| Bytes::from(orderly_consumer::synthetic::session_key(s)))
        .collect();
    let key_partition: Vec<i32> = keys
        .iter()
        .map(|k| partition_for_key(k, partitions))
        .collect();
    // One sender per partition, fed in generation order: it sends whatever has queued up as one
    // batch (like a Kafka producer's accumulator), one request in flight per partition, so records
    // land in the order they were generated and the batch size adapts to the round-trip time.
    let mut queues = Vec::new();
    let mut senders = tokio::task::JoinSet::new();
    for p in 0..partitions {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<ProduceRecord>>();
        queues.push(tx);
        let producer = producer.clone();
        let topic = a.topic.clone();
        senders.spawn(async move {
            let mut last = None;
            // CreateTime → acknowledged, µs, per record.
            let mut acked = Vec::new();
            while let Some(mut batch) = rx.recv().await {
                while let Ok(more) = rx.try_recv() {
                    batch.extend(more);
                }
                // At most SEND_CHUNK records per request: what queued up while one was in flight
                // can exceed the broker's message.max.bytes (1 MiB) at high rates.
                for chunk in batch.chunks(SEND_CHUNK) {
                    producer.send_batch(&topic, p, chunk).await?;
                }
                last = Some(Instant::now());
                let now = orderly_benches::verify::now_us();
                acked.extend(
                    batch
                        .iter()
                        .map(|r| now - r.timestamp.unwrap_or_default() * 1000),
                );
            }
            Ok::<_, orderly_protocol::Error>((last, acked))
        });
    }
    let mut seq = vec![0u64; a.sessions];
    let mut next = 0u64;
    let mut max_behind = Duration::ZERO;
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    'offer: while next < total {
        tick.tick().await;
        let elapsed = start.elapsed();
        let due = ((elapsed.as_secs_f64() * a.rate as f64) as u64).min(total);
        if due <= next {
            continue;
        }
        // How late the oldest record of this step is against its due time.
        let due_at = Duration::from_secs_f64(next as f64 / a.rate as f64);
        max_behind = max_behind.max(elapsed.saturating_sub(due_at));
        let now_ms = orderly_benches::verify::now_us() / 1000;
        let mut per_partition: BTreeMap<i32, Vec<ProduceRecord>> = BTreeMap::new();
        for i in next..due {
            let s = (i % a.sessions as u64) as usize;
            seq[s] += 1;
            per_partition
                .entry(key_partition[s])
                .or_default()
                .push(ProduceRecord {
                    key: Some(keys[s].clone()),
                    value: Some(value.clone()),
                    headers: vec![
                        Header {
                            key: "event-id".into(),
                            value: Some(Bytes::from(format!("e-{i}"))),
                        },
                        Header {
                            key: "seq".into(),
                            value: Some(Bytes::from(seq[s].to_string())),
                        },
                    ],
                    timestamp: Some(now_ms),
                });
        }
        next = due;
        for (p, recs) in per_partition {
            if let Some(q) = queues.get(p as usize)
                && q.send(recs).is_err()
            {
                // The sender failed; its error is reported below.
                break 'offer;
            }
        }
    }
    drop(queues);
    let mut last = start;
    let mut acked = Vec::new();
    while let Some(r) = senders.join_next().await {
        let (at, lat) = r.context("sender task")?.context("produce")?;
        if let Some(at) = at {
            last = last.max(at);
        }
        acked.extend(lat);
    }
    acked.sort_unstable();
    let pct = |q: f64| {
        acked
            .get(((acked.len() as f64 * q) as usize).min(acked.len().saturating_sub(1)))
            .map_or(0.0, |v| *v as f64 / 1000.0)
    };
    let secs = (last - start).as_secs_f64().max(a.seconds);
    println!(
        "produced={total} seconds={secs:.3} achieved_rate={:.0} offered_rate={} max_behind_ms={} ack_p50_ms={:.2} ack_p99_ms={:.2}",
        total as f64 / secs,
        a.rate,
        max_behind.as_millis(),
        pct(0.5),
        pct(0.99)
    );
    Ok(())
}
