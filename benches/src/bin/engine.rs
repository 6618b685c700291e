//! Engine benchmark: throughput with the in-memory source and a no-op handler, and bytes of
//! memory per active and per evicted session (counted by a global allocator).
//!
//! Run: `cargo run --release -p orderly-benches --bin engine -- [--records N] [--sessions S]`.
//! The last line is a machine-readable summary (`key=value` pairs).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bytes::Bytes;
use clap::Parser;
use orderly_engine::mem::{MemDeadLetters, MemSource};
use orderly_engine::{
    Attempt, Engine, EngineConfig, EngineStats, Handler, HandlerError, Record, TopicPartition,
};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tokio::sync::Notify;

#[global_allocator]
static GLOBAL: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

/// CPU seconds (user + system) this process used so far, from `/proc/self/stat` (Linux reports
/// them in USER_HZ = 100 ticks per second). `None` elsewhere.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Bytes currently allocated by the whole process.
fn live_bytes() -> i64 {
    // stats_alloc already folds reallocations into these two totals.
    let s = INSTRUMENTED_SYSTEM.stats();
    s.bytes_allocated as i64 - s.bytes_deallocated as i64
}

#[derive(Parser)]
#[command(about = "orderly engine benchmark (in-memory source, no broker)")]
struct Args {
    /// Records for the throughput run.
    #[arg(long, default_value_t = 10_000_000)]
    records: i64,
    /// Distinct session keys in the throughput run.
    #[arg(long, default_value_t = 10_000)]
    sessions: usize,
    /// Partitions in the throughput run.
    #[arg(long, default_value_t = 8)]
    partitions: i32,
    /// Worker tasks (default: available parallelism).
    #[arg(long)]
    workers: Option<usize>,
    /// Runtime threads (default: available parallelism).
    #[arg(long)]
    threads: Option<usize>,
    /// Per-partition memory budget in bytes (default: the engine's default).
    #[arg(long)]
    partition_budget: Option<usize>,
    /// Global memory budget in bytes (default: the engine's default).
    #[arg(long)]
    global_budget: Option<usize>,
    /// Sessions for the memory measurement.
    #[arg(long, default_value_t = 100_000)]
    memory_sessions: i64,
}

struct Noop;

impl Handler for Noop {
    async fn handle(&self, _: &Record, _: Attempt) -> Result<(), HandlerError> {
        Ok(())
    }
}

/// Holds every record until released, so sessions stay busy with a record in flight.
#[derive(Default)]
struct Gate {
    closed: AtomicBool,
    open: Notify,
}

struct Gated(Arc<Gate>);

impl Handler for Gated {
    async fn handle(&self, _: &Record, _: Attempt) -> Result<(), HandlerError> {
        let notified = self.0.open.notified();
        if self.0.closed.load(SeqCst) {
            notified.await;
        }
        Ok(())
    }
}

fn keys(n: usize, prefix: &str) -> Arc<Vec<Bytes>> {
    // Static keys: cloning them is free, as slices of a fetch buffer nearly are.
    Arc::new(
        (0..n)
            .map(|i| Bytes::from_static(format!("{prefix}{i:08}").leak().as_bytes()))
            .collect(),
    )
}

