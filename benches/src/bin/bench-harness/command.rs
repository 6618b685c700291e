//! Each system's command line: the shared workload options in its spelling, its tuned settings,
//! and what a run adds (a stalled session, crash mode, a reply topic, an HTTP endpoint).

use std::path::Path;

use anyhow::{Result, bail};
use orderly_benches::workload;
use tokio::process::Command;

use crate::ctx::Ctx;
use crate::scenario::Scenario;
use crate::system::{GO_TUNED_ARGS, ORDERLY_BATCH_ARGS, PC_VERTX_TUNED_ARGS, System};

/// What a run adds to a system's command line.
#[derive(Debug, Clone, Default)]
pub struct RunOpts {
    /// S4: (session index, stall from ms after the first record handled, for ms).
    pub stall: Option<(u64, u64, u64)>,
    /// S6: write every log line with its own `write`, run until killed, 10 s session timeout.
    pub crash: bool,
    /// Reply scenarios: the topic the system's replies go to.
    pub reply_topic: Option<String>,
}

/// The Go peer's tuned settings in `sc` (benches/peers/README.md says why each): franz-go's fetch
/// max wait at 20 ms instead of 5 s, and each session's channel raised from the design's 256 to the
/// records the scenario gives a session where they are more (at most 10,000): a full channel
/// blocks the worker that feeds it, and with it every other session of that worker (S1: 5,000
/// records per session), while a channel far deeper than a session's records only adds memory the
/// garbage collector scans (S3: 10,000 sessions of 100 records).
pub fn go_tuned_args(sc: &Scenario) -> Vec<String> {
    let per_session = sc.records.div_ceil(sc.sessions.max(1)).clamp(256, 10_000);
    vec![
        "-fetch-max-wait".into(),
        "20ms".into(),
        "-session-chan".into(),
        per_session.to_string(),
    ]
}

/// Parallel Consumer's tuned settings in `sc` (benches/peers/README.md says why each):
/// `maxConcurrency` 1000, its README's example value, instead of the default 16. Its batch size
/// stays 1 (a batch fails and is retried as a whole, so it cannot express a record failing alone)
/// and its commit mode the default (asynchronous periodic commits).
pub fn pc_tuned_args(sc: &Scenario) -> Vec<String> {
    let _ = sc;
    vec!["--max-concurrency".into(), "1000".into()]
}

/// The command line of `sys` on `topic` in `group`, its dead letters to `dlq`, its handler log
/// to `log` (the HTTP scenarios' systems: [`http_command`]).
#[allow(clippy::too_many_arguments)]
pub fn system_command(
    ctx: &Ctx,
    sys: System,
    topic: &str,
    group: &str,
    dlq: &str,
    sc: &Scenario,
    log: &Path,
    opts: &RunOpts,
) -> Command {
    // S6 processes run until they are killed.
    let records = if opts.crash { u64::MAX / 4 } else { sc.records }.to_string();
    let fail = sc.fail_mod.to_string();
    let work = sc.work_us.to_string();
    let log = log.display().to_string();
    let b = &ctx.args.bootstrap;
    // The same options in each system's spelling: `--x v` (orderly, Java) or `-x v` (Go).
    let mut extra: Vec<(&str, String)> = Vec::new();
    if let Some((s, after, len)) = opts.stall {
        extra.push(("stall-session", workload::session_key(s as usize)));
        extra.push(("stall-after-ms", after.to_string()));
        extra.push(("stall-for-ms", len.to_string()));
    }
    if let Some(t) = &opts.reply_topic {
        extra.push(("reply-topic", t.clone()));
    }
    if opts.crash {
        extra.push(("log-flush", "true".into()));
        // orderly's bench runs with a 10 s session timeout; the peers get the same in S6.
        match sys.family() {
            "go-seed" => extra.push(("session-timeout", "10s".into())),
            "parallel-consumer" => extra.push(("session-timeout-ms", "10000".into())),
            _ => {}
        }
    }
    let extra_args = |dash: &str| -> Vec<String> {
        extra
            .iter()
            .flat_map(|(k, v)| {
                if *k == "log-flush" && dash == "--" && sys == System::Orderly {
                    vec![format!("--{k}")]
                } else if *k == "log-flush" && dash == "-" {
                    vec![format!("-{k}={v}")]
                } else {
                    vec![format!("{dash}{k}"), v.clone()]
                }
            })
            .collect()
    };
    // The HTTP scenarios' systems are started by `http_command`; here each runs as its family.
    match sys.family() {
        "orderly" => {
            let mut c = Command::new(ctx.bin.join("bench-orderly"));
            c.args([
                "--bootstrap",
                b,
                "--topic",
                topic,
                "--group",
                group,
                "--dlq-topic",
                dlq,
            ])
            .args([
                "--records",
                &records,
                "--fail-mod",
                &fail,
                "--work-us",
                &work,
                "--log",
                &log,
            ]);
            c.args(extra_args("--"));
            c.args(sys.reply_args(group));
            c
        }
        "go-seed" => {
            let mut c = Command::new(ctx.root.join("benches/peers/go-seed/target/go-seed"));
            c.args(["-bootstrap", b, "-topic", topic, "-group", group])
                .args([
                    "-records",
                    &records,
                    "-fail-mod",
                    &fail,
                    "-work-us",
                    &work,
                    "-log",
                    &log,
                ]);
            if sys.tuned() {
                c.args(go_tuned_args(sc));
            }
            c.args(extra_args("-"));
            c.args(sys.reply_args(group));
            c
        }
        _ => {
            let dir = ctx.root.join("benches/peers/parallel-consumer/target");
            let cp = format!(
                "{}:{}/lib/*",
                dir.join("pc-peer-0.1.0.jar").display(),
                dir.display()
            );
            let mut c = Command::new("java");
            c.args([
                "-Xmx2g",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp",
                &cp,
            ])
            .arg("orderly.bench.PcPeer")
            .args([
                "--bootstrap",
                b,
                "--topic",
                topic,
                "--group",
                group,
                "--dlq-topic",
                dlq,
            ])
            .args([
                "--records",
                &records,
                "--fail-mod",
                &fail,
                "--work-us",
                &work,
                "--log",
                &log,
            ]);
            if sys.tuned() {
                c.args(pc_tuned_args(sc));
            }
            c.args(extra_args("--"));
            c.args(sys.reply_args(group));
            c
        }
    }
}

