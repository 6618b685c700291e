//! Consumer-protocol payloads inside JoinGroup/SyncGroup: Subscription and Assignment, v0 to v3.
//!
//! The byte layout lives in `orderly_protocol::consumer_protocol`; this module converts between it
//! and the partition sets the assignors and the member use. We always write v3, like Java; any
//! version >= 0 is read (a newer one with the v3 layout, trailing bytes ignored).

use bytes::Bytes;
use orderly_protocol::consumer_protocol as wire;

use crate::types::{GroupPartition, PartitionSet, by_topic};

/// Highest payload version this crate writes and understands field by field.
pub const VERSION: i16 = wire::CONSUMER_PROTOCOL_VERSION;

/// A member's subscription (JoinGroup protocol metadata).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subscription {
    /// Subscribed topics (written sorted).
    pub topics: Vec<String>,
    /// Assignor user data.
    pub user_data: Option<Bytes>,
    /// Owned partitions (v1+).
    pub owned: PartitionSet,
    /// Generation of the owned partitions (v2+; -1 none).
    pub generation: i32,
    /// Rack (v3+).
    pub rack: Option<String>,
}

/// A member's assignment (SyncGroup assignment bytes).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    /// Assigned partitions.
    pub partitions: PartitionSet,
    /// Assignor user data.
    pub user_data: Option<Bytes>,
}

/// A malformed payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed consumer-protocol payload: {0}")]
pub struct PayloadError(pub String);

fn to_wire(set: &PartitionSet) -> Vec<wire::TopicPartitions> {
    by_topic(set)
        .into_iter()
        .map(|(topic, partitions)| wire::TopicPartitions { topic, partitions })
        .collect()
}

fn from_wire(tps: Vec<wire::TopicPartitions>) -> PartitionSet {
    tps.into_iter()
        .flat_map(|tp| {
            let topic = tp.topic;
            tp.partitions
                .into_iter()
                .map(move |p| GroupPartition::new(topic.clone(), p))
        })
        .collect()
}

impl Subscription {
    /// Encodes as v3. Only a string longer than 32767 bytes could fail to encode; that is a
    /// configuration error reported as [`PayloadError`].
    pub fn encode(&self) -> Result<Bytes, PayloadError> {
        let mut topics = self.topics.clone();
        topics.sort();
        topics.dedup();
        wire::Subscription {
            version: VERSION,
            topics,
            user_data: self.user_data.clone(),
            owned_partitions: to_wire(&self.owned),
            generation_id: self.generation,
            rack_id: self.rack.clone(),
        }
        .encode()
        .map_err(|e| PayloadError(e.to_string()))
    }

    /// Decodes any version (newer versions: trailing bytes ignored).
    pub fn decode(data: &[u8]) -> Result<Self, PayloadError> {
        let s = wire::Subscription::decode(Bytes::copy_from_slice(data))
            .map_err(|e| PayloadError(e.to_string()))?;
        Ok(Subscription {
            topics: s.topics,
            user_data: s.user_data,
            owned: from_wire(s.owned_partitions),
            generation: s.generation_id,
            rack: s.rack_id,
        })
    }
}

impl Assignment {
    /// Encodes as v3.
    pub fn encode(&self) -> Result<Bytes, PayloadError> {
        wire::Assignment {
            version: VERSION,
            assigned_partitions: to_wire(&self.partitions),
            user_data: self.user_data.clone(),
        }
        .encode()
        .map_err(|e| PayloadError(e.to_string()))
    }

    /// Decodes any version. Empty input means "no partitions" (a leader that left this member out).
    pub fn decode(data: &[u8]) -> Result<Self, PayloadError> {
        if data.is_empty() {
            return Ok(Assignment::default());
        }
        let a = wire::Assignment::decode(Bytes::copy_from_slice(data))
            .map_err(|e| PayloadError(e.to_string()))?;
        Ok(Assignment {
            partitions: from_wire(a.assigned_partitions),
            user_data: a.user_data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn empty_assignment_v3_bytes() {
        assert_eq!(
            &Assignment::default().encode().unwrap()[..],
            &[0, 3, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(Assignment::decode(&[]).unwrap(), Assignment::default());
    }

    #[test]
    fn v0_subscription_decodes() {
        // version 0, one topic "t", null user data.
        let data = [0u8, 0, 0, 0, 0, 1, 0, 1, b't', 0xff, 0xff, 0xff, 0xff];
        let s = Subscription::decode(&data).unwrap();
        assert_eq!(s.topics, ["t"]);
        assert_eq!(s.generation, -1);
        assert!(s.owned.is_empty());
    }

    #[test]
    fn newer_version_ignores_trailing_bytes() {
        let mut s = Subscription {
            topics: vec!["a".into()],
            generation: 4,
            ..Default::default()
        }
        .encode()
        .unwrap()
        .to_vec();
        s[1] = 9;
        s.extend_from_slice(&[1, 2, 3]);
        let d = Subscription::decode(&s).unwrap();
        assert_eq!(d.generation, 4);
    }

    #[test]
    fn truncated_is_an_error() {
        let s = Subscription {
            topics: vec!["abc".into()],
            ..Default::default()
        }
        .encode()
        .unwrap();
        assert!(Subscription::decode(&s[..5]).is_err());
    }

    proptest! {
        #[test]
        fn round_trip(
            topics in proptest::collection::btree_set("[a-z]{1,8}", 0..4),
            owned in proptest::collection::btree_set(("[a-z]{1,4}", 0i32..50), 0..10),
            generation in -1i32..100,
            user in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
            rack in proptest::option::of("[a-z]{0,5}"),
        ) {
            let owned: PartitionSet = owned.into_iter().map(|(t, p)| GroupPartition::new(t, p)).collect();
            let s = Subscription {
                topics: topics.into_iter().collect(),
                user_data: user.map(Bytes::from),
                owned: owned.clone(),
                generation,
                rack,
            };
            prop_assert_eq!(Subscription::decode(&s.encode().unwrap()).unwrap(), s);
            let a = Assignment { partitions: owned, user_data: None };
            prop_assert_eq!(Assignment::decode(&a.encode().unwrap()).unwrap(), a);
        }
    }
}
