//! The scenarios, each a data value: its workload (records, sessions, partitions, failure mix,
//! handler work, offered rate), its procedure, the systems that run it, and how often; the table
//! of every scenario, and the selection `--scenario` makes from it.

use std::time::Duration;

use orderly_benches::verify::Expected;

use crate::args::Args;
use crate::endpoint::HTTP_TRANSIENT_PCT;
use crate::system::{Suite, System};

/// One scenario's workload.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The name reports and `--scenario` use.
    pub id: String,
    /// What it measures, in a few words.
    pub what: String,
    /// Records offered (a live scenario: over `seconds` at `rate`).
    pub records: u64,
    /// Sessions the records are spread over, round robin.
    pub sessions: u64,
    /// Partitions of its topic.
    pub partitions: i32,
    /// The failure mix: a record fails once when `fnv1a64(event-id) % fail_mod == 0` (0: none).
    pub fail_mod: u64,
    /// Handler work per record (a sleep), µs.
    pub work_us: u64,
    /// Open-loop rate (records/s); 0 = backlog.
    pub rate: u64,
    /// How long a live scenario offers its rate.
    pub seconds: f64,
    /// The systems that run it.
    pub systems: Vec<System>,
    /// Its procedure.
    pub kind: Kind,
    /// How long a run may take after the load ended (live) or after it started (backlog).
    pub limit_s: f64,
    /// Repetitions in the full form when `--reps` does not say (the quick and smoke forms run
    /// every scenario once).
    pub full_reps: usize,
    /// Whether each repetition also measures the raw fetch limit on the scenario's topic.
    pub raw_fetch: bool,
    /// Whether it measures memory per session: the report divides each system's peak RSS by its
    /// sessions.
    pub memory_per_session: bool,
    /// Whether the quick form runs it when `--scenario` names none.
    pub in_quick_form: bool,
}

/// Scenarios with a procedure of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One run per system and repetition.
    Plain,
    /// S2-max: a search for the highest rate with p99 ≤ 200 ms, per system.
    Max,
    /// S4: a run with one session stalled for 10 s against the same run without.
    Stall,
    /// S6: three processes in one group, one killed every 10 s and restarted.
    Crash,
    /// S1-http, S1k-http, S2-http: one run per system and repetition, every system posting the
    /// records to the shared endpoint (`bench-http-server`), which judges the run.
    Http,
    /// S1k-reply: one run per system and repetition, each record answered with a reply to a
    /// topic of the run, which is read back with `read_committed` and checked.
    Reply,
}

impl Kind {
    /// The systems that run in scenarios of this kind.
    pub fn suite(self) -> Suite {
        match self {
            Kind::Http => Suite::Http,
            Kind::Reply => Suite::Reply,
            Kind::Plain | Kind::Max | Kind::Stall | Kind::Crash => Suite::Handler,
        }
    }

    /// One run per system and repetition (no procedure of its own).
    pub fn repeated(self) -> bool {
        matches!(self, Kind::Plain | Kind::Http | Kind::Reply)
    }
}

/// S4's stalled session, its start after the first record handled, and its length.
pub const STALL: (u64, u64, u64) = (7, 2_000, 10_000);

