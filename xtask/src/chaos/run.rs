//! A run: the cluster and its proxies, the consumers, the fault schedule, the drain and the
//! read-back that the checker judges.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use orderly_protocol::{ConnectionConfig, ConnectionPool};
use orderly_testkit::cluster::{ClusterOptions, TestCluster};
use orderly_testkit::fault_proxy::FaultProxy;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rskafka::client::partition::{OffsetAt, UnknownTopicHandling};

use super::check::check;
use super::consumers::Consumers;
use super::kafka::{
    committed, coordinator_of, leader_of, leaders, poll_commits, read_back,
    read_committed_dead_letters, read_committed_replies, transaction_coordinator,
};
use super::observe::Shared;
use super::report::ChaosReport;
use super::workload::{kind_of, produce, serve_http};
use super::{
    ChaosOptions, DLQ, EXACTLY_ONCE_KILLS, FaultKind, REPLIES, STALL, TOPIC, kinds, lock,
    session_timeout,
};

/// The longest a step waits for every partition to flow again before the next one starts (it
/// goes on regardless: the report counts a partition that never recovered).
const RECOVERY_WAIT: Duration = Duration::from_secs(45);

/// Runs node operations (which block: JVM start) off the async threads.
pub(super) async fn with_cluster<T: Send + 'static>(
    cluster: &Arc<Mutex<TestCluster>>,
    f: impl FnOnce(&mut TestCluster) -> orderly_testkit::Result<T> + Send + 'static,
) -> Result<T> {
    let c = cluster.clone();
    let r = tokio::task::spawn_blocking(move || f(&mut lock(&c))).await?;
    Ok(r?)
}

