//! Giving partitions back: revoke (the engine drains and commits), lose (no commit allowed) and
//! the graceful close (revoke everything, stop heartbeats, LeaveGroup).

use crate::codes::{Action, Api, action};
use crate::listener::{LostReason, RebalanceEvent};
use crate::transport::{GroupTransport, LeaveGroupRequest};
use crate::types::{Generation, PartitionSet};

use super::member::ClassicMember;

impl<T: GroupTransport> ClassicMember<T> {
    /// Tells the engine its partitions are lost (no commit allowed) and forgets them.
    pub(super) async fn lose(&mut self, reason: LostReason) {
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

    pub(super) async fn revoke(&mut self, partitions: PartitionSet) {
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
    pub(super) async fn close(&mut self) {
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
}