/// Every scenario of the form `args` names (full, quick or smoke), each with the systems of
/// `systems` whose suite runs it.
fn table(args: &Args, systems: &[System]) -> Vec<Scenario> {
    let suite = |kind: Kind| -> Vec<System> {
        systems
            .iter()
            .copied()
            .filter(|s| s.suite() == kind.suite())
            .collect()
    };
    let q = args.quick;
    let sc =
        |id: &str, what: &str, records, sessions, fail_mod, work_us, rate, seconds: f64| Scenario {
            id: id.into(),
            what: what.into(),
            records,
            sessions,
            partitions: 12,
            fail_mod,
            work_us,
            rate,
            seconds,
            systems: suite(Kind::Plain),
            kind: Kind::Plain,
            limit_s: if rate > 0 { 60.0 } else { 300.0 },
            full_reps: 3,
            raw_fetch: false,
            memory_per_session: false,
            in_quick_form: true,
        };
    if args.smoke {
        return vec![sc("S1", "smoke", 2_000, 10, 10, 0, 0, 0.0)];
    }
    let mut v = vec![
        sc("S1", "backlog, 10 % transient", 50_000, 10, 10, 0, 0, 0.0),
        sc(
            "S1-1k",
            "backlog, 1,000 sessions, 10 % transient",
            if q { 50_000 } else { 200_000 },
            1_000,
            10,
            0,
            0,
            0.0,
        ),
    ];
    if !q {
        let mut p1 = sc(
            "S1-p1",
            "backlog, 1 partition, 10 % transient",
            50_000,
            10,
            10,
            0,
            0,
            0.0,
        );
        p1.partitions = 1;
        v.push(p1);
    }
    let live_secs = if q { 3.0 } else { 5.0 };
    v.push(sc(
        "S1-live",
        "10,000 records/s offered, 10 % transient",
        (10_000.0 * live_secs) as u64,
        10,
        10,
        0,
        10_000,
        live_secs,
    ));
    let s2_secs = if q { 10.0 } else { 60.0 };
    let mut s2 = sc(
        "S2",
        "50,000 records/s offered, 1 % transient",
        (50_000.0 * s2_secs) as u64,
        1_000,
        100,
        0,
        50_000,
        s2_secs,
    );
    // A system that falls minutes behind the load has failed S2 anyway.
    s2.limit_s = 30.0;
    // Once in the full form: it offers 60 s of load, and the full form stays within 30 minutes.
    s2.full_reps = 1;
    v.push(s2);
    let mut m = sc(
        "S2-max",
        "highest offered rate with p99 <= 200 ms",
        0,
        1_000,
        0,
        0,
        0,
        if q { 4.0 } else { 6.0 },
    );
    m.kind = Kind::Max;
    // A step whose records are not all handled 10 s after the load ended did not hold.
    m.limit_s = 10.0;
    m.in_quick_form = false;
    v.push(m);
    let s3_records = if q { 200_000 } else { 1_000_000 };
    // Bounded (a slow system would take minutes per work level); a run still reading at the
    // limit is reported as not finished.
    let s3_limit = if q { 60.0 } else { 120.0 };
    let mut s3 = sc(
        "S3-0",
        "saturation, no handler work",
        s3_records,
        10_000,
        0,
        0,
        0,
        0.0,
    );
    s3.limit_s = s3_limit;
    // The raw fetch limit is measured beside each S3 work level, on the same topic.
    s3.raw_fetch = true;
    // Its goal is a ratio of two ~1 s runs, and single runs of either vary from one run to the
    // next on a shared machine: in the full form it runs five times, each repetition with its raw
    // fetch, and the medians are compared.
    s3.full_reps = 5;
    v.push(s3);
    if !q {
        for (id, what, work) in [
            ("S3-100us", "saturation, 100 µs handler work", 100),
            ("S3-1ms", "saturation, 1 ms handler work", 1_000),
        ] {
            let mut s3 = sc(id, what, s3_records, 10_000, 0, work, 0, 0.0);
            s3.limit_s = s3_limit;
            s3.raw_fetch = true;
            // Once in the full form: 1,000,000 records per work level.
            s3.full_reps = 1;
            v.push(s3);
        }
    }
    // S4: live at a rate every system holds on this machine (a system that falls behind S2's
    // rate would measure its backlog, not the isolation).
    let s4_rate = 5_000;
    let s4_secs = (STALL.1 + STALL.2) as f64 / 1000.0 + 3.0;
    let mut s4 = sc(
        "S4",
        "slow-session isolation: one session failing for 10 s, 1 % transient",
        (s4_rate as f64 * s4_secs) as u64,
        1_000,
        100,
        0,
        s4_rate,
        s4_secs,
    );
    s4.kind = Kind::Stall;
    // Once in the full form: each run pairs a run with the stall and one without, bound by the
    // 10 s stall.
    s4.full_reps = 1;
    s4.in_quick_form = false;
    // The HTTP scenarios: every system posts each record to the shared endpoint
    // (`bench-http-server`), which fails 10 % of records once (503) and checks order per session.
    let http_records = if q { 20_000 } else { 50_000 };
    let http_secs = if q { 5.0 } else { 10.0 };
    for (id, what, records, sessions, rate, seconds) in [
        (
            "S1-http",
            "HTTP endpoint, backlog, 10 % answered 503 once",
            http_records,
            10,
            0,
            0.0,
        ),
        (
            "S1k-http",
            "HTTP endpoint, backlog, 1,000 sessions, 10 % answered 503 once",
            http_records,
            1_000,
            0,
            0.0,
        ),
        (
            "S2-http",
            "HTTP endpoint, 10,000 records/s offered, 10 % answered 503 once",
            (10_000.0 * http_secs) as u64,
            10,
            10_000,
            http_secs,
        ),
    ] {
        let mut h = sc(id, what, records, sessions, 10, 0, rate, seconds);
        h.kind = Kind::Http;
        h.systems = suite(Kind::Http);
        v.push(h);
    }
    // The reply scenario: S1-1k's backlog, each record answered with one reply, every run's reply
    // topic read back with read_committed and checked (`orderly_benches::replies`). The injected
    // failures stay: every system retries a failed record in place before its reply is produced,
    // in its transactional mode too.
    let mut r = sc(
        "S1k-reply",
        "replies, backlog, 1,000 sessions, 10 % transient",
        if q { 20_000 } else { 200_000 },
        1_000,
        10,
        0,
        0,
        0.0,
    );
    r.kind = Kind::Reply;
    r.systems = suite(Kind::Reply);
    v.push(r);
    v.push(s4);
    let (s5_records, s5_sessions) = if q {
        (1_000_000, 200_000)
    } else {
        (5_000_000, 1_000_000)
    };
    let mut s5 = sc("S5", "many sessions", s5_records, s5_sessions, 0, 0, 0, 0.0);
    // Bounded: a system still reading after this has its peak RSS so far reported.
    s5.limit_s = if q { 60.0 } else { 200.0 };
    s5.memory_per_session = true;
    // Once in the full form: 5,000,000 records.
    s5.full_reps = 1;
    s5.in_quick_form = false;
    v.push(s5);
    let s6_secs = if q { 25.0 } else { 45.0 };
    let mut s6 = sc(
        "S6",
        "crash and rebalance: 3 processes, one killed (SIGKILL) every 10 s, 1 % transient",
        (3_000.0 * s6_secs) as u64,
        1_000,
        100,
        0,
        3_000,
        s6_secs,
    );
    s6.kind = Kind::Crash;
    s6.in_quick_form = false;
    v.push(s6);
    v
}

