//! Every result of one harness run, per scenario and per procedure.

use crate::crash::CrashResult;
use crate::max::MaxSearch;
use crate::outcome::{Results, StallRows, describe};
use crate::raw_fetch::RawFetch;
use crate::scenario::Scenario;
use crate::system::System;

/// The results the report is written from.
#[derive(Default)]
pub struct Report {
    /// The scenarios of one run per system and repetition: every run, and the raw fetch limits.
    pub scenarios: Vec<(Scenario, Results, Vec<RawFetch>)>,
    /// S2-max: each system's search.
    pub s2max: Option<(Scenario, Vec<(System, MaxSearch)>)>,
    /// S4: per system, (run without the stalled session, run with it) per repetition.
    pub s4: Option<(Scenario, StallRows)>,
    /// S6: each system's crash run.
    pub s6: Option<(Scenario, Vec<(System, CrashResult)>)>,
}

impl Report {
    /// One line per failed run: its scenario, its system and why.
    pub fn failed(&self) -> Vec<String> {
        self.scenarios
            .iter()
            .flat_map(|(sc, res, _)| {
                res.iter().flat_map(move |(sys, runs)| {
                    runs.iter()
                        .filter(|r| !r.ok())
                        .map(move |r| format!("{} {}: {}", sc.id, sys.name(), describe(r)))
                })
            })
            .chain(self.s4.iter().flat_map(|(sc, rows)| {
                rows.iter().flat_map(move |(sys, runs)| {
                    runs.iter()
                        .flat_map(|(a, b)| [a, b])
                        .filter(|r| !r.ok())
                        .map(move |r| format!("{} {}: {}", sc.id, sys.name(), describe(r)))
                })
            }))
            .chain(self.s6.iter().flat_map(|(sc, rows)| {
                rows.iter()
                    .filter(|(_, r)| !r.result.ok())
                    .map(move |(sys, r)| {
                        format!("{} {}: {}", sc.id, sys.name(), describe(&r.result))
                    })
            }))
            .collect()
    }
}
