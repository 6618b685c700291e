//! The consumer-protocol member (KIP-848, `group.protocol=consumer`): ConsumerGroupHeartbeat,
//! member epochs, and target-assignment reconciliation through the same listener contract as the
//! classic member.
//!
//! # How it works
//!
//! The broker computes every member's target assignment (server assignor `uniform` or `range`).
//! The member heartbeats at the interval the broker gives, reporting what it owns; each response
//! may carry its full target assignment. The member then **reconciles**, one step at a time:
//!
//! 1. `revoked = owned - target`: [`RebalanceEvent::Revoked`]; the engine drains and commits (with
//!    the current member epoch), acknowledges; only then does the next heartbeat report the smaller
//!    owned set (this is the ack the broker waits for before giving the partitions to someone
//!    else). Heartbeats continue meanwhile, reporting the partitions as still owned.
//! 2. `added = target - owned`: OffsetFetch / ListOffsets for the start positions, then
//!    [`RebalanceEvent::Assigned`]; the next heartbeat (sent at once) acknowledges.
//!
//! A member whose partitions do not change is never told anything: its epoch advances in a
//! heartbeat response and its fetching and processing go on. That is the point of this protocol.
//!
//! # States
//!
//! ```text
//! JOINING (epoch 0, full request) ─→ STABLE ⇄ RECONCILING (Revoked → ack → Assigned → ack)
//!    ▲          FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: Lost(owned) ─┘
//!    │          (no heartbeat for a session timeout: ownership in doubt, dispatch held, nothing
//!    │           lost, until a heartbeat answers; see `crate::heartbeat`)
//!    └──────────────────────────── rejoin at once with epoch 0 (UNKNOWN_MEMBER_ID: new member id)
//! shutdown: Revoked(owned) → ack → leave (epoch -1; a static member -2, keeping its assignment
//!           for the session timeout)
//! fatal codes / FENCED_INSTANCE_ID: Lost(owned) → stop with GroupError
//! ```
//!
//! Every error code's action is in [`crate::codes`] (rows for `ConsumerGroupHeartbeat`).
//!
//! One task runs this loop and is the only sender of events, so events are ordered and never
//! concurrent. It heartbeats while an event waits for its acknowledgement, so a long drain never
//! costs the membership (up to the rebalance timeout, which the broker enforces for revocations).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::broker_session;
use crate::codes::{Action, Api, ErrorCode, action};
use crate::error::GroupError;
use crate::listener::{AssignedPartition, EventSender, LostReason, RebalanceEvent};
use crate::offsets;
use crate::shared::{Shared, Trigger};
use crate::shutdown::Shutdown;
use crate::transport::{ConsumerHeartbeatRequest, GroupTransport, TopicId};
use crate::types::{Generation, GroupPartition, PartitionSet, StartPosition};

/// Epoch sent to leave the group for good.
const LEAVE_EPOCH: i32 = -1;
/// Epoch a static member sends to leave temporarily (the broker keeps its assignment).
const STATIC_LEAVE_EPOCH: i32 = -2;

