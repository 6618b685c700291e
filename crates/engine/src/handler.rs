//! The extension points the application provides: the record handler and the dead-letter sink.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::record::{Header, Record, TopicPartition};
use crate::reply::Reply;

/// The error a [`HandlerError`] carries as its cause ([`std::error::Error::source`]).
pub type ErrorSource = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// What one handler attempt reports when it did not succeed.
///
/// Build it with [`HandlerError::transient`] or [`HandlerError::permanent`], then optionally
/// [`HandlerError::with_source`] (the error that caused it) and, for a transient failure,
/// [`HandlerError::retry_after`] (the least time to wait before the next attempt):
///
/// ```
/// use std::time::Duration;
/// use orderly_engine::HandlerError;
///
/// let io = std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in 5 s");
/// let e = HandlerError::transient("the booking service timed out")
///     .with_source(io)
///     .retry_after(Duration::from_secs(30));
/// assert!(e.is_transient());
/// assert_eq!(e.retry_after_hint(), Some(Duration::from_secs(30)));
/// assert_eq!(e.to_string(), "transient: the booking service timed out");
/// assert_eq!(std::error::Error::source(&e).map(|s| s.to_string()).as_deref(), Some("no answer in 5 s"));
/// ```
///
/// Both the enum and its variants are `#[non_exhaustive]`: match with `..`
/// (`HandlerError::Transient { message, .. }`), construct with the functions above.
///
/// Two errors are equal when they are of one kind with one message and one retry-after hint,
/// and their sources are both absent or display the same text.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum HandlerError {
    /// Worth retrying (a dependency timed out, a connection dropped). Retried inside the session
    /// with backoff; later records of the session wait.
    #[non_exhaustive]
    Transient {
        /// What failed, for logs and the dead letter if retries run out.
        message: String,
        /// The error that caused it, if any.
        source: Option<ErrorSource>,
        /// The least time the engine waits before the next attempt: the retry policy's backoff,
        /// raised to this hint when the hint is longer (a service's `Retry-After`). The attempt
        /// limit and the stuck-gap timeout apply as to any retry.
        retry_after: Option<Duration>,
    },
    /// Retrying cannot help (invalid data). The record goes to the dead-letter sink at once.
    #[non_exhaustive]
    Permanent {
        /// What failed: the dead letter's error text.
        message: String,
        /// The error that caused it, if any.
        source: Option<ErrorSource>,
    },
}

impl HandlerError {
    /// A transient failure: the record is retried in place after a backoff.
    pub fn transient(message: impl Into<String>) -> Self {
        HandlerError::Transient {
            message: message.into(),
            source: None,
            retry_after: None,
        }
    }

    /// A permanent failure: the record goes to the dead-letter sink at once.
    pub fn permanent(message: impl Into<String>) -> Self {
        HandlerError::Permanent {
            message: message.into(),
            source: None,
        }
    }

    /// The same error, caused by `source` (returned by [`std::error::Error::source`]; its text
    /// is added to the dead letter's error text).
    #[must_use]
    pub fn with_source(
        mut self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        let new: ErrorSource = Arc::from(source.into());
        match &mut self {
            HandlerError::Transient { source, .. } | HandlerError::Permanent { source, .. } => {
                *source = Some(new);
            }
        }
        self
    }

    /// The same transient error, asking the engine to wait at least `delay` before the next
    /// attempt (the retry policy's backoff when that is longer). A permanent error is never
    /// retried: it keeps no hint.
    #[must_use]
    pub fn retry_after(mut self, delay: Duration) -> Self {
        if let HandlerError::Transient { retry_after, .. } = &mut self {
            *retry_after = Some(delay);
        }
        self
    }

    /// Whether the record is retried.
    pub fn is_transient(&self) -> bool {
        matches!(self, HandlerError::Transient { .. })
    }

    /// Whether the record goes to the dead-letter sink at once.
    pub fn is_permanent(&self) -> bool {
        matches!(self, HandlerError::Permanent { .. })
    }

    /// What failed, without the kind and the source.
    pub fn message(&self) -> &str {
        match self {
            HandlerError::Transient { message, .. } | HandlerError::Permanent { message, .. } => {
                message
            }
        }
    }

