//! The metrics the handlers emit, each with its kind, labels and meaning; see
//! [`orderly_engine::metric_specs`].

use orderly_engine::metric_specs::{MetricKind, MetricSpec};

/// Every metric this crate emits.
pub const METRICS: &[MetricSpec] = &[
    MetricSpec {
        name: "orderly_http_responses_total",
        kind: MetricKind::Counter,
        labels: &["status"],
        help: "HTTP handler: answers from the endpoint, by status code.",
    },
    MetricSpec {
        name: "orderly_http_request_seconds",
        kind: MetricKind::Histogram,
        labels: &[],
        help: "HTTP handler: time from sending a request to its answer's status (or its timeout).",
    },
    MetricSpec {
        name: "orderly_batch_answers_invalid_total",
        kind: MetricKind::Counter,
        labels: &["handler"],
        help: "Batch answers that could not be read (handler=http or pipe); the whole batch is retried.",
    },
    MetricSpec {
        name: "orderly_pipe_restarts_total",
        kind: MetricKind::Counter,
        labels: &[],
        help: "Pipe handler: restarts of the child (it died, wrote too long a line or held a record past its attempt); what it held is retried.",
    },
];
