//! `orderly seed`: writes the benchmark's synthetic records.

use std::process::ExitCode;

use anyhow::Result;

/// Arguments of `orderly seed`.
#[derive(clap::Args, Debug)]
pub struct SeedArgs {
    /// Bootstrap brokers, `host:port[,host:port]`.
    #[arg(long, env = "ORDERLY_BOOTSTRAP", value_delimiter = ',')]
    bootstrap: Vec<String>,
    /// Topic to write to (must exist).
    #[arg(long)]
    topic: String,
    /// Number of records.
    #[arg(long, default_value_t = 50_000)]
    records: usize,
    /// Number of sessions the records are spread over, round robin.
    #[arg(long, default_value_t = 10)]
    sessions: usize,
}

/// Runs `orderly seed`.
pub async fn run(a: SeedArgs) -> Result<ExitCode> {
    anyhow::ensure!(
        !a.bootstrap.is_empty(),
        "--bootstrap (or ORDERLY_BOOTSTRAP) is required"
    );
    anyhow::ensure!(a.sessions > 0, "--sessions must be at least 1");
    let t0 = std::time::Instant::now();
    orderly_consumer::__private::synthetic::produce_seed(
        &a.bootstrap,
        &a.topic,
        a.records,
        a.sessions,
    )
    .await?;
    println!(
        "produced {} records for {} sessions to {} in {:.2?}",
        a.records,
        a.sessions,
        a.topic,
        t0.elapsed()
    );
    Ok(ExitCode::SUCCESS)
}
