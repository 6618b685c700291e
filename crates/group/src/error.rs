//! Errors of the group member and of offset commits, with group/member/generation context.

use crate::assignor::AssignorError;
use crate::codes::{Api, ErrorCode};
use crate::transport::TransportError;
use crate::types::GroupPartition;

/// Why the member stopped or could not start. Every variant that concerns a running member carries
/// the group, the member id and the generation it held.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// A configuration value is invalid.
    #[error("invalid group configuration: {setting}: {message}")]
    Config {
        /// The setting's Java-style name.
        setting: &'static str,
        /// What is wrong.
        message: String,
    },
    /// Another process joined with the same `group.instance.id` and the coordinator fenced this one.
    #[error(
        "group {group}: this member was fenced because another consumer joined with the same \
         group.instance.id {instance_id:?} (member {member_id}, generation {generation}); \
         every process needs its own group.instance.id, and this member has stopped"
    )]
    FencedInstance {
        /// Group id.
        group: String,
        /// The contested instance id.
        instance_id: String,
        /// This member's id.
        member_id: String,
        /// Generation it held.
        generation: i32,
    },
    /// The coordinator returned an error this member cannot recover from.
    #[error(
        "group {group}: {api} failed with fatal error {code} (member {member_id:?}, generation {generation}){hint}"
    )]
    Fatal {
        /// Group id.
        group: String,
        /// The request.
        api: Api,
        /// The error code.
        code: ErrorCode,
        /// Member id at the time.
        member_id: String,
        /// Generation at the time.
        generation: i32,
        /// A hint about the likely cause (empty or starting with ": ").
        hint: String,
    },
    /// The leader's assignor failed.
    #[error(
        "group {group}: leader (member {member_id}, generation {generation}) could not assign: {source}"
    )]
    Assignor {
        /// Group id.
        group: String,
        /// Leader's member id.
        member_id: String,
        /// Generation being assigned.
        generation: i32,
        /// The assignor's error.
        source: AssignorError,
    },
    /// The group selected a protocol this member does not know (cannot happen with a sane broker).
    #[error("group {group}: coordinator selected unknown assignor {protocol:?}")]
    UnknownProtocol {
        /// Group id.
        group: String,
        /// The selected name.
        protocol: String,
    },
    /// A consumer-protocol payload could not be decoded.
    #[error("group {group}: bad {what} from member {member_id:?}: {message}")]
    Payload {
        /// Group id.
        group: String,
        /// "subscription" or "assignment".
        what: &'static str,
        /// Whose payload.
        member_id: String,
        /// Decoder message.
        message: String,
    },
    /// A transport failure that the member could not retry (only at start-up).
    #[error("group {group}: transport failure: {source}")]
    Transport {
        /// Group id.
        group: String,
        /// The failure.
        source: TransportError,
    },
    /// A broker serves no version of a group API that orderly speaks (it is older than orderly
    /// supports, or lacks the feature): retrying cannot help. `detail` is the protocol crate's
    /// one line (API, both version ranges, the Kafka release needed).
    #[error("group {group}: {detail}")]
    Unsupported {
        /// Group id.
        group: String,
        /// The API, the versions on each side and the release needed.
        detail: String,
    },
    /// The member task ended abnormally (it panicked or was aborted).
    #[error("group {group}: member task ended abnormally: {message}")]
    TaskFailed {
        /// Group id.
        group: String,
        /// The join error.
        message: String,
    },
}

impl GroupError {
    /// Fatal errors stop the member; a new member (after fixing the cause) is the only way on.
    /// Today every `GroupError` the member returns is fatal; transient failures are retried inside.
    pub fn is_fatal(&self) -> bool {
        true
    }

    pub(crate) fn fatal(
        group: &str,
        api: Api,
        code: ErrorCode,
        member_id: &str,
        generation: i32,
    ) -> Self {
        let hint = match code {
            ErrorCode::INVALID_SESSION_TIMEOUT => {
                ": session.timeout.ms is outside the broker's [group.min.session.timeout.ms, group.max.session.timeout.ms]"
            }
            ErrorCode::INCONSISTENT_GROUP_PROTOCOL => {
                ": no assignor is shared with the other members, or the group is not a consumer group"
            }
            ErrorCode::GROUP_MAX_SIZE_REACHED => ": the group has group.max.size members already",
            ErrorCode::GROUP_AUTHORIZATION_FAILED => ": this principal may not use the group",
            ErrorCode::TOPIC_AUTHORIZATION_FAILED => {
                ": this principal may not read a subscribed topic"
            }
            ErrorCode::UNSUPPORTED_VERSION if api == Api::ConsumerGroupHeartbeat => {
                ": the broker does not serve the consumer group protocol (KIP-848); use group.protocol=classic"
            }
            ErrorCode::UNSUPPORTED_VERSION => ": the broker does not support the request version",
            ErrorCode::UNSUPPORTED_ASSIGNOR => {
                ": the server assignor is not in the broker's group.consumer.assignors"
            }
            ErrorCode::INVALID_REGULAR_EXPRESSION => {
                ": the subscription regex is not valid RE2/J syntax"
            }
            ErrorCode::UNRELEASED_INSTANCE_ID => {
                ": the previous member with this group.instance.id never left the group"
            }
            _ => "",
        };
        GroupError::Fatal {
            group: group.to_owned(),
            api,
            code,
            member_id: member_id.to_owned(),
            generation,
            hint: hint.to_owned(),
        }
    }
}

/// Why an offset commit failed. The member itself keeps running unless the variant says otherwise.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    /// The member holds no generation (before the first assignment, after partitions were lost, or
    /// after close): committing now could overwrite another member's progress.
    #[error("group {group}: cannot commit, member {member_id:?} holds no generation")]
    NotMember {
        /// Group id.
        group: String,
        /// Member id (may be empty).
        member_id: String,
    },
    /// The coordinator rejected the commit because of the group state.
    #[error("group {group}: commit by member {member_id} in generation {generation} failed: {code}{}", if *retriable { " (retriable after the rebalance)" } else { "" })]
    Rejected {
        /// Group id.
        group: String,
        /// Member id used.
        member_id: String,
        /// Generation used.
        generation: i32,
        /// The error code.
        code: ErrorCode,
        /// Whether the same commit can succeed after the current rebalance.
        retriable: bool,
    },
    /// Some partitions failed with their own codes (the others were committed).
    #[error(
        "group {group}: commit by member {member_id} in generation {generation} failed for {partitions:?}"
    )]
    Partitions {
        /// Group id.
        group: String,
        /// Member id used.
        member_id: String,
        /// Generation used.
        generation: i32,
        /// Each failed partition with its code.
        partitions: Vec<(GroupPartition, ErrorCode)>,
    },
    /// A metadata string is longer than the broker's limit (checked before sending).
    #[error("group {group}: metadata for {partition} has {len} UTF-16 units, limit {limit}")]
    MetadataTooLarge {
        /// Group id.
        group: String,
        /// The partition.
        partition: GroupPartition,
        /// Its length in UTF-16 code units (what the broker counts).
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The coordinator could not be reached before the commit timeout.
    #[error("group {group}: commit timed out after {attempts} attempts: {last}")]
    Timeout {
        /// Group id.
        group: String,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// The member stopped.
    #[error("group {group}: member stopped")]
    Closed {
        /// Group id.
        group: String,
    },
}

impl CommitError {
    /// Whether retrying the commit later may succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            CommitError::Rejected { retriable, .. } => *retriable,
            CommitError::Timeout { .. } => true,
            _ => false,
        }
    }
}
