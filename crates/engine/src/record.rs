//! The Kafka-agnostic record model: topic-partition, record, header.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

/// A topic and a partition number; cheap to clone (the topic name is shared).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: Arc<str>,
    /// Partition number within the topic.
    pub partition: i32,
}

impl TopicPartition {
    /// Builds a topic-partition.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// One record header. Headers keep their order, duplicates and null values, as Kafka does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Header name.
    pub key: String,
    /// Header value; `None` is Kafka's null header value (distinct from an empty value).
    pub value: Option<Bytes>,
}

impl Header {
    /// Builds a header with a value.
    pub fn new(key: impl Into<String>, value: impl Into<Bytes>) -> Self {
        Self {
            key: key.into(),
            value: Some(value.into()),
        }
    }
}

/// A record as the engine sees it: no wire types, only what ordering and handling need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Where the record came from.
    pub partition: TopicPartition,
    /// The record's offset in its partition.
    pub offset: i64,
    /// The record key; by default the session id.
    pub key: Option<Bytes>,
    /// The record value.
    pub value: Option<Bytes>,
    /// Headers in wire order.
    pub headers: Vec<Header>,
    /// The record timestamp in milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
}

impl Record {
    /// A record with a key and a value and no headers (handy in tests and benches).
    pub fn new(
        partition: TopicPartition,
        offset: i64,
        key: Option<Bytes>,
        value: Option<Bytes>,
    ) -> Self {
        Self {
            partition,
            offset,
            key,
            value,
            headers: Vec::new(),
            timestamp_ms: 0,
        }
    }

    /// The value of the first header named `name` (`None` if absent or null).
    pub fn header(&self, name: &str) -> Option<&Bytes> {
        self.headers
            .iter()
            .find(|h| h.key == name)
            .and_then(|h| h.value.as_ref())
    }

    /// The bytes this record is charged against the memory budget: what keeping it alive costs.
    ///
    /// That is the struct itself (so that empty records still cost something), and each key,
    /// value, header name and header value as a heap allocation of its own: its length plus the
    /// allocator's per-allocation header and rounding. It is exact only if those fields do not
    /// share a larger buffer; the Kafka driver copies them out of the fetch response for that
    /// reason (a zero-copy slice would keep the whole response alive, uncharged).
    pub fn charged_bytes(&self) -> usize {
        /// `size_of::<Record>()` on 64-bit targets, rounded up.
        const OVERHEAD: usize = 128;
        /// An allocation's header and rounding (glibc: 8 bytes of header, 16-byte granules).
        const PER_ALLOC: usize = 16;
        let field = |b: &Option<Bytes>| b.as_ref().map_or(0, |b| b.len() + PER_ALLOC);
        let kv = field(&self.key) + field(&self.value);
        let hdrs: usize = self
            .headers
            .iter()
            .map(|h| std::mem::size_of::<Header>() + h.key.len() + PER_ALLOC + field(&h.value))
            .sum();
        OVERHEAD + kv + hdrs
    }
}
