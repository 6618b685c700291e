//! Parked sessions with a store (`MemParkedStore`), under paused time: the parked set outlives an
//! engine, and replay rounds release a session in order, whatever arrives meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use orderly_engine::mem::MemSource;
use orderly_engine::parked::{REPLAY_LAST, REPLAY_ORIGIN, REPLAY_ROUND};
use orderly_engine::{DlqMode, Engine, EngineConfig, Header, MemParkedStore, Record};

fn park_config() -> EngineConfig {
    EngineConfig {
        dlq_mode: DlqMode::ParkSession,
        ..config()
    }
}

/// A record of replay round `round` copying the record at `origin`.
fn replayed(offset: i64, round: &str, origin: i64, last: bool) -> Record {
    let mut r = rec(0, offset, Some("a"));
    r.headers.push(Header::new(REPLAY_ROUND, round.to_owned()));
    r.headers
        .push(Header::new(REPLAY_ORIGIN, origin.to_string()));
    if last {
        r.headers.push(Header::new(REPLAY_LAST, "1"));
    }
    r
}

/// Handled offsets (ok) and dead letters `(offset, reason)` of partition 0, in log order.
fn outcome(log: &Log) -> (Vec<i64>, Vec<(i64, String)>) {
    let mut ok = Vec::new();
    let mut dlq = Vec::new();
    for e in log.events() {
        match e {
            Ev::End {
                offset,
                step: Step::Ok,
                ..
            } => ok.push(offset),
            Ev::Dlq { offset, reason, .. } => dlq.push((offset, reason)),
            _ => {}
        }
    }
    (ok, dlq)
}

/// (since, last letter, failed round) of session `a`'s store entry, `None` once released.
fn entry(store: &MemParkedStore) -> Option<(i64, i64, Option<String>)> {
    store
        .entries()
        .into_iter()
        .find(|e| &e.session[..] == b"a")
        .map(|e| (e.since_offset, e.last_letter, e.failed_round))
}

/// Engine 1 parks `a`; engine 2 (a restart: new engine, new source, same store) parks a's next
/// record instead of handling it, then a replay round releases `a`, and a live record after it is
/// handled.
#[test]
fn the_parked_set_outlives_the_engine_and_a_round_releases_it() {
    let store = MemParkedStore::default();
    let (log, mut handler, dlq) = logged();
    handler.steps.insert((0, 1), vec![Step::Permanent]);
    let handler = Arc::new(handler);
    let dlq = Arc::new(dlq);
    let (source, handle) = MemSource::new(4);
    handle.produce(
        &tp(0),
        [
            rec(0, 0, Some("a")),
            rec(0, 1, Some("a")),
            rec(0, 2, Some("a")),
            rec(0, 3, Some("b")),
        ],
    );
    handle.assign(&[tp(0)]);
    paused_runtime().block_on(async {
        let engine = Engine::from_arcs(park_config(), handler.clone(), dlq.clone());
        assert!(engine.parked().set_store(Arc::new(store.clone())));
        let run = tokio::spawn(run_checked(engine, source, log.clone()));
        tokio::time::sleep(Duration::from_secs(2)).await;
        handle.close();
        run.await.unwrap().unwrap();
        assert_eq!(entry(&store), Some((1, 2, None)));

        let source = handle.reopen(4);
        handle.assign(&[tp(0)]);
        let engine = Engine::from_arcs(park_config(), handler.clone(), dlq.clone());
        let parked = engine.parked();
        parked.set_store(Arc::new(store.clone()));
        let run = tokio::spawn(run_checked(engine, source, log.clone()));
        handle.produce(&tp(0), [rec(0, 4, Some("a"))]);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(parked.list().len(), 1, "loaded from the store");
        assert_eq!(entry(&store), Some((1, 4, None)));
        handle.produce(
            &tp(0),
            [
                replayed(5, "r1", 1, false),
                replayed(6, "r1", 2, false),
                replayed(7, "r1", 4, true),
            ],
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(entry(&store), None, "released");
        assert!(parked.is_empty());
        handle.produce(&tp(0), [rec(0, 8, Some("a"))]);
        tokio::time::sleep(Duration::from_secs(2)).await;
        handle.close();
        run.await.unwrap().unwrap();
    });
    let (ok, dlq) = outcome(&log);
    let a: Vec<i64> = ok.iter().copied().filter(|&o| o != 3).collect();
    assert_eq!(a, [0, 5, 6, 7, 8], "a's records in order, a@4 not handled");
    assert!(ok.contains(&3), "b went on");
    assert_eq!(
        dlq,
        [
            (1, "permanent".to_owned()),
            (2, "parked".to_owned()),
            (4, "parked".to_owned())
        ]
    );
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(9));
}

