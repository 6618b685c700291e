//! Terminal writes (dead letters, replies, parked-session updates) run until they complete or
//! the partition is cancelled; a stuck flag does not stop them, it is reported once. A write is
//! never polled once its partition is cancelled.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering::Relaxed;

use super::context::Ctx;
use crate::handoff::control::{PartitionControl, Stop};
use crate::record::Record;

/// A record's terminal write that the stuck-gap rule cannot skip.
#[derive(Clone, Copy)]
pub(super) enum Step {
    DeadLetter,
    Reply,
}

/// Runs one step of a dead-letter write until it completes (`Some`) or the partition is
/// cancelled (`None`). A stuck flag for this record does not stop it; it is reported once.
pub(super) async fn watch_dead_letter<H, D, F: Future>(
    ctx: &Ctx<H, D>,
    part: &PartitionControl,
    record: &Record,
    stalled: &mut bool,
    fut: F,
) -> Option<F::Output> {
    watch_terminal(ctx, part, record, stalled, Step::DeadLetter, fut).await
}

/// Runs one step of a terminal write (`step`) until it completes (`Some`) or the partition is
/// cancelled (`None`). A stuck flag for this record does not stop it; it is reported once.
pub(super) async fn watch_terminal<H, D, F: Future>(
    ctx: &Ctx<H, D>,
    part: &PartitionControl,
    record: &Record,
    stalled: &mut bool,
    step: Step,
    fut: F,
) -> Option<F::Output> {
    let mut fut = pin!(fut);
    loop {
        let notified = part.notify.notified();
        match part.check(record.offset, !*stalled, false) {
            Some(Stop::Cancelled) => return None,
            Some(Stop::Stuck) => {
                *stalled = true;
                match step {
                    Step::DeadLetter => {
                        ctx.metrics.dlq_stalled.increment(1);
                        ctx.stats.0.dlq_stalled.fetch_add(1, Relaxed);
                        tracing::error!(
                            topic = %record.partition.topic,
                            partition = record.partition.partition,
                            offset = record.offset,
                            "dead-letter write still not acknowledged after the stuck-gap timeout: the DLQ is failing; the partition's watermark stays held (and fetching pauses) until it succeeds"
                        );
                    }
                    Step::Reply => {
                        ctx.metrics.reply_stalled.increment(1);
                        tracing::error!(
                            topic = %record.partition.topic,
                            partition = record.partition.partition,
                            offset = record.offset,
                            "reply write still not acknowledged after the stuck-gap timeout: the reply sink is failing; the partition's watermark stays held (and fetching pauses) until it succeeds"
                        );
                    }
                }
                continue;
            }
            None => {}
        }
        // The control first: a write woken after its partition was cancelled (a revoke past its
        // timeout) must not go on in that poll, even if it could finish there (its turn at the
        // exactly-once gate came after the revoke's commit), so nothing of the old ownership
        // is written after the revoke's commit.
        tokio::select! {
            biased;
            () = notified => {}
            out = &mut fut => return Some(out),
        }
    }
}
