//! A harness run from start to end: the systems this machine runs, every selected scenario by
//! its procedure with the systems interleaved, the failed runs listed, the report written.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};

use crate::args::Args;
use crate::available::available_systems;
use crate::command::RunOpts;
use crate::crash::{CrashResult, run_crash};
use crate::ctx::Ctx;
use crate::markdown::{floor_report, write_results};
use crate::max::s2_max_all;
use crate::outcome::{Results, RunResult, StallRows, describe, print_result};
use crate::product::product_ratio;
use crate::raw_fetch::{RawFetch, raw_fetch};
use crate::report::Report;
use crate::run::run_one;
use crate::scenario::{Kind, STALL, Scenario, scenarios};
use crate::system::System;
use crate::topic::seed_topic;
use crate::warm_up::warm_up;

/// The backlog topics seeded so far, by (records, sessions, partitions, repetition): scenarios
/// with the same records share them.
type BacklogTopics = BTreeMap<(u64, u64, i32, usize), String>;

/// Runs the harness as `args` say.
pub async fn run(args: Args) -> Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("repository root")?
        .to_path_buf();
    let bin = std::env::current_exe()?
        .parent()
        .context("binary directory")?
        .to_path_buf();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let runs_dir = root
        .join("target")
        .join("bench-runs")
        .join(stamp.to_string());
    std::fs::create_dir_all(&runs_dir)?;

    let systems = available_systems(&args, &root, &bin).await;
    let ctx = Ctx {
        args: args.clone(),
        root,
        bin,
        runs_dir,
        systems,
        stamp,
        counter: Default::default(),
    };
    let started = Instant::now();
    let scenarios = scenarios(&args, &ctx.systems);
    if !(args.smoke || args.no_warmup) {
        warm_up(&ctx).await?;
    }
    let mut report = Report::default();
    let mut backlog_topics = BacklogTopics::new();
    for sc in &scenarios {
        eprintln!(
            "==> {} ({}): {} records, {} sessions, {} partitions, {}",
            sc.id,
            sc.what,
            sc.records,
            sc.sessions,
            sc.partitions,
            if sc.rate > 0 {
                format!("{} records/s offered for {} s", sc.rate, sc.seconds)
            } else {
                "backlog".into()
            }
        );
        match sc.kind {
            Kind::Plain | Kind::Http | Kind::Reply => {
                let (results, raw) = run_repeated(&ctx, sc, &mut backlog_topics).await?;
                report.scenarios.push((sc.clone(), results, raw));
            }
            Kind::Max => {
                let searches = s2_max_all(&ctx, sc, if args.quick { 4 } else { 7 }).await;
                report.s2max = Some((sc.clone(), searches));
            }
            Kind::Stall => {
                let rows = run_stall(&ctx, sc).await;
                report.s4 = Some((sc.clone(), rows));
            }
            Kind::Crash => {
                let rows = run_crash_all(&ctx, sc).await;
                report.s6 = Some((sc.clone(), rows));
            }
        }
    }
    let failed = report.failed();
    eprintln!("==> done in {:.0} s", started.elapsed().as_secs_f64());
    if args.smoke {
        if !failed.is_empty() {
            bail!("smoke run failed: {failed:?}");
        }
        eprintln!("smoke run verified: order kept, nothing lost");
        return Ok(());
    }
    if !args.no_write {
        write_results(&ctx, &report, started.elapsed()).await?;
    }
    for f in &failed {
        eprintln!("FAILED RUN: {f}");
    }
    Ok(())
}

/// A scenario of one run per system and repetition, the systems in a rotating order; each
/// repetition of a backlog on a topic of its own that every system reads in a group of its own,
/// and, where the scenario says, the raw fetch limit on that topic.
async fn run_repeated(
    ctx: &Ctx,
    sc: &Scenario,
    backlog_topics: &mut BacklogTopics,
) -> Result<(Results, Vec<RawFetch>)> {
    let mut results: BTreeMap<System, Vec<RunResult>> = BTreeMap::new();
    let mut raw = Vec::new();
    for rep in 0..sc.reps(&ctx.args) {
        // Backlog scenarios: one topic per repetition, consumed by every system in its own group.
        // Scenarios with the same records (the S3 work levels) share their topics (each system and
        // scenario reads it in a group of its own).
        let shared_topic = if sc.rate == 0 {
            let key = (sc.records, sc.sessions, sc.partitions, rep);
            match backlog_topics.get(&key) {
                Some(t) => Some(t.clone()),
                None => {
                    let t = ctx.unique(&sc.id.to_lowercase());
                    seed_topic(ctx, sc, &t).await?;
                    backlog_topics.insert(key, t.clone());
                    Some(t)
                }
            }
        } else {
            None
        };
        // The raw fetch takes its turn in the rotation like a system (`None`), so it is not
        // always measured in the same place, after the slowest system.
        let raw_topic = shared_topic.as_deref().filter(|_| sc.raw_fetch);
        let mut order: Vec<Option<System>> = sc.systems.iter().copied().map(Some).collect();
        if raw_topic.is_some() {
            order.push(None);
        }
        let n = order.len().max(1);
        order.rotate_left(rep % n);
        for slot in order {
            match (slot, raw_topic) {
                (Some(sys), _) => {
                    let r =
                        run_one(ctx, sc, sys, shared_topic.as_deref(), &RunOpts::default()).await;
                    print_result(sc, sys, &r);
                    results.entry(sys).or_default().push(r);
                }
                (None, Some(t)) => raw.push(raw_fetch(ctx, sc, t).await),
                (None, None) => {}
            }
        }
    }
    if let Some(floor) = floor_report(sc, &results) {
        eprintln!("    {floor}");
    }
    if let Some(r) = product_ratio(&results) {
        eprintln!(
            "    the product binary (orderly run) ÷ the library (bench-orderly), medians: {:.0} %",
            r * 100.0
        );
    }
    Ok((results, raw))
}

/// S4: per repetition, each system once as is and once with one session stalled.
async fn run_stall(ctx: &Ctx, sc: &Scenario) -> StallRows {
    let mut rows = StallRows::new();
    for rep in 0..sc.reps(&ctx.args) {
        let mut order = sc.systems.clone();
        let n = order.len().max(1);
        order.rotate_left(rep % n);
        for sys in order {
            let base = run_one(ctx, sc, sys, None, &RunOpts::default()).await;
            print_result(sc, sys, &base);
            let stalled = RunOpts {
                stall: Some(STALL),
                ..RunOpts::default()
            };
            let r = run_one(ctx, sc, sys, None, &stalled).await;
            print_result(sc, sys, &r);
            rows.entry(sys).or_default().push((base, r));
        }
    }
    rows
}

/// S6 for every system, one after another.
async fn run_crash_all(ctx: &Ctx, sc: &Scenario) -> Vec<(System, CrashResult)> {
    let mut rows = Vec::new();
    for sys in &sc.systems {
        let r = run_crash(ctx, sc, *sys).await;
        eprintln!(
            "    {} {:<18} {} crashes, {} processes: {} {}",
            sc.id,
            sys.name(),
            r.crashes,
            r.processes,
            if r.result.ok() { "ok    " } else { "FAILED" },
            describe(&r.result)
        );
        rows.push((*sys, r));
    }
    rows
}
