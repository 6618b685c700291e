//! `cargo xtask kafka`: start, stop, inspect the local broker and run Apache Kafka's own tools.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use orderly_testkit::cluster::{ClusterOptions, TestCluster};
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

/// State directory of the cluster that `kafka start --brokers N` manages.
pub fn cluster_dir() -> PathBuf {
    kafka_home().join("cluster")
}

/// Starts an `n`-node KRaft cluster (replication factor 3, `min.insync.replicas=2` for `n >= 3`)
/// unless it already runs; returns its comma-separated bootstrap addresses.
pub fn start_cluster(n: usize, heap: &str, scram_users: &[(String, String)]) -> Result<String> {
    if let Some(c) = TestCluster::read(&cluster_dir()) {
        if c.nodes().iter().all(|node| c.is_running(node.id)) {
            eprintln!("cluster already running in {}", cluster_dir().display());
            return Ok(c.bootstrap());
        }
        let mut c = c;
        c.stop_all()?;
    }
    eprintln!(
        "resolving Apache Kafka {} from Maven Central (cached in {})",
        orderly_testkit::KAFKA_VERSION,
        kafka_home().display()
    );
    let opts = ClusterOptions {
        nodes: n,
        heap: heap.to_string(),
        external: false,
        scram_users: scram_users.to_vec(),
    };
    eprintln!("formatting {n} KRaft nodes and starting them ...");
    let dir = cluster_dir();
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    let mut c = TestCluster::start(&dir, &opts, false)?;
    c.keep_running();
    for node in c.nodes() {
        eprintln!(
            "node {} serving on {} (pid {}), log {}",
            node.id,
            node.address(),
            c.process(node.id).map(|p| p.pid).unwrap_or(0),
            node.dir.join("broker.log").display()
        );
    }
    if let Some(sasl) = c.sasl_bootstrap() {
        let names: Vec<&str> = scram_users.iter().map(|(u, _)| u.as_str()).collect();
        eprintln!(
            "SASL_PLAINTEXT listeners {sasl} (SCRAM-SHA-256, SCRAM-SHA-512; users {})",
            names.join(", ")
        );
    }
    Ok(c.bootstrap())
}

/// Starts the broker unless it already runs; returns it.
pub fn start(port: Option<u16>, heap: &str) -> Result<RunningBroker> {
    start_with_scram(port, heap, None, &[])
}

/// Like [`start`], plus a `SASL_PLAINTEXT` listener on `sasl_port` (a free one if `None`) with
/// SCRAM-SHA-256 and SCRAM-SHA-512 (and PLAIN) for `users` (`(name, password)`; the SCRAM
/// credentials are created by `kafka-storage format --add-scram`). Prints the listener's address
/// on stderr. An already running broker is reused as it is (then without a SASL listener if it
/// was started without one).
pub fn start_with_scram(
    port: Option<u16>,
    heap: &str,
    sasl_port: Option<u16>,
    users: &[(String, String)],
) -> Result<RunningBroker> {
    if let Some(b) = running() {
        eprintln!(
            "broker already running (pid {}), log {}",
            b.pid,
            b.log().display()
        );
        if !users.is_empty() {
            eprintln!("(reused as it is: stop it first for a SASL listener with these users)");
        }
        return Ok(b);
    }
    eprintln!(
        "resolving Apache Kafka {} from Maven Central (cached in {})",
        orderly_testkit::KAFKA_VERSION,
        kafka_home().display()
    );
    let dist = KafkaDist::ensure()?;
    let mut opts = BrokerOptions {
        heap: heap.to_string(),
        port,
        ..BrokerOptions::default()
    };
    let mut sasl = None;
    if !users.is_empty() {
        let p = match sasl_port {
            Some(p) => p,
            None => process::free_port()?,
        };
        let pairs: Vec<(&str, &str)> = users
            .iter()
            .map(|(u, pw)| (u.as_str(), pw.as_str()))
            .collect();
        opts = opts.with_sasl_listener(p, &pairs);
        sasl = Some(p);
    }
    eprintln!("formatting KRaft storage and starting the broker ...");
    let b = process::start(&dist, &state_dir(), &opts)?;
    eprintln!("broker serving (pid {}), log {}", b.pid, b.log().display());
    if let Some(p) = sasl {
        let names: Vec<&str> = users.iter().map(|(u, _)| u.as_str()).collect();
        eprintln!(
            "SASL_PLAINTEXT listener 127.0.0.1:{p} (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN; users {})",
            names.join(",")
        );
    }
    Ok(b)
}

/// Stops the broker that `start` started (and the cluster of `start --brokers N`), by recorded pids.
pub fn stop() -> Result<()> {
    if let Some(mut c) = TestCluster::read(&cluster_dir()) {
        let pids: Vec<u32> = c
            .nodes()
            .iter()
            .filter_map(|n| c.process(n.id).map(|p| p.pid))
            .collect();
        c.stop_all()?;
        if !pids.is_empty() {
            eprintln!("stopped cluster nodes (pids {pids:?})");
        }
    }
    match running() {
        Some(b) => {
            process::stop(&b)?;
            eprintln!("stopped broker pid {}", b.pid);
        }
        None => eprintln!("no broker running (state in {})", state_dir().display()),
    }
    Ok(())
}

/// Prints the broker's (and the cluster's) state; fails if neither runs.
pub fn status() -> Result<()> {
    if let Some(c) = TestCluster::read(&cluster_dir()) {
        let up: Vec<String> = c
            .nodes()
            .iter()
            .map(|n| {
                format!(
                    "{}={}",
                    n.id,
                    if c.is_running(n.id) { "up" } else { "down" }
                )
            })
            .collect();
        if c.nodes().iter().any(|n| c.is_running(n.id)) {
            println!("cluster bootstrap={} nodes {}", c.bootstrap(), up.join(" "));
            if running().is_none() {
                return Ok(());
            }
        }
    }
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
