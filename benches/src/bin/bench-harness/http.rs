//! One run of an HTTP scenario: the system posts every record to the shared endpoint
//! (`bench-http-server`), which judges the run from its side.

use std::fmt::Write as _;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use orderly_benches::verify;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::command::http_command;
use crate::ctx::Ctx;
use crate::endpoint::{HTTP_TRANSIENT_PCT, HttpReport};
use crate::load::{finish_load, start_load};
use crate::outcome::RunResult;
use crate::process::{sample_peak, terminate, wait_or_kill};
use crate::scenario::Scenario;
use crate::system::System;
use crate::topic::create_topic;

/// One run of an HTTP scenario: starts the shared endpoint (`bench-http-server`), then the
/// system posting to it, offers the live load if the scenario has one, waits until the endpoint
/// has answered every record done (bounded), stops the system (orderly: SIGTERM, so it drains,
/// commits and leaves; the peers stop by themselves after as many successes as records), stops
/// the endpoint, and verifies the endpoint's log and report. Throughput and latency are the
/// endpoint's: from its first request to its answer to the last record, and from each record's
/// CreateTime to its done answer.
pub async fn run_http(
    ctx: &Ctx,
    sc: &Scenario,
    sys: System,
    shared_topic: Option<&str>,
) -> Result<RunResult> {
    let topic = match shared_topic {
        Some(t) => t.to_owned(),
        None => {
            let t = ctx.unique(&sc.id.to_lowercase());
            create_topic(ctx, &t, sc.partitions).await?;
            t
        }
    };
    let group = format!("{topic}-{}-{}", sc.id.to_lowercase(), sys.name());
    let dlq = format!("{group}.dlq");
    create_topic(ctx, &dlq, 1).await?;
    let log = ctx.runs_dir.join(format!("{group}.log"));
    let report_path = ctx.runs_dir.join(format!("{group}.server.json"));
    let server_err = ctx.runs_dir.join(format!("{group}.server.stderr"));
    let mut server = Command::new(ctx.bin.join("bench-http-server"))
        .args(["--log", &log.display().to_string()])
        .args(["--report", &report_path.display().to_string()])
        .args(["--records", &sc.records.to_string()])
        .args(["--transient-pct", &HTTP_TRANSIENT_PCT.to_string()])
        .args(["--system", sys.name()])
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&server_err)?))
        .kill_on_drop(true)
        .spawn()
        .context("starting bench-http-server")?;
    let stdout = server.stdout.take().context("server stdout")?;
    let (url_tx, url_rx) = tokio::sync::oneshot::channel();
    let (done_tx, mut done) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut url_tx = Some(url_tx);
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            if let Some(u) = l.trim().strip_prefix("LISTEN ") {
                if let Some(tx) = url_tx.take() {
                    let _ = tx.send(u.to_owned());
                }
            } else if l.trim() == "DONE" {
                let _ = done_tx.send(true);
            }
        }
    });
    let url = tokio::time::timeout(Duration::from_secs(10), url_rx)
        .await
        .context("bench-http-server did not start listening")??;

    let sys_log = ctx.runs_dir.join(format!("{group}.peer.log"));
    let stderr_path = ctx.runs_dir.join(format!("{group}.stderr"));
    let (mut cmd, admin) = http_command(ctx, sys, &topic, &group, &dlq, sc, &url, &sys_log)?;
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&stderr_path)?))
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", sys.name()))?;
    let stdout = child.stdout.take().context("stdout")?;
    let (ready_tx, mut ready) = tokio::sync::watch::channel(false);
    if let Some(port) = admin {
        tokio::spawn(orderly_ready(port, ready_tx.clone()));
    }
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            if l.trim() == "READY" {
                let _ = ready_tx.send(true);
            }
        }
    });
    let peak_kib = sample_peak(child.id());
    let is_ready = tokio::time::timeout(Duration::from_secs(60), ready.wait_for(|r| *r))
        .await
        .is_ok_and(|r| r.is_ok());
    if !is_ready {
        let _ = child.kill().await;
        let _ = server.kill().await;
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
                let _ = child.kill().await;
                let _ = server.kill().await;
                return Err(e);
            }
        }
    }
    let limit = Duration::from_secs_f64(sc.limit_s);
    let mut error = None;
    let all_done = tokio::time::timeout(limit, done.wait_for(|d| *d))
        .await
        .is_ok_and(|r| r.is_ok());
    if !all_done {
        error = Some(format!(
            "the endpoint had not answered every record done within {} s{}",
            limit.as_secs(),
            if sc.rate > 0 {
                " of the end of the load"
            } else {
                ""
            }
        ));
    }
    // orderly runs until told to stop; the peers stop by themselves after `records` successes.
    if admin.is_some() || !all_done {
        terminate(&child).await;
    }
    let exited_ok = wait_or_kill(&mut child, Duration::from_secs(30)).await?;
    if !exited_ok && error.is_none() {
        error = Some(format!(
            "{} did not stop cleanly within 30 s (see {})",
            sys.name(),
            stderr_path.display()
        ));
    }
    terminate(&server).await;
    if !wait_or_kill(&mut server, Duration::from_secs(10)).await? {
        bail!(
            "bench-http-server did not write its report (see {})",
            server_err.display()
        );
    }
    let report: HttpReport = serde_json::from_slice(
        &std::fs::read(&report_path)
            .with_context(|| format!("reading {}", report_path.display()))?,
    )
    .with_context(|| format!("parsing {}", report_path.display()))?;
    let (_, mut v) = verify::verify_files(std::slice::from_ref(&log), &sc.expected())?;
    v.rss_kib = peak_kib.load(std::sync::atomic::Ordering::Relaxed);
    if report.violations() > 0 && error.is_none() {
        error = Some(format!(
            "the endpoint saw {} requests of a session while another was in flight, {} records done out of sequence, {} batches not of one session in sequence, {} unreadable requests",
            report.violations_in_flight,
            report.violations_sequence,
            report.violations_batch,
            report.unreadable
        ));
    }
    if sc.rate > 0 && v.seen > 0 && v.latency_samples == 0 && error.is_none() {
        error = Some(
            "answered no record created after its warm-up: it was not consuming while the load ran"
                .to_owned(),
        );
    }
    if let Some(e) = &mut error {
        let _ = write!(e, " after {} of {} records", v.seen, sc.records);
    }
    Ok(RunResult {
        verdict: Some(v),
        error,
        achieved_rate: achieved,
        load_ack_p99_ms: ack_p99,
        http: Some(report),
        replies: None,
    })
}

/// Polls orderly's `/readyz` until it answers 200 (it holds its partitions and fetches).
async fn orderly_ready(port: u16, tx: tokio::sync::watch::Sender<bool>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        if let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            let _ = s
                .write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                .await;
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf).await;
            if buf.starts_with(b"HTTP/1.1 200") {
                let _ = tx.send(true);
                return;
            }
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