    /// The least delay before the next attempt that [`HandlerError::retry_after`] asked for.
    pub fn retry_after_hint(&self) -> Option<Duration> {
        match self {
            HandlerError::Transient { retry_after, .. } => *retry_after,
            HandlerError::Permanent { .. } => None,
        }
    }

    fn cause(&self) -> Option<&ErrorSource> {
        match self {
            HandlerError::Transient { source, .. } | HandlerError::Permanent { source, .. } => {
                source.as_ref()
            }
        }
    }

    /// The text a dead letter records: the message, then the source's text if there is one.
    pub(crate) fn into_text(self) -> String {
        match self {
            HandlerError::Transient {
                message, source, ..
            }
            | HandlerError::Permanent { message, source } => match source {
                Some(s) => format!("{message}: {s}"),
                None => message,
            },
        }
    }
}

impl std::fmt::Display for HandlerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandlerError::Transient { message, .. } => write!(f, "transient: {message}"),
            HandlerError::Permanent { message, .. } => write!(f, "permanent: {message}"),
        }
    }
}

impl std::error::Error for HandlerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause()
            .map(|s| &**s as &(dyn std::error::Error + 'static))
    }
}

impl PartialEq for HandlerError {
    fn eq(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && self.message() == other.message()
            && self.retry_after_hint() == other.retry_after_hint()
            && match (self.cause(), other.cause()) {
                (None, None) => true,
                (Some(a), Some(b)) => a.to_string() == b.to_string(),
                _ => false,
            }
    }
}

impl Eq for HandlerError {}

/// Facts about the current attempt, handed to the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// 1 for the first attempt, 2 for the first retry, and so on.
    pub number: u32,
    /// The backoff before this attempt: the one the retry policy drew
    /// ([`RetryPolicy::delay`](crate::RetryPolicy::delay)), or the previous failure's
    /// [`HandlerError::retry_after`] hint when that is longer; zero for the first attempt. The
    /// record waited at least this long since its previous attempt failed, longer when the timer
    /// woke late or its partition was paused meanwhile.
    pub backoff: Duration,
}

impl Attempt {
    /// The first attempt of a record: number 1, no backoff.
    pub const FIRST: Attempt = Attempt {
        number: 1,
        backoff: Duration::ZERO,
    };

    /// Retry `number - 1` of a record (`number` ≥ 2), after a drawn backoff of `backoff`.
    pub const fn retry(number: u32, backoff: Duration) -> Attempt {
        Attempt { number, backoff }
    }
}