/// A live record that arrives in the middle of a round is parked behind it and keeps the session
/// parked from just after the round; a round whose record is refused again stops there (its later
/// records are parked, not handled) and the session stays parked from that record; the next
/// round then releases it. The handler sees the session's records in their order.
#[test]
fn rounds_keep_order_when_records_arrive_meanwhile_or_fail_again() {
    rounds_keep_order(park_config());
}

/// The same with batches on: a parked session's records are never batched (each is decided on
/// its own), so no live record rides along with a round's record.
#[test]
fn rounds_keep_order_with_batches() {
    rounds_keep_order(EngineConfig {
        batch_max: 8,
        ..park_config()
    });
}

fn rounds_keep_order(cfg: EngineConfig) {
    let store = MemParkedStore::default();
    let (log, mut handler, dlq) = logged();
    handler.steps.insert((0, 0), vec![Step::Permanent]);
    handler.durations.insert((0, 0), Duration::from_millis(50));
    // The first copy of origin 3 (in round r2) is refused again.
    handler.steps.insert((0, 5), vec![Step::Permanent]);
    let (source, handle) = MemSource::new(1);
    handle.assign(&[tp(0)]);
    paused_runtime().block_on(async {
        let engine = Engine::new(cfg, handler, dlq);
        engine.parked().set_store(Arc::new(store.clone()));
        let run = tokio::spawn(run_checked(engine, source, log.clone()));
        let step = async |records: Vec<Record>| {
            handle.produce(&tp(0), records);
            tokio::time::sleep(Duration::from_secs(2)).await;
        };
        // a@0 fails (slowly, so everything after it queues behind it): parked from origin 0;
        // a@1 is parked behind it. Round r1 replays origins 0 and 1; a live a@3 lands between
        // its two records.
        step(vec![
            rec(0, 0, Some("a")),
            rec(0, 1, Some("a")),
            replayed(2, "r1", 0, false),
            rec(0, 3, Some("a")),
            replayed(4, "r1", 1, true),
        ])
        .await;
        assert_eq!(entry(&store), Some((2, 3, None)), "parked behind the round");
        // Round r2 replays origin 3 (the live a@3): refused again, and a second record of the
        // round (a repeat, as after a redelivery) is parked, not handled.
        step(vec![
            replayed(5, "r2", 3, false),
            replayed(6, "r2", 3, true),
        ])
        .await;
        assert_eq!(entry(&store), Some((3, 3, Some("r2".into()))));
        // Round r3 replays origin 3 again: handled, released.
        step(vec![replayed(7, "r3", 3, true)]).await;
        assert_eq!(entry(&store), None);
        handle.close();
        run.await.unwrap().unwrap();
    });
    let (ok, dlq) = outcome(&log);
    assert_eq!(ok, [2, 4, 7], "origins 0, 1, then 3: the session's order");
    assert_eq!(
        dlq,
        [
            (0, "permanent".to_owned()),
            (1, "parked".to_owned()),
            (3, "parked".to_owned()),
            (5, "permanent".to_owned()),
            (6, "parked".to_owned())
        ]
    );
    assert!(log.violations.lock().unwrap().is_empty());
}

