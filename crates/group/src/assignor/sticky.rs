//! The `cooperative-sticky` assignor: balanced, sticky plans with KIP-429 incremental handover.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::{
    Assignor, AssignorError, GroupAssignment, MemberSubscription, RebalanceProtocol,
    adjust_cooperative, empty_plan, sorted_members, valid_owners,
};
use crate::types::{GroupPartition, PartitionSet};

/// Java's `CooperativeStickyAssignor` (protocol name `cooperative-sticky`, cooperative).
///
/// Goals, in order: (1) balance — no member holds 2+ more partitions than another member that could
/// take one of them (with equal subscriptions: counts differ by at most one); (2) stickiness — a
/// member keeps as many of its currently owned partitions as the balance allows.
///
/// Algorithm (written for this crate, not a port of Java's):
/// 1. Valid previous owners come from each member's `owned` partitions and `generation`
///    (the highest generation wins a conflicting claim; a tie voids it).
/// 2. Every member keeps its valid owned partitions that still exist and are subscribed.
/// 3. Unowned partitions go, most constrained first, to the eligible member with the fewest.
/// 4. While some member `A` holds a partition that an eligible member `B` with
///    `count(B) < count(A) - 1` could take, move one (newly assigned partitions before owned ones,
///    to the least-loaded `B`).
/// 5. [`adjust_cooperative`]: a partition that changes owner is left out of this round; its owner
///    revokes it and the follow-up rebalance assigns it.
///
/// User data is Java's: a single int32 generation (readers prefer the subscription's v2+
/// `GenerationId`).
#[derive(Debug, Default, Clone, Copy)]
pub struct CooperativeStickyAssignor;

impl Assignor for CooperativeStickyAssignor {
    fn name(&self) -> &str {
        "cooperative-sticky"
    }

    fn protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Cooperative
    }

    fn user_data(&self, _owned: &PartitionSet, generation: i32) -> Option<Bytes> {
        Some(Bytes::copy_from_slice(&generation.to_be_bytes()))
    }

    fn assign(
        &self,
        members: &[MemberSubscription],
        partitions: &BTreeMap<String, i32>,
    ) -> Result<GroupAssignment, AssignorError> {
        let mut plan = sticky_plan(members, partitions);
        adjust_cooperative(members, &mut plan);
        Ok(plan)
    }
}