async fn wait_for(stats: &EngineStats, handled: u64) {
    while stats.handled() < handled {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Records per wall-clock second, and per CPU second (the figure that does not depend on what
/// else the machine runs).
fn throughput(
    args: &Args,
    rt: &tokio::runtime::Runtime,
    workers: usize,
) -> anyhow::Result<(f64, Option<f64>)> {
    let (source, handle) = MemSource::new(1000);
    let keys = keys(args.sessions, "session-");
    let value = Bytes::from_static(&[7u8; 100]);
    let per_part = args.records / i64::from(args.partitions);
    for p in 0..args.partitions {
        let tp = TopicPartition::new("bench", p);
        let (keys, value, tp2) = (keys.clone(), value.clone(), tp.clone());
        handle.generate(&tp, per_part, move |off| {
            let k =
                keys[(off as usize).wrapping_mul(31).wrapping_add(p as usize) % keys.len()].clone();
            Record::new(tp2.clone(), off, Some(k), Some(value.clone()))
        });
    }
    let tps: Vec<_> = (0..args.partitions)
        .map(|p| TopicPartition::new("bench", p))
        .collect();
    handle.assign(&tps);
    handle.finish_when_drained();
    let d = EngineConfig::default();
    let cfg = EngineConfig {
        workers,
        global_budget_bytes: args.global_budget.unwrap_or(d.global_budget_bytes),
        partition_budget_bytes: args.partition_budget.unwrap_or(d.partition_budget_bytes),
        ..d
    };
    let engine = Engine::new(cfg, Noop, MemDeadLetters::new());
    let stats = engine.stats();
    let (t0, cpu0) = (Instant::now(), cpu_seconds());
    rt.block_on(engine.run(source, std::future::pending()))
        .context("engine run")?;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds()
        .zip(cpu0)
        .map(|(b, a)| b - a)
        .filter(|c| *c > 0.0);
    let total = (per_part * i64::from(args.partitions)) as u64;
    anyhow::ensure!(
        stats.handled() == total,
        "handled {} of {total}",
        stats.handled()
    );
    for tp in &tps {
        anyhow::ensure!(
            handle.committed(tp).map(|c| c.offset) == Some(per_part),
            "{tp} not fully committed"
        );
    }
    Ok((total as f64 / secs, cpu.map(|c| total as f64 / c)))
}

struct Memory {
    idle_session: f64,
    busy_session: f64,
    evicted_session: f64,
}

fn memory(args: &Args, rt: &tokio::runtime::Runtime, workers: usize) -> anyhow::Result<Memory> {
    let n = args.memory_sessions;
    let idle = Duration::from_secs(3);
    let gate = Arc::new(Gate::default());
    let (source, handle) = MemSource::new(1000);
    let cfg = EngineConfig {
        workers,
        session_idle_timeout: idle,
        global_budget_bytes: 1 << 30,
        partition_budget_bytes: 1 << 30,
        ..EngineConfig::default()
    };
    let engine = Engine::new(cfg, Gated(gate.clone()), MemDeadLetters::new());
    let stats = engine.stats();
    let warm = keys(n as usize, "w-");
    let distinct = keys(n as usize, "m-");
    // Each phase reads its own generated partition and revokes it at the end, so neither the
    // source's log nor the partition's tracker is counted: sessions outlive partitions.
    let phase = |p: i32, keys: &Arc<Vec<Bytes>>| {
        let tp = TopicPartition::new("mem", p);
        let (keys, tp2) = (keys.clone(), tp.clone());
        handle.generate(&tp, n, move |o| {
            Record::new(tp2.clone(), o, Some(keys[o as usize].clone()), None)
        });
        handle.assign(std::slice::from_ref(&tp));
        tp
    };
    rt.block_on(async {
        let run = tokio::spawn(engine.run(source, std::future::pending()));
        // Warm-up with the same load on other session ids, then eviction: grows channels and
        // buffers to this load's size, so the next phases see only what sessions cost.
        let tp = phase(0, &warm);
        wait_for(&stats, n as u64).await;
        handle.revoke(&[tp]).await.context("revoke")?;
        tokio::time::sleep(idle * 2).await;
        let base = live_bytes();

        // Phase 1: n sessions with one finished record each (active, idle, not yet evicted).
        let tp = phase(1, &distinct);
        wait_for(&stats, 2 * n as u64).await;
        handle.revoke(&[tp]).await.context("revoke")?;
        let idle_bytes = live_bytes() - base;
        let active = stats.active_sessions();
        tokio::time::sleep(idle * 2).await;
        let evicted_bytes = live_bytes() - base;
        let after_evict = stats.active_sessions();

        // Phase 2: n sessions each with a record in flight (handler blocked); the partition's
        // tracker entry and the record are included.
        gate.closed.store(true, SeqCst);
        let tp = phase(2, &distinct);
        while stats.active_sessions() < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let busy_bytes = live_bytes() - base;
        gate.closed.store(false, SeqCst);
        gate.open.notify_waiters();
        wait_for(&stats, 3 * n as u64).await;
        let _ = tp;
        handle.close();
        run.await.context("join")?.context("engine run")?;
        anyhow::ensure!(active == n, "expected {n} active sessions, saw {active}");
        anyhow::ensure!(
            after_evict == 0,
            "expected eviction, {after_evict} sessions left"
        );
        Ok(Memory {
            idle_session: idle_bytes as f64 / n as f64,
            busy_session: busy_bytes as f64 / n as f64,
            evicted_session: evicted_bytes as f64 / n as f64,
        })
    })
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let workers = args.workers.unwrap_or(cores);
    let threads = args.threads.unwrap_or(cores);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    let (rate, per_cpu) = throughput(&args, &rt, workers)?;
    let per_cpu = per_cpu.unwrap_or(0.0);
    let mem = memory(&args, &rt, workers)?;
    // This is a report program: its output is the product.
    #[allow(clippy::print_stdout)]
    {
        println!(
            "engine throughput (no-op handler, in-memory source): {:.0} records/s",
            rate
        );
        println!(
            "engine throughput per CPU second (all threads): {:.0} records/cpu-s",
            per_cpu
        );
        println!(
            "memory per active session, idle between records: {:.0} bytes",
            mem.idle_session
        );
        println!(
            "memory per active session, record in flight (record included): {:.0} bytes",
            mem.busy_session
        );
        println!(
            "memory per evicted session: {:.1} bytes",
            mem.evicted_session
        );
        println!(
            "SUMMARY records={} sessions={} partitions={} workers={workers} threads={threads} records_per_sec={rate:.0} records_per_cpu_sec={per_cpu:.0} bytes_per_idle_session={:.0} bytes_per_busy_session={:.0} bytes_per_evicted_session={:.1}",
            args.records,
            args.sessions,
            args.partitions,
            mem.idle_session,
            mem.busy_session,
            mem.evicted_session
        );
    }
    Ok(())
}
