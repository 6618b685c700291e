//! The checker. It takes plain [`Observations`] (what the harness recorded and what it read back
//! from the topics) and returns the figures and the violations; nothing in it touches a process
//! or a broker.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::DLQ;
use super::FaultKind;
use super::TOPIC;
use super::observe::{Delivery, FaultEvent, Observations};
use super::report::{ChaosReport, ConsumerExit};

/// The checker: judges the recorded deliveries against the log, the commits and the DLQ, and
/// (exactly-once mode) the read_committed replies against the log.
pub(super) fn check(obs: &Observations, seconds: f64) -> ChaosReport {
    let Observations {
        seed,
        deliveries,
        faults,
        commits,
        acked,
        produce_errors,
        log,
        dlq,
        replies,
        exits,
    } = obs;
    let seed = *seed;
    let mut r = ChaosReport {
        seconds,
        acked: acked.len(),
        in_log: log.len(),
        produce_errors: *produce_errors,
        deliveries: deliveries.len(),
        dead_letters: dlq.values().sum(),
        ..ChaosReport::default()
    };
    for f in faults {
        *r.faults.entry(format!("{:?}", f.kind)).or_default() += 1;
    }
    let fault_before = |t: u64| -> String {
        faults
            .iter()
            .rev()
            .find(|f| f.at <= t)
            .map(|f| format!("{:?} at {:.1}s ({})", f.kind, f.at as f64 / 1e6, f.what))
            .unwrap_or_else(|| "no fault yet".into())
    };
    let mut by_record: HashMap<(i32, i64), Vec<&Delivery>> = HashMap::new();
    for d in deliveries {
        by_record
            .entry((d.partition, d.offset))
            .or_default()
            .push(d);
    }
    for v in by_record.values_mut() {
        v.sort_by_key(|d| d.start);
    }
    let terminal = |d: &Delivery| (200..300).contains(&d.status) || d.status == 422;

    // 1. Nothing acknowledged is lost.
    for (p, o, _) in acked {
        let ok = by_record
            .get(&(*p, *o))
            .is_some_and(|v| v.iter().any(|d| (200..300).contains(&d.status)));
        if !ok && !dlq.contains_key(&(*p, *o)) {
            r.lost += 1;
            if r.lost <= 20 {
                r.violations.push(format!(
                    "LOST {TOPIC}-{p}@{o} (session {}): acknowledged, never answered 2xx nor dead-lettered; seed {seed}",
                    log.get(&(*p, *o)).map(|x| x.0.as_str()).unwrap_or("?")
                ));
            }
        }
    }
    // Records in the log but never delivered at all (acknowledged or not) are lost too.
    for ((p, o), (key, _)) in log {
        if !by_record.contains_key(&(*p, *o)) && !dlq.contains_key(&(*p, *o)) {
            r.violations.push(format!(
                "NEVER DELIVERED {TOPIC}-{p}@{o} (session {key}); seed {seed}"
            ));
        }
    }

    // 2. Order per session, across replays.
    let mut sessions: BTreeMap<&str, Vec<(i32, i64)>> = BTreeMap::new();
    for ((p, o), (key, _)) in log {
        sessions.entry(key.as_str()).or_default().push((*p, *o));
    }
    let mut order_violations = 0usize;
    for (session, recs) in &sessions {
        for w in recs.windows(2) {
            let (prev, cur) = (w[0], w[1]);
            let Some(cur_ds) = by_record.get(&cur) else {
                continue;
            };
            let prev_ds = by_record.get(&prev).map(Vec::as_slice).unwrap_or(&[]);
            for d in cur_ds {
                let latest = prev_ds.iter().rev().find(|x| x.start < d.start);
                let ok = latest.is_some_and(|l| l.end <= d.start && terminal(l));
                if !ok {
                    order_violations += 1;
                    if order_violations <= 20 {
                        r.violations.push(format!(
                            "ORDER session {session}: {TOPIC}-{}@{} delivered to {} at {:.3}s while @{} was {} ; fault before: {}; seed {seed}",
                            cur.0,
                            cur.1,
                            d.consumer,
                            d.start as f64 / 1e6,
                            prev.1,
                            match latest {
                                None => "not yet delivered".to_string(),
                                Some(l) if l.end > d.start =>
                                    format!("still in flight at {} (started {:.3}s)", l.consumer, l.start as f64 / 1e6),
                                Some(l) => format!("last answered {} by {}", l.status, l.consumer),
                            },
                            fault_before(d.start)
                        ));
                    }
                }
            }
        }
    }
    if order_violations > 20 {
        r.violations
            .push(format!("... {order_violations} ordering violations in all"));
    }

    // 3. Repeats after a terminal answer: only at or above the committed watermark.
    let mut commit_hist: HashMap<i32, Vec<(u64, i64)>> = HashMap::new();
    for (t, p, o) in commits {
        commit_hist.entry(*p).or_default().push((*t, *o));
    }
    let mut below = 0usize;
    for ((p, o), ds) in &by_record {
        let mut done = false;
        for d in ds {
            if done {
                *r.duplicates
                    .entry(fault_kind_before(faults, d.start))
                    .or_default() += 1;
                let c = commit_hist
                    .get(p)
                    .and_then(|h| h.iter().rev().find(|(t, _)| *t <= d.start))
                    .map(|(_, c)| *c)
                    .unwrap_or(0);
                if *o < c {
                    below += 1;
                    if below <= 20 {
                        r.violations.push(format!(
                            "REPLAY BELOW WATERMARK {TOPIC}-{p}@{o} (session {}) delivered again to {} at {:.3}s after a terminal answer, committed offset was {c}; fault before: {}; seed {seed}",
                            d.session,
                            d.consumer,
                            d.start as f64 / 1e6,
                            fault_before(d.start)
                        ));
                    }
                }
            }
            if terminal(d) {
                done = true;
            }
        }
    }

    // 4. The DLQ holds exactly the permanent failures.
    let perm: HashSet<(i32, i64)> = log
        .iter()
        .filter(|(_, (_, k))| k == "perm")
        .map(|(k, _)| *k)
        .collect();
    for rec in &perm {
        if !dlq.contains_key(rec) {
            r.violations.push(format!(
                "DLQ MISSING {TOPIC}-{}@{}: a permanent failure is not in {DLQ}; seed {seed}",
                rec.0, rec.1
            ));
        }
    }
    for (rec, n) in dlq {
        if !perm.contains(rec) {
            r.violations.push(format!(
                "DLQ EXTRA {TOPIC}-{}@{}: dead-lettered but not a permanent failure; fault before its last delivery: {}; seed {seed}",
                rec.0,
                rec.1,
                by_record
                    .get(rec)
                    .and_then(|v| v.last())
                    .map(|d| fault_before(d.start))
                    .unwrap_or_default()
            ));
        } else {
            let failed = by_record
                .get(rec)
                .map(|v| v.iter().filter(|d| d.status == 422).count())
                .unwrap_or(0);
            if *n > failed {
                r.violations.push(format!(
                    "DLQ DUPLICATE {TOPIC}-{}@{}: {n} dead letters for {failed} failed deliveries; seed {seed}",
                    rec.0, rec.1
                ));
            }
        }
    }

    // Recovery: from each fault until every partition delivered a record again (2xx, started
    // after the fault). The partitions are those of the log that saw any 2xx at all.
    let mut ok_starts: BTreeMap<i32, Vec<(u64, u64)>> = BTreeMap::new();
    for d in deliveries.iter().filter(|d| (200..300).contains(&d.status)) {
        ok_starts
            .entry(d.partition)
            .or_default()
            .push((d.start, d.end));
    }
    for v in ok_starts.values_mut() {
        v.sort_unstable();
    }
    // The end of the first 2xx delivery on `p` started at or after `at`. The first delivery
    // started after the fault need not be the first to end; none starting after the earliest
    // end found can end earlier.
    let first_flow = |p: i32, at: u64| -> Option<u64> {
        let v = ok_starts.get(&p)?;
        let i = v.partition_point(|(start, _)| *start < at);
        let mut first_end: Option<u64> = None;
        for (start, end) in &v[i..] {
            if first_end.is_some_and(|e| *start >= e) {
                break;
            }
            first_end = Some(first_end.map_or(*end, |e| e.min(*end)));
        }
        first_end
    };
    // The time until every partition of `parts` delivered again after `at` (`None`: one never did).
    let flows_again = |at: u64, parts: &dyn Fn(i32) -> bool| -> Option<u64> {
        let mut worst = Some(0u64);
        for p in ok_starts.keys().copied().filter(|p| parts(*p)) {
            worst = worst.zip(first_flow(p, at)).map(|(w, e)| w.max(e - at));
        }
        worst
    };
    let mut acks: BTreeMap<i32, Vec<u64>> = BTreeMap::new();
    for (p, _, at) in acked {
        acks.entry(*p).or_default().push(*at);
    }
    for v in acks.values_mut() {
        v.sort_unstable();
    }
    // The first acknowledgement on `p` at or after `at`.
    let first_ack = |p: i32, at: u64| -> Option<u64> {
        let v = acks.get(&p)?;
        v.get(v.partition_point(|t| *t < at)).copied()
    };
    for f in faults {
        let kind = format!("{:?}", f.kind);
        match flows_again(f.at, &|_| true) {
            Some(w) => r.recovery.entry(kind).or_default().push(w as f64 / 1e6),
            None => *r.unrecovered.entry(kind).or_default() += 1,
        }
        if f.kind == FaultKind::LeaderKill {
            let surviving = |p: i32| !f.moved.contains(&p) && !f.impaired.contains(&p);
            // Only kills that left some partition untouched by any fault measure anything.
            if ok_starts.keys().any(|p| surviving(*p)) {
                r.surviving_recovery
                    .push(flows_again(f.at, &surviving).map(|w| w as f64 / 1e6));
                let mut stall = Some(0u64);
                let mut delay = Some(0u64);
                for p in ok_starts.keys().copied().filter(|p| surviving(*p)) {
                    let ack = first_ack(p, f.at);
                    stall = stall.zip(ack).map(|(s, a)| s.max(a - f.at));
                    delay = match (delay, ack, first_flow(p, f.at)) {
                        (Some(d), Some(a), Some(e)) => Some(d.max(e.saturating_sub(a))),
                        _ => None,
                    };
                }
                r.surviving_log_stall.push(stall.map(|w| w as f64 / 1e6));
                r.surviving_consumer_delay
                    .push(delay.map(|w| w as f64 / 1e6));
            }
        }
    }
    // 5. No consumer exits unless the harness ends it.
    r.unexpected_exits = exits
        .iter()
        .map(|e| ConsumerExit {
            after: fault_before((e.at * 1e6) as u64),
            ..e.clone()
        })
        .collect();
    if let Some(replies) = replies {
        check_replies(log, replies, seed, &mut r);
    }
    r
}

