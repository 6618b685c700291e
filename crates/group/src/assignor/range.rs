//! The `range` assignor: per topic, contiguous ranges of partitions to members in Java's order.

use std::collections::BTreeMap;

use super::{
    Assignor, AssignorError, GroupAssignment, MemberSubscription, empty_plan, sorted_members,
};
use crate::types::GroupPartition;

/// Java's `RangeAssignor` (protocol name `range`, eager).
///
/// For each topic, the subscribed members are sorted (static members by instance id first, then
/// member ids), each gets `P / C` consecutive partitions and the first `P % C` get one more.
/// (Java's optional rack-aware pre-pass is not implemented; plans are still valid for Java members.)
#[derive(Debug, Default, Clone, Copy)]
pub struct RangeAssignor;

impl Assignor for RangeAssignor {
    fn name(&self) -> &str {
        "range"
    }

    fn assign(
        &self,
        members: &[MemberSubscription],
        partitions: &BTreeMap<String, i32>,
    ) -> Result<GroupAssignment, AssignorError> {
        let mut plan = empty_plan(members);
        let sorted = sorted_members(members);
        for (topic, &count) in partitions {
            let subs: Vec<&MemberSubscription> = sorted
                .iter()
                .copied()
                .filter(|m| m.topics.contains(topic))
                .collect();
            if subs.is_empty() || count <= 0 {
                continue;
            }
            let c = subs.len() as i32;
            let per = count / c;
            let extra = count % c;
            let mut next = 0;
            for (i, m) in subs.iter().enumerate() {
                let i = i as i32;
                let n = per + i32::from(i < extra);
                let set = plan.entry(m.member_id.clone()).or_default();
                for p in next..next + n {
                    set.insert(GroupPartition::new(topic.clone(), p));
                }
                next += n;
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
    fn java_example() {
        // The javadoc example: C0 gets t0p0,t0p1,t1p0,t1p1; C1 gets t0p2,t1p2.
        let members = vec![member("C0", &["t0", "t1"]), member("C1", &["t0", "t1"])];
        let parts = BTreeMap::from([("t0".to_owned(), 3), ("t1".to_owned(), 3)]);
        let plan = RangeAssignor.assign(&members, &parts).unwrap();
        let c0: Vec<String> = plan["C0"].iter().map(|t| t.to_string()).collect();
        let c1: Vec<String> = plan["C1"].iter().map(|t| t.to_string()).collect();
        assert_eq!(c0, ["t0-0", "t0-1", "t1-0", "t1-1"]);
        assert_eq!(c1, ["t0-2", "t1-2"]);
    }

    #[test]
    fn static_members_sort_first() {
        let mut a = member("a", &["t"]);
        let mut z = member("z", &["t"]);
        z.instance_id = Some("i0".into());
        a.instance_id = None;
        let plan = RangeAssignor
            .assign(&[a, z], &BTreeMap::from([("t".to_owned(), 3)]))
            .unwrap();
        assert_eq!(plan["z"].len(), 2);
        assert!(plan["z"].contains(&GroupPartition::new("t", 0)));
    }

    proptest! {
        #[test]
        fn complete_and_balanced_per_topic(n_members in 1usize..8, counts in proptest::collection::vec(0i32..40, 1..4)) {
            let topics: Vec<String> = (0..counts.len()).map(|i| format!("t{i}")).collect();
            let trefs: Vec<&str> = topics.iter().map(String::as_str).collect();
            let members: Vec<_> = (0..n_members).map(|i| member(&format!("m{i:02}"), &trefs)).collect();
            let parts: BTreeMap<String, i32> = topics.iter().cloned().zip(counts.iter().copied()).collect();
            let plan = RangeAssignor.assign(&members, &parts).unwrap();
            prop_assert!(assert_complete(&members, &parts, &plan).is_ok());
            for topic in parts.keys() {
                let per: Vec<usize> = plan.values().map(|s| s.iter().filter(|tp| &tp.topic == topic).count()).collect();
                let max = per.iter().max().copied().unwrap_or(0);
                let min = per.iter().min().copied().unwrap_or(0);
                prop_assert!(max - min <= 1);
            }
        }
    }
}