/// The application's record handler.
///
/// The engine calls it for one record of a session at a time, in arrival order; records of
/// different sessions run concurrently. A per-attempt timeout (see
/// [`EngineConfig::attempt_timeout`](crate::EngineConfig::attempt_timeout)) counts as transient.
///
/// A panic while the future runs is caught and treated as a permanent error (the record is
/// dead-lettered with the panic text); the worker and its other sessions carry on.
///
/// The future is polled without tokio's cooperative budget (the worker drives thousands of them
/// inside one task, and a budget shared among them made each re-poll the others; see the
/// worker's loop): a ready tokio operation never returns `Pending` only to make it yield. A
/// handler that loops over an always-ready source for long should yield itself
/// (`tokio::task::yield_now`), as it would in a runtime without the budget.
///
/// Cancel safety: the returned future may be dropped (stuck-gap timeout, revoke, shutdown
/// deadline); a handler with side effects must tolerate that, as it must tolerate redelivery.
pub trait Handler: Send + Sync + 'static {
    /// Handles one record.
    fn handle(
        &self,
        record: &Record,
        attempt: Attempt,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send;

    /// Handles consecutive records of one session in one call (the engine calls it for every
    /// record of a session, alone or with the session's queued records after it, when
    /// [`EngineConfig::batch_max`](crate::EngineConfig::batch_max) is above 1; records without a
    /// session go to [`Handler::handle`]). `records` are in offset order, all of one session and
    /// one partition, already admitted; `attempt` is the first record's (the others are on their
    /// first attempt). The answer says how many records from the front are done and, if not all,
    /// what happened to the next one ([`BatchOutcome`]): a permanent error dead-letters it, a
    /// transient one retries it with backoff, together with the records after it, which are
    /// sent again; a record answered done is never sent again.
    ///
    /// The default calls [`Handler::handle_replying`] (so [`Handler::handle`], unless that is
    /// overridden) for each record in turn and stops at the first failure; the replies it
    /// returns reach the engine through [`Handler::handle_batch_replying`]'s default.
    fn handle_batch(
        &self,
        records: &[&Record],
        attempt: Attempt,
    ) -> impl Future<Output = BatchOutcome> + Send {
        async move {
            for (i, r) in records.iter().enumerate() {
                let at = if i == 0 { attempt } else { Attempt::FIRST };
                match self.handle_replying(r, at).await {
                    Ok(replies) => record_batch_replies(i, replies),
                    Err(e) => {
                        return BatchOutcome {
                            done: i,
                            error: Some(e),
                        };
                    }
                }
            }
            BatchOutcome::all(records.len())
        }
    }

    /// Handles one record and returns its replies: records to write (through the engine's
    /// [`ReplySink`](crate::ReplySink), see [`Engine::with_replies`](crate::Engine::with_replies))
    /// before the record counts as done. The engine calls this method, never
    /// [`Handler::handle`] directly; the default calls `handle` and returns no replies, so a
    /// handler that never replies implements `handle` only.
    ///
    /// A handler that replies implements this method, and `handle` in terms of it (the engine
    /// does not call `handle` then, and neither does the default
    /// [`Handler::handle_batch`]). The record is done once its replies are acknowledged, in the
    /// order returned; a failed write is retried and the session's next record waits for it
    /// (see [`crate::reply`]). An error returns no replies: the record is retried or
    /// dead-lettered as usual, and only the attempt that succeeds has its replies written.
    ///
    /// ```
    /// use orderly_engine::{Attempt, Handler, HandlerError, Record, Reply};
    ///
    /// /// Answers every record of a session with its value in upper case.
    /// struct Shout;
    ///
    /// impl Handler for Shout {
    ///     async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
    ///         self.handle_replying(record, attempt).await.map(drop)
    ///     }
    ///
    ///     async fn handle_replying(
    ///         &self,
    ///         record: &Record,
    ///         _attempt: Attempt,
    ///     ) -> Result<Vec<Reply>, HandlerError> {
    ///         let text = record.value.as_deref().unwrap_or_default().to_ascii_uppercase();
    ///         // No topic and no key: the sink's default topic, keyed by the session id.
    ///         Ok(vec![Reply::new(text)])
    ///     }
    /// }
    /// ```
    fn handle_replying(
        &self,
        record: &Record,
        attempt: Attempt,
    ) -> impl Future<Output = Result<Vec<Reply>, HandlerError>> + Send {
        async move { self.handle(record, attempt).await.map(|()| Vec::new()) }
    }

    /// [`Handler::handle_batch`] with replies: the engine calls this method for batches, never
    /// `handle_batch` directly. `replies[k]` of the answer belong to record `k`, for the records
    /// answered done; each record's replies are written, in record order, before it counts as
    /// done. A write that fails is retried; replies the sink discards
    /// ([`ReplyError::Discarded`](crate::ReplyError::Discarded)) make their record the batch's
    /// first record not done (handled again, with the records after it).
    ///
    /// The default runs [`Handler::handle_batch`] and returns the replies that the default
    /// `handle_batch` got from [`Handler::handle_replying`]; a handler that overrides
    /// `handle_batch` and replies overrides this method instead.
    fn handle_batch_replying(
        &self,
        records: &[&Record],
        attempt: Attempt,
    ) -> impl Future<Output = BatchReplies> + Send {
        collect_batch_replies(self.handle_batch(records, attempt))
    }

    /// Whether the handler's endpoint as a whole can take records now. Default: always.
    ///
    /// A handler that fronts a service (an HTTP endpoint, a child process) returns `false` while
    /// it knows the service as a whole is down: refusing connections, shedding every request,
    /// or asking for a pause (`Retry-After`). Such a handler holds its attempts while it is
    /// unavailable instead of failing them, so no record uses up retries or reaches the
    /// dead-letter queue because the service is down. The engine reads this at every tick
    /// (`EngineConfig::tick`): while it is `false` the stuck-gap rule is suspended (a record
    /// waiting for the service is not stuck; its clock restarts when the handler is available
    /// again) and the gauge `orderly_handler_available` is 0. Fetching goes on up to the byte
    /// budgets and then pauses, as it does for any backlog.
    fn available(&self) -> bool {
        true
    }
}

