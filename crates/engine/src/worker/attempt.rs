//! A record's future: each attempt at the handler (one record, or a session's batch), the retry
//! with full-jitter backoff after a transient failure, and the hand-over to the dead-letter path
//! after a permanent one; the record reports once, when it is done or given up.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::Poll;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;

use super::context::{Ctx, Finished, Outcome, panic_text};
use super::dead_letter::{dead_letter, dead_letter_stuck};
use super::deadline::with_deadline;
use super::deliver::{Delivery, deliver};
use super::parked_writes::{ends_round, round_handled};
use crate::config::DlqMode;
use crate::handler::{
    Attempt, BatchOutcome, DeadLetterReason, DeadLetterSink, Handler, HandlerError,
};
use crate::handoff::control::{PartitionControl, Stop, guarded, guarded_range, wait_released};
use crate::handoff::ownership::WithLease;
use crate::handoff::work::Work;
use crate::record::Record;
use crate::reply::{BatchReplies, Reply};
use crate::trace::TraceParent;

/// One record's future: handle (with retries) or dead-letter it. `start` is when its first poll
/// begins (the worker loop's clock reading).
pub(super) async fn process<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: Arc<PartitionControl>,
    mut w: Box<Work>,
    start: Instant,
) -> Finished {
    // With batching on, every session record goes through `handle_batch`, alone or not, so a
    // handler sees one form of call.
    if ctx.config.batch_max > 1 && w.session && w.parked.is_none() {
        let mut outcomes = Box::pin(run_batch(ctx, &part, &w, start)).await;
        let mut outcome = outcomes.remove(0);
        if outcome == Outcome::Handled && w.batch.is_empty() && ends_round(ctx, &w.record) {
            outcome = Box::pin(round_handled(ctx, &part, &w.record)).await;
        }
        return Finished {
            work: w,
            outcome,
            followers: outcomes,
            at: Instant::now(),
        };
    }
    let (outcome, end) = match w.parked.take() {
        None => {
            let (outcome, end) = run_record(ctx, &part, &w.record, w.hash, w.session, start).await;
            if outcome == Outcome::Handled && w.session && ends_round(ctx, &w.record) {
                (Box::pin(round_handled(ctx, &part, &w.record)).await, end)
            } else {
                (outcome, end)
            }
        }
        Some(reason) => {
            let reason = DeadLetterReason::Parked(reason.into());
            let outcome = Box::pin(dead_letter(
                ctx, &part, &w.record, reason, 0, start, start, w.hash, w.session,
            ))
            .await;
            (outcome, None)
        }
    };
    Finished {
        work: w,
        outcome,
        followers: Vec::new(),
        at: end.unwrap_or_else(Instant::now),
    }
}

