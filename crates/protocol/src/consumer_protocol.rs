//! The classic consumer protocol's embedded payloads: [`Subscription`] (JoinGroup metadata) and
//! [`Assignment`] (SyncGroup assignment), versions 0 to 3.
//!
//! Both are a big-endian `int16` version followed by the *non-flexible* encoding of the struct.
//! Java writes version 3. A newer version than we know is decoded with our newest layout and its
//! trailing bytes are ignored (new versions only append fields); a negative version is an error.

use bytes::Bytes;

use crate::codec::{DecodeError, Decoder, EncodeError, Encoder};

/// Highest payload version we know and write.
pub const CONSUMER_PROTOCOL_VERSION: i16 = 3;

/// Partitions of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicPartitions {
    /// Topic name.
    pub topic: String,
    /// Partitions.
    pub partitions: Vec<i32>,
}

/// A member's subscription, sent as JoinGroup protocol metadata.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subscription {
    /// Payload version (0..=3 written; higher read as 3).
    pub version: i16,
    /// Subscribed topics (Java sorts them).
    pub topics: Vec<String>,
    /// Assignor-specific user data.
    pub user_data: Option<Bytes>,
    /// Partitions the member owns (v1+, cooperative rebalancing).
    pub owned_partitions: Vec<TopicPartitions>,
    /// Generation of the owned partitions (v2+, -1 = none).
    pub generation_id: i32,
    /// Rack id (v3+).
    pub rack_id: Option<String>,
}

/// An assignment, returned by SyncGroup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    /// Payload version (0..=3; the layout is the same for all).
    pub version: i16,
    /// Assigned partitions.
    pub assigned_partitions: Vec<TopicPartitions>,
    /// Assignor-specific user data.
    pub user_data: Option<Bytes>,
}

fn encode_tps(e: &mut Encoder<'_>, tps: &[TopicPartitions]) {
    e.array(tps, |e, tp| {
        e.string(&tp.topic);
        e.array(&tp.partitions, |e, p| e.i32(*p));
    });
}

fn decode_tps(d: &mut Decoder) -> Result<Vec<TopicPartitions>, DecodeError> {
    d.array(|d| {
        Ok(TopicPartitions {
            topic: d.string()?,
            partitions: d.array(Decoder::i32)?,
        })
    })
}

fn read_version(d: &mut Decoder) -> Result<i16, DecodeError> {
    let v = d.i16()?;
    if v < 0 {
        return Err(DecodeError::invalid(
            "consumer protocol version",
            v.to_string(),
        ));
    }
    Ok(v)
}

impl Subscription {
    /// Encodes at `self.version` (capped at 3).
    pub fn encode(&self) -> Result<Bytes, EncodeError> {
        let v = self.version.clamp(0, CONSUMER_PROTOCOL_VERSION);
        let mut buf = Vec::new();
        let mut e = Encoder::new(&mut buf, false);
        e.i16(v);
        e.array(&self.topics, |e, t| e.string(t));
        e.nbytes(self.user_data.as_deref());
        if v >= 1 {
            encode_tps(&mut e, &self.owned_partitions);
        }
        if v >= 2 {
            e.i32(self.generation_id);
        }
        if v >= 3 {
            e.nstring(self.rack_id.as_deref());
        }
        e.finish()?;
        Ok(Bytes::from(buf))
    }

    /// Decodes any version; fields a version lacks get their defaults (generation -1).
    pub fn decode(buf: Bytes) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(buf, false);
        let version = read_version(&mut d)?;
        let topics = d.array(Decoder::string)?;
        let user_data = d.nbytes()?;
        let owned_partitions = if version >= 1 {
            decode_tps(&mut d)?
        } else {
            Vec::new()
        };
        let generation_id = if version >= 2 { d.i32()? } else { -1 };
        let rack_id = if version >= 3 { d.nstring()? } else { None };
        if version <= CONSUMER_PROTOCOL_VERSION {
            d.finish("subscription")?;
        }
        Ok(Self {
            version,
            topics,
            user_data,
            owned_partitions,
            generation_id,
            rack_id,
        })
    }
}

impl Assignment {
    /// Encodes at `self.version` (capped at 3).
    pub fn encode(&self) -> Result<Bytes, EncodeError> {
        let mut buf = Vec::new();
        let mut e = Encoder::new(&mut buf, false);
        e.i16(self.version.clamp(0, CONSUMER_PROTOCOL_VERSION));
        encode_tps(&mut e, &self.assigned_partitions);
        e.nbytes(self.user_data.as_deref());
        e.finish()?;
        Ok(Bytes::from(buf))
    }

    /// Decodes any version. An empty buffer (a leader that left this member out) is "no partitions".
    pub fn decode(buf: Bytes) -> Result<Self, DecodeError> {
        if buf.is_empty() {
            return Ok(Self::default());
        }
        let mut d = Decoder::new(buf, false);
        let version = read_version(&mut d)?;
        let assigned_partitions = decode_tps(&mut d)?;
        let user_data = d.nbytes()?;
        if version <= CONSUMER_PROTOCOL_VERSION {
            d.finish("assignment")?;
        }
        Ok(Self {
            version,
            assigned_partitions,
            user_data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testutil::*;
    use proptest::prelude::*;

    fn tps() -> impl Strategy<Value = Vec<TopicPartitions>> {
        v((s(), v(any::<i32>()))).prop_map(|x| {
            x.into_iter()
                .map(|(topic, partitions)| TopicPartitions { topic, partitions })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn subscription_rt(version in 0i16..=3, topics in v(s()), user_data in nby(), owned in tps(), generation_id: i32, rack_id in ns()) {
            let mut sub = Subscription { version, topics, user_data, owned_partitions: owned, generation_id, rack_id };
            let back = Subscription::decode(sub.encode().map_err(|e| TestCaseError::fail(e.to_string()))?)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            if version < 1 { sub.owned_partitions.clear(); }
            if version < 2 { sub.generation_id = -1; }
            if version < 3 { sub.rack_id = None; }
            prop_assert_eq!(back, sub);
        }
        #[test]
        fn assignment_rt(version in 0i16..=3, parts in tps(), user_data in nby()) {
            let a = Assignment { version, assigned_partitions: parts, user_data };
            let back = Assignment::decode(a.encode().map_err(|e| TestCaseError::fail(e.to_string()))?)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(back, a);
        }
        #[test]
        fn never_panic(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Subscription::decode(Bytes::from(b.clone()));
            let _ = Assignment::decode(Bytes::from(b));
        }
    }

    #[test]
    fn empty_assignment_v3_matches_java() {
        let a = Assignment {
            version: 3,
            ..Default::default()
        };
        assert_eq!(
            a.encode().ok().as_deref(),
            Some(&[0u8, 3, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff][..])
        );
    }

    #[test]
    fn newer_version_ignores_trailing_fields() {
        let mut b = Subscription {
            version: 3,
            topics: vec!["t".into()],
            generation_id: 4,
            ..Default::default()
        }
        .encode()
        .map(|b| b.to_vec())
        .unwrap_or_default();
        b[1] = 4;
        b.extend_from_slice(&[1, 2, 3]);
        let s = Subscription::decode(Bytes::from(b)).ok();
        assert_eq!(
            s.map(|s| (s.version, s.topics, s.generation_id)),
            Some((4, vec!["t".to_string()], 4))
        );
    }
}
