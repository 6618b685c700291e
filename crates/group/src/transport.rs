//! The [`GroupTransport`] trait: the group APIs the member needs, as plain Rust requests/responses.
//!
//! The member state machine talks only to this trait, so it can be driven by a scripted fake
//! coordinator in tests (`testing`, feature `test-util`) and by the real wire layer ([`crate::wire`]).
//!
//! # API Boundary
//!
//! Responses carry raw error codes; the transport does **not** interpret group errors (that is
//! [`crate::codes::action`]'s job). A [`TransportError`] means the request's fate is unknown
//! (connection lost, timeout, undecodable response): the member treats it like a coordinator
//! change and retries.
//!
//! Implementations must send [`GroupTransport::heartbeat`] on a connection of its own, so that a
//! heartbeat is never queued behind a long JoinGroup or a slow OffsetCommit.

use std::collections::BTreeMap;
use std::future::Future;

use bytes::Bytes;

use crate::codes::ErrorCode;
use crate::types::{CommitOffset, GroupPartition};

/// A failure below the group protocol: the request's outcome is unknown.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{api}: {message}")]
pub struct TransportError {
    /// The request that failed.
    pub api: crate::codes::Api,
    /// What happened.
    pub message: String,
}

/// The coordinator broker of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordinator {
    /// Broker node id.
    pub node_id: i32,
    /// Host to connect to.
    pub host: String,
    /// Port.
    pub port: i32,
}

/// FindCoordinator result for one group.
#[derive(Debug, Clone)]
pub struct FindCoordinatorResponse {
    /// Error for the group key.
    pub error_code: ErrorCode,
    /// The coordinator (meaningful when `error_code` is NONE).
    pub coordinator: Coordinator,
}

/// JoinGroup request (v9 field set).
#[derive(Debug, Clone)]
pub struct JoinGroupRequest {
    /// Group id.
    pub group_id: String,
    /// Session timeout in ms.
    pub session_timeout_ms: i32,
    /// Rebalance timeout in ms.
    pub rebalance_timeout_ms: i32,
    /// Member id ("" on the first join).
    pub member_id: String,
    /// `group.instance.id`.
    pub instance_id: Option<String>,
    /// Protocol type, always "consumer".
    pub protocol_type: String,
    /// (assignor name, ConsumerProtocolSubscription bytes), in preference order.
    pub protocols: Vec<(String, Bytes)>,
    /// Why this member (re)joins.
    pub reason: Option<String>,
}

/// A member as the leader sees it in the JoinGroup response.
#[derive(Debug, Clone)]
pub struct JoinGroupMember {
    /// Member id.
    pub member_id: String,
    /// Its `group.instance.id`.
    pub instance_id: Option<String>,
    /// Its subscription for the selected protocol.
    pub metadata: Bytes,
}

/// JoinGroup response.
#[derive(Debug, Clone, Default)]
pub struct JoinGroupResponse {
    /// Error code.
    pub error_code: ErrorCode,
    /// New generation.
    pub generation_id: i32,
    /// Protocol type ("consumer"), if the version carries it.
    pub protocol_type: Option<String>,
    /// Selected assignor.
    pub protocol_name: Option<String>,
    /// Leader member id.
    pub leader: String,
    /// KIP-814: the (static) leader must not assign.
    pub skip_assignment: bool,
    /// This member's id (also set with MEMBER_ID_REQUIRED).
    pub member_id: String,
    /// All members (leader only).
    pub members: Vec<JoinGroupMember>,
}

/// SyncGroup request (v5 field set).
#[derive(Debug, Clone)]
pub struct SyncGroupRequest {
    /// Group id.
    pub group_id: String,
    /// Generation.
    pub generation_id: i32,
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub instance_id: Option<String>,
    /// "consumer".
    pub protocol_type: String,
    /// Selected assignor.
    pub protocol_name: String,
    /// Leader: (member id, ConsumerProtocolAssignment bytes) for every member; followers: empty.
    pub assignments: Vec<(String, Bytes)>,
}

/// SyncGroup response.
#[derive(Debug, Clone, Default)]
pub struct SyncGroupResponse {
    /// Error code.
    pub error_code: ErrorCode,
    /// Protocol name echoed (v5+).
    pub protocol_name: Option<String>,
    /// This member's ConsumerProtocolAssignment bytes.
    pub assignment: Bytes,
}

/// Heartbeat request.
#[derive(Debug, Clone)]
pub struct HeartbeatRequest {
    /// Group id.
    pub group_id: String,
    /// Generation.
    pub generation_id: i32,
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub instance_id: Option<String>,
}

