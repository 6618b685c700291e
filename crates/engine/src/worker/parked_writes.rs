//! Parked-session writes inside a record's future: a dead letter of a session in park mode, and
//! the handled last record of a replay round, are in the store before the record's completion is
//! reported, so a commit past a record implies the store holds what it did.

use super::context::{Ctx, Outcome};
use super::session::session_id;
use super::watch::watch_dead_letter;
use crate::config::DlqMode;
use crate::handler::{DeadLetterSink, Handler};
use crate::handoff::control::PartitionControl;
use crate::parked::ParkedWrite;
use crate::record::Record;

/// Whether a handled record may end a parked session's replay round (see `parked`).
pub(super) fn ends_round<H, D>(ctx: &Ctx<H, D>, record: &Record) -> bool {
    ctx.config.dlq_mode == DlqMode::ParkSession
        && record.header(crate::parked::REPLAY_LAST).is_some()
}

/// The last record of a replay round was handled: the session's release (or its next `since`)
/// is made durable before the record counts as done.
pub(super) async fn round_handled<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartitionControl,
    record: &Record,
) -> Outcome {
    let write = session_id(&ctx.config.session_id, record)
        .and_then(|sid| ctx.parked.round_handled(&record.partition, sid, record));
    match write {
        Some(w) if !persist_parked(ctx, part, record, &w).await => Outcome::Abandoned,
        _ => Outcome::Handled,
    }
}

/// Writes a parked-session change to the store (if one is set), retried with the DLQ's backoff
/// until it succeeds (true) or the partition is cancelled (false).
pub(super) async fn persist_parked<H: Handler, D: DeadLetterSink>(
    ctx: &Ctx<H, D>,
    part: &PartitionControl,
    record: &Record,
    write: &ParkedWrite,
) -> bool {
    let Some(store) = ctx.parked.store() else {
        return true;
    };
    let salt = part.salt ^ (record.offset as u64) ^ 0xa5a5;
    let mut failures = 0u32;
    // No stuck report for this step: the record's terminal write is already done.
    let mut stalled = true;
    loop {
        match watch_dead_letter(ctx, part, record, &mut stalled, write.start(&**store)).await {
            None => return false,
            Some(Ok(())) => return true,
            Some(Err(e)) => {
                failures += 1;
                let delay = ctx.config.dlq_retry.delay(ctx.jitter_seed, salt, failures);
                tracing::warn!(topic = %record.partition.topic, partition = record.partition.partition,
                    offset = record.offset, failures, ?delay, error = %e, "parked-session store write failed; retrying");
                let wait =
                    watch_dead_letter(ctx, part, record, &mut stalled, tokio::time::sleep(delay));
                if wait.await.is_none() {
                    return false;
                }
            }
        }
    }
}