/// Runs a chaos run; `Err` only when the harness itself fails. Violations are in the report.
pub async fn run(opts: ChaosOptions) -> Result<ChaosReport> {
    let t0 = Instant::now();
    let shared = Arc::new(Shared::new(t0, opts.seed, opts.exactly_once));
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
        TestCluster::start(
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
    if opts.exactly_once {
        orderly_testkit::create_topic_rf(&nodes[0].1, REPLIES, 3, 3).await?;
    }
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
        exactly_once: opts.exactly_once,
        session_timeout: session_timeout(&opts),
        t0,
        exits: Vec::new(),
    };
    for i in 0..opts.consumers {
        consumers.spawn(&format!("c{i}")).await?;
    }
    let poller = tokio::spawn(poll_commits(shared.clone(), direct.clone()));
    let producer = tokio::spawn(produce(shared.clone(), direct.clone(), opts.clone()));

    // The schedule: every kind once (seeded order), then seeded random kinds until time is up.
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let all = kinds(&opts);
    let mut order = all.clone();
    if opts.exactly_once {
        order.extend(std::iter::repeat_n(
            FaultKind::ConsumerKill,
            EXACTLY_ONCE_KILLS.saturating_sub(1),
        ));
    }
    order.shuffle(&mut rng);
    let schedule_end = Duration::from_secs_f64(opts.minutes * 60.0);
    let faults_start = Instant::now();
    // The first fault comes once every partition has delivered.
    settle(&mut consumers, &shared, &opts, &nodes, 0, RECOVERY_WAIT).await?;
    let mut step = 0usize;
    while step < order.len() || faults_start.elapsed() < schedule_end {
        let kind = if step < order.len() {
            order[step]
        } else {
            all[rng.random_range(0..all.len())]
        };
        step += 1;
        restart_exited(&mut consumers, &shared).await?;
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
            FaultKind::Zombie => {
                // A consumer that works partitions: the zombie wakes with an ownership the
                // group has given away.
                let owners = delivering(&mut consumers, &shared).await?;
                let i = owners
                    .get(rng.random_range(0..owners.len().max(1)))
                    .copied()
                    .unwrap_or(0);
                let name = consumers.running.get(i).map(|c| c.name.clone());
                if let Some(name) = name.filter(|n| consumers.signal(n, "-STOP")) {
                    shared.fault(
                        kind,
                        format!("SIGSTOP consumer {name} until its partitions moved"),
                    );
                    // Two session timeouts at least, and until every partition delivered
                    // again (the group moved the zombie's partitions to the others).
                    let stopped = shared.now();
                    tokio::time::sleep(session_timeout(&opts) * 2).await;
                    settle(
                        &mut consumers,
                        &shared,
                        &opts,
                        &nodes,
                        stopped,
                        RECOVERY_WAIT,
                    )
                    .await?;
                    // By name: a consumer that exited meanwhile was started again at the end of
                    // the list, moving the others.
                    if consumers.signal(&name, "-CONT") {
                        shared.fault(kind, format!("SIGCONT consumer {name}: a zombie wakes"));
                    }
                }
            }
            FaultKind::CoordinatorKill => {
                if let Some(l) = transaction_coordinator(&nodes).await {
                    with_cluster(&cluster, move |c| c.kill(l)).await?;
                    shared.fault(
                        kind,
                        format!("SIGKILL node {l} (leader of the transaction state log)"),
                    );
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    with_cluster(&cluster, move |c| c.restart(l)).await?;
                    eprintln!("[chaos] node {l} serves again");
                }
            }
            FaultKind::MemberChurn => {
                for round in 0..2 {
                    let name = format!("x{step}-{round}");
                    consumers.spawn(&name).await?;
                    shared.fault(kind, format!("consumer {name} joins"));
                    tokio::time::sleep(Duration::from_secs(rng.random_range(3..7))).await;
                    let left = match consumers.index_of(&name) {
                        Some(i) => consumers.leave(i).await,
                        None => None,
                    };
                    if let Some(n) = left {
                        shared.fault(kind, format!("consumer {n} left (SIGTERM)"));
                    }
                }
            }
        }
        // The next fault comes once every partition delivered again since this one ended, and
        // the group ran undisturbed for a moment.
        let ended = shared.now();
        settle(&mut consumers, &shared, &opts, &nodes, ended, RECOVERY_WAIT).await?;
        tokio::time::sleep(Duration::from_secs(rng.random_range(1..4))).await;
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
        restart_exited(&mut consumers, &shared).await?;
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
    // The end of the run: a consumer gone before its SIGTERM counts as an exit of its own.
    while !consumers.running.is_empty() {
        consumers.leave(0).await;
    }
    shared.stop_polling.store(true, Ordering::Relaxed);
    let mut poller = poller;
    if tokio::time::timeout(Duration::from_secs(20), &mut poller)
        .await
        .is_err()
    {
        poller.abort();
    }

    // Read back the log (every record, acknowledged or not) and the DLQ, with a fresh client
    // (the brokers restarted under the old one).
    eprintln!("[chaos] reading {TOPIC} back");
    let client =
        rskafka::client::ClientBuilder::new(direct.split(',').map(str::to_string).collect())
            .build()
            .await?;
    let mut log: BTreeMap<(i32, i64), (String, String)> = BTreeMap::new();
    for (p, end) in &ends {
        let read = async {
            let pc = client
                .partition_client(TOPIC, *p, UnknownTopicHandling::Retry)
                .await?;
            read_back(&pc, *end).await.map_err(anyhow::Error::from)
        };
        let records = tokio::time::timeout(Duration::from_secs(180), read)
            .await
            .with_context(|| format!("reading {TOPIC}-{p} back took over 180 s"))??;
        for r in records {
            let key = String::from_utf8_lossy(&r.record.key.unwrap_or_default()).into_owned();
            let kind = kind_of(&r.record.value.unwrap_or_default()).to_string();
            log.insert((*p, r.offset), (key, kind));
        }
    }
    // In exactly-once mode the DLQ is written in transactions: Kafka's own consumer reads it
    // under read_committed, beside the replies.
    let (dlq, replies) = if opts.exactly_once {
        let (dlq, replies) = read_committed_outputs(&direct).await?;
        (dlq, Some(replies))
    } else {
        eprintln!("[chaos] reading {DLQ} back");
        (read_dlq(&client).await?, None)
    };
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
    let mut obs = shared.observations();
    obs.log = log;
    obs.dlq = dlq;
    obs.replies = replies;
    obs.exits = std::mem::take(&mut consumers.exits);
    let mut report = check(&obs, t0.elapsed().as_secs_f64());
    report.commit_metadata = opts.commit_metadata;
    // The cluster is thrown away (the next run formats a new one): no controlled shutdown.
    let _ = tokio::task::spawn_blocking(move || {
        let mut c = lock(&cluster);
        let ids: Vec<i32> = c.nodes().iter().map(|n| n.id).collect();
        ids.into_iter().try_for_each(|id| c.kill(id))
    })
    .await;
    Ok(report)
}

