//! The classic-protocol member state machine (JoinGroup / SyncGroup / Heartbeat).
//!
//! # States
//!
//! ```text
//!            ┌──────────── rejoin (REBALANCE_IN_PROGRESS, cooperative 2nd round, metadata change)
//!            ▼                                                               │
//! UNJOINED → PREPARE ─→ JOINING ─→ SYNCING ─→ ASSIGNING ─→ STABLE ───────────┘
//!   (eager: Revoked(all))  │ gate held for writing │  (cooperative: Revoked(moved) → rejoin;
//!                          │  no commits           │   OffsetFetch; Assigned(added))
//!            reset (ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID): Lost(owned) → PREPARE
//!            no heartbeat for a session timeout: ownership in doubt (dispatch held, nothing lost;
//!              see `heartbeat`) until a heartbeat succeeds (confirmed) or the broker resets us
//!            FENCED_INSTANCE_ID / fatal codes: Lost(owned) → stop with GroupError
//!            shutdown: Revoked(owned) → stop heartbeats → LeaveGroup (dynamic members only)
//! ```
//!
//! One task runs this loop; it is the only sender of [`RebalanceEvent`]s, so events are ordered
//! and never concurrent. The heartbeat task (`heartbeat`) runs from the JoinGroup
//! response until the next JoinGroup, so it keeps running while the engine drains a revoke.
//! Commits ([`crate::GroupHandle::commit`]) run on their own tasks (see [`crate::offsets`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::assignor::{
    self, MemberSubscription, RebalanceProtocol, adjust_cooperative, validate_plan,
};
use crate::codes::{Action, Api, ErrorCode, action};
use crate::config::GroupConfig;
use crate::error::GroupError;
use crate::heartbeat::{Heartbeat, HeartbeatEvent};
use crate::listener::{AssignedPartition, EventSender, LostReason, RebalanceEvent};
use crate::offsets;
use crate::payload::{Assignment, Subscription};
use crate::shared::{Shared, Trigger};
use crate::shutdown::Shutdown;
use crate::transport::{
    GroupTransport, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, SyncGroupRequest,
};
use crate::types::{Generation, GroupPartition, PartitionSet, StartPosition};

const PROTOCOL_TYPE: &str = "consumer";

/// Why a stable session ended.
enum Next {
    Rejoin(String),
    Lost(LostReason, ErrorCode),
    Fatal(GroupError),
    Shutdown,
}

/// Result of join + sync.
enum Joined {
    Ok { assignment: PartitionSet },
    Next(Next),
}

pub(crate) struct ClassicMember<T: GroupTransport> {
    shared: Arc<Shared<T>>,
    events: EventSender,
    triggers: mpsc::UnboundedReceiver<Trigger>,
    shutdown: Shutdown,
    /// What the engine was told it owns.
    owned: PartitionSet,
    heartbeat: Option<Heartbeat>,
    /// Leader only: partition count of every topic the group subscribes to, as the last plan saw
    /// it; 0 for a topic the metadata did not have (not created yet, or created a moment ago and
    /// not yet published by the broker: KRaft answers CreateTopics before its metadata shows the
    /// topic). While any count is 0 the leader re-checks with the retry backoff instead of every
    /// `metadata_refresh`, and rebalances once the topic appears.
    partition_snapshot: BTreeMap<String, i32>,
}

impl<T: GroupTransport> ClassicMember<T> {
    /// A member that has not joined yet; [`ClassicMember::run`] joins and runs it.
    pub(crate) fn new(
        shared: Arc<Shared<T>>,
        events: EventSender,
        triggers: mpsc::UnboundedReceiver<Trigger>,
        shutdown: Shutdown,
    ) -> Self {
        Self {
            shared,
            events,
            triggers,
            shutdown,
            owned: PartitionSet::new(),
            heartbeat: None,
            partition_snapshot: BTreeMap::new(),
        }
    }

    fn cfg(&self) -> &GroupConfig {
        &self.shared.config
    }

