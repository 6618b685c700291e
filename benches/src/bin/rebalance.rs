//! Rebalance benchmark: what a join and a leave cost the partitions that do **not** move, and how
//! soon the ones that do move flow again, per group protocol (classic eager `range`, classic
//! `cooperative-sticky`, the consumer protocol of KIP-848).
//!
//! Run: `cargo run -q --release -p orderly-benches --bin rebalance -- [--runs 3] [--protocol all]`.
//! It uses the test broker (`ORDERLY_BOOTSTRAP`, or one it starts).
//!
//! Per protocol and run: records are produced live (`--rate` per second, `--sessions` sessions over
//! `--partitions` partitions, `--work-ms` of handler work (an async sleep), no failures). Two orderly consumers share the group;
//! after a steady period a third joins, later it leaves (gracefully). Latency of a record = handler
//! done − CreateTime. For each event (join, leave) and the records created in the `--window` after
//! it:
//! * **unmoved**: partitions handled by the same consumer before and after the event and by nobody
//!   else in between; their records' worst latency and p99 (compare with the steady p99);
//! * **moved**: partitions whose owner changed; the time from the event until the new owner handled
//!   its first record of the partition (the worst over moved partitions).

// A report program: its output is the product.
#![allow(clippy::print_stdout)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use clap::Parser;
use orderly_consumer::{Consumer, ConsumerConfig};
use orderly_engine::{Attempt, Handler, HandlerError, Record};
use orderly_group::{
    Assignor, AutoOffsetReset, CooperativeStickyAssignor, GroupProtocol, RangeAssignor,
};

