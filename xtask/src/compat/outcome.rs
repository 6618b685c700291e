//! What one release did, and how a run prints it: the negotiation per API, then pass or fail.

use orderly_protocol::Negotiated;
use orderly_testkit::releases::Release;

/// What one release did.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The release.
    pub release: Release,
    /// Whether orderly is expected to refuse it (older than the floor).
    pub expect_refused: bool,
    /// The negotiation per API (empty if the connection was refused).
    pub negotiated: Vec<Negotiated>,
    /// The refusal line, if the broker was refused.
    pub refused: Option<String>,
    /// Failed checks (empty: the release passes).
    pub failures: Vec<String>,
    /// What the run showed, one short line.
    pub summary: String,
}

impl Outcome {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// `vA-vB`, or `vA` for a single version.
fn range((a, b): (i16, i16)) -> String {
    if a == b {
        format!("v{a}")
    } else {
        format!("v{a}-v{b}")
    }
}

/// Prints what orderly negotiated with the release, then whether it passed and why not.
pub(super) fn print_outcome(o: &Outcome) {
    if !o.negotiated.is_empty() {
        println!("Apache Kafka {}: what orderly negotiated", o.release);
        println!(
            "  {:<34} {:>8} {:>8} {:>6}",
            "API", "orderly", "broker", "used"
        );
        for n in &o.negotiated {
            println!(
                "  {:<34} {:>8} {:>8} {:>6}",
                format!("{}{}", n.api, if n.required { "" } else { " (optional)" }),
                range(n.ours),
                n.offered.map(range).unwrap_or_else(|| "-".into()),
                n.chosen
                    .map(|v| format!("v{v}"))
                    .unwrap_or_else(|| "-".into()),
            );
        }
    }
    println!(
        "  {} {}: {}",
        if o.passed() { "PASS" } else { "FAIL" },
        o.release,
        o.summary
    );
    for f in &o.failures {
        println!("    - {f}");
    }
}
