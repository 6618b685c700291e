//! Typed errors: Kafka error codes ([`ErrorCode`]) and the crate's [`Error`], each classified retriable or fatal.

use std::time::Duration;

pub use crate::codec::{DecodeError, EncodeError};

/// A Kafka protocol error code (`Errors.java`), with its name and retry classification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ErrorCode(pub i16);

macro_rules! codes {
    ($($name:ident = $code:expr, $retriable:expr;)*) => {
        impl ErrorCode {
            $(
                #[doc = concat!("Kafka error `", stringify!($name), "` (", stringify!($code), ").")]
                pub const $name: ErrorCode = ErrorCode($code);
            )*

            /// The name Kafka uses for this code, or `"UNKNOWN_CODE"`.
            pub fn name(self) -> &'static str {
                match self.0 {
                    $($code => stringify!($name),)*
                    _ => "UNKNOWN_CODE",
                }
            }

            /// Whether the same request may succeed if retried (after a backoff, a metadata refresh or a
            /// coordinator rediscovery). Group-membership errors (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
            /// FENCED_*) are *not* retriable as-is: the caller must rejoin first.
            pub fn is_retriable(self) -> bool {
                match self.0 {
                    $($code => $retriable,)*
                    _ => false,
                }
            }
        }
    };
}

codes! {
    UNKNOWN_SERVER_ERROR = -1, false;
    NONE = 0, false;
    OFFSET_OUT_OF_RANGE = 1, false;
    CORRUPT_MESSAGE = 2, true;
    UNKNOWN_TOPIC_OR_PARTITION = 3, true;
    INVALID_FETCH_SIZE = 4, false;
    LEADER_NOT_AVAILABLE = 5, true;
    NOT_LEADER_OR_FOLLOWER = 6, true;
    REQUEST_TIMED_OUT = 7, true;
    BROKER_NOT_AVAILABLE = 8, false;
    REPLICA_NOT_AVAILABLE = 9, true;
    MESSAGE_TOO_LARGE = 10, false;
    STALE_CONTROLLER_EPOCH = 11, false;
    OFFSET_METADATA_TOO_LARGE = 12, false;
    NETWORK_EXCEPTION = 13, true;
    COORDINATOR_LOAD_IN_PROGRESS = 14, true;
    COORDINATOR_NOT_AVAILABLE = 15, true;
    NOT_COORDINATOR = 16, true;
    INVALID_TOPIC_EXCEPTION = 17, false;
    RECORD_LIST_TOO_LARGE = 18, false;
    NOT_ENOUGH_REPLICAS = 19, true;
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20, true;
    INVALID_REQUIRED_ACKS = 21, false;
    ILLEGAL_GENERATION = 22, false;
    INCONSISTENT_GROUP_PROTOCOL = 23, false;
    INVALID_GROUP_ID = 24, false;
    UNKNOWN_MEMBER_ID = 25, false;
    INVALID_SESSION_TIMEOUT = 26, false;
    REBALANCE_IN_PROGRESS = 27, false;
    INVALID_COMMIT_OFFSET_SIZE = 28, false;
    TOPIC_AUTHORIZATION_FAILED = 29, false;
    GROUP_AUTHORIZATION_FAILED = 30, false;
    CLUSTER_AUTHORIZATION_FAILED = 31, false;
    INVALID_TIMESTAMP = 32, false;
    UNSUPPORTED_SASL_MECHANISM = 33, false;
    ILLEGAL_SASL_STATE = 34, false;
    UNSUPPORTED_VERSION = 35, false;
    TOPIC_ALREADY_EXISTS = 36, false;
    INVALID_PARTITIONS = 37, false;
    INVALID_REPLICATION_FACTOR = 38, false;
    INVALID_REPLICA_ASSIGNMENT = 39, false;
    INVALID_CONFIG = 40, false;
    NOT_CONTROLLER = 41, true;
    INVALID_REQUEST = 42, false;
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43, false;
    POLICY_VIOLATION = 44, false;
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45, false;
    DUPLICATE_SEQUENCE_NUMBER = 46, false;
    INVALID_PRODUCER_EPOCH = 47, false;
    INVALID_TXN_STATE = 48, false;
    INVALID_PRODUCER_ID_MAPPING = 49, false;
    INVALID_TRANSACTION_TIMEOUT = 50, false;
    CONCURRENT_TRANSACTIONS = 51, true;
    TRANSACTION_COORDINATOR_FENCED = 52, false;
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53, false;
    SECURITY_DISABLED = 54, false;
    OPERATION_NOT_ATTEMPTED = 55, false;
    KAFKA_STORAGE_ERROR = 56, true;
    LOG_DIR_NOT_FOUND = 57, false;
    SASL_AUTHENTICATION_FAILED = 58, false;
    UNKNOWN_PRODUCER_ID = 59, false;
    REASSIGNMENT_IN_PROGRESS = 60, false;
    DELEGATION_TOKEN_AUTH_DISABLED = 61, false;
    DELEGATION_TOKEN_NOT_FOUND = 62, false;
    DELEGATION_TOKEN_OWNER_MISMATCH = 63, false;
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64, false;
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65, false;
    DELEGATION_TOKEN_EXPIRED = 66, false;
    INVALID_PRINCIPAL_TYPE = 67, false;
    NON_EMPTY_GROUP = 68, false;
    GROUP_ID_NOT_FOUND = 69, false;
    FETCH_SESSION_ID_NOT_FOUND = 70, true;
    INVALID_FETCH_SESSION_EPOCH = 71, true;
    LISTENER_NOT_FOUND = 72, true;
    TOPIC_DELETION_DISABLED = 73, false;
    FENCED_LEADER_EPOCH = 74, true;
    UNKNOWN_LEADER_EPOCH = 75, true;
    UNSUPPORTED_COMPRESSION_TYPE = 76, false;
    STALE_BROKER_EPOCH = 77, false;
    OFFSET_NOT_AVAILABLE = 78, true;
    MEMBER_ID_REQUIRED = 79, false;
    PREFERRED_LEADER_NOT_AVAILABLE = 80, true;
    GROUP_MAX_SIZE_REACHED = 81, false;
    FENCED_INSTANCE_ID = 82, false;
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83, true;
    ELECTION_NOT_NEEDED = 84, true;
    NO_REASSIGNMENT_IN_PROGRESS = 85, false;
    GROUP_SUBSCRIBED_TO_TOPIC = 86, false;
    INVALID_RECORD = 87, false;
    UNSTABLE_OFFSET_COMMIT = 88, true;
    THROTTLING_QUOTA_EXCEEDED = 89, true;
    PRODUCER_FENCED = 90, false;
    RESOURCE_NOT_FOUND = 91, false;
    DUPLICATE_RESOURCE = 92, false;
    UNACCEPTABLE_CREDENTIAL = 93, false;
    INCONSISTENT_VOTER_SET = 94, false;
    INVALID_UPDATE_VERSION = 95, false;
    FEATURE_UPDATE_FAILED = 96, false;
    PRINCIPAL_DESERIALIZATION_FAILURE = 97, false;
    SNAPSHOT_NOT_FOUND = 98, false;
    POSITION_OUT_OF_RANGE = 99, false;
    UNKNOWN_TOPIC_ID = 100, true;
    DUPLICATE_BROKER_REGISTRATION = 101, false;
    BROKER_ID_NOT_REGISTERED = 102, false;
    INCONSISTENT_TOPIC_ID = 103, true;
    INCONSISTENT_CLUSTER_ID = 104, false;
    TRANSACTIONAL_ID_NOT_FOUND = 105, false;
    FETCH_SESSION_TOPIC_ID_ERROR = 106, true;
    INELIGIBLE_REPLICA = 107, false;
    NEW_LEADER_ELECTED = 108, false;
    OFFSET_MOVED_TO_TIERED_STORAGE = 109, false;
    FENCED_MEMBER_EPOCH = 110, false;
    UNRELEASED_INSTANCE_ID = 111, false;
    UNSUPPORTED_ASSIGNOR = 112, false;
    STALE_MEMBER_EPOCH = 113, false;
    MISMATCHED_ENDPOINT_TYPE = 114, false;
    UNSUPPORTED_ENDPOINT_TYPE = 115, false;
    UNKNOWN_CONTROLLER_ID = 116, false;
    UNKNOWN_SUBSCRIPTION_ID = 117, false;
    TELEMETRY_TOO_LARGE = 118, false;
    INVALID_REGISTRATION = 119, false;
    TRANSACTION_ABORTABLE = 120, false;
    INVALID_RECORD_STATE = 121, false;
    SHARE_SESSION_NOT_FOUND = 122, true;
    INVALID_SHARE_SESSION_EPOCH = 123, true;
    FENCED_STATE_EPOCH = 124, false;
    INVALID_VOTER_KEY = 125, false;
    DUPLICATE_VOTER = 126, false;
    VOTER_NOT_FOUND = 127, false;
    INVALID_REGULAR_EXPRESSION = 128, false;
    REBOOTSTRAP_REQUIRED = 129, false;
}

