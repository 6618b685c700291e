//! Dispatch: sessions are per partition, an idle engine hands a new record over at once, and a
//! worker takes about one batch of a backlog per turn.

use super::*;

/// One key on two partitions (and on two topics) is two sessions: a slow record on one
/// never delays, dead-letters or deduplicates the other, and the `seq` checker sees no violation.
#[test]
fn one_key_on_two_partitions_is_two_independent_sessions() {
    let (log, mut handler, dlq) = logged();
    handler.durations.insert((0, 0), Duration::from_secs(20));
    let (source, handle) = MemSource::new(100);
    let with_headers = |mut r: Record, seq: i64| {
        r.headers.push(Header::new("seq", seq.to_string()));
        r.headers.push(Header::new("event-id", format!("e{seq}")));
        r
    };
    let p0: Vec<_> = (0..3)
        .map(|i| with_headers(rec(0, i, Some("k")), i + 1))
        .collect();
    let p1: Vec<_> = (0..3)
        .map(|i| with_headers(rec(1, i, Some("k")), i + 1))
        .collect();
    let other = TopicPartition::new("u", 1);
    let u1: Vec<_> = (0..3)
        .map(|i| {
            let mut r = with_headers(rec(1, i, Some("k")), i + 1);
            r.partition = other.clone();
            r
        })
        .collect();
    handle.produce(&tp(0), p0.clone());
    handle.produce(&tp(1), p1.clone());
    handle.produce(&other, u1);
    handle.assign(&[tp(0), tp(1), other.clone()]);
    let cfg = EngineConfig {
        stuck_timeout: Some(Duration::from_secs(5)),
        attempt_timeout: None,
        seq_header: Some("seq".into()),
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let stats = engine.stats();
    let log2 = log.clone();
    let log3 = log.clone();
    paused_runtime().block_on(async move {
        let run = tokio::spawn(run_checked(engine, source, log2));
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Partition 1 of both topics is done although partition 0 of "t" is still busy.
        let done_p1 = log3
            .events()
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    Ev::End {
                        part: 1,
                        step: Step::Ok,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(done_p1, 6, "t-1 and u-1 waited behind t-0's slow record");
        tokio::time::sleep(Duration::from_secs(30)).await;
        handle.close();
        run.await.unwrap().unwrap();
    });
    // Only t-0's slow record itself is stuck (20 s > 5 s); nothing queued behind it elsewhere.
    let dlq: Vec<(i32, i64, String)> = log
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Ev::Dlq {
                part,
                offset,
                reason,
                ..
            } => Some((part, offset, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(dlq, vec![(0, 0, "stuck".to_owned())]);
    assert_eq!(
        stats.deduplicated(),
        0,
        "event ids matched across partitions"
    );
    assert_eq!(
        stats.ordering_violations(),
        0,
        "seq checked across partitions"
    );
    assert_eq!(stats.handled(), 8);
}

/// Waits, without letting the paused clock move, until `done` holds: `yield_now` keeps this task
/// ready, so the runtime never idles and never auto-advances time. Returns false if it never
/// held within `turns` scheduler turns (something waited for a timer).
async fn without_time_passing(turns: usize, done: impl Fn() -> bool) -> bool {
    for _ in 0..turns {
        if done() {
            return true;
        }
        tokio::task::yield_now().await;
    }
    done()
}

/// A record that arrives while the engine is idle (nothing in flight,
/// every worker parked) is dispatched and handed to the handler at once, not at the engine's next
/// housekeeping tick, a commit, or any other timer: under the paused clock the handler sees it
/// before the clock moves at all. Twice: after the engine idled from the start, and after it
/// handled a record and went idle again.
#[test]
fn a_record_arriving_while_idle_is_handled_without_waiting_for_a_timer() {
    let (log, handler, dlq) = logged();
    let (source, handle) = MemSource::new(10);
    handle.assign(&[tp(0)]);
    let engine = Engine::new(config(), handler, dlq);
    paused_runtime().block_on(async move {
        let run = tokio::spawn(engine.run(source, std::future::pending()));
        // Idle: assigned, nothing to handle; ticks and commits come and go.
        tokio::time::sleep(Duration::from_millis(1_234)).await;
        assert_eq!(starts(&log), 0);
        for (offset, key) in [(0, "a"), (1, "b")] {
            let produced_at = tokio::time::Instant::now();
            handle.produce(&tp(0), [rec(0, offset, Some(key))]);
            let seen = without_time_passing(10_000, || starts(&log) == offset as usize + 1).await;
            assert!(
                seen,
                "record {offset} was not handed to the handler until the clock moved"
            );
            let started = log
                .events()
                .into_iter()
                .find_map(|e| match e {
                    Ev::Start { offset: o, at, .. } if o == offset => Some(at),
                    _ => None,
                })
                .unwrap();
            assert_eq!(started, produced_at, "record {offset} waited for a timer");
            // Let it finish (the scripted handler takes 1 ms) and the engine idle again.
            tokio::time::sleep(Duration::from_millis(777)).await;
            assert_eq!(ends_ok(&log, 0), offset as usize + 1);
        }
        handle.close();
        run.await.unwrap().unwrap();
    });
}

/// Session `a`'s first record waits for a gate that `c-0`'s handler opens; every other record
/// logs its start and finishes at once, except `b`'s first, which never does (so the rest of `b`
/// queues behind it).
struct Gated {
    gate: Arc<tokio::sync::Notify>,
    started: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Handler for Gated {
    async fn handle(&self, record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        let key = String::from_utf8_lossy(record.key.as_deref().unwrap_or_default()).into_owned();
        self.started
            .lock()
            .unwrap()
            .push(format!("{key}@{}", record.offset));
        match (key.as_str(), record.offset) {
            ("a", 0) => self.gate.notified().await,
            ("b", 1) => std::future::pending().await,
            ("c-0", _) => self.gate.notify_one(),
            _ => {}
        }
        Ok(())
    }
}

/// A worker takes about one batch of records from its channel per loop turn, even when none of
/// them can start. Records of a session that waits (here `b`, behind a record that never
/// finishes; in a backlog a session in a retry's backoff) only queue, so a worker that took a
/// whole backlog in one turn would make a record future that became ready meanwhile (here `a`'s
/// gate, opened by the first record of the backlog; in a backlog a retry coming due) wait for all
/// of it. Under the paused clock
/// nothing here waits for time: the order of the handler starts shows how much of the backlog the
/// worker took before `a` moved on.
#[test]
fn a_record_that_becomes_ready_waits_at_most_about_one_batch_of_a_backlog() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let started = Arc::new(std::sync::Mutex::new(Vec::new()));
    let handler = Gated {
        gate,
        started: started.clone(),
    };
    let (source, handle) = MemSource::new(100_000);
    // One worker, so every session shares its loop; budgets that never pause the partition.
    let cfg = EngineConfig {
        workers: 1,
        partition_budget_bytes: 1 << 30,
        global_budget_bytes: 1 << 30,
        ..config()
    };
    let engine = Engine::new(cfg, handler, MemDeadLetters::new());
    // a@0 waits for the gate, a@1 queues behind it; b@1 never finishes.
    handle.produce(
        &tp(0),
        [
            rec(0, 0, Some("a")),
            rec(0, 1, Some("b")),
            rec(0, 2, Some("a")),
        ],
    );
    handle.assign(&[tp(0)]);
    const GROUPS: i64 = 20;
    const PER_GROUP: i64 = 1_500;
    paused_runtime().block_on(async move {
        let run = tokio::spawn(engine.run(source, std::future::pending()));
        assert!(
            without_time_passing(10_000, || started.lock().unwrap().len() == 2).await,
            "a@0 and b@1 did not start"
        );
        // The backlog, in one event: groups of 1,500 records of `b` (which only queue), each
        // followed by one record of a new session `c-<g>` (which starts at once).
        let mut backlog = Vec::new();
        let mut offset = 3;
        for g in 0..GROUPS {
            for _ in 0..PER_GROUP {
                backlog.push(rec(0, offset, Some("b")));
                offset += 1;
            }
            backlog.push(rec(0, offset, Some(&format!("c-{g}"))));
            offset += 1;
        }
        handle.produce(&tp(0), backlog);
        let all_started = || {
            let s = started.lock().unwrap();
            s.iter().any(|k| k == "a@2")
                && s.iter().filter(|k| k.starts_with("c-")).count() == GROUPS as usize
        };
        assert!(
            without_time_passing(100_000, all_started).await,
            "not everything started: {:?}",
            started.lock().unwrap()
        );
        let order = started.lock().unwrap().clone();
        let a1 = order.iter().position(|k| k == "a@2").unwrap();
        let c_before: Vec<&String> = order[..a1].iter().filter(|k| k.starts_with("c-")).collect();
        // c-0 opened the gate; at most the group after it may have been taken in the same turn.
        assert!(
            c_before.len() <= 2,
            "a's next record started only after {} groups of the backlog were taken: {c_before:?}",
            c_before.len()
        );
        handle.close();
        drop(run);
    });
}
