//! Joining: JoinGroup (with MEMBER_ID_REQUIRED and retries) and SyncGroup, with the
//! subscriptions this member sends and the commit gate held between the two answers.

use bytes::Bytes;

use crate::codes::{Action, Api, ErrorCode, action};
use crate::error::GroupError;
use crate::heartbeat::Heartbeat;
use crate::listener::LostReason;
use crate::payload::{Assignment, Subscription};
use crate::transport::{GroupTransport, JoinGroupRequest, SyncGroupRequest};
use crate::types::{Generation, GroupPartition, PartitionSet};

use super::member::{ClassicMember, Joined, Next};

const PROTOCOL_TYPE: &str = "consumer";

impl<T: GroupTransport> ClassicMember<T> {
    fn protocols(&self) -> Result<Vec<(String, Bytes)>, GroupError> {
        let cur = self.shared.generation();
        let cooperative = self.cooperative();
        let owned = if cooperative {
            self.owned.clone()
        } else {
            PartitionSet::new()
        };
        let generation = if cooperative && cur.generation_id >= 0 {
            cur.generation_id
        } else {
            -1
        };
        self.cfg()
            .assignors
            .iter()
            .map(|a| {
                let sub = Subscription {
                    topics: self.cfg().topics.clone(),
                    user_data: a.user_data(&owned, generation),
                    owned: owned.clone(),
                    generation,
                    rack: self.cfg().rack.clone(),
                };
                let bytes = sub.encode().map_err(|e| GroupError::Payload {
                    group: self.cfg().group_id.clone(),
                    what: "subscription",
                    member_id: cur.member_id.clone(),
                    message: e.to_string(),
                })?;
                Ok((a.name().to_owned(), bytes))
            })
            .collect()
    }

