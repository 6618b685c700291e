//! A multi-node KRaft cluster on loopback (three combined broker+controller nodes by default) with per-node stop, kill and restart.
//!
//! Every node is `process.roles=broker,controller` with a static three-voter quorum
//! (`controller.quorum.voters`), so losing any one node keeps both the metadata quorum and
//! `min.insync.replicas=2` for replication factor 3. Each node has:
//! - `PLAINTEXT` on its client port: the inter-broker listener, also used by producers and
//!   admin code that must not go through a fault proxy;
//! - optionally `EXTERNAL`, whose *advertised* address is a port chosen by the caller (a fault
//!   proxy, see [`crate::fault_proxy`]) and whose real port the proxy forwards to. A client that
//!   bootstraps on the advertised addresses learns only proxy addresses from Metadata, so every
//!   byte it exchanges with any broker passes the proxy;
//! - optionally `SASL_PLAINTEXT` (SCRAM-SHA-256 and SCRAM-SHA-512) for the users of
//!   [`ClusterOptions::scram_users`], whose credentials `kafka-storage format --add-scram` writes
//!   into every node's bootstrap metadata.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::dist::{KafkaDist, write};
use crate::process::{self, RunningBroker, free_port};
use crate::{Error, Result};

/// How long a node may take to serve after its JVM starts (all three start together).
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// Options for [`TestCluster::start`].
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Number of nodes (each broker and controller voter). Default 3.
    pub nodes: usize,
    /// JVM heap per node. Default `512m`.
    pub heap: String,
    /// Add an `EXTERNAL` listener per node advertised on a separate port (for a fault proxy).
    pub external: bool,
    /// SCRAM users `(name, password)`: when not empty, every node also serves a `SASL_PLAINTEXT`
    /// listener with SCRAM-SHA-256 and SCRAM-SHA-512, and each user gets both credentials.
    pub scram_users: Vec<(String, String)>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            nodes: 3,
            heap: "512m".into(),
            external: false,
            scram_users: Vec::new(),
        }
    }
}

/// The `EXTERNAL` listener of a node: the broker listens on `port`, advertises `advertised`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct External {
    /// Where the broker listens.
    pub port: u16,
    /// What Metadata tells clients (a proxy's listening port).
    pub advertised: u16,
}

/// One node of the cluster.
#[derive(Debug, Clone)]
pub struct Node {
    /// `node.id` (1-based).
    pub id: i32,
    /// `PLAINTEXT` client port (inter-broker listener).
    pub port: u16,
    /// `CONTROLLER` port.
    pub cport: u16,
    /// The `EXTERNAL` listener, if configured.
    pub external: Option<External>,
    /// The `SASL_PLAINTEXT` (SCRAM) listener's port, if configured.
    pub sasl: Option<u16>,
    /// State directory (`server.properties`, `data/`, `broker.log`).
    pub dir: PathBuf,
}

