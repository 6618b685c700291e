//! The `roundrobin` assignor: all partitions, sorted, dealt over the sorted members in turn.

use std::collections::BTreeMap;

use super::{
    Assignor, AssignorError, GroupAssignment, MemberSubscription, empty_plan, sorted_members,
};
use crate::types::GroupPartition;

/// Java's `RoundRobinAssignor` (protocol name `roundrobin`, eager).
///
/// Partitions of all subscribed topics, sorted by topic then partition, are dealt round-robin over
/// the sorted member list; a member not subscribed to a partition's topic is skipped.
#[derive(Debug, Default, Clone, Copy)]
pub struct RoundRobinAssignor;

impl Assignor for RoundRobinAssignor {
    fn name(&self) -> &str {
        "roundrobin"
    }

    fn assign(
        &self,
        members: &[MemberSubscription],
        partitions: &BTreeMap<String, i32>,
    ) -> Result<GroupAssignment, AssignorError> {
        let mut plan = empty_plan(members);
        let sorted = sorted_members(members);
        if sorted.is_empty() {
            return Ok(plan);
        }
        let mut cursor = 0usize;
        for (topic, &count) in partitions {
            if !sorted.iter().any(|m| m.topics.contains(topic)) {
                continue;
            }
            for p in 0..count {
                // Advance to the next subscribed member; one exists (checked above), so this
                // loop ends within `sorted.len()` steps.
                while !sorted[cursor % sorted.len()].topics.contains(topic) {
                    cursor += 1;
                }
                let m = sorted[cursor % sorted.len()];
                cursor += 1;
                plan.entry(m.member_id.clone())
                    .or_default()
                    .insert(GroupPartition::new(topic.clone(), p));
            }
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assignor::testutil::{assert_complete, member};
    use proptest::prelude::*;

    #[test]
    fn deals_in_turn() {
        let members = vec![member("a", &["t0", "t1"]), member("b", &["t0", "t1"])];
        let parts = BTreeMap::from([("t0".to_owned(), 3), ("t1".to_owned(), 3)]);
        let plan = RoundRobinAssignor.assign(&members, &parts).unwrap();
        let a: Vec<String> = plan["a"].iter().map(|t| t.to_string()).collect();
        assert_eq!(a, ["t0-0", "t0-2", "t1-1"]);
    }

    proptest! {
        #[test]
        fn complete_and_balanced(n_members in 1usize..8, counts in proptest::collection::vec(0i32..40, 1..4)) {
            let topics: Vec<String> = (0..counts.len()).map(|i| format!("t{i}")).collect();
            let trefs: Vec<&str> = topics.iter().map(String::as_str).collect();
            let members: Vec<_> = (0..n_members).map(|i| member(&format!("m{i:02}"), &trefs)).collect();
            let parts: BTreeMap<String, i32> = topics.iter().cloned().zip(counts.iter().copied()).collect();
            let plan = RoundRobinAssignor.assign(&members, &parts).unwrap();
            prop_assert!(assert_complete(&members, &parts, &plan).is_ok());
            let max = plan.values().map(|s| s.len()).max().unwrap_or(0);
            let min = plan.values().map(|s| s.len()).min().unwrap_or(0);
            prop_assert!(max - min <= 1);
        }

        #[test]
        fn complete_with_mixed_subscriptions(subs in proptest::collection::vec(proptest::collection::vec(any::<bool>(), 3), 1..6)) {
            let topics = ["t0", "t1", "t2"];
            let members: Vec<_> = subs.iter().enumerate().map(|(i, mask)| {
                let ts: Vec<&str> = topics.iter().zip(mask).filter(|(_, on)| **on).map(|(t, _)| *t).collect();
                member(&format!("m{i}"), &ts)
            }).collect();
            let parts: BTreeMap<String, i32> = topics.iter().map(|t| ((*t).to_owned(), 7)).collect();
            let plan = RoundRobinAssignor.assign(&members, &parts).unwrap();
            prop_assert!(assert_complete(&members, &parts, &plan).is_ok());
        }
    }
}
