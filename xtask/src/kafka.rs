//! `cargo xtask kafka`: start, stop, inspect the local broker and run Apache Kafka's own tools.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use orderly_testkit::process::{self, BrokerOptions, RunningBroker};
use orderly_testkit::{KafkaDist, kafka_home, tools};

/// State directory of the broker that `kafka start` manages.
pub fn state_dir() -> PathBuf {
    kafka_home().join("run")
}

/// The running broker of `kafka start`, if any.
pub fn running() -> Option<RunningBroker> {
    RunningBroker::read(&state_dir())
}

/// Starts the broker unless it already runs; returns it.
pub fn start(port: Option<u16>, heap: &str) -> Result<RunningBroker> {
    if let Some(b) = running() {
        eprintln!(
            "broker already running (pid {}), log {}",
            b.pid,
            b.log().display()
        );
        return Ok(b);
    }
    eprintln!(
        "resolving Apache Kafka {} from Maven Central (cached in {})",
        orderly_testkit::KAFKA_VERSION,
        kafka_home().display()
    );
    let dist = KafkaDist::ensure()?;
    let opts = BrokerOptions {
        heap: heap.to_string(),
        port,
        ..BrokerOptions::default()
    };
    eprintln!("formatting KRaft storage and starting the broker ...");
    let b = process::start(&dist, &state_dir(), &opts)?;
    eprintln!("broker serving (pid {}), log {}", b.pid, b.log().display());
    Ok(b)
}

/// Stops the broker that `start` started, by its recorded pid.
pub fn stop() -> Result<()> {
    match running() {
        Some(b) => {
            process::stop(&b)?;
            eprintln!("stopped broker pid {}", b.pid);
        }
        None => eprintln!("no broker running (state in {})", state_dir().display()),
    }
    Ok(())
}

/// Prints the broker's state; fails if it is not running.
pub fn status() -> Result<()> {
    match running() {
        Some(b) => {
            println!(
                "running pid={} bootstrap={} log={}",
                b.pid,
                b.bootstrap,
                b.log().display()
            );
            Ok(())
        }
        None => bail!("not running (state in {})", state_dir().display()),
    }
}

/// Prints the last `lines` lines of the broker log.
pub fn logs(lines: usize) -> Result<()> {
    let log = state_dir().join("broker.log");
    if !log.exists() {
        bail!("no broker log at {}", log.display());
    }
    println!("{}", process::tail(&log, lines));
    Ok(())
}

/// Runs one of Apache Kafka's tools; `{bootstrap}` in an argument becomes the running broker's address.
pub fn tool(name: &str, args: &[String]) -> Result<()> {
    if name == "list" {
        for (short, class, script) in tools::TOOLS {
            println!("{short:<18} {script:<32} {class}");
        }
        return Ok(());
    }
    let dist = KafkaDist::ensure()?;
    let bootstrap = running().map(|b| b.bootstrap);
    let args: Vec<String> = args
        .iter()
        .map(|a| match (&bootstrap, a.contains("{bootstrap}")) {
            (Some(bs), true) => Ok(a.replace("{bootstrap}", bs)),
            (None, true) => {
                bail!("{{bootstrap}} used but no broker is running: cargo xtask kafka start")
            }
            _ => Ok(a.clone()),
        })
        .collect::<Result<_>>()?;
    let Some(mut cmd) = tools::command(&dist, name) else {
        bail!("unknown tool {name:?}; `cargo xtask kafka tool list` shows them");
    };
    let status = cmd
        .args(&args)
        .status()
        .with_context(|| format!("running {name}"))?;
    if !status.success() {
        bail!("{name} exited with {status}");
    }
    Ok(())
}