/// Rule 6: every record of `log` that is not a permanent failure has exactly one reply in
/// `replies` (read_committed, each partition in order), a permanent failure none, and each
/// session's replies follow the session's order. A reply's value is `<partition>@<offset>` of
/// its record, its key the record's session.
fn check_replies(
    log: &BTreeMap<(i32, i64), (String, String)>,
    replies: &[(String, String)],
    seed: u64,
    r: &mut ChaosReport,
) {
    r.replies = replies.len();
    let mut seen: HashMap<(i32, i64), usize> = HashMap::new();
    let mut last: HashMap<&str, (i32, i64)> = HashMap::new();
    let note = |r: &mut ChaosReport, v: String| {
        if r.violations.len() < 60 {
            r.violations.push(v);
        }
    };
    for (key, value) in replies {
        let Some(rec) = replied_record(value) else {
            note(r, format!("REPLY UNREADABLE {key}: {value:?}; seed {seed}"));
            continue;
        };
        let n = seen.entry(rec).or_default();
        *n += 1;
        if *n == 2 {
            r.reply_duplicates += 1;
            note(
                r,
                format!(
                    "REPLY DUPLICATE {TOPIC}-{}@{} (session {key}) replied more than once; seed {seed}",
                    rec.0, rec.1
                ),
            );
        }
        match log.get(&rec) {
            None => note(
                r,
                format!("REPLY UNKNOWN {value} (session {key}): no such record; seed {seed}"),
            ),
            Some((session, kind)) => {
                if session != key {
                    note(
                        r,
                        format!(
                            "REPLY KEY {value}: keyed {key}, the record's session is {session}; seed {seed}"
                        ),
                    );
                }
                if kind == "perm" {
                    note(
                        r,
                        format!(
                            "REPLY FOR A PERMANENT FAILURE {value} (session {key}); seed {seed}"
                        ),
                    );
                }
            }
        }
        if *n == 1 {
            if let Some(prev) = last.insert(key.as_str(), rec) {
                if prev.0 == rec.0 && prev.1 > rec.1 {
                    r.reply_order += 1;
                    note(
                        r,
                        format!(
                            "REPLY ORDER session {key}: the reply of @{} after that of @{}; seed {seed}",
                            rec.1, prev.1
                        ),
                    );
                }
            }
        }
    }
    for (rec, (session, kind)) in log {
        if kind != "perm" && !seen.contains_key(rec) {
            r.reply_lost += 1;
            note(
                r,
                format!(
                    "REPLY LOST {TOPIC}-{}@{} (session {session}): no reply in the read_committed stream; seed {seed}",
                    rec.0, rec.1
                ),
            );
        }
    }
}

