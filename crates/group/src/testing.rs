//! A scripted fake coordinator implementing [`GroupTransport`], for tests without a broker.
//!
//! Without a script it behaves like a one-member group on a healthy broker: FindCoordinator finds
//! node 1; a dynamic member's first JoinGroup gets MEMBER_ID_REQUIRED; every JoinGroup makes the
//! caller leader of a new generation; SyncGroup returns what the leader assigned; commits are
//! stored and returned by OffsetFetch; ListOffsets answers 0 (earliest) or 100 (latest).
//!
//! [`FakeCoordinator::script`] queues replies that override the next calls of one API, in order
//! (for Metadata only [`Reply::Disconnect`] has a meaning).
//! Every request is logged ([`FakeCoordinator::calls`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use bytes::Bytes;

use crate::codes::{Api, ErrorCode};
use crate::payload::Assignment;
use crate::transport::{
    Coordinator, FetchedOffset, FindCoordinatorResponse, GroupTransport, HeartbeatRequest,
    JoinGroupMember, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, OffsetCommitRequest,
    OffsetFetchResponse, OffsetSpec, SyncGroupRequest, SyncGroupResponse, TransportError,
};
use crate::types::{GroupPartition, PartitionSet};

/// A scripted reply.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Answer with this error code (other fields as the default behaviour would set them).
    Code(ErrorCode),
    /// Answer JoinGroup with exactly this.
    Join(JoinGroupResponse),
    /// Answer SyncGroup with exactly this.
    Sync(SyncGroupResponse),
    /// Fail with a transport error (connection lost).
    Disconnect,
    /// Never answer (a lost response on a half-open connection); only the caller's deadline ends
    /// the call. Heartbeat only.
    Stall,
    /// Behave as without a script (useful to place a reply later in the queue).
    Default,
}

/// One logged request.
#[derive(Debug, Clone)]
pub enum Call {
    /// FindCoordinator.
    FindCoordinator,
    /// JoinGroup request.
    Join(JoinGroupRequest),
    /// SyncGroup request.
    Sync(SyncGroupRequest),
    /// Heartbeat request.
    Heartbeat(HeartbeatRequest),
    /// LeaveGroup request.
    Leave(LeaveGroupRequest),
    /// OffsetCommit request.
    Commit(OffsetCommitRequest),
    /// OffsetFetch of these partitions.
    OffsetFetch(Vec<GroupPartition>),
    /// ListOffsets.
    ListOffsets(Vec<GroupPartition>, OffsetSpec),
    /// Metadata (partition counts) of these topics.
    Metadata(Vec<String>),
}

impl Call {
    /// The API of this call.
    pub fn api(&self) -> Api {
        match self {
            Call::FindCoordinator => Api::FindCoordinator,
            Call::Join(_) => Api::JoinGroup,
            Call::Sync(_) => Api::SyncGroup,
            Call::Heartbeat(_) => Api::Heartbeat,
            Call::Leave(_) => Api::LeaveGroup,
            Call::Commit(_) => Api::OffsetCommit,
            Call::OffsetFetch(_) => Api::OffsetFetch,
            Call::ListOffsets(..) => Api::ListOffsets,
            Call::Metadata(_) => Api::Metadata,
        }
    }
}

#[derive(Default)]
struct State {
    script: HashMap<&'static str, VecDeque<Reply>>,
    calls: Vec<Call>,
    generation: i32,
    next_member: u32,
    last_assignment: Bytes,
    committed: BTreeMap<GroupPartition, (i64, Option<String>)>,
    partitions: BTreeMap<String, i32>,
    /// Assignment forced on SyncGroup replies, overriding the leader's.
    forced: Option<PartitionSet>,
    /// How long SyncGroup takes.
    sync_delay: std::time::Duration,
    /// Between a JoinGroup and the end of its SyncGroup.
    rebalancing: bool,
    /// OffsetCommits that arrived while `rebalancing`.
    commits_during_rebalance: usize,
}

/// The fake; see the module docs.
#[derive(Default)]
pub struct FakeCoordinator {
    state: Mutex<State>,
}

impl std::fmt::Debug for FakeCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCoordinator").finish_non_exhaustive()
    }
}

fn key(api: Api) -> &'static str {
    match api {
        Api::FindCoordinator => "find",
        Api::JoinGroup => "join",
        Api::SyncGroup => "sync",
        Api::Heartbeat => "heartbeat",
        Api::LeaveGroup => "leave",
        Api::OffsetCommit => "commit",
        Api::OffsetFetch => "fetch",
        Api::ListOffsets => "list",
        Api::Metadata => "metadata",
        Api::ConsumerGroupHeartbeat => "cghb",
        Api::DescribeConfigs => "configs",
    }
}

