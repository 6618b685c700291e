//! Partition assignors: the [`Assignor`] trait and the three built-ins Java clients know by name.
//!
//! Only the group leader runs an assignor; its output is all that matters. The names are exactly the
//! Java client's protocol names (`range`, `roundrobin`, `cooperative-sticky`), so an orderly member and
//! a Java `KafkaConsumer` listing the same assignor can share a group: the broker selects a protocol
//! every member supports, and whichever member leads computes the plan.
//!
//! # Rebalance protocol of a member
//!
//! Like Java, a member runs the **cooperative** (KIP-429) rebalance protocol only if *every*
//! assignor it lists supports it; otherwise it runs **eager** (revoke everything before rejoining).

mod range;
mod roundrobin;
mod sticky;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use bytes::Bytes;

pub use range::RangeAssignor;
pub use roundrobin::RoundRobinAssignor;
pub use sticky::CooperativeStickyAssignor;

use crate::types::{GroupPartition, PartitionSet};

/// Which rebalance protocol an assignor (or a member) runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RebalanceProtocol {
    /// Revoke all partitions before every rebalance.
    Eager,
    /// KIP-429: revoke only partitions that move, in a second rebalance.
    Cooperative,
}

/// One member's subscription as the leader sees it (decoded from JoinGroup member metadata).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberSubscription {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    /// Topics the member subscribes to.
    pub topics: Vec<String>,
    /// Assignor-specific user data.
    pub user_data: Option<Bytes>,
    /// Partitions the member owns now (Subscription v1+).
    pub owned: Vec<GroupPartition>,
    /// Generation in which it got them (Subscription v2+; -1 if unknown).
    pub generation: i32,
    /// Rack id (Subscription v3+).
    pub rack: Option<String>,
}

/// The plan: member id to the partitions it gets.
pub type GroupAssignment = BTreeMap<String, PartitionSet>;

/// Why an assignor could not produce a plan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AssignorError {
    /// The assignor's own failure, with a message.
    #[error("assignor {assignor} failed: {message}")]
    Failed {
        /// Assignor name.
        assignor: String,
        /// What went wrong.
        message: String,
    },
    /// The plan is not valid (a partition twice, an unknown member or partition).
    #[error("assignor {assignor} produced an invalid plan: {message}")]
    Invalid {
        /// Assignor name.
        assignor: String,
        /// What is wrong with it.
        message: String,
    },
}

/// A partition assignor. Implement it to add your own; register it in
/// [`crate::GroupConfig::assignors`].
///
/// `assign` must be deterministic enough that every partition of every subscribed topic is assigned
/// to exactly one member subscribed to its topic. A cooperative assignor must be *sticky*; the leader
/// additionally applies [`adjust_cooperative`] to its output, so a partition that changes owner is
/// first revoked and only assigned in the next round.
pub trait Assignor: Send + Sync + fmt::Debug {
    /// Protocol name sent in JoinGroup; must match other clients' name for the same algorithm.
    fn name(&self) -> &str;

    /// The most capable rebalance protocol this assignor supports.
    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Eager
    }

    /// User data this member sends in its subscription for this assignor.
    fn user_data(&self, _owned: &PartitionSet, _generation: i32) -> Option<Bytes> {
        None
    }

    /// Computes the plan. `partitions` maps every topic any member subscribes to (and that exists)
    /// to its partition count.
    fn assign(
        &self,
        members: &[MemberSubscription],
        partitions: &BTreeMap<String, i32>,
    ) -> Result<GroupAssignment, AssignorError>;
}

