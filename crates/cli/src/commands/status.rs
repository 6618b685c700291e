//! `orderly status --group G`: state, members and their assignment, committed offsets, completed offsets held in the commit metadata, lag and the oldest unfinished offset per partition.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use orderly_protocol::ConnectionKind;
use orderly_protocol::consumer_protocol::Assignment;
use orderly_protocol::messages::describe_groups::DescribeGroupsRequest;
use orderly_protocol::messages::list_offsets::LATEST;
use orderly_protocol::messages::offset_fetch::{OffsetFetchGroup, OffsetFetchRequest};
use orderly_protocol::records::IsolationLevel;
use serde::Serialize;

use crate::kafka::KafkaArgs;

/// Arguments of `orderly status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    kafka: KafkaArgs,
    /// Consumer group id.
    #[arg(long, env = "ORDERLY_GROUP")]
    group: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Also list the sessions parked (--dlq-mode park-session) in the `orderly consume` process
    /// serving this admin address (parked sessions live in that process, not in Kafka).
    #[arg(long, value_name = "HOST:PORT")]
    admin_addr: Option<String>,
}

/// `GET /parked` from a consumer's admin endpoint.
async fn parked_from(addr: &str) -> Result<serde_json::Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tokio::net::TcpStream::connect(addr),
    )
    .await
    .map_err(|_| anyhow::anyhow!("connecting to {addr} timed out"))?
    .with_context(|| format!("cannot reach the admin endpoint {addr}"))?;
    s.write_all(b"GET /parked HTTP/1.1\r\nhost: orderly\r\nconnection: close\r\n\r\n")
        .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .context("no HTTP body from the admin endpoint")?;
    serde_json::from_str(body.trim()).context("the admin endpoint's /parked is not JSON")
}

#[derive(Debug, Serialize)]
struct MemberStatus {
    member_id: String,
    instance_id: Option<String>,
    client_id: String,
    host: String,
    /// `topic-partition` names assigned to it.
    assignment: Vec<String>,
}

#[derive(Debug, Serialize)]
struct PartitionStatus {
    topic: String,
    partition: i32,
    /// The commit point: everything below it is done.
    committed: i64,
    /// Offsets above the commit point already done (from the commit metadata), as `[from, to)`.
    completed_above: Vec<(i64, i64)>,
    /// Log end offset.
    end: i64,
    /// `end - committed`, minus the completed offsets above the commit point.
    lag: i64,
    /// The oldest offset not finished (= the commit point), if anything is left.
    oldest_unfinished: Option<i64>,
    /// The raw metadata when it is not orderly's.
    #[serde(skip_serializing_if = "Option::is_none")]
    foreign_metadata: Option<String>,
}