/// A batch of one session's consecutive records (`w` and its followers) to terminal states:
/// each handler call takes the records not done yet; those answered done are done, the first
/// one not done gets the single-record rules (a permanent error or exhausted retries
/// dead-letter it, a transient error retries it with backoff, together with the records after
/// it). Returns one outcome per record, in order; shorter when the session got parked by a dead
/// letter in the batch (the rest go back to the session's queue and follow it to the DLQ) or
/// the partition stopped (the rest are abandoned: the caller reports them so).
pub(super) async fn run_batch<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartitionControl,
    w: &Work,
    start: Instant,
) -> Vec<Outcome> {
    let cfg = &ctx.config;
    let recs: Vec<&Record> = std::iter::once(&w.record)
        .chain(w.batch.iter().map(|f| &f.record))
        .collect();
    let n = recs.len();
    let lo = recs[0].offset;
    let mut out = Vec::with_capacity(n);
    let park = cfg.dlq_mode == DlqMode::ParkSession;
    // The current record's attempts so far, the backoff drawn before its next one, and when
    // its first attempt started.
    let mut attempts = 0u32;
    let mut delay = Duration::ZERO;
    let mut first = start;
    let mut abandoned = false;
    while out.len() < n {
        let i = out.len();
        let record = recs[i];
        // Between handler calls: a stopping partition starts nothing new.
        if part.stopping() || (part.is_held() && Box::pin(wait_released(part)).await.is_err()) {
            abandoned = true;
            break;
        }
        if attempts == 0 {
            first = Instant::now();
        }
        attempts += 1;
        let at = if attempts == 1 {
            Attempt::FIRST
        } else {
            Attempt::retry(attempts, delay)
        };
        let call = AssertUnwindSafe(ctx.handler.handle_batch_replying(&recs[i..], at))
            .catch_unwind()
            .map(|r| {
                r.unwrap_or_else(|p| {
                    BatchOutcome::failed(HandlerError::permanent(format!(
                        "handler panicked: {}",
                        panic_text(&*p)
                    )))
                    .into()
                })
            });
        let call = pin!(call);
        let call = WithLease::new(part.lease(), call);
        let call = pin!(call);
        let timed = async {
            match cfg.attempt_timeout {
                Some(t) => with_deadline(&ctx.deadlines, t, call)
                    .await
                    .unwrap_or_else(|()| {
                        BatchOutcome::failed(HandlerError::transient(format!(
                            "attempt timed out after {t:?}"
                        )))
                        .into()
                    }),
                None => call.await,
            }
        };
        let answered = guarded_range(part, lo, record.offset, true, false, pin!(timed)).await;
        ctx.metrics
            .handler_latency
            .record(first.elapsed().as_secs_f64());
        let reason = match answered {
            Err(Stop::Cancelled) => {
                abandoned = true;
                break;
            }
            Err(Stop::Stuck) => DeadLetterReason::Stuck,
            Ok(BatchReplies {
                outcome: BatchOutcome { done, error },
                replies,
            }) => {
                let mut done = done.min(n - i);
                let mut error = error;
                // Each done record's replies, in record order, before it counts as done; a
                // refused or discarded write makes its record the first one not done.
                for (k, replies) in replies.iter().enumerate().take(done) {
                    if replies.is_empty() {
                        continue;
                    }
                    match Box::pin(deliver(ctx, part, recs[i + k], w.session, replies)).await {
                        Delivery::Done => {}
                        Delivery::Abandoned => {
                            out.extend(std::iter::repeat_n(Outcome::Handled, k));
                            abandoned = true;
                            break;
                        }
                        Delivery::Failed(e) => {
                            done = k;
                            error = Some(e);
                            break;
                        }
                    }
                }
                if abandoned {
                    break;
                }
                out.extend(std::iter::repeat_n(Outcome::Handled, done));
                if out.len() == n {
                    break;
                }
                if done > 0 {
                    // The next record was part of this call: this was its first attempt.
                    attempts = 1;
                    first = Instant::now();
                }
                ctx.stats.0.failed.fetch_add(1, Relaxed);
                let hint = error.as_ref().and_then(HandlerError::retry_after_hint);
                let text = match error {
                    Some(e @ HandlerError::Permanent { .. }) => {
                        ctx.metrics.failed_permanent.increment(1);
                        Some(DeadLetterReason::Permanent(e.into_text()))
                    }
                    Some(e @ HandlerError::Transient { .. }) => {
                        ctx.metrics.failed_transient.increment(1);
                        cfg.retry
                            .max_attempts
                            .is_some_and(|m| attempts >= m)
                            .then(|| DeadLetterReason::RetriesExhausted(e.into_text()))
                    }
                    None => {
                        ctx.metrics.failed_transient.increment(1);
                        let e = format!("the handler answered for {done} of {} records", n - i);
                        cfg.retry
                            .max_attempts
                            .is_some_and(|m| attempts >= m)
                            .then_some(DeadLetterReason::RetriesExhausted(e))
                    }
                };
                match text {
                    Some(reason) => reason,
                    None => {
                        // Retry the record (and those after it) after a backoff.
                        ctx.metrics.retried.increment(1);
                        ctx.stats.0.retried.fetch_add(1, Relaxed);
                        let salt = part.salt ^ (recs[out.len()].offset as u64);
                        delay = backoff(cfg.retry.delay(ctx.jitter_seed, salt, attempts), hint);
                        let at = recs[out.len()].offset;
                        match guarded_range(
                            part,
                            lo,
                            at,
                            true,
                            true,
                            pin!(crate::timer::sleep(delay)),
                        )
                        .await
                        {
                            Ok(()) => continue,
                            Err(Stop::Cancelled) => {
                                abandoned = true;
                                break;
                            }
                            Err(Stop::Stuck) => DeadLetterReason::Stuck,
                        }
                    }
                }
            }
        };
        let record = recs[out.len()];
        let outcome = Box::pin(dead_letter(
            ctx,
            part,
            record,
            reason,
            attempts,
            first,
            Instant::now(),
            w.hash,
            w.session,
        ))
        .await;
        out.push(outcome);
        attempts = 0;
        if outcome == Outcome::Abandoned {
            abandoned = true;
            break;
        }
        if park && outcome == Outcome::DeadLettered {
            // The session is parked now: what follows goes back to its queue and follows the
            // dead letter to the DLQ there, in order.
            return out;
        }
    }
    if abandoned {
        out.resize(n, Outcome::Abandoned);
    }
    out
}