/// Java's member order (`AbstractPartitionAssignor.MemberInfo.compareTo`): static members first,
/// by instance id, then dynamic members by member id.
pub fn sorted_members(members: &[MemberSubscription]) -> Vec<&MemberSubscription> {
    let mut v: Vec<&MemberSubscription> = members.iter().collect();
    v.sort_by(|a, b| match (&a.instance_id, &b.instance_id) {
        (Some(x), Some(y)) => x.cmp(y).then_with(|| a.member_id.cmp(&b.member_id)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.member_id.cmp(&b.member_id),
    });
    v
}

/// An empty plan with one entry per member, so members without partitions still get an assignment.
pub(crate) fn empty_plan(members: &[MemberSubscription]) -> GroupAssignment {
    members
        .iter()
        .map(|m| (m.member_id.clone(), PartitionSet::new()))
        .collect()
}

/// Checks a plan: members exist, partitions exist and are subscribed by their owner, none twice.
/// (Completeness is not required: cooperative plans leave moving partitions unassigned for a round.)
pub fn validate_plan(
    assignor: &str,
    members: &[MemberSubscription],
    partitions: &BTreeMap<String, i32>,
    plan: &GroupAssignment,
) -> Result<(), AssignorError> {
    let invalid = |message: String| AssignorError::Invalid {
        assignor: assignor.to_owned(),
        message,
    };
    let mut seen = BTreeSet::new();
    for (member_id, set) in plan {
        let Some(member) = members.iter().find(|m| &m.member_id == member_id) else {
            return Err(invalid(format!("unknown member {member_id}")));
        };
        for tp in set {
            let count = partitions.get(&tp.topic).copied().unwrap_or(0);
            if tp.partition < 0 || tp.partition >= count {
                return Err(invalid(format!("partition {tp} does not exist")));
            }
            if !member.topics.iter().any(|t| t == &tp.topic) {
                return Err(invalid(format!(
                    "{tp} given to {member_id}, which does not subscribe"
                )));
            }
            if !seen.insert(tp.clone()) {
                return Err(invalid(format!("{tp} assigned twice")));
            }
        }
    }
    Ok(())
}

/// KIP-429 adjustment: a partition whose new owner differs from a current (still valid) owner is
/// removed from the plan for this round, so the old owner revokes it first and the follow-up
/// rebalance hands it out. Claims are validated like Java does: among members claiming the same
/// partition, the highest generation wins; a tie invalidates the claim.
pub fn adjust_cooperative(members: &[MemberSubscription], plan: &mut GroupAssignment) {
    let owners = valid_owners(members);
    for (member_id, set) in plan.iter_mut() {
        set.retain(|tp| match owners.get(tp) {
            Some(owner) => owner == member_id,
            None => true,
        });
    }
}

/// The valid previous owner of each partition: highest generation wins; equal generations
/// conflict and neither keeps the claim.
pub(crate) fn valid_owners(members: &[MemberSubscription]) -> BTreeMap<GroupPartition, String> {
    let mut best: BTreeMap<GroupPartition, (i32, Option<String>)> = BTreeMap::new();
    for m in members {
        for tp in &m.owned {
            match best.get_mut(tp) {
                None => {
                    best.insert(tp.clone(), (m.generation, Some(m.member_id.clone())));
                }
                Some((g, owner)) => {
                    if m.generation > *g {
                        *g = m.generation;
                        *owner = Some(m.member_id.clone());
                    } else if m.generation == *g && owner.as_deref() != Some(m.member_id.as_str()) {
                        *owner = None;
                    }
                }
            }
        }
    }
    best.into_iter()
        .filter_map(|(tp, (_, owner))| owner.map(|o| (tp, o)))
        .collect()
}

/// Finds an assignor by protocol name.
pub fn find<'a>(
    assignors: &'a [std::sync::Arc<dyn Assignor>],
    name: &str,
) -> Option<&'a dyn Assignor> {
    assignors
        .iter()
        .find(|a| a.name() == name)
        .map(|a| a.as_ref())
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Helpers for the assignor property tests.
    use super::*;

    pub fn member(id: &str, topics: &[&str]) -> MemberSubscription {
        MemberSubscription {
            member_id: id.to_owned(),
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            generation: -1,
            ..Default::default()
        }
    }

    /// Asserts every partition of every subscribed topic is assigned exactly once to a subscriber.
    pub fn assert_complete(
        members: &[MemberSubscription],
        partitions: &BTreeMap<String, i32>,
        plan: &GroupAssignment,
    ) -> Result<(), String> {
        validate_plan("test", members, partitions, plan).map_err(|e| e.to_string())?;
        for (topic, count) in partitions {
            if !members.iter().any(|m| m.topics.contains(topic)) {
                continue;
            }
            for p in 0..*count {
                let tp = GroupPartition::new(topic.clone(), p);
                if !plan.values().any(|s| s.contains(&tp)) {
                    return Err(format!("{tp} unassigned"));
                }
            }
        }
        if plan.len() != members.len() {
            return Err("plan misses a member".into());
        }
        Ok(())
    }
}