impl ErrorCode {
    /// `Some(self)` unless this is [`ErrorCode::NONE`].
    pub fn err(self) -> Option<ErrorCode> {
        if self == ErrorCode::NONE {
            None
        } else {
            Some(self)
        }
    }

    /// Whether this code means the group coordinator moved or is not ready, so the caller should
    /// run FindCoordinator again (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE).
    pub fn is_coordinator_error(self) -> bool {
        matches!(
            self,
            ErrorCode::NOT_COORDINATOR | ErrorCode::COORDINATOR_NOT_AVAILABLE
        )
    }

    /// Whether this code means cached metadata (leaders, topic ids) is stale and should be refreshed.
    pub fn needs_metadata_refresh(self) -> bool {
        matches!(
            self,
            ErrorCode::NOT_LEADER_OR_FOLLOWER
                | ErrorCode::LEADER_NOT_AVAILABLE
                | ErrorCode::FENCED_LEADER_EPOCH
                | ErrorCode::UNKNOWN_LEADER_EPOCH
                | ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                | ErrorCode::UNKNOWN_TOPIC_ID
                | ErrorCode::INCONSISTENT_TOPIC_ID
                | ErrorCode::KAFKA_STORAGE_ERROR
        )
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// Where in the request an error belongs: topic, partition and offset when known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context {
    /// Topic name.
    pub topic: Option<String>,
    /// Partition index.
    pub partition: Option<i32>,
    /// Offset (fetch offset, batch base offset...).
    pub offset: Option<i64>,
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(t) = &self.topic {
            write!(f, " topic={t}")?;
        }
        if let Some(p) = self.partition {
            write!(f, " partition={p}")?;
        }
        if let Some(o) = self.offset {
            write!(f, " offset={o}")?;
        }
        Ok(())
    }
}

