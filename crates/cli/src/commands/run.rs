//! `orderly run`: consumes with the ordering engine and the synthetic handler, then prints a report.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use orderly_consumer::{Consumer, ConsumerConfig};

use crate::report;
use crate::settings::OffsetReset;

/// Arguments of `orderly run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
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
    /// Engine workers (session tables). Default: the engine's, one per core.
    #[arg(long)]
    workers: Option<usize>,
    /// Where a partition without a committed offset starts.
    #[arg(long, value_enum, default_value_t = OffsetReset::Earliest)]
    offset_reset: OffsetReset,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9898).
    #[arg(long)]
    metrics_addr: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub(crate) connection: crate::settings::ConnectionFlags,
}

/// Runs `orderly run`.
pub async fn run(a: RunArgs) -> Result<ExitCode> {
    anyhow::ensure!(
        !a.bootstrap.is_empty(),
        "--bootstrap (or ORDERLY_BOOTSTRAP) is required"
    );
    if let Some(addr) = a.metrics_addr {
        metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
            .context("installing the Prometheus exporter")?;
        crate::reference::describe_metrics();
    }
    let mut config = ConsumerConfig::new(a.bootstrap, a.group, a.topic);
    a.connection.apply(&mut config.connection)?;
    if let Some(d) = a.dlq_topic {
        config.dlq_topic = d;
    }
    config.group.auto_offset_reset = a.offset_reset.into();
    config.group.heartbeat_interval = Duration::from_secs(1);
    config.group.session_timeout = Duration::from_secs(10);
    if let Some(w) = a.workers {
        config.engine.workers = w.max(1);
    }
    config.engine.seq_header = Some("seq".into());
    config.engine.retry = orderly_engine::RetryPolicy {
        base: Duration::from_millis(1),
        factor: 2.0,
        cap: Duration::from_millis(100),
        max_attempts: None,
    };
    let handler = orderly_consumer::__private::synthetic::Synthetic::new(
        a.transient_pct,
        a.permanent,
        Duration::from_micros(a.work_us),
    );
    let tally = handler.tally();
    let consumer = Consumer::new(config, handler)?;
    let stats = consumer.stats();
    let done = orderly_consumer::__private::synthetic::stop_after(stats.clone(), a.records);
    let t0 = std::time::Instant::now();
    let final_stats = consumer.run(done).await?;
    let r = report::Report::new(&final_stats, tally.observed(), t0.elapsed());
    r.print();
    Ok(if r.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