/// The answer to [`Handler::handle_batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Records from the front of the batch that are done.
    pub done: usize,
    /// What happened to record `done` (the first one not done). `None` with records left means
    /// the handler did not say: the record is retried (a transient failure).
    pub error: Option<HandlerError>,
}

impl BatchOutcome {
    /// All `n` records are done.
    pub fn all(n: usize) -> Self {
        Self {
            done: n,
            error: None,
        }
    }

    /// The whole batch failed with `error` (nothing done).
    pub fn failed(error: HandlerError) -> Self {
        Self {
            done: 0,
            error: Some(error),
        }
    }
}

/// Why a record went to the dead-letter sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadLetterReason {
    /// The handler returned a permanent error.
    Permanent(String),
    /// Transient failures exhausted the configured attempt limit; the last error text.
    RetriesExhausted(String),
    /// The record blocked its partition's watermark longer than the stuck-gap timeout.
    Stuck,
    /// [`DlqMode::ParkSession`](crate::config::DlqMode::ParkSession): an earlier record of its
    /// session was dead-lettered and the session is parked; the text names that record.
    Parked(String),
}

impl DeadLetterReason {
    /// Short machine-readable reason: `permanent`, `retries-exhausted`, `stuck` or `parked`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Permanent(_) => "permanent",
            Self::RetriesExhausted(_) => "retries-exhausted",
            Self::Stuck => "stuck",
            Self::Parked(_) => "parked",
        }
    }

    /// Human-readable error text.
    pub fn text(&self) -> &str {
        match self {
            Self::Permanent(t) | Self::RetriesExhausted(t) | Self::Parked(t) => t,
            Self::Stuck => "stuck",
        }
    }
}

/// A record on its way to the dead-letter queue, with everything an operator needs.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// The original record, headers (including `traceparent`) untouched.
    pub record: Record,
    /// Why it was dead-lettered.
    pub reason: DeadLetterReason,
    /// Handler attempts made (0 when the record never reached the handler, e.g. stuck in queue).
    pub attempts: u32,
    /// Wall-clock time of the first attempt (or of the dead-lettering when there was none).
    pub first_attempt: SystemTime,
    /// Wall-clock time of the last attempt.
    pub last_attempt: SystemTime,
}

impl DeadLetter {
    /// Where the record came from.
    pub fn source(&self) -> (&TopicPartition, i64) {
        (&self.record.partition, self.record.offset)
    }

    /// The headers a Kafka DLQ producer should write: the original headers in order, then
    /// `orderly-dlq-*` headers naming source topic, partition, offset, reason, error text, attempt
    /// count and first/last attempt time (milliseconds since the Unix epoch).
    pub fn headers(&self) -> Vec<Header> {
        fn ms(t: SystemTime) -> String {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis())
                .to_string()
        }
        let mut h = Vec::with_capacity(self.record.headers.len() + 8);
        h.extend_from_slice(&self.record.headers);
        h.push(Header::new(
            "orderly-dlq-topic",
            self.record.partition.topic.to_string(),
        ));
        h.push(Header::new(
            "orderly-dlq-partition",
            self.record.partition.partition.to_string(),
        ));
        h.push(Header::new(
            "orderly-dlq-offset",
            self.record.offset.to_string(),
        ));
        h.push(Header::new("orderly-dlq-reason", self.reason.code()));
        h.push(Header::new(
            "orderly-dlq-error",
            self.reason.text().to_owned(),
        ));
        h.push(Header::new(
            "orderly-dlq-attempts",
            self.attempts.to_string(),
        ));
        h.push(Header::new(
            "orderly-dlq-first-attempt-ms",
            ms(self.first_attempt),
        ));
        h.push(Header::new(
            "orderly-dlq-last-attempt-ms",
            ms(self.last_attempt),
        ));
        h
    }
}

/// A dead-letter write failed; the engine retries it with backoff and never drops the record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dead-letter write failed: {0}")]
pub struct DlqError(pub String);

/// Where dead letters go (a Kafka topic in production).
///
/// `send` must return `Ok` only once the write is durable (for Kafka: acknowledged with
/// `acks=all`): the engine counts the offset as done, and may commit past it, right after.
pub trait DeadLetterSink: Send + Sync + 'static {
    /// Writes one dead letter.
    fn send(&self, letter: &DeadLetter) -> impl Future<Output = Result<(), DlqError>> + Send;
}