    fn cooperative(&self) -> bool {
        self.cfg().rebalance_protocol() == RebalanceProtocol::Cooperative
    }

    fn set_owned(&mut self, owned: PartitionSet) {
        self.shared.set_owned(owned.clone());
        self.owned = owned;
    }

    async fn stop_heartbeat(&mut self) {
        if let Some(hb) = self.heartbeat.take() {
            hb.stop().await;
        }
    }

    pub(crate) async fn run(mut self) -> Result<(), GroupError> {
        let mut reason = String::from("initial join");
        let result = loop {
            let next = self.session(&reason).await;
            match next {
                Next::Rejoin(why) => reason = why,
                Next::Lost(why, code) => {
                    self.lose(why.clone()).await;
                    let mut g = self.shared.generation();
                    g.generation_id = Generation::NONE;
                    if why == LostReason::MemberReset {
                        g.member_id.clear();
                    }
                    self.shared.set_generation(g);
                    reason = format!("member reset after {code}");
                }
                Next::Fatal(e) => {
                    let e = self.shared.explain(e);
                    tracing::error!(group = %self.shared.group(), error = %e, "member stopping on fatal error");
                    self.stop_heartbeat().await;
                    self.lose(LostReason::Fatal).await;
                    self.shared.set_generation(Generation::empty());
                    break Err(e);
                }
                Next::Shutdown => {
                    self.close().await;
                    break Ok(());
                }
            }
        };
        self.stop_heartbeat().await;
        result
    }

    /// Tells the engine its partitions are lost (no commit allowed) and forgets them.
    async fn lose(&mut self, reason: LostReason) {
        // Reset first so a commit racing with the Lost event is refused.
        let mut g = self.shared.generation();
        let generation = g.generation_id;
        g.generation_id = Generation::NONE;
        self.shared.set_generation(g);
        if self.owned.is_empty() {
            self.shared.set_in_doubt(false, generation);
            return;
        }
        let partitions = std::mem::take(&mut self.owned);
        tracing::warn!(group = %self.shared.group(), n = partitions.len(), ?reason, "partitions lost");
        self.events
            .send_and_wait(|ack| RebalanceEvent::Lost {
                partitions,
                reason,
                ack,
            })
            .await;
        self.set_owned(PartitionSet::new());
        // Only now, after the engine dropped them: cleared earlier, the engine could start
        // records of partitions another member may own before it heard of the loss.
        self.shared.set_in_doubt(false, generation);
    }

    async fn revoke(&mut self, partitions: PartitionSet) {
        if partitions.is_empty() {
            return;
        }
        let generation = self.shared.generation().generation_id;
        tracing::info!(group = %self.shared.group(), generation, n = partitions.len(), "revoking partitions");
        let p = partitions.clone();
        self.events
            .send_and_wait(|ack| RebalanceEvent::Revoked {
                generation,
                partitions: p,
                ack,
            })
            .await;
        let owned: PartitionSet = self.owned.difference(&partitions).cloned().collect();
        self.set_owned(owned);
    }

    /// Graceful close: revoke, stop heartbeats, leave.
    async fn close(&mut self) {
        let cur = self.shared.generation();
        if cur.is_valid() {
            let all = self.owned.clone();
            self.revoke(all).await;
        } else {
            self.lose(LostReason::Fatal).await;
        }
        self.stop_heartbeat().await;
        let cfg = self.cfg();
        if cfg.instance_id.is_none() && !cur.member_id.is_empty() {
            let request = LeaveGroupRequest {
                group_id: cfg.group_id.clone(),
                member_id: cur.member_id.clone(),
                instance_id: None,
                reason: Some("the consumer is being closed".into()),
            };
            let timeout = cfg.request_timeout;
            let shared = self.shared.clone();
            let leave = async move {
                let c = shared.coordinator().await.ok()?;
                shared.transport.leave_group(&c, request).await.ok()
            };
            match tokio::time::timeout(timeout, leave).await {
                Ok(Some(code)) if action(Api::LeaveGroup, code) == Action::Ok => {
                    tracing::info!(group = %self.shared.group(), member = %cur.member_id, "left the group");
                }
                other => tracing::warn!(group = %self.shared.group(), member = %cur.member_id,
                    outcome = ?other, "LeaveGroup failed; the session timeout will remove the member"),
            }
        }
        self.shared.set_generation(Generation::empty());
    }

