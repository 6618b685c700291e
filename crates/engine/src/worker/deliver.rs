//! A handled record's replies are written before its completion is reported: a failed write is
//! retried from the first reply not acknowledged, a refused one dead-letters the record, a
//! discarded one sends it back to the handler.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering::Relaxed;

use futures::FutureExt;

use super::context::{Ctx, panic_text};
use super::session::session_id;
use super::watch::{Step, watch_terminal};
use crate::handler::{DeadLetterSink, Handler, HandlerError};
use crate::handoff::control::{PartitionControl, wait_released};
use crate::record::Record;
use crate::reply::{Reply, ReplyError};

/// How writing a record's replies ended.
pub(super) enum Delivery {
    /// Every reply is acknowledged: the record may count as done.
    Done,
    /// The partition was cancelled (or drained while held) before that.
    Abandoned,
    /// The sink refused the replies (permanent) or discarded them (transient): the record
    /// continues as after a handler failure with this error.
    Failed(HandlerError),
}

/// Writes a handled record's replies through the reply sink, retrying failed writes (from the
/// first reply not acknowledged) with the dead-letter backoff until all are acknowledged or the
/// partition is cancelled. Like a dead-letter write, this is the record's terminal step: the
/// stuck-gap rule cannot skip it (that would lose its replies), but a write still failing when
/// the stuck timeout passes is reported once.
pub(super) async fn deliver<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartitionControl,
    record: &Record,
    session: bool,
    replies: &[Reply],
) -> Delivery {
    let Some(sink) = ctx.replies.as_deref() else {
        return Delivery::Failed(HandlerError::permanent(format!(
            "the handler returned {} replies but no reply sink is configured",
            replies.len()
        )));
    };
    let sid = if session {
        session_id(&ctx.config.session_id, record)
    } else {
        None
    };
    let salt = part.salt ^ (record.offset as u64) ^ 0x3c3c;
    let mut from = 0usize;
    let mut failures = 0u32;
    let mut stalled = false;
    loop {
        if part.is_held() && Box::pin(wait_released(part)).await.is_err() {
            return Delivery::Abandoned;
        }
        let send = async {
            match AssertUnwindSafe(sink.send(record, sid, &replies[from..]))
                .catch_unwind()
                .await
            {
                Ok(r) => r,
                Err(p) => Err(ReplyError::Write {
                    delivered: 0,
                    reason: format!("reply sink panicked: {}", panic_text(&*p)),
                }),
            }
        };
        let sent = watch_terminal(ctx, part, record, &mut stalled, Step::Reply, send).await;
        let (delivered, reason) = match sent {
            None => return Delivery::Abandoned,
            Some(Ok(())) => {
                let n = (replies.len() - from) as u64;
                ctx.metrics.replies.increment(n);
                ctx.stats.0.replies.fetch_add(n, Relaxed);
                return Delivery::Done;
            }
            Some(Err(ReplyError::Invalid(e))) => {
                return Delivery::Failed(HandlerError::permanent(format!("reply refused: {e}")));
            }
            Some(Err(ReplyError::Discarded(e))) => {
                return Delivery::Failed(HandlerError::transient(format!(
                    "replies discarded: {e}"
                )));
            }
            Some(Err(ReplyError::Write { delivered, reason })) => (delivered, reason),
        };
        let delivered = delivered.min(replies.len() - from);
        from += delivered;
        ctx.metrics.replies.increment(delivered as u64);
        ctx.stats.0.replies.fetch_add(delivered as u64, Relaxed);
        failures += 1;
        ctx.metrics.reply_failures.increment(1);
        ctx.stats.0.reply_failures.fetch_add(1, Relaxed);
        let delay = ctx.config.dlq_retry.delay(ctx.jitter_seed, salt, failures);
        tracing::warn!(topic = %record.partition.topic, partition = record.partition.partition,
            offset = record.offset, failures, ?delay, error = %reason, "reply write failed; retrying");
        let wait = watch_terminal(
            ctx,
            part,
            record,
            &mut stalled,
            Step::Reply,
            tokio::time::sleep(delay),
        );
        if wait.await.is_none() {
            return Delivery::Abandoned;
        }
    }
}
