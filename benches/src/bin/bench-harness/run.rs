//! One run of one system on one scenario, judged by its handler log (and, in the reply
//! scenarios, by its reply topic read with `read_committed`).

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{Result, bail};
use orderly_benches::{replies, verify};

use crate::command::RunOpts;
use crate::ctx::Ctx;
use crate::http::run_http;
use crate::load::{finish_load, start_load};
use crate::outcome::RunResult;
use crate::process::{settle, spawn_system};
use crate::product::run_product;
use crate::scenario::{Kind, Scenario};
use crate::system::System;
use crate::topic::{create_topic, wait_for_topic};

/// Runs one system on one scenario: starts it, waits until it owns partitions, offers the live
/// load if the scenario has one, waits for it to finish (bounded), and verifies its log.
pub async fn run_one(
    ctx: &Ctx,
    sc: &Scenario,
    sys: System,
    shared_topic: Option<&str>,
    opts: &RunOpts,
) -> RunResult {
    settle().await;
    let r = if sc.kind == Kind::Http {
        run_http(ctx, sc, sys, shared_topic).await
    } else if sys == System::OrderlyRun {
        run_product(ctx, sc, shared_topic).await
    } else {
        run_logged(ctx, sc, sys, shared_topic, opts).await
    };
    r.unwrap_or_else(|e| RunResult::failed(format!("{e:#}")))
}

/// A run judged by the handler log the system writes: [`run_one`] for every system but the
/// product binary's row and the HTTP scenarios.
async fn run_logged(
    ctx: &Ctx,
    sc: &Scenario,
    sys: System,
    shared_topic: Option<&str>,
    opts: &RunOpts,
) -> Result<RunResult> {
    let topic = match shared_topic {
        Some(t) => t.to_owned(),
        None => {
            let t = ctx.unique(&sc.id.to_lowercase());
            create_topic(ctx, &t, sc.partitions).await?;
            t
        }
    };
    let group = format!(
        "{topic}-{}-{}{}",
        sc.id.to_lowercase(),
        sys.name(),
        if opts.stall.is_some() { "-stall" } else { "" }
    );
    let dlq = format!("{group}.dlq");
    create_topic(ctx, &dlq, 1).await?;
    // Reply scenarios: a reply topic of the run's own, as many partitions as the input.
    let reply_topic = if sc.kind == Kind::Reply {
        let t = format!("{group}.replies");
        create_topic(ctx, &t, sc.partitions).await?;
        // Until the broker's metadata lists it, a producer's first write waits out its own
        // unknown-topic backoff (franz-go's took seconds), which would be timed as the system's.
        wait_for_topic(ctx, &t, sc.partitions).await?;
        Some(t)
    } else {
        None
    };
    let opts = &RunOpts {
        reply_topic: reply_topic.clone(),
        ..opts.clone()
    };
    let log = ctx.runs_dir.join(format!("{group}.log"));
    let stderr_path = ctx.runs_dir.join(format!("{group}.stderr"));
    let mut run = spawn_system(ctx, sc, sys, &topic, &group, &dlq, &log, &stderr_path, opts)?;
    if !run.wait_ready(Duration::from_secs(60)).await {
        let _ = run.child.kill().await;
        bail!(
            "{} never got partitions (see {})",
            sys.name(),
            stderr_path.display()
        );
    }
    let (mut achieved, mut ack_p99) = (None, None);
    if sc.rate > 0 {
        let load = start_load(ctx, &topic, sc.sessions, sc.rate, sc.seconds)?;
        match finish_load(load).await {
            Ok((a, p)) => (achieved, ack_p99) = (a, p),
            Err(e) => {
                let _ = run.child.kill().await;
                return Err(e);
            }
        }
    }
    let limit = Duration::from_secs_f64(sc.limit_s);
    let mut error = None;
    match tokio::time::timeout(limit, run.child.wait()).await {
        Ok(Ok(st)) if st.success() => {}
        Ok(Ok(st)) => bail!(
            "{} exited with {st} (see {})",
            sys.name(),
            run.stderr_path.display()
        ),
        Ok(Err(e)) => bail!("waiting for {}: {e}", sys.name()),
        Err(_) => {
            let _ = run.child.kill().await;
            error = Some(format!(
                "did not finish within {} s{}: killed",
                limit.as_secs(),
                if sc.rate > 0 {
                    " of the end of the load"
                } else {
                    ""
                }
            ));
        }
    }
    let (_, mut v) = verify::verify_files(std::slice::from_ref(&log), &sc.expected())?;
    v.rss_kib = v.rss_kib.max(run.peak_kib());
    if sc.rate > 0 && v.seen > 0 && v.latency_samples == 0 && error.is_none() {
        // A system that printed READY but made its first handler call after the whole load has
        // no latency: its percentiles would be zeros that count as the best run in the median.
        error = Some(
            "handled no record created after its warm-up (its first handler call came after the \
             load): it was not consuming while the load ran, so there is no latency to report"
                .to_owned(),
        );
    }
    if let Some(e) = &mut error {
        let _ = write!(e, " after {} of {} records", v.seen, sc.records);
    }
    // Whatever the system did, its reply topic holds what a read_committed reader gets.
    let replies = match &reply_topic {
        Some(t) => {
            let seen = replies::read_committed(&ctx.args.bootstrap, t, REPLY_READ_IDLE).await?;
            Some(replies::check(&seen, sc.records, sc.sessions))
        }
        None => None,
    };
    Ok(RunResult {
        verdict: Some(v),
        error,
        achieved_rate: achieved,
        load_ack_p99_ms: ack_p99,
        http: None,
        replies,
    })
}

/// How long the reply check's reader waits for another record before it counts what it read: the
/// system has exited by then, so what is committed is all there.
const REPLY_READ_IDLE: Duration = Duration::from_secs(5);
