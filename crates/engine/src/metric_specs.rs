//! The metrics the engine emits, each with its kind, labels and meaning, and [`MetricSpec`], the
//! type every orderly crate that emits metrics lists its own in.
//!
//! Each crate's `metric_specs::METRICS` is the one place a metric is named and explained:
//! [`describe`] hands the descriptions to the installed recorder (Prometheus shows them as
//! `# HELP`), and `orderly reference metrics` prints them as `docs/reference/metrics.md`, which
//! `cargo xtask tidy` compares with the metric names the code emits.

/// What a metric is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// Only grows.
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution of observations.
    Histogram,
}

impl MetricKind {
    /// `counter`, `gauge` or `histogram`.
    pub fn name(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// One metric: its name, kind, label keys and meaning.
#[derive(Clone, Copy, Debug)]
pub struct MetricSpec {
    /// The name emitted, `orderly_*`.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// The label keys every sample carries (empty: none).
    pub labels: &'static [&'static str],
    /// What it measures, one sentence or two.
    pub help: &'static str,
}

/// Describes `specs` to the installed recorder (a no-op without one). Call it after installing
/// the recorder.
pub fn describe(specs: &[MetricSpec]) {
    for s in specs {
        match s.kind {
            MetricKind::Counter => metrics::describe_counter!(s.name, s.help),
            MetricKind::Gauge => metrics::describe_gauge!(s.name, s.help),
            MetricKind::Histogram => metrics::describe_histogram!(s.name, s.help),
        }
    }
}

const PARTITION: &[&str] = &["topic", "partition"];

const fn counter(name: &'static str, help: &'static str) -> MetricSpec {
    MetricSpec {
        name,
        kind: MetricKind::Counter,
        labels: &[],
        help,
    }
}

const fn gauge(name: &'static str, help: &'static str) -> MetricSpec {
    MetricSpec {
        name,
        kind: MetricKind::Gauge,
        labels: &[],
        help,
    }
}

const fn histogram(name: &'static str, help: &'static str) -> MetricSpec {
    MetricSpec {
        name,
        kind: MetricKind::Histogram,
        labels: &[],
        help,
    }
}

const fn per_partition(spec: MetricSpec) -> MetricSpec {
    MetricSpec {
        labels: PARTITION,
        ..spec
    }
}

/// Every metric the engine emits.
pub const METRICS: &[MetricSpec] = &[
    counter(
        "orderly_records_handled_total",
        "Records the handler finished successfully.",
    ),
    MetricSpec {
        labels: &["kind"],
        ..counter(
            "orderly_records_failed_total",
            "Handler attempts that failed: kind=transient (retried, timed out included) or kind=permanent (dead-lettered).",
        )
    },
    counter("orderly_records_retried_total", "Retries scheduled."),
    counter(
        "orderly_records_dead_lettered_total",
        "Records whose dead-letter write was acknowledged.",
    ),
    counter(
        "orderly_records_deduplicated_total",
        "Records skipped because their session already handled their event id (--dedup-header).",
    ),
    counter(
        "orderly_records_stuck_total",
        "Records dead-lettered because they held their partition back past the stuck timeout.",
    ),
    counter(
        "orderly_records_abandoned_total",
        "Records given up without finishing (revoke, lost partition, shutdown deadline); never committed, handled again by the next owner.",
    ),
    counter(
        "orderly_records_restored_total",
        "Fetched records skipped because the commit metadata lists them as finished before.",
    ),
    counter(
        "orderly_dlq_send_failures_total",
        "Dead-letter writes that failed (each is retried; the record waits).",
    ),
    counter(
        "orderly_dlq_stalled_total",
        "Records whose dead-letter write was still unacknowledged when the stuck timeout passed (the DLQ is failing; the watermark stays held).",
    ),
    counter(
        "orderly_replies_total",
        "Replies acknowledged by the reply sink.",
    ),
    counter(
        "orderly_reply_send_failures_total",
        "Reply writes that failed (each is retried; the record waits).",
    ),
    counter(
        "orderly_reply_stalled_total",
        "Records whose replies were still unacknowledged when the stuck timeout passed (the watermark stays held).",
    ),
    counter(
        "orderly_ordering_violations_total",
        "Records whose sequence header (--seq-header) did not increase within their session.",
    ),
    counter(
        "orderly_commit_failures_total",
        "Offset commits that failed (each is retried).",
    ),
    counter(
        "orderly_final_commit_failures_total",
        "Partitions whose final commit (at shutdown or handover) gave up at its deadline.",
    ),
    counter(
        "orderly_commit_metadata_truncated_total",
        "Commits whose completed offsets above the commit point did not fit the commit metadata limit (the records left out are handled again after a restart).",
    ),
    counter(
        "orderly_commit_metadata_rejected_total",
        "Assignments whose commit metadata claimed completed offsets at or above the high watermark and was ignored.",
    ),
    gauge(
        "orderly_records_in_flight",
        "Records admitted and not finished, across partitions.",
    ),
    gauge(
        "orderly_buffered_bytes",
        "Bytes of admitted, unfinished records, across partitions (the global budget's use).",
    ),
    gauge(
        "orderly_paused_partitions",
        "Partitions whose fetching is paused for backpressure.",
    ),
    gauge(
        "orderly_active_sessions",
        "Sessions with a record running or queued, or idle for less than the session idle timeout.",
    ),
    gauge(
        "orderly_ownership_in_doubt",
        "1 while the member cannot confirm it still owns its partitions (no handler call starts), else 0.",
    ),
    gauge(
        "orderly_handler_available",
        "1 while the handler reports itself available, 0 while records wait for it (the stuck timeout is suspended).",
    ),
    gauge(
        "orderly_parked_sessions",
        "Sessions parked after a dead letter (--dlq-mode park-session).",
    ),
    per_partition(gauge(
        "orderly_partition_watermark",
        "The partition's commit point: the next offset a new owner reads.",
    )),
    per_partition(gauge(
        "orderly_partition_high_watermark",
        "The partition's high watermark as last fetched.",
    )),
    per_partition(gauge(
        "orderly_partition_lag",
        "High watermark minus commit point.",
    )),
    per_partition(gauge(
        "orderly_partition_pending_records",
        "Records of an owned partition not finished yet: in flight, plus those not fetched yet up to the high watermark, less those finished before a restart.",
    )),
    per_partition(gauge(
        "orderly_partition_oldest_in_flight_seconds",
        "Age of the partition's oldest unfinished record.",
    )),
    histogram(
        "orderly_handler_duration_seconds",
        "Time one handler attempt took, from its start to the handler's answer (a batch's attempt counts once).",
    ),
    histogram(
        "orderly_commit_duration_seconds",
        "Time an offset commit took, request to acknowledgement.",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_follow_prometheus_conventions() {
        let mut seen = std::collections::HashSet::new();
        for m in METRICS {
            assert!(seen.insert(m.name), "{} listed twice", m.name);
            assert!(m.name.starts_with("orderly_"), "{}", m.name);
            assert_eq!(
                m.kind == MetricKind::Counter,
                m.name.ends_with("_total"),
                "{}: counters and only counters end in _total",
                m.name
            );
            assert!(m.help.ends_with('.'), "{}: help is a sentence", m.name);
        }
    }
}