/// A partition that leaves and comes back to the same engine: meanwhile another owner parked a
/// session this engine still has in its session table. The assignment loads the store again and
/// the session's next record is parked, not handled.
#[test]
fn a_partition_assigned_again_honours_what_another_owner_parked_meanwhile() {
    use orderly_engine::{ParkedSession, ParkedStore};
    let store = MemParkedStore::default();
    let (log, handler, dlq) = logged();
    let (source, handle) = MemSource::new(4);
    handle.produce(&tp(0), [rec(0, 0, Some("a"))]);
    handle.assign(&[tp(0)]);
    paused_runtime().block_on(async {
        let cfg = EngineConfig {
            session_idle_timeout: Duration::from_secs(3600),
            ..park_config()
        };
        let engine = Engine::new(cfg, handler, dlq);
        engine.parked().set_store(Arc::new(store.clone()));
        let run = tokio::spawn(run_checked(engine, source, log.clone()));
        tokio::time::sleep(Duration::from_secs(2)).await;
        handle.revoke(&[tp(0)]).await.unwrap();
        // Another owner handled nothing more, but parked `a` at offset 1.
        store
            .put(&ParkedSession {
                partition: tp(0),
                session: bytes::Bytes::from_static(b"a"),
                since_offset: 1,
                last_letter: 1,
                failed_round: None,
                reason: "permanent".into(),
                parked_records: 0,
            })
            .await
            .unwrap();
        handle.produce(&tp(0), [rec(0, 1, Some("b")), rec(0, 2, Some("a"))]);
        handle.assign(&[tp(0)]);
        tokio::time::sleep(Duration::from_secs(2)).await;
        handle.close();
        run.await.unwrap().unwrap();
    });
    let (ok, dlq) = outcome(&log);
    assert_eq!(ok, [0, 1]);
    assert_eq!(dlq, [(2, "parked".to_owned())]);
}

/// The store may hold a park that no commit covers yet (a crash, or an aborted transaction in
/// the exactly-once mode): a@10 handled, a@11 dead-lettered (parking `a` since 11), then the
/// partition is lost before any commit past 9 and assigned again. a@10 precedes the park: it is
/// handled again, not dead-lettered as `parked` (a round replays from 11 and would never bring
/// it back); a@11 and later records follow the park.
#[test]
fn a_record_before_the_park_is_handled_again_after_a_restart_below_it() {
    let store = MemParkedStore::default();
    let (log, mut handler, dlq) = logged();
    handler.steps.insert((0, 11), vec![Step::Permanent]);
    let (source, handle) = MemSource::new(4);
    handle.produce(&tp(0), (0..10).map(|o| rec(0, o, Some("b"))));
    handle.produce(&tp(0), [rec(0, 10, Some("a")), rec(0, 11, Some("a"))]);
    handle.assign(&[tp(0)]);
    paused_runtime().block_on(async {
        let cfg = EngineConfig {
            commit_interval: Duration::from_secs(3600),
            ..park_config()
        };
        let engine = Engine::new(cfg, handler, dlq);
        engine.parked().set_store(Arc::new(store.clone()));
        let run = tokio::spawn(run_checked(engine, source, log.clone()));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(entry(&store), Some((11, 11, None)), "parked since 11");
        assert_eq!(handle.committed(&tp(0)), None, "nothing committed yet");
        handle.lose(&[tp(0)]).await.unwrap();
        handle.assign(&[tp(0)]);
        handle.produce(&tp(0), [rec(0, 12, Some("a"))]);
        tokio::time::sleep(Duration::from_secs(2)).await;
        handle.close();
        run.await.unwrap().unwrap();
    });
    let (ok, dlq) = outcome(&log);
    let a: Vec<i64> = ok.iter().copied().filter(|&o| o >= 10).collect();
    assert_eq!(
        a,
        [10, 10],
        "a@10 handled, and handled again after the loss"
    );
    assert_eq!(
        dlq,
        [
            (11, "permanent".to_owned()),
            (11, "parked".to_owned()),
            (12, "parked".to_owned())
        ]
    );
    assert_eq!(entry(&store), Some((11, 12, None)));
}
