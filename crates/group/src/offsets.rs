//! Offsets: OffsetFetch + ListOffsets for start positions, and serialised OffsetCommit.
//!
//! # Commit invariants
//!
//! * Commits are **serialised** (`commit_lock`): the next starts after the previous one finished,
//!   so offsets never go backwards because of reordering.
//! * A commit is **never cancelled mid-flight**: it runs on its own task; dropping the caller's
//!   future only stops waiting for it.
//! * No commit is sent **between the JoinGroup and SyncGroup answers**: commits take the `gate`
//!   for reading, the member task holds it for writing from the JoinGroup answer (the new
//!   generation) to the SyncGroup answer. While a JoinGroup waits at the coordinator, commits go
//!   on with the current generation (the coordinator accepts them while it prepares the
//!   rebalance), on a connection the JoinGroup does not hold up (`WireTransport`).
//! * A commit carries the generation, member id and instance id of the member at send time; if the
//!   member holds no generation (partitions lost), the commit fails with
//!   [`CommitError::NotMember`] without being sent.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Instant;

use crate::codes::{Action, Api, ErrorCode, action};
use crate::error::{CommitError, GroupError};
use crate::shared::{Shared, Trigger};
use crate::transport::{GroupTransport, OffsetCommitRequest, OffsetSpec};
use crate::types::{AutoOffsetReset, CommitOffset, GroupPartition, PartitionSet, StartPosition};

/// Commits `offsets` for the member's current generation. See the module docs.
pub(crate) async fn commit<T: GroupTransport>(
    shared: Arc<Shared<T>>,
    offsets: Vec<CommitOffset>,
) -> Result<(), CommitError> {
    let limit = shared.config.max_metadata_chars;
    for o in &offsets {
        if let Some(m) = &o.metadata {
            let len = m.encode_utf16().count();
            if len > limit {
                return Err(CommitError::MetadataTooLarge {
                    group: shared.group().to_owned(),
                    partition: o.partition.clone(),
                    len,
                    limit,
                });
            }
        }
    }
    if offsets.is_empty() {
        return Ok(());
    }
    let group = shared.group().to_owned();
    // Spawned so that cancelling the caller never cancels a request in flight.
    let task = tokio::spawn(commit_serialised(shared, offsets));
    task.await.unwrap_or(Err(CommitError::Closed { group }))
}

async fn commit_serialised<T: GroupTransport>(
    shared: Arc<Shared<T>>,
    mut offsets: Vec<CommitOffset>,
) -> Result<(), CommitError> {
    let _serial = shared.commit_lock.lock().await;
    let _gate = shared.gate.read().await;
    let mut cur = shared.generation();
    let group = shared.group().to_owned();
    if !cur.is_valid() {
        return Err(CommitError::NotMember {
            group,
            member_id: cur.member_id,
        });
    }
    let deadline = Instant::now() + shared.config.commit_timeout;
    let mut backoff = shared.backoff();
    let mut attempts = 0u32;
    let mut last = String::from("no attempt");
    while Instant::now() < deadline {
        // A member that lost its generation meanwhile (reset, fenced) must not go on retrying a
        // commit for partitions it no longer owns: give up at once, so whoever waits for this
        // commit (the engine, before it acknowledges the loss) is not held for the whole timeout.
        let now = shared.generation();
        if now.generation_id != cur.generation_id {
            // KIP-848: the member epoch advances on every rebalance of the group, also for a
            // member that keeps its partitions; go on with the new epoch for those it still owns.
            if shared.config.protocol == crate::config::GroupProtocol::Consumer && now.is_valid() {
                let owned = shared.owned();
                offsets.retain(|o| owned.contains(&o.partition));
                if !offsets.is_empty() {
                    cur = now;
                    tracing::debug!(group = %group, epoch = cur.generation_id, "commit continues with the new member epoch");
                }
            }
        }
        if shared.generation().generation_id != cur.generation_id {
            return Err(CommitError::NotMember {
                group,
                member_id: cur.member_id,
            });
        }
        attempts += 1;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let coordinator = match tokio::time::timeout(remaining, shared.coordinator()).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                last = e.to_string();
                break;
            }
            Err(_) => break,
        };
        let request = OffsetCommitRequest {
            group_id: group.clone(),
            generation_id: cur.generation_id,
            member_id: cur.member_id.clone(),
            instance_id: shared.config.instance_id.clone(),
            offsets: offsets.clone(),
        };
        let result = tokio::time::timeout(
            shared.config.request_timeout,
            shared.transport.offset_commit(&coordinator, request),
        )
        .await;
        let codes = match result {
            Ok(Ok(codes)) => codes,
            Ok(Err(e)) => {
                last = e.to_string();
                shared.invalidate(&coordinator);
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
            Err(_) => {
                last = "OffsetCommit timed out".into();
                shared.invalidate(&coordinator);
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
        };
        let failed: Vec<(GroupPartition, ErrorCode)> = codes
            .into_iter()
            .filter(|(_, c)| *c != ErrorCode::NONE)
            .collect();
        let Some((_, first)) = failed.first().cloned() else {
            tracing::debug!(group = %group, generation = cur.generation_id, n = offsets.len(), "committed");
            return Ok(());
        };
        let rejected = |retriable| CommitError::Rejected {
            group: group.clone(),
            member_id: cur.member_id.clone(),
            generation: cur.generation_id,
            code: first,
            retriable,
        };
        match action(Api::OffsetCommit, first) {
            Action::Ok => return Ok(()),
            Action::Rediscover => {
                last = first.to_string();
                shared.invalidate(&coordinator);
            }
            Action::Backoff if first == ErrorCode::STALE_MEMBER_EPOCH => {
                // KIP-848: the member epoch moved on while this commit was on its way. Retry
                // with the new epoch, for the partitions the member still owns.
                last = first.to_string();
                let stale = rejected(false);
                tokio::time::sleep(backoff.next_delay()).await;
                cur = shared.generation();
                let owned = shared.owned();
                offsets.retain(|o| owned.contains(&o.partition));
                if !cur.is_valid() || offsets.is_empty() {
                    return Err(stale);
                }
                continue;
            }
            Action::Backoff => last = first.to_string(),
            Action::ResetGeneration | Action::ResetMember => {
                let _ = shared.triggers.send(Trigger::Reset {
                    generation: cur.generation_id,
                    code: first,
                });
                return Err(rejected(false));
            }
            Action::Fenced => {
                let _ = shared.triggers.send(Trigger::Fenced {
                    generation: cur.generation_id,
                });
                return Err(rejected(false));
            }
            Action::FailCommit { retriable } => {
                if failed.iter().all(|(_, c)| *c == first)
                    && first == ErrorCode::REBALANCE_IN_PROGRESS
                {
                    return Err(rejected(retriable));
                }
                return Err(CommitError::Partitions {
                    group: group.clone(),
                    member_id: cur.member_id.clone(),
                    generation: cur.generation_id,
                    partitions: failed,
                });
            }
            Action::AdoptMemberId | Action::Rejoin | Action::Fatal => {
                return Err(CommitError::Partitions {
                    group: group.clone(),
                    member_id: cur.member_id.clone(),
                    generation: cur.generation_id,
                    partitions: failed,
                });
            }
        }
        // Retry only what failed.
        offsets.retain(|o| failed.iter().any(|(tp, _)| tp == &o.partition));
        tokio::time::sleep(backoff.next_delay()).await;
    }
    Err(CommitError::Timeout {
        group,
        attempts,
        last,
    })
}