    /// One rebalance plus the stable period after it.
    async fn session(&mut self, reason: &str) -> Next {
        if self.shutdown.fired() {
            return Next::Shutdown;
        }
        // PREPARE. Eager: give everything back before joining (heartbeats still run).
        if !self.cooperative() {
            let all = self.owned.clone();
            self.revoke(all).await;
        }
        self.stop_heartbeat().await;

        // JOIN + SYNC.
        let assignment = match self.join_and_sync(reason).await {
            Joined::Ok { assignment } => assignment,
            Joined::Next(next) => return next,
        };
        // A completed JoinGroup + SyncGroup is the coordinator's word that this member is in the
        // group: whatever the old generation's heartbeat left in doubt is settled (the
        // partitions it kept are in `assignment` or revoked below, under the new generation).
        let generation = self.shared.generation().generation_id;
        self.shared.set_in_doubt(false, generation);

        // ASSIGNING.
        let revoked: PartitionSet = self.owned.difference(&assignment).cloned().collect();
        let added: PartitionSet = assignment.difference(&self.owned).cloned().collect();
        self.revoke(revoked.clone()).await;
        let positions = tokio::select! {
            p = offsets::start_positions(&self.shared, &added) => p,
            ev = next_heartbeat_event(&mut self.heartbeat) => return self.on_heartbeat(ev),
            _ = self.shutdown.wait() => return Next::Shutdown,
        };
        let positions = match positions {
            Ok(p) => p,
            Err(e) => return Next::Fatal(e),
        };
        let generation = self.shared.generation().generation_id;
        let partitions: Vec<AssignedPartition> = added
            .iter()
            .map(|tp| AssignedPartition {
                partition: tp.clone(),
                start: positions.get(tp).cloned().unwrap_or(StartPosition::Missing),
            })
            .collect();
        tracing::info!(group = %self.shared.group(), generation, added = partitions.len(),
            revoked = revoked.len(), owned = assignment.len(), "assignment received");
        // Owned from the moment the engine is told (the handle's view is never behind the events).
        self.set_owned(assignment);
        self.events
            .send_and_wait(|ack| RebalanceEvent::Assigned {
                generation,
                partitions,
                ack,
            })
            .await;
        if !revoked.is_empty() {
            // KIP-429: the second rebalance hands the released partitions to their new owners.
            return Next::Rejoin("revoked partitions in a cooperative rebalance".into());
        }

        // STABLE.
        let mut recheck = self.shared.backoff();
        let mut metadata_check =
            tokio::time::Instant::now() + self.metadata_check_delay(&mut recheck);
        loop {
            tokio::select! {
                ev = next_heartbeat_event(&mut self.heartbeat) => return self.on_heartbeat(ev),
                Some(t) = self.triggers.recv() => {
                    let current = self.shared.generation().generation_id;
                    match t {
                        Trigger::Reset { generation, code } if generation == current => {
                            let why = if code == ErrorCode::UNKNOWN_MEMBER_ID { LostReason::MemberReset } else { LostReason::GenerationReset };
                            return Next::Lost(why, code);
                        }
                        Trigger::Fenced { generation } if generation == current => return Next::Fatal(self.fenced()),
                        _ => {} // From an older generation: already handled.
                    }
                }
                _ = tokio::time::sleep_until(metadata_check), if !self.partition_snapshot.is_empty() => {
                    if self.partition_counts_changed().await {
                        return Next::Rejoin("partition count of a subscribed topic changed".into());
                    }
                    metadata_check = tokio::time::Instant::now() + self.metadata_check_delay(&mut recheck);
                }
                _ = self.shutdown.wait() => return Next::Shutdown,
            }
        }
    }

