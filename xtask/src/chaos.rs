//! `cargo xtask chaos`: `orderly consume` processes against a 3-node cluster under a seeded fault schedule, judged by a checker outside the consumer.
//!
//! Pieces, all in this process except the brokers and the consumers:
//! - a 3-node KRaft cluster ([`orderly_testkit::cluster`]) whose `EXTERNAL` listeners advertise
//!   the ports of one [`FaultProxy`] per node, so the consumers (bootstrapped on those ports) reach
//!   every broker only through a proxy; the producer, the offset poller and the final reads use the
//!   `PLAINTEXT` listeners directly and are never faulted;
//! - a producer writing live (acks=all) with keys `s-NNNN` (the session) and values naming a
//!   deterministic outcome: `ok`, `tN` (answer 503 to the first N deliveries) or `perm` (422);
//! - an HTTP server the consumers POST to (`--http http://127.0.0.1:P/<consumer>`), recording the
//!   start and end time and status of every delivery;
//! - a poller recording the group's committed offsets;
//! - the fault schedule drawn from the seed (each kind at least once, then random kinds until the
//!   time is up): SIGKILL of a consumer and its restart, SIGKILL of a partition leader's node and
//!   its restart, proxy drop, proxy stall (longer than the 30 s request timeout), proxy reset, a
//!   member joining then leaving, a controlled shutdown of a node and its restart.
//!
//! After the schedule the producer stops, the harness waits until the group has committed the end
//! of every partition, stops the consumers, reads the topic and the DLQ back, and checks:
//! 1. every acknowledged record was answered 2xx or is in the DLQ (else: lost);
//! 2. per session (key order in its partition), each delivery of record n started after the latest
//!    delivery of record n-1 that started before it had ended with a terminal answer (2xx or the
//!    permanent 422) — so a replay must re-finish n-1 before n, and a zombie cannot overlap;
//! 3. a record delivered again after a terminal answer lies at or above the committed offset of its
//!    partition as last seen before the repeat (a repeat below the watermark is a violation);
//! 4. the DLQ holds exactly the `perm` records of the log (a record may appear more than once only if
//!    it was delivered, and failed, that many times).
//!
//! A violation prints the session, the offsets, the fault before it and the seed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use orderly_protocol::messages::offset_fetch::{OffsetFetchGroup, OffsetFetchRequest};
use orderly_protocol::{
    BrokerConnection, ConnectionConfig, ConnectionKind, ConnectionPool, ProduceRecord, Producer,
    ProducerConfig,
};
use orderly_testkit::cluster::{Cluster, ClusterOptions};
use orderly_testkit::fault_proxy::FaultProxy;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rskafka::client::partition::{OffsetAt, UnknownTopicHandling};

const TOPIC: &str = "chaos";
const DLQ: &str = "chaos-dlq";
const GROUP: &str = "chaos-group";
/// Longer than the consumers' request timeout (30 s, `ConnectionConfig::default`).
const STALL: Duration = Duration::from_secs(35);

/// Options of a chaos run.
#[derive(Debug, Clone)]
pub struct ChaosOptions {
    /// Fault schedule length (every kind runs at least once, even if that takes longer).
    pub minutes: f64,
    /// Seed of the workload and the fault schedule.
    pub seed: u64,
    /// Consumers in the group (one more joins and leaves during member churn).
    pub consumers: usize,
    /// Partitions of the topic.
    pub partitions: i32,
    /// Sessions (keys).
    pub sessions: usize,
    /// Records per second the producer aims at.
    pub rate: u32,
    /// The `orderly` binary.
    pub binary: PathBuf,
    /// Working directory (cluster, consumer logs, report).
    pub dir: PathBuf,
    /// Keep the completed offsets above the commit point in the commit metadata (the default);
    /// false runs the consumers with `--commit-metadata-limit 0`, to measure what it saves.
    pub commit_metadata: bool,
}

/// The consumers' `--session-timeout`: the goal for records to flow again after a leader kill.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The kinds of fault the schedule injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL of a consumer process, restarted 2 s later.
    ConsumerKill,
    /// SIGKILL of the node leading a partition, restarted 3 s later.
    LeaderKill,
    /// One proxy closes every connection and refuses new ones for 5 s.
    ProxyDrop,
    /// One proxy moves no byte for longer than the request timeout.
    ProxyStall,
    /// Every proxy aborts every connection with RST.
    ProxyReset,
    /// A consumer joins, works a few seconds, and leaves (SIGTERM), twice.
    MemberChurn,
    /// A controlled shutdown (SIGTERM) of a node, restarted 3 s later.
    BrokerShutdown,
}

const KINDS: [FaultKind; 7] = [
    FaultKind::ConsumerKill,
    FaultKind::LeaderKill,
    FaultKind::ProxyDrop,
    FaultKind::ProxyStall,
    FaultKind::ProxyReset,
    FaultKind::MemberChurn,
    FaultKind::BrokerShutdown,
];

#[derive(Debug, Clone)]
struct Delivery {
    consumer: String,
    partition: i32,
    offset: i64,
    session: String,
    start: u64,
    end: u64,
    status: u16,
}

#[derive(Debug, Clone)]
struct FaultEvent {
    at: u64,
    kind: FaultKind,
    what: String,
    /// Partitions of the topic whose leader was on the killed node (leader kills only): they
    /// need an election.
    moved: Vec<i32>,
    /// Partitions led, at a leader kill, by a node whose proxy was stalling or dropping right
    /// then (another fault in progress). The rest are the kill's *surviving* partitions.
    impaired: Vec<i32>,
}

/// Everything the harness records, times in µs since the start.
struct Shared {
    t0: Instant,
    seed: u64,
    deliveries: Mutex<Vec<Delivery>>,
    attempts: Mutex<HashMap<(i32, i64), u32>>,
    faults: Mutex<Vec<FaultEvent>>,
    /// Proxy faults in progress: (node id, until µs since the start).
    proxy_faults: Mutex<Vec<(i32, u64)>>,
    commits: Mutex<Vec<(u64, i32, i64)>>,
    /// (partition, offset, when the acknowledgement came).
    acked: Mutex<Vec<(i32, i64, u64)>>,
    produce_errors: AtomicU64,
    stop_producing: AtomicBool,
    stop_polling: AtomicBool,
}