/// Start positions for `partitions`: committed offsets, else `auto.offset.reset` via ListOffsets.
/// Retries retriable failures forever with backoff; the caller bounds it (shutdown, heartbeat
/// events). Cancel safe: it only reads.
pub(crate) async fn start_positions<T: GroupTransport>(
    shared: &Shared<T>,
    partitions: &PartitionSet,
) -> Result<BTreeMap<GroupPartition, StartPosition>, GroupError> {
    let mut out = BTreeMap::new();
    if partitions.is_empty() {
        return Ok(out);
    }
    let list: Vec<GroupPartition> = partitions.iter().cloned().collect();
    let mut backoff = shared.backoff();
    let fatal = |api: Api, code: ErrorCode| {
        let g = shared.generation();
        GroupError::fatal(shared.group(), api, code, &g.member_id, g.generation_id)
    };
    // 1. OffsetFetch.
    let fetched = loop {
        let coordinator = shared.coordinator().await?;
        let result = tokio::time::timeout(
            shared.config.request_timeout,
            shared
                .transport
                .offset_fetch(&coordinator, shared.group(), &list),
        )
        .await;
        let resp = match result {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tracing::info!(group = %shared.group(), error = %e, "OffsetFetch failed");
                shared.invalidate(&coordinator);
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
            Err(_) => {
                shared.invalidate(&coordinator);
                continue;
            }
        };
        let worst = std::iter::once(resp.error_code)
            .chain(resp.partitions.values().map(|p| p.error_code))
            .find(|c| *c != ErrorCode::NONE)
            .unwrap_or(ErrorCode::NONE);
        match action(Api::OffsetFetch, worst) {
            Action::Ok => break resp.partitions,
            Action::Rediscover => shared.invalidate(&coordinator),
            Action::Backoff => {}
            _ => return Err(fatal(Api::OffsetFetch, worst)),
        }
        tracing::info!(group = %shared.group(), code = %worst, "OffsetFetch: retrying");
        tokio::time::sleep(backoff.next_delay()).await;
    };
    let mut reset = Vec::new();
    for tp in &list {
        match fetched.get(tp) {
            Some(f) if f.offset >= 0 => {
                out.insert(
                    tp.clone(),
                    StartPosition::Committed {
                        offset: f.offset,
                        leader_epoch: (f.leader_epoch >= 0).then_some(f.leader_epoch),
                        metadata: f.metadata.clone(),
                    },
                );
            }
            _ => reset.push(tp.clone()),
        }
    }
    // 2. ListOffsets for partitions without a committed offset.
    let policy = shared.config.auto_offset_reset;
    let spec = match policy {
        AutoOffsetReset::Earliest => OffsetSpec::Earliest,
        AutoOffsetReset::Latest => OffsetSpec::Latest,
        AutoOffsetReset::None => {
            for tp in reset {
                out.insert(tp, StartPosition::Missing);
            }
            return Ok(out);
        }
    };
    while !reset.is_empty() {
        match tokio::time::timeout(
            shared.config.request_timeout,
            shared.transport.list_offsets(&reset, spec),
        )
        .await
        {
            Ok(Ok(answers)) => {
                let mut still = Vec::new();
                for tp in reset {
                    match answers.get(&tp) {
                        Some(Ok(offset)) => {
                            out.insert(
                                tp,
                                StartPosition::Reset {
                                    offset: *offset,
                                    policy,
                                },
                            );
                        }
                        Some(Err(code)) => match action(Api::ListOffsets, *code) {
                            Action::Backoff | Action::Rediscover | Action::Ok => still.push(tp),
                            _ => return Err(fatal(Api::ListOffsets, *code)),
                        },
                        None => still.push(tp),
                    }
                }
                reset = still;
            }
            Ok(Err(e)) => tracing::info!(group = %shared.group(), error = %e, "ListOffsets failed"),
            Err(_) => tracing::info!(group = %shared.group(), "ListOffsets timed out"),
        }
        if !reset.is_empty() {
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }
    Ok(out)
}
