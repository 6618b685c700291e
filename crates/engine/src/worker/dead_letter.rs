//! The dead-letter path: a record counts as done only once the dead-letter queue acknowledged it
//! (a failing write is retried, never skipped by the stuck-gap rule).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering::Relaxed;
use std::time::SystemTime;

use futures::FutureExt;
use tokio::time::Instant;

use super::context::{Ctx, Outcome, panic_text};
use super::parked_writes::persist_parked;
use super::session::session_id;
use super::watch::watch_dead_letter;
use crate::config::DlqMode;
use crate::handler::{DeadLetter, DeadLetterReason, DeadLetterSink, DlqError, Handler};
use crate::handoff::control::{PartitionControl, wait_released};
use crate::record::Record;

pub(super) fn wall_clock(at: Instant) -> SystemTime {
    SystemTime::now()
        .checked_sub(at.elapsed())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// One dead-letter write; a panicking sink counts as a failed write (retried with backoff).
pub(super) fn send_letter<'a, H, D: DeadLetterSink>(
    ctx: &'a Ctx<H, D>,
    letter: &'a DeadLetter,
) -> impl Future<Output = Result<(), DlqError>> + Send + 'a {
    AssertUnwindSafe(ctx.dlq.send(letter))
        .catch_unwind()
        .map(|r| {
            r.unwrap_or_else(|p| {
                Err(DlqError(format!(
                    "dead-letter sink panicked: {}",
                    panic_text(&*p)
                )))
            })
        })
}

/// Dead-letters a record that held its partition's watermark past the stuck timeout.
pub(super) async fn dead_letter_stuck<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartitionControl,
    record: &Record,
    attempts: u32,
    first: Instant,
    session_hash: u64,
    session: bool,
) -> Outcome {
    let reason = DeadLetterReason::Stuck;
    dead_letter(
        ctx,
        part,
        record,
        reason,
        attempts,
        first,
        first,
        session_hash,
        session,
    )
    .await
}

/// Writes the dead letter, retrying failed writes with backoff until acknowledged or cancelled.
#[allow(clippy::too_many_arguments)]
pub(super) async fn dead_letter<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartitionControl,
    record: &Record,
    reason: DeadLetterReason,
    attempts: u32,
    first: Instant,
    last: Instant,
    session_hash: u64,
    session: bool,
) -> Outcome {
    let cfg = &ctx.config;
    let offset = record.offset;
    let salt = part.salt ^ (offset as u64) ^ 0x5a5a;
    if reason == DeadLetterReason::Stuck {
        ctx.metrics.stuck.increment(1);
        ctx.stats.0.stuck.fetch_add(1, Relaxed);
        let sid = session_id(&cfg.session_id, record)
            .filter(|_| session)
            .map(String::from_utf8_lossy);
        tracing::error!(
            topic = %record.partition.topic,
            partition = record.partition.partition,
            offset,
            session = ?sid,
            session_hash,
            attempts,
            "stuck record held the watermark past the stuck-gap timeout; cancelled and sent to the DLQ"
        );
    }
    let letter = DeadLetter {
        record: record.clone(),
        reason,
        attempts,
        first_attempt: wall_clock(first),
        last_attempt: wall_clock(last),
    };
    let mut failures = 0u32;
    // A record dead-lettered *because* it was stuck has already used up its stuck flag.
    let mut stalled = letter.reason == DeadLetterReason::Stuck;
    loop {
        if part.is_held() && Box::pin(wait_released(part)).await.is_err() {
            return Outcome::Abandoned;
        }
        // The dead-letter write is the terminal step: the stuck-gap rule cannot skip it (that
        // would lose the record), but when the stuck timeout passes while it is still failing
        // the stall is reported once, loudly; the held watermark then pauses the partition.
        let send = watch_dead_letter(ctx, part, record, &mut stalled, send_letter(ctx, &letter));
        match send.await {
            None => return Outcome::Abandoned,
            Some(Ok(())) => {
                if session && cfg.dlq_mode == DlqMode::ParkSession {
                    if let Some(sid) = session_id(&cfg.session_id, record) {
                        let parked = matches!(letter.reason, DeadLetterReason::Parked(_));
                        let write = ctx.parked.dead_lettered(
                            &record.partition,
                            sid,
                            record,
                            letter.reason.code(),
                            parked,
                        );
                        if !Box::pin(persist_parked(ctx, part, record, &write)).await {
                            return Outcome::Abandoned;
                        }
                    }
                }
                return Outcome::DeadLettered;
            }
            Some(Err(e)) => {
                failures += 1;
                ctx.metrics.dlq_failures.increment(1);
                let delay = cfg.dlq_retry.delay(ctx.jitter_seed, salt, failures);
                tracing::warn!(topic = %record.partition.topic, partition = record.partition.partition, offset, failures, ?delay, error = %e, "dead-letter write failed; retrying");
                let wait =
                    watch_dead_letter(ctx, part, record, &mut stalled, tokio::time::sleep(delay));
                if wait.await.is_none() {
                    return Outcome::Abandoned;
                }
            }
        }
    }
}