/// The answer to [`Handler::handle_batch_replying`]: the
/// batch's outcome and the replies of the records it answered done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchReplies {
    /// How many records from the front are done, and what happened to the next one.
    pub outcome: BatchOutcome,
    /// `replies[k]` are the replies of record `k` of the call, for `k < outcome.done`; a record
    /// without an entry (the vector is shorter) has none. Entries past `outcome.done` are
    /// ignored: those records are not done, and their replies come with the call that does them.
    pub replies: Vec<Vec<Reply>>,
}

impl BatchReplies {
    /// An outcome without replies.
    pub fn without_replies(outcome: BatchOutcome) -> Self {
        Self {
            outcome,
            replies: Vec::new(),
        }
    }
}

impl From<BatchOutcome> for BatchReplies {
    fn from(outcome: BatchOutcome) -> Self {
        Self::without_replies(outcome)
    }
}

tokio::task_local! {
    /// The replies the default `Handler::handle_batch` collects from `handle_replying`, while
    /// the default `Handler::handle_batch_replying` runs it.
    static BATCH_REPLIES: RefCell<Vec<Vec<Reply>>>;
}

/// Runs `batch` (a `handle_batch` call) and returns its outcome with the replies that the
/// default `handle_batch` recorded through [`record_batch_replies`] meanwhile.
pub(crate) async fn collect_batch_replies(
    batch: impl Future<Output = BatchOutcome> + Send,
) -> BatchReplies {
    BATCH_REPLIES
        .scope(RefCell::new(Vec::new()), async move {
            let outcome = batch.await;
            let replies = BATCH_REPLIES
                .try_with(|r| std::mem::take(&mut *r.borrow_mut()))
                .unwrap_or_default();
            BatchReplies { outcome, replies }
        })
        .await
}

/// Records the replies of record `index` of a batch for [`collect_batch_replies`]. Outside it
/// (a caller of `handle_batch` itself) there is nobody to hand them to.
pub(crate) fn record_batch_replies(index: usize, replies: Vec<Reply>) {
    if replies.is_empty() {
        return;
    }
    let _ = BATCH_REPLIES.try_with(|r| {
        let mut r = r.borrow_mut();
        if r.len() < index {
            r.resize_with(index, Vec::new);
        }
        r.truncate(index);
        r.push(replies);
    });
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::time::Duration;

    use super::HandlerError;

    #[test]
    fn a_handler_error_keeps_its_source_and_only_a_transient_one_its_hint() {
        let io = || std::io::Error::other("connection reset");
        let t = HandlerError::transient("upstream")
            .with_source(io())
            .retry_after(Duration::from_secs(3));
        assert!(t.is_transient() && !t.is_permanent());
        assert_eq!(t.message(), "upstream");
        assert_eq!(t.retry_after_hint(), Some(Duration::from_secs(3)));
        assert_eq!(t.to_string(), "transient: upstream");
        assert_eq!(
            t.source().map(ToString::to_string).as_deref(),
            Some("connection reset")
        );
        assert_eq!(t.clone().into_text(), "upstream: connection reset");

        let p = HandlerError::permanent("invalid")
            .retry_after(Duration::from_secs(3))
            .with_source("field `id` missing");
        assert!(p.is_permanent());
        assert_eq!(
            p.retry_after_hint(),
            None,
            "a permanent error is not retried"
        );
        assert_eq!(p.to_string(), "permanent: invalid");
        assert_eq!(p.into_text(), "invalid: field `id` missing");
        assert_eq!(HandlerError::transient("x").into_text(), "x");
    }

    #[test]
    fn handler_errors_are_equal_by_kind_message_hint_and_source_text() {
        let base = || HandlerError::transient("busy");
        assert_eq!(base(), base());
        assert_ne!(base(), HandlerError::permanent("busy"));
        assert_ne!(base(), HandlerError::transient("busier"));
        assert_ne!(base(), base().retry_after(Duration::from_millis(1)));
        assert_ne!(base(), base().with_source("cause"));
        assert_eq!(
            base().with_source("cause"),
            base().with_source(std::io::Error::other("cause"))
        );
        assert_ne!(base().with_source("cause"), base().with_source("other"));
    }
}
