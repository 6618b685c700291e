//! `orderly consume`: the ordering engine in a consumer group, handing records to a webhook, a process per record or a long-lived pipe.

use std::process::ExitCode;

use anyhow::{Context, Result};
use orderly_consumer::{Consumer, DriverError};
use orderly_engine::Handler;
use orderly_handlers::{ExecHandler, HttpHandler, PipeHandler};
use tokio::sync::oneshot;

use crate::admin;
use crate::settings::{ConsumeOpts, HandlerChoice, HumanDuration, Resolved};

/// Runs `orderly consume`.
pub async fn run(opts: ConsumeOpts) -> Result<ExitCode> {
    let r = opts.resolve()?;
    let router = r.router.clone();
    match r.handler.clone() {
        HandlerChoice::Http(cfg) => {
            let h = HttpHandler::new(cfg, router)?;
            if let Err(e) = h.probe().await {
                tracing::warn!(
                    url = h.url(),
                    error = %e,
                    "the handler does not accept connections yet; records wait and are retried until it does"
                );
            }
            go(r, h).await
        }
        HandlerChoice::Exec(cfg) => {
            cfg.check().await.context("--exec")?;
            go(r, ExecHandler::new(cfg, router)).await
        }
        HandlerChoice::Pipe(cfg) => {
            cfg.check().await.context("--pipe")?;
            go(r, PipeHandler::spawn(cfg, router)).await
        }
    }
}

/// Completes `first` on the first SIGTERM/SIGINT and `second` on the next one.
fn signals() -> Result<(oneshot::Receiver<()>, oneshot::Receiver<()>)> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let (first_tx, first) = oneshot::channel();
    let (second_tx, second) = oneshot::channel();
    tokio::spawn(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::info!(
            signal = name,
            "stopping: fetching stops, records in flight drain, dead letters flush, offsets commit, then the member leaves the group; signal again to exit at once"
        );
        let _ = first_tx.send(());
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::warn!(
            signal = name,
            "second signal: stopping now: records still running are cancelled (the next owner handles them again), what is done is committed, then the member leaves the group"
        );
        let _ = second_tx.send(());
    });
    Ok((first, second))
}

async fn go<H: Handler>(r: Resolved, handler: H) -> Result<ExitCode> {
    let Resolved {
        consumer: config,
        admin_addr,
        admin_token,
        ..
    } = r;
    let stuck = config.engine.stuck_timeout;
    tracing::info!(
        group = %config.group.group_id,
        topics = ?config.group.topics,
        dlq = %config.dlq_topic,
        workers = config.engine.workers,
        exactly_once = config.exactly_once,
        shutdown_timeout = %HumanDuration(config.engine.drain_timeout),
        "orderly consume starting"
    );
    let dlq_topic = config.dlq_topic.clone();
    let reply_topic = config.reply_topic.clone();
    let consumer = Consumer::new(config, handler)?;
    if let Some(addr) = admin_addr {
        let metrics = admin::install_metrics()?;
        let ready = admin::Readiness {
            stats: consumer.stats(),
            fetch: consumer.fetch_state(),
            stuck,
            fetch_bound: admin::FETCH_ANSWER_BOUND,
        };
        let auth = admin::AdminAuth::new(addr, admin_token.map(|t| t.expose().to_owned()));
        admin::serve(addr, metrics, ready, consumer.parked(), auth).await?;
    }
    let (first, second) = signals()?;
    let shutdown = async move {
        let _ = first.await;
    };
    // The second signal cuts the drain short; `run` still commits what is done and leaves the
    // group before it returns.
    let stop = consumer.stop_handle();
    let stopped = stop.clone();
    let stopper = tokio::spawn(async move {
        if second.await.is_ok() {
            stop.stop_now();
        }
    });
    let res = consumer.run(shutdown).await;
    stopper.abort();
    let s = res.map_err(|e| match e {
        DriverError::UnknownTopic(t) if t == dlq_topic => anyhow::anyhow!(
            "the dead-letter topic {t} does not exist: create it, or name another with --dlq-topic"
        ),
        DriverError::UnknownTopic(t) if Some(&t) == reply_topic.as_ref() => anyhow::anyhow!(
            "the reply topic {t} does not exist: create it, or name another with --reply-topic"
        ),
        e => e.into(),
    })?;
    let how = if stopped.is_stopped() {
        "stopped now: cancelled what was running, committed what was done and left the group"
    } else {
        "stopped: drained, committed and left the group"
    };
    tracing::info!(
        handled = s.handled(),
        dead_lettered = s.dead_lettered(),
        retried = s.retried(),
        commits = s.commits(),
        "{how}"
    );
    Ok(ExitCode::SUCCESS)
}