/// Runs `orderly status`.
pub async fn run(a: StatusArgs) -> Result<ExitCode> {
    let (pool, cluster) = a.kafka.connect(Vec::new()).await?;
    let any = pool.any().await?;
    let coord = any
        .find_coordinator(&a.group)
        .await
        .with_context(|| format!("finding the coordinator of group {}", a.group))?;
    let conn = pool
        .get(
            &format!("{}:{}", coord.host, coord.port),
            ConnectionKind::Coordination,
        )
        .await?;
    let described = conn
        .send(&DescribeGroupsRequest {
            groups: vec![a.group.clone()],
            include_authorized_operations: false,
        })
        .await
        .context("describing the group")?;
    let (state, assignor, members) = match described.groups.into_iter().next() {
        Some(g) if g.error_code == orderly_protocol::ErrorCode::NONE => {
            let members: Vec<MemberStatus> = g
                .members
                .into_iter()
                .map(|m| {
                    let assignment = Assignment::decode(m.member_assignment.clone())
                        .map(|asg| {
                            asg.assigned_partitions
                                .iter()
                                .flat_map(|tp| {
                                    tp.partitions
                                        .iter()
                                        .map(move |p| format!("{}-{p}", tp.topic))
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    MemberStatus {
                        member_id: m.member_id,
                        instance_id: m.group_instance_id,
                        client_id: m.client_id,
                        host: m.client_host,
                        assignment,
                    }
                })
                .collect();
            (g.group_state, g.protocol_data, members)
        }
        Some(g) => bail!("describing group {}: {:?}", a.group, g.error_code),
        None => (String::from("unknown"), String::new(), Vec::new()),
    };
    let resp = conn
        .offset_fetch(&OffsetFetchRequest {
            groups: vec![OffsetFetchGroup {
                group_id: a.group.clone(),
                member_id: None,
                member_epoch: -1,
                topics: None,
            }],
            require_stable: false,
        })
        .await
        .context("reading the group's committed offsets")?;
    let Some(g) = resp.groups.into_iter().next() else {
        bail!("the broker returned no result for group {}", a.group);
    };
    if g.error_code != orderly_protocol::ErrorCode::NONE {
        bail!("group {}: {:?}", a.group, g.error_code);
    }
    let mut rows = Vec::new();
    for t in g.topics {
        for p in t.partitions {
            if p.committed_offset < 0 {
                continue;
            }
            let end = cluster
                .list_offset(
                    &t.name,
                    p.partition_index,
                    LATEST,
                    IsolationLevel::ReadCommitted,
                )
                .await
                .with_context(|| format!("end offset of {}-{}", t.name, p.partition_index))?;
            let text = p.metadata.clone().unwrap_or_default();
            let (completed, foreign) =
                match orderly_engine::metadata::decode(p.committed_offset, &text) {
                    Ok(r) => (r.into_iter().map(|r| (r.start, r.end)).collect(), None),
                    Err(_) => (Vec::new(), Some(text)),
                };
            let done_above: i64 = completed
                .iter()
                .map(|(s, e): &(i64, i64)| e.min(&end) - s)
                .filter(|n| *n > 0)
                .sum();
            let lag = (end - p.committed_offset - done_above).max(0);
            rows.push(PartitionStatus {
                topic: t.name.clone(),
                partition: p.partition_index,
                committed: p.committed_offset,
                completed_above: completed,
                end,
                lag,
                oldest_unfinished: (p.committed_offset < end).then_some(p.committed_offset),
                foreign_metadata: foreign,
            });
        }
    }
    rows.sort_by(|x, y| (&x.topic, x.partition).cmp(&(&y.topic, y.partition)));
    let parked = match &a.admin_addr {
        Some(addr) => Some(parked_from(addr).await?),
        None => None,
    };
    if a.json {
        #[derive(Serialize)]
        struct Out<'a> {
            group: &'a str,
            state: &'a str,
            assignor: &'a str,
            members: &'a [MemberStatus],
            coordinator: String,
            partitions: &'a [PartitionStatus],
            total_lag: i64,
            #[serde(skip_serializing_if = "Option::is_none")]
            parked_sessions: Option<&'a serde_json::Value>,
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&Out {
                group: &a.group,
                state: &state,
                assignor: &assignor,
                members: &members,
                coordinator: format!("{}:{} (id {})", coord.host, coord.port, coord.node_id),
                partitions: &rows,
                total_lag: rows.iter().map(|r| r.lag).sum(),
                parked_sessions: parked.as_ref(),
            })?
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "group {} (coordinator {}:{}, id {})",
        a.group, coord.host, coord.port, coord.node_id
    );
    println!(
        "state {state}{}, {} members",
        if assignor.is_empty() {
            String::new()
        } else {
            format!(" (assignor {assignor})")
        },
        members.len()
    );
    for m in &members {
        println!(
            "  {} {}{} on {}: {}",
            m.member_id,
            m.client_id,
            m.instance_id
                .as_ref()
                .map_or(String::new(), |i| format!(" (static {i})")),
            m.host,
            if m.assignment.is_empty() {
                "-".to_owned()
            } else {
                m.assignment.join(",")
            }
        );
    }
    if let Some(serde_json::Value::Array(list)) = &parked {
        println!(
            "{} parked sessions (at {})",
            list.len(),
            a.admin_addr.as_deref().unwrap_or("")
        );
        for p in list {
            println!(
                "  {}-{} session {} parked since offset {} ({} later records sent to the DLQ)",
                p["topic"].as_str().unwrap_or(""),
                p["partition"],
                p["session"].as_str().unwrap_or(""),
                p["since_offset"],
                p["parked_records"]
            );
        }
    }
    if rows.is_empty() {
        println!("no committed offsets");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<30} {:>10} {:>10} {:>8} {:>10} COMPLETED ABOVE COMMIT",
        "PARTITION", "COMMITTED", "END", "LAG", "OLDEST"
    );
    for r in &rows {
        let done = if r.completed_above.is_empty() {
            "-".to_owned()
        } else {
            r.completed_above
                .iter()
                .map(|(s, e)| {
                    if e - s == 1 {
                        s.to_string()
                    } else {
                        format!("{s}..{}", e - 1)
                    }
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        println!(
            "{:<30} {:>10} {:>10} {:>8} {:>10} {done}",
            format!("{}-{}", r.topic, r.partition),
            r.committed,
            r.end,
            r.lag,
            r.oldest_unfinished.map_or("-".into(), |o| o.to_string()),
        );
    }
    println!("total lag {}", rows.iter().map(|r| r.lag).sum::<i64>());
    Ok(ExitCode::SUCCESS)
}