/// The record a reply answers: its value, `<partition>@<offset>`.
fn replied_record(value: &str) -> Option<(i32, i64)> {
    value
        .split_once('@')
        .and_then(|(p, o)| Some((p.parse::<i32>().ok()?, o.parse::<i64>().ok()?)))
}

fn fault_kind_before(faults: &[FaultEvent], t: u64) -> String {
    faults
        .iter()
        .rev()
        .find(|f| f.at <= t)
        .map(|f| format!("{:?}", f.kind))
        .unwrap_or_else(|| "none".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `check` of `s` with `log` and `dlq` read back.
    fn judge(
        s: &Observations,
        log: &BTreeMap<(i32, i64), (String, String)>,
        dlq: &HashMap<(i32, i64), usize>,
    ) -> ChaosReport {
        let mut o = s.clone();
        o.log = log.clone();
        o.dlq = dlq.clone();
        check(&o, 1.0)
    }

    /// Observations of a run with seed 1 and nothing recorded yet.
    fn obs() -> Observations {
        Observations {
            seed: 1,
            ..Observations::default()
        }
    }

    fn d(offset: i64, start: u64, end: u64, status: u16) -> Delivery {
        Delivery {
            consumer: "c0".into(),
            partition: 0,
            offset,
            session: "s-1".into(),
            start,
            end,
            status,
        }
    }

    /// Session s-1 at offsets 0, 1, 2 of partition 0; offset 1 is a permanent failure.
    fn log() -> BTreeMap<(i32, i64), (String, String)> {
        let mut l = BTreeMap::new();
        l.insert((0, 0), ("s-1".to_string(), "ok".to_string()));
        l.insert((0, 1), ("s-1".to_string(), "perm".to_string()));
        l.insert((0, 2), ("s-1".to_string(), "t1".to_string()));
        l
    }

    fn dlq() -> HashMap<(i32, i64), usize> {
        HashMap::from([((0, 1), 1)])
    }

    fn clean(s: &mut Observations) {
        s.acked = vec![(0, 0, 5), (0, 1, 6), (0, 2, 7)];
        s.deliveries = vec![
            d(0, 10, 20, 200),
            d(1, 30, 40, 422),
            d(2, 50, 60, 503),
            d(2, 70, 80, 200),
        ];
    }

    #[test]
    fn a_clean_run_passes() {
        let mut s = obs();
        clean(&mut s);
        let r = judge(&s, &log(), &dlq());
        assert_eq!(r.lost, 0);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
    }

    #[test]
    fn a_record_started_before_its_predecessor_ended_is_an_order_violation() {
        let mut s = obs();
        clean(&mut s);
        // Offset 2 starts at 35, while offset 1 (30..40) is still in flight.
        s.deliveries[2] = d(2, 35, 60, 503);
        let r = judge(&s, &log(), &dlq());
        assert!(
            r.violations.iter().any(|v| v.starts_with("ORDER")),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn a_replay_must_finish_the_predecessor_again_first() {
        let mut s = obs();
        clean(&mut s);
        s.faults.push(FaultEvent {
            at: 85,
            kind: FaultKind::ConsumerKill,
            what: "test".into(),
            moved: Vec::new(),
            impaired: Vec::new(),
        });
        // After a crash, offset 1 is redelivered and still retrying when offset 2 goes out.
        s.deliveries
            .extend([d(1, 90, 95, 503), d(2, 100, 110, 200)]);
        let r = judge(&s, &log(), &dlq());
        let v: Vec<&String> = r
            .violations
            .iter()
            .filter(|v| v.starts_with("ORDER"))
            .collect();
        assert_eq!(v.len(), 1, "{:?}", r.violations);
        assert!(
            v[0].contains("ConsumerKill"),
            "names the fault before: {}",
            v[0]
        );
    }

    #[test]
    fn an_acknowledged_record_without_an_answer_is_lost() {
        let mut s = obs();
        clean(&mut s);
        s.deliveries.retain(|x| x.offset != 2 || x.status != 200);
        let r = judge(&s, &log(), &dlq());
        assert_eq!(r.lost, 1);
    }

    #[test]
    fn a_repeat_below_the_committed_offset_is_a_violation_and_above_is_a_duplicate() {
        let mut s = obs();
        clean(&mut s);
        s.commits.push((85, 0, 1));
        // Offset 0 is below the watermark 1: a violation. Offset 2 is above it: a duplicate only.
        s.deliveries
            .extend([d(2, 90, 95, 200), d(0, 100, 105, 200)]);
        let r = judge(&s, &log(), &dlq());
        let below: Vec<&String> = r
            .violations
            .iter()
            .filter(|v| v.starts_with("REPLAY BELOW"))
            .collect();
        assert_eq!(below.len(), 1, "{:?}", r.violations);
        assert!(below[0].contains("@0 "), "{}", below[0]);
        assert_eq!(r.duplicates.values().sum::<usize>(), 2);
    }

    #[test]
    fn the_dlq_must_hold_exactly_the_permanent_failures() {
        let mut s = obs();
        clean(&mut s);
        let r = judge(&s, &log(), &HashMap::from([((0, 2), 1)]));
        assert!(r.violations.iter().any(|v| v.starts_with("DLQ MISSING")));
        assert!(r.violations.iter().any(|v| v.starts_with("DLQ EXTRA")));
        let r = judge(&s, &log(), &HashMap::from([((0, 1), 2)]));
        assert!(r.violations.iter().any(|v| v.starts_with("DLQ DUPLICATE")));
    }

    #[test]
    fn recovery_is_the_time_until_every_partition_flows_again() {
        let mut s = obs();
        clean(&mut s);
        s.faults.push(FaultEvent {
            at: 100,
            kind: FaultKind::LeaderKill,
            what: "test".into(),
            moved: vec![1],
            impaired: Vec::new(),
        });
        let mut on = |partition: i32, offset: i64, start: u64, end: u64, status: u16| {
            let mut x = d(offset, start, end, status);
            x.partition = partition;
            x.session = format!("p{partition}");
            s.deliveries.push(x);
        };
        // Partition 0 flows again at 150 (the 503 at 110 does not count); partition 1 at 3,000
        // (the delivery that started before the fault and ended after it does not count either).
        on(0, 3, 110, 120, 503);
        on(0, 3, 130, 150, 200);
        on(1, 0, 90, 2_000, 200);
        on(1, 1, 2_500, 3_000, 200);
        let r = judge(&s, &BTreeMap::new(), &HashMap::new());
        assert_eq!(r.recovery.get("LeaderKill"), Some(&vec![2_900.0 / 1e6]));
        assert!(r.unrecovered.is_empty());
        // Partition 1's leader was killed: the surviving partition 0 flowed again at 150.
        assert_eq!(r.surviving_recovery, vec![Some(50.0 / 1e6)]);
        // No write on partition 0 was acknowledged after the kill: the split is unknown.
        assert_eq!(r.surviving_log_stall, vec![None]);
        assert_eq!(r.surviving_consumer_delay, vec![None]);
        // The broker acknowledged a write on partition 0 again at 140, 40 after the kill; the
        // delivery ended 10 later.
        s.acked.extend([(0, 3, 140), (0, 4, 145)]);
        let r = judge(&s, &BTreeMap::new(), &HashMap::new());
        assert_eq!(r.surviving_log_stall, vec![Some(40.0 / 1e6)]);
        assert_eq!(r.surviving_consumer_delay, vec![Some(10.0 / 1e6)]);
        // With partition 0 behind a proxy fault in progress, no partition survives the kill
        // untouched, so the kill measures nothing there.
        s.faults[0].impaired = vec![0];
        let r = judge(&s, &BTreeMap::new(), &HashMap::new());
        assert!(r.surviving_recovery.is_empty());
        s.faults[0].impaired = Vec::new();

        // A partition that never delivers after a fault makes it unrecovered.
        s.faults.push(FaultEvent {
            at: 5_000,
            kind: FaultKind::ProxyStall,
            what: "test".into(),
            moved: Vec::new(),
            impaired: Vec::new(),
        });
        let r = judge(&s, &BTreeMap::new(), &HashMap::new());
        assert_eq!(r.unrecovered.get("ProxyStall"), Some(&1));
    }

    #[test]
    fn duplicates_are_counted_per_fault_event() {
        let mut s = obs();
        clean(&mut s);
        for at in [85, 86] {
            s.faults.push(FaultEvent {
                at,
                kind: FaultKind::ConsumerKill,
                what: "test".into(),
                moved: Vec::new(),
                impaired: Vec::new(),
            });
        }
        // Three repeats after terminal answers, all after the two kills.
        s.deliveries
            .extend([d(0, 90, 95, 200), d(1, 96, 97, 422), d(2, 100, 110, 200)]);
        let r = judge(&s, &log(), &HashMap::from([((0, 1), 2)]));
        assert_eq!(r.duplicates.get("ConsumerKill"), Some(&3));
        assert_eq!(r.duplicates_per_event("ConsumerKill"), Some(1.5));
        assert_eq!(r.duplicates_per_event("LeaderKill"), None);
    }

    /// The replies of the clean run: one per record that is not a permanent failure.
    fn replies() -> Vec<(String, String)> {
        vec![
            ("s-1".to_string(), "0@0".to_string()),
            ("s-1".to_string(), "0@2".to_string()),
        ]
    }

    #[test]
    fn each_record_has_one_reply_in_session_order() {
        let mut s = obs();
        clean(&mut s);
        s.log = log();
        s.dlq = dlq();
        s.replies = Some(replies());
        let r = check(&s, 1.0);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!((r.replies, r.reply_lost, r.reply_duplicates), (2, 0, 0));

        // A reply twice, and one missing.
        s.replies = Some(vec![
            ("s-1".to_string(), "0@0".to_string()),
            ("s-1".to_string(), "0@0".to_string()),
        ]);
        let r = check(&s, 1.0);
        assert_eq!((r.reply_lost, r.reply_duplicates), (1, 1));
        assert!(
            r.violations
                .iter()
                .any(|v| v.starts_with("REPLY DUPLICATE"))
        );
        assert!(r.violations.iter().any(|v| v.starts_with("REPLY LOST")));

        // Out of session order, and a reply for the permanent failure.
        s.replies = Some(vec![
            ("s-1".to_string(), "0@2".to_string()),
            ("s-1".to_string(), "0@1".to_string()),
            ("s-1".to_string(), "0@0".to_string()),
        ]);
        let r = check(&s, 1.0);
        assert_eq!(r.reply_order, 2, "{:?}", r.violations);
        assert!(
            r.violations
                .iter()
                .any(|v| v.starts_with("REPLY FOR A PERMANENT FAILURE"))
        );
    }

    #[test]
    fn without_replies_read_back_the_reply_rule_is_off() {
        let mut s = obs();
        clean(&mut s);
        s.log = log();
        s.dlq = dlq();
        let r = check(&s, 1.0);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.replies, 0);
    }

    #[test]
    fn a_consumer_exit_is_reported_with_the_fault_before_it() {
        let mut s = obs();
        clean(&mut s);
        s.faults.push(FaultEvent {
            at: 1_000_000,
            kind: FaultKind::Zombie,
            what: "SIGCONT consumer c1: a zombie wakes".into(),
            moved: Vec::new(),
            impaired: Vec::new(),
        });
        s.exits.push(ConsumerExit {
            consumer: "c1".into(),
            at: 2.5,
            status: "exit status: 1".into(),
            tail: vec!["transaction failed".into()],
            ..ConsumerExit::default()
        });
        let r = judge(&s, &log(), &dlq());
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.unexpected_exits.len(), 1);
        let e = &r.unexpected_exits[0];
        assert_eq!(
            (e.consumer.as_str(), e.status.as_str()),
            ("c1", "exit status: 1")
        );
        assert!(e.after.starts_with("Zombie at 1.0s"), "{}", e.after);
        assert_eq!(e.tail, vec!["transaction failed".to_string()]);
    }
}
