//! A run's topics on the broker: created, awaited in the metadata, seeded with a backlog.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use tokio::process::Command;

use crate::ctx::Ctx;
use crate::scenario::Scenario;

/// Creates topic `name` with `partitions` partitions.
pub async fn create_topic(ctx: &Ctx, name: &str, partitions: i32) -> Result<()> {
    Ok(orderly_testkit::create_topic(&ctx.args.bootstrap, name, partitions).await?)
}

/// Waits (up to 30 s) until the broker's metadata lists `topic` with its `partitions`.
pub async fn wait_for_topic(ctx: &Ctx, topic: &str, partitions: i32) -> Result<()> {
    let client = orderly_testkit::client(&ctx.args.bootstrap).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = client
            .list_topics()
            .await
            .with_context(|| format!("listing topics for {topic}"))?
            .into_iter()
            .any(|t| t.name == topic && t.partitions.len() == partitions as usize);
        if listed {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("{topic} not in the broker's metadata 30 s after it was created");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Creates `topic` with the scenario's partitions and writes its records with the load generator.
pub async fn seed_topic(ctx: &Ctx, sc: &Scenario, topic: &str) -> Result<()> {
    create_topic(ctx, topic, sc.partitions).await?;
    let out = Command::new(ctx.bin.join("bench-load"))
        .args(["--bootstrap", &ctx.args.bootstrap, "--topic", topic])
        .args(["--sessions", &sc.sessions.to_string()])
        .args(["--records", &sc.records.to_string()])
        .output()
        .await
        .context("running bench-load")?;
    if !out.status.success() {
        bail!("seeding failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}