/// The span a record's handler call runs in: `orderly.handle` at DEBUG level, with the record's
/// coordinates and, when it carries a W3C `traceparent`, its trace and parent span ids. DEBUG
/// because a subscriber that formats spans (the fmt layer) pays for every one it sees, once per
/// record; a subscriber that wants it per record (a tracing exporter) enables
/// `orderly_engine=debug`.
pub(super) fn handler_span(record: &Record) -> tracing::Span {
    let span = tracing::debug_span!(
        "orderly.handle",
        topic = %record.partition.topic,
        partition = record.partition.partition,
        offset = record.offset,
        trace_id = tracing::field::Empty,
        parent_span_id = tracing::field::Empty,
    );
    if !span.is_disabled() {
        if let Some(tp) = record
            .header("traceparent")
            .and_then(|v| TraceParent::parse(v))
        {
            span.record("trace_id", tp.trace_id_hex());
            span.record("parent_span_id", tp.parent_id_hex());
        }
    }
    span
}

/// Handles one record to a terminal state: handled, or dead-lettered (after retries or at once),
/// or abandoned if its partition is cancelled.
///
/// Size matters here: this future is written into a box once per record (see `run`). The
/// common case (first attempt completes on its first poll) keeps only the handler future and a
/// few words; timers, `Notified` guards, retries and the dead-letter path live in boxed futures
/// that are allocated only when a record actually waits or fails.
pub(super) async fn run_record<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartitionControl,
    record: &Record,
    session_hash: u64,
    session: bool,
    first: Instant,
) -> (Outcome, Option<Instant>) {
    let offset = record.offset;
    match part.check(offset, true, false) {
        Some(Stop::Cancelled) => return (Outcome::Abandoned, None),
        Some(Stop::Stuck) => {
            let outcome = Box::pin(dead_letter_stuck(
                ctx,
                part,
                record,
                0,
                first,
                session_hash,
                session,
            ))
            .await;
            return (outcome, None);
        }
        None => {}
    }
    if part.is_held() && Box::pin(wait_released(part)).await.is_err() {
        return (Outcome::Abandoned, None);
    }
    let span = handler_span(record);
    let res = {
        let mut call = pin!(attempt(ctx, record, Attempt::FIRST));
        let mut fut = pin!(WithLease::new(part.lease(), call.as_mut()));
        // One poll inside the span; the guard never lives across an await (it is not Send).
        let polled = std::future::poll_fn(|cx| {
            let _entered = span.enter();
            Poll::Ready(fut.as_mut().poll(cx))
        })
        .await;
        match polled {
            Poll::Ready(r) => Ok(r),
            Poll::Pending => Box::pin(finish_attempt(ctx, part, offset, fut.as_mut(), &span)).await,
        }
        // The first attempt's future ends here, whatever happened: a stuck record's handler
        // (its locks, permits, transactions) is dropped before the dead-letter write below.
    };
    let res = match res {
        Ok(r) => r,
        Err(Stop::Cancelled) => return (Outcome::Abandoned, None),
        Err(Stop::Stuck) => {
            let outcome = Box::pin(dead_letter_stuck(
                ctx,
                part,
                record,
                1,
                first,
                session_hash,
                session,
            ))
            .await;
            return (outcome, None);
        }
    };
    let end = Instant::now();
    ctx.metrics
        .handler_latency
        .record(end.saturating_duration_since(first).as_secs_f64());
    let slow = SlowPath {
        ctx,
        part,
        record,
        first,
        span,
        session_hash,
        session,
    };
    match res {
        Ok(replies) if replies.is_empty() => (Outcome::Handled, Some(end)),
        Ok(replies) => (Box::pin(replied(slow, replies)).await, None),
        Err(e) => (Box::pin(after_failure(slow, e)).await, None),
    }
}