/// Why a record batch could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// The CRC-32C stored in the batch does not match its bytes.
    #[error("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Crc {
        /// CRC in the batch header.
        stored: u32,
        /// CRC over the batch bytes.
        computed: u32,
    },
    /// Magic byte other than 2: a v0/v1 message set (written before Kafka 0.11, or on a topic
    /// pinned to an old `message.format.version`), which orderly does not decode.
    #[error(
        "record batch magic {0}: message format v0/v1 is not supported (orderly reads format v2, Kafka 0.11 and later)"
    )]
    Magic(i8),
    /// Compression codec id that Kafka does not define.
    #[error("unknown compression codec {0}")]
    UnknownCompression(u8),
    /// The codec failed to decompress the records.
    #[error("{codec} decompression failed: {detail}")]
    Decompress {
        /// Codec name.
        codec: &'static str,
        /// What the codec said.
        detail: String,
    },
    /// The decompressed records exceed the configured limit.
    #[error("decompressed records exceed {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The batch is structurally wrong.
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// Errors of this crate. Every variant says whether a retry can help: [`Error::is_retriable`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// TCP connect failed.
    #[error("connect to {broker} failed: {source}")]
    Connect {
        /// Broker address.
        broker: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// TCP connect (plus ApiVersions / SASL) did not finish in time.
    #[error("connect to {broker} timed out after {after:?}")]
    ConnectTimeout {
        /// Broker address.
        broker: String,
        /// The timeout that elapsed.
        after: Duration,
    },
    /// No response in time; the connection was dropped and will be re-established.
    #[error("{api} request to {broker} timed out after {after:?}")]
    RequestTimeout {
        /// Broker address.
        broker: String,
        /// API name.
        api: &'static str,
        /// The timeout that elapsed.
        after: Duration,
    },
    /// The connection broke (I/O error, framing error, broker closed it). It will be re-established.
    #[error("{api} request to {broker}: transport failed: {detail}")]
    Transport {
        /// Broker address.
        broker: String,
        /// API name.
        api: &'static str,
        /// What failed.
        detail: String,
    },
    /// The broker supports no version of this API that we speak: it is older than the release
    /// named in `needs` (or, for an optional API, lacks the feature).
    #[error(
        "broker {broker} offers {api} {}, orderly speaks v{min}-v{max}: orderly needs Apache Kafka {needs} or later",
        offered.map(|(a, b)| format!("v{a}-v{b}")).unwrap_or_else(|| "in no version".to_string())
    )]
    UnsupportedVersion {
        /// Broker address.
        broker: String,
        /// API name.
        api: &'static str,
        /// Our lowest version.
        min: i16,
        /// Our highest version.
        max: i16,
        /// The broker's advertised range, if it has the API at all.
        offered: Option<(i16, i16)>,
        /// The oldest Apache Kafka release that serves our lowest version.
        needs: &'static str,
    },
    /// The broker answered with a Kafka error code.
    #[error("{api} on {broker}: {code}{context}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        /// Broker address.
        broker: String,
        /// API name.
        api: &'static str,
        /// The Kafka error code.
        code: ErrorCode,
        /// Topic / partition / offset when known.
        context: Context,
        /// The broker's error message, if it sent one.
        message: Option<String>,
    },
    /// A response could not be decoded.
    #[error("{api} response from {broker} could not be decoded: {source}")]
    Decode {
        /// Broker address.
        broker: String,
        /// API name.
        api: &'static str,
        /// Why.
        source: DecodeError,
    },
    /// A request could not be encoded.
    #[error("{api} request could not be encoded: {source}")]
    Encode {
        /// API name.
        api: &'static str,
        /// Why.
        source: EncodeError,
    },
    /// A record batch is corrupt or uses something we cannot decode.
    #[error("record batch{context}: {source}")]
    Batch {
        /// Topic / partition / batch base offset.
        context: Context,
        /// Why.
        source: BatchError,
    },
    /// SASL authentication failed.
    #[error("SASL authentication with {broker} failed: {detail}")]
    Sasl {
        /// Broker address.
        broker: String,
        /// What failed.
        detail: String,
    },
    /// The TLS handshake failed: the server certificate was rejected, or the peer does not speak
    /// TLS (feature `tls`).
    #[error("TLS with {broker} failed: {detail}")]
    Tls {
        /// Broker address.
        broker: String,
        /// What failed.
        detail: String,
    },
    /// The caller asked for something invalid (bad address, empty bootstrap list...).
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The producer's delivery timeout elapsed before a batch was acknowledged; the last error
    /// of its attempts is attached.
    #[error("delivery timeout ({after:?}) elapsed producing{context}; last error: {last}")]
    DeliveryTimeout {
        /// Topic and partition.
        context: Context,
        /// The delivery timeout.
        after: Duration,
        /// The last attempt's error.
        last: Box<Error>,
    },
    /// Retries were exhausted; the last error is attached.
    #[error("gave up after {attempts} attempts: {last}")]
    RetriesExhausted {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last: Box<Error>,
    },
}