/// The scenarios `args` selects, each with the systems of `systems` that run it.
pub fn scenarios(args: &Args, systems: &[System]) -> Vec<Scenario> {
    let mut v = table(args, systems);
    if args.smoke {
        // The smoke form's one scenario, as the table has it.
        return v;
    }
    if args.scenario.is_empty() {
        // The quick form's default keeps to 5 minutes: S2-max, S4, S5 and S6 take minutes each
        // (S4 and S6 are bound by their 10 s stall and crash period); `--scenario all` adds them.
        if args.quick {
            v.retain(|s| s.in_quick_form);
        }
    } else if !args.scenario.iter().any(|w| w == "all") {
        // A name picks the scenario of that id; a name no scenario has picks its family (`S3`:
        // S3-0, S3-100us, S3-1ms). So `S2` is S2 alone, not S2-max too. `http` picks the HTTP
        // scenarios.
        let ids: Vec<String> = v.iter().map(|s| s.id.clone()).collect();
        v.retain(|s| {
            args.scenario.iter().any(|w| {
                s.id == *w
                    || (w == "http" && s.kind == Kind::Http)
                    || (!ids.contains(w) && s.id.starts_with(&format!("{w}-")))
            })
        });
    }
    for s in &mut v {
        let keep: Vec<System> = s.systems.iter().copied().filter(|x| s.runs(*x)).collect();
        s.systems = keep;
    }
    if let Some(n) = args.records {
        for s in v.iter_mut().filter(|s| s.kind.repeated()) {
            s.records = n;
            if s.rate > 0 {
                s.seconds = n as f64 / s.rate as f64;
            }
        }
    }
    v
}

impl Scenario {
    /// Whether `sys` runs in this scenario. The product binary runs the backlog scenarios but
    /// those measuring memory per session (its synthetic handler keeps a table of every session
    /// it saw, so the memory per session would be the handler's as much as orderly's). Scenarios
    /// with a procedure of their own (S2-max, S4, S6) run each peer tuned only: the best its user
    /// would do.
    pub fn runs(&self, sys: System) -> bool {
        match sys {
            System::OrderlyRun => {
                self.kind == Kind::Plain && self.rate == 0 && !self.memory_per_session
            }
            System::GoSeed | System::ParallelConsumer => self.kind == Kind::Plain,
            _ => true,
        }
    }

    /// Repetitions under `args`: `--reps` if given, else one in the quick and smoke forms and
    /// [`Scenario::full_reps`] in the full form.
    pub fn reps(&self, args: &Args) -> usize {
        args.reps.unwrap_or(if args.quick || args.smoke {
            1
        } else {
            self.full_reps
        })
    }

