//! The classic member's state (`ClassicMember`) and what its phases return (`Next`, `Joined`),
//! shared by the join, session and release code.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::assignor::RebalanceProtocol;
use crate::codes::ErrorCode;
use crate::config::GroupConfig;
use crate::error::GroupError;
use crate::heartbeat::Heartbeat;
use crate::listener::{EventSender, LostReason};
use crate::shared::{Shared, Trigger};
use crate::shutdown::Shutdown;
use crate::transport::GroupTransport;
use crate::types::PartitionSet;

/// Why a stable session ended.
pub(super) enum Next {
    Rejoin(String),
    Lost(LostReason, ErrorCode),
    Fatal(GroupError),
    Shutdown,
}

/// Result of join + sync.
pub(super) enum Joined {
    Ok { assignment: PartitionSet },
    Next(Next),
}

pub(crate) struct ClassicMember<T: GroupTransport> {
    pub(super) shared: Arc<Shared<T>>,
    pub(super) events: EventSender,
    pub(super) triggers: mpsc::UnboundedReceiver<Trigger>,
    pub(super) shutdown: Shutdown,
    /// What the engine was told it owns.
    pub(super) owned: PartitionSet,
    pub(super) heartbeat: Option<Heartbeat>,
    /// Leader only: partition count of every topic the group subscribes to, as the last plan saw
    /// it; 0 for a topic the metadata did not have (not created yet, or created a moment ago and
    /// not yet published by the broker: KRaft answers CreateTopics before its metadata shows the
    /// topic). While any count is 0 the leader re-checks with the retry backoff instead of every
    /// `metadata_refresh`, and rebalances once the topic appears.
    pub(super) partition_snapshot: BTreeMap<String, i32>,
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

    pub(super) fn cfg(&self) -> &GroupConfig {
        &self.shared.config
    }

    pub(super) fn cooperative(&self) -> bool {
        self.cfg().rebalance_protocol() == RebalanceProtocol::Cooperative
    }

    pub(super) fn set_owned(&mut self, owned: PartitionSet) {
        self.shared.set_owned(owned.clone());
        self.owned = owned;
    }

    pub(super) async fn stop_heartbeat(&mut self) {
        if let Some(hb) = self.heartbeat.take() {
            hb.stop().await;
        }
    }

    pub(super) fn fenced(&self) -> GroupError {
        let g = self.shared.generation();
        GroupError::FencedInstance {
            group: self.shared.group().to_owned(),
            instance_id: self.cfg().instance_id.clone().unwrap_or_default(),
            member_id: g.member_id,
            generation: g.generation_id,
        }
    }
}