/// Steps 1-4 of the algorithm: a complete, balanced, sticky plan (before the cooperative cut).
pub(crate) fn sticky_plan(
    members: &[MemberSubscription],
    partitions: &BTreeMap<String, i32>,
) -> GroupAssignment {
    let mut plan = empty_plan(members);
    let order: Vec<String> = sorted_members(members)
        .iter()
        .map(|m| m.member_id.clone())
        .collect();
    let subscribed: BTreeMap<&str, BTreeSet<&str>> = members
        .iter()
        .map(|m| {
            (
                m.member_id.as_str(),
                m.topics.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    let eligible =
        |member: &str, topic: &str| subscribed.get(member).is_some_and(|ts| ts.contains(topic));

    // All partitions of topics that someone subscribes to.
    let mut all: Vec<GroupPartition> = Vec::new();
    for (topic, &count) in partitions {
        if members.iter().any(|m| m.topics.contains(topic)) {
            all.extend((0..count).map(|p| GroupPartition::new(topic.clone(), p)));
        }
    }
    let exists: BTreeSet<&GroupPartition> = all.iter().collect();

    // 1-2: keep valid owned partitions.
    let owners = valid_owners(members);
    let mut kept: BTreeSet<GroupPartition> = BTreeSet::new();
    for (tp, owner) in &owners {
        if exists.contains(tp) && eligible(owner, &tp.topic) {
            if let Some(set) = plan.get_mut(owner) {
                set.insert(tp.clone());
                kept.insert(tp.clone());
            }
        }
    }

    // 3: unowned partitions, most constrained first, to the least-loaded eligible member.
    let mut unowned: Vec<(usize, GroupPartition)> = all
        .iter()
        .filter(|tp| !kept.contains(*tp))
        .map(|tp| {
            (
                order.iter().filter(|m| eligible(m, &tp.topic)).count(),
                tp.clone(),
            )
        })
        .collect();
    unowned.sort();
    let mut fresh: BTreeSet<GroupPartition> = BTreeSet::new();
    for (_, tp) in unowned {
        let target = order
            .iter()
            .filter(|m| eligible(m, &tp.topic))
            .min_by_key(|m| plan.get(*m).map_or(0, BTreeSet::len));
        if let Some(m) = target {
            if let Some(set) = plan.get_mut(m) {
                set.insert(tp.clone());
                fresh.insert(tp);
            }
        }
    }

    // 4: balance. Each move strictly lowers the sum of squared counts, so this terminates.
    loop {
        let mut by_load: Vec<&String> = order.iter().collect();
        by_load.sort_by_key(|m| std::cmp::Reverse(plan.get(*m).map_or(0, BTreeSet::len)));
        let mut moved = None;
        'search: for from in &by_load {
            let from_len = plan.get(*from).map_or(0, BTreeSet::len);
            let Some(from_set) = plan.get(*from) else {
                continue;
            };
            // Newly assigned partitions move first: moving them costs no stickiness.
            let mut candidates: Vec<&GroupPartition> = from_set.iter().collect();
            candidates.sort_by_key(|tp| !fresh.contains(*tp));
            for tp in candidates {
                let to = order
                    .iter()
                    .filter(|m| *m != *from && eligible(m, &tp.topic))
                    .filter(|m| plan.get(*m).map_or(0, BTreeSet::len) + 1 < from_len)
                    .min_by_key(|m| plan.get(*m).map_or(0, BTreeSet::len));
                if let Some(to) = to {
                    moved = Some(((*from).clone(), to.clone(), tp.clone()));
                    break 'search;
                }
            }
        }
        let Some((from, to, tp)) = moved else { break };
        if let Some(s) = plan.get_mut(&from) {
            s.remove(&tp);
        }
        if let Some(s) = plan.get_mut(&to) {
            s.insert(tp);
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assignor::testutil::{assert_complete, member};
    use proptest::prelude::*;

    fn counts(plan: &GroupAssignment) -> (usize, usize) {
        let max = plan.values().map(BTreeSet::len).max().unwrap_or(0);
        let min = plan.values().map(BTreeSet::len).min().unwrap_or(0);
        (min, max)
    }

    /// Runs rebalances like a group would (owned = last plan) until the plan is complete.
    fn settle(
        mut members: Vec<MemberSubscription>,
        parts: &BTreeMap<String, i32>,
        mut generation: i32,
    ) -> (Vec<MemberSubscription>, GroupAssignment, usize) {
        for round in 1..=4 {
            let plan = CooperativeStickyAssignor.assign(&members, parts).unwrap();
            generation += 1;
            for m in &mut members {
                m.owned = plan[&m.member_id].iter().cloned().collect();
                m.generation = generation;
            }
            if assert_complete(&members, parts, &plan).is_ok() {
                return (members, plan, round);
            }
        }
        panic!("did not settle in 4 rounds");
    }

    #[test]
    fn new_member_takes_only_its_share() {
        let parts = BTreeMap::from([("t".to_owned(), 12)]);
        let members = vec![member("a", &["t"]), member("b", &["t"])];
        let (mut members, plan, rounds) = settle(members, &parts, 0);
        assert_eq!(rounds, 1);
        assert_eq!(counts(&plan), (6, 6));
        let before = plan.clone();
        members.push(member("c", &["t"]));
        // First round: c gets nothing that a or b still own; a and b each lose 2.
        let first = CooperativeStickyAssignor.assign(&members, &parts).unwrap();
        assert!(first["c"].is_empty());
        assert_eq!(first["a"].len(), 4);
        assert!(first["a"].is_subset(&before["a"]));
        let (_, plan, rounds) = settle(members, &parts, 1);
        assert_eq!(rounds, 2);
        assert_eq!(counts(&plan), (4, 4));
        assert!(plan["a"].is_subset(&before["a"]));
        assert!(plan["b"].is_subset(&before["b"]));
    }

    #[test]
    fn conflicting_claims_resolved_by_generation() {
        let mut a = member("a", &["t"]);
        let mut b = member("b", &["t"]);
        a.owned = vec![GroupPartition::new("t", 0), GroupPartition::new("t", 1)];
        a.generation = 3;
        b.owned = vec![GroupPartition::new("t", 0)];
        b.generation = 2;
        let owners = valid_owners(&[a.clone(), b.clone()]);
        assert_eq!(owners[&GroupPartition::new("t", 0)], "a");
        b.generation = 3;
        let owners = valid_owners(&[a, b]);
        assert!(!owners.contains_key(&GroupPartition::new("t", 0)));
    }

    #[test]
    fn user_data_is_generation() {
        let d = CooperativeStickyAssignor
            .user_data(&PartitionSet::new(), 7)
            .unwrap();
        assert_eq!(&d[..], &[0, 0, 0, 7]);
    }

    fn arb_owned(n_members: usize, n_parts: i32) -> impl Strategy<Value = Vec<Option<usize>>> {
        proptest::collection::vec(proptest::option::of(0..n_members + 2), n_parts as usize)
    }

    proptest! {
        #[test]
        fn complete_balanced_sticky(
            n_members in 1usize..7,
            n_parts in 0i32..40,
            seed in arb_owned(7, 40),
        ) {
            // Previous owners may include members that left (index >= n_members).
            let parts = BTreeMap::from([("t".to_owned(), n_parts)]);
            let mut members: Vec<_> = (0..n_members).map(|i| member(&format!("m{i}"), &["t"])).collect();
            for (p, owner) in seed.iter().take(n_parts as usize).enumerate() {
                if let Some(o) = owner {
                    if *o < n_members {
                        members[*o].owned.push(GroupPartition::new("t", p as i32));
                        members[*o].generation = 5;
                    }
                }
            }
            let full = sticky_plan(&members, &parts);
            prop_assert!(assert_complete(&members, &parts, &full).is_ok());
            let (min, max) = counts(&full);
            prop_assert!(max - min <= 1, "unbalanced {min}..{max}");
            // Stickiness: each member keeps at least min(owned, floor(P/C)) of what it owned.
            let floor = (n_parts as usize) / n_members;
            for m in &members {
                let kept = m.owned.iter().filter(|tp| full[&m.member_id].contains(*tp)).count();
                prop_assert!(kept >= m.owned.len().min(floor), "{} kept {kept} of {}", m.member_id, m.owned.len());
            }
            // Cooperative cut: nothing is given to a new owner while another member still owns it.
            let cut = CooperativeStickyAssignor.assign(&members, &parts).unwrap();
            for (id, set) in &cut {
                for tp in set {
                    let other = members.iter().any(|m| &m.member_id != id && m.owned.contains(tp));
                    prop_assert!(!other);
                }
            }
            // And the follow-up round completes the plan.
            let (_, settled, _) = settle(members, &parts, 5);
            let (min, max) = counts(&settled);
            prop_assert!(max - min <= 1);
        }

        #[test]
        fn locally_balanced_with_mixed_subscriptions(
            subs in proptest::collection::vec(proptest::collection::vec(any::<bool>(), 3), 1..6),
            sizes in proptest::collection::vec(0i32..12, 3),
        ) {
            let topics = ["t0", "t1", "t2"];
            let members: Vec<_> = subs.iter().enumerate().map(|(i, mask)| {
                let ts: Vec<&str> = topics.iter().zip(mask).filter(|(_, on)| **on).map(|(t, _)| *t).collect();
                member(&format!("m{i}"), &ts)
            }).collect();
            let parts: BTreeMap<String, i32> = topics.iter().map(|t| (*t).to_owned()).zip(sizes).collect();
            let plan = sticky_plan(&members, &parts);
            prop_assert!(assert_complete(&members, &parts, &plan).is_ok());
            // No partition could move to an eligible member with 2+ fewer partitions.
            for a in &members {
                for tp in &plan[&a.member_id] {
                    for b in &members {
                        if b.topics.contains(&tp.topic) {
                            prop_assert!(plan[&b.member_id].len() + 1 >= plan[&a.member_id].len());
                        }
                    }
                }
            }
        }
    }
}
