//! The open-loop load generator (`bench-load`) as a process of its own, and the `key=value`
//! figures the benchmark programs print.

use std::process::Stdio;

use anyhow::{Context as _, Result, bail};
use tokio::process::Command;

use crate::ctx::Ctx;

/// Starts the open-loop load generator as a process of its own.
pub fn start_load(
    ctx: &Ctx,
    topic: &str,
    sessions: u64,
    rate: u64,
    seconds: f64,
) -> Result<tokio::process::Child> {
    Command::new(ctx.bin.join("bench-load"))
        .args(["--bootstrap", &ctx.args.bootstrap, "--topic", topic])
        .args(["--sessions", &sessions.to_string()])
        .args([
            "--rate",
            &rate.to_string(),
            "--seconds",
            &seconds.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting bench-load")
}

/// Waits for the load generator; returns the rate it achieved and its own CreateTime →
/// acknowledged p99 (ms).
pub async fn finish_load(load: tokio::process::Child) -> Result<(Option<f64>, Option<f64>)> {
    let out = load
        .wait_with_output()
        .await
        .context("running bench-load")?;
    if !out.status.success() {
        bail!(
            "load generator failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // The producer's own latency (CreateTime → acknowledged by the broker) is part of every
    // system's latency; printed so a reader can tell the broker's share from the consumer's.
    let ack_p99 = parse_kv(&text, "ack_p99_ms");
    if let (Some(p50), Some(p99)) = (parse_kv(&text, "ack_p50_ms"), ack_p99) {
        eprintln!(
            "      load: CreateTime -> produce acknowledged p50 {p50:.1} ms, p99 {p99:.1} ms"
        );
    }
    Ok((parse_kv(&text, "achieved_rate"), ack_p99))
}

/// The figure `key=value` in `text`, if there and a number.
pub fn parse_kv(text: &str, key: &str) -> Option<f64> {
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
}
