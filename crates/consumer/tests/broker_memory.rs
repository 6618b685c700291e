//! The byte budget bounds real memory: records a handler keeps do not keep their fetch responses alive.
//!
//! This binary holds one test on purpose: it measures the resident set of the whole process, so
//! no other test may run beside it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{config, wait_until};
use orderly_consumer::Consumer;
use orderly_engine::{Attempt, Handler, HandlerError, Record};
use orderly_protocol::records::{Compression, ProduceRecord};
use orderly_protocol::{ConnectionConfig, ConnectionPool};
use orderly_testkit::broker;

const RECORD: usize = 32 * 1024;
const PER_BATCH: usize = 16;
const RECORDS: usize = 5120;
/// Records per fetch response: `partition_max_bytes` / record size.
const PARTITION_MAX_BYTES: usize = 4 << 20;
/// The handler keeps every `HOLD_EVERY`-th record forever: two per fetch response.
const HOLD_EVERY: i64 = 64;
const BUDGET: usize = 4 << 20;
/// What may be resident beyond the budget: the fetch response in flight when the partition paused
/// and its decoded records (2 × 4 MiB), a second response the broker had ready, and the
/// allocator's free lists (what glibc keeps instead of returning to the kernel).
const CONSTANT: usize = 8 * PARTITION_MAX_BYTES;

/// Handles every record at once, except every `HOLD_EVERY`-th, which it never finishes.
struct HoldSome;

impl Handler for HoldSome {
    async fn handle(&self, record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        if record.offset % HOLD_EVERY == 0 {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}

/// Resident set size of this process, from `/proc/self/statm` (pages × page size).
fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // 4 KiB pages on every Linux target we build for (x86_64, aarch64 with 4K kernels); a 64K
    // page kernel would only make the bound looser.
    pages * 4096
}

/// A handler holds two records of every 4 MiB fetch response (each record
/// 32 KiB). The engine pauses the partition once the held records reach the 2 MiB budget. A held
/// record keeps only its own bytes: were it a slice of its response, ~32 held responses (~128 MiB)
/// would stay resident behind a 2 MiB budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_records_do_not_pin_their_fetch_responses() {
    let b = broker();
    let topic = b.topic("memory", 1).await.unwrap();
    let dlq = b.topic("memory-dlq", 1).await.unwrap();

    // 160 MiB in 512 KiB batches (below the broker's default 1 MiB message limit).
    {
        let pool =
            ConnectionPool::new(vec![b.bootstrap().to_string()], ConnectionConfig::default());
        let conn = pool.any().await.unwrap();
        let value = Bytes::from(vec![7u8; RECORD]);
        for batch in 0..RECORDS / PER_BATCH {
            let records: Vec<ProduceRecord> = (0..PER_BATCH)
                .map(|i| ProduceRecord {
                    key: Some(Bytes::from(format!("s{}", batch * PER_BATCH + i))),
                    value: Some(value.clone()),
                    ..Default::default()
                })
                .collect();
            conn.produce(
                &topic.name,
                0,
                &records,
                Compression::None,
                Duration::from_secs(30),
            )
            .await
            .unwrap();
        }
    }

    let group = b.unique_topic("memory-group");
    let mut cfg = config(b.bootstrap(), &group, &topic.name, &dlq.name);
    cfg.fetch.partition_max_bytes = PARTITION_MAX_BYTES as i32;
    cfg.engine.partition_budget_bytes = BUDGET;
    cfg.engine.global_budget_bytes = 2 * BUDGET;
    cfg.engine.stuck_timeout = None;
    cfg.engine.attempt_timeout = None;
    cfg.engine.drain_timeout = Duration::from_millis(200);
    let consumer = Consumer::new(cfg, HoldSome).unwrap();

    let baseline = rss_bytes();
    let running = common::start(consumer);
    let stats = running.stats.clone();
    // Wait until the partition is paused over its budget and nothing moves any more.
    wait_until(Duration::from_secs(120), "the partition to pause", || {
        stats.partitions().iter().any(|p| p.paused)
    })
    .await;
    let mut last = (stats.handled(), Instant::now());
    wait_until(Duration::from_secs(60), "handling to settle", || {
        let h = stats.handled();
        if h != last.0 {
            last = (h, Instant::now());
        }
        last.1.elapsed() > Duration::from_secs(2)
    })
    .await;
    let p = stats.partitions().into_iter().next().unwrap();
    let grown = rss_bytes().saturating_sub(baseline);
    let held = p.in_flight;
    let handled = stats.handled();
    running.stop().await;

    eprintln!(
        "handled {handled}, held {held} records ({} bytes charged), resident set grew by {} KiB",
        p.buffered_bytes,
        grown / 1024
    );
    // The scenario really happened: many responses each left a held record behind.
    assert!(
        held >= 30,
        "only {held} records held; the test did not fill the budget"
    );
    assert!(
        handled as usize >= held * (HOLD_EVERY as usize - 1) - 64,
        "handled {handled} for {held} held"
    );
    assert!(
        grown <= BUDGET + CONSTANT,
        "resident set grew by {} MiB with a {} MiB budget (+ {} MiB allowed): held records keep \
         their fetch responses alive",
        grown >> 20,
        BUDGET >> 20,
        CONSTANT >> 20
    );
}
