//! The load generator of the side-by-side benchmarks (`cargo xtask bench`), a process of its own.
//!
//! Records follow `orderly_benches::workload`: record `i` has key `s-<i % sessions>`, a 100-byte
//! value, headers `event-id` = `e-<i>` and `seq` (1, 2, 3 per session), partitioned like Java's
//! default partitioner, acks=all.
//!
//! - `--rate 0`: backlog mode, writes `--records` records as fast as it can (before a consumer
//!   starts), stamped with the time of writing.
//! - `--rate R --seconds D`: open loop: record `i` is due at `i / R` seconds after the start; every
//!   2 ms the generator creates whatever is due, stamped with CreateTime = that moment (the nearest
//!   millisecond), and queues it to its leader's sender without waiting for earlier sends. A
//!   sender sends what queued meanwhile as one Produce request with a batch per partition, like a
//!   Kafka producer, one request in flight per leader broker, so producer delay counts as latency.
//!   It prints the rate it actually achieved (records acknowledged / time to the last
//!   acknowledgement) and the CreateTime → acknowledged percentiles.

#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use clap::Parser;
use orderly_protocol::partitioner::partition_for_key;
use orderly_protocol::records::Compression;
use orderly_protocol::{ConnectionConfig, ConnectionPool, ProduceRecord, WireHeader};

/// Records queued for one leader: per partition, in generation order.
type PerPartition = BTreeMap<i32, Vec<ProduceRecord>>;

/// Most records one produce request carries per partition (~160 bytes each on the wire: ~320 KB, well under
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
        orderly_consumer::__private::synthetic::produce_seed(
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
    let md = pool
        .any()
        .await
        .context("connect")?
        .metadata(Some(&[a.topic.as_str()]))
        .await
        .context("topic metadata")?;
    for b in &md.brokers {
        pool.set_broker(b.node_id, b.addr());
    }
    let parts = &md.topics.first().context("topic missing")?.partitions;
    let partitions = i32::try_from(parts.len()).context("partition count")?;
    anyhow::ensure!(partitions > 0, "topic {} has no partitions", a.topic);
    // Leader broker by partition index; every partition must have one, or its records would
    // have no sender.
    let mut leader_of = vec![-1; parts.len()];
    for p in parts {
        if let Some(l) = usize::try_from(p.partition_index)
            .ok()
            .and_then(|i| leader_of.get_mut(i))
        {
            *l = p.leader_id;
        }
    }
    if let Some(p) = leader_of.iter().position(|l| *l < 0) {
        anyhow::bail!("partition {p} of {} has no leader", a.topic);
    }
    let value = Bytes::from(vec![b'v'; 100]);
    let keys: Vec<Bytes> = (0..a.sessions)
        .map(|s| Bytes::from(orderly_consumer::__private::synthetic::session_key(s)))
        .collect();
    let key_partition: Vec<i32> = keys
        .iter()
        .map(|k| partition_for_key(k, partitions))
        .collect();
    // One sender per leader broker, fed in generation order: it sends whatever has queued up for
    // its partitions as one Produce request with a batch per partition (like a Kafka producer's
    // accumulator and sender), one request in flight per leader, so records land in the order they
    // were generated and the batch sizes adapt to the round-trip time. (One request per partition
    // would put twelve on one connection, which the broker answers one at a time.)
    let mut queues: BTreeMap<i32, tokio::sync::mpsc::UnboundedSender<PerPartition>> =
        BTreeMap::new();
    let mut senders = tokio::task::JoinSet::new();
    for &leader in &leader_of {
        if queues.contains_key(&leader) {
            continue;
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<PerPartition>();
        queues.insert(leader, tx);
        let pool = pool.clone();
        let topic = a.topic.clone();
        senders.spawn(async move {
            let mut last = None;
            // CreateTime → acknowledged, µs, per record.
            let mut acked = Vec::new();
            while let Some(mut queued) = rx.recv().await {
                while let Ok(more) = rx.try_recv() {
                    for (p, recs) in more {
                        queued.entry(p).or_default().extend(recs);
                    }
                }
                // At most SEND_CHUNK records per partition per request: what queued up while one
                // was in flight can exceed the broker's message.max.bytes (1 MiB) per batch at
                // high rates.
                let mut from = 0;
                loop {
                    let batches: Vec<(i32, &[ProduceRecord])> = queued
                        .iter()
                        .filter(|(_, recs)| recs.len() > from)
                        .map(|(p, recs)| (*p, &recs[from..recs.len().min(from + SEND_CHUNK)]))
                        .collect();
                    if batches.is_empty() {
                        break;
                    }
                    send(&pool, leader, &topic, batches).await?;
                    from += SEND_CHUNK;
                }
                last = Some(Instant::now());
                let now = orderly_benches::verify::now_us();
                acked.extend(
                    queued
                        .values()
                        .flatten()
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
        // CreateTime has millisecond resolution: the stamp is the millisecond nearest to the
        // records' creation, so its error is within ±0.5 ms around zero. (Truncating would stamp
        // each record on average 0.5 ms before it existed, and every system's latency would carry
        // it.)
        let now_ms = (orderly_benches::verify::now_us() + 500) / 1000;
        let mut per_leader: BTreeMap<i32, PerPartition> = BTreeMap::new();
        for i in next..due {
            let s = (i % a.sessions as u64) as usize;
            seq[s] += 1;
            let p = key_partition[s];
            let leader = usize::try_from(p)
                .ok()
                .and_then(|i| leader_of.get(i))
                .copied()
                .unwrap_or(-1);
            per_leader
                .entry(leader)
                .or_default()
                .entry(p)
                .or_default()
                .push(ProduceRecord {
                    key: Some(keys[s].clone()),
                    value: Some(value.clone()),
                    headers: vec![
                        WireHeader {
                            key: "event-id".into(),
                            value: Some(Bytes::from(format!("e-{i}"))),
                        },
                        WireHeader {
                            key: "seq".into(),
                            value: Some(Bytes::from(seq[s].to_string())),
                        },
                    ],
                    timestamp: Some(now_ms),
                });
        }
        next = due;
        for (leader, recs) in per_leader {
            if let Some(q) = queues.get(&leader)
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

/// Sends `batches` to `leader` in one Produce request. A partition the broker refused with a
/// retriable error (a leader not ready yet on a topic just created) is sent again, alone with the
/// others that failed, after 50 ms, up to 20 times; the broker wrote nothing of it, so this cannot
/// duplicate a record. A failure of the whole request is returned as is.
async fn send(
    pool: &ConnectionPool,
    leader: i32,
    topic: &str,
    mut batches: Vec<(i32, &[ProduceRecord])>,
) -> Result<(), orderly_protocol::Error> {
    let mut attempt = 0;
    loop {
        let conn = pool
            .broker(leader, orderly_protocol::ConnectionKind::Produce)
            .await?;
        let results = conn
            .produce_partitions(topic, &batches, Compression::None, Duration::from_secs(30))
            .await?;
        let mut failed = Vec::new();
        for (batch, result) in batches.into_iter().zip(results) {
            match result {
                Ok(_) => {}
                Err(e) if e.is_retriable() && attempt < 20 => failed.push(batch),
                Err(e) => return Err(e),
            }
        }
        if failed.is_empty() {
            return Ok(());
        }
        batches = failed;
        attempt += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