/// A fresh client-generated member id (KIP-1082): 16 random bytes, 32 hex digits.
fn fresh_member_id() -> String {
    let bytes: [u8; 16] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// What a reconciliation step did.
enum Step {
    /// The engine drained, committed and acknowledged these.
    Revoked(PartitionSet),
    /// The engine took these.
    Assigned(PartitionSet),
    /// Start positions could not be looked up.
    Failed(GroupError),
}

/// Which kind of step is in flight (decides whether a fence may drop it).
#[derive(Clone, Copy, PartialEq, Eq)]
enum StepKind {
    Revoke,
    Assign,
}

type StepFuture = Pin<Box<dyn Future<Output = Step> + Send>>;

type SessionLookup = Pin<Box<dyn Future<Output = broker_session::Learned> + Send>>;

/// Why the member loop must leave the stable path.
enum Reset {
    /// Rejoin with epoch 0 after reporting the partitions lost.
    Lost {
        reason: LostReason,
        new_member_id: bool,
        code: ErrorCode,
    },
    Fatal(GroupError),
}

pub(crate) struct ConsumerMember<T: GroupTransport> {
    shared: Arc<Shared<T>>,
    events: EventSender,
    triggers: mpsc::UnboundedReceiver<Trigger>,
    shutdown: Shutdown,
    member_id: String,
    /// The epoch from the last successful heartbeat (0 while joining).
    epoch: i32,
    /// What the engine holds (acknowledged Assigned minus acknowledged Revoked).
    owned: PartitionSet,
    /// The latest target assignment the broker sent, resolved to names.
    target: PartitionSet,
    /// Whether the engine was told about the current join yet (an empty Assigned is sent once
    /// per join, like the classic member after every rebalance).
    announced: bool,
    /// Topic names by id and back.
    names: BTreeMap<TopicId, String>,
    ids: BTreeMap<String, TopicId>,
    /// Assignment entries whose topic id is not resolved yet.
    unresolved: bool,
    interval: Duration,
    step: Option<(StepKind, StepFuture)>,
    /// Bumped on every fence, so an in-flight Assign step does not announce stale partitions.
    fences: Arc<AtomicU64>,
    closing: bool,
    /// The session timeout the coordinator enforces for the group (`broker_session`): the lease
    /// and the in-doubt check follow it. The client's `session_timeout` until it is read.
    session: Duration,
    /// The coordinator `session` was read from; another coordinator is asked again.
    session_from: Option<i32>,
    /// A read from a new coordinator, in flight while the member goes on with the old value.
    session_lookup: Option<SessionLookup>,
}

impl<T: GroupTransport> ConsumerMember<T> {
    pub(crate) fn new(
        shared: Arc<Shared<T>>,
        events: EventSender,
        triggers: mpsc::UnboundedReceiver<Trigger>,
        shutdown: Shutdown,
    ) -> Self {
        ConsumerMember {
            interval: shared.config.heartbeat_interval,
            session: shared.config.session_timeout,
            shared,
            events,
            triggers,
            shutdown,
            member_id: fresh_member_id(),
            epoch: 0,
            owned: PartitionSet::new(),
            target: PartitionSet::new(),
            announced: false,
            names: BTreeMap::new(),
            ids: BTreeMap::new(),
            unresolved: false,
            step: None,
            fences: Arc::new(AtomicU64::new(0)),
            closing: false,
            session_from: None,
            session_lookup: None,
        }
    }

    fn group(&self) -> &str {
        self.shared.group()
    }

    fn set_session(&mut self, learned: broker_session::Learned) {
        self.session = learned.timeout;
        self.session_from = Some(learned.node_id);
    }

    /// Reads the session timeout `coordinator` enforces unless it was read from it already. The
    /// first read is awaited (at most the request timeout), so the first answered heartbeat
    /// renews the lease by the broker's session; a read from a coordinator the group moved to
    /// runs beside the heartbeats, which keep the old value until it is in.
    async fn learn_session(&mut self, coordinator: &crate::transport::Coordinator) {
        if self.session_from == Some(coordinator.node_id) {
            return;
        }
        if self.session_from.is_none() {
            let learned = broker_session::learn(&self.shared, coordinator).await;
            self.set_session(learned);
        } else if self.session_lookup.is_none() {
            let shared = self.shared.clone();
            let coordinator = coordinator.clone();
            self.session_lookup = Some(Box::pin(async move {
                broker_session::learn(&shared, &coordinator).await
            }));
        }
    }

    fn set_owned(&mut self, owned: PartitionSet) {
        self.shared.set_owned(owned.clone());
        self.owned = owned;
    }

    fn publish_generation(&self) {
        let generation_id = if self.epoch > 0 {
            self.epoch
        } else {
            Generation::NONE
        };
        self.shared.set_generation(Generation {
            generation_id,
            member_id: self.member_id.clone(),
            protocol: Some("consumer".into()),
        });
    }

    pub(crate) async fn run(mut self) -> Result<(), GroupError> {
        self.publish_generation();
        tracing::info!(group = %self.group(), member = %self.member_id, "joining group (consumer protocol)");
        let mut next_heartbeat = Instant::now();
        let mut last_ok = Instant::now();
        let mut backoff = self.shared.backoff();
        let mut unreleased_since: Option<Instant> = None;
        loop {
            if self.closing && self.step.is_none() && self.owned.is_empty() {
                self.leave().await;
                return Ok(());
            }
            // Start the next reconciliation step when none is running.
            if self.step.is_none() {
                self.start_step();
            }
            let reset = tokio::select! {
                biased;
                _ = self.shutdown.wait(), if !self.closing => {
                    tracing::info!(group = %self.group(), member = %self.member_id, owned = self.owned.len(), "closing: revoking every partition, then leaving");
                    self.closing = true;
                    if self.epoch <= 0 {
                        // Not in the group (joining or fenced): nothing may be committed.
                        self.drop_assign_step();
                        self.finish_step_only().await;
                        self.lose(LostReason::Fatal).await;
                    }
                    None
                }
                step = poll_step(&mut self.step) => {
                    self.step = None;
                    match step {
                        Step::Revoked(p) => {
                            let owned = self.owned.difference(&p).cloned().collect();
                            self.set_owned(owned);
                            next_heartbeat = Instant::now(); // the ack
                            None
                        }
                        Step::Assigned(p) => {
                            let owned = self.owned.union(&p).cloned().collect();
                            self.set_owned(owned);
                            next_heartbeat = Instant::now(); // the ack
                            None
                        }
                        Step::Failed(e) => Some(Reset::Fatal(e)),
                    }
                }
                Some(t) = self.triggers.recv() => self.on_trigger(t),
                learned = poll_lookup(&mut self.session_lookup) => {
                    self.session_lookup = None;
                    self.set_session(learned);
                    None
                }
                _ = tokio::time::sleep_until(next_heartbeat) => {
                    let (reset, delay) = self.heartbeat(&mut last_ok, &mut backoff, &mut unreleased_since).await;
                    next_heartbeat = Instant::now() + delay;
                    reset
                }
            };
            if reset.is_some() {
                // Gone, fenced or failed: no call starts from now on.
                self.shared.end_lease();
            }
            match reset {
                None => {}
                Some(Reset::Lost {
                    reason,
                    new_member_id,
                    code,
                }) => {
                    tracing::warn!(group = %self.group(), member = %self.member_id, epoch = self.epoch, code = %code,
                        "fenced: partitions lost, rejoining with epoch 0");
                    self.fence().await;
                    self.lose(reason).await;
                    if new_member_id {
                        self.member_id = fresh_member_id();
                    }
                    self.epoch = 0;
                    self.target.clear();
                    self.announced = false;
                    self.publish_generation();
                    last_ok = Instant::now();
                    next_heartbeat = Instant::now();
                    if self.closing {
                        // Nothing left to revoke; the leave at the top of the loop is moot but
                        // harmless for an unknown member.
                        return Ok(());
                    }
                }
                Some(Reset::Fatal(e)) => {
                    let e = self.shared.explain(e);
                    tracing::error!(group = %self.group(), error = %e, "member stopping on fatal error");
                    self.fence().await;
                    self.lose(LostReason::Fatal).await;
                    self.shared.set_generation(Generation::empty());
                    return Err(e);
                }
            }
        }
    }

    /// Marks the member out of the group before anything else, so no commit goes out, and settles
    /// the step in flight: an Assign step is dropped (its partitions count as owned only if the
    /// engine was told), a Revoke step is awaited (the engine's commit then fails as it must).
    async fn fence(&mut self) {
        self.fences.fetch_add(1, Ordering::SeqCst);
        let mut g = self.shared.generation();
        g.generation_id = Generation::NONE;
        self.shared.set_generation(g);
        self.drop_assign_step();
        self.finish_step_only().await;
    }

    fn drop_assign_step(&mut self) {
        if matches!(self.step, Some((StepKind::Assign, _))) {
            self.step = None;
            // The step sets the shared owned set right before it tells the engine.
            self.owned = self.shared.owned();
        }
    }

    async fn finish_step_only(&mut self) {
        if let Some((_, fut)) = self.step.take() {
            match fut.await {
                Step::Revoked(p) => {
                    let owned = self.owned.difference(&p).cloned().collect();
                    self.set_owned(owned);
                }
                Step::Assigned(p) => {
                    let owned = self.owned.union(&p).cloned().collect();
                    self.set_owned(owned);
                }
                Step::Failed(_) => {}
            }
        }
    }

    /// Tells the engine its partitions are lost (no commit) and forgets them.
    async fn lose(&mut self, reason: LostReason) {
        let mut g = self.shared.generation();
        g.generation_id = Generation::NONE;
        self.shared.set_generation(g);
        if self.owned.is_empty() {
            self.shared.set_in_doubt(false, self.epoch);
            return;
        }
        let partitions = std::mem::take(&mut self.owned);
        tracing::warn!(group = %self.group(), n = partitions.len(), ?reason, "partitions lost");
        self.events
            .send_and_wait(|ack| RebalanceEvent::Lost {
                partitions,
                reason,
                ack,
            })
            .await;
        self.set_owned(PartitionSet::new());
        // Only after the engine dropped them (see `Shared::in_doubt`).
        self.shared.set_in_doubt(false, self.epoch);
    }

    fn on_trigger(&mut self, t: Trigger) -> Option<Reset> {
        let current = self.shared.generation().generation_id;
        match t {
            Trigger::Reset { generation, code } if generation == current && current > 0 => {
                let new_member_id = code == ErrorCode::UNKNOWN_MEMBER_ID;
                Some(Reset::Lost {
                    reason: if new_member_id {
                        LostReason::MemberReset
                    } else {
                        LostReason::GenerationReset
                    },
                    new_member_id,
                    code,
                })
            }
            Trigger::Fenced { generation } if generation == current => {
                Some(Reset::Fatal(self.fenced_instance()))
            }
            _ => None,
        }
    }

    fn fenced_instance(&self) -> GroupError {
        GroupError::FencedInstance {
            group: self.group().to_owned(),
            instance_id: self.shared.config.instance_id.clone().unwrap_or_default(),
            member_id: self.member_id.clone(),
            generation: self.epoch,
        }
    }

    /// Starts the next reconciliation step if `owned` differs from what it should be.
    fn start_step(&mut self) {
        if self.epoch <= 0 && !self.closing {
            return;
        }
        let target = if self.closing {
            PartitionSet::new()
        } else {
            self.target.clone()
        };
        let revoked: PartitionSet = self.owned.difference(&target).cloned().collect();
        if !revoked.is_empty() {
            let events = self.events.clone();
            let generation = self.epoch;
            let group = self.group().to_owned();
            tracing::info!(group = %group, epoch = generation, n = revoked.len(), "revoking partitions");
            self.step = Some((
                StepKind::Revoke,
                Box::pin(async move {
                    let p = revoked.clone();
                    events
                        .send_and_wait(|ack| RebalanceEvent::Revoked {
                            generation,
                            partitions: p,
                            ack,
                        })
                        .await;
                    Step::Revoked(revoked)
                }),
            ));
            return;
        }
        if self.closing {
            return;
        }
        let added: PartitionSet = target.difference(&self.owned).cloned().collect();
        if added.is_empty() && self.announced {
            return;
        }
        self.announced = true;
        let shared = self.shared.clone();
        let events = self.events.clone();
        let fences = self.fences.clone();
        let fence_at_start = fences.load(Ordering::SeqCst);
        let owned_after: PartitionSet = self.owned.union(&added).cloned().collect();
        self.step = Some((
            StepKind::Assign,
            Box::pin(async move {
                let positions = match offsets::start_positions(&shared, &added).await {
                    Ok(p) => p,
                    Err(e) => return Step::Failed(e),
                };
                if fences.load(Ordering::SeqCst) != fence_at_start {
                    return Step::Assigned(PartitionSet::new());
                }
                let generation = shared.generation().generation_id;
                let partitions: Vec<AssignedPartition> = added
                    .iter()
                    .map(|tp| AssignedPartition {
                        partition: tp.clone(),
                        start: positions.get(tp).cloned().unwrap_or(StartPosition::Missing),
                    })
                    .collect();
                tracing::info!(group = %shared.group(), epoch = generation, added = partitions.len(),
                    owned = owned_after.len(), "assignment received");
                // Owned from the moment the engine is told (the handle is never behind the events).
                shared.set_owned(owned_after);
                events
                    .send_and_wait(|ack| RebalanceEvent::Assigned {
                        generation,
                        partitions,
                        ack,
                    })
                    .await;
                Step::Assigned(added)
            }),
        ));
    }

    fn owned_by_id(&self) -> Vec<(TopicId, Vec<i32>)> {
        let mut out: BTreeMap<TopicId, Vec<i32>> = BTreeMap::new();
        for tp in &self.owned {
            if let Some(id) = self.ids.get(&tp.topic) {
                out.entry(*id).or_default().push(tp.partition);
            }
        }
        out.into_iter().collect()
    }

    /// Resolves the topic ids of an assignment to names, refreshing metadata for unknown ids.
    async fn resolve(&mut self, assignment: &[(TopicId, Vec<i32>)]) -> PartitionSet {
        if assignment
            .iter()
            .any(|(id, _)| !self.names.contains_key(id))
        {
            let cfg = &self.shared.config;
            let lookup = if cfg.topic_regex.is_some() {
                None
            } else {
                Some(cfg.topics.as_slice())
            };
            match tokio::time::timeout(
                self.shared.config.request_timeout,
                self.shared.transport.topic_ids(lookup),
            )
            .await
            {
                Ok(Ok(map)) => {
                    for (name, id) in map {
                        self.names.insert(id, name.clone());
                        self.ids.insert(name, id);
                    }
                }
                Ok(Err(e)) => {
                    tracing::info!(group = %self.group(), error = %e, "topic id lookup failed")
                }
                Err(_) => tracing::info!(group = %self.group(), "topic id lookup timed out"),
            }
        }
        let mut out = PartitionSet::new();
        self.unresolved = false;
        for (id, partitions) in assignment {
            match self.names.get(id) {
                Some(name) => out.extend(
                    partitions
                        .iter()
                        .map(|p| GroupPartition::new(name.clone(), *p)),
                ),
                None => self.unresolved = true,
            }
        }
        if self.unresolved {
            tracing::info!(group = %self.group(), "assignment names a topic id not in metadata yet; retrying");
        }
        out
    }

    /// One heartbeat: returns what must happen and when the next heartbeat is due.
    async fn heartbeat(
        &mut self,
        last_ok: &mut Instant,
        backoff: &mut crate::shared::Backoff,
        unreleased_since: &mut Option<Instant>,
    ) -> (Option<Reset>, Duration) {
        let cfg = self.shared.config.clone();
        if self.epoch > 0 && last_ok.elapsed() > self.session {
            // Not a loss: the coordinator probably moved (its broker died) and the new one
            // restarts our session when it loads the group. Hold dispatch until a heartbeat says
            // which (see `crate::heartbeat`'s module docs; the same rule for both protocols).
            self.shared.set_in_doubt(true, self.epoch);
        }
        // Bounded, so the session check above runs even while no coordinator can be found.
        let coordinator = match tokio::time::timeout(self.interval, self.shared.coordinator()).await
        {
            Err(_) => return (None, Duration::ZERO),
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return (Some(Reset::Fatal(e)), Duration::ZERO),
        };
        self.learn_session(&coordinator).await;
        let request = ConsumerHeartbeatRequest {
            group_id: cfg.group_id.clone(),
            member_id: self.member_id.clone(),
            member_epoch: self.epoch,
            instance_id: cfg.instance_id.clone(),
            rack_id: cfg.rack.clone(),
            rebalance_timeout_ms: millis(cfg.rebalance_timeout),
            subscribed_topic_names: cfg.topic_regex.is_none().then(|| cfg.topics.clone()),
            subscribed_topic_regex: cfg.topic_regex.clone(),
            server_assignor: cfg.server_assignor.clone(),
            owned: Some(if self.epoch == 0 {
                Vec::new()
            } else {
                self.owned_by_id()
            }),
        };
        let sent = Instant::now();
        let result = tokio::time::timeout(
            cfg.request_timeout,
            self.shared
                .transport
                .consumer_group_heartbeat(&coordinator, request),
        )
        .await;
        let resp = match result {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tracing::info!(group = %self.group(), error = %e, "heartbeat failed; rediscovering coordinator");
                self.shared.invalidate(&coordinator);
                return (None, backoff.next_delay());
            }
            Err(_) => {
                tracing::info!(group = %self.group(), "heartbeat timed out; rediscovering coordinator");
                self.shared.invalidate(&coordinator);
                return (None, backoff.next_delay());
            }
        };
        let code = resp.error_code;
        match action(Api::ConsumerGroupHeartbeat, code) {
            Action::Ok => {}
            Action::Rediscover => {
                tracing::info!(group = %self.group(), code = %code, "coordinator moved; rediscovering");
                self.shared.invalidate(&coordinator);
                // KIP-848: no backoff once the new coordinator is found (`coordinator()` backs
                // off between lookups itself).
                return (None, Duration::ZERO);
            }
            Action::Backoff => {
                if code == ErrorCode::UNRELEASED_INSTANCE_ID {
                    let since = *unreleased_since.get_or_insert_with(Instant::now);
                    // The broker frees the instance id when the old process leaves or its
                    // session expires; a live duplicate never does.
                    if since.elapsed() > self.session * 2 {
                        return (
                            Some(Reset::Fatal(GroupError::fatal(
                                self.group(),
                                Api::ConsumerGroupHeartbeat,
                                code,
                                &self.member_id,
                                self.epoch,
                            ))),
                            Duration::ZERO,
                        );
                    }
                    tracing::info!(group = %self.group(), instance = ?cfg.instance_id,
                        "the previous member with this instance id has not left yet; retrying");
                }
                return (
                    None,
                    backoff
                        .next_delay()
                        .max(self.interval.min(Duration::from_secs(1))),
                );
            }
            Action::ResetGeneration | Action::ResetMember => {
                let member_reset = action(Api::ConsumerGroupHeartbeat, code) == Action::ResetMember;
                return (
                    Some(Reset::Lost {
                        reason: if member_reset {
                            LostReason::MemberReset
                        } else {
                            LostReason::GenerationReset
                        },
                        new_member_id: member_reset,
                        code,
                    }),
                    Duration::ZERO,
                );
            }
            Action::Fenced => return (Some(Reset::Fatal(self.fenced_instance())), Duration::ZERO),
            Action::Rejoin | Action::AdoptMemberId | Action::FailCommit { .. } | Action::Fatal => {
                if let Some(m) = &resp.error_message {
                    tracing::error!(group = %self.group(), code = %code, message = %m, "ConsumerGroupHeartbeat failed");
                }
                return (
                    Some(Reset::Fatal(GroupError::fatal(
                        self.group(),
                        Api::ConsumerGroupHeartbeat,
                        code,
                        &self.member_id,
                        self.epoch,
                    ))),
                    Duration::ZERO,
                );
            }
        }
        *last_ok = Instant::now();
        // The coordinator answered with our epoch: the member still owns what it reported.
        self.shared.renew_lease(sent, self.session);
        self.shared.set_in_doubt(false, self.epoch);
        *backoff = self.shared.backoff();
        *unreleased_since = None;
        if resp.heartbeat_interval_ms > 0 {
            self.interval = Duration::from_millis(resp.heartbeat_interval_ms as u64);
        }
        if resp.member_epoch > 0 && resp.member_epoch != self.epoch {
            tracing::debug!(group = %self.group(), from = self.epoch, to = resp.member_epoch, "member epoch");
            if self.epoch == 0 {
                tracing::info!(group = %self.group(), member = %self.member_id, epoch = resp.member_epoch, "joined group");
            }
            self.epoch = resp.member_epoch;
            self.publish_generation();
        }
        if let Some(a) = &resp.assignment {
            let target = self.resolve(a).await;
            if target != self.target {
                tracing::info!(group = %self.group(), epoch = self.epoch, target = target.len(),
                    owned = self.owned.len(), "new target assignment");
            }
            self.target = target;
        } else if self.unresolved {
            // Nothing new, but retry names that were missing last time on the next full response.
        }
        (None, self.interval)
    }

    /// Leaves the group: epoch -1, or -2 for a static member (the broker keeps its assignment for
    /// the session timeout, so a restart with the same instance id takes it over).
    async fn leave(&mut self) {
        let cfg = self.shared.config.clone();
        let epoch = if cfg.instance_id.is_some() {
            STATIC_LEAVE_EPOCH
        } else {
            LEAVE_EPOCH
        };
        if self.epoch > 0 {
            let request = ConsumerHeartbeatRequest {
                group_id: cfg.group_id.clone(),
                member_id: self.member_id.clone(),
                member_epoch: epoch,
                instance_id: cfg.instance_id.clone(),
                rebalance_timeout_ms: -1,
                ..ConsumerHeartbeatRequest::default()
            };
            let shared = self.shared.clone();
            let leave = async move {
                let c = shared.coordinator().await.ok()?;
                shared
                    .transport
                    .consumer_group_heartbeat(&c, request)
                    .await
                    .ok()
            };
            match tokio::time::timeout(cfg.request_timeout, leave).await {
                Ok(Some(r))
                    if r.error_code == ErrorCode::NONE
                        || r.error_code == ErrorCode::UNKNOWN_MEMBER_ID
                        || r.error_code == ErrorCode::FENCED_MEMBER_EPOCH =>
                {
                    tracing::info!(group = %self.group(), member = %self.member_id, epoch, "left the group");
                }
                other => tracing::warn!(group = %self.group(), member = %self.member_id,
                    outcome = ?other.map(|r| r.map(|r| r.error_code)), "leave failed; the session timeout will remove the member"),
            }
        }
        self.shared.set_generation(Generation::empty());
    }
}

/// The session-timeout read in flight; pending forever when none runs.
async fn poll_lookup(lookup: &mut Option<SessionLookup>) -> broker_session::Learned {
    match lookup {
        Some(fut) => fut.await,
        None => std::future::pending().await,
    }
}

/// The step in flight; pending forever when none runs.
async fn poll_step(step: &mut Option<(StepKind, StepFuture)>) -> Step {
    match step {
        Some((_, fut)) => fut.await,
        None => std::future::pending().await,
    }
}
