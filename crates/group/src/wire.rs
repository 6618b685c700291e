//! [`WireTransport`]: the [`GroupTransport`] over `orderly-protocol`'s connection pool.
//!
//! Group requests go to the coordinator on the pool's `Coordination` connection. Heartbeats use a
//! **dedicated connection** this module opens itself, so a heartbeat never waits behind a long
//! SyncGroup or an OffsetCommit (a broker answers one request per connection at a time).
//! Metadata and ListOffsets use `orderly-protocol`'s messages.

use std::collections::BTreeMap;
use std::sync::Arc;

use orderly_protocol::messages::consumer_group_heartbeat::{
    ConsumerGroupHeartbeatRequest, TopicIdPartitions,
};
use orderly_protocol::messages::describe_configs::{
    DescribeConfigsRequest, DescribeConfigsResource, RESOURCE_BROKER, RESOURCE_GROUP,
};
use orderly_protocol::messages::find_coordinator::{FindCoordinatorRequest, KEY_TYPE_GROUP};
use orderly_protocol::messages::heartbeat::HeartbeatRequest as WireHeartbeat;
use orderly_protocol::messages::join_group::{JoinGroupProtocol, JoinGroupRequest as WireJoin};
use orderly_protocol::messages::leave_group::{LeaveGroupRequest as WireLeave, LeavingMember};
use orderly_protocol::messages::offset_commit::{
    OffsetCommitPartition, OffsetCommitRequest as WireCommit, OffsetCommitTopic,
};
use orderly_protocol::messages::offset_fetch::{
    OffsetFetchGroup, OffsetFetchRequest, OffsetFetchTopic,
};
use orderly_protocol::messages::sync_group::{SyncGroupAssignment, SyncGroupRequest as WireSync};
use orderly_protocol::{BrokerConnection, ConnectionConfig, ConnectionKind, ConnectionPool};

use crate::codes::{Api, ErrorCode};
use crate::transport::{ConfigResource, DescribedConfigs};
use crate::transport::{ConsumerHeartbeatRequest, ConsumerHeartbeatResponse, TopicId};
use crate::transport::{
    Coordinator, FetchedOffset, FindCoordinatorResponse, GroupTransport, HeartbeatRequest,
    JoinGroupMember, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, OffsetCommitRequest,
    OffsetFetchResponse, OffsetSpec, SyncGroupRequest, SyncGroupResponse, TransportError,
};
use crate::types::{GroupPartition, PartitionSet, by_topic};
use orderly_protocol::messages::list_offsets::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use orderly_protocol::messages::metadata::MetadataResponse;

/// Kafka's isolation level for ListOffsets "latest" (the protocol crate's; default
/// read_committed: "latest" is the last stable offset, matching the engine's fetch default).
pub use orderly_protocol::IsolationLevel;

/// [`GroupTransport`] over `orderly-protocol`.
pub struct WireTransport {
    pool: Arc<ConnectionPool>,
    heartbeat: tokio::sync::Mutex<Option<Arc<BrokerConnection>>>,
    /// JoinGroup and SyncGroup (see `membership_connection`).
    membership: tokio::sync::Mutex<Option<Arc<BrokerConnection>>>,
    isolation: IsolationLevel,
    /// The last "serves no version we speak" line (see [`WireTransport::answer`]).
    refused: std::sync::Mutex<Option<String>>,
}

impl std::fmt::Debug for WireTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireTransport")
            .field("isolation", &self.isolation)
            .finish_non_exhaustive()
    }
}

fn terr(api: Api, e: impl std::fmt::Display) -> TransportError {
    TransportError {
        api,
        message: e.to_string(),
    }
}

fn addr(c: &Coordinator) -> String {
    if c.host.contains(':') && !c.host.starts_with('[') {
        format!("[{}]:{}", c.host, c.port)
    } else {
        format!("{}:{}", c.host, c.port)
    }
}

impl WireTransport {
    /// A transport over an existing pool (shared with the engine's fetchers, say).
    pub fn new(pool: Arc<ConnectionPool>) -> Self {
        WireTransport {
            pool,
            heartbeat: tokio::sync::Mutex::new(None),
            membership: tokio::sync::Mutex::new(None),
            isolation: IsolationLevel::default(),
            refused: std::sync::Mutex::new(None),
        }
    }

