//! S2-max: per system, a search for the highest offered rate held with p99 ≤ 200 ms, doubling
//! then bisecting, the systems' searches interleaved step by step.

use crate::command::RunOpts;
use crate::ctx::Ctx;
use crate::outcome::{RunResult, print_result};
use crate::run::run_one;
use crate::scenario::Scenario;
use crate::system::System;

/// One step of an S2-max search.
#[derive(Debug, Clone)]
pub struct MaxStep {
    /// The rate offered, records/s.
    pub offered: u64,
    /// The run at that rate.
    pub result: RunResult,
    /// Verified, p99 ≤ 200 ms, and the generator offered ≥ 95 % of the rate.
    pub held: bool,
    /// The generator achieved < 95 % of the offered rate.
    pub generator_short: bool,
    /// The first try of this step, when it was offered again because the producer's own p99
    /// (CreateTime → acknowledged) was over the budget.
    pub retried: Option<Box<RunResult>>,
}

impl MaxStep {
    /// Whether the load generator's own writes had a p99 over the 200 ms budget.
    fn broker_over_budget(&self) -> bool {
        self.result.load_ack_p99_ms.is_some_and(|p| p > 200.0)
    }
}

/// One system's S2-max search: doubling from the start rate while each step holds, then bisection
/// between the highest rate held and the lowest not held.
#[derive(Debug, Clone, Default)]
pub struct MaxSearch {
    /// The steps so far.
    pub steps: Vec<MaxStep>,
    /// Highest rate held.
    pub lo: Option<u64>,
    /// Lowest rate not held.
    pub hi: Option<u64>,
    /// The next rate to try; `None` once the search ended.
    pub next: Option<u64>,
}

impl MaxSearch {
    /// A search whose first step offers `start`.
    pub fn new(start: u64) -> Self {
        Self {
            next: Some(start),
            ..Self::default()
        }
    }

    /// The highest rate the generator achieved in any step (its own cap, when it fell short).
    pub fn generator_cap(&self) -> Option<f64> {
        self.steps
            .iter()
            .filter(|s| s.generator_short)
            .filter_map(|s| s.result.achieved_rate)
            .max_by(f64::total_cmp)
    }

    /// Adds `step` and picks the next rate, none after `max_steps` steps.
    pub fn record(&mut self, step: MaxStep, max_steps: usize) {
        let rate = step.offered;
        if step.held {
            self.lo = Some(self.lo.map_or(rate, |l| l.max(rate)));
        } else {
            self.hi = Some(self.hi.map_or(rate, |h| h.min(rate)));
        }
        self.steps.push(step);
        self.next = match (self.lo, self.hi) {
            _ if self.steps.len() >= max_steps => None,
            (Some(lo), None) => Some(lo * 2),
            (None, Some(hi)) => (hi / 2 >= 1_000).then_some(hi / 2),
            // Stop once the bracket is within 10 % (rounded to 1,000 records/s).
            (Some(lo), Some(hi)) if hi > lo && (hi - lo) * 10 > lo => {
                Some(((lo + hi) / 2).div_ceil(1_000) * 1_000)
            }
            _ => None,
        };
    }
}

/// S2-max for every system, interleaved: step k of each system's search, then step k + 1 (each
/// search picks its next rate from its own last step). A step offers the rate for the scenario's
/// seconds on a topic of its own; it holds when the run verifies, p99 ≤ 200 ms, and the load
/// generator achieved ≥ 95 % of the rate (otherwise the generator, not the system, is the limit,
/// and that is reported).
pub async fn s2_max_all(ctx: &Ctx, base: &Scenario, max_steps: usize) -> Vec<(System, MaxSearch)> {
    let mut searches: Vec<(System, MaxSearch)> = base
        .systems
        .iter()
        .map(|s| (*s, MaxSearch::new(S2MAX_START)))
        .collect();
    loop {
        let mut any = false;
        for (sys, search) in &mut searches {
            let Some(rate) = search.next else { continue };
            any = true;
            let sc = Scenario {
                records: (rate as f64 * base.seconds) as u64,
                rate,
                ..base.clone()
            };
            let mut step = max_step(ctx, &sc, *sys).await;
            // The producer's own writes took longer than the budget: the broker (busy on this
            // shared machine), not the consumer, failed the step. Offered once more, alike for
            // every system, so one noisy moment does not end a search.
            if !step.held && step.broker_over_budget() {
                eprintln!(
                    "      the producer's own p99 was over 200 ms: the step is offered again"
                );
                let again = max_step(ctx, &sc, *sys).await;
                step = MaxStep {
                    retried: Some(Box::new(step.result)),
                    ..again
                };
            }
            search.record(step, max_steps);
        }
        if !any {
            return searches;
        }
    }
}