impl Shared {
    fn now(&self) -> u64 {
        u64::try_from(self.t0.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
    fn fault(&self, kind: FaultKind, what: String) {
        self.fault_moving(kind, what, Vec::new(), Vec::new());
    }

    /// A fault that takes the leadership of `moved` partitions away while `impaired` ones are
    /// behind another fault.
    fn fault_moving(&self, kind: FaultKind, what: String, moved: Vec<i32>, impaired: Vec<i32>) {
        let at = self.now();
        eprintln!("[chaos {:>7.1}s] {kind:?}: {what}", at as f64 / 1e6);
        lock(&self.faults).push(FaultEvent {
            at,
            kind,
            what,
            moved,
            impaired,
        });
    }

    /// Notes that the proxy of `node` misbehaves for `length` from now.
    fn proxy_fault(&self, node: i32, length: Duration) {
        let until = self.now() + u64::try_from(length.as_micros()).unwrap_or(u64::MAX);
        lock(&self.proxy_faults).push((node, until));
    }

    /// Nodes whose proxy misbehaves right now.
    fn impaired_nodes(&self) -> Vec<i32> {
        let now = self.now();
        lock(&self.proxy_faults)
            .iter()
            .filter(|(_, until)| *until > now)
            .map(|(n, _)| *n)
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The outcome a record's value asks for.
fn kind_of(value: &[u8]) -> &str {
    let text = std::str::from_utf8(value).unwrap_or("");
    text.split('|')
        .find_map(|f| f.strip_prefix("kind="))
        .unwrap_or("ok")
}

/// Figures of a finished run.
#[derive(Debug, Default)]
pub struct ChaosReport {
    /// Seconds the whole run took.
    pub seconds: f64,
    /// Records acknowledged to the producer.
    pub acked: usize,
    /// Records in the log at the end (acknowledged or not).
    pub in_log: usize,
    /// Produce calls that failed (record not acknowledged).
    pub produce_errors: u64,
    /// Deliveries (HTTP requests) seen.
    pub deliveries: usize,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, usize>,
    /// Acknowledged records neither answered 2xx nor dead-lettered.
    pub lost: usize,
    /// Violations of the ordering, watermark and DLQ rules.
    pub violations: Vec<String>,
    /// Deliveries after a terminal answer, by the kind of the fault before them.
    pub duplicates: BTreeMap<String, usize>,
    /// Dead letters read back.
    pub dead_letters: usize,
    /// Per fault kind, one entry per fault event: the time (s) from the fault until *every*
    /// partition had again a delivery that started after the fault and was answered 2xx (records
    /// flow again everywhere). Events after which some partition never flowed again are left out
    /// and counted in `unrecovered`.
    pub recovery: BTreeMap<String, Vec<f64>>,
    /// Per fault kind: events after which some partition had no 2xx delivery any more.
    pub unrecovered: BTreeMap<String, usize>,
    /// Per leader kill: the time until every *surviving* partition (led by another node) delivered
    /// again (`None`: one never did). The goal: within one session timeout.
    pub surviving_recovery: Vec<Option<f64>>,
    /// Per entry of `surviving_recovery`: the time until the brokers acknowledged a write again
    /// on every surviving partition (acks=all: the log's high watermark moves only once the
    /// killed node has left those partitions' ISR). No consumer can deliver a record produced
    /// after the kill before then; `None` when some surviving partition had no write acknowledged
    /// after the kill.
    pub surviving_log_stall: Vec<Option<f64>>,
    /// Per entry of `surviving_recovery`: the consumers' own share, the longest time on any
    /// surviving partition from its first acknowledged write after the kill to its first 2xx
    /// delivery started after the kill (0 when a delivery came first).
    pub surviving_consumer_delay: Vec<Option<f64>>,
    /// Whether the consumers kept completed offsets in the commit metadata.
    pub commit_metadata: bool,
}

impl ChaosReport {
    /// Duplicates per event of `kind` (the duplicates whose preceding fault was of that kind).
    pub fn duplicates_per_event(&self, kind: &str) -> Option<f64> {
        let n = *self.faults.get(kind)?;
        (n > 0).then(|| self.duplicates.get(kind).copied().unwrap_or(0) as f64 / n as f64)
    }
}

struct ConsumerProc {
    name: String,
    child: tokio::process::Child,
}

struct Consumers {
    binary: PathBuf,
    bootstrap: String,
    http: String,
    dir: PathBuf,
    running: Vec<ConsumerProc>,
    started: u64,
    commit_metadata: bool,
}

impl Consumers {
    async fn spawn(&mut self, name: &str) -> Result<()> {
        self.started += 1;
        let log = self.dir.join(format!("{name}-{}.log", self.started));
        let out = std::fs::File::create(&log).with_context(|| log.display().to_string())?;
        let err = out.try_clone()?;
        let child = tokio::process::Command::new(&self.binary)
            .arg("consume")
            .args(["--bootstrap", &self.bootstrap])
            .args(["--group", GROUP, "--topic", TOPIC, "--dlq-topic", DLQ])
            .args(["--http", &format!("{}/{name}", self.http)])
            .args(["--http-timeout", "5s", "--admin-addr", "off"])
            .args(["--commit-interval", "1s", "--session-timeout"])
            .arg(format!("{}s", SESSION_TIMEOUT.as_secs()))
            .args(["--heartbeat-interval", "1s", "--rebalance-timeout", "20s"])
            .args(["--retry-base", "50ms", "--retry-cap", "1s"])
            .args(["--retry-max-attempts", "0", "--workers", "2"])
            .args(["--revoke-timeout", "10s", "--shutdown-timeout", "10s"])
            .args(["--dedup-header", ""])
            .args(if self.commit_metadata {
                &[][..]
            } else {
                &["--commit-metadata-limit", "0"][..]
            })
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        self.running.push(ConsumerProc {
            name: name.to_string(),
            child,
        });
        Ok(())
    }

    async fn kill(&mut self, i: usize) -> Option<String> {
        if i >= self.running.len() {
            return None;
        }
        let mut c = self.running.remove(i);
        let _ = c.child.start_kill();
        let _ = c.child.wait().await;
        Some(c.name)
    }

    /// SIGTERM and wait (up to 40 s, then SIGKILL).
    async fn leave(&mut self, i: usize) -> Option<String> {
        if i >= self.running.len() {
            return None;
        }
        let mut c = self.running.remove(i);
        if let Some(pid) = c.child.id() {
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status();
        }
        if tokio::time::timeout(Duration::from_secs(40), c.child.wait())
            .await
            .is_err()
        {
            eprintln!("consumer {} did not leave within 40 s; killing it", c.name);
            let _ = c.child.start_kill();
            let _ = c.child.wait().await;
        }
        Some(c.name)
    }

    /// Consumers that exited on their own (a crash): named, so the report shows them.
    fn exited(&mut self) -> Vec<String> {
        let mut gone = Vec::new();
        for c in &mut self.running {
            if let Ok(Some(status)) = c.child.try_wait() {
                gone.push(format!("{} ({status})", c.name));
            }
        }
        gone
    }
}

async fn serve_http(shared: Arc<Shared>) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| handle(shared.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(addr)
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let start = shared.now();
    let consumer = req.uri().path().trim_start_matches('/').to_string();
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let partition: i32 = header("orderly-partition").parse().unwrap_or(-1);
    let offset: i64 = header("orderly-offset").parse().unwrap_or(-1);
    let session = header("orderly-session");
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let n = {
        let mut a = lock(&shared.attempts);
        let e = a.entry((partition, offset)).or_insert(0);
        *e += 1;
        *e
    };
    let kind = kind_of(&body);
    let status: u16 = match kind {
        "perm" => 422,
        k if k.starts_with('t') => {
            let fails: u32 = k[1..].parse().unwrap_or(0);
            if n <= fails { 503 } else { 200 }
        }
        _ => 200,
    };
    // A little work, varying by record, so deliveries overlap.
    let pause = u64::try_from(offset.rem_euclid(3)).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(pause)).await;
    let end = shared.now();
    lock(&shared.deliveries).push(Delivery {
        consumer,
        partition,
        offset,
        session,
        start,
        end,
        status,
    });
    let mut resp = Response::new(Full::new(Bytes::from_static(b"")));
    *resp.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    Ok(resp)
}

async fn produce(shared: Arc<Shared>, bootstrap: String, opts: ChaosOptions) {
    let pool = Arc::new(ConnectionPool::new(
        bootstrap.split(',').map(str::to_string).collect(),
        ConnectionConfig::default(),
    ));
    let producer = Arc::new(Producer::new(
        pool,
        ProducerConfig {
            retries: 40,
            ..ProducerConfig::default()
        },
    ));
    // One writer per partition, fed in order: a session's records stay in order (a session maps
    // to one partition), and a partition whose leader is down holds up only its own records, so
    // the live load on the surviving partitions goes on (what the recovery figures measure).
    let partitions = usize::try_from(opts.partitions.max(1)).unwrap_or(1);
    let mut queues = Vec::with_capacity(partitions);
    let mut writers = Vec::new();
    for p in 0..partitions {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ProduceRecord>();
        queues.push(tx);
        let shared = shared.clone();
        let producer = producer.clone();
        let partition = i32::try_from(p).unwrap_or(0);
        writers.push(tokio::spawn(async move {
            while let Some(rec) = rx.recv().await {
                match producer
                    .send_batch(TOPIC, partition, std::slice::from_ref(&rec))
                    .await
                {
                    Ok(o) => {
                        let at = shared.now();
                        lock(&shared.acked).push((partition, o, at));
                    }
                    Err(e) => {
                        let n = shared.produce_errors.fetch_add(1, Ordering::Relaxed);
                        if n < 5 {
                            eprintln!("[chaos] produce failed (record not acknowledged): {e}");
                        }
                    }
                }
            }
        }));
    }
    let queues = Arc::new(queues);
    let tasks = 4usize;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let shared = shared.clone();
        let queues = queues.clone();
        let opts = opts.clone();
        handles.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(opts.seed ^ (0x9e37_79b9 * (t as u64 + 1)));
            let mine: Vec<usize> = (0..opts.sessions).filter(|s| s % tasks == t).collect();
            let mut seq = vec![0u64; mine.len()];
            let per_task = f64::from(opts.rate.max(1)) / tasks as f64;
            let interval = Duration::from_secs_f64(1.0 / per_task);
            let mut next = tokio::time::Instant::now();
            let mut i = 0usize;
            while !shared.stop_producing.load(Ordering::Relaxed) && !mine.is_empty() {
                let slot = rng.random_range(0..mine.len());
                let s = mine[slot];
                seq[slot] += 1;
                let roll: f64 = rng.random();
                let kind = if roll < 0.01 {
                    "perm".to_string()
                } else if roll < 0.05 {
                    format!("t{}", rng.random_range(1..=3))
                } else {
                    "ok".to_string()
                };
                let key = format!("s-{s:04}");
                let partition = orderly_protocol::partitioner::partition_for_key(
                    key.as_bytes(),
                    opts.partitions.max(1),
                );
                let rec = ProduceRecord {
                    key: Some(Bytes::from(key.clone())),
                    value: Some(Bytes::from(format!(
                        "{key}|n={}|kind={kind}|{}",
                        seq[slot],
                        "x".repeat(64)
                    ))),
                    headers: Vec::new(),
                    timestamp: None,
                };
                if let Some(q) = usize::try_from(partition).ok().and_then(|p| queues.get(p)) {
                    let _ = q.send(rec);
                }
                i += 1;
                next += interval;
                tokio::time::sleep_until(next).await;
                if i % 1000 == 0 {
                    next = next.max(tokio::time::Instant::now());
                }
            }
        }));
    }
    for h in handles {
        let _ = h.await;
    }
    // The generators are done: close the queues and let the writers finish what they hold.
    drop(queues);
    for w in writers {
        let _ = w.await;
    }
}