    /// A call's outcome for the member. A broker that serves no version of the API we speak
    /// (at connect, where every connection checks the APIs all commands need, or for this
    /// request) has in effect answered `UNSUPPORTED_VERSION`, fatal for every group API
    /// (`codes.rs`): `unsupported` builds that answer and the line is kept for
    /// [`GroupTransport::refused`]. Any other failure is a lost request, retried by the member.
    fn answer<T>(
        &self,
        api: Api,
        result: Result<T, orderly_protocol::Error>,
        unsupported: impl FnOnce() -> T,
    ) -> Result<T, TransportError> {
        match result {
            Ok(v) => Ok(v),
            Err(e @ orderly_protocol::Error::UnsupportedVersion { .. }) => {
                if let Ok(mut r) = self.refused.lock() {
                    *r = Some(e.to_string());
                }
                Ok(unsupported())
            }
            Err(e) => Err(terr(api, e)),
        }
    }

    /// A transport with its own pool for `bootstrap` ("host:port" list).
    pub fn connect(bootstrap: Vec<String>, config: ConnectionConfig) -> Self {
        Self::new(Arc::new(ConnectionPool::new(bootstrap, config)))
    }

    /// Sets the isolation level used for ListOffsets "latest" (match the engine's fetch setting).
    pub fn with_isolation(mut self, isolation: IsolationLevel) -> Self {
        self.isolation = isolation;
        self
    }

    /// The pool.
    pub fn pool(&self) -> &Arc<ConnectionPool> {
        &self.pool
    }

    async fn coordination(
        &self,
        c: &Coordinator,
    ) -> Result<Arc<BrokerConnection>, orderly_protocol::Error> {
        self.pool.get(&addr(c), ConnectionKind::Coordination).await
    }

    async fn heartbeat_connection(
        &self,
        c: &Coordinator,
    ) -> Result<Arc<BrokerConnection>, orderly_protocol::Error> {
        Self::dedicated(&self.heartbeat, &self.pool, c).await
    }

    /// JoinGroup and SyncGroup wait at the coordinator (a JoinGroup until every member rejoined or
    /// a dead one's session expired, seconds), and a broker answers a connection's requests one
    /// at a time: on the shared coordination connection they would hold back every OffsetCommit
    /// sent meanwhile, which the coordinator accepts for the current generation while it prepares
    /// the rebalance. So they get a connection of their own, like heartbeats.
    async fn membership_connection(
        &self,
        c: &Coordinator,
    ) -> Result<Arc<BrokerConnection>, orderly_protocol::Error> {
        Self::dedicated(&self.membership, &self.pool, c).await
    }

    async fn dedicated(
        slot: &tokio::sync::Mutex<Option<Arc<BrokerConnection>>>,
        pool: &ConnectionPool,
        c: &Coordinator,
    ) -> Result<Arc<BrokerConnection>, orderly_protocol::Error> {
        let a = addr(c);
        let mut slot = slot.lock().await;
        if let Some(conn) = slot
            .as_ref()
            .filter(|conn| conn.broker() == a && !conn.is_broken())
        {
            return Ok(conn.clone());
        }
        *slot = None;
        let conn = Arc::new(BrokerConnection::connect(&a, pool.config()).await?);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Metadata for `topics`; registers every broker's address with the pool.
    async fn metadata(&self, topics: &[String]) -> Result<MetadataResponse, TransportError> {
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let (_, resp) = self
            .pool
            .metadata(Some(&names))
            .await
            .map_err(|e| terr(Api::Metadata, e))?;
        Ok(resp)
    }
}

impl GroupTransport for WireTransport {
    fn refused(&self) -> Option<String> {
        self.refused.lock().ok().and_then(|r| r.clone())
    }