/// Runs one S2-max step: `sc` offered to `sys`.
pub async fn max_step(ctx: &Ctx, sc: &Scenario, sys: System) -> MaxStep {
    let r = run_one(ctx, sc, sys, None, &RunOpts::default()).await;
    print_result(sc, sys, &r);
    let p99 = r.verdict.as_ref().map_or(f64::MAX, |v| v.latency_ms[1]);
    let generator_short = r.achieved_rate.is_some_and(|a| a < 0.95 * sc.rate as f64);
    let held = r.ok() && p99 <= 200.0 && !generator_short;
    MaxStep {
        offered: sc.rate,
        result: r,
        held,
        generator_short,
        retried: None,
    }
}

/// Where every S2-max search starts (records/s).
pub const S2MAX_START: u64 = 10_000;

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A step offered `offered` records/s, achieved in full, `held` or not.
    pub fn step(offered: u64, held: bool) -> MaxStep {
        MaxStep {
            offered,
            result: RunResult {
                verdict: None,
                error: None,
                achieved_rate: Some(offered as f64),
                load_ack_p99_ms: None,
                http: None,
                replies: None,
            },
            held,
            generator_short: false,
            retried: None,
        }
    }

    /// Feeds a search a system that holds every rate up to `max`; returns the rates tried.
    fn search(max: u64, budget: usize) -> (MaxSearch, Vec<u64>) {
        let mut s = MaxSearch::new(10_000);
        let mut tried = Vec::new();
        while let Some(r) = s.next {
            tried.push(r);
            s.record(step(r, r <= max), budget);
        }
        (s, tried)
    }

    #[test]
    fn s2_max_doubles_then_bisects_to_within_ten_percent() {
        let (s, tried) = search(57_000, 20);
        assert_eq!(&tried[..4], &[10_000, 20_000, 40_000, 80_000]);
        let (lo, hi) = (s.lo.unwrap(), s.hi.unwrap());
        assert!(lo <= 57_000 && hi > 57_000, "{lo} {hi}");
        assert!((hi - lo) * 10 <= lo, "{lo} {hi}");
    }

    #[test]
    fn s2_max_halves_when_the_start_is_not_held_and_respects_the_budget() {
        let (s, tried) = search(3_000, 20);
        assert_eq!(&tried[..3], &[10_000, 5_000, 2_500]);
        assert!(s.lo.unwrap() <= 3_000);
        let (_, tried) = search(1_000_000, 4);
        assert_eq!(tried.len(), 4);
        let (s, _) = search(10, 20);
        assert_eq!(s.lo, None, "nothing held down to 1,000 records/s");
    }

    /// A step that failed while the producer's own p99 was over the budget is the broker's
    /// failure, one that failed with the producer within it is the system's.
    #[test]
    fn s2_max_tells_a_broker_over_budget() {
        let mut first = step(80_000, false);
        first.result.load_ack_p99_ms = Some(366.0);
        assert!(first.broker_over_budget());
        let mut own = step(80_000, false);
        own.result.load_ack_p99_ms = Some(68.0);
        assert!(!own.broker_over_budget());
        assert!(
            !step(80_000, false).broker_over_budget(),
            "no figure, no excuse"
        );
    }
}
