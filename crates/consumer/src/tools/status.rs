//! A consumer group's state as an operator wants to see it (what `orderly status` prints): members
//! and their assignments (DescribeGroups), committed offsets (OffsetFetch at the coordinator), the
//! completed offsets above each commit point (orderly's commit metadata, decoded with
//! `orderly_engine::metadata`), lag per partition (ListOffsets) and the oldest unfinished offset.

use std::sync::Arc;

use orderly_protocol::consumer_protocol::Assignment;
use orderly_protocol::messages::describe_groups::DescribeGroupsRequest;
use orderly_protocol::messages::list_offsets::LATEST;
use orderly_protocol::messages::offset_fetch::{OffsetFetchGroup, OffsetFetchRequest};
use orderly_protocol::records::IsolationLevel;
use orderly_protocol::{ConnectionKind, ConnectionPool, ErrorCode};
use serde::Serialize;

use crate::error::DriverError;
use crate::metadata_cache::MetadataCache;

/// One member of the group.
#[derive(Debug, Clone, Serialize)]
pub struct MemberStatus {
    /// Member id.
    pub member_id: String,
    /// Static instance id.
    pub instance_id: Option<String>,
    /// Client id.
    pub client_id: String,
    /// Client host.
    pub host: String,
    /// `topic-partition` names assigned to it.
    pub assignment: Vec<String>,
}

/// One partition with a committed offset.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionStatus {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The commit point: everything below it is done.
    pub committed: i64,
    /// Offsets above the commit point already done (from the commit metadata), as `[from, to)`.
    pub completed_above: Vec<(i64, i64)>,
    /// Log end offset (read_committed).
    pub end: i64,
    /// `end - committed`, minus the completed offsets above the commit point.
    pub lag: i64,
    /// The oldest offset not finished (= the commit point), if anything is left.
    pub oldest_unfinished: Option<i64>,
    /// The raw metadata when it is not orderly's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub foreign_metadata: Option<String>,
}

/// A group's state.
#[derive(Debug, Clone, Serialize)]
pub struct GroupStatus {
    /// Group id.
    pub group: String,
    /// The coordinator, `host:port (id N)`.
    pub coordinator: String,
    /// The group state (`Stable`, `Empty`, ...; `unknown` if the broker does not describe it).
    pub state: String,
    /// The assignor in use (classic protocol), or empty.
    pub assignor: String,
    /// Members.
    pub members: Vec<MemberStatus>,
    /// Partitions with a committed offset, by topic and partition.
    pub partitions: Vec<PartitionStatus>,
    /// Sum of the partitions' lag.
    pub total_lag: i64,
}

/// Records between `committed` and `end` still to do, given the `completed` ranges above the
/// commit point (`[from, to)`, possibly reaching past `end`).
pub fn lag(committed: i64, end: i64, completed: &[(i64, i64)]) -> i64 {
    let done_above: i64 = completed
        .iter()
        .map(|&(s, e)| e.min(end) - s.max(committed))
        .filter(|n| *n > 0)
        .sum();
    (end - committed - done_above).max(0)
}

/// Reads the status of `group`. On a cluster that has just started it waits up to 10 s for the
/// group coordinator.
pub async fn group_status(
    pool: &Arc<ConnectionPool>,
    cluster: &MetadataCache,
    group: &str,
) -> Result<GroupStatus, DriverError> {
    let any = pool.any().await?;
    // A cluster that has just started has no coordinator until __consumer_offsets exists.
    let coord = any
        .find_coordinator_within(group, std::time::Duration::from_secs(10))
        .await?;
    let conn = pool
        .get(
            &format!("{}:{}", coord.host, coord.port),
            ConnectionKind::Coordination,
        )
        .await?;
    let described = conn
        .send(&DescribeGroupsRequest {
            groups: vec![group.to_owned()],
            include_authorized_operations: false,
        })
        .await?;
    let (state, assignor, members) = match described.groups.into_iter().next() {
        Some(g) if g.error_code == ErrorCode::NONE => {
            let members = g
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
        Some(g) => {
            return Err(DriverError::GroupCode {
                what: "DescribeGroups",
                group: group.to_owned(),
                code: g.error_code,
            });
        }
        None => (String::from("unknown"), String::new(), Vec::new()),
    };
    let resp = conn
        .offset_fetch(&OffsetFetchRequest {
            groups: vec![OffsetFetchGroup {
                group_id: group.to_owned(),
                member_id: None,
                member_epoch: -1,
                topics: None,
            }],
            require_stable: false,
        })
        .await?;
    let Some(g) = resp.groups.into_iter().next() else {
        return Err(DriverError::Protocol(format!(
            "OffsetFetch returned no result for group {group}"
        )));
    };
    if g.error_code != ErrorCode::NONE {
        return Err(DriverError::GroupCode {
            what: "OffsetFetch",
            group: group.to_owned(),
            code: g.error_code,
        });
    }
    let mut partitions = Vec::new();
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
                .await?;
            let text = p.metadata.clone().unwrap_or_default();
            let (completed, foreign) =
                match orderly_engine::metadata::decode(p.committed_offset, &text) {
                    Ok(r) => (r.into_iter().map(|r| (r.start, r.end)).collect(), None),
                    Err(_) => (Vec::new(), Some(text)),
                };
            partitions.push(PartitionStatus {
                topic: t.name.clone(),
                partition: p.partition_index,
                committed: p.committed_offset,
                lag: lag(p.committed_offset, end, &completed),
                completed_above: completed,
                end,
                oldest_unfinished: (p.committed_offset < end).then_some(p.committed_offset),
                foreign_metadata: foreign,
            });
        }
    }
    partitions.sort_by(|x, y| (&x.topic, x.partition).cmp(&(&y.topic, y.partition)));
    Ok(GroupStatus {
        group: group.to_owned(),
        coordinator: format!("{}:{} (id {})", coord.host, coord.port, coord.node_id),
        state,
        assignor,
        members,
        total_lag: partitions.iter().map(|r| r.lag).sum(),
        partitions,
    })
}

#[cfg(test)]
mod tests {
    use super::lag;

    #[test]
    fn lag_counts_what_is_left_above_the_commit_point() {
        assert_eq!(lag(10, 20, &[]), 10);
        assert_eq!(lag(10, 20, &[(12, 15)]), 7);
        // Completed ranges past the end count only up to the end.
        assert_eq!(lag(10, 20, &[(12, 15), (18, 30)]), 5);
        assert_eq!(lag(20, 20, &[]), 0);
    }
}