/// A record past its first attempt that has replies to write or a failure to retry or
/// dead-letter: what that slow path needs of it.
struct SlowPath<'a, H, D> {
    ctx: &'a Ctx<H, D>,
    part: &'a PartitionControl,
    record: &'a Record,
    /// When its first attempt started.
    first: Instant,
    /// The span its attempts run in.
    span: tracing::Span,
    session_hash: u64,
    session: bool,
}

/// One handler attempt. A panic while the handler's future runs becomes a permanent error (the
/// record is dead-lettered with the panic text) instead of taking the worker and every session
/// on it down.
pub(super) fn attempt<'a, H: Handler, D>(
    ctx: &'a Ctx<H, D>,
    record: &'a Record,
    at: Attempt,
) -> impl Future<Output = Result<Vec<Reply>, HandlerError>> + Send + 'a {
    AssertUnwindSafe(ctx.handler.handle_replying(record, at))
        .catch_unwind()
        .map(|r| {
            r.unwrap_or_else(|p| {
                Err(HandlerError::permanent(format!(
                    "handler panicked: {}",
                    panic_text(&*p)
                )))
            })
        })
}

/// Drives a handler attempt that did not finish on its first poll: with the attempt timeout,
/// inside the span, and stoppable by its partition.
pub(super) async fn finish_attempt<H, D, F>(
    ctx: &Ctx<H, D>,
    part: &PartitionControl,
    offset: i64,
    fut: Pin<&mut F>,
    span: &tracing::Span,
) -> Result<F::Output, Stop>
where
    F: Future<Output = Result<Vec<Reply>, HandlerError>>,
{
    let timed = async move {
        match ctx.config.attempt_timeout {
            Some(t) => with_deadline(&ctx.deadlines, t, fut)
                .await
                .unwrap_or_else(|()| {
                    Err(HandlerError::transient(format!(
                        "attempt timed out after {t:?}"
                    )))
                }),
            None => fut.await,
        }
    };
    guarded(
        part,
        offset,
        true,
        false,
        pin!(timed.instrument(span.clone())),
    )
    .await
}

/// The wait before a transient failure's next attempt: the backoff the retry policy drew, or the
/// handler's retry-after hint when that is longer.
fn backoff(drawn: Duration, hint: Option<Duration>) -> Duration {
    hint.map_or(drawn, |h| drawn.max(h))
}

