//! `cargo xtask demo`: the main job: a local broker, the seed workload, a real `orderly run`, and a report.
//!
//! Steps: start the local broker (or reuse it), create a topic and its dead-letter topic, write the
//! synthetic records with `orderly seed`, consume them with `orderly run` (the ordering engine in a
//! consumer group, 10 % transient and 0.1 % permanent failures injected), and finally show the
//! group's committed offsets as Apache Kafka's own consumer-groups tool sees them.

use std::process::Command;

use anyhow::{Context, Result, bail};

/// Runs the demo with `records` records over `sessions` sessions and `partitions` partitions.
pub async fn run(records: usize, sessions: usize, partitions: i32) -> Result<()> {
    let broker = crate::kafka::start(None, "1g")?;
    let bs = broker.bootstrap.clone();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let topic = format!("orderly-demo-{stamp}");
    let dlq = format!("{topic}.dlq");
    let group = format!("{topic}-group");
    orderly_testkit::create_topic(&bs, &topic, partitions).await?;
    orderly_testkit::create_topic(&bs, &dlq, 3).await?;
    eprintln!("==> topic {topic} ({partitions} partitions), dead-letter topic {dlq}");

    eprintln!(
        "==> building orderly (release) and writing {records} records for {sessions} sessions"
    );
    orderly(&[
        "seed",
        "--bootstrap",
        &bs,
        "--topic",
        &topic,
        "--records",
        &records.to_string(),
        "--sessions",
        &sessions.to_string(),
    ])?;

    eprintln!("==> orderly run: group {group}, 10 % transient failures, 0.1 % permanent failures");
    orderly(&[
        "run",
        "--bootstrap",
        &bs,
        "--group",
        &group,
        "--topic",
        &topic,
        "--dlq-topic",
        &dlq,
        "--records",
        &records.to_string(),
        "--transient-pct",
        "10",
        "--permanent",
    ])?;

    eprintln!(
        "==> committed offsets, as Apache Kafka's consumer-groups tool sees them (LAG 0 = nothing left)"
    );
    crate::kafka::tool(
        "consumer-groups",
        &[
            "--bootstrap-server".into(),
            bs.clone(),
            "--describe".into(),
            "--group".into(),
            group,
        ],
    )?;
    eprintln!("==> the broker keeps running ({bs}); stop it with: cargo xtask kafka stop");
    Ok(())
}

fn orderly(args: &[&str]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(crate::root())
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "orderly-cli",
            "--bin",
            "orderly",
            "--",
        ])
        .args(args)
        .status()
        .context("running orderly")?;
    if !status.success() {
        bail!(
            "orderly {} failed ({status})",
            args.first().copied().unwrap_or_default()
        );
    }
    Ok(())
}
