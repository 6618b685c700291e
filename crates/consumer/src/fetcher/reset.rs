//! Out-of-range positions: the log's bounds read, the position moved as `auto_offset_reset`
//! says, and every record skipped by the move reported by range and counted, never silently.

use std::ops::Range;

use orderly_engine::TopicPartition;
use orderly_group::AutoOffsetReset;
use orderly_protocol::messages::list_offsets::{EARLIEST, LATEST};
use orderly_protocol::records::IsolationLevel;

use super::config::FetchConfig;
use crate::metadata_cache::MetadataCache;

/// What to do about a position the broker said is out of range, given the log's bounds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ResetPlan {
    /// Move the position to `to`; the records at `skipped` will never be handled.
    Move {
        to: i64,
        skipped: Option<Range<i64>>,
    },
    /// The position is inside the log again (the log moved, or the leader changed): fetch again.
    Retry,
    /// `auto_offset_reset` is `none`: the driver stops with an error.
    Fail,
}

/// Decides where a position `from` goes when the broker said it is out of range, with the log
/// now spanning `[start, end)` (`end` is the high watermark; `latest` is where the `Latest`
/// policy starts, the last stable offset under read_committed).
///
/// - `from < start` (retention or DeleteRecords removed records below the new start): `Earliest`
///   moves to `start` and skips `[from, start)`; `Latest` moves to `latest` and skips
///   `[from, latest)`.
/// - `from > end` (the log was cut below the position: an unclean leader election): both policies
///   move to `end`. The engine has already taken every offset below `from`, so the records
///   written at `[end, from)` from now on are taken for records it has seen and are not handled:
///   that range is reported as skipped. (Going back to `start`, as Java does for `Earliest`, would
///   only re-read records the engine drops as already seen.)
/// - `none` fails in both cases; a position inside the log is fetched again.
pub(super) fn plan_reset(
    policy: AutoOffsetReset,
    from: i64,
    start: i64,
    end: i64,
    latest: i64,
) -> ResetPlan {
    let skip = |r: Range<i64>| (!r.is_empty()).then_some(r);
    if from < start {
        match policy {
            AutoOffsetReset::Earliest => ResetPlan::Move {
                to: start,
                skipped: skip(from..start),
            },
            AutoOffsetReset::Latest => ResetPlan::Move {
                to: latest.max(start),
                skipped: skip(from..latest.max(start)),
            },
            AutoOffsetReset::None => ResetPlan::Fail,
        }
    } else if from > end {
        match policy {
            AutoOffsetReset::None => ResetPlan::Fail,
            AutoOffsetReset::Earliest | AutoOffsetReset::Latest => ResetPlan::Move {
                to: end,
                skipped: skip(end..from),
            },
        }
    } else {
        ResetPlan::Retry
    }
}

/// Reads the log's bounds for `tp` and plans the reset of position `from` (see [`plan_reset`]).
pub(super) async fn out_of_range(
    cluster: &MetadataCache,
    config: &FetchConfig,
    policy: AutoOffsetReset,
    tp: &TopicPartition,
    from: i64,
) -> Result<ResetPlan, crate::DriverError> {
    let (topic, partition) = (&*tp.topic, tp.partition);
    let start = cluster
        .list_offset(topic, partition, EARLIEST, IsolationLevel::ReadUncommitted)
        .await?;
    let end = cluster
        .list_offset(topic, partition, LATEST, IsolationLevel::ReadUncommitted)
        .await?;
    let latest = if config.isolation == IsolationLevel::ReadUncommitted {
        end
    } else {
        cluster
            .list_offset(topic, partition, LATEST, config.isolation)
            .await?
    };
    Ok(plan_reset(policy, from, start, end, latest))
}

/// Logs a reset; an error with the range if records are skipped, which are also counted in
/// `orderly_offset_reset_skipped_records_total` (offsets, so compacted gaps count too).
pub(super) fn report_reset(
    tp: &TopicPartition,
    policy: AutoOffsetReset,
    from: i64,
    to: i64,
    skipped: Option<Range<i64>>,
) {
    let labels = [
        ("topic", tp.topic.to_string()),
        ("partition", tp.partition.to_string()),
    ];
    metrics::counter!("orderly_offset_resets_total", &labels).increment(1);
    match skipped {
        Some(r) => {
            let n = u64::try_from(r.end - r.start).unwrap_or(0);
            metrics::counter!("orderly_offset_reset_skipped_records_total", &labels).increment(n);
            tracing::error!(
                topic = %tp.topic,
                partition = tp.partition,
                ?policy,
                from,
                to,
                skipped_from = r.start,
                skipped_to = r.end,
                skipped = n,
                "offset out of range: position reset; the records at offsets [{}, {}) will not be handled",
                r.start,
                r.end
            );
        }
        None => {
            tracing::warn!(topic = %tp.topic, partition = tp.partition, ?policy, from, to, "offset out of range: position reset, nothing skipped");
        }
    }
}