    async fn find_coordinator(
        &self,
        group_id: &str,
    ) -> Result<FindCoordinatorResponse, TransportError> {
        let api = Api::FindCoordinator;
        let result = async {
            let conn = self.pool.any().await?;
            conn.send(&FindCoordinatorRequest {
                key_type: KEY_TYPE_GROUP,
                keys: vec![group_id.to_owned()],
            })
            .await
        }
        .await;
        let unsupported =
            || orderly_protocol::messages::find_coordinator::FindCoordinatorResponse {
                throttle_time_ms: 0,
                coordinators: vec![orderly_protocol::messages::find_coordinator::Coordinator {
                    error_code: ErrorCode::UNSUPPORTED_VERSION,
                    ..Default::default()
                }],
            };
        let resp = self.answer(api, result, unsupported)?;
        let c = resp
            .coordinators
            .into_iter()
            .next()
            .ok_or_else(|| terr(api, "empty coordinator list"))?;
        if c.error_code.0 == 0 {
            self.pool
                .set_broker(c.node_id, format!("{}:{}", c.host, c.port));
        }
        Ok(FindCoordinatorResponse {
            error_code: c.error_code,
            coordinator: Coordinator {
                node_id: c.node_id,
                host: c.host,
                port: c.port,
            },
        })
    }

    async fn join_group(
        &self,
        c: &Coordinator,
        r: JoinGroupRequest,
    ) -> Result<JoinGroupResponse, TransportError> {
        let result = async {
            let conn = self.membership_connection(c).await?;
            conn.join_group(&WireJoin {
                group_id: r.group_id,
                session_timeout_ms: r.session_timeout_ms,
                rebalance_timeout_ms: r.rebalance_timeout_ms,
                member_id: r.member_id,
                group_instance_id: r.instance_id,
                protocol_type: r.protocol_type,
                protocols: r
                    .protocols
                    .into_iter()
                    .map(|(name, metadata)| JoinGroupProtocol { name, metadata })
                    .collect(),
                reason: r.reason,
            })
            .await
        }
        .await;
        let resp = self.answer(Api::JoinGroup, result, || {
            orderly_protocol::messages::join_group::JoinGroupResponse {
                error_code: ErrorCode::UNSUPPORTED_VERSION,
                ..Default::default()
            }
        })?;
        Ok(JoinGroupResponse {
            error_code: resp.error_code,
            generation_id: resp.generation_id,
            protocol_type: resp.protocol_type,
            protocol_name: resp.protocol_name,
            leader: resp.leader,
            skip_assignment: resp.skip_assignment,
            member_id: resp.member_id,
            members: resp
                .members
                .into_iter()
                .map(|m| JoinGroupMember {
                    member_id: m.member_id,
                    instance_id: m.group_instance_id,
                    metadata: m.metadata,
                })
                .collect(),
        })
    }

    async fn sync_group(
        &self,
        c: &Coordinator,
        r: SyncGroupRequest,
    ) -> Result<SyncGroupResponse, TransportError> {
        let result = async {
            let conn = self.membership_connection(c).await?;
            conn.sync_group(&WireSync {
                group_id: r.group_id,
                generation_id: r.generation_id,
                member_id: r.member_id,
                group_instance_id: r.instance_id,
                protocol_type: Some(r.protocol_type),
                protocol_name: Some(r.protocol_name),
                assignments: r
                    .assignments
                    .into_iter()
                    .map(|(member_id, assignment)| SyncGroupAssignment {
                        member_id,
                        assignment,
                    })
                    .collect(),
            })
            .await
        }
        .await;
        let resp = self.answer(Api::SyncGroup, result, || {
            orderly_protocol::messages::sync_group::SyncGroupResponse {
                error_code: ErrorCode::UNSUPPORTED_VERSION,
                ..Default::default()
            }
        })?;
        Ok(SyncGroupResponse {
            error_code: resp.error_code,
            protocol_name: resp.protocol_name,
            assignment: resp.assignment,
        })
    }

    async fn heartbeat(
        &self,
        c: &Coordinator,
        r: HeartbeatRequest,
    ) -> Result<ErrorCode, TransportError> {
        let result = async {
            let conn = self.heartbeat_connection(c).await?;
            let resp = conn
                .heartbeat(&WireHeartbeat {
                    group_id: r.group_id,
                    generation_id: r.generation_id,
                    member_id: r.member_id,
                    group_instance_id: r.instance_id,
                })
                .await?;
            Ok(resp.error_code)
        }
        .await;
        self.answer(Api::Heartbeat, result, || ErrorCode::UNSUPPORTED_VERSION)
    }

