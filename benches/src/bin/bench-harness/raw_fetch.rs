//! The raw fetch limit on a scenario's topic: orderly's own fetch loop without the engine, and
//! Apache Kafka's ConsumerPerformance.

use tokio::process::Command;

use crate::ctx::Ctx;
use crate::load::parse_kv;
use crate::process::settle;
use crate::scenario::Scenario;

/// The raw fetch limit on the same topic: orderly's own fetch loop without the engine, and Apache
/// Kafka's ConsumerPerformance.
#[derive(Debug, Clone, Default)]
pub struct RawFetch {
    /// orderly's fetch loop (`fetch`), records/s.
    pub orderly_fetch: Option<f64>,
    /// ConsumerPerformance's fetch phase, records/s.
    pub consumer_perf_fetch: Option<f64>,
    /// ConsumerPerformance with its group join, records/s.
    pub consumer_perf_total: Option<f64>,
}

/// Reads `topic` (the scenario's records) once with each; a figure a tool did not give is `None`.
pub async fn raw_fetch(ctx: &Ctx, sc: &Scenario, topic: &str) -> RawFetch {
    settle().await;
    let mut r = RawFetch::default();
    if let Ok(out) = Command::new(ctx.bin.join("fetch"))
        .args([sc.records.to_string(), topic.to_owned()])
        .env("ORDERLY_BOOTSTRAP", &ctx.args.bootstrap)
        .output()
        .await
    {
        r.orderly_fetch = parse_kv(&String::from_utf8_lossy(&out.stdout), "fetch_rate");
    }
    let records = sc.records.to_string();
    if let Ok(out) = orderly_testkit::run_tool(
        "consumer-perf",
        &[
            "--bootstrap-server",
            &ctx.args.bootstrap,
            "--topic",
            topic,
            "--messages",
            &records,
            "--timeout",
            "60000",
        ],
        None,
    )
    .await
    {
        // CSV: start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,
        // nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(line) = text.lines().rev().find(|l| l.split(',').count() >= 10) {
            let f: Vec<&str> = line.split(',').map(str::trim).collect();
            r.consumer_perf_total = f[5].parse().ok();
            r.consumer_perf_fetch = f[9].parse().ok();
        }
    }
    eprintln!(
        "    raw fetch: orderly fetch loop {:?} records/s, ConsumerPerformance {:?} records/s (fetch phase)",
        r.orderly_fetch.map(|v| v.round()),
        r.consumer_perf_fetch.map(|v| v.round())
    );
    r
}
