//! `--http` against the in-process handler: the same backlog (1,000 sessions by default) consumed twice by the engine, once with the synthetic handler in the process and once with `orderly_handlers::HttpHandler` (what `orderly consume --http` runs) posting to a minimal local HTTP server with the same failure rules.
//!
//! Run: `cargo run -p orderly-benches --release --bin http_handler [records] [sessions]`.
//! Prints figures; it is not a timed test. Both runs use the same engine settings (retry base 1 ms,
//! cap 100 ms, no attempt limit; 10 % transient failures on the first attempt, 0.1 % permanent).
//! Throughput counts from the first record handed to a handler to the last terminal record.

// A benchmark program reports on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use orderly_consumer::synthetic::{Synthetic, percentile, produce_seed};
use orderly_consumer::{Consumer, ConsumerConfig};
use orderly_engine::{EngineStats, Handler, RetryPolicy};
use orderly_group::AutoOffsetReset;
use orderly_handlers::{HttpConfig, HttpHandler, SessionRouter};
use orderly_testkit::webhook::{Rules, Webhook};

fn config(bootstrap: &str, group: &str, topic: &str, dlq: &str) -> ConsumerConfig {
    let mut c = ConsumerConfig::new([bootstrap], group, [topic]);
    c.dlq_topic = dlq.to_owned();
    c.group.auto_offset_reset = AutoOffsetReset::Earliest;
    c.group.heartbeat_interval = Duration::from_secs(1);
    c.group.session_timeout = Duration::from_secs(10);
    c.engine.seq_header = Some("seq".into());
    c.engine.attempt_timeout = None;
    c.engine.retry = RetryPolicy {
        base: Duration::from_millis(1),
        factor: 2.0,
        cap: Duration::from_millis(100),
        max_attempts: None,
    };
    c
}

/// Runs one consumer until `records` are terminal; returns (records/s from the first terminal
/// record, engine stats).
async fn consume<H: Handler>(
    c: ConsumerConfig,
    h: H,
    records: u64,
) -> anyhow::Result<(f64, EngineStats)> {
    let consumer = Consumer::new(c, h)?;
    let stats = consumer.stats();
    let s = stats.clone();
    let watch = async move {
        let mut first: Option<Instant> = None;
        loop {
            let n = s.handled() + s.dead_lettered();
            if n > 0 && first.is_none() {
                first = Some(Instant::now());
            }
            if n >= records {
                return first.map_or(Duration::ZERO, |f| f.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let run = tokio::spawn(consumer.run(async move {
        let _ = rx.await;
    }));
    let span = watch.await;
    let _ = tx.send(());
    run.await??;
    Ok((records as f64 / span.as_secs_f64().max(1e-9), stats))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let records: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let sessions: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000);
    let broker = orderly_testkit::broker();
    let bs = broker.bootstrap().to_owned();
    let topic = broker.unique_topic("bench-http");
    let dlq = format!("{topic}.dlq");
    broker.create_topic(&topic, 12).await?;
    broker.create_topic(&dlq, 3).await?;
    eprintln!("writing {records} records for {sessions} sessions to {topic} (12 partitions)");
    produce_seed(
        std::slice::from_ref(&bs),
        &topic,
        records as usize,
        sessions,
    )
    .await?;

    eprintln!("in-process synthetic handler ...");
    let h = Synthetic::new(10, true, Duration::ZERO);
    let observed = Arc::clone(&h.observed);
    let (rate_in, s_in) = consume(
        config(&bs, &format!("{topic}-in"), &topic, &dlq),
        h,
        records,
    )
    .await?;
    let (p99_in, viol_in) = {
        let mut o = observed.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        o.latencies_us.sort_unstable();
        (
            percentile(&o.latencies_us, 99.0) as f64 / 1000.0,
            o.violations,
        )
    };

    eprintln!("HttpHandler to a local HTTP server ...");
    let hook = Webhook::start(Rules {
        transient_pct: 10,
        permanent: true,
        work: Duration::ZERO,
    })
    .await?;
    let h = HttpHandler::new(HttpConfig::new(hook.url()), SessionRouter::default())?;
    let (rate_http, s_http) = consume(
        config(&bs, &format!("{topic}-http"), &topic, &dlq),
        h,
        records,
    )
    .await?;
    let r = hook.report();

    println!("records {records}, sessions {sessions}, 12 partitions, backlog");
    println!(
        "{:<28} {:>12} {:>22} {:>11} {:>13}",
        "handler", "records/s", "p99 CreateTime->done", "violations", "dead letters"
    );
    println!(
        "{:<28} {:>12.0} {:>19.0} ms {:>11} {:>13}",
        "in-process (synthetic)",
        rate_in,
        p99_in,
        viol_in + s_in.ordering_violations(),
        s_in.dead_lettered()
    );
    println!(
        "{:<28} {:>12.0} {:>19.0} ms {:>11} {:>13}",
        "--http (HttpHandler, h1)",
        rate_http,
        r.quantile_ms(0.99),
        r.violations + s_http.ordering_violations(),
        s_http.dead_lettered()
    );
    println!(
        "http / in-process throughput: {:.2} (goal: at least 0.5)",
        rate_http / rate_in.max(1e-9)
    );
    Ok(())
}
