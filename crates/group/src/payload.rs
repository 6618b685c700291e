//! Consumer-protocol payloads inside JoinGroup/SyncGroup: Subscription and Assignment, v0 to v3.
//!
//! Layout (Kafka's `ConsumerProtocolSubscription`/`ConsumerProtocolAssignment`, never flexible):
//! `int16 version` then the classic encoding. We always write v3, like Java. Decoders accept any
//! version >= 0: a newer one is read with the v3 layout and trailing bytes are ignored, as the
//! consumer-protocol's forward-compatibility rule says.

use bytes::{BufMut, Bytes, BytesMut};

use crate::types::{PartitionSet, TopicPartition, by_topic};

/// Highest payload version this crate writes and understands field by field.
pub const VERSION: i16 = 3;

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

fn put_string(buf: &mut BytesMut, s: &str) {
    let len = i16::try_from(s.len()).unwrap_or(i16::MAX);
    buf.put_i16(len);
    buf.put_slice(&s.as_bytes()[..len as usize]);
}

fn put_nullable_string(buf: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(buf, s),
        None => buf.put_i16(-1),
    }
}

fn put_nullable_bytes(buf: &mut BytesMut, b: Option<&Bytes>) {
    match b {
        Some(b) => {
            buf.put_i32(i32::try_from(b.len()).unwrap_or(i32::MAX));
            buf.put_slice(b);
        }
        None => buf.put_i32(-1),
    }
}

fn put_partitions(buf: &mut BytesMut, set: &PartitionSet) {
    let grouped = by_topic(set);
    buf.put_i32(grouped.len() as i32);
    for (topic, parts) in grouped {
        put_string(buf, &topic);
        buf.put_i32(parts.len() as i32);
        for p in parts {
            buf.put_i32(p);
        }
    }
}

impl Subscription {
    /// Encodes as v3.
    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::with_capacity(64);
        buf.put_i16(VERSION);
        let mut topics = self.topics.clone();
        topics.sort();
        topics.dedup();
        buf.put_i32(topics.len() as i32);
        for t in &topics {
            put_string(&mut buf, t);
        }
        put_nullable_bytes(&mut buf, self.user_data.as_ref());
        put_partitions(&mut buf, &self.owned);
        buf.put_i32(self.generation);
        put_nullable_string(&mut buf, self.rack.as_deref());
        buf.freeze()
    }

    /// Decodes any version.
    pub fn decode(data: &[u8]) -> Result<Self, PayloadError> {
        let mut r = Reader(data);
        let version = r.i16()?;
        if version < 0 {
            return Err(PayloadError(format!("negative version {version}")));
        }
        let n = r.len32()?;
        let mut topics = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            topics.push(r.string()?);
        }
        let user_data = r.nullable_bytes()?;
        let mut sub = Subscription { topics, user_data, generation: -1, ..Default::default() };
        if version >= 1 {
            sub.owned = r.partitions()?;
        }
        if version >= 2 {
            sub.generation = r.i32()?;
        }
        if version >= 3 {
            sub.rack = r.nullable_string()?;
        }
        Ok(sub)
    }
}

impl Assignment {
    /// Encodes as v3.
    pub fn encode(&self) -> Bytes {
        let mut buf = BytesMut::with_capacity(64);
        buf.put_i16(VERSION);
        put_partitions(&mut buf, &self.partitions);
        put_nullable_bytes(&mut buf, self.user_data.as_ref());
        buf.freeze()
    }

    /// Decodes any version. Empty input means "no partitions" (a leader that left this member out).
    pub fn decode(data: &[u8]) -> Result<Self, PayloadError> {
        if data.is_empty() {
            return Ok(Assignment::default());
        }
        let mut r = Reader(data);
        let version = r.i16()?;
        if version < 0 {
            return Err(PayloadError(format!("negative version {version}")));
        }
        let partitions = r.partitions()?;
        // Old encoders may stop before the user data; treat a missing field as null.
        let user_data = if r.0.is_empty() { None } else { r.nullable_bytes()? };
        Ok(Assignment { partitions, user_data })
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], PayloadError> {
        if self.0.len() < n {
            return Err(PayloadError(format!("needed {n} bytes, {} left", self.0.len())));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    fn i16(&mut self) -> Result<i16, PayloadError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    fn i32(&mut self) -> Result<i32, PayloadError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn len32(&mut self) -> Result<usize, PayloadError> {
        let n = self.i32()?;
        usize::try_from(n).map_err(|_| PayloadError(format!("negative array length {n}")))
    }
    fn string(&mut self) -> Result<String, PayloadError> {
        self.nullable_string()?.ok_or_else(|| PayloadError("null string".into()))
    }
    fn nullable_string(&mut self) -> Result<Option<String>, PayloadError> {
        let n = self.i16()?;
        if n < 0 {
            return Ok(None);
        }
        let b = self.take(n as usize)?;
        String::from_utf8(b.to_vec()).map(Some).map_err(|_| PayloadError("string is not UTF-8".into()))
    }
    fn nullable_bytes(&mut self) -> Result<Option<Bytes>, PayloadError> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(None);
        }
        Ok(Some(Bytes::copy_from_slice(self.take(n as usize)?)))
    }
    fn partitions(&mut self) -> Result<PartitionSet, PayloadError> {
        let mut set = PartitionSet::new();
        for _ in 0..self.len32()? {
            let topic = self.string()?;
            for _ in 0..self.len32()? {
                set.insert(TopicPartition::new(topic.clone(), self.i32()?));
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn empty_assignment_v3_bytes() {
        assert_eq!(&Assignment::default().encode()[..], &[0, 3, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
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
        let mut s = Subscription { topics: vec!["a".into()], generation: 4, ..Default::default() }.encode().to_vec();
        s[1] = 9;
        s.extend_from_slice(&[1, 2, 3]);
        let d = Subscription::decode(&s).unwrap();
        assert_eq!(d.generation, 4);
    }

    #[test]
    fn truncated_is_an_error() {
        let s = Subscription { topics: vec!["abc".into()], ..Default::default() }.encode();
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
            let owned: PartitionSet = owned.into_iter().map(|(t, p)| TopicPartition::new(t, p)).collect();
            let s = Subscription {
                topics: topics.into_iter().collect(),
                user_data: user.map(Bytes::from),
                owned: owned.clone(),
                generation,
                rack,
            };
            prop_assert_eq!(Subscription::decode(&s.encode()).unwrap(), s);
            let a = Assignment { partitions: owned, user_data: None };
            prop_assert_eq!(Assignment::decode(&a.encode()).unwrap(), a);
        }
    }
}