async fn committed(pool: &ConnectionPool) -> Option<Vec<(i32, i64)>> {
    let any = pool.any().await.ok()?;
    let coord = any.find_coordinator(GROUP).await.ok()?;
    let conn = pool
        .get(
            &format!("{}:{}", coord.host, coord.port),
            ConnectionKind::Coordination,
        )
        .await
        .ok()?;
    let resp = conn
        .offset_fetch(&OffsetFetchRequest {
            groups: vec![OffsetFetchGroup {
                group_id: GROUP.to_string(),
                member_id: None,
                member_epoch: -1,
                topics: None,
            }],
            require_stable: false,
        })
        .await;
    let resp = match resp {
        Ok(r) => r,
        Err(_) => {
            pool.invalidate(conn.broker(), ConnectionKind::Coordination)
                .await;
            return None;
        }
    };
    let g = resp.groups.into_iter().next()?;
    let mut out = Vec::new();
    for t in g.topics.into_iter().filter(|t| t.name == TOPIC) {
        for p in t.partitions {
            if p.committed_offset >= 0 {
                out.push((p.partition_index, p.committed_offset));
            }
        }
    }
    Some(out)
}

async fn poll_commits(shared: Arc<Shared>, bootstrap: String) {
    let pool = ConnectionPool::new(
        bootstrap.split(',').map(str::to_string).collect(),
        ConnectionConfig {
            request_timeout: Duration::from_secs(5),
            ..ConnectionConfig::default()
        },
    );
    let mut last: HashMap<i32, i64> = HashMap::new();
    while !shared.stop_polling.load(Ordering::Relaxed) {
        if let Some(c) = committed(&pool).await {
            let t = shared.now();
            for (p, o) in c {
                if last.get(&p) != Some(&o) {
                    last.insert(p, o);
                    lock(&shared.commits).push((t, p, o));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The node leading `partition` of the topic, asked over the direct listeners.
async fn leader_of(nodes: &[(i32, String)], partition: i32) -> Option<i32> {
    leaders(nodes)
        .await
        .into_iter()
        .find(|(p, l)| *p == partition && *l >= 0)
        .map(|(_, l)| l)
}

/// A connection to a node's direct listener (no proxy), with short timeouts.
async fn direct(addr: &str) -> Option<BrokerConnection> {
    let cfg = ConnectionConfig {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(5),
        ..ConnectionConfig::default()
    };
    BrokerConnection::connect(addr, &cfg).await.ok()
}

/// The node coordinating the group, asked over the direct listeners.
async fn coordinator_of(nodes: &[(i32, String)]) -> Option<i32> {
    for (_, addr) in nodes {
        let Some(conn) = direct(addr).await else {
            continue;
        };
        if let Ok(c) = conn.find_coordinator(GROUP).await {
            return Some(c.node_id);
        }
    }
    None
}

/// `(partition, leader)` of every partition of the topic, from the first node that answers.
async fn leaders(nodes: &[(i32, String)]) -> Vec<(i32, i32)> {
    for (_, addr) in nodes {
        let Some(conn) = direct(addr).await else {
            continue;
        };
        let Ok(md) = conn.metadata(Some(&[TOPIC])).await else {
            continue;
        };
        if let Some(t) = md.topics.first() {
            return t
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.leader_id))
                .collect();
        }
    }
    Vec::new()
}

/// Runs node operations (which block: JVM start) off the async threads.
async fn with_cluster<T: Send + 'static>(
    cluster: &Arc<Mutex<Cluster>>,
    f: impl FnOnce(&mut Cluster) -> orderly_testkit::Result<T> + Send + 'static,
) -> Result<T> {
    let c = cluster.clone();
    let r = tokio::task::spawn_blocking(move || f(&mut lock(&c))).await?;
    Ok(r?)
}

/// Runs a chaos run; `Err` only when the harness itself fails. Violations are in the report.
pub async fn run(opts: ChaosOptions) -> Result<ChaosReport> {
    let t0 = Instant::now();
    let shared = Arc::new(Shared {
        t0,
        seed: opts.seed,
        deliveries: Mutex::new(Vec::new()),
        attempts: Mutex::new(HashMap::new()),
        faults: Mutex::new(Vec::new()),
        proxy_faults: Mutex::new(Vec::new()),
        commits: Mutex::new(Vec::new()),
        acked: Mutex::new(Vec::new()),
        produce_errors: AtomicU64::new(0),
        stop_producing: AtomicBool::new(false),
        stop_polling: AtomicBool::new(false),
    });
    if opts.dir.exists() {
        std::fs::remove_dir_all(&opts.dir).with_context(|| opts.dir.display().to_string())?;
    }
    std::fs::create_dir_all(&opts.dir)?;
    eprintln!(
        "[chaos] seed {} · starting a 3-node cluster in {}",
        opts.seed,
        opts.dir.display()
    );
    let cdir = opts.dir.join("cluster");
    let cluster = tokio::task::spawn_blocking(move || {
        Cluster::start(
            &cdir,
            &ClusterOptions {
                external: true,
                ..ClusterOptions::default()
            },
            true,
        )
    })
    .await??;
    let direct = cluster.bootstrap();
    let external = cluster
        .external_bootstrap()
        .context("cluster without external listeners")?;
    let nodes: Vec<(i32, String)> = cluster
        .nodes()
        .iter()
        .map(|n| (n.id, n.address()))
        .collect();
    let mut proxies = Vec::new();
    for n in cluster.nodes() {
        let e = n.external.context("node without external listener")?;
        proxies.push(
            FaultProxy::start(
                SocketAddr::from(([127, 0, 0, 1], e.advertised)),
                SocketAddr::from(([127, 0, 0, 1], e.port)),
            )
            .await?,
        );
    }
    let cluster = Arc::new(Mutex::new(cluster));
    orderly_testkit::create_topic_rf(&nodes[0].1, TOPIC, opts.partitions, 3).await?;
    orderly_testkit::create_topic_rf(&nodes[0].1, DLQ, 3, 3).await?;
    eprintln!(
        "[chaos] cluster up in {:.0} s: direct {direct}, through proxies {external}",
        t0.elapsed().as_secs_f64()
    );

    let http = serve_http(shared.clone()).await?;
    let mut consumers = Consumers {
        binary: opts.binary.clone(),
        bootstrap: external.clone(),
        http: format!("http://{http}"),
        dir: opts.dir.clone(),
        running: Vec::new(),
        started: 0,
        commit_metadata: opts.commit_metadata,
    };
    for i in 0..opts.consumers {
        consumers.spawn(&format!("c{i}")).await?;
    }
    let poller = tokio::spawn(poll_commits(shared.clone(), direct.clone()));
    let producer = tokio::spawn(produce(shared.clone(), direct.clone(), opts.clone()));

    // The schedule: every kind once (seeded order), then seeded random kinds until time is up.
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let mut order = KINDS.to_vec();
    order.shuffle(&mut rng);
    let schedule_end = Duration::from_secs_f64(opts.minutes * 60.0);
    let faults_start = Instant::now();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let mut step = 0usize;
    while step < KINDS.len() || faults_start.elapsed() < schedule_end {
        let kind = if step < order.len() {
            order[step]
        } else {
            KINDS[rng.random_range(0..KINDS.len())]
        };
        step += 1;
        for gone in consumers.exited() {
            shared.fault(
                FaultKind::ConsumerKill,
                format!("consumer exited on its own: {gone}"),
            );
        }
        match kind {
            FaultKind::ConsumerKill => {
                let i = rng.random_range(0..consumers.running.len().max(1));
                if let Some(name) = consumers.kill(i).await {
                    shared.fault(kind, format!("SIGKILL consumer {name}"));
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    consumers.spawn(&name).await?;
                }
            }
            FaultKind::LeaderKill => {
                let p = rng.random_range(0..opts.partitions);
                if let Some(l) = leader_of(&nodes, p).await {
                    let all = leaders(&nodes).await;
                    let moved: Vec<i32> = all
                        .iter()
                        .filter(|(_, leader)| *leader == l)
                        .map(|(partition, _)| *partition)
                        .collect();
                    let stalled = shared.impaired_nodes();
                    // With the group coordinator's link stalled or dropping, every member's
                    // ownership falls in doubt and every partition is held: the kill then
                    // leaves no partition untouched by another fault.
                    let coordinator = coordinator_of(&nodes)
                        .await
                        .filter(|c| *c != l && stalled.contains(c));
                    let impaired: Vec<i32> = all
                        .iter()
                        .filter(|(_, leader)| {
                            *leader != l && (coordinator.is_some() || stalled.contains(leader))
                        })
                        .map(|(partition, _)| *partition)
                        .collect();
                    with_cluster(&cluster, move |c| c.kill(l)).await?;
                    let also = match coordinator {
                        Some(c) => format!(
                            "; the group coordinator (node {c}) behind a proxy fault in progress: every partition held"
                        ),
                        None if impaired.is_empty() => String::new(),
                        None => format!("; {TOPIC}-{impaired:?} behind a proxy fault in progress"),
                    };
                    shared.fault_moving(
                        kind,
                        format!("SIGKILL node {l} (leader of {TOPIC}-{moved:?}){also}"),
                        moved,
                        impaired,
                    );
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    with_cluster(&cluster, move |c| c.restart(l)).await?;
                    eprintln!("[chaos] node {l} serves again");
                }
            }
            FaultKind::BrokerShutdown => {
                let id = nodes[rng.random_range(0..nodes.len())].0;
                shared.fault(kind, format!("controlled shutdown of node {id}"));
                with_cluster(&cluster, move |c| c.stop(id)).await?;
                tokio::time::sleep(Duration::from_secs(3)).await;
                with_cluster(&cluster, move |c| c.restart(id)).await?;
                eprintln!("[chaos] node {id} serves again");
            }
            FaultKind::ProxyDrop => {
                let i = rng.random_range(0..proxies.len());
                proxies[i].drop_for(Duration::from_secs(5));
                shared.proxy_fault(nodes[i].0, Duration::from_secs(5));
                shared.fault(kind, format!("proxy of node {} drops for 5 s", nodes[i].0));
            }
            FaultKind::ProxyStall => {
                let i = rng.random_range(0..proxies.len());
                proxies[i].stall_for(STALL);
                shared.proxy_fault(nodes[i].0, STALL);
                shared.fault(
                    kind,
                    format!(
                        "proxy of node {} stalls for {} s",
                        nodes[i].0,
                        STALL.as_secs()
                    ),
                );
            }
            FaultKind::ProxyReset => {
                for p in &proxies {
                    p.reset();
                }
                shared.fault(kind, "every proxy resets every connection".into());
            }
            FaultKind::MemberChurn => {
                for round in 0..2 {
                    let name = format!("x{step}-{round}");
                    consumers.spawn(&name).await?;
                    shared.fault(kind, format!("consumer {name} joins"));
                    tokio::time::sleep(Duration::from_secs(rng.random_range(3..7))).await;
                    let i = consumers.running.len().saturating_sub(1);
                    if let Some(n) = consumers.leave(i).await {
                        shared.fault(kind, format!("consumer {n} left (SIGTERM)"));
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(rng.random_range(6..12))).await;
    }

    // Settle: a stall may still be running; let it end before draining.
    tokio::time::sleep(Duration::from_secs(2)).await;
    shared.stop_producing.store(true, Ordering::Relaxed);
    let _ = producer.await;
    eprintln!("[chaos] schedule done; producer stopped; waiting for the group to commit the end");
    let client =
        rskafka::client::ClientBuilder::new(direct.split(',').map(str::to_string).collect())
            .build()
            .await?;
    let mut ends = BTreeMap::new();
    for p in 0..opts.partitions {
        let pc = client
            .partition_client(TOPIC, p, UnknownTopicHandling::Retry)
            .await?;
        ends.insert(p, pc.get_offset(OffsetAt::Latest).await?);
    }
    let drain_deadline = Instant::now() + Duration::from_secs(240);
    let pool = ConnectionPool::new(
        direct.split(',').map(str::to_string).collect(),
        ConnectionConfig::default(),
    );
    loop {
        if let Some(c) = committed(&pool).await {
            let c: HashMap<i32, i64> = c.into_iter().collect();
            if ends.iter().all(|(p, e)| *e == 0 || c.get(p) == Some(e)) {
                break;
            }
            if Instant::now() > drain_deadline {
                eprintln!(
                    "[chaos] the group did not commit the end in 240 s: committed {c:?}, ends {ends:?}"
                );
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for gone in consumers.exited() {
        shared.fault(
            FaultKind::ConsumerKill,
            format!("consumer exited on its own: {gone}"),
        );
    }
    while !consumers.running.is_empty() {
        consumers.leave(0).await;
    }
    shared.stop_polling.store(true, Ordering::Relaxed);
    let _ = poller.await;

    // Read back the log (every record, acknowledged or not) and the DLQ.
    let mut log: BTreeMap<(i32, i64), (String, String)> = BTreeMap::new();
    for (p, end) in &ends {
        let pc = client
            .partition_client(TOPIC, *p, UnknownTopicHandling::Retry)
            .await?;
        for r in read_back(&pc, *end).await? {
            let key = String::from_utf8_lossy(&r.record.key.unwrap_or_default()).into_owned();
            let kind = kind_of(&r.record.value.unwrap_or_default()).to_string();
            log.insert((*p, r.offset), (key, kind));
        }
    }
    let mut dlq: HashMap<(i32, i64), usize> = HashMap::new();
    for p in 0..3 {
        let pc = client
            .partition_client(DLQ, p, UnknownTopicHandling::Retry)
            .await?;
        let end = pc.get_offset(OffsetAt::Latest).await?;
        for r in read_back(&pc, end).await? {
            let h = |n: &str| {
                r.record
                    .headers
                    .get(n)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default()
            };
            let sp: i32 = h("orderly-dlq-partition").parse().unwrap_or(-1);
            let so: i64 = h("orderly-dlq-offset").parse().unwrap_or(-1);
            *dlq.entry((sp, so)).or_default() += 1;
        }
    }
    let proxy_stats: Vec<String> = proxies
        .iter()
        .map(|p| {
            let s = p.stats();
            format!(
                "{}: {} conns, {} reset, {} dropped",
                p.listen(),
                s.connections.load(Ordering::Relaxed),
                s.resets.load(Ordering::Relaxed),
                s.dropped.load(Ordering::Relaxed)
            )
        })
        .collect();
    eprintln!("[chaos] proxies: {}", proxy_stats.join("; "));
    drop(proxies);
    let mut report = check(&shared, &log, &dlq, t0.elapsed().as_secs_f64());
    report.commit_metadata = opts.commit_metadata;
    let _ = tokio::task::spawn_blocking(move || lock(&cluster).stop_all()).await;
    Ok(report)
}

/// Every record of a partition below `end`. A read below the end that comes back empty (a leader
/// just moved after the restarts) is retried for ~5 s before the rest counts as missing.
async fn read_back(
    pc: &rskafka::client::partition::PartitionClient,
    end: i64,
) -> Result<Vec<rskafka::record::RecordAndOffset>, rskafka::client::error::Error> {
    let mut out = Vec::new();
    let (mut o, mut empty) = (0, 0);
    while o < end {
        let (recs, _) = pc.fetch_records(o, 1..10_000_000, 1_000).await?;
        if recs.is_empty() {
            empty += 1;
            if empty > 20 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        }
        o = recs.last().map_or(o, |r| r.offset + 1);
        out.extend(recs);
    }
    Ok(out)
}

/// The checker: judges the recorded deliveries against the log, the commits and the DLQ.
fn check(
    shared: &Shared,
    log: &BTreeMap<(i32, i64), (String, String)>,
    dlq: &HashMap<(i32, i64), usize>,
    seconds: f64,
) -> ChaosReport {
    let deliveries = lock(&shared.deliveries).clone();
    let faults = lock(&shared.faults).clone();
    let commits = lock(&shared.commits).clone();
    let acked = lock(&shared.acked).clone();
    let seed = shared.seed;
    let mut r = ChaosReport {
        seconds,
        acked: acked.len(),
        in_log: log.len(),
        produce_errors: shared.produce_errors.load(Ordering::Relaxed),
        deliveries: deliveries.len(),
        dead_letters: dlq.values().sum(),
        ..ChaosReport::default()
    };
    for f in &faults {
        *r.faults.entry(format!("{:?}", f.kind)).or_default() += 1;
    }
    let fault_before = |t: u64| -> String {
        faults
            .iter()
            .rev()
            .find(|f| f.at <= t)
            .map(|f| format!("{:?} at {:.1}s ({})", f.kind, f.at as f64 / 1e6, f.what))
            .unwrap_or_else(|| "no fault yet".into())
    };
    let mut by_record: HashMap<(i32, i64), Vec<&Delivery>> = HashMap::new();
    for d in &deliveries {
        by_record
            .entry((d.partition, d.offset))
            .or_default()
            .push(d);
    }
    for v in by_record.values_mut() {
        v.sort_by_key(|d| d.start);
    }
    let terminal = |d: &Delivery| (200..300).contains(&d.status) || d.status == 422;

    // 1. Nothing acknowledged is lost.
    for (p, o, _) in &acked {
        let ok = by_record
            .get(&(*p, *o))
            .is_some_and(|v| v.iter().any(|d| (200..300).contains(&d.status)));
        if !ok && !dlq.contains_key(&(*p, *o)) {
            r.lost += 1;
            if r.lost <= 20 {
                r.violations.push(format!(
                    "LOST {TOPIC}-{p}@{o} (session {}): acknowledged, never answered 2xx nor dead-lettered; seed {seed}",
                    log.get(&(*p, *o)).map(|x| x.0.as_str()).unwrap_or("?")
                ));
            }
        }
    }
    // Records in the log but never delivered at all (acknowledged or not) are lost too.
    for ((p, o), (key, _)) in log {
        if !by_record.contains_key(&(*p, *o)) && !dlq.contains_key(&(*p, *o)) {
            r.violations.push(format!(
                "NEVER DELIVERED {TOPIC}-{p}@{o} (session {key}); seed {seed}"
            ));
        }
    }

    // 2. Order per session, across replays.
    let mut sessions: BTreeMap<&str, Vec<(i32, i64)>> = BTreeMap::new();
    for ((p, o), (key, _)) in log {
        sessions.entry(key.as_str()).or_default().push((*p, *o));
    }
    let mut order_violations = 0usize;
    for (session, recs) in &sessions {
        for w in recs.windows(2) {
            let (prev, cur) = (w[0], w[1]);
            let Some(cur_ds) = by_record.get(&cur) else {
                continue;
            };
            let prev_ds = by_record.get(&prev).map(Vec::as_slice).unwrap_or(&[]);
            for d in cur_ds {
                let latest = prev_ds.iter().rev().find(|x| x.start < d.start);
                let ok = latest.is_some_and(|l| l.end <= d.start && terminal(l));
                if !ok {
                    order_violations += 1;
                    if order_violations <= 20 {
                        r.violations.push(format!(
                            "ORDER session {session}: {TOPIC}-{}@{} delivered to {} at {:.3}s while @{} was {} ; fault before: {}; seed {seed}",
                            cur.0,
                            cur.1,
                            d.consumer,
                            d.start as f64 / 1e6,
                            prev.1,
                            match latest {
                                None => "not yet delivered".to_string(),
                                Some(l) if l.end > d.start =>
                                    format!("still in flight at {} (started {:.3}s)", l.consumer, l.start as f64 / 1e6),
                                Some(l) => format!("last answered {} by {}", l.status, l.consumer),
                            },
                            fault_before(d.start)
                        ));
                    }
                }
            }
        }
    }
    if order_violations > 20 {
        r.violations
            .push(format!("... {order_violations} ordering violations in all"));
    }

    // 3. Repeats after a terminal answer: only at or above the committed watermark.
    let mut commit_hist: HashMap<i32, Vec<(u64, i64)>> = HashMap::new();
    for (t, p, o) in &commits {
        commit_hist.entry(*p).or_default().push((*t, *o));
    }
    let mut below = 0usize;
    for ((p, o), ds) in &by_record {
        let mut done = false;
        for d in ds {
            if done {
                *r.duplicates
                    .entry(fault_kind_before(&faults, d.start))
                    .or_default() += 1;
                let c = commit_hist
                    .get(p)
                    .and_then(|h| h.iter().rev().find(|(t, _)| *t <= d.start))
                    .map(|(_, c)| *c)
                    .unwrap_or(0);
                if *o < c {
                    below += 1;
                    if below <= 20 {
                        r.violations.push(format!(
                            "REPLAY BELOW WATERMARK {TOPIC}-{p}@{o} (session {}) delivered again to {} at {:.3}s after a terminal answer, committed offset was {c}; fault before: {}; seed {seed}",
                            d.session,
                            d.consumer,
                            d.start as f64 / 1e6,
                            fault_before(d.start)
                        ));
                    }
                }
            }
            if terminal(d) {
                done = true;
            }
        }
    }

    // 4. The DLQ holds exactly the permanent failures.
    let perm: HashSet<(i32, i64)> = log
        .iter()
        .filter(|(_, (_, k))| k == "perm")
        .map(|(k, _)| *k)
        .collect();
    for rec in &perm {
        if !dlq.contains_key(rec) {
            r.violations.push(format!(
                "DLQ MISSING {TOPIC}-{}@{}: a permanent failure is not in {DLQ}; seed {seed}",
                rec.0, rec.1
            ));
        }
    }
    for (rec, n) in dlq {
        if !perm.contains(rec) {
            r.violations.push(format!(
                "DLQ EXTRA {TOPIC}-{}@{}: dead-lettered but not a permanent failure; fault before its last delivery: {}; seed {seed}",
                rec.0,
                rec.1,
                by_record
                    .get(rec)
                    .and_then(|v| v.last())
                    .map(|d| fault_before(d.start))
                    .unwrap_or_default()
            ));
        } else {
            let failed = by_record
                .get(rec)
                .map(|v| v.iter().filter(|d| d.status == 422).count())
                .unwrap_or(0);
            if *n > failed {
                r.violations.push(format!(
                    "DLQ DUPLICATE {TOPIC}-{}@{}: {n} dead letters for {failed} failed deliveries; seed {seed}",
                    rec.0, rec.1
                ));
            }
        }
    }

    // Recovery: from each fault until every partition delivered a record again (2xx, started
    // after the fault). The partitions are those of the log that saw any 2xx at all.
    let mut ok_starts: BTreeMap<i32, Vec<(u64, u64)>> = BTreeMap::new();
    for d in deliveries.iter().filter(|d| (200..300).contains(&d.status)) {
        ok_starts
            .entry(d.partition)
            .or_default()
            .push((d.start, d.end));
    }
    for v in ok_starts.values_mut() {
        v.sort_unstable();
    }
    // The end of the first 2xx delivery on `p` started at or after `at`. The first delivery
    // started after the fault need not be the first to end; none starting after the earliest
    // end found can end earlier.
    let first_flow = |p: i32, at: u64| -> Option<u64> {
        let v = ok_starts.get(&p)?;
        let i = v.partition_point(|(start, _)| *start < at);
        let mut first_end: Option<u64> = None;
        for (start, end) in &v[i..] {
            if first_end.is_some_and(|e| *start >= e) {
                break;
            }
            first_end = Some(first_end.map_or(*end, |e| e.min(*end)));
        }
        first_end
    };
    // The time until every partition of `parts` delivered again after `at` (`None`: one never did).
    let flows_again = |at: u64, parts: &dyn Fn(i32) -> bool| -> Option<u64> {
        let mut worst = Some(0u64);
        for p in ok_starts.keys().copied().filter(|p| parts(*p)) {
            worst = worst.zip(first_flow(p, at)).map(|(w, e)| w.max(e - at));
        }
        worst
    };
    let mut acks: BTreeMap<i32, Vec<u64>> = BTreeMap::new();
    for (p, _, at) in &acked {
        acks.entry(*p).or_default().push(*at);
    }
    for v in acks.values_mut() {
        v.sort_unstable();
    }
    // The first acknowledgement on `p` at or after `at`.
    let first_ack = |p: i32, at: u64| -> Option<u64> {
        let v = acks.get(&p)?;
        v.get(v.partition_point(|t| *t < at)).copied()
    };
    for f in &faults {
        let kind = format!("{:?}", f.kind);
        match flows_again(f.at, &|_| true) {
            Some(w) => r.recovery.entry(kind).or_default().push(w as f64 / 1e6),
            None => *r.unrecovered.entry(kind).or_default() += 1,
        }
        if f.kind == FaultKind::LeaderKill {
            let surviving = |p: i32| !f.moved.contains(&p) && !f.impaired.contains(&p);
            // Only kills that left some partition untouched by any fault measure anything.
            if ok_starts.keys().any(|p| surviving(*p)) {
                r.surviving_recovery
                    .push(flows_again(f.at, &surviving).map(|w| w as f64 / 1e6));
                let mut stall = Some(0u64);
                let mut delay = Some(0u64);
                for p in ok_starts.keys().copied().filter(|p| surviving(*p)) {
                    let ack = first_ack(p, f.at);
                    stall = stall.zip(ack).map(|(s, a)| s.max(a - f.at));
                    delay = match (delay, ack, first_flow(p, f.at)) {
                        (Some(d), Some(a), Some(e)) => Some(d.max(e.saturating_sub(a))),
                        _ => None,
                    };
                }
                r.surviving_log_stall.push(stall.map(|w| w as f64 / 1e6));
                r.surviving_consumer_delay
                    .push(delay.map(|w| w as f64 / 1e6));
            }
        }
    }
    r
}

/// Median and worst of the known values (0 when none).
fn median_worst(v: &[Option<f64>]) -> (f64, f64) {
    let mut v: Vec<f64> = v.iter().flatten().copied().collect();
    v.sort_by(f64::total_cmp);
    (
        v.get(v.len() / 2).copied().unwrap_or(0.0),
        v.last().copied().unwrap_or(0.0),
    )
}

fn fault_kind_before(faults: &[FaultEvent], t: u64) -> String {
    faults
        .iter()
        .rev()
        .find(|f| f.at <= t)
        .map(|f| format!("{:?}", f.kind))
        .unwrap_or_else(|| "none".into())
}

/// Prints the report; `Err` when anything was lost or violated.
pub fn print(report: &ChaosReport, opts: &ChaosOptions) -> Result<()> {
    println!("chaos run: seed {} · {:.0} s", opts.seed, report.seconds);
    println!(
        "records: {} acknowledged, {} in the log, {} produce errors; {} deliveries; {} dead letters",
        report.acked, report.in_log, report.produce_errors, report.deliveries, report.dead_letters
    );
    let faults: Vec<String> = report
        .faults
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!("faults: {}", faults.join(", "));
    let dups: Vec<String> = report
        .duplicates
        .iter()
        .map(|(k, n)| format!("after {k}: {n}"))
        .collect();
    println!(
        "duplicates (a delivery after a terminal answer): {}",
        if dups.is_empty() {
            "none".into()
        } else {
            dups.join(", ")
        }
    );
    let per: Vec<String> = KINDS
        .iter()
        .map(|k| format!("{k:?}"))
        .filter_map(|k| {
            let d = report.duplicates_per_event(&k)?;
            Some(format!("{k} {d:.1}"))
        })
        .collect();
    println!(
        "duplicates per fault event (commit metadata {}): {}",
        if report.commit_metadata { "on" } else { "off" },
        per.join(", ")
    );
    let rec: Vec<String> = report
        .recovery
        .iter()
        .map(|(k, v)| {
            let mut v = v.clone();
            v.sort_by(f64::total_cmp);
            let median = v.get(v.len() / 2).copied().unwrap_or(0.0);
            let worst = v.last().copied().unwrap_or(0.0);
            let stuck = report.unrecovered.get(k).copied().unwrap_or(0);
            format!(
                "{k} median {median:.1} s, worst {worst:.1} s ({} events{})",
                v.len(),
                if stuck > 0 {
                    format!(", {stuck} never recovered")
                } else {
                    String::new()
                }
            )
        })
        .collect();
    println!(
        "recovery (fault until every partition has a 2xx delivery started after it):\n  {}",
        rec.join("\n  ")
    );
    if let Some(v) = report.recovery.get(&format!("{:?}", FaultKind::LeaderKill)) {
        let within = v
            .iter()
            .filter(|s| **s <= SESSION_TIMEOUT.as_secs_f64())
            .count();
        println!(
            "leader kills recovered within one session timeout ({} s): {within} of {}",
            SESSION_TIMEOUT.as_secs(),
            v.len() + report.unrecovered.get("LeaderKill").copied().unwrap_or(0)
        );
    }
    if !report.surviving_recovery.is_empty() {
        let within = report
            .surviving_recovery
            .iter()
            .flatten()
            .filter(|s| **s <= SESSION_TIMEOUT.as_secs_f64())
            .count();
        let (median, worst) = median_worst(&report.surviving_recovery);
        println!(
            "leader kills, surviving partitions (led by a node neither killed nor behind a proxy fault in progress) flowing again within one session timeout: {within} of {} (median {median:.1} s, worst {worst:.1} s)",
            report.surviving_recovery.len(),
        );
        let (stall, delay) = (
            median_worst(&report.surviving_log_stall),
            median_worst(&report.surviving_consumer_delay),
        );
        println!(
            "  the brokers' part (no write acknowledged on some surviving partition until the killed node left the ISR): median {:.1} s, worst {:.1} s; the consumers' part (first acknowledged write to first delivery, worst partition): median {:.1} s, worst {:.1} s",
            stall.0, stall.1, delay.0, delay.1
        );
    }
    println!(
        "lost: {} · violations: {}",
        report.lost,
        report.violations.len()
    );
    for v in &report.violations {
        println!("  {v}");
    }
    let missing: Vec<&str> = KINDS
        .iter()
        .map(|k| format!("{k:?}"))
        .filter(|k| !report.faults.contains_key(k))
        .map(|_| "")
        .collect();
    if !missing.is_empty() {
        bail!("not every fault kind ran");
    }
    if report.lost > 0 || !report.violations.is_empty() {
        bail!(
            "chaos run failed: {} lost, {} violations (reproduce with --seed {})",
            report.lost,
            report.violations.len(),
            opts.seed
        );
    }
    Ok(())
}

/// Where a chaos run keeps its files.
pub fn default_dir(root: &Path) -> PathBuf {
    root.join(".kafka").join("chaos")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Shared {
        Shared {
            t0: Instant::now(),
            seed: 1,
            deliveries: Mutex::new(Vec::new()),
            attempts: Mutex::new(HashMap::new()),
            faults: Mutex::new(Vec::new()),
            proxy_faults: Mutex::new(Vec::new()),
            commits: Mutex::new(Vec::new()),
            acked: Mutex::new(Vec::new()),
            produce_errors: AtomicU64::new(0),
            stop_producing: AtomicBool::new(false),
            stop_polling: AtomicBool::new(false),
        }
    }

    fn d(offset: i64, start: u64, end: u64, status: u16) -> Delivery {
        Delivery {
            consumer: "c0".into(),
            partition: 0,
            offset,
            session: "s-1".into(),
            start,
            end,
            status,
        }
    }

    /// Session s-1 at offsets 0, 1, 2 of partition 0; offset 1 is a permanent failure.
    fn log() -> BTreeMap<(i32, i64), (String, String)> {
        let mut l = BTreeMap::new();
        l.insert((0, 0), ("s-1".to_string(), "ok".to_string()));
        l.insert((0, 1), ("s-1".to_string(), "perm".to_string()));
        l.insert((0, 2), ("s-1".to_string(), "t1".to_string()));
        l
    }

    fn dlq() -> HashMap<(i32, i64), usize> {
        HashMap::from([((0, 1), 1)])
    }

    fn clean(s: &Shared) {
        *lock(&s.acked) = vec![(0, 0, 5), (0, 1, 6), (0, 2, 7)];
        *lock(&s.deliveries) = vec![
            d(0, 10, 20, 200),
            d(1, 30, 40, 422),
            d(2, 50, 60, 503),
            d(2, 70, 80, 200),
        ];
    }

    #[test]
    fn a_clean_run_passes() {
        let s = shared();
        clean(&s);
        let r = check(&s, &log(), &dlq(), 1.0);
        assert_eq!(r.lost, 0);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
    }

    #[test]
    fn a_record_started_before_its_predecessor_ended_is_an_order_violation() {
        let s = shared();
        clean(&s);
        // Offset 2 starts at 35, while offset 1 (30..40) is still in flight.
        lock(&s.deliveries)[2] = d(2, 35, 60, 503);
        let r = check(&s, &log(), &dlq(), 1.0);
        assert!(
            r.violations.iter().any(|v| v.starts_with("ORDER")),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn a_replay_must_finish_the_predecessor_again_first() {
        let s = shared();
        clean(&s);
        lock(&s.faults).push(FaultEvent {
            at: 85,
            kind: FaultKind::ConsumerKill,
            what: "test".into(),
            moved: Vec::new(),
            impaired: Vec::new(),
        });
        // After a crash, offset 1 is redelivered and still retrying when offset 2 goes out.
        lock(&s.deliveries).extend([d(1, 90, 95, 503), d(2, 100, 110, 200)]);
        let r = check(&s, &log(), &dlq(), 1.0);
        let v: Vec<&String> = r
            .violations
            .iter()
            .filter(|v| v.starts_with("ORDER"))
            .collect();
        assert_eq!(v.len(), 1, "{:?}", r.violations);
        assert!(
            v[0].contains("ConsumerKill"),
            "names the fault before: {}",
            v[0]
        );
    }

    #[test]
    fn an_acknowledged_record_without_an_answer_is_lost() {
        let s = shared();
        clean(&s);
        lock(&s.deliveries).retain(|x| x.offset != 2 || x.status != 200);
        let r = check(&s, &log(), &dlq(), 1.0);
        assert_eq!(r.lost, 1);
    }

    #[test]
    fn a_repeat_below_the_committed_offset_is_a_violation_and_above_is_a_duplicate() {
        let s = shared();
        clean(&s);
        lock(&s.commits).push((85, 0, 1));
        // Offset 0 is below the watermark 1: a violation. Offset 2 is above it: a duplicate only.
        lock(&s.deliveries).extend([d(2, 90, 95, 200), d(0, 100, 105, 200)]);
        let r = check(&s, &log(), &dlq(), 1.0);
        let below: Vec<&String> = r
            .violations
            .iter()
            .filter(|v| v.starts_with("REPLAY BELOW"))
            .collect();
        assert_eq!(below.len(), 1, "{:?}", r.violations);
        assert!(below[0].contains("@0 "), "{}", below[0]);
        assert_eq!(r.duplicates.values().sum::<usize>(), 2);
    }

    #[test]
    fn the_dlq_must_hold_exactly_the_permanent_failures() {
        let s = shared();
        clean(&s);
        let r = check(&s, &log(), &HashMap::from([((0, 2), 1)]), 1.0);
        assert!(r.violations.iter().any(|v| v.starts_with("DLQ MISSING")));
        assert!(r.violations.iter().any(|v| v.starts_with("DLQ EXTRA")));
        let r = check(&s, &log(), &HashMap::from([((0, 1), 2)]), 1.0);
        assert!(r.violations.iter().any(|v| v.starts_with("DLQ DUPLICATE")));
    }

    #[test]
    fn recovery_is_the_time_until_every_partition_flows_again() {
        let s = shared();
        clean(&s);
        lock(&s.faults).push(FaultEvent {
            at: 100,
            kind: FaultKind::LeaderKill,
            what: "test".into(),
            moved: vec![1],
            impaired: Vec::new(),
        });
        let on = |partition: i32, offset: i64, start: u64, end: u64, status: u16| {
            let mut x = d(offset, start, end, status);
            x.partition = partition;
            x.session = format!("p{partition}");
            lock(&s.deliveries).push(x);
        };
        // Partition 0 flows again at 150 (the 503 at 110 does not count); partition 1 at 3,000
        // (the delivery that started before the fault and ended after it does not count either).
        on(0, 3, 110, 120, 503);
        on(0, 3, 130, 150, 200);
        on(1, 0, 90, 2_000, 200);
        on(1, 1, 2_500, 3_000, 200);
        let r = check(&s, &BTreeMap::new(), &HashMap::new(), 1.0);
        assert_eq!(r.recovery.get("LeaderKill"), Some(&vec![2_900.0 / 1e6]));
        assert!(r.unrecovered.is_empty());
        // Partition 1's leader was killed: the surviving partition 0 flowed again at 150.
        assert_eq!(r.surviving_recovery, vec![Some(50.0 / 1e6)]);
        // No write on partition 0 was acknowledged after the kill: the split is unknown.
        assert_eq!(r.surviving_log_stall, vec![None]);
        assert_eq!(r.surviving_consumer_delay, vec![None]);
        // The broker acknowledged a write on partition 0 again at 140, 40 after the kill; the
        // delivery ended 10 later.
        lock(&s.acked).extend([(0, 3, 140), (0, 4, 145)]);
        let r = check(&s, &BTreeMap::new(), &HashMap::new(), 1.0);
        assert_eq!(r.surviving_log_stall, vec![Some(40.0 / 1e6)]);
        assert_eq!(r.surviving_consumer_delay, vec![Some(10.0 / 1e6)]);
        // With partition 0 behind a proxy fault in progress, no partition survives the kill
        // untouched, so the kill measures nothing there.
        lock(&s.faults)[0].impaired = vec![0];
        let r = check(&s, &BTreeMap::new(), &HashMap::new(), 1.0);
        assert!(r.surviving_recovery.is_empty());
        lock(&s.faults)[0].impaired = Vec::new();

        // A partition that never delivers after a fault makes it unrecovered.
        lock(&s.faults).push(FaultEvent {
            at: 5_000,
            kind: FaultKind::ProxyStall,
            what: "test".into(),
            moved: Vec::new(),
            impaired: Vec::new(),
        });
        let r = check(&s, &BTreeMap::new(), &HashMap::new(), 1.0);
        assert_eq!(r.unrecovered.get("ProxyStall"), Some(&1));
    }

    #[test]
    fn duplicates_are_counted_per_fault_event() {
        let s = shared();
        clean(&s);
        for at in [85, 86] {
            lock(&s.faults).push(FaultEvent {
                at,
                kind: FaultKind::ConsumerKill,
                what: "test".into(),
                moved: Vec::new(),
                impaired: Vec::new(),
            });
        }
        // Three repeats after terminal answers, all after the two kills.
        lock(&s.deliveries).extend([d(0, 90, 95, 200), d(1, 96, 97, 422), d(2, 100, 110, 200)]);
        let r = check(&s, &log(), &HashMap::from([((0, 1), 2)]), 1.0);
        assert_eq!(r.duplicates.get("ConsumerKill"), Some(&3));
        assert_eq!(r.duplicates_per_event("ConsumerKill"), Some(1.5));
        assert_eq!(r.duplicates_per_event("LeaderKill"), None);
    }
}
