//! Replies: output records a handler returns for a record, and the sink that writes them before
//! the record counts as done.
//!
//! A handler that answers records with records of its own (a chat reply, a task result, the next
//! step's command) returns them from [`Handler::handle_replying`](crate::Handler::handle_replying)
//! or [`Handler::handle_batch_replying`](crate::Handler::handle_batch_replying). The engine hands
//! a record's replies, in the order returned, to the [`ReplySink`] set with
//! [`Engine::with_replies`](crate::Engine::with_replies), and the record counts as done (its
//! offset may be committed, its session's next record may start) only once the sink
//! acknowledged all of them. So:
//!
//! - **In session order:** a session's next record starts only after the previous record's
//!   replies were acknowledged, so the replies of one session are written in the session's
//!   order (a sink that keeps one session on one partition, as the Kafka sink does by keying
//!   replies with the session id, keeps that order for readers).
//! - **At-least-once:** a failed write is retried (from the first reply not acknowledged) with
//!   [`EngineConfig::dlq_retry`](crate::EngineConfig::dlq_retry)'s backoff until acknowledged;
//!   it is never skipped, and nothing of the session overtakes it. A crash between the write and
//!   the commit handles the record again, so its replies may then appear twice.
//!
//! A sink may also say the replies were discarded ([`ReplyError::Discarded`], e.g. a transaction
//! that held them aborted): the record is then handled again, as after a transient failure, and
//! its new replies are written instead.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

pub use crate::handler::BatchReplies;
use crate::record::{Header, Record};

/// One output record a handler returns for the record it handled.
///
/// Every part but the value is optional: a sink writes a reply without a topic to its default
/// destination, and one without a key under the session id of the record that produced it (so a
/// session's replies stay together and in order).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reply {
    /// Destination topic; `None` for the sink's default.
    pub topic: Option<String>,
    /// Key; `None` for the sink's default (the Kafka sink uses the session id).
    pub key: Option<Bytes>,
    /// Value; `None` is Kafka's null value.
    pub value: Option<Bytes>,
    /// Headers, in order.
    pub headers: Vec<Header>,
}

impl Reply {
    /// A reply with this value, to the default topic, with the default key and no headers.
    pub fn new(value: impl Into<Bytes>) -> Self {
        Self {
            value: Some(value.into()),
            ..Self::default()
        }
    }

    /// Sends the reply to `topic` instead of the default one.
    #[must_use]
    pub fn to_topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// Gives the reply this key instead of the default one.
    #[must_use]
    pub fn with_key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Appends a header.
    #[must_use]
    pub fn with_header(mut self, header: Header) -> Self {
        self.headers.push(header);
        self
    }
}

/// Why a reply write did not succeed, and what the engine does about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// The write failed; the first `delivered` replies of the call are durable. The engine
    /// writes the others again after a backoff, until they are acknowledged; the record is not
    /// done meanwhile and its session waits.
    #[error("reply write failed after {delivered} acknowledged: {reason}")]
    Write {
        /// Replies of the call, from the front, that were acknowledged.
        delivered: usize,
        /// What went wrong.
        reason: String,
    },
    /// The replies cannot be written at all (no destination topic, a record too large): the
    /// record is dead-lettered as after a permanent handler error.
    #[error("reply refused: {0}")]
    Invalid(String),
    /// The replies were written but discarded (a transaction holding them aborted): the record
    /// is handled again, as after a transient handler failure, and its new replies written.
    #[error("replies discarded: {0}")]
    Discarded(String),
}

/// The future a [`ReplySink`] returns.
pub type ReplyFuture<'a> = Pin<Box<dyn Future<Output = Result<(), ReplyError>> + Send + 'a>>;

/// Where replies go (a Kafka topic through a producer in production).
///
/// `send` must complete with `Ok` only once every reply of the call is durable (for Kafka:
/// acknowledged with `acks=all`), in order, or will be before any commit that counts the record
/// can succeed (a transactional sink whose commit waits for the queued replies and fails if one
/// failed): the engine counts the record as done right after, may commit past it, and starts
/// its session's next record, whose replies must not overtake these. The engine calls it for
/// one record at a time per session; calls of different sessions run concurrently.
///
/// Cancel safety: the future may be dropped (revoke, shutdown deadline); the record is then
/// handled again by the next owner, so what was written may be written again.
pub trait ReplySink: Send + Sync + 'static {
    /// Writes `replies`, which the handler returned for `origin`, in order. `session` is the
    /// origin's session id (`None` in the unordered lane), the default key.
    fn send<'a>(
        &'a self,
        origin: &'a Record,
        session: Option<&'a [u8]>,
        replies: &'a [Reply],
    ) -> ReplyFuture<'a>;
}

/// A shared sink (the caller keeps a handle to it, e.g. to read what it wrote).
impl<S: ReplySink> ReplySink for std::sync::Arc<S> {
    fn send<'a>(
        &'a self,
        origin: &'a Record,
        session: Option<&'a [u8]>,
        replies: &'a [Reply],
    ) -> ReplyFuture<'a> {
        (**self).send(origin, session, replies)
    }
}
