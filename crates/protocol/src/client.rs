//! The typed client API on a [`BrokerConnection`]: one method per Kafka API orderly uses.
//!
//! Group methods return the broker's response *including* its error codes (the group state machine
//! must see MEMBER_ID_REQUIRED's member id, REBALANCE_IN_PROGRESS, per-partition commit errors...).
//! `Err` means the request did not complete (transport, timeout, version, decode). Use
//! [`BrokerConnection::kafka_error`] to turn a code into a typed [`Error`] with context.

use std::time::Duration;

use crate::connection::BrokerConnection;
use crate::error::{Context, Error, ErrorCode, Result};
use crate::messages::consumer_group_heartbeat::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse,
};
use crate::messages::find_coordinator::{
    Coordinator, FindCoordinatorRequest, KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION,
};
use crate::messages::heartbeat::{HeartbeatRequest, HeartbeatResponse};
use crate::messages::join_group::{JoinGroupRequest, JoinGroupResponse};
use crate::messages::leave_group::{LeaveGroupRequest, LeaveGroupResponse};
use crate::messages::offset_commit::{OffsetCommitRequest, OffsetCommitResponse};
use crate::messages::offset_fetch::{OffsetFetchRequest, OffsetFetchResponse};
use crate::messages::sync_group::{SyncGroupRequest, SyncGroupResponse};

/// Java's `JOIN_GROUP_TIMEOUT_LAPSE`: a JoinGroup may be held for the rebalance timeout plus this.
const JOIN_GROUP_LAPSE: Duration = Duration::from_secs(5);

impl Coordinator {
    /// "host:port" of the coordinator.
    pub fn addr(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl BrokerConnection {
    /// A typed [`Error::Kafka`] for `code` from this broker.
    pub fn kafka_error(
        &self,
        api: &'static str,
        code: ErrorCode,
        context: Context,
        message: Option<String>,
    ) -> Error {
        Error::Kafka {
            broker: self.broker().to_string(),
            api,
            code,
            context,
            message,
        }
    }

    /// FindCoordinator for a consumer group. A Kafka error code becomes `Err` (retriable for
    /// COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS).
    pub async fn find_coordinator(&self, group_id: &str) -> Result<Coordinator> {
        self.find_coordinator_of(KEY_TYPE_GROUP, group_id).await
    }

    /// FindCoordinator for a transactional id: the broker whose transaction coordinator owns it.
    /// Errors as for [`find_coordinator`](Self::find_coordinator).
    pub async fn find_transaction_coordinator(
        &self,
        transactional_id: &str,
    ) -> Result<Coordinator> {
        self.find_coordinator_of(KEY_TYPE_TRANSACTION, transactional_id)
            .await
    }

    async fn find_coordinator_of(&self, key_type: i8, key: &str) -> Result<Coordinator> {
        let resp = self
            .send(&FindCoordinatorRequest {
                key_type,
                keys: vec![key.to_string()],
            })
            .await?;
        let c = resp.coordinators.into_iter().next().ok_or_else(|| {
            self.kafka_error(
                "FindCoordinator",
                ErrorCode::COORDINATOR_NOT_AVAILABLE,
                Context::default(),
                Some("empty coordinator list".to_string()),
            )
        })?;
        if c.error_code != ErrorCode::NONE {
            return Err(self.kafka_error(
                "FindCoordinator",
                c.error_code,
                Context::default(),
                c.error_message,
            ));
        }
        Ok(c)
    }

    /// [`find_coordinator`](Self::find_coordinator), retried while the broker answers with a
    /// retriable code (a cluster that has just started answers COORDINATOR_NOT_AVAILABLE until
    /// `__consumer_offsets` exists) for at most `within`; the last error after that. Any other
    /// error returns at once.
    pub async fn find_coordinator_within(
        &self,
        group_id: &str,
        within: Duration,
    ) -> Result<Coordinator> {
        let deadline = tokio::time::Instant::now() + within;
        let mut pause = Duration::from_millis(50);
        loop {
            match self.find_coordinator(group_id).await {
                Err(Error::Kafka { code, .. })
                    if code.is_retriable() && tokio::time::Instant::now() + pause < deadline =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                other => return other,
            }
        }
    }

    /// JoinGroup; the request may be held by the broker for up to the rebalance timeout, so the
    /// client-side limit is `request_timeout + rebalance_timeout + 5 s`.
    pub async fn join_group(&self, req: &JoinGroupRequest) -> Result<JoinGroupResponse> {
        let rebalance = Duration::from_millis(u64::try_from(req.rebalance_timeout_ms).unwrap_or(0));
        self.send_with_extra_timeout(req, rebalance + JOIN_GROUP_LAPSE)
            .await
    }

    /// SyncGroup (held until the leader's SyncGroup arrives; bounded by the request timeout).
    pub async fn sync_group(&self, req: &SyncGroupRequest) -> Result<SyncGroupResponse> {
        self.send(req).await
    }

    /// Heartbeat (classic protocol).
    pub async fn heartbeat(&self, req: &HeartbeatRequest) -> Result<HeartbeatResponse> {
        self.send(req).await
    }

    /// LeaveGroup.
    pub async fn leave_group(&self, req: &LeaveGroupRequest) -> Result<LeaveGroupResponse> {
        self.send(req).await
    }

    /// OffsetCommit; per-partition errors are in the response ([`OffsetCommitResponse::first_error`]).
    pub async fn offset_commit(&self, req: &OffsetCommitRequest) -> Result<OffsetCommitResponse> {
        self.send(req).await
    }

    /// OffsetFetch (committed offsets; -1 = none).
    pub async fn offset_fetch(&self, req: &OffsetFetchRequest) -> Result<OffsetFetchResponse> {
        self.send(req).await
    }

    /// ConsumerGroupHeartbeat (KIP-848). A broker without the API gives [`Error::UnsupportedVersion`];
    /// fall back to the classic protocol then.
    pub async fn consumer_group_heartbeat(
        &self,
        req: &ConsumerGroupHeartbeatRequest,
    ) -> Result<ConsumerGroupHeartbeatResponse> {
        self.send(req).await
    }
}
