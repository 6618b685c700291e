//! Kafka error codes the group APIs return, and the action this crate takes for each (the table).
//!
//! [`action`] is the single place that decides what an error code means for the member. The table
//! below is the same decision in prose; the unit test `tests::table` checks [`action`] against a
//! row for every code in it.
//!
//! | Code | Name | API | Action |
//! |---|---|---|---|
//! | 0 | NONE | all | [`Action::Ok`] |
//! | 15 | COORDINATOR_NOT_AVAILABLE | all group APIs | [`Action::Rediscover`]: forget the coordinator, back off, FindCoordinator, retry |
//! | 16 | NOT_COORDINATOR | all group APIs | [`Action::Rediscover`] |
//! | 14 | COORDINATOR_LOAD_IN_PROGRESS | all group APIs | [`Action::Backoff`]: same coordinator, back off, retry |
//! | 7 | REQUEST_TIMED_OUT (and network errors) | all | [`Action::Rediscover`]; the generation is kept |
//! | 27 | REBALANCE_IN_PROGRESS | Heartbeat | [`Action::Rejoin`] (eager: revoke all first; cooperative: keep partitions). Ignored while joining |
//! | 27 | REBALANCE_IN_PROGRESS | JoinGroup, SyncGroup | [`Action::Rejoin`] at once |
//! | 27 | REBALANCE_IN_PROGRESS | OffsetCommit | [`Action::FailCommit`] (retriable after the rebalance); no reset |
//! | 22 | ILLEGAL_GENERATION | Heartbeat, SyncGroup, OffsetCommit | [`Action::ResetGeneration`]: keep the member id, partitions are lost, rejoin |
//! | 25 | UNKNOWN_MEMBER_ID | JoinGroup | [`Action::ResetMember`]: clear the member id, rejoin |
//! | 25 | UNKNOWN_MEMBER_ID | Heartbeat, SyncGroup, OffsetCommit | [`Action::ResetMember`]: clear member id and generation, partitions are lost, rejoin |
//! | 25 | UNKNOWN_MEMBER_ID | LeaveGroup | [`Action::Ok`] (already gone) |
//! | 79 | MEMBER_ID_REQUIRED | JoinGroup | [`Action::AdoptMemberId`]: take the id from the response and re-send at once |
//! | 82 | FENCED_INSTANCE_ID | JoinGroup, SyncGroup, Heartbeat, OffsetCommit | [`Action::Fenced`]: fatal, another process uses this `group.instance.id` |
//! | 81 | GROUP_MAX_SIZE_REACHED | JoinGroup | [`Action::Fatal`] |
//! | 26 | INVALID_SESSION_TIMEOUT | JoinGroup | [`Action::Fatal`] (configuration) |
//! | 23 | INCONSISTENT_GROUP_PROTOCOL | JoinGroup, SyncGroup | [`Action::Fatal`] (no common assignor, or not a "consumer" group) |
//! | 24 | INVALID_GROUP_ID | all | [`Action::Fatal`] |
//! | 30 | GROUP_AUTHORIZATION_FAILED | all | [`Action::Fatal`] |
//! | 29 | TOPIC_AUTHORIZATION_FAILED | OffsetCommit, OffsetFetch, ListOffsets | [`Action::Fatal`] (named per topic) |
//! | 35 | UNSUPPORTED_VERSION | all | [`Action::Fatal`] (version negotiation bug) |
//! | 42 | INVALID_REQUEST | all | [`Action::Fatal`] (client bug) |
//! | 69 | GROUP_ID_NOT_FOUND | OffsetCommit | [`Action::ResetGeneration`] (the group vanished: rejoin) |
//! | 12 | OFFSET_METADATA_TOO_LARGE | OffsetCommit | [`Action::FailCommit`], not retriable |
//! | 28 | INVALID_COMMIT_OFFSET_SIZE | OffsetCommit | [`Action::FailCommit`], not retriable |
//! | 3 | UNKNOWN_TOPIC_OR_PARTITION | OffsetCommit, OffsetFetch, ListOffsets | [`Action::Backoff`] (metadata is refreshed by the transport) |
//! | 6, 74, 75 | NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH | ListOffsets | [`Action::Backoff`] |
//! | 88 | UNSTABLE_OFFSET_COMMIT | OffsetFetch | [`Action::Backoff`] |
//! | 15, 16, 7 | coordinator moved / unreachable | ConsumerGroupHeartbeat | [`Action::Rediscover`]; the member epoch and partitions are kept |
//! | 110 | FENCED_MEMBER_EPOCH | ConsumerGroupHeartbeat | [`Action::ResetGeneration`]: partitions are lost, rejoin with epoch 0 and the same member id |
//! | 25 | UNKNOWN_MEMBER_ID | ConsumerGroupHeartbeat | [`Action::ResetMember`]: partitions are lost, rejoin with epoch 0 and a new member id |
//! | 111 | UNRELEASED_INSTANCE_ID | ConsumerGroupHeartbeat | [`Action::Backoff`]: the previous process with this `group.instance.id` has not left yet; retried until it leaves or its session expires, then fatal (bounded by the member) |
//! | 81 | GROUP_MAX_SIZE_REACHED | ConsumerGroupHeartbeat | [`Action::Fatal`] (`group.consumer.max.size`) |
//! | 82 | FENCED_INSTANCE_ID | ConsumerGroupHeartbeat | [`Action::Fenced`] |
//! | 112, 128, 35, 42 | UNSUPPORTED_ASSIGNOR, INVALID_REGULAR_EXPRESSION, UNSUPPORTED_VERSION, INVALID_REQUEST | ConsumerGroupHeartbeat | [`Action::Fatal`] (configuration; UNSUPPORTED_VERSION: the broker does not serve KIP-848, use `group.protocol=classic`) |
//! | 113 | STALE_MEMBER_EPOCH | OffsetCommit | [`Action::Backoff`]: the commit raced a member-epoch bump; retried with the new epoch for the partitions still owned |
//! | 110, 113, 111, 112, 128, 100 | KIP-848 codes | classic APIs | not sent to a classic member; [`Action::Fatal`] if seen |
//! | other | unknown | all | [`Action::Fatal`], with the numeric code in the error |