/// LeaveGroup request (one member, v3+ batch form).
#[derive(Debug, Clone)]
pub struct LeaveGroupRequest {
    /// Group id.
    pub group_id: String,
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub instance_id: Option<String>,
    /// Why.
    pub reason: Option<String>,
}

/// OffsetCommit request.
#[derive(Debug, Clone)]
pub struct OffsetCommitRequest {
    /// Group id.
    pub group_id: String,
    /// Generation (-1 for a simple commit outside the group).
    pub generation_id: i32,
    /// Member id.
    pub member_id: String,
    /// `group.instance.id`.
    pub instance_id: Option<String>,
    /// The offsets.
    pub offsets: Vec<CommitOffset>,
}

/// One partition's committed offset as OffsetFetch returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedOffset {
    /// Committed offset, -1 if none.
    pub offset: i64,
    /// Leader epoch, -1 if unknown.
    pub leader_epoch: i32,
    /// Metadata string.
    pub metadata: Option<String>,
    /// Per-partition error.
    pub error_code: ErrorCode,
}

/// OffsetFetch response for one group.
#[derive(Debug, Clone, Default)]
pub struct OffsetFetchResponse {
    /// Group-level error.
    pub error_code: ErrorCode,
    /// Per partition.
    pub partitions: BTreeMap<GroupPartition, FetchedOffset>,
}

/// Which offset ListOffsets should return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// Log start (timestamp -2).
    Earliest,
    /// Log end / LSO (timestamp -1).
    Latest,
}

/// A Kafka topic id (UUID, 16 raw bytes; all zero = none).
pub type TopicId = [u8; 16];

/// ConsumerGroupHeartbeat request (KIP-848, v1 field set). `None` = unchanged since the last one.
#[derive(Debug, Clone, Default)]
pub struct ConsumerHeartbeatRequest {
    /// Group id.
    pub group_id: String,
    /// Member id, generated by the client and kept across rejoins.
    pub member_id: String,
    /// 0 = join, -1 = leave, -2 = static member leaving temporarily, else the current epoch.
    pub member_epoch: i32,
    /// `group.instance.id`.
    pub instance_id: Option<String>,
    /// `client.rack`.
    pub rack_id: Option<String>,
    /// Rebalance timeout in ms, -1 = unchanged.
    pub rebalance_timeout_ms: i32,
    /// Subscribed topic names.
    pub subscribed_topic_names: Option<Vec<String>>,
    /// Subscribed topic regex (RE2/J).
    pub subscribed_topic_regex: Option<String>,
    /// Server-side assignor name.
    pub server_assignor: Option<String>,
    /// The partitions the member owns now, by topic id (empty when joining).
    pub owned: Option<Vec<(TopicId, Vec<i32>)>>,
}

/// ConsumerGroupHeartbeat response.
#[derive(Debug, Clone, Default)]
pub struct ConsumerHeartbeatResponse {
    /// Error code.
    pub error_code: ErrorCode,
    /// The broker's message for it.
    pub error_message: Option<String>,
    /// The member epoch now.
    pub member_epoch: i32,
    /// When to send the next heartbeat.
    pub heartbeat_interval_ms: i32,
    /// The member's full assignment by topic id; `None` = unchanged.
    pub assignment: Option<Vec<(TopicId, Vec<i32>)>>,
}

/// A resource whose configuration [`GroupTransport::describe_configs`] reads.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigResource {
    /// A consumer group: its own settings, or the broker's `group.*` defaults where it has none
    /// (brokers that keep group configs: Kafka 4.0 and later).
    Group(String),
    /// A broker, by node id (only that broker answers for it).
    Broker(i32),
}

/// What DescribeConfigs said about one resource.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribedConfigs {
    /// The resource's error (`UNSUPPORTED_VERSION` when the broker serves no DescribeConfigs
    /// version we speak; a broker without group configs refuses a group resource).
    pub error_code: ErrorCode,
    /// The value of each key asked for that the broker knows and shows.
    pub values: BTreeMap<String, String>,
}

