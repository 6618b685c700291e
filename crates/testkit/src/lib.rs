//! orderly-testkit: a real Apache Kafka broker for tests, benchmarks and the demo.
//!
//! It resolves Apache Kafka 4.3.1 from Maven Central (a pom in `kafka/`), caches the jars in the
//! git-ignored `.kafka/` folder, formats a single-node KRaft directory, and starts `kafka.Kafka`
//! on loopback. `cargo xtask kafka ...` and every integration test use it, so there is one way to
//! run a broker.
//!
//! It is test support only: no orderly library crate depends on it, and it is never shipped.
//!
//! # Layout
//! - [`dist`]: the jars (Maven resolution and cache).
//! - [`process`]: start, stop, restart, kill a broker process.
//! - [`tools`]: Apache Kafka's own command-line tools.
//! - [`proxy`]: a Kafka-aware TCP proxy that counts and holds back requests by API key.
//! - [`cluster`]: a three-node KRaft cluster (replication factor 3, `min.insync.replicas=2`) with
//!   per-node stop, kill and restart.
//! - [`fault_proxy`]: a TCP fault proxy (drop, stall, reset) in front of a broker port.
//! - [`https`]: an HTTPS server (test certificates, optional mTLS) answering with a test's service.
//! - [`broker()`] / [`TestBroker`]: the broker shared by the tests of one test run.
//!
//! # One broker per test run
//! `cargo xtask test` starts one broker, exports `ORDERLY_BOOTSTRAP` (and `ORDERLY_BROKER_LOG`)
//! and stops it when the run ends, pass or fail. A test binary run without that variable starts
//! its own broker on first use, guarded by a watchdog process that ends the broker when the test
//! process ends, so no broker outlives its tests.

pub mod cluster;
pub mod dist;
mod error;
pub mod fault_proxy;
pub mod https;
pub mod process;
pub mod proxy;
pub mod raw_http;
pub mod releases;
pub mod tools;
pub mod webhook;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub use dist::{KAFKA_VERSION, KafkaDist, kafka_home};
pub use error::{Error, Result};
pub use process::{BrokerOptions, Listener, RunningBroker, SASL_LISTENER, SSL_LISTENER};

/// Environment variable naming an already running broker (`host:port`) for tests to use.
pub const ENV_BOOTSTRAP: &str = "ORDERLY_BOOTSTRAP";
/// Environment variable naming that broker's log file, so a failing test can point at it.
pub const ENV_BROKER_LOG: &str = "ORDERLY_BROKER_LOG";

/// The broker shared by all tests of this process.
#[derive(Debug)]
pub struct TestBroker {
    bootstrap: String,
    log: Option<PathBuf>,
    /// Set when this process started the broker itself.
    owned: Option<RunningBroker>,
}

static BROKER: OnceLock<TestBroker> = OnceLock::new();
static TOPIC_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The broker for this test run: the one named by `ORDERLY_BOOTSTRAP`, or one started now.
///
/// # Panics
/// Panics (this is test support) with the full reason if no broker can be started.
#[allow(clippy::panic)]
pub fn broker() -> &'static TestBroker {
    BROKER.get_or_init(|| match TestBroker::from_env_or_start() {
        Ok(b) => b,
        Err(e) => panic!("orderly-testkit: no Kafka broker for the tests: {e}"),
    })
}

impl TestBroker {
    fn from_env_or_start() -> Result<TestBroker> {
        if let Ok(bootstrap) = std::env::var(ENV_BOOTSTRAP) {
            let log = std::env::var_os(ENV_BROKER_LOG).map(PathBuf::from);
            return Ok(TestBroker {
                bootstrap,
                log,
                owned: None,
            });
        }
        let b = start_guarded(&BrokerOptions::default())?;
        Ok(TestBroker {
            bootstrap: b.bootstrap.clone(),
            log: Some(b.log()),
            owned: Some(b),
        })
    }

