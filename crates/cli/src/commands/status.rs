//! `orderly status --group G`: state, members and their assignment, committed offsets, completed offsets held in the commit metadata, lag and the oldest unfinished offset per partition.
//!
//! The reading and decoding is `orderly_consumer::tools::status::group_status`; this module adds
//! the parked sessions of a running consumer (from its admin endpoint) and prints.

use std::process::ExitCode;

use anyhow::{Context, Result};
use orderly_consumer::tools::status::{GroupStatus, group_status};
use serde::Serialize;

use crate::kafka::KafkaArgs;

/// Arguments of `orderly status`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub(crate) kafka: KafkaArgs,
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

/// Runs `orderly status`.
pub async fn run(a: StatusArgs) -> Result<ExitCode> {
    let (pool, cluster) = a.kafka.connect(Vec::new()).await?;
    let status = group_status(&pool, &cluster, &a.group)
        .await
        .with_context(|| format!("reading the status of group {}", a.group))?;
    let parked = match &a.admin_addr {
        Some(addr) => Some(parked_from(addr).await?),
        None => None,
    };
    let GroupStatus {
        group,
        coordinator,
        state,
        assignor,
        members,
        partitions: rows,
        total_lag,
    } = &status;
    if a.json {
        #[derive(Serialize)]
        struct Out<'a> {
            #[serde(flatten)]
            status: &'a GroupStatus,
            #[serde(skip_serializing_if = "Option::is_none")]
            parked_sessions: Option<&'a serde_json::Value>,
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&Out {
                status: &status,
                parked_sessions: parked.as_ref(),
            })?
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("group {group} (coordinator {coordinator})");
    println!(
        "state {state}{}, {} members",
        if assignor.is_empty() {
            String::new()
        } else {
            format!(" (assignor {assignor})")
        },
        members.len()
    );
    for m in members {
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
    for r in rows {
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
    println!("total lag {total_lag}");
    Ok(ExitCode::SUCCESS)
}
