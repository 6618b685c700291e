//! The shared HTTP endpoint of the HTTP scenarios (`bench-http-server`): the share of records it
//! fails once, and the report it writes.

/// The share of records the HTTP endpoint answers 503 on their first attempt.
pub const HTTP_TRANSIENT_PCT: u64 = 10;

/// The JSON report of `bench-http-server` (the fields the harness reads).
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct HttpReport {
    pub requests: u64,
    pub batches: u64,
    pub records_sent: u64,
    pub transient: u64,
    pub violations_in_flight: u64,
    pub violations_sequence: u64,
    pub violations_batch: u64,
    pub duplicates: u64,
    pub unreadable: u64,
    /// CreateTime → done answer over every record (a backlog's is mostly time spent waiting).
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
}

impl HttpReport {
    /// Order violations seen from the endpoint's side, and requests it could not read.
    pub fn violations(&self) -> u64 {
        self.violations_in_flight
            + self.violations_sequence
            + self.violations_batch
            + self.unreadable
    }

    /// Records per request (a record sent again counts again).
    pub fn per_request(&self) -> f64 {
        self.records_sent as f64 / self.requests.max(1) as f64
    }
}
