//! What the harness asks the cluster over the direct listeners (never faulted): committed
//! offsets, leaders, coordinators, and the topics read back at the end.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};
use orderly_protocol::messages::offset_fetch::{OffsetFetchGroup, OffsetFetchRequest};
use orderly_protocol::{BrokerConnection, ConnectionConfig, ConnectionKind, ConnectionPool};
use orderly_testkit::{ReadForm, read_committed_to_end, read_to_end};

use super::observe::Shared;
use super::{DLQ, GROUP, REPLIES, TOPIC, lock};

/// The group's committed offsets of the topic.
pub(super) async fn committed(pool: &ConnectionPool) -> Option<Vec<(i32, i64)>> {
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

/// Records every change of the group's committed offsets until `stop_polling`.
pub(super) async fn poll_commits(shared: Arc<Shared>, bootstrap: String) {
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
pub(super) async fn leader_of(nodes: &[(i32, String)], partition: i32) -> Option<i32> {
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
pub(super) async fn coordinator_of(nodes: &[(i32, String)]) -> Option<i32> {
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
pub(super) async fn leaders(nodes: &[(i32, String)]) -> Vec<(i32, i32)> {
    leaders_of(nodes, TOPIC).await
}

/// The node leading the transaction state log (one partition in the test cluster): the
/// transaction coordinator of every transactional id.
pub(super) async fn transaction_coordinator(nodes: &[(i32, String)]) -> Option<i32> {
    leaders_of(nodes, "__transaction_state")
        .await
        .into_iter()
        .find(|(p, l)| *p == 0 && *l >= 0)
        .map(|(_, l)| l)
}

/// `(partition, leader)` of every partition of `topic`, from the first node that answers.
async fn leaders_of(nodes: &[(i32, String)], topic: &str) -> Vec<(i32, i32)> {
    for (_, addr) in nodes {
        let Some(conn) = direct(addr).await else {
            continue;
        };
        let Ok(md) = conn.metadata(Some(&[topic])).await else {
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

/// Every record of a partition below `end`. A read below the end that comes back empty (a leader
/// just moved after the restarts) is retried for ~5 s before the rest counts as missing.
pub(super) async fn read_back(
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

/// The reply topic as Apache Kafka's own consumer reads it under read_committed, up to its end
/// offsets as the read starts: `(key, value)` lines, each partition in offset order.
pub(super) async fn read_committed_replies(bootstrap: &str) -> Result<Vec<(String, String)>> {
    read_committed_to_end(bootstrap, REPLIES)
        .await
        .context("reading the replies with Apache Kafka's consumer")
}

/// The DLQ as Apache Kafka's own consumer reads it under read_committed (the exactly-once mode
/// writes it in transactions), up to its end offsets as the read starts: source `(partition,
/// offset)` → dead letters.
pub(super) async fn read_committed_dead_letters(
    bootstrap: &str,
) -> Result<HashMap<(i32, i64), usize>> {
    let lines = read_to_end(bootstrap, DLQ, ReadForm::Headers)
        .await
        .context("reading the DLQ with Apache Kafka's consumer")?;
    let mut out = HashMap::new();
    for l in &lines {
        let field = |name: &str| {
            l.split(',')
                .find_map(|h| h.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse::<i64>().ok())
        };
        let (Some(p), Some(o)) = (field("orderly-dlq-partition"), field("orderly-dlq-offset"))
        else {
            continue;
        };
        *out.entry((i32::try_from(p).unwrap_or(-1), o)).or_default() += 1;
    }
    Ok(out)
}