impl Node {
    /// `127.0.0.1:<port>` of the `PLAINTEXT` listener.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

/// A running cluster; nodes may be down between [`TestCluster::kill`]/[`TestCluster::stop`] and
/// [`TestCluster::restart`]. Dropping it stops every node it started.
#[derive(Debug)]
pub struct TestCluster {
    dist: KafkaDist,
    heap: String,
    nodes: Vec<Node>,
    running: Vec<Option<RunningBroker>>,
    guarded: bool,
    keep_on_drop: bool,
}

impl TestCluster {
    /// Formats `opts.nodes` fresh node directories under `dir` and starts them together; returns
    /// when every node serves. With `guarded`, a watchdog stops each node when this process ends.
    pub fn start(dir: &Path, opts: &ClusterOptions, guarded: bool) -> Result<TestCluster> {
        let dist = KafkaDist::ensure()?;
        let n = opts.nodes.max(1);
        let mut ports = BTreeSet::new();
        let mut take = || -> Result<u16> {
            loop {
                let p = free_port()?;
                if ports.insert(p) {
                    return Ok(p);
                }
            }
        };
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let id = i32::try_from(i + 1).unwrap_or(i32::MAX);
            let port = take()?;
            let cport = take()?;
            let external = if opts.external {
                Some(External {
                    port: take()?,
                    advertised: take()?,
                })
            } else {
                None
            };
            let sasl = if opts.scram_users.is_empty() {
                None
            } else {
                Some(take()?)
            };
            nodes.push(Node {
                id,
                port,
                cport,
                external,
                sasl,
                dir: dir.join(format!("node-{id}")),
            });
        }
        let voters: Vec<String> = nodes
            .iter()
            .map(|n| format!("{}@127.0.0.1:{}", n.id, n.cport))
            .collect();
        let voters = voters.join(",");
        let rf = n.min(3);
        let min_isr = if rf >= 3 { 2 } else { 1 };
        for node in &nodes {
            std::fs::create_dir_all(&node.dir)
                .map_err(|e| Error::io("create node dir", &node.dir, e))?;
            let data = node.dir.join("data");
            if data.exists() {
                std::fs::remove_dir_all(&data).map_err(|e| Error::io("clear data", &data, e))?;
            }
            write(
                &node.dir.join("server.properties"),
                &properties(node, &voters, rf, min_isr),
            )?;
        }
        // Format every node with one cluster id (static quorum: no --standalone), in parallel.
        let cluster_id = process::random_cluster_id();
        let mut formats = Vec::new();
        for node in &nodes {
            let child = dist
                .java("tools-log4j2.properties", "256m")
                .arg("kafka.tools.StorageTool")
                .arg("format")
                .arg("-t")
                .arg(&cluster_id)
                .arg("-c")
                .arg(node.dir.join("server.properties"))
                .args(scram_format_args(&opts.scram_users))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| Error::Spawn {
                    what: "java (kafka-storage format)".into(),
                    source: e,
                })?;
            formats.push(child);
        }
        for child in formats {
            let out = child.wait_with_output().map_err(|e| Error::Spawn {
                what: "java (kafka-storage format)".into(),
                source: e,
            })?;
            if !out.status.success() {
                return Err(Error::Failed {
                    what: "formatting a KRaft node".into(),
                    detail: format!(
                        "{}{}",
                        String::from_utf8_lossy(&out.stdout),
                        String::from_utf8_lossy(&out.stderr)
                    ),
                });
            }
        }
        let mut cluster = TestCluster {
            dist,
            heap: opts.heap.clone(),
            running: vec![None; nodes.len()],
            nodes,
            guarded,
            keep_on_drop: false,
        };
        // A node opens its client listener only once it is unfenced, which needs the quorum:
        // spawn all, then wait for each.
        let mut spawned = Vec::new();
        for node in &cluster.nodes {
            spawned.push(process::spawn(
                &cluster.dist,
                &node.dir,
                node.port,
                &cluster.heap,
            )?);
        }
        let mut result = Ok(());
        for (i, (child, broker)) in spawned.into_iter().enumerate() {
            if guarded {
                crate::spawn_watchdog(&broker)?;
            }
            let port = cluster.nodes[i].port;
            cluster.running[i] = Some(broker.clone());
            if result.is_ok() {
                result = process::wait_serving(child, &broker, port, START_TIMEOUT).map(|_| ());
            }
        }
        result?;
        Ok(cluster)
    }

    /// Reads a cluster an earlier [`TestCluster::start`] left running in `dir` (not guarded; it is
    /// left running on drop unless [`TestCluster::stop_all`] is called).
    pub fn read(dir: &Path) -> Option<TestCluster> {
        let mut nodes = Vec::new();
        let mut running = Vec::new();
        for id in 1.. {
            let ndir = dir.join(format!("node-{id}"));
            if !ndir.is_dir() {
                break;
            }
            let props = std::fs::read_to_string(ndir.join("server.properties")).ok()?;
            let port = prop_port(&props, "listeners", "PLAINTEXT")?;
            let cport = prop_port(&props, "listeners", "CONTROLLER")?;
            let external = prop_port(&props, "listeners", "EXTERNAL").and_then(|p| {
                Some(External {
                    port: p,
                    advertised: prop_port(&props, "advertised.listeners", "EXTERNAL")?,
                })
            });
            let sasl = prop_port(&props, "listeners", "SASL_PLAINTEXT");
            running.push(RunningBroker::read(&ndir));
            nodes.push(Node {
                id,
                port,
                cport,
                external,
                sasl,
                dir: ndir,
            });
        }
        if nodes.is_empty() {
            return None;
        }
        Some(TestCluster {
            dist: KafkaDist::ensure().ok()?,
            heap: "512m".into(),
            nodes,
            running,
            guarded: false,
            keep_on_drop: true,
        })
    }

    /// Leaves the nodes running when this handle is dropped (for `cargo xtask kafka start`).
    pub fn keep_running(&mut self) {
        self.keep_on_drop = true;
    }

    /// The nodes, in id order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node with `id`.
    pub fn node(&self, id: i32) -> Result<&Node> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or_else(|| Error::Failed {
                what: format!("no node {id} in the cluster"),
                detail: String::new(),
            })
    }

    fn index(&self, id: i32) -> Result<usize> {
        self.nodes
            .iter()
            .position(|n| n.id == id)
            .ok_or_else(|| Error::Failed {
                what: format!("no node {id} in the cluster"),
                detail: String::new(),
            })
    }

    /// Comma-separated `PLAINTEXT` addresses of every node.
    pub fn bootstrap(&self) -> String {
        let v: Vec<String> = self.nodes.iter().map(Node::address).collect();
        v.join(",")
    }

    /// Comma-separated `SASL_PLAINTEXT` (SCRAM) addresses, if configured.
    pub fn sasl_bootstrap(&self) -> Option<String> {
        let v: Option<Vec<String>> = self
            .nodes
            .iter()
            .map(|n| n.sasl.map(|p| format!("127.0.0.1:{p}")))
            .collect();
        v.map(|v| v.join(","))
    }

    /// Comma-separated advertised `EXTERNAL` addresses (the proxy ports), if configured.
    pub fn external_bootstrap(&self) -> Option<String> {
        let v: Option<Vec<String>> = self
            .nodes
            .iter()
            .map(|n| n.external.map(|e| format!("127.0.0.1:{}", e.advertised)))
            .collect();
        v.map(|v| v.join(","))
    }

    /// True if node `id`'s process runs.
    pub fn is_running(&self, id: i32) -> bool {
        self.index(id)
            .ok()
            .and_then(|i| self.running[i].as_ref())
            .is_some_and(RunningBroker::is_alive)
    }

    /// The node's process, if it runs.
    pub fn process(&self, id: i32) -> Option<&RunningBroker> {
        let i = self.index(id).ok()?;
        self.running[i].as_ref().filter(|b| b.is_alive())
    }

    /// SIGKILL of node `id` (no controlled shutdown); returns once the process is gone.
    pub fn kill(&mut self, id: i32) -> Result<()> {
        let i = self.index(id)?;
        if let Some(b) = self.running[i].take() {
            process::kill(&b)?;
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while b.is_alive() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// Controlled shutdown of node `id` (SIGTERM; SIGKILL after 30 s).
    pub fn stop(&mut self, id: i32) -> Result<()> {
        let i = self.index(id)?;
        if let Some(b) = self.running[i].take() {
            process::stop(&b)?;
        }
        Ok(())
    }

    /// Starts node `id` again on its data and ports (it must be down); returns when it serves.
    pub fn restart(&mut self, id: i32) -> Result<()> {
        let i = self.index(id)?;
        if self.running[i]
            .as_ref()
            .is_some_and(RunningBroker::is_alive)
        {
            return Ok(());
        }
        let node = self.nodes[i].clone();
        let (child, broker) = process::spawn(&self.dist, &node.dir, node.port, &self.heap)?;
        if self.guarded {
            crate::spawn_watchdog(&broker)?;
        }
        self.running[i] = Some(broker.clone());
        process::wait_serving(child, &broker, node.port, START_TIMEOUT)?;
        Ok(())
    }

    /// Controlled shutdown of every running node.
    pub fn stop_all(&mut self) -> Result<()> {
        let ids: Vec<i32> = self.nodes.iter().map(|n| n.id).collect();
        // SIGTERM all first so they shut down together (a lone survivor would wait on the quorum).
        for b in self.running.iter().flatten() {
            if b.is_alive() {
                let _ = std::process::Command::new("kill")
                    .arg("-TERM")
                    .arg(b.pid.to_string())
                    .status();
            }
        }
        for id in ids {
            self.stop(id)?;
        }
        Ok(())
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if !self.keep_on_drop {
            let _ = self.stop_all();
        }
    }
}

/// `server.properties` of one node.
fn properties(node: &Node, voters: &str, rf: usize, min_isr: usize) -> String {
    let mut listeners = format!(
        "PLAINTEXT://127.0.0.1:{},CONTROLLER://127.0.0.1:{}",
        node.port, node.cport
    );
    let mut advertised = format!("PLAINTEXT://127.0.0.1:{}", node.port);
    if let Some(e) = node.external {
        listeners.push_str(&format!(",EXTERNAL://127.0.0.1:{}", e.port));
        advertised.push_str(&format!(",EXTERNAL://127.0.0.1:{}", e.advertised));
    }
    let mut sasl = String::new();
    if let Some(p) = node.sasl {
        listeners.push_str(&format!(",SASL_PLAINTEXT://127.0.0.1:{p}"));
        advertised.push_str(&format!(",SASL_PLAINTEXT://127.0.0.1:{p}"));
        sasl = "\n# SCRAM clients (users created at format time)\n\
listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512\n\
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;\n\
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
            .to_string();
    }
    format!(
        "# orderly test cluster node {id} (generated by orderly-testkit::cluster)
process.roles=broker,controller
node.id={id}
controller.quorum.voters={voters}
listeners={listeners}
advertised.listeners={advertised}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
log.dirs={dir}/data

offsets.topic.replication.factor={rf}
offsets.topic.num.partitions=1
transaction.state.log.replication.factor={rf}
transaction.state.log.min.isr={min_isr}
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor={rf}
share.coordinator.state.topic.min.isr={min_isr}
share.coordinator.state.topic.num.partitions=1
default.replication.factor={rf}
min.insync.replicas={min_isr}
unclean.leader.election.enable=false
num.partitions=1
auto.create.topics.enable=false

group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=500
group.consumer.min.session.timeout.ms=6000
group.consumer.session.timeout.ms=6000
group.consumer.assignment.interval.ms=0

# A SIGKILLed node is fenced (and loses its leaderships) after the session timeout; a dead
# follower leaves the ISR after the lag time (acks=all waits for the ISR).
broker.session.timeout.ms=6000
broker.heartbeat.interval.ms=1000
replica.lag.time.max.ms=10000
num.network.threads=2
num.io.threads=4
log.segment.bytes=1073741824
{sasl}",
        id = node.id,
        dir = node.dir.display(),
    )
}

/// `kafka-storage format` arguments creating a SCRAM-SHA-256 and a SCRAM-SHA-512 credential per user.
fn scram_format_args(users: &[(String, String)]) -> Vec<String> {
    users
        .iter()
        .flat_map(|(u, p)| {
            ["SCRAM-SHA-256", "SCRAM-SHA-512"].map(|mech| {
                [
                    "--add-scram".to_string(),
                    format!("{mech}=[name={u},password={p}]"),
                ]
            })
        })
        .flatten()
        .collect()
}

/// The port of listener `name` in the `key=` line of a properties text.
fn prop_port(props: &str, key: &str, name: &str) -> Option<u16> {
    let line = props
        .lines()
        .find(|l| l.strip_prefix(key).is_some_and(|r| r.starts_with('=')))?;
    let value = line.split_once('=')?.1;
    value
        .split(',')
        .find_map(|l| l.strip_prefix(&format!("{name}://")))
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_name_every_voter_and_the_external_listener() {
        let node = Node {
            id: 2,
            port: 1001,
            cport: 1002,
            external: Some(External {
                port: 1003,
                advertised: 1004,
            }),
            sasl: Some(1005),
            dir: PathBuf::from("/x/node-2"),
        };
        let p = properties(&node, "1@127.0.0.1:9,2@127.0.0.1:1002", 3, 2);
        assert_eq!(prop_port(&p, "listeners", "PLAINTEXT"), Some(1001));
        assert_eq!(prop_port(&p, "listeners", "CONTROLLER"), Some(1002));
        assert_eq!(prop_port(&p, "listeners", "EXTERNAL"), Some(1003));
        assert_eq!(
            prop_port(&p, "advertised.listeners", "EXTERNAL"),
            Some(1004)
        );
        assert!(p.contains("min.insync.replicas=2\n"));
        assert!(p.contains("controller.quorum.voters=1@127.0.0.1:9,2@127.0.0.1:1002\n"));
        assert_eq!(prop_port(&p, "listeners", "SASL_PLAINTEXT"), Some(1005));
        assert_eq!(
            prop_port(&p, "advertised.listeners", "SASL_PLAINTEXT"),
            Some(1005)
        );
        assert!(p.contains(
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512\n"
        ));
        let plain = Node { sasl: None, ..node };
        let p = properties(&plain, "2@127.0.0.1:1002", 3, 2);
        assert_eq!(prop_port(&p, "listeners", "SASL_PLAINTEXT"), None);
        assert!(!p.contains("sasl.enabled.mechanisms"));
    }

    #[test]
    fn every_scram_user_gets_both_credentials() {
        let args = scram_format_args(&[("alice".into(), "pw".into())]);
        assert_eq!(
            args,
            [
                "--add-scram",
                "SCRAM-SHA-256=[name=alice,password=pw]",
                "--add-scram",
                "SCRAM-SHA-512=[name=alice,password=pw]"
            ]
        );
        assert!(scram_format_args(&[]).is_empty());
    }
}
