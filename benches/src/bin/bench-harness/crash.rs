//! S6, crash and rebalance: three processes of one system in one group, one killed with SIGKILL
//! every 10 s of the load and started again; their merged logs verified.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use orderly_benches::verify;

use crate::command::RunOpts;
use crate::ctx::Ctx;
use crate::load::{finish_load, start_load};
use crate::outcome::RunResult;
use crate::process::{Running, spawn_system};
use crate::scenario::Scenario;
use crate::system::System;
use crate::topic::create_topic;

/// S6's outcome for one system.
#[derive(Debug, Clone)]
pub struct CrashResult {
    /// Processes killed.
    pub crashes: u64,
    /// Processes started.
    pub processes: usize,
    /// The merged logs' verdict.
    pub result: RunResult,
}

/// S6: three processes of `sys` in one group on a live topic; every 10 s of the load one of them
/// is killed with SIGKILL and started again at once (a new member). When the load has ended and
/// every record was seen (or the time limit passed), all are killed, and the merged logs are
/// verified: a record completed again after a crash or a rebalance is a duplicate, allowed; a
/// record never completed is lost; a first completion out of order is a violation.
pub async fn run_crash(ctx: &Ctx, sc: &Scenario, sys: System) -> CrashResult {
    let mut crashes = 0;
    let mut processes = 0;
    let r = async {
        let topic = ctx.unique(&sc.id.to_lowercase());
        create_topic(ctx, &topic, sc.partitions).await?;
        let group = format!("{topic}-{}", sys.name());
        let dlq = format!("{group}.dlq");
        create_topic(ctx, &dlq, 1).await?;
        let opts = RunOpts {
            crash: true,
            ..RunOpts::default()
        };
        let mut logs = Vec::new();
        let start = |slot: usize, logs: &mut Vec<PathBuf>| -> Result<Running> {
            let n = logs.len();
            let log = ctx.runs_dir.join(format!("{group}-p{slot}-{n}.log"));
            let err = ctx.runs_dir.join(format!("{group}-p{slot}-{n}.stderr"));
            logs.push(log.clone());
            spawn_system(ctx, sc, sys, &topic, &group, &dlq, &log, &err, &opts)
        };
        let mut procs = Vec::new();
        for slot in 0..3 {
            procs.push(start(slot, &mut logs)?);
        }
        processes = 3;
        for p in &mut procs {
            if !p.wait_ready(Duration::from_secs(60)).await {
                bail!(
                    "{} never got partitions (see {})",
                    sys.name(),
                    p.stderr_path.display()
                );
            }
        }
        let load = start_load(ctx, &topic, sc.sessions, sc.rate, sc.seconds)?;
        let t0 = Instant::now();
        let mut next_kill = Duration::from_secs(10);
        while next_kill.as_secs_f64() < sc.seconds {
            tokio::time::sleep_until((t0 + next_kill).into()).await;
            let victim = (crashes % 3) as usize;
            let _ = procs[victim].child.start_kill();
            let _ = procs[victim].child.wait().await;
            crashes += 1;
            procs[victim] = start(victim, &mut logs)?;
            processes += 1;
            next_kill += Duration::from_secs(10);
        }
        let (achieved, ack_p99) = finish_load(load).await?;
        let exp = sc.expected();
        let deadline = Instant::now() + Duration::from_secs_f64(sc.limit_s);
        let mut v;
        loop {
            (_, v) = verify::verify_files(&logs, &exp)?;
            if v.lost == 0 || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let peak = procs.iter().map(Running::peak_kib).max().unwrap_or(0);
        for p in &mut procs {
            let _ = p.child.start_kill();
            let _ = p.child.wait().await;
        }
        // Lines written between the last check and the kill are replays or late completions.
        (_, v) = verify::verify_files(&logs, &exp)?;
        v.rss_kib = peak;
        Ok::<_, anyhow::Error>(RunResult {
            error: (v.lost > 0).then(|| {
                format!(
                    "{} records still missing {} s after the end of the load",
                    v.lost, sc.limit_s
                )
            }),
            verdict: Some(v),
            achieved_rate: achieved,
            load_ack_p99_ms: ack_p99,
            http: None,
            replies: None,
        })
    }
    .await;
    CrashResult {
        crashes,
        processes,
        result: r.unwrap_or_else(|e| RunResult::failed(format!("{e:#}"))),
    }
}