    fn on_heartbeat(&mut self, ev: Option<HeartbeatEvent>) -> Next {
        match ev {
            Some(HeartbeatEvent::Rebalance) => Next::Rejoin("the group is rebalancing".into()),
            Some(HeartbeatEvent::Reset(code)) => {
                let why = if code == ErrorCode::UNKNOWN_MEMBER_ID {
                    LostReason::MemberReset
                } else {
                    LostReason::GenerationReset
                };
                Next::Lost(why, code)
            }
            Some(HeartbeatEvent::Fenced) => Next::Fatal(self.fenced()),
            Some(HeartbeatEvent::Fatal(code)) => {
                let g = self.shared.generation();
                Next::Fatal(GroupError::fatal(
                    self.shared.group(),
                    Api::Heartbeat,
                    code,
                    &g.member_id,
                    g.generation_id,
                ))
            }
            // The heartbeat task ended without a word: cannot happen; rejoin to be safe.
            None => Next::Rejoin("heartbeat task ended".into()),
        }
    }

    fn fenced(&self) -> GroupError {
        let g = self.shared.generation();
        GroupError::FencedInstance {
            group: self.shared.group().to_owned(),
            instance_id: self.cfg().instance_id.clone().unwrap_or_default(),
            member_id: g.member_id,
            generation: g.generation_id,
        }
    }

    /// When the leader looks at partition counts next: soon (the retry backoff) while a subscribed
    /// topic is missing from the metadata, so a topic created a moment before the group formed is
    /// assigned within about a second; `metadata_refresh` otherwise.
    fn metadata_check_delay(&self, recheck: &mut crate::shared::Backoff) -> std::time::Duration {
        if self.partition_snapshot.values().any(|n| *n == 0) {
            recheck.next_delay().min(self.cfg().metadata_refresh)
        } else {
            self.cfg().metadata_refresh
        }
    }