    /// `127.0.0.1:<port>`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// The broker's log file, when known.
    pub fn log_path(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    /// True if this test process started (and will end) the broker.
    pub fn is_owned(&self) -> bool {
        self.owned.is_some()
    }

    /// A topic name no other test of any run on this broker uses.
    pub fn unique_topic(&self, prefix: &str) -> String {
        let n = TOPIC_COUNTER.fetch_add(1, Ordering::Relaxed);
        let r: u32 = rand::random();
        format!("{prefix}-{}-{n}-{r:08x}", std::process::id())
    }

    /// A connected rskafka client (bounded retries: 30 s).
    pub async fn client(&self) -> Result<rskafka::client::Client> {
        client(&self.bootstrap).await
    }

    /// Creates `name` with `partitions` partitions (replication factor 1).
    pub async fn create_topic(&self, name: &str, partitions: i32) -> Result<()> {
        create_topic(&self.bootstrap, name, partitions).await
    }

    /// Creates a uniquely named topic and returns a guard that, if the test fails, prints where
    /// the broker log is.
    pub async fn topic(&self, prefix: &str, partitions: i32) -> Result<TestTopic> {
        let name = self.unique_topic(prefix);
        self.create_topic(&name, partitions).await?;
        Ok(TestTopic {
            name,
            log: self.log.clone(),
        })
    }

    /// Deletes the records of `topic`-`partition` below `offset` (the DeleteRecords API), so the
    /// log starts at `offset`: what retention does, on demand.
    pub async fn delete_records(&self, topic: &str, partition: i32, offset: i64) -> Result<()> {
        let client = self.client().await?;
        let pc = client
            .partition_client(
                topic,
                partition,
                rskafka::client::partition::UnknownTopicHandling::Retry,
            )
            .await
            .map_err(|e| Error::Kafka {
                what: format!("partition client for {topic}-{partition}"),
                detail: e.to_string(),
            })?;
        pc.delete_records(offset, 30_000)
            .await
            .map_err(|e| Error::Kafka {
                what: format!("delete records of {topic}-{partition} below {offset}"),
                detail: e.to_string(),
            })
    }

    /// Runs one of Apache Kafka's tools (see [`tools::TOOLS`]) with `args` and returns its output.
    /// The caller passes `--bootstrap-server` itself, since tools differ in where it goes.
    pub async fn tool(&self, name: &str, args: &[&str]) -> Result<Output> {
        run_tool(name, args, None).await
    }

    /// Like [`TestBroker::tool`], writing `input` to the tool's stdin (e.g. the console producer).
    pub async fn tool_with_input(&self, name: &str, args: &[&str], input: &str) -> Result<Output> {
        run_tool(name, args, Some(input)).await
    }

    /// `(key, value)` of the records of `topic` from the beginning, as Apache Kafka's own consumer
    /// reads them with `isolation.level=read_committed` (a missing key reads `null`): what a
    /// reader outside orderly sees of a transactional output. A key's records keep their order
    /// (a key lives on one partition); partitions interleave.
    pub async fn read_committed(
        &self,
        topic: &str,
        until: ReadUntil,
    ) -> Result<Vec<(String, String)>> {
        let lines = match until {
            ReadUntil::End => return read_committed_to_end(self.bootstrap(), topic).await,
            ReadUntil::Count(n) => {
                let n = n.to_string();
                let args = [
                    "--bootstrap-server",
                    self.bootstrap(),
                    "--topic",
                    topic,
                    "--from-beginning",
                    "--command-property",
                    "isolation.level=read_committed",
                    "--formatter-property",
                    "print.key=true",
                    "--formatter-property",
                    "key.separator=\t",
                    "--max-messages",
                    &n,
                    "--timeout-ms",
                    "60000",
                ];
                let out = self.tool("console-consumer", &args).await?;
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            }
        };
        key_values(topic, &lines)
    }
}

/// `(key, value)` of every record of `topic` as [`read_to_end`] reads it ([`ReadForm::KeyValue`]):
/// a key's records in order (a key lives on one partition), partitions interleaved.
pub async fn read_committed_to_end(bootstrap: &str, topic: &str) -> Result<Vec<(String, String)>> {
    key_values(
        topic,
        &read_to_end(bootstrap, topic, ReadForm::KeyValue).await?,
    )
}

/// `key TAB value` lines of `topic` as pairs; a line without the separator is an error.
fn key_values(topic: &str, lines: &[String]) -> Result<Vec<(String, String)>> {
    lines
        .iter()
        .map(|l| match l.split_once('\t') {
            Some((k, v)) => Ok((k.to_owned(), v.to_owned())),
            None => Err(Error::Failed {
                what: format!("reading {topic} with read_committed"),
                detail: format!("a line without a key separator: {l:?}"),
            }),
        })
        .collect()
}

/// What [`read_to_end`] prints per record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadForm {
    /// `key TAB value` (`null` for a missing key or value).
    KeyValue,
    /// The headers as `name:value,name:value` (`NO_HEADERS` for none), the console consumer's
    /// `print.headers` form.
    Headers,
}