    async fn leave_group(
        &self,
        c: &Coordinator,
        r: LeaveGroupRequest,
    ) -> Result<ErrorCode, TransportError> {
        let result = async {
            let conn = self.coordination(c).await?;
            conn.leave_group(&WireLeave {
                group_id: r.group_id,
                members: vec![LeavingMember {
                    member_id: r.member_id,
                    group_instance_id: r.instance_id,
                    reason: r.reason,
                }],
            })
            .await
        }
        .await;
        let resp = self.answer(Api::LeaveGroup, result, || {
            orderly_protocol::messages::leave_group::LeaveGroupResponse {
                error_code: ErrorCode::UNSUPPORTED_VERSION,
                ..Default::default()
            }
        })?;
        let member = resp
            .members
            .first()
            .map(|m| m.error_code)
            .unwrap_or_default();
        Ok(if resp.error_code.0 != 0 {
            resp.error_code
        } else {
            member
        })
    }

    async fn offset_commit(
        &self,
        c: &Coordinator,
        r: OffsetCommitRequest,
    ) -> Result<Vec<(GroupPartition, ErrorCode)>, TransportError> {
        let mut topics: BTreeMap<String, Vec<OffsetCommitPartition>> = BTreeMap::new();
        for o in r.offsets {
            topics
                .entry(o.partition.topic)
                .or_default()
                .push(OffsetCommitPartition {
                    partition_index: o.partition.partition,
                    committed_offset: o.offset,
                    committed_leader_epoch: o.leader_epoch.unwrap_or(-1),
                    committed_metadata: o.metadata,
                });
        }
        let request = WireCommit {
            group_id: r.group_id,
            generation_id_or_member_epoch: r.generation_id,
            member_id: r.member_id,
            group_instance_id: r.instance_id,
            topics: topics
                .into_iter()
                .map(|(name, partitions)| OffsetCommitTopic { name, partitions })
                .collect(),
        };
        let result = async {
            let conn = self.coordination(c).await?;
            conn.offset_commit(&request).await
        }
        .await;
        let resp = self.answer(Api::OffsetCommit, result, || {
            use orderly_protocol::messages::offset_commit::{
                OffsetCommitPartitionResult, OffsetCommitResponse, OffsetCommitTopicResult,
            };
            OffsetCommitResponse {
                throttle_time_ms: 0,
                topics: request
                    .topics
                    .iter()
                    .map(|t| OffsetCommitTopicResult {
                        name: t.name.clone(),
                        partitions: t
                            .partitions
                            .iter()
                            .map(|p| OffsetCommitPartitionResult {
                                partition_index: p.partition_index,
                                error_code: ErrorCode::UNSUPPORTED_VERSION,
                            })
                            .collect(),
                    })
                    .collect(),
            }
        })?;
        Ok(resp
            .topics
            .into_iter()
            .flat_map(|t| {
                let name = t.name;
                t.partitions.into_iter().map(move |p| {
                    (
                        GroupPartition::new(name.clone(), p.partition_index),
                        p.error_code,
                    )
                })
            })
            .collect())
    }

    async fn offset_fetch(
        &self,
        c: &Coordinator,
        group_id: &str,
        partitions: &[GroupPartition],
    ) -> Result<OffsetFetchResponse, TransportError> {
        let set: PartitionSet = partitions.iter().cloned().collect();
        let topics = by_topic(&set)
            .into_iter()
            .map(|(name, partition_indexes)| OffsetFetchTopic {
                name,
                partition_indexes,
            })
            .collect();
        let result = async {
            let conn = self.coordination(c).await?;
            conn.offset_fetch(&OffsetFetchRequest {
                groups: vec![OffsetFetchGroup {
                    group_id: group_id.to_owned(),
                    member_id: None,
                    member_epoch: -1,
                    topics: Some(topics),
                }],
                require_stable: true,
            })
            .await
        }
        .await;
        let resp = self.answer(Api::OffsetFetch, result, || {
            use orderly_protocol::messages::offset_fetch::{
                OffsetFetchGroupResult, OffsetFetchResponse,
            };
            OffsetFetchResponse {
                throttle_time_ms: 0,
                groups: vec![OffsetFetchGroupResult {
                    error_code: ErrorCode::UNSUPPORTED_VERSION,
                    ..Default::default()
                }],
            }
        })?;
        let g = resp
            .groups
            .into_iter()
            .next()
            .ok_or_else(|| terr(Api::OffsetFetch, "no group in response"))?;
        let mut out = OffsetFetchResponse {
            error_code: g.error_code,
            partitions: BTreeMap::new(),
        };
        for t in g.topics {
            for p in t.partitions {
                out.partitions.insert(
                    GroupPartition::new(t.name.clone(), p.partition_index),
                    FetchedOffset {
                        offset: p.committed_offset,
                        leader_epoch: p.committed_leader_epoch,
                        metadata: p.metadata,
                        error_code: p.error_code,
                    },
                );
            }
        }
        Ok(out)
    }

