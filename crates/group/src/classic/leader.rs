//! The leader's part of a rebalance: decode the members' subscriptions, look up partition counts,
//! run the selected assignor and remember the counts the plan saw.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::assignor::{
    self, MemberSubscription, RebalanceProtocol, adjust_cooperative, validate_plan,
};
use crate::error::GroupError;
use crate::payload::{Assignment, Subscription};
use crate::transport::{GroupTransport, JoinGroupResponse};

use super::member::ClassicMember;

impl<T: GroupTransport> ClassicMember<T> {
    /// Leader: decode subscriptions, look up partition counts, run the selected assignor.
    pub(super) async fn assign(
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