use std::fmt;

/// A Kafka error code: the protocol crate's type, the one every crate of the workspace uses.
pub use orderly_protocol::ErrorCode;

/// The group API a response came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Api {
    FindCoordinator,
    JoinGroup,
    SyncGroup,
    Heartbeat,
    LeaveGroup,
    OffsetCommit,
    OffsetFetch,
    ListOffsets,
    Metadata,
    /// KIP-848's membership RPC (the consumer protocol).
    ConsumerGroupHeartbeat,
    /// DescribeConfigs: the consumer-protocol member reads the session timeout the coordinator
    /// enforces for its group. Its error codes never reach [`action`]: any error means "not known
    /// here", and the member falls back.
    DescribeConfigs,
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What the member does about an error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Success (or an error that means the goal is already reached).
    Ok,
    /// JoinGroup MEMBER_ID_REQUIRED: adopt the returned member id and re-send at once.
    AdoptMemberId,
    /// Forget the coordinator, back off, rediscover it, retry.
    Rediscover,
    /// Back off and retry against the same coordinator/leader.
    Backoff,
    /// Rejoin the group keeping member id and generation (cooperative members keep partitions).
    Rejoin,
    /// Reset the generation (keep the member id); owned partitions are lost; rejoin.
    ResetGeneration,
    /// Reset member id and generation; owned partitions are lost; rejoin.
    ResetMember,
    /// Another process took this `group.instance.id`: fatal.
    Fenced,
    /// An OffsetCommit failed in a way the caller must handle; the member is not reset.
    FailCommit {
        /// Whether retrying the same commit later can succeed.
        retriable: bool,
    },
    /// Fatal for this member: stop and surface the error.
    Fatal,
}