    async fn list_offsets(
        &self,
        partitions: &[GroupPartition],
        spec: OffsetSpec,
    ) -> Result<BTreeMap<GroupPartition, Result<i64, ErrorCode>>, TransportError> {
        let topics: Vec<String> = partitions
            .iter()
            .map(|tp| tp.topic.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let md = self.metadata(&topics).await?;
        let mut leaders: BTreeMap<(String, i32), i32> = BTreeMap::new();
        for t in &md.topics {
            for p in &t.partitions {
                leaders.insert(
                    (t.name.clone().unwrap_or_default(), p.partition_index),
                    p.leader_id,
                );
            }
        }
        let mut out = BTreeMap::new();
        let mut by_leader: BTreeMap<i32, Vec<GroupPartition>> = BTreeMap::new();
        for tp in partitions {
            match leaders.get(&(tp.topic.clone(), tp.partition)) {
                Some(l) if *l >= 0 => by_leader.entry(*l).or_default().push(tp.clone()),
                _ => {
                    out.insert(tp.clone(), Err(ErrorCode::NOT_LEADER_OR_FOLLOWER));
                }
            }
        }
        let timestamp = match spec {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
        };
        for (leader, tps) in by_leader {
            let set: PartitionSet = tps.iter().cloned().collect();
            let request = ListOffsetsRequest {
                replica_id: -1,
                isolation_level: self.isolation.as_i8(),
                topics: by_topic(&set)
                    .into_iter()
                    .map(|(name, ps)| ListOffsetsTopic {
                        name,
                        partitions: ps
                            .into_iter()
                            .map(|p| ListOffsetsPartition {
                                partition_index: p,
                                current_leader_epoch: -1,
                                timestamp,
                            })
                            .collect(),
                    })
                    .collect(),
                timeout_ms: 10_000,
            };
            let conn = match self.pool.broker(leader, ConnectionKind::Coordination).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(leader, error = %e, "ListOffsets: leader unreachable");
                    for tp in tps {
                        out.insert(tp, Err(ErrorCode::NOT_LEADER_OR_FOLLOWER));
                    }
                    continue;
                }
            };
            let resp = conn
                .send(&request)
                .await
                .map_err(|e| terr(Api::ListOffsets, e))?;
            for t in resp.topics {
                for p in t.partitions {
                    let tp = GroupPartition::new(t.name.clone(), p.partition_index);
                    let r = if p.error_code.0 == 0 {
                        Ok(p.offset)
                    } else {
                        Err(p.error_code)
                    };
                    out.insert(tp, r);
                }
            }
        }
        Ok(out)
    }

    async fn partition_counts(
        &self,
        topics: &[String],
    ) -> Result<BTreeMap<String, i32>, TransportError> {
        let md = self.metadata(topics).await?;
        Ok(md
            .topics
            .into_iter()
            .filter(|t| t.error_code.0 == 0)
            .filter_map(|t| t.name.map(|n| (n, t.partitions.len() as i32)))
            .collect())
    }

