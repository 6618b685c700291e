//! `orderly`: the command-line binary of the orderly Kafka consumer stack.
//!
//! `orderly seed` writes the benchmark's synthetic records; `orderly run` consumes a topic with
//! the ordering engine and a synthetic handler (deterministic failure injection, per-session
//! order check) and prints a report. The binary, not the libraries, installs logging and the
//! Prometheus exporter.

// A command-line tool reports to its user on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod report;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use orderly_consumer::{Consumer, ConsumerConfig};
use orderly_group::AutoOffsetReset;

#[derive(Parser)]
#[command(
    name = "orderly",
    version,
    about = "Per-session ordered Kafka consumption: parallel across sessions, in order within each",
    long_about = "orderly consumes Kafka topics whose partitions carry many interleaved sessions. Records \
                  of one session are handled one at a time in offset order; sessions run in parallel; \
                  transient failures are retried in place, permanent ones go to a dead-letter topic; \
                  offsets are committed only up to the highest contiguous finished offset.\n\n\
                  Logging: RUST_LOG (default info)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Produce synthetic records: key `s-000042`, 100-byte value, headers `event-id` and `seq`
    /// (1, 2, 3 per session), partitioned like Java's default partitioner.
    Seed {
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
    },
    /// Consume with the ordering engine and a synthetic handler, then print a report.
    ///
    /// The handler fails a record transiently on its first attempt when fnv1a(event-id) % 100 <
    /// --transient-pct, permanently when fnv1a(event-id) % 1000 == 999 (if --permanent), and checks
    /// that each session's `seq` header arrives 1, 2, 3, ...
    Run {
        /// Bootstrap brokers, `host:port[,host:port]`.
        #[arg(long, env = "ORDERLY_BOOTSTRAP", value_delimiter = ',')]
        bootstrap: Vec<String>,
        /// Consumer group id.
        #[arg(long, default_value = "orderly")]
        group: String,
        /// Topics to consume.
        #[arg(long, required = true, value_delimiter = ',')]
        topic: Vec<String>,
        /// Dead-letter topic (must exist). Default `<group>.dlq`.
        #[arg(long)]
        dlq_topic: Option<String>,
        /// Stop after this many records reached a terminal state (handled or dead-lettered);
        /// without it, run until Ctrl-C.
        #[arg(long)]
        records: Option<u64>,
        /// Percentage of records failing transiently on their first attempt.
        #[arg(long, default_value_t = 10)]
        transient_pct: u64,
        /// Also fail 0.1 % of records permanently (they go to the DLQ).
        #[arg(long)]
        permanent: bool,
        /// Simulated handler work per record, in microseconds (an async sleep).
        #[arg(long, default_value_t = 0)]
        work_us: u64,
        /// Engine workers (session tables).
        #[arg(long, default_value_t = 8)]
        workers: usize,
        /// Where to start without a committed offset: earliest or latest.
        #[arg(long, default_value = "earliest")]
        offset_reset: String,
        /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9898).
        #[arg(long)]
        metrics_addr: Option<std::net::SocketAddr>,
    },
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<std::process::ExitCode> {
    match cli.command {
        Command::Seed {
            bootstrap,
            topic,
            records,
            sessions,
        } => {
            anyhow::ensure!(
                !bootstrap.is_empty(),
                "--bootstrap (or ORDERLY_BOOTSTRAP) is required"
            );
            anyhow::ensure!(sessions > 0, "--sessions must be at least 1");
            let t0 = std::time::Instant::now();
            orderly_consumer::synthetic::produce_seed(&bootstrap, &topic, records, sessions)
                .await?;
            println!(
                "produced {records} records for {sessions} sessions to {topic} in {:.2?}",
                t0.elapsed()
            );
            Ok(std::process::ExitCode::SUCCESS)
        }
        Command::Run {
            bootstrap,
            group,
            topic,
            dlq_topic,
            records,
            transient_pct,
            permanent,
            work_us,
            workers,
            offset_reset,
            metrics_addr,
        } => {
            anyhow::ensure!(
                !bootstrap.is_empty(),
                "--bootstrap (or ORDERLY_BOOTSTRAP) is required"
            );
            if let Some(addr) = metrics_addr {
                metrics_exporter_prometheus::PrometheusBuilder::new()
                    .with_http_listener(addr)
                    .install()
                    .context("installing the Prometheus exporter")?;
            }
            let mut config = ConsumerConfig::new(bootstrap, group, topic);
            if let Some(d) = dlq_topic {
                config.dlq_topic = d;
            }
            config.group.auto_offset_reset = match offset_reset.as_str() {
                "earliest" => AutoOffsetReset::Earliest,
                "latest" => AutoOffsetReset::Latest,
                other => anyhow::bail!("--offset-reset must be earliest or latest, not {other:?}"),
            };
            config.group.heartbeat_interval = Duration::from_secs(1);
            config.group.session_timeout = Duration::from_secs(10);
            config.engine.workers = workers.max(1);
            config.engine.seq_header = Some("seq".into());
            config.engine.retry = orderly_engine::RetryPolicy {
                base: Duration::from_millis(1),
                factor: 2.0,
                cap: Duration::from_millis(100),
                max_attempts: None,
            };
            let handler = orderly_consumer::synthetic::Synthetic::new(
                transient_pct,
                permanent,
                Duration::from_micros(work_us),
            );
            let observed = Arc::clone(&handler.observed);
            let consumer = Consumer::new(config, handler)?;
            let stats = consumer.stats();
            let done = orderly_consumer::synthetic::stop_after(stats.clone(), records);
            let t0 = std::time::Instant::now();
            let final_stats = consumer.run(done).await?;
            let r = report::Report::new(&final_stats, &observed, t0.elapsed());
            r.print();
            Ok(if r.ok() {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            })
        }
    }
}

/// The error and its causes, each cause only if the message so far does not already say it (our
/// library errors include their cause in their own message).
fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
}
