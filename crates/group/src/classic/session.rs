//! The member's loop: one session after another (rebalance, then the stable period), what the
//! heartbeat task reports, and the leader's watch over partition counts.

use crate::codes::{Api, ErrorCode};
use crate::error::GroupError;
use crate::heartbeat::{Heartbeat, HeartbeatEvent};
use crate::listener::{AssignedPartition, LostReason, RebalanceEvent};
use crate::offsets;
use crate::shared::Trigger;
use crate::transport::GroupTransport;
use crate::types::{Generation, PartitionSet, StartPosition};

use super::member::{ClassicMember, Joined, Next};

impl<T: GroupTransport> ClassicMember<T> {
    pub(crate) async fn run(mut self) -> Result<(), GroupError> {
        let mut reason = String::from("initial join");
        let result = loop {
            let next = self.session(&reason).await;
            match next {
                Next::Rejoin(why) => reason = why,
                Next::Lost(why, code) => {
                    self.shared.end_lease();
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
                    self.shared.end_lease();
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
}

/// Next event from the heartbeat task; pending forever when none runs.
async fn next_heartbeat_event(hb: &mut Option<Heartbeat>) -> Option<HeartbeatEvent> {
    match hb {
        Some(hb) => hb.events.recv().await,
        None => std::future::pending().await,
    }
}