    async fn partition_counts_changed(&mut self) -> bool {
        let topics: Vec<String> = self.partition_snapshot.keys().cloned().collect();
        match tokio::time::timeout(
            self.cfg().request_timeout,
            self.shared.transport.partition_counts(&topics),
        )
        .await
        {
            Ok(Ok(now)) => self
                .partition_snapshot
                .iter()
                .any(|(topic, n)| now.get(topic).copied().unwrap_or(0) != *n),
            _ => false,
        }
    }

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
    async fn join_and_sync(&mut self, reason: &str) -> Joined {
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
            // The coordinator keeps a member that rejoins until the rebalance ends.
            shared
                .lease
                .renew(tokio::time::Instant::now(), cfg.rebalance_timeout);
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
                Action::Ok => {}
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
                    shared.set_generation(Generation::empty());
                    if !self.owned.is_empty() {
                        return Joined::Next(Next::Lost(LostReason::MemberReset, code));
                    }
                    continue;
                }
                Action::ResetGeneration => {
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
                Action::Ok => shared.lease.renew(sync_sent, self.cfg().session_timeout),
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

    /// Leader: decode subscriptions, look up partition counts, run the selected assignor.
    async fn assign(
        &mut self,
        resp: &JoinGroupResponse,
    ) -> Result<Vec<(String, Bytes)>, GroupError> {
        let shared = self.shared.clone();
        let group = shared.group().to_owned();
        let protocol = resp.protocol_name.clone().unwrap_or_default();
        let assignor = assignor::find(&shared.config.assignors, &protocol).ok_or_else(|| {
            GroupError::UnknownProtocol {
                group: group.clone(),
                protocol: protocol.clone(),
            }
        })?;
        let mut members = Vec::with_capacity(resp.members.len());
        for m in &resp.members {
            let sub = Subscription::decode(&m.metadata).map_err(|e| GroupError::Payload {
                group: group.clone(),
                what: "subscription",
                member_id: m.member_id.clone(),
                message: e.to_string(),
            })?;
            let mut generation = sub.generation;
            // Cooperative-sticky v0/v1 subscriptions carry the generation in the user data.
            if generation < 0 && protocol == "cooperative-sticky" {
                if let Some(d) = sub.user_data.as_ref().filter(|d| d.len() >= 4) {
                    generation = i32::from_be_bytes([d[0], d[1], d[2], d[3]]);
                }
            }
            members.push(MemberSubscription {
                member_id: m.member_id.clone(),
                instance_id: m.instance_id.clone(),
                topics: sub.topics,
                user_data: sub.user_data,
                owned: sub.owned.into_iter().collect(),
                generation,
                rack: sub.rack,
            });
        }
        let topics: Vec<String> = members
            .iter()
            .flat_map(|m| m.topics.iter().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut backoff = shared.backoff();
        let mut attempts = 0;
        let partitions = loop {
            attempts += 1;
            match tokio::time::timeout(
                self.cfg().request_timeout,
                shared.transport.partition_counts(&topics),
            )
            .await
            {
                Ok(Ok(p)) => break p,
                other if attempts >= 5 => {
                    tracing::warn!(group = %group, outcome = ?other.map(|r| r.err()), "metadata for assignment unavailable; assigning nothing");
                    break BTreeMap::new();
                }
                _ => tokio::time::sleep(backoff.next_delay()).await,
            }
        };
        let cur = shared.generation();
        let assignor_error = |source| GroupError::Assignor {
            group: group.clone(),
            member_id: cur.member_id.clone(),
            generation: cur.generation_id,
            source,
        };
        let mut plan = assignor
            .assign(&members, &partitions)
            .map_err(&assignor_error)?;
        if assignor.protocol() == RebalanceProtocol::Cooperative {
            adjust_cooperative(&members, &mut plan);
        }
        validate_plan(assignor.name(), &members, &partitions, &plan).map_err(&assignor_error)?;
        // Every subscribed topic is watched, the missing ones with count 0: a plan made without a
        // topic must be redone as soon as the topic shows up (before, a topic missing from the first
        // metadata left the group with nothing assigned until the next unrelated rebalance).
        self.partition_snapshot = topics
            .iter()
            .map(|t| (t.clone(), partitions.get(t).copied().unwrap_or(0)))
            .collect();
        let missing: Vec<&String> = self
            .partition_snapshot
            .iter()
            .filter(|(_, n)| **n == 0)
            .map(|(t, _)| t)
            .collect();
        if !missing.is_empty() {
            tracing::warn!(group = %group, generation = cur.generation_id, ?missing,
                "subscribed topics have no partitions in the metadata (not created yet, or not yet \
                 published by the broker); assigning the others and rebalancing when they appear");
        }
        let assigned: i32 = partitions.values().sum();
        tracing::info!(group = %group, generation = cur.generation_id, members = members.len(),
            assignor = assignor.name(), partitions = assigned, "computed assignment as leader");
        members
            .iter()
            .map(|m| {
                let set = plan.get(&m.member_id).cloned().unwrap_or_default();
                let bytes = Assignment {
                    partitions: set,
                    user_data: None,
                }
                .encode()
                .map_err(|e| GroupError::Payload {
                    group: group.clone(),
                    what: "assignment",
                    member_id: m.member_id.clone(),
                    message: e.to_string(),
                })?;
                Ok((m.member_id.clone(), bytes))
            })
            .collect()
    }
}

/// Next event from the heartbeat task; pending forever when none runs.
async fn next_heartbeat_event(hb: &mut Option<Heartbeat>) -> Option<HeartbeatEvent> {
    match hb {
        Some(hb) => hb.events.recv().await,
        None => std::future::pending().await,
    }
}

fn millis(d: std::time::Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}
