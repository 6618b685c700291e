//! Small value types shared by the assignors, the member state machine and the listener contract.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// One partition of one topic, as the group names it in assignments, ownership and commits.
///
/// The engine's `TopicPartition` names the same pair for records (its topic shared, so cloning it
/// per record costs no allocation); the two crates do not depend on each other, and the consumer
/// crate converts between them where it wires the group to the engine.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
}

impl GroupPartition {
    /// Builds a group partition.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for GroupPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A set of partitions, ordered by topic then partition (the order Kafka's tools print).
pub type PartitionSet = BTreeSet<GroupPartition>;

/// Groups a partition set by topic, as the consumer-protocol payloads carry it.
pub fn by_topic(set: &PartitionSet) -> BTreeMap<String, Vec<i32>> {
    let mut out: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for tp in set {
        out.entry(tp.topic.clone()).or_default().push(tp.partition);
    }
    out
}

/// The identity a member holds while it is in a generation: what the broker checks on every
/// SyncGroup, Heartbeat and OffsetCommit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// Generation id; [`Generation::NONE`] when the member holds none.
    pub generation_id: i32,
    /// Member id given by the coordinator ("" before the first JoinGroup).
    pub member_id: String,
    /// The assignor (JoinGroup protocol name) the group selected.
    pub protocol: Option<String>,
}

impl Generation {
    /// The generation id Kafka uses for "no generation".
    pub const NONE: i32 = -1;

    /// The state of a member that never joined.
    pub fn empty() -> Self {
        Self {
            generation_id: Self::NONE,
            member_id: String::new(),
            protocol: None,
        }
    }

    /// True when this member holds a valid generation.
    pub fn is_valid(&self) -> bool {
        self.generation_id >= 0 && !self.member_id.is_empty()
    }
}

/// Where a newly assigned partition starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartPosition {
    /// The group has a committed offset: the next offset to consume, with its leader epoch and the
    /// metadata string stored with it.
    Committed {
        /// Next offset to consume.
        offset: i64,
        /// Leader epoch of the last consumed record, if the committer knew it.
        leader_epoch: Option<i32>,
        /// The metadata string stored with the commit (orderly keeps completed offsets above the
        /// watermark there).
        metadata: Option<String>,
    },
    /// No committed offset; `auto.offset.reset` chose this offset via ListOffsets.
    Reset {
        /// The offset ListOffsets returned.
        offset: i64,
        /// The policy that chose it.
        policy: AutoOffsetReset,
    },
    /// No committed offset and `auto.offset.reset = none`: the engine must not consume this
    /// partition and should surface an error (Java raises `NoOffsetForPartitionException`).
    Missing,
}

impl StartPosition {
    /// The offset to fetch from, if there is one.
    pub fn offset(&self) -> Option<i64> {
        match self {
            StartPosition::Committed { offset, .. } | StartPosition::Reset { offset, .. } => {
                Some(*offset)
            }
            StartPosition::Missing => None,
        }
    }
}

/// One offset to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitOffset {
    /// The partition.
    pub partition: GroupPartition,
    /// Next offset to consume (last processed + 1).
    pub offset: i64,
    /// Leader epoch of the last processed record, if known.
    pub leader_epoch: Option<i32>,
    /// Metadata stored with the offset; at most [`crate::GroupConfig::max_metadata_chars`] UTF-16
    /// code units (the broker's default `offset.metadata.max.bytes`).
    pub metadata: Option<String>,
}

/// What to do when a newly assigned partition has no committed offset (`auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AutoOffsetReset {
    /// Start at the log start offset (ListOffsets timestamp -2).
    Earliest,
    /// Start at the log end offset (ListOffsets timestamp -1). Java's default.
    #[default]
    Latest,
    /// Do not choose: the partition is reported with [`crate::StartPosition::Missing`].
    None,
}