impl FakeCoordinator {
    /// A fake whose topics have these partition counts.
    pub fn new(partitions: impl IntoIterator<Item = (impl Into<String>, i32)>) -> Self {
        let fake = FakeCoordinator::default();
        fake.lock().partitions = partitions.into_iter().map(|(t, n)| (t.into(), n)).collect();
        fake
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues replies for the next calls of `api`.
    pub fn script(&self, api: Api, replies: impl IntoIterator<Item = Reply>) {
        self.lock()
            .script
            .entry(key(api))
            .or_default()
            .extend(replies);
    }

    /// Makes every later SyncGroup answer with this assignment (as if another member led).
    pub fn force_assignment(&self, partitions: PartitionSet) {
        self.lock().forced = Some(partitions);
    }

    /// Makes every SyncGroup take this long.
    pub fn set_sync_delay(&self, d: std::time::Duration) {
        self.lock().sync_delay = d;
    }

    /// OffsetCommits that arrived between a JoinGroup and the end of its SyncGroup (must be 0).
    pub fn commits_during_rebalance(&self) -> usize {
        self.lock().commits_during_rebalance
    }

    /// Changes a topic's partition count.
    pub fn set_partitions(&self, topic: &str, n: i32) {
        self.lock().partitions.insert(topic.to_owned(), n);
    }

    /// Stores a committed offset, as if another member had committed it.
    pub fn set_committed(&self, tp: GroupPartition, offset: i64) {
        self.lock().committed.insert(tp, (offset, None));
    }

    /// All requests so far.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// How many calls of `api` were made.
    pub fn count(&self, api: Api) -> usize {
        self.lock().calls.iter().filter(|c| c.api() == api).count()
    }

    /// The committed offsets.
    pub fn committed(&self) -> BTreeMap<GroupPartition, (i64, Option<String>)> {
        self.lock().committed.clone()
    }

    fn next(&self, api: Api, call: Call) -> Reply {
        let mut s = self.lock();
        s.calls.push(call);
        s.script
            .get_mut(key(api))
            .and_then(VecDeque::pop_front)
            .unwrap_or(Reply::Default)
    }
}

fn disconnect(api: Api) -> TransportError {
    TransportError {
        api,
        message: "fake: connection lost".into(),
    }
}

impl GroupTransport for FakeCoordinator {
    async fn find_coordinator(
        &self,
        _group_id: &str,
    ) -> Result<FindCoordinatorResponse, TransportError> {
        let coordinator = Coordinator {
            node_id: 1,
            host: "fake".into(),
            port: 9092,
        };
        match self.next(Api::FindCoordinator, Call::FindCoordinator) {
            Reply::Disconnect => Err(disconnect(Api::FindCoordinator)),
            Reply::Stall => std::future::pending().await,
            Reply::Code(error_code) => Ok(FindCoordinatorResponse {
                error_code,
                coordinator,
            }),
            _ => Ok(FindCoordinatorResponse {
                error_code: ErrorCode::NONE,
                coordinator,
            }),
        }
    }

    async fn join_group(
        &self,
        _c: &Coordinator,
        req: JoinGroupRequest,
    ) -> Result<JoinGroupResponse, TransportError> {
        let reply = self.next(Api::JoinGroup, Call::Join(req.clone()));
        let mut s = self.lock();
        match reply {
            Reply::Disconnect => Err(disconnect(Api::JoinGroup)),
            Reply::Join(r) => Ok(r),
            Reply::Code(error_code) => Ok(JoinGroupResponse {
                error_code,
                member_id: if error_code == ErrorCode::MEMBER_ID_REQUIRED {
                    s.next_member += 1;
                    format!("member-{}", s.next_member)
                } else {
                    String::new()
                },
                ..Default::default()
            }),
            _ => {
                if req.member_id.is_empty() && req.instance_id.is_none() {
                    s.next_member += 1;
                    return Ok(JoinGroupResponse {
                        error_code: ErrorCode::MEMBER_ID_REQUIRED,
                        member_id: format!("member-{}", s.next_member),
                        ..Default::default()
                    });
                }
                let member_id = if req.member_id.is_empty() {
                    s.next_member += 1;
                    format!(
                        "{}-{}",
                        req.instance_id.clone().unwrap_or_default(),
                        s.next_member
                    )
                } else {
                    req.member_id.clone()
                };
                s.generation += 1;
                s.rebalancing = true;
                let (name, metadata) = req.protocols.first().cloned().unwrap_or_default();
                Ok(JoinGroupResponse {
                    error_code: ErrorCode::NONE,
                    generation_id: s.generation,
                    protocol_type: Some("consumer".into()),
                    protocol_name: Some(name),
                    leader: member_id.clone(),
                    skip_assignment: false,
                    member_id: member_id.clone(),
                    members: vec![JoinGroupMember {
                        member_id,
                        instance_id: req.instance_id.clone(),
                        metadata,
                    }],
                })
            }
        }
    }