/// The action for `code` returned by `api`. See the module table.
pub fn action(api: Api, code: ErrorCode) -> Action {
    use Action::*;
    match (code, api) {
        (ErrorCode::NONE, _) => Ok,
        (ErrorCode::COORDINATOR_NOT_AVAILABLE | ErrorCode::NOT_COORDINATOR, _) => Rediscover,
        (ErrorCode::REQUEST_TIMED_OUT, _) => Rediscover,
        (ErrorCode::COORDINATOR_LOAD_IN_PROGRESS, _) => Backoff,
        (ErrorCode::MEMBER_ID_REQUIRED, Api::JoinGroup) => AdoptMemberId,
        (ErrorCode::FENCED_MEMBER_EPOCH, Api::ConsumerGroupHeartbeat) => ResetGeneration,
        (ErrorCode::UNRELEASED_INSTANCE_ID, Api::ConsumerGroupHeartbeat) => Backoff,
        (ErrorCode::STALE_MEMBER_EPOCH, Api::OffsetCommit) => Backoff,
        (ErrorCode::REBALANCE_IN_PROGRESS, Api::OffsetCommit) => FailCommit { retriable: true },
        (ErrorCode::REBALANCE_IN_PROGRESS, Api::LeaveGroup) => Ok,
        (ErrorCode::REBALANCE_IN_PROGRESS, _) => Rejoin,
        (ErrorCode::ILLEGAL_GENERATION, Api::LeaveGroup) => Ok,
        (ErrorCode::ILLEGAL_GENERATION, _) => ResetGeneration,
        (ErrorCode::UNKNOWN_MEMBER_ID, Api::LeaveGroup) => Ok,
        (ErrorCode::UNKNOWN_MEMBER_ID, _) => ResetMember,
        (ErrorCode::FENCED_INSTANCE_ID, Api::LeaveGroup) => Ok,
        (ErrorCode::FENCED_INSTANCE_ID, _) => Fenced,
        (ErrorCode::GROUP_ID_NOT_FOUND, Api::OffsetCommit) => ResetGeneration,
        (
            ErrorCode::OFFSET_METADATA_TOO_LARGE | ErrorCode::INVALID_COMMIT_OFFSET_SIZE,
            Api::OffsetCommit,
        ) => FailCommit { retriable: false },
        (
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
            | ErrorCode::NOT_LEADER_OR_FOLLOWER
            | ErrorCode::FENCED_LEADER_EPOCH
            | ErrorCode::UNKNOWN_LEADER_EPOCH
            | ErrorCode::UNSTABLE_OFFSET_COMMIT
            | ErrorCode::UNKNOWN_TOPIC_ID,
            Api::OffsetCommit | Api::OffsetFetch | Api::ListOffsets | Api::Metadata,
        ) => Backoff,
        _ => Fatal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table in the module docs, row by row.
    #[test]
    fn table() {
        use Action::*;
        use ErrorCode as E;
        let rows: &[(Api, ErrorCode, Action)] = &[
            (Api::JoinGroup, E::NONE, Ok),
            (Api::Heartbeat, E::COORDINATOR_NOT_AVAILABLE, Rediscover),
            (
                Api::FindCoordinator,
                E::COORDINATOR_NOT_AVAILABLE,
                Rediscover,
            ),
            (Api::SyncGroup, E::NOT_COORDINATOR, Rediscover),
            (Api::OffsetCommit, E::NOT_COORDINATOR, Rediscover),
            (Api::JoinGroup, E::COORDINATOR_LOAD_IN_PROGRESS, Backoff),
            (Api::OffsetFetch, E::COORDINATOR_LOAD_IN_PROGRESS, Backoff),
            (Api::Heartbeat, E::REQUEST_TIMED_OUT, Rediscover),
            (Api::Heartbeat, E::REBALANCE_IN_PROGRESS, Rejoin),
            (Api::JoinGroup, E::REBALANCE_IN_PROGRESS, Rejoin),
            (Api::SyncGroup, E::REBALANCE_IN_PROGRESS, Rejoin),
            (
                Api::OffsetCommit,
                E::REBALANCE_IN_PROGRESS,
                FailCommit { retriable: true },
            ),
            (Api::Heartbeat, E::ILLEGAL_GENERATION, ResetGeneration),
            (Api::SyncGroup, E::ILLEGAL_GENERATION, ResetGeneration),
            (Api::OffsetCommit, E::ILLEGAL_GENERATION, ResetGeneration),
            (Api::JoinGroup, E::UNKNOWN_MEMBER_ID, ResetMember),
            (Api::Heartbeat, E::UNKNOWN_MEMBER_ID, ResetMember),
            (Api::SyncGroup, E::UNKNOWN_MEMBER_ID, ResetMember),
            (Api::OffsetCommit, E::UNKNOWN_MEMBER_ID, ResetMember),
            (Api::LeaveGroup, E::UNKNOWN_MEMBER_ID, Ok),
            (Api::JoinGroup, E::MEMBER_ID_REQUIRED, AdoptMemberId),
            (Api::JoinGroup, E::FENCED_INSTANCE_ID, Fenced),
            (Api::SyncGroup, E::FENCED_INSTANCE_ID, Fenced),
            (Api::Heartbeat, E::FENCED_INSTANCE_ID, Fenced),
            (Api::OffsetCommit, E::FENCED_INSTANCE_ID, Fenced),
            (Api::JoinGroup, E::GROUP_MAX_SIZE_REACHED, Fatal),
            (Api::JoinGroup, E::INVALID_SESSION_TIMEOUT, Fatal),
            (Api::JoinGroup, E::INCONSISTENT_GROUP_PROTOCOL, Fatal),
            (Api::SyncGroup, E::INCONSISTENT_GROUP_PROTOCOL, Fatal),
            (Api::JoinGroup, E::INVALID_GROUP_ID, Fatal),
            (Api::Heartbeat, E::GROUP_AUTHORIZATION_FAILED, Fatal),
            (Api::OffsetFetch, E::TOPIC_AUTHORIZATION_FAILED, Fatal),
            (Api::JoinGroup, E::UNSUPPORTED_VERSION, Fatal),
            (Api::JoinGroup, E::INVALID_REQUEST, Fatal),
            (Api::OffsetCommit, E::GROUP_ID_NOT_FOUND, ResetGeneration),
            (
                Api::OffsetCommit,
                E::OFFSET_METADATA_TOO_LARGE,
                FailCommit { retriable: false },
            ),
            (
                Api::OffsetCommit,
                E::INVALID_COMMIT_OFFSET_SIZE,
                FailCommit { retriable: false },
            ),
            (Api::OffsetCommit, E::UNKNOWN_TOPIC_OR_PARTITION, Backoff),
            (Api::OffsetFetch, E::UNKNOWN_TOPIC_OR_PARTITION, Backoff),
            (Api::ListOffsets, E::NOT_LEADER_OR_FOLLOWER, Backoff),
            (Api::ListOffsets, E::FENCED_LEADER_EPOCH, Backoff),
            (Api::ListOffsets, E::UNKNOWN_LEADER_EPOCH, Backoff),
            (Api::OffsetFetch, E::UNSTABLE_OFFSET_COMMIT, Backoff),
            (Api::Heartbeat, E::FENCED_MEMBER_EPOCH, Fatal),
            (Api::OffsetCommit, E::STALE_MEMBER_EPOCH, Backoff),
            (Api::ConsumerGroupHeartbeat, E::NOT_COORDINATOR, Rediscover),
            (
                Api::ConsumerGroupHeartbeat,
                E::COORDINATOR_NOT_AVAILABLE,
                Rediscover,
            ),
            (
                Api::ConsumerGroupHeartbeat,
                E::REQUEST_TIMED_OUT,
                Rediscover,
            ),
            (
                Api::ConsumerGroupHeartbeat,
                E::COORDINATOR_LOAD_IN_PROGRESS,
                Backoff,
            ),
            (
                Api::ConsumerGroupHeartbeat,
                E::FENCED_MEMBER_EPOCH,
                ResetGeneration,
            ),
            (
                Api::ConsumerGroupHeartbeat,
                E::UNKNOWN_MEMBER_ID,
                ResetMember,
            ),
            (
                Api::ConsumerGroupHeartbeat,
                E::UNRELEASED_INSTANCE_ID,
                Backoff,
            ),
            (
                Api::ConsumerGroupHeartbeat,
                E::GROUP_MAX_SIZE_REACHED,
                Fatal,
            ),
            (Api::ConsumerGroupHeartbeat, E::FENCED_INSTANCE_ID, Fenced),
            (Api::ConsumerGroupHeartbeat, E::UNSUPPORTED_ASSIGNOR, Fatal),
            (
                Api::ConsumerGroupHeartbeat,
                E::INVALID_REGULAR_EXPRESSION,
                Fatal,
            ),
            (Api::ConsumerGroupHeartbeat, E::UNSUPPORTED_VERSION, Fatal),
            (Api::ConsumerGroupHeartbeat, E::INVALID_REQUEST, Fatal),
            (Api::JoinGroup, E::UNRELEASED_INSTANCE_ID, Fatal),
            (Api::JoinGroup, E::UNSUPPORTED_ASSIGNOR, Fatal),
            (Api::JoinGroup, E::INVALID_REGULAR_EXPRESSION, Fatal),
            (Api::JoinGroup, ErrorCode(-1), Fatal),
        ];
        for (api, code, want) in rows {
            assert_eq!(action(*api, *code), *want, "{api} {code}");
        }
    }

    #[test]
    fn names() {
        assert_eq!(
            ErrorCode::FENCED_INSTANCE_ID.to_string(),
            "FENCED_INSTANCE_ID (82)"
        );
        assert_eq!(ErrorCode(9999).name(), "UNKNOWN_CODE");
    }
}