/// The slow path after a failed first attempt: count, back off and retry in place (later records
/// of the session wait), then dead-letter when the error is permanent or attempts run out.
///
/// Its future is allocated (and written into its box) for every failed record, so it holds only
/// the retry loop's state: the reply write and the dead-letter path, each several kilobytes of
/// future, are boxed where they start.
async fn after_failure<H: Handler, D: DeadLetterSink>(
    slow: SlowPath<'_, H, D>,
    mut err: HandlerError,
) -> Outcome {
    let (ctx, part, record) = (slow.ctx, slow.part, slow.record);
    let cfg = &ctx.config;
    let offset = record.offset;
    let salt = part.salt ^ (offset as u64);
    let mut attempts = 1u32;
    let mut last = slow.first;
    let reason = loop {
        ctx.stats.0.failed.fetch_add(1, Relaxed);
        let (text, hint) = match err {
            e @ HandlerError::Permanent { .. } => {
                ctx.metrics.failed_permanent.increment(1);
                break DeadLetterReason::Permanent(e.into_text());
            }
            e @ HandlerError::Transient { .. } => {
                ctx.metrics.failed_transient.increment(1);
                let hint = e.retry_after_hint();
                (e.into_text(), hint)
            }
        };
        if cfg.retry.max_attempts.is_some_and(|m| attempts >= m) {
            break DeadLetterReason::RetriesExhausted(text);
        }
        ctx.metrics.retried.increment(1);
        ctx.stats.0.retried.fetch_add(1, Relaxed);
        let delay = backoff(cfg.retry.delay(ctx.jitter_seed, salt, attempts), hint);
        tracing::debug!(parent: &slow.span, attempt = attempts, ?delay, error = %text, "transient failure, retrying");
        match guarded(part, offset, true, true, pin!(crate::timer::sleep(delay))).await {
            Ok(()) => {}
            Err(Stop::Cancelled) => return Outcome::Abandoned,
            Err(Stop::Stuck) => break DeadLetterReason::Stuck,
        }
        if part.is_held() && Box::pin(wait_released(part)).await.is_err() {
            return Outcome::Abandoned;
        }
        attempts += 1;
        last = Instant::now();
        // Boxed: the handler's future and the attempt timeout would make this future larger
        // than glibc serves from its small-size caches (see `process`'s box in `run`).
        let retry = async {
            let call = pin!(attempt(ctx, record, Attempt::retry(attempts, delay)));
            let fut = pin!(WithLease::new(part.lease(), call));
            finish_attempt(ctx, part, offset, fut, &slow.span).await
        };
        match Box::pin(retry).await {
            Ok(Ok(replies)) => {
                ctx.metrics
                    .handler_latency
                    .record(last.elapsed().as_secs_f64());
                if replies.is_empty() {
                    return Outcome::Handled;
                }
                match Box::pin(deliver(ctx, part, record, slow.session, &replies)).await {
                    Delivery::Done => return Outcome::Handled,
                    Delivery::Abandoned => return Outcome::Abandoned,
                    Delivery::Failed(e) => err = e,
                }
            }
            Ok(Err(e)) => {
                ctx.metrics
                    .handler_latency
                    .record(last.elapsed().as_secs_f64());
                err = e;
            }
            Err(Stop::Cancelled) => return Outcome::Abandoned,
            Err(Stop::Stuck) => break DeadLetterReason::Stuck,
        }
    };
    Box::pin(dead_letter(
        ctx,
        part,
        record,
        reason,
        attempts,
        slow.first,
        last,
        slow.session_hash,
        slow.session,
    ))
    .await
}

/// A record's first attempt succeeded with replies: write them; a write the sink refuses or
/// discards continues as that attempt's failure would.
async fn replied<H: Handler, D: DeadLetterSink>(
    slow: SlowPath<'_, H, D>,
    replies: Vec<Reply>,
) -> Outcome {
    match deliver(slow.ctx, slow.part, slow.record, slow.session, &replies).await {
        Delivery::Done => Outcome::Handled,
        Delivery::Abandoned => Outcome::Abandoned,
        Delivery::Failed(e) => {
            drop(replies);
            // Boxed: this future is allocated for every record with replies, and the retries'
            // state (handler futures, timers) would make it large.
            Box::pin(after_failure(slow, e)).await
        }
    }
}