    async fn consumer_group_heartbeat(
        &self,
        c: &Coordinator,
        r: ConsumerHeartbeatRequest,
    ) -> Result<ConsumerHeartbeatResponse, TransportError> {
        let api = Api::ConsumerGroupHeartbeat;
        let conn = match self.heartbeat_connection(c).await {
            Ok(conn) => conn,
            Err(e) => {
                return self.answer(api, Err(e), || ConsumerHeartbeatResponse {
                    error_code: ErrorCode::UNSUPPORTED_VERSION,
                    ..ConsumerHeartbeatResponse::default()
                });
            }
        };
        let to_wire = |v: Vec<(TopicId, Vec<i32>)>| {
            v.into_iter()
                .map(|(topic_id, partitions)| TopicIdPartitions {
                    topic_id,
                    partitions,
                })
                .collect()
        };
        let result = conn
            .consumer_group_heartbeat(&ConsumerGroupHeartbeatRequest {
                group_id: r.group_id,
                member_id: r.member_id,
                member_epoch: r.member_epoch,
                instance_id: r.instance_id,
                rack_id: r.rack_id,
                rebalance_timeout_ms: r.rebalance_timeout_ms,
                subscribed_topic_names: r.subscribed_topic_names,
                subscribed_topic_regex: r.subscribed_topic_regex,
                server_assignor: r.server_assignor,
                topic_partitions: r.owned.map(to_wire),
            })
            .await;
        let resp = match result {
            Ok(resp) => resp,
            // The broker does not serve the API at all: an answer, not a lost request.
            Err(e) => {
                return self.answer(api, Err(e), || ConsumerHeartbeatResponse {
                    error_code: ErrorCode::UNSUPPORTED_VERSION,
                    ..ConsumerHeartbeatResponse::default()
                });
            }
        };
        Ok(ConsumerHeartbeatResponse {
            error_code: resp.error_code,
            error_message: resp.error_message,
            member_epoch: resp.member_epoch,
            heartbeat_interval_ms: resp.heartbeat_interval_ms,
            assignment: resp
                .assignment
                .map(|a| a.into_iter().map(|t| (t.topic_id, t.partitions)).collect()),
        })
    }

    async fn describe_configs(
        &self,
        c: &Coordinator,
        resource: ConfigResource,
        keys: &[&str],
    ) -> Result<DescribedConfigs, TransportError> {
        let (resource_type, resource_name) = match resource {
            ConfigResource::Group(g) => (RESOURCE_GROUP, g),
            ConfigResource::Broker(id) => (RESOURCE_BROKER, id.to_string()),
        };
        let request = DescribeConfigsRequest {
            resources: vec![DescribeConfigsResource {
                resource_type,
                resource_name: resource_name.clone(),
                configuration_keys: Some(keys.iter().map(|k| (*k).to_owned()).collect()),
            }],
            include_synonyms: false,
            include_documentation: false,
        };
        let result = async {
            let conn = self.coordination(c).await?;
            conn.send(&request).await
        }
        .await;
        // Not `answer`: a broker without DescribeConfigs only costs the member its fallback, and
        // its line must not stand in for a group API's refusal in `refused`.
        let resp = match result {
            Ok(resp) => resp,
            Err(orderly_protocol::Error::UnsupportedVersion { .. }) => {
                return Ok(DescribedConfigs {
                    error_code: ErrorCode::UNSUPPORTED_VERSION,
                    values: BTreeMap::new(),
                });
            }
            Err(e) => return Err(terr(Api::DescribeConfigs, e)),
        };
        let mut out = DescribedConfigs::default();
        for key in keys {
            match resp.value(resource_type, &resource_name, key) {
                Ok(Some(v)) => {
                    out.values.insert((*key).to_owned(), v.to_owned());
                }
                Ok(None) => {}
                Err(code) => {
                    out.error_code = code;
                    out.values.clear();
                    break;
                }
            }
        }
        Ok(out)
    }

    async fn topic_ids(
        &self,
        topics: Option<&[String]>,
    ) -> Result<BTreeMap<String, TopicId>, TransportError> {
        let md = match topics {
            Some(t) => self.metadata(t).await?,
            None => {
                self.pool
                    .metadata(None)
                    .await
                    .map_err(|e| terr(Api::Metadata, e))?
                    .1
            }
        };
        Ok(md
            .topics
            .into_iter()
            .filter(|t| t.error_code.0 == 0 && t.topic_id != [0; 16])
            .filter_map(|t| t.name.map(|n| (n, t.topic_id)))
            .collect())
    }
}