    /// What the verifier expects of a run of this scenario.
    pub fn expected(&self) -> Expected {
        Expected {
            records: self.records,
            sessions: self.sessions,
            fail_mod: self.fail_mod,
            // The HTTP endpoint fails a record by its own rule (that of `orderly_testkit::webhook`).
            fail_pct: (self.kind == Kind::Http).then_some(HTTP_TRANSIENT_PCT),
            // Live runs: the first second is warm-up for every system (JIT, connections).
            warmup: if self.rate > 0 {
                Duration::from_secs(1)
            } else {
                Duration::ZERO
            },
            // S4: the stalled session is left out of the latency of the others in both runs, so
            // the two runs compare the same sessions.
            stalled_session: (self.kind == Kind::Stall).then_some(STALL.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::command::go_tuned_args;

    #[test]
    fn a_scenario_name_picks_that_scenario_and_a_family_name_its_members() {
        let ids = |names: &str| -> Vec<String> {
            let args =
                Args::parse_from(["bench-harness", "--bootstrap", "x:1", "--scenario", names]);
            scenarios(&args, &[System::Orderly])
                .into_iter()
                .map(|s| s.id)
                .collect()
        };
        assert_eq!(ids("S2"), ["S2"]);
        assert_eq!(ids("S1"), ["S1"]);
        assert_eq!(ids("S3"), ["S3-0", "S3-100us", "S3-1ms"]);
        assert_eq!(ids("S2-max,S1-live"), ["S1-live", "S2-max"]);
        assert_eq!(ids("http"), ["S1-http", "S1k-http", "S2-http"]);
        assert_eq!(ids("S1-http"), ["S1-http"]);
        assert_eq!(ids("S1k-reply"), ["S1k-reply"]);
    }

    /// The HTTP scenarios run the HTTP systems only, the others never; `--records` sets every
    /// selected scenario's count (a live one's seconds follow from its rate).
    #[test]
    fn http_scenarios_get_the_http_systems_and_records_override_the_counts() {
        let all = [
            System::Orderly,
            System::GoSeed,
            System::OrderlyHttp,
            System::GoSeedHttpTuned,
            System::PcVertx,
        ];
        let args = Args::parse_from([
            "bench-harness",
            "--bootstrap",
            "x:1",
            "--scenario",
            "S1,http",
            "--records",
            "3000",
        ]);
        for sc in scenarios(&args, &all) {
            assert_eq!(sc.records, 3000, "{}", sc.id);
            let http = sc.kind == Kind::Http;
            assert!(
                sc.systems.iter().all(|s| s.suite() == sc.kind.suite()),
                "{sc:?}"
            );
            assert_eq!(sc.systems.len(), if http { 3 } else { 2 }, "{}", sc.id);
            if sc.rate > 0 {
                assert!((sc.seconds - 0.3).abs() < 1e-9, "{sc:?}");
            }
        }
        assert_eq!(System::OrderlyHttpBatch.suite(), Suite::Http);
        assert_eq!(System::ParallelConsumer.suite(), Suite::Handler);
        assert_eq!(System::PcVertxTuned.family(), "parallel-consumer");
    }

    /// The reply scenario runs the four reply systems and nothing else, each peer tuned and in
    /// its transactional mode; the reply systems run nowhere else.
    #[test]
    fn the_reply_scenario_runs_the_reply_systems_in_their_transactional_modes() {
        let all = [
            System::Orderly,
            System::OrderlyRun,
            System::GoSeedTuned,
            System::PcTuned,
            System::OrderlyHttp,
            System::OrderlyReplies,
            System::OrderlyExactlyOnce,
            System::GoSeedTransact,
            System::PcTransactional,
        ];
        let args = Args::parse_from(["bench-harness", "--bootstrap", "x:1", "--scenario", "all"]);
        for sc in scenarios(&args, &all) {
            let reply = sc
                .systems
                .iter()
                .filter(|s| s.suite() == Suite::Reply)
                .count();
            if sc.kind == Kind::Reply {
                assert_eq!(sc.id, "S1k-reply");
                assert_eq!((sc.records, sc.sessions, sc.fail_mod), (200_000, 1_000, 10));
                assert_eq!(reply, 4, "{sc:?}");
                assert_eq!(sc.systems.len(), 4, "{sc:?}");
            } else {
                assert_eq!(reply, 0, "{sc:?}");
            }
        }
        assert_eq!(Suite::Reply.reference(), System::OrderlyReplies);
        assert!(System::OrderlyReplies.reply_args("g").is_empty());
        assert_eq!(
            System::OrderlyExactlyOnce.reply_args("g"),
            ["--exactly-once"]
        );
        assert_eq!(
            System::GoSeedTransact.reply_args("g"),
            ["-transactional-id", "g.txn"]
        );
        assert!(
            System::PcTransactional
                .reply_args("g")
                .contains(&"PERIODIC_TRANSACTIONAL_PRODUCER".to_string())
        );
        assert!(System::GoSeedTransact.tuned() && System::PcTransactional.tuned());
        assert_eq!(System::GoSeedTransact.family(), "go-seed");
    }

    #[test]
    fn the_product_runs_the_backlogs_but_s5_and_the_procedures_run_tuned_peers_only() {
        let all = [
            System::Orderly,
            System::OrderlyRun,
            System::GoSeedTuned,
            System::GoSeed,
            System::PcTuned,
            System::ParallelConsumer,
        ];
        let args = Args::parse_from(["bench-harness", "--bootstrap", "x:1", "--scenario", "all"]);
        let v = scenarios(&args, &all);
        let has = |id: &str, sys: System| {
            v.iter()
                .find(|s| s.id == id)
                .is_some_and(|s| s.systems.contains(&sys))
        };
        for id in ["S1", "S1-1k", "S1-p1", "S3-0", "S3-1ms"] {
            assert!(has(id, System::OrderlyRun), "{id}");
            assert!(
                has(id, System::GoSeed) && has(id, System::ParallelConsumer),
                "{id}"
            );
        }
        for id in ["S1-live", "S2", "S5", "S2-max", "S4", "S6"] {
            assert!(!has(id, System::OrderlyRun), "{id}");
        }
        for id in ["S2-max", "S4", "S6"] {
            assert!(
                has(id, System::GoSeedTuned) && has(id, System::PcTuned),
                "{id}"
            );
            assert!(
                !has(id, System::GoSeed) && !has(id, System::ParallelConsumer),
                "{id}"
            );
        }
        let chan = |id: &str| {
            let sc = v.iter().find(|s| s.id == id).unwrap();
            let a = go_tuned_args(sc);
            let i = a.iter().position(|x| x == "-session-chan").unwrap();
            a[i + 1].clone()
        };
        assert_eq!(chan("S1"), "5000", "S1: a session's 5,000 records");
        assert_eq!(
            chan("S3-0"),
            "256",
            "S3: the design's 256 already holds 100"
        );
        assert_eq!(chan("S5"), "256");
    }

    /// What the table says of each scenario beyond its workload: how often it runs in the full
    /// form, which measure the raw fetch beside, which measure memory per session, and which the
    /// quick form leaves out unless named.
    #[test]
    fn the_table_says_how_often_each_scenario_runs_and_what_it_measures_beside() {
        let form = |extra: &[&str]| -> Vec<Scenario> {
            let mut argv = vec!["bench-harness", "--bootstrap", "x:1"];
            argv.extend_from_slice(extra);
            scenarios(&Args::parse_from(argv), &[System::Orderly])
        };
        let full = Args::parse_from(["bench-harness", "--bootstrap", "x:1"]);
        let reps: Vec<(String, usize)> = form(&["--scenario", "all"])
            .iter()
            .map(|s| (s.id.clone(), s.reps(&full)))
            .collect();
        let once = ["S2", "S3-100us", "S3-1ms", "S4", "S5"];
        for (id, n) in &reps {
            let want = match id.as_str() {
                "S3-0" => 5,
                id if once.contains(&id) => 1,
                _ => 3,
            };
            assert_eq!(*n, want, "{id}");
        }
        let given = Args::parse_from(["bench-harness", "--bootstrap", "x:1", "--reps", "2"]);
        let quick = Args::parse_from(["bench-harness", "--bootstrap", "x:1", "--quick"]);
        for s in form(&["--scenario", "all"]) {
            assert_eq!(s.reps(&given), 2, "{}", s.id);
            assert_eq!(s.reps(&quick), 1, "{}", s.id);
            assert_eq!(s.raw_fetch, s.id.starts_with("S3-"), "{}", s.id);
            assert_eq!(s.memory_per_session, s.id == "S5", "{}", s.id);
        }
        let ids = |v: Vec<Scenario>| -> Vec<String> { v.into_iter().map(|s| s.id).collect() };
        assert_eq!(
            ids(form(&["--quick"])),
            [
                "S1",
                "S1-1k",
                "S1-live",
                "S2",
                "S3-0",
                "S1-http",
                "S1k-http",
                "S2-http",
                "S1k-reply"
            ]
        );
        assert_eq!(ids(form(&["--smoke", "--records", "5"])), ["S1"]);
        assert_eq!(form(&["--smoke", "--records", "5"])[0].records, 2_000);
    }
}
