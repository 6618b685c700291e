//! The metrics the Kafka driver emits (fetching, offset resets, transactions), each with its
//! kind, labels and meaning; see [`orderly_engine::metric_specs`].

use orderly_engine::metric_specs::{MetricKind, MetricSpec};

/// Every metric this crate emits.
pub const METRICS: &[MetricSpec] = &[
    MetricSpec {
        name: "orderly_fetched_records_total",
        kind: MetricKind::Counter,
        labels: &[],
        help: "Records fetched and handed to the engine.",
    },
    MetricSpec {
        name: "orderly_fetch_throttled_seconds_total",
        kind: MetricKind::Counter,
        labels: &[],
        help: "Whole seconds the brokers asked fetching to wait for their quota.",
    },
    MetricSpec {
        name: "orderly_fetch_paused",
        kind: MetricKind::Gauge,
        labels: &["topic", "partition"],
        help: "1 while fetching of the partition is paused for backpressure, else 0.",
    },
    MetricSpec {
        name: "orderly_fetch_seconds",
        kind: MetricKind::Histogram,
        labels: &[],
        help: "Time one Fetch request to a leader took, sent to answered.",
    },
    MetricSpec {
        name: "orderly_offset_resets_total",
        kind: MetricKind::Counter,
        labels: &["topic", "partition"],
        help: "Out-of-range fetch positions moved as --offset-reset says.",
    },
    MetricSpec {
        name: "orderly_offset_reset_skipped_records_total",
        kind: MetricKind::Counter,
        labels: &["topic", "partition"],
        help: "Offsets an offset reset skipped: records never handled (compacted gaps count too).",
    },
    MetricSpec {
        name: "orderly_transactions_committed_total",
        kind: MetricKind::Counter,
        labels: &[],
        help: "--exactly-once: transactions committed.",
    },
    MetricSpec {
        name: "orderly_transactions_rewound_total",
        kind: MetricKind::Counter,
        labels: &[],
        help: "--exactly-once: transactions aborted and their partitions rewound to the committed offsets (their records are handled again).",
    },
    MetricSpec {
        name: "orderly_transactions_failed_total",
        kind: MetricKind::Counter,
        labels: &[],
        help: "--exactly-once: transactions that failed beyond recovery and stopped the consumer.",
    },
];