    async fn sync_group(
        &self,
        _c: &Coordinator,
        req: SyncGroupRequest,
    ) -> Result<SyncGroupResponse, TransportError> {
        let reply = self.next(Api::SyncGroup, Call::Sync(req.clone()));
        let delay = self.lock().sync_delay;
        tokio::time::sleep(delay).await;
        let mut s = self.lock();
        s.rebalancing = false;
        match reply {
            Reply::Disconnect => Err(disconnect(Api::SyncGroup)),
            Reply::Sync(r) => Ok(r),
            Reply::Code(error_code) => Ok(SyncGroupResponse {
                error_code,
                ..Default::default()
            }),
            _ => {
                if let Some(forced) = &s.forced {
                    s.last_assignment = Assignment {
                        partitions: forced.clone(),
                        user_data: None,
                    }
                    .encode()
                    .unwrap_or_default();
                } else if let Some((_, a)) =
                    req.assignments.iter().find(|(m, _)| *m == req.member_id)
                {
                    s.last_assignment = a.clone();
                }
                Ok(SyncGroupResponse {
                    error_code: ErrorCode::NONE,
                    protocol_name: Some(req.protocol_name.clone()),
                    assignment: s.last_assignment.clone(),
                })
            }
        }
    }

    async fn heartbeat(
        &self,
        _c: &Coordinator,
        req: HeartbeatRequest,
    ) -> Result<ErrorCode, TransportError> {
        match self.next(Api::Heartbeat, Call::Heartbeat(req)) {
            Reply::Disconnect => Err(disconnect(Api::Heartbeat)),
            Reply::Stall => std::future::pending().await,
            Reply::Code(c) => Ok(c),
            _ => Ok(ErrorCode::NONE),
        }
    }

    async fn leave_group(
        &self,
        _c: &Coordinator,
        req: LeaveGroupRequest,
    ) -> Result<ErrorCode, TransportError> {
        match self.next(Api::LeaveGroup, Call::Leave(req)) {
            Reply::Disconnect => Err(disconnect(Api::LeaveGroup)),
            Reply::Code(c) => Ok(c),
            _ => Ok(ErrorCode::NONE),
        }
    }

    async fn offset_commit(
        &self,
        _c: &Coordinator,
        req: OffsetCommitRequest,
    ) -> Result<Vec<(GroupPartition, ErrorCode)>, TransportError> {
        let reply = self.next(Api::OffsetCommit, Call::Commit(req.clone()));
        let mut s = self.lock();
        if s.rebalancing {
            s.commits_during_rebalance += 1;
        }
        match reply {
            Reply::Disconnect => Err(disconnect(Api::OffsetCommit)),
            Reply::Code(c) => Ok(req
                .offsets
                .iter()
                .map(|o| (o.partition.clone(), c))
                .collect()),
            _ => {
                for o in &req.offsets {
                    s.committed
                        .insert(o.partition.clone(), (o.offset, o.metadata.clone()));
                }
                Ok(req
                    .offsets
                    .iter()
                    .map(|o| (o.partition.clone(), ErrorCode::NONE))
                    .collect())
            }
        }
    }

    async fn offset_fetch(
        &self,
        _c: &Coordinator,
        _group_id: &str,
        partitions: &[GroupPartition],
    ) -> Result<OffsetFetchResponse, TransportError> {
        let reply = self.next(Api::OffsetFetch, Call::OffsetFetch(partitions.to_vec()));
        let s = self.lock();
        match reply {
            Reply::Disconnect => Err(disconnect(Api::OffsetFetch)),
            Reply::Code(error_code) => Ok(OffsetFetchResponse {
                error_code,
                partitions: BTreeMap::new(),
            }),
            _ => Ok(OffsetFetchResponse {
                error_code: ErrorCode::NONE,
                partitions: partitions
                    .iter()
                    .map(|tp| {
                        let (offset, metadata) = s.committed.get(tp).cloned().unwrap_or((-1, None));
                        (
                            tp.clone(),
                            FetchedOffset {
                                offset,
                                leader_epoch: -1,
                                metadata,
                                error_code: ErrorCode::NONE,
                            },
                        )
                    })
                    .collect(),
            }),
        }
    }

    async fn list_offsets(
        &self,
        partitions: &[GroupPartition],
        spec: OffsetSpec,
    ) -> Result<BTreeMap<GroupPartition, Result<i64, ErrorCode>>, TransportError> {
        match self.next(
            Api::ListOffsets,
            Call::ListOffsets(partitions.to_vec(), spec),
        ) {
            Reply::Disconnect => Err(disconnect(Api::ListOffsets)),
            Reply::Code(c) => Ok(partitions.iter().map(|tp| (tp.clone(), Err(c))).collect()),
            _ => {
                let o = if spec == OffsetSpec::Earliest { 0 } else { 100 };
                Ok(partitions.iter().map(|tp| (tp.clone(), Ok(o))).collect())
            }
        }
    }

    async fn partition_counts(
        &self,
        topics: &[String],
    ) -> Result<BTreeMap<String, i32>, TransportError> {
        if let Reply::Disconnect = self.next(Api::Metadata, Call::Metadata(topics.to_vec())) {
            return Err(disconnect(Api::Metadata));
        }
        let s = self.lock();
        // A topic the fake does not know is left out, as a broker leaves out (with an error code)
        // a topic that does not exist or that its metadata does not show yet.
        Ok(topics
            .iter()
            .filter_map(|t| s.partitions.get(t).map(|n| (t.clone(), *n)))
            .collect())
    }
}