    /// JoinGroup (with MEMBER_ID_REQUIRED and retries), leader assignment, SyncGroup. Holds the
    /// commit gate for writing from the JoinGroup answer to the SyncGroup answer, so no commit is
    /// sent between join and sync. While the JoinGroup waits (for the other members to rejoin, or
    /// a dead one's session to expire: seconds) commits go on with the current generation, which
    /// the coordinator accepts until the join completes; holding them back would hand all the work
    /// of a member killed during that wait to redelivery.
    pub(super) async fn join_and_sync(&mut self, reason: &str) -> Joined {
        let shared = self.shared.clone();
        let mut backoff = shared.backoff();
        let mut reason = reason.to_owned();
        loop {
            self.stop_heartbeat().await;
            let coordinator = tokio::select! {
                c = shared.coordinator() => c,
                _ = self.shutdown.wait() => return Joined::Next(Next::Shutdown),
            };
            let coordinator = match coordinator {
                Ok(c) => c,
                Err(e) => return Joined::Next(Next::Fatal(e)),
            };
            let cur = shared.generation();
            let protocols = match self.protocols() {
                Ok(p) => p,
                Err(e) => return Joined::Next(Next::Fatal(e)),
            };
            let cfg = self.cfg();
            let request = JoinGroupRequest {
                group_id: cfg.group_id.clone(),
                session_timeout_ms: millis(cfg.session_timeout),
                rebalance_timeout_ms: millis(cfg.rebalance_timeout),
                member_id: cur.member_id.clone(),
                instance_id: cfg.instance_id.clone(),
                protocol_type: PROTOCOL_TYPE.into(),
                protocols,
                reason: Some(reason.clone()),
            };
            tracing::info!(group = %cfg.group_id, member = %cur.member_id, reason = %reason, "joining group");
            let join_timeout = cfg.rebalance_timeout + std::time::Duration::from_secs(5);
            // The send extends nothing: a JoinGroup that never reaches the coordinator (a poisoned
            // connection, a stalled proxy) leaves the member's session running out there.
            let join_sent = tokio::time::Instant::now();
            let result = tokio::select! {
                r = tokio::time::timeout(join_timeout, shared.transport.join_group(&coordinator, request)) => r,
                _ = self.shutdown.wait() => return Joined::Next(Next::Shutdown),
            };
            let resp = match result {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    tracing::info!(group = %shared.group(), error = %e, "JoinGroup failed");
                    shared.invalidate(&coordinator);
                    self.sleep_or_shutdown(backoff.next_delay()).await;
                    continue;
                }
                Err(_) => {
                    tracing::info!(group = %shared.group(), "JoinGroup timed out");
                    shared.invalidate(&coordinator);
                    continue;
                }
            };
            let mut code = resp.error_code;
            if code == ErrorCode::NONE
                && resp
                    .protocol_type
                    .as_deref()
                    .is_some_and(|t| t != PROTOCOL_TYPE)
            {
                code = ErrorCode::INCONSISTENT_GROUP_PROTOCOL;
            }
            match action(Api::JoinGroup, code) {
                // The coordinator restarts every member's session when the join completes.
                Action::Ok => shared.renew_lease(join_sent, shared.config.session_timeout),
                Action::AdoptMemberId => {
                    tracing::debug!(group = %shared.group(), member = %resp.member_id, "MEMBER_ID_REQUIRED: rejoining with the given id");
                    shared.set_generation(Generation {
                        member_id: resp.member_id.clone(),
                        ..Generation::empty()
                    });
                    continue;
                }
                Action::Rediscover => {
                    shared.invalidate(&coordinator);
                    self.sleep_or_shutdown(backoff.next_delay()).await;
                    continue;
                }
                Action::Backoff => {
                    self.sleep_or_shutdown(backoff.next_delay()).await;
                    continue;
                }
                Action::Rejoin => {
                    // Usually answered at once by a retry; the backoff only guards against a
                    // broker that keeps answering REBALANCE_IN_PROGRESS immediately.
                    self.sleep_or_shutdown(backoff.next_delay()).await;
                    continue;
                }
                Action::ResetMember => {
                    // JoinGroup UNKNOWN_MEMBER_ID: our id is gone; partitions may be elsewhere.
                    shared.end_lease();
                    shared.set_generation(Generation::empty());
                    if !self.owned.is_empty() {
                        return Joined::Next(Next::Lost(LostReason::MemberReset, code));
                    }
                    continue;
                }
                Action::ResetGeneration => {
                    shared.end_lease();
                    let mut g = shared.generation();
                    g.generation_id = Generation::NONE;
                    shared.set_generation(g);
                    if !self.owned.is_empty() {
                        return Joined::Next(Next::Lost(LostReason::GenerationReset, code));
                    }
                    continue;
                }
                Action::Fenced => return Joined::Next(Next::Fatal(self.fenced())),
                Action::FailCommit { .. } | Action::Fatal => {
                    return Joined::Next(Next::Fatal(GroupError::fatal(
                        shared.group(),
                        Api::JoinGroup,
                        code,
                        &cur.member_id,
                        cur.generation_id,
                    )));
                }
            }
            let generation = Generation {
                generation_id: resp.generation_id,
                member_id: resp.member_id.clone(),
                protocol: resp.protocol_name.clone(),
            };
            shared.set_generation(generation.clone());
            // Heartbeats are valid (and needed) between the JoinGroup and SyncGroup responses.
            self.heartbeat = Some(Heartbeat::start(shared.clone(), generation.clone()));
            // From here to the SyncGroup answer no commit is sent. A commit still in flight with
            // the previous generation sees the new one at its next step and gives up (or is
            // answered ILLEGAL_GENERATION, whose reset trigger names the old generation and is
            // ignored); one that starts after this line waits for the SyncGroup answer. One that
            // took the gate in the instant between `set_generation` above and this line sends the
            // new generation early: the coordinator, still completing the rebalance, answers
            // REBALANCE_IN_PROGRESS, which fails that commit at once (`offsets.rs`, FailCommit)
            // and the engine commits again later. The generation is set first on purpose: taking
            // the gate before it would make the member wait for an old-generation commit that is
            // backing off (up to `commit_timeout`) instead of letting that commit see the change.
            let _gate = shared.gate.write().await;
            let protocol = resp.protocol_name.clone().unwrap_or_default();
            let is_leader = resp.leader == resp.member_id;
            if !is_leader {
                // Only the leader watches partition counts.
                self.partition_snapshot.clear();
            }
            let assignments = if is_leader && !resp.skip_assignment {
                match self.assign(&resp).await {
                    Ok(a) => a,
                    Err(e) => return Joined::Next(Next::Fatal(e)),
                }
            } else {
                Vec::new()
            };
            tracing::info!(group = %shared.group(), member = %generation.member_id,
                generation = generation.generation_id, leader = is_leader, protocol = %protocol, "joined; syncing");
            let request = SyncGroupRequest {
                group_id: self.cfg().group_id.clone(),
                generation_id: generation.generation_id,
                member_id: generation.member_id.clone(),
                instance_id: self.cfg().instance_id.clone(),
                protocol_type: PROTOCOL_TYPE.into(),
                protocol_name: protocol.clone(),
                assignments,
            };
            let sync_sent = tokio::time::Instant::now();
            let result = tokio::select! {
                r = tokio::time::timeout(self.cfg().request_timeout, shared.transport.sync_group(&coordinator, request)) => r,
                _ = self.shutdown.wait() => return Joined::Next(Next::Shutdown),
            };
            let resp = match result {
                Ok(Ok(r)) => r,
                Ok(Err(_)) | Err(_) => {
                    tracing::info!(group = %shared.group(), "SyncGroup failed; rejoining");
                    shared.invalidate(&coordinator);
                    self.sleep_or_shutdown(backoff.next_delay()).await;
                    continue;
                }
            };
            match action(Api::SyncGroup, resp.error_code) {
                Action::Ok => shared.renew_lease(sync_sent, self.cfg().session_timeout),
                Action::Rediscover => {
                    shared.invalidate(&coordinator);
                    self.sleep_or_shutdown(backoff.next_delay()).await;
                    continue;
                }
                Action::Backoff => {
                    self.sleep_or_shutdown(backoff.next_delay()).await;
                    continue;
                }
                Action::Rejoin => {
                    reason = "rebalance in progress during SyncGroup".into();
                    continue;
                }
                Action::ResetGeneration | Action::ResetMember => {
                    shared.end_lease();
                    let member_reset = resp.error_code == ErrorCode::UNKNOWN_MEMBER_ID;
                    let mut g = shared.generation();
                    g.generation_id = Generation::NONE;
                    if member_reset {
                        g.member_id.clear();
                    }
                    shared.set_generation(g);
                    if !self.owned.is_empty() {
                        let why = if member_reset {
                            LostReason::MemberReset
                        } else {
                            LostReason::GenerationReset
                        };
                        return Joined::Next(Next::Lost(why, resp.error_code));
                    }
                    continue;
                }
                Action::Fenced => return Joined::Next(Next::Fatal(self.fenced())),
                Action::AdoptMemberId | Action::FailCommit { .. } | Action::Fatal => {
                    return Joined::Next(Next::Fatal(GroupError::fatal(
                        shared.group(),
                        Api::SyncGroup,
                        resp.error_code,
                        &generation.member_id,
                        generation.generation_id,
                    )));
                }
            }
            let assignment = match Assignment::decode(&resp.assignment) {
                Ok(a) => a.partitions,
                Err(e) => {
                    return Joined::Next(Next::Fatal(GroupError::Payload {
                        group: shared.group().to_owned(),
                        what: "assignment",
                        member_id: generation.member_id,
                        message: e.to_string(),
                    }));
                }
            };
            if resp.assignment.is_empty() {
                tracing::warn!(group = %shared.group(), "empty assignment bytes from SyncGroup; treating as no partitions");
            }
            let foreign: Vec<&GroupPartition> = assignment
                .iter()
                .filter(|tp| !self.cfg().topics.contains(&tp.topic))
                .collect();
            if !foreign.is_empty() {
                tracing::warn!(group = %shared.group(), ?foreign, "assigned partitions of topics this member does not subscribe to");
            }
            return Joined::Ok { assignment };
        }
    }

    async fn sleep_or_shutdown(&mut self, d: std::time::Duration) {
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = self.shutdown.wait() => {}
        }
    }
}

fn millis(d: std::time::Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}