impl Error {
    /// Whether retrying the same operation (after backoff, reconnect, metadata or coordinator refresh)
    /// can succeed. Connection and timeout errors are retriable; decode, config and most Kafka codes
    /// are not.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Connect { .. }
            | Error::ConnectTimeout { .. }
            | Error::RequestTimeout { .. }
            | Error::Transport { .. } => true,
            Error::Kafka { code, .. } => code.is_retriable(),
            Error::Batch {
                source: BatchError::Crc { .. },
                ..
            } => true,
            Error::UnsupportedVersion { .. }
            | Error::Decode { .. }
            | Error::Encode { .. }
            | Error::Batch { .. }
            | Error::Sasl { .. }
            | Error::Tls { .. }
            | Error::Config(_)
            | Error::DeliveryTimeout { .. }
            | Error::RetriesExhausted { .. } => false,
        }
    }

    /// The Kafka error code, if the broker sent one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Kafka { code, .. } => Some(*code),
            Error::RetriesExhausted { last, .. } | Error::DeliveryTimeout { last, .. } => {
                last.code()
            }
            _ => None,
        }
    }

    /// Whether the connection that produced this error must be dropped and re-established.
    pub fn breaks_connection(&self) -> bool {
        matches!(
            self,
            Error::RequestTimeout { .. } | Error::Transport { .. } | Error::Decode { .. }
        )
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_classification() {
        assert_eq!(ErrorCode(16).name(), "NOT_COORDINATOR");
        assert!(ErrorCode::NOT_COORDINATOR.is_retriable());
        assert!(!ErrorCode::ILLEGAL_GENERATION.is_retriable());
        assert!(!ErrorCode(9999).is_retriable());
        assert_eq!(ErrorCode(9999).name(), "UNKNOWN_CODE");
        assert_eq!(ErrorCode::NONE.err(), None);
    }
}