/// The lines Apache Kafka's own consumer prints for `topic` under `isolation.level=read_committed`,
/// from the beginning up to the partitions' end offsets as the read starts (the last stable
/// offsets), one per record in `form`, each partition's in offset order: every record committed
/// by then that no transaction still open then precedes, however long the reader takes to start
/// (`crates/testkit/java/ReadCommitted.java`, run by a JDK's single-file source launcher on the
/// Kafka jars). Fails if the end is not reached within two minutes.
pub async fn read_to_end(bootstrap: &str, topic: &str, form: ReadForm) -> Result<Vec<String>> {
    let dist = KafkaDist::ensure()?;
    let mut cmd = dist.java("tools-log4j2.properties", "256m");
    cmd.arg(READ_COMMITTED_SOURCE).args([
        bootstrap,
        topic,
        &READ_END_WITHIN.as_millis().to_string(),
    ]);
    if form == ReadForm::Headers {
        cmd.arg("headers");
    }
    let spawn_err = |e| Error::Spawn {
        what: "java (ReadCommitted.java)".into(),
        source: e,
    };
    let out = tokio::process::Command::from(cmd)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(spawn_err)?;
    if !out.status.success() {
        return Err(Error::Failed {
            what: format!("reading {topic} with read_committed"),
            detail: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// The reader behind [`read_to_end`]: a single-file Java program on Apache Kafka's consumer.
const READ_COMMITTED_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/java/ReadCommitted.java");

/// How long [`read_to_end`] may take to reach the end offsets before it fails.
const READ_END_WITHIN: Duration = Duration::from_secs(120);

/// When [`TestBroker::read_committed`] stops reading.
#[derive(Debug, Clone, Copy)]
pub enum ReadUntil {
    /// At the end offsets of the topic's partitions as the read starts, by Apache Kafka's consumer
    /// (see [`read_to_end`]): what was committed by then, however long the reader takes to start.
    End,
    /// This many records were read (or 60 s passed without a new one), by Apache Kafka's console
    /// consumer.
    Count(usize),
}

/// A topic created for one test. On drop during a panic it names the broker log.
#[derive(Debug)]
pub struct TestTopic {
    /// The topic name.
    pub name: String,
    log: Option<PathBuf>,
}

impl Drop for TestTopic {
    #[allow(clippy::print_stderr)]
    fn drop(&mut self) {
        if std::thread::panicking() {
            match &self.log {
                Some(p) => eprintln!(
                    "test on topic {} failed; broker log: {}",
                    self.name,
                    p.display()
                ),
                None => eprintln!(
                    "test on topic {} failed; broker log unknown (set {ENV_BROKER_LOG})",
                    self.name
                ),
            }
        }
    }
}

/// Runs an Apache Kafka tool asynchronously, optionally feeding `input` to its stdin.
pub async fn run_tool(name: &str, args: &[&str], input: Option<&str>) -> Result<Output> {
    use tokio::io::AsyncWriteExt;
    let dist = KafkaDist::ensure()?;
    let Some(mut cmd) = tools::command(&dist, name) else {
        return Err(Error::Failed {
            what: format!("unknown Kafka tool {name:?}"),
            detail: String::new(),
        });
    };
    cmd.args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let spawn_err = |e| Error::Spawn {
        what: format!("java ({name})"),
        source: e,
    };
    let mut child = tokio::process::Command::from(cmd)
        .spawn()
        .map_err(spawn_err)?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(text.as_bytes()).await.map_err(spawn_err)?;
        // Dropping stdin closes it, which tells the console producer the input has ended.
        drop(stdin);
    }
    child.wait_with_output().await.map_err(spawn_err)
}

/// A connected rskafka client for `bootstrap` with a bounded retry deadline.
pub async fn client(bootstrap: &str) -> Result<rskafka::client::Client> {
    let backoff = rskafka::BackoffConfig {
        init_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_secs(1),
        base: 2.0,
        deadline: Some(Duration::from_secs(30)),
    };
    rskafka::client::ClientBuilder::new(vec![bootstrap.to_string()])
        .backoff_config(backoff)
        .build()
        .await
        .map_err(|e| Error::Kafka {
            what: format!("connecting to {bootstrap}"),
            detail: e.to_string(),
        })
}

/// Creates a topic with replication factor 1 through the controller API.
pub async fn create_topic(bootstrap: &str, name: &str, partitions: i32) -> Result<()> {
    create_topic_rf(bootstrap, name, partitions, 1).await
}

/// Creates a topic with `replication_factor` replicas per partition through the controller API.
pub async fn create_topic_rf(
    bootstrap: &str,
    name: &str,
    partitions: i32,
    replication_factor: i16,
) -> Result<()> {
    let c = client(bootstrap).await?;
    let ctl = c.controller_client().map_err(|e| Error::Kafka {
        what: "controller client".into(),
        detail: e.to_string(),
    })?;
    ctl.create_topic(name, partitions, replication_factor, 10_000)
        .await
        .map_err(|e| Error::Kafka {
            what: format!("creating topic {name}"),
            detail: e.to_string(),
        })?;
    wait_until_served(&c, name, partitions).await
}

/// Waits until every partition of a new topic is served by its leader. CreateTopics answers once
/// the controller has the topic; a broker applies it a moment later, and a produce in between gets
/// UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER_OR_FOLLOWER. ListOffsets succeeds only at the leader
/// that serves the partition; the client retries both errors within its 30 s deadline.
async fn wait_until_served(c: &rskafka::client::Client, name: &str, partitions: i32) -> Result<()> {
    use rskafka::client::partition::{OffsetAt, UnknownTopicHandling};
    for p in 0..partitions {
        let failed = |e: rskafka::client::error::Error| Error::Kafka {
            what: format!("waiting for {name}-{p} to be served"),
            detail: e.to_string(),
        };
        let pc = c
            .partition_client(name, p, UnknownTopicHandling::Retry)
            .await
            .map_err(failed)?;
        pc.get_offset(OffsetAt::Latest).await.map_err(failed)?;
    }
    Ok(())
}

/// Starts a broker in a fresh directory under `.kafka/test-runs/`, watched by a process that
/// stops it when this process ends (however it ends: pass, fail or abort).
pub fn start_guarded(opts: &BrokerOptions) -> Result<RunningBroker> {
    let dist = KafkaDist::ensure()?;
    let n = TOPIC_COUNTER.fetch_add(1, Ordering::Relaxed);
    let runs = kafka_home().join("test-runs");
    prune_test_runs(&runs, KEEP_TEST_RUNS);
    let dir = runs.join(format!("{}-{n}", std::process::id()));
    let b = process::start(&dist, &dir, opts)?;
    spawn_watchdog(&b)?;
    Ok(b)
}

/// How many finished test-run directories (with their broker logs) are kept.
const KEEP_TEST_RUNS: usize = 20;

/// Deletes the oldest test-run directories whose test process has ended, keeping the newest
/// `keep` of them so the log a failing test named stays readable for a while.
fn prune_test_runs(runs: &Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(runs) else {
        return;
    };
    let mut finished: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.split('-').next()?.parse::<u32>().ok()?;
            let alive = Path::new(&format!("/proc/{pid}")).exists();
            let modified = e.metadata().and_then(|m| m.modified()).ok()?;
            (!alive).then(|| (modified, e.path()))
        })
        .collect();
    finished.sort();
    let excess = finished.len().saturating_sub(keep);
    for (_, path) in finished.into_iter().take(excess) {
        let _ = std::fs::remove_dir_all(path);
    }
}

/// A broker a test may stop, restart or kill without disturbing the shared one.
#[derive(Debug)]
pub struct DedicatedBroker {
    dist: KafkaDist,
    opts: BrokerOptions,
    broker: RunningBroker,
}

impl DedicatedBroker {
    /// Starts a private broker for one test (a few seconds of JVM start).
    pub fn start() -> Result<DedicatedBroker> {
        Self::start_with(BrokerOptions {
            heap: "512m".into(),
            ..BrokerOptions::default()
        })
    }

    /// Starts a private broker with `opts`, e.g. with a SASL or SSL listener
    /// ([`BrokerOptions::with_sasl_listener`], [`BrokerOptions::with_ssl_listener`]).
    pub fn start_with(opts: BrokerOptions) -> Result<DedicatedBroker> {
        let broker = start_guarded(&opts)?;
        Ok(DedicatedBroker {
            dist: KafkaDist::ensure()?,
            opts,
            broker,
        })
    }

    /// `127.0.0.1:<port>`; the same across restarts.
    pub fn bootstrap(&self) -> &str {
        &self.broker.bootstrap
    }

    /// `127.0.0.1:<port>` of the extra listener called `name` (see [`Listener`]), if it has one.
    pub fn listener(&self, name: &str) -> Option<String> {
        self.opts
            .extra_listeners
            .iter()
            .find(|l| l.name == name)
            .map(|l| format!("127.0.0.1:{}", l.port))
    }

    /// The broker's log file.
    pub fn log_path(&self) -> PathBuf {
        self.broker.log()
    }

    /// Stops the broker gracefully and starts it again on the same port and data.
    pub fn restart(&mut self) -> Result<()> {
        process::stop(&self.broker)?;
        self.broker = process::restart(&self.dist, &self.broker, &self.opts)?;
        spawn_watchdog(&self.broker)
    }
}

impl Drop for DedicatedBroker {
    fn drop(&mut self) {
        let _ = process::stop(&self.broker);
    }
}

pub(crate) fn spawn_watchdog(b: &RunningBroker) -> Result<()> {
    // The watchdog polls both pids once a second. If the test process is gone, it stops the
    // broker (TERM, then KILL) and deletes the data directory, keeping the log. If the broker
    // is gone first (stopped or restarted by the test), it just exits.
    let script = r#"while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
if ! kill -0 "$1" 2>/dev/null; then
  kill -TERM "$2" 2>/dev/null
  for i in $(seq 1 20); do kill -0 "$2" 2>/dev/null || break; sleep 1; done
  kill -KILL "$2" 2>/dev/null
  rm -rf "$3"
fi"#;
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("orderly-broker-watchdog")
        .arg(std::process::id().to_string())
        .arg(b.pid.to_string())
        .arg(b.dir.join("data"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::Spawn {
            what: "sh (broker watchdog)".into(),
            source: e,
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_keeps_the_newest_finished_runs_and_every_live_one() {
        let root = std::env::temp_dir().join(format!("orderly-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        // pid 0 never names a process in /proc, so these runs count as finished.
        for i in 0..5 {
            std::fs::create_dir_all(root.join(format!("0-{i}"))).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let live = root.join(format!("{}-0", std::process::id()));
        std::fs::create_dir_all(&live).unwrap();
        prune_test_runs(&root, 2);
        let mut left: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(
            left,
            vec![
                "0-3".to_string(),
                "0-4".to_string(),
                format!("{}-0", std::process::id())
            ]
        );
    }
}