#[derive(Parser)]
#[command(about = "orderly rebalance benchmark (real broker)")]
struct Args {
    /// `classic-range`, `classic-cooperative`, `consumer` or `all`.
    #[arg(long, default_value = "all")]
    protocol: String,
    /// Runs per protocol (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Records produced per second.
    #[arg(long, default_value_t = 2000)]
    rate: u64,
    /// Sessions (keys).
    #[arg(long, default_value_t = 240)]
    sessions: usize,
    /// Partitions.
    #[arg(long, default_value_t = 24)]
    partitions: i32,
    /// Seconds of steady state measured before the join (after a warm-up of the same length).
    #[arg(long, default_value_t = 8)]
    steady: u64,
    /// Seconds after each event whose records are attributed to it.
    #[arg(long, default_value_t = 10)]
    window: u64,
    /// Milliseconds between starting the first and the second member, so their heartbeat timers
    /// are not in step (in step, a classic rebalance is unrealistically short).
    #[arg(long, default_value_t = 250)]
    stagger_ms: u64,
    /// Heartbeat interval of the classic members in milliseconds (the consumer protocol's comes
    /// from the broker: 500 ms on the test broker, so this default compares like with like).
    #[arg(long, default_value_t = 500)]
    classic_heartbeat_ms: u64,
    /// Handler work per record in milliseconds (an async sleep, like a call to another service).
    #[arg(long, default_value_t = 0)]
    work_ms: u64,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// One handled record.
#[derive(Clone, Copy)]
struct Done {
    consumer: u32,
    partition: i32,
    created_ms: i64,
    done_ms: i64,
}

#[derive(Clone)]
struct Timing {
    id: u32,
    log: Arc<Mutex<Vec<Done>>>,
    work: Duration,
}

impl Handler for Timing {
    async fn handle(&self, record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        let d = Done {
            consumer: self.id,
            partition: record.partition.partition,
            created_ms: record.timestamp_ms,
            done_ms: now_ms(),
        };
        if let Ok(mut l) = self.log.lock() {
            l.push(d);
        }
        Ok(())
    }
}

/// What one event cost.
#[derive(Debug, Default, Clone, Copy)]
struct EventCost {
    unmoved: usize,
    unmoved_max_ms: i64,
    unmoved_p99_ms: i64,
    moved: usize,
    moved_flow_ms: i64,
}

#[derive(Debug, Default, Clone, Copy)]
struct RunResult {
    steady_max_ms: i64,
    steady_p50_ms: i64,
    steady_p99_ms: i64,
    join: EventCost,
    leave: EventCost,
}

fn percentile(v: &mut [i64], p: f64) -> i64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// The owner of each partition among records created in `[from, to)`: `Some(id)` if exactly one
/// consumer handled them.
fn owners(log: &[Done], from: i64, to: i64) -> BTreeMap<i32, BTreeSet<u32>> {
    let mut out: BTreeMap<i32, BTreeSet<u32>> = BTreeMap::new();
    for d in log
        .iter()
        .filter(|d| d.created_ms >= from && d.created_ms < to)
    {
        out.entry(d.partition).or_default().insert(d.consumer);
    }
    out
}

fn event_cost(log: &[Done], at: i64, window: i64) -> EventCost {
    let before = owners(log, at - 2000, at);
    let during = owners(log, at, at + window);
    let after = owners(log, at + window, at + window + 2000);
    let mut cost = EventCost::default();
    let mut latencies = Vec::new();
    for (p, b) in &before {
        let (Some(a), Some(d)) = (after.get(p), during.get(p)) else {
            continue;
        };
        if b.len() == 1 && a == b && d == b {
            cost.unmoved += 1;
            latencies.extend(
                log.iter()
                    .filter(|x| {
                        x.partition == *p && x.created_ms >= at && x.created_ms < at + window
                    })
                    .map(|x| x.done_ms - x.created_ms),
            );
        } else if a.len() == 1 && a != b {
            cost.moved += 1;
            let new_owner = a.iter().next().copied().unwrap_or_default();
            let first = log
                .iter()
                .filter(|x| x.partition == *p && x.consumer == new_owner && x.done_ms >= at)
                .map(|x| x.done_ms)
                .min()
                .unwrap_or(at);
            cost.moved_flow_ms = cost.moved_flow_ms.max(first - at);
        }
    }
    cost.unmoved_max_ms = latencies.iter().copied().max().unwrap_or(0);
    cost.unmoved_p99_ms = percentile(&mut latencies, 0.99);
    cost
}

fn config(
    args: &Args,
    bootstrap: &str,
    group: &str,
    topic: &str,
    dlq: &str,
    protocol: &str,
) -> anyhow::Result<ConsumerConfig> {
    let mut c = ConsumerConfig::new([bootstrap], group, [topic]);
    c.dlq_topic = dlq.to_string();
    c.group.auto_offset_reset = AutoOffsetReset::Latest;
    c.group.session_timeout = Duration::from_secs(10);
    c.group.heartbeat_interval = Duration::from_millis(args.classic_heartbeat_ms);
    c.engine.commit_interval = Duration::from_millis(200);
    match protocol {
        "classic-range" => {
            c.group.assignors = vec![Arc::new(RangeAssignor) as Arc<dyn Assignor>];
        }
        "classic-cooperative" => {
            c.group.assignors = vec![Arc::new(CooperativeStickyAssignor) as Arc<dyn Assignor>];
        }
        "consumer" => c.group.protocol = GroupProtocol::Consumer,
        other => anyhow::bail!("unknown protocol {other:?}"),
    }
    Ok(c)
}

async fn run_once(args: &Args, protocol: &str) -> anyhow::Result<RunResult> {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("rebalance-bench", args.partitions).await?;
    let dlq = broker.topic("rebalance-bench-dlq", 1).await?;
    let group = broker.unique_topic("rebalance-bench-group");
    let log: Arc<Mutex<Vec<Done>>> = Arc::new(Mutex::new(Vec::new()));

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let producer = tokio::spawn({
        let bootstrap = vec![broker.bootstrap().to_string()];
        let topic = topic.name.clone();
        let (sessions, rate) = (args.sessions, args.rate);
        async move {
            orderly_consumer::__private::synthetic::produce_live(
                &bootstrap,
                &topic,
                sessions,
                rate,
                async {
                    let _ = stop_rx.await;
                },
            )
            .await
        }
    });
    let spawn = |id: u32| -> anyhow::Result<_> {
        let cfg = config(
            args,
            broker.bootstrap(),
            &group,
            &topic.name,
            &dlq.name,
            protocol,
        )?;
        let consumer = Consumer::new(
            cfg,
            Timing {
                id,
                log: log.clone(),
                work: Duration::from_millis(args.work_ms),
            },
        )?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(consumer.run(async move {
            let _ = stopped.await;
        }));
        Ok((stop, task))
    };
    let sleep = |s: u64| tokio::time::sleep(Duration::from_secs(s));

    let a = spawn(1)?;
    tokio::time::sleep(Duration::from_millis(args.stagger_ms)).await;
    let b = spawn(2)?;
    sleep(args.steady).await; // warm-up: both joined, partitions settled
    let steady_from = now_ms();
    sleep(args.steady).await;
    let join_at = now_ms();
    let c = spawn(3)?;
    sleep(args.window + 4).await;
    let leave_at = now_ms();
    let _ = c.0.send(());
    c.1.await??;
    sleep(args.window + 4).await;
    let _ = stop_tx.send(());
    producer.await??;
    sleep(2).await;
    for (stop, task) in [a, b] {
        let _ = stop.send(());
        task.await??;
    }

    let log = log.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    let mut steady: Vec<i64> = log
        .iter()
        .filter(|d| d.created_ms >= steady_from && d.created_ms < join_at)
        .map(|d| d.done_ms - d.created_ms)
        .collect();
    let window = (args.window * 1000) as i64;
    Ok(RunResult {
        steady_max_ms: steady.iter().copied().max().unwrap_or(0),
        steady_p50_ms: percentile(&mut steady, 0.5),
        steady_p99_ms: percentile(&mut steady, 0.99),
        join: event_cost(&log, join_at, window),
        leave: event_cost(&log, leave_at, window),
    })
}

fn median(mut v: Vec<i64>) -> i64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let protocols: Vec<&str> = match args.protocol.as_str() {
        "all" => vec!["classic-range", "classic-cooperative", "consumer"],
        p => vec![p],
    };
    println!(
        "rebalance benchmark: {} partitions, {} sessions, {} records/s live, handler work {} ms, classic heartbeat {} ms; a 3rd member joins, later leaves",
        args.partitions, args.sessions, args.rate, args.work_ms, args.classic_heartbeat_ms
    );
    println!(
        "{:<20} {:>4} {:>10} {:>10} {:>10} | {:>9} {:>12} {:>12} {:>6} {:>10} | {:>9} {:>12} {:>12} {:>6} {:>10}",
        "protocol",
        "run",
        "steady p50",
        "steady p99",
        "steady max",
        "join: n",
        "unmoved max",
        "unmoved p99",
        "moved",
        "moved flow",
        "leave: n",
        "unmoved max",
        "unmoved p99",
        "moved",
        "moved flow"
    );
    let mut summary = Vec::new();
    for p in protocols {
        let mut results = Vec::new();
        for run in 1..=args.runs {
            let r = run_once(&args, p).await?;
            println!(
                "{:<20} {:>4} {:>8}ms {:>8}ms {:>8}ms | {:>9} {:>10}ms {:>10}ms {:>6} {:>8}ms | {:>9} {:>10}ms {:>10}ms {:>6} {:>8}ms",
                p,
                run,
                r.steady_p50_ms,
                r.steady_p99_ms,
                r.steady_max_ms,
                r.join.unmoved,
                r.join.unmoved_max_ms,
                r.join.unmoved_p99_ms,
                r.join.moved,
                r.join.moved_flow_ms,
                r.leave.unmoved,
                r.leave.unmoved_max_ms,
                r.leave.unmoved_p99_ms,
                r.leave.moved,
                r.leave.moved_flow_ms
            );
            results.push(r);
        }
        let m = |f: fn(&RunResult) -> i64| median(results.iter().map(f).collect());
        summary.push(format!(
            "protocol={p} steady_p99_ms={} steady_max_ms={} join_unmoved_max_ms={} join_unmoved_p99_ms={} join_moved_flow_ms={} leave_unmoved_max_ms={} leave_unmoved_p99_ms={} leave_moved_flow_ms={}",
            m(|r| r.steady_p99_ms),
            m(|r| r.steady_max_ms),
            m(|r| r.join.unmoved_max_ms),
            m(|r| r.join.unmoved_p99_ms),
            m(|r| r.join.moved_flow_ms),
            m(|r| r.leave.unmoved_max_ms),
            m(|r| r.leave.unmoved_p99_ms),
            m(|r| r.leave.moved_flow_ms),
        ));
    }
    println!("medians over {} runs:", args.runs);
    for s in summary {
        println!("{s}");
    }
    Ok(())
}