/// The group APIs the member uses. See the module docs for the contract.
///
/// All futures must be `Send`; implementations are shared (`Arc`) between the member task, the
/// heartbeat task and commit tasks, so methods take `&self`.
pub trait GroupTransport: Send + Sync + 'static {
    /// FindCoordinator (key type group) on any broker.
    fn find_coordinator(
        &self,
        group_id: &str,
    ) -> impl Future<Output = Result<FindCoordinatorResponse, TransportError>> + Send;

    /// JoinGroup. May take up to the rebalance timeout; the member applies its own deadline.
    fn join_group(
        &self,
        coordinator: &Coordinator,
        request: JoinGroupRequest,
    ) -> impl Future<Output = Result<JoinGroupResponse, TransportError>> + Send;

    /// SyncGroup.
    fn sync_group(
        &self,
        coordinator: &Coordinator,
        request: SyncGroupRequest,
    ) -> impl Future<Output = Result<SyncGroupResponse, TransportError>> + Send;

    /// Heartbeat, on a connection of its own.
    fn heartbeat(
        &self,
        coordinator: &Coordinator,
        request: HeartbeatRequest,
    ) -> impl Future<Output = Result<ErrorCode, TransportError>> + Send;

    /// LeaveGroup; returns the member's error (or the top-level one).
    fn leave_group(
        &self,
        coordinator: &Coordinator,
        request: LeaveGroupRequest,
    ) -> impl Future<Output = Result<ErrorCode, TransportError>> + Send;

    /// OffsetCommit; returns each partition's error code.
    fn offset_commit(
        &self,
        coordinator: &Coordinator,
        request: OffsetCommitRequest,
    ) -> impl Future<Output = Result<Vec<(GroupPartition, ErrorCode)>, TransportError>> + Send;

    /// OffsetFetch for `partitions` (RequireStable = true).
    fn offset_fetch(
        &self,
        coordinator: &Coordinator,
        group_id: &str,
        partitions: &[GroupPartition],
    ) -> impl Future<Output = Result<OffsetFetchResponse, TransportError>> + Send;

    /// ListOffsets at each partition's leader; per partition the offset or an error code.
    fn list_offsets(
        &self,
        partitions: &[GroupPartition],
        spec: OffsetSpec,
    ) -> impl Future<
        Output = Result<BTreeMap<GroupPartition, Result<i64, ErrorCode>>, TransportError>,
    > + Send;

    /// Partition counts of the given topics (topics that do not exist are left out).
    fn partition_counts(
        &self,
        topics: &[String],
    ) -> impl Future<Output = Result<BTreeMap<String, i32>, TransportError>> + Send;

    /// Why the last request that came back `UNSUPPORTED_VERSION` did (the broker serves no
    /// version of the API that we speak): one line for the member's fatal error. The default
    /// knows nothing more than the code.
    fn refused(&self) -> Option<String> {
        None
    }

    /// ConsumerGroupHeartbeat (KIP-848), on the heartbeat connection. A broker without the API
    /// answers with `UNSUPPORTED_VERSION` in the response. Only the consumer-protocol member calls
    /// it; the default fails, so a transport written for the classic member still compiles.
    fn consumer_group_heartbeat(
        &self,
        coordinator: &Coordinator,
        request: ConsumerHeartbeatRequest,
    ) -> impl Future<Output = Result<ConsumerHeartbeatResponse, TransportError>> + Send {
        let _ = (coordinator, request);
        async {
            Err(TransportError {
                api: crate::codes::Api::ConsumerGroupHeartbeat,
                message: "this transport does not implement ConsumerGroupHeartbeat".into(),
            })
        }
    }

    /// DescribeConfigs of `keys` of one `resource`, at the coordinator. Only the consumer-protocol
    /// member calls it (once per coordinator, for the session timeout the broker enforces); the
    /// default fails, and the member then keeps the client's session timeout.
    fn describe_configs(
        &self,
        coordinator: &Coordinator,
        resource: ConfigResource,
        keys: &[&str],
    ) -> impl Future<Output = Result<DescribedConfigs, TransportError>> + Send {
        let _ = (coordinator, resource, keys);
        async {
            Err(TransportError {
                api: crate::codes::Api::DescribeConfigs,
                message: "this transport does not implement DescribeConfigs".into(),
            })
        }
    }

    /// Topic ids by name (Metadata): of `topics`, or of every topic when `None` (needed to resolve
    /// a regex subscription's assignment). Topics that do not exist are left out. Only the
    /// consumer-protocol member calls it; the default fails.
    fn topic_ids(
        &self,
        topics: Option<&[String]>,
    ) -> impl Future<Output = Result<BTreeMap<String, TopicId>, TransportError>> + Send {
        let _ = topics;
        async {
            Err(TransportError {
                api: crate::codes::Api::Metadata,
                message: "this transport does not implement topic id lookups".into(),
            })
        }
    }
}