/// A free port on 127.0.0.1 (for orderly's admin endpoint).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The command line of an HTTP-scenario system posting to `url`, and, for orderly, the port of
/// its admin endpoint (readiness is read there; the peers print `READY`).
#[allow(clippy::too_many_arguments)]
pub fn http_command(
    ctx: &Ctx,
    sys: System,
    topic: &str,
    group: &str,
    dlq: &str,
    sc: &Scenario,
    url: &str,
    log: &Path,
) -> Result<(Command, Option<u16>)> {
    let b = &ctx.args.bootstrap;
    let records = sc.records.to_string();
    let log = log.display().to_string();
    Ok(match sys {
        System::OrderlyHttp | System::OrderlyHttpBatch => {
            let admin = free_port()?;
            let mut c = Command::new(ctx.bin.join("orderly"));
            c.args([
                "consume",
                "--bootstrap",
                b,
                "--group",
                group,
                "--topic",
                topic,
            ])
            .args(["--dlq-topic", dlq, "--http", url])
            // The shared retry policy of every system (benchmarks.md), not a tuning: base 1 ms,
            // cap 100 ms, no attempt limit (the product's defaults are 100 ms, 30 s, 10).
            .args([
                "--retry-base",
                "1ms",
                "--retry-cap",
                "100ms",
                "--retry-max-attempts",
                "0",
            ])
            .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
            .env("RUST_LOG", "warn");
            if sys == System::OrderlyHttpBatch {
                c.args(ORDERLY_BATCH_ARGS);
            }
            (c, Some(admin))
        }
        System::GoSeedHttpTuned | System::GoSeedHttp => {
            let mut c = Command::new(ctx.root.join("benches/peers/go-seed/target/go-seed"));
            c.args(["-bootstrap", b, "-topic", topic, "-group", group])
                .args(["-records", &records, "-fail-mod", "0", "-log", &log])
                .args(["-http", url]);
            if sys == System::GoSeedHttpTuned {
                c.args(GO_TUNED_ARGS);
            }
            (c, None)
        }
        System::PcVertxTuned | System::PcVertx => {
            let dir = ctx.root.join("benches/peers/parallel-consumer/target");
            let cp = format!(
                "{}:{}/lib/*",
                dir.join("pc-peer-0.1.0.jar").display(),
                dir.display()
            );
            let mut c = Command::new("java");
            c.args([
                "-Xmx2g",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp",
                &cp,
            ])
            .arg("orderly.bench.PcVertxPeer")
            .args(["--bootstrap", b, "--topic", topic, "--group", group])
            .args(["--records", &records, "--http", url]);
            if sys == System::PcVertxTuned {
                c.args(PC_VERTX_TUNED_ARGS);
            }
            (c, None)
        }
        System::Orderly
        | System::OrderlyRun
        | System::GoSeedTuned
        | System::GoSeed
        | System::PcTuned
        | System::ParallelConsumer
        | System::OrderlyReplies
        | System::OrderlyExactlyOnce
        | System::GoSeedTransact
        | System::PcTransactional => {
            bail!("{} is no system of the HTTP scenarios", sys.name())
        }
    })
}
