//! Errors of the Kafka driver, with the context that names what failed.

use orderly_protocol::ErrorCode;

/// A driver error. [`DriverError::is_retriable`] tells whether trying again can help.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DriverError {
    /// The wire layer failed (connection, timeout, decode).
    #[error(transparent)]
    Wire(#[from] orderly_protocol::Error),
    /// The group member failed.
    #[error(transparent)]
    Group(#[from] orderly_group::GroupError),
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] orderly_engine::EngineError),
    /// A broker answered with an error code for a partition.
    #[error("{what} for {topic}-{partition}: {code:?}")]
    Kafka {
        /// The request.
        what: &'static str,
        /// Topic.
        topic: String,
        /// Partition.
        partition: i32,
        /// The broker's error code.
        code: ErrorCode,
    },
    /// A broker answered with an error code for a group.
    #[error("{what} for group {group}: {code:?}")]
    GroupCode {
        /// The request.
        what: &'static str,
        /// Group id.
        group: String,
        /// The broker's error code.
        code: ErrorCode,
    },
    /// A task of ours ended without its result (it panicked or was cancelled).
    #[error("{0}")]
    Task(String),
    /// The topic does not exist (or metadata does not list it).
    #[error("topic {0} does not exist")]
    UnknownTopic(String),
    /// No leader is known for the partition.
    #[error("no leader for {0}-{1}")]
    NoLeader(String, i32),
    /// A response did not have the shape we asked for.
    #[error("unexpected response: {0}")]
    Protocol(String),
    /// The configuration cannot work.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The exactly-once mode's transactions cannot go on (another producer took the
    /// transactional id or another process the static member's instance id, or the producer is
    /// unusable): the consumer stopped, and the next owner handles the aborted records again.
    #[error("transaction failed: {0}")]
    Transaction(String),
}

impl DriverError {
    /// True if a retry can succeed (connection trouble, leadership moves, timeouts).
    pub fn is_retriable(&self) -> bool {
        match self {
            DriverError::Wire(e) => e.is_retriable(),
            DriverError::Kafka { code, .. } | DriverError::GroupCode { code, .. } => {
                code.is_retriable()
            }
            DriverError::NoLeader(..) => true,
            DriverError::Group(_)
            | DriverError::Engine(_)
            | DriverError::UnknownTopic(_)
            | DriverError::Task(_)
            | DriverError::Protocol(_)
            | DriverError::Config(_)
            | DriverError::Transaction(_) => false,
        }
    }
}
