//! `TxnError`, what a failed call tells the caller to do next, and `Action`, what an error of a
//! coordinator call asks of the producer.

use super::state::TxnState;
use crate::error::{Error, ErrorCode};
use crate::producer::leader_unreachable;

/// Why a [`TransactionalProducer`](super::TransactionalProducer) call failed; the variant says
/// what the caller does next.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TxnError {
    /// Another producer with this transactional id has a newer epoch (PRODUCER_FENCED,
    /// INVALID_PRODUCER_EPOCH): this producer's transaction will not commit. Only `init` is
    /// accepted from now on.
    #[error("producer fenced for transactional id {transactional_id}: {source}")]
    ProducerFenced {
        /// The transactional id.
        transactional_id: String,
        /// The refusal.
        source: Box<Error>,
    },
    /// The group coordinator refused the transaction's offsets because the member is no longer
    /// in the group's generation (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID;
    /// STALE_MEMBER_EPOCH, FENCED_MEMBER_EPOCH for a KIP-848 member). The transaction must be
    /// aborted.
    #[error("group {group_id} fenced the transaction's offsets: {source}")]
    GroupFenced {
        /// The group.
        group_id: String,
        /// The refusal.
        source: Box<Error>,
    },
    /// The group coordinator refused the offsets' metadata as longer than its
    /// `offset.metadata.max.bytes` (OFFSET_METADATA_TOO_LARGE). The transaction stays open and
    /// can commit: send the offsets again with shorter metadata (the last TxnOffsetCommit before
    /// the commit counts).
    #[error("group {group_id} refused the offsets' metadata as too large: {source}")]
    MetadataTooLarge {
        /// The group.
        group_id: String,
        /// The refusal.
        source: Box<Error>,
    },
    /// The transaction cannot commit: `abort`, then `begin` again.
    #[error("the transaction must be aborted: {source}")]
    Abortable {
        /// What went wrong.
        source: Box<Error>,
    },
    /// `op` did not complete within the operation timeout; calling it again continues it.
    #[error("{op} did not complete in time (call it again): {source}")]
    Retriable {
        /// The call.
        op: &'static str,
        /// The last attempt's error.
        source: Box<Error>,
    },
    /// The producer cannot go on (authorization, a broker without transactions, a broken
    /// invariant). Only `init` is accepted.
    #[error("transactional producer failed: {source}")]
    Fatal {
        /// What went wrong.
        source: Box<Error>,
    },
    /// The call is not allowed in the producer's state.
    #[error("{op} is not allowed in state {state:?}")]
    State {
        /// The call.
        op: &'static str,
        /// The state it found.
        state: TxnState,
    },
}

impl TxnError {
    /// True for [`TxnError::ProducerFenced`] and [`TxnError::GroupFenced`]: this process is a
    /// zombie for the work at hand.
    pub fn is_fenced(&self) -> bool {
        matches!(
            self,
            TxnError::ProducerFenced { .. } | TxnError::GroupFenced { .. }
        )
    }

    /// True if `abort` recovers: [`TxnError::Abortable`] and [`TxnError::GroupFenced`].
    pub fn is_abortable(&self) -> bool {
        matches!(
            self,
            TxnError::Abortable { .. } | TxnError::GroupFenced { .. }
        )
    }

    /// True for [`TxnError::Retriable`]: the same call again may succeed.
    pub fn is_retriable(&self) -> bool {
        matches!(self, TxnError::Retriable { .. })
    }
}

/// What one error code asks of a coordinator call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    /// Back off and send again.
    Retry,
    /// Find the coordinator again, then send again.
    Rediscover,
    /// The producer is fenced.
    Fenced,
    /// The group member is fenced (TxnOffsetCommit only).
    GroupFenced,
    /// The transaction must be aborted.
    Abort,
    /// Nothing helps.
    Fatal,
}

/// The action `code` asks for.
pub(super) fn action(code: ErrorCode) -> Action {
    match code {
        ErrorCode::NOT_COORDINATOR | ErrorCode::COORDINATOR_NOT_AVAILABLE => Action::Rediscover,
        ErrorCode::PRODUCER_FENCED | ErrorCode::INVALID_PRODUCER_EPOCH => Action::Fenced,
        // The consumer protocol (KIP-848) answers a member epoch that is not the member's
        // current one with the last two.
        ErrorCode::ILLEGAL_GENERATION
        | ErrorCode::UNKNOWN_MEMBER_ID
        | ErrorCode::FENCED_INSTANCE_ID
        | ErrorCode::STALE_MEMBER_EPOCH
        | ErrorCode::FENCED_MEMBER_EPOCH => Action::GroupFenced,
        ErrorCode::CONCURRENT_TRANSACTIONS | ErrorCode::OPERATION_NOT_ATTEMPTED => Action::Retry,
        c if c.is_retriable() => Action::Retry,
        ErrorCode::TRANSACTION_ABORTABLE
        | ErrorCode::UNKNOWN_PRODUCER_ID
        | ErrorCode::INVALID_PRODUCER_ID_MAPPING
        | ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER
        | ErrorCode::REBALANCE_IN_PROGRESS
        | ErrorCode::TOPIC_AUTHORIZATION_FAILED
        | ErrorCode::GROUP_AUTHORIZATION_FAILED
        | ErrorCode::OFFSET_METADATA_TOO_LARGE
        | ErrorCode::MESSAGE_TOO_LARGE
        | ErrorCode::RECORD_LIST_TOO_LARGE
        | ErrorCode::INVALID_RECORD
        | ErrorCode::UNKNOWN_SERVER_ERROR => Action::Abort,
        _ => Action::Fatal,
    }
}

/// The action for a failed request: its Kafka code's, or retry for a transport failure.
pub(super) fn error_action(e: &Error) -> Action {
    match e {
        Error::Kafka { code, .. } => action(*code),
        e if e.is_retriable() || leader_unreachable(e) => Action::Rediscover,
        _ => Action::Fatal,
    }
}

/// A copy of `e` to keep as a standing cause (Kafka errors exactly, others by their text).
pub(super) fn copy_error(e: &Error) -> Error {
    match e {
        Error::Kafka {
            broker,
            api,
            code,
            context,
            message,
        } => Error::Kafka {
            broker: broker.clone(),
            api,
            code: *code,
            context: context.clone(),
            message: message.clone(),
        },
        other => Error::Config(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_map_to_the_documented_actions() {
        assert_eq!(action(ErrorCode::PRODUCER_FENCED), Action::Fenced);
        assert_eq!(action(ErrorCode::INVALID_PRODUCER_EPOCH), Action::Fenced);
        for c in [
            ErrorCode::ILLEGAL_GENERATION,
            ErrorCode::UNKNOWN_MEMBER_ID,
            ErrorCode::FENCED_INSTANCE_ID,
            ErrorCode::STALE_MEMBER_EPOCH,
            ErrorCode::FENCED_MEMBER_EPOCH,
        ] {
            assert_eq!(action(c), Action::GroupFenced, "{c}");
        }
        for c in [
            ErrorCode::CONCURRENT_TRANSACTIONS,
            ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
            ErrorCode::OPERATION_NOT_ATTEMPTED,
        ] {
            assert_eq!(action(c), Action::Retry, "{c}");
        }
        assert_eq!(action(ErrorCode::NOT_COORDINATOR), Action::Rediscover);
        assert_eq!(action(ErrorCode::TRANSACTION_ABORTABLE), Action::Abort);
        assert_eq!(
            action(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
            Action::Fatal
        );
        assert_eq!(action(ErrorCode::INVALID_TXN_STATE), Action::Fatal);
    }
}
