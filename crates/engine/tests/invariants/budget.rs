//! The memory budget: freeing it resumes what it paused, the tracker stays bounded behind a held
//! watermark, and records sharing a buffer are charged that buffer.

use super::*;

/// How P0 lets go of its partition in [`freeing_the_global_budget_resumes_the_other_partition`].
#[derive(Clone, Copy)]
enum LetGo {
    Revoke,
    Lose,
}

/// P0's held records fill the global budget and P1 gets paused; then P0 is revoked (or
/// lost). The budget it frees must resume P1 although no completion follows: the revoke skips
/// P0's queued records and waits for the running one inside its drain (P1 must not stay paused
/// forever); a loss cancels them.
fn freeing_the_global_budget_resumes_the_other_partition(how: LetGo) {
    let (log, mut handler, dlq) = logged();
    // P0: one session whose first record runs 3 s; the rest queue behind it and hold bytes.
    handler.durations.insert((0, 0), Duration::from_secs(3));
    let (source, handle) = MemSource::new(10);
    handle.produce(&tp(0), (0..40).map(|i| rec(0, i, Some("stuck"))));
    handle.produce(
        &tp(1),
        (0..100).map(|i| rec(1, i, Some(&format!("k{}", i % 9)))),
    );
    handle.assign(&[tp(0), tp(1)]);
    let cfg = EngineConfig {
        // Ten records are about 1.3 KB: P0's first batch fills most of the global budget.
        global_budget_bytes: 2_000,
        stuck_timeout: None,
        attempt_timeout: None,
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let log2 = log.clone();
    paused_runtime().block_on(async move {
        let run = tokio::spawn(run_checked(engine, source, log2));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            handle.is_paused(&tp(1)),
            "P1 should be paused by the global budget"
        );
        assert!(ends_ok(&log, 1) < 100);
        match how {
            LetGo::Revoke => handle.revoke(&[tp(0)]).await.unwrap(),
            LetGo::Lose => handle.lose(&[tp(0)]).await.unwrap(),
        }
        // Only a resume can bring P1's rest.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            ends_ok(&log, 1),
            100,
            "P1 stayed paused after P0 freed the budget"
        );
        handle.close();
        run.await.unwrap().unwrap();
    });
}

#[test]
fn revoke_that_frees_the_global_budget_resumes_the_other_partition() {
    freeing_the_global_budget_resumes_the_other_partition(LetGo::Revoke);
}

#[test]
fn lost_partition_that_frees_the_global_budget_resumes_the_other() {
    freeing_the_global_budget_resumes_the_other_partition(LetGo::Lose);
}

/// A watermark held by one hanging record (no stuck timeout) must not let the tracker
/// grow without limit: finished entries behind the front count against the budget.
#[test]
fn held_watermark_pauses_instead_of_growing_the_tracker() {
    let (log, mut handler, dlq) = logged();
    handler.steps.insert((0, 0), vec![Step::Hang]);
    let (source, handle) = MemSource::new(500);
    handle.produce(
        &tp(0),
        (0..50_000).map(|i| rec(0, i, Some(&format!("k{}", i % 1000)))),
    );
    handle.assign(&[tp(0)]);
    let cfg = EngineConfig {
        partition_budget_bytes: 64 << 10,
        stuck_timeout: None,
        attempt_timeout: None,
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let log2 = log.clone();
    paused_runtime().block_on(async move {
        let run = tokio::spawn(run_checked(engine, source, log2));
        tokio::time::sleep(Duration::from_secs(10)).await;
        let started = starts(&log);
        assert!(
            started < 5_000,
            "{started} records admitted behind one held offset with a 64 KiB budget"
        );
        assert!(handle.is_paused(&tp(0)));
        handle.close();
        run.await.unwrap().unwrap();
    });
}

/// Records whose values are slices of one shared buffer (the Kafka driver decodes
/// consecutive records into one) are charged that buffer, once, while any of them is in flight.
/// One session hangs and has one record in every buffer: the hung record and the ones queued
/// behind it keep every buffer alive, so the partition must pause once its 256 KiB budget is
/// full and stay paused: 16 KiB buffers (here after two batches of 500 records: 10 buffers
/// pinned, ~164 KiB, above the half budget that resumes: 991 records started). Charged by their
/// own ~160-byte slices, several times as many records would start before the tracker entries
/// behind the held watermark filled the budget.
#[test]
fn records_in_a_shared_buffer_are_charged_the_whole_buffer_while_any_is_in_flight() {
    let (log, mut handler, dlq) = logged();
    handler.steps.insert((0, 0), vec![Step::Hang]);
    let (source, handle) = MemSource::new(500);
    let mut records = Vec::new();
    for b in 0..200 {
        let buf = bytes::Bytes::from(vec![7u8; 16 << 10]);
        let shared = orderly_engine::SharedBuffer::of(&buf);
        for j in 0..100 {
            let offset = b * 100 + j;
            let key = if j == 0 {
                "stuck".to_owned()
            } else {
                format!("k{}", offset % 50)
            };
            let mut r = rec(0, offset as i64, Some(&key));
            r.value = Some(buf.slice(j * 160..(j + 1) * 160));
            r.shared = Some(shared);
            records.push(r);
        }
    }
    handle.produce(&tp(0), records);
    handle.assign(&[tp(0)]);
    let cfg = EngineConfig {
        partition_budget_bytes: 256 << 10,
        stuck_timeout: None,
        attempt_timeout: None,
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let log2 = log.clone();
    paused_runtime().block_on(async move {
        let run = tokio::spawn(run_checked(engine, source, log2));
        tokio::time::sleep(Duration::from_secs(10)).await;
        let started = starts(&log);
        assert!(
            (500..2_000).contains(&started),
            "{started} records admitted while 16 KiB buffers are pinned, with a 256 KiB budget"
        );
        assert!(handle.is_paused(&tp(0)));
        handle.close();
        run.await.unwrap().unwrap();
    });
}