/// Waits until every partition delivered again since `since` (µs since the start; the report's
/// recovery), or `cap` passed, restarting consumers that exited meanwhile. A
/// partition led by a node whose proxy is stalling or dropping right now is not waited for, and
/// nothing is while the group coordinator's is: the schedule goes on beside a proxy fault, as it
/// would beside any other.
async fn settle(
    consumers: &mut Consumers,
    shared: &Shared,
    opts: &ChaosOptions,
    nodes: &[(i32, String)],
    since: u64,
    cap: Duration,
) -> Result<()> {
    let deadline = Instant::now() + cap;
    loop {
        restart_exited(consumers, shared).await?;
        let impaired = shared.impaired_nodes();
        let flowing = if impaired.is_empty() {
            shared.flowing_since(since, opts.partitions, &[])
        } else if coordinator_of(nodes)
            .await
            .is_some_and(|c| impaired.contains(&c))
        {
            true
        } else {
            let behind: Vec<i32> = leaders(nodes)
                .await
                .into_iter()
                .filter(|(_, leader)| impaired.contains(leader))
                .map(|(partition, _)| partition)
                .collect();
            shared.flowing_since(since, opts.partitions, &behind)
        };
        if flowing || Instant::now() > deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The indexes of the running consumers that delivered in the last two seconds, waiting (at most
/// [`RECOVERY_WAIT`]) until one did.
async fn delivering(consumers: &mut Consumers, shared: &Shared) -> Result<Vec<usize>> {
    let deadline = Instant::now() + RECOVERY_WAIT;
    loop {
        restart_exited(consumers, shared).await?;
        let names = shared.delivering_since(shared.now().saturating_sub(2_000_000));
        let owners: Vec<usize> = consumers
            .running
            .iter()
            .enumerate()
            .filter(|(_, c)| names.contains(&c.name))
            .map(|(i, _)| i)
            .collect();
        if !owners.is_empty() || Instant::now() > deadline {
            return Ok(owners);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Consumers that exited on their own (each counted, with its status and log tail, and failing
/// the run) are started again under the same name, so the same transactional id, as a
/// supervisor would: the rest of the run still checks order, loss and replies.
async fn restart_exited(consumers: &mut Consumers, shared: &Shared) -> Result<()> {
    for name in consumers.reap() {
        eprintln!(
            "[chaos {:>7.1}s] starting consumer {name} again",
            shared.now() as f64 / 1e6
        );
        consumers.spawn(&name).await?;
    }
    Ok(())
}

/// The DLQ (source `(partition, offset)` → dead letters) and the replies as Apache Kafka's own
/// consumer reads them under read_committed, both at once, each up to its end offsets as the read
/// starts (every consumer has exited by then: nothing is open, nothing comes later).
async fn read_committed_outputs(
    direct: &str,
) -> Result<(HashMap<(i32, i64), usize>, Vec<(String, String)>)> {
    eprintln!("[chaos] reading {DLQ} and {REPLIES} with Apache Kafka's consumer (read_committed)");
    tokio::try_join!(
        read_committed_dead_letters(direct),
        read_committed_replies(direct)
    )
}

/// The DLQ read back with rskafka: source `(partition, offset)` → dead letters.
async fn read_dlq(client: &rskafka::client::Client) -> Result<HashMap<(i32, i64), usize>> {
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
    Ok(dlq)
}
