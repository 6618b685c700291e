//! Dead letters: the stuck path drops the first attempt before writing, a failing write is
//! reported and never skipped, and `park-session` keeps a session's order through the DLQ.

use super::*;

/// Drops set a flag: shows whether the handler's future (and what it holds) is gone.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

struct HangHolding {
    dropped: Arc<AtomicBool>,
}

impl Handler for HangHolding {
    async fn handle(&self, _record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        let _held = DropFlag(self.dropped.clone());
        std::future::pending::<()>().await;
        Ok(())
    }
}

struct CheckingDlq {
    dropped: Arc<AtomicBool>,
    alive_at_send: Arc<AtomicUsize>,
    inner: MemDeadLetters,
}

impl DeadLetterSink for CheckingDlq {
    async fn send(&self, letter: &DeadLetter) -> Result<(), DlqError> {
        if !self.dropped.load(SeqCst) {
            self.alive_at_send.fetch_add(1, SeqCst);
        }
        self.inner.send(letter).await
    }
}

/// When the stuck timeout fires, the first attempt's future is dropped before the
/// dead-letter write (its locks, permits and transactions must not be held during it).
#[test]
fn stuck_path_drops_the_first_attempt_before_dead_lettering() {
    let dropped = Arc::new(AtomicBool::new(false));
    let alive = Arc::new(AtomicUsize::new(0));
    let handler = HangHolding {
        dropped: dropped.clone(),
    };
    let dlq = Arc::new(CheckingDlq {
        dropped,
        alive_at_send: alive.clone(),
        inner: MemDeadLetters::new(),
    });
    let (source, handle) = MemSource::new(10);
    handle.produce(&tp(0), [rec(0, 0, Some("k"))]);
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let cfg = EngineConfig {
        stuck_timeout: Some(Duration::from_secs(2)),
        attempt_timeout: None,
        ..config()
    };
    let engine = Engine::from_arcs(cfg, Arc::new(handler), dlq.clone());
    let stats = engine.stats();
    paused_runtime()
        .block_on(engine.run(source, std::future::pending()))
        .unwrap();
    assert_eq!(stats.stuck(), 1);
    assert_eq!(dlq.inner.letters().len(), 1);
    assert_eq!(
        alive.load(SeqCst),
        0,
        "the hanging attempt was still alive during the dead-letter write"
    );
}

/// A dead-letter write that fails past the stuck-gap timeout is reported (counted and
/// logged), never skipped; once the DLQ recovers the record is dead-lettered and committed.
#[test]
fn dead_letter_write_failing_past_the_stuck_timeout_is_reported_not_skipped() {
    let (log, mut handler, dlq) = logged();
    handler.steps.insert((0, 0), vec![Step::Permanent]);
    dlq.inner.fail_next(30);
    let (source, handle) = MemSource::new(10);
    let produced: Vec<_> = (0..10).map(|i| rec(0, i, Some(&format!("k{i}")))).collect();
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let cfg = EngineConfig {
        stuck_timeout: Some(Duration::from_secs(5)),
        dlq_retry: RetryPolicy {
            base: Duration::from_millis(500),
            factor: 1.0,
            cap: Duration::from_millis(500),
            max_attempts: None,
        },
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let stats = engine.stats();
    paused_runtime()
        .block_on(run_checked(engine, source, log.clone()))
        .unwrap();
    assert_each_once(&log, &produced);
    assert_eq!(stats.dlq_stalled(), 1);
    assert_eq!(
        stats.stuck(),
        0,
        "a dead-letter write is never skipped as stuck"
    );
    assert_eq!(stats.dead_lettered(), 1);
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(10));
}

/// The order-preserving DLQ: in `park-session` mode, a session with a permanent failure at its
/// record 3 of 10 ends with 3..10 in the DLQ in order (3 `permanent`, 4..10 `parked`), other
/// sessions are unaffected; after the operator releases the session, replaying the DLQ in order
/// brings 3..10 back and they are handled in order.
#[test]
fn park_session_sends_the_rest_of_the_session_to_the_dlq_in_order_and_replay_restores_it() {
    let (log, mut handler, dlq) = logged();
    let (source, handle) = MemSource::new(4);
    // Sessions a, b, c interleaved: offset = 3 * (seq - 1) + session index.
    let mut produced = Vec::new();
    for seq in 1..=10i64 {
        for (i, s) in ["a", "b", "c"].iter().enumerate() {
            let off = 3 * (seq - 1) + i as i64;
            let mut r = rec(0, off, Some(s));
            r.headers.push(Header::new("seq", seq.to_string()));
            produced.push(r);
        }
    }
    // a's record 3 fails permanently.
    handler.steps.insert((0, 6), vec![Step::Permanent]);
    handle.produce(&tp(0), produced.clone());
    handle.assign(&[tp(0)]);
    let dlq = Arc::new(dlq);
    let cfg = EngineConfig {
        dlq_mode: orderly_engine::DlqMode::ParkSession,
        seq_header: Some("seq".into()),
        ..config()
    };
    let engine = Engine::from_arcs(cfg, Arc::new(handler), dlq.clone());
    let parked = engine.parked();
    let stats = engine.stats();
    let letters = paused_runtime().block_on({
        let dlq = dlq.clone();
        let handle = handle.clone();
        let log = log.clone();
        let parked = parked.clone();
        async move {
            let run = tokio::spawn(run_checked(engine, source, log.clone()));
            tokio::time::sleep(Duration::from_secs(2)).await;
            let letters = dlq.inner.letters();
            let seq_of = |l: &DeadLetter| {
                let v = l.record.header("seq").unwrap();
                std::str::from_utf8(v).unwrap().parse::<i64>().unwrap()
            };
            let got: Vec<(String, i64, &str)> = letters
                .iter()
                .map(|l| {
                    (
                        String::from_utf8_lossy(l.record.key.as_deref().unwrap()).into_owned(),
                        seq_of(l),
                        l.reason.code(),
                    )
                })
                .collect();
            let mut want = vec![("a".to_owned(), 3, "permanent")];
            want.extend((4..=10).map(|s| ("a".to_owned(), s, "parked")));
            assert_eq!(got, want);
            // b and c were handled completely; the watermark passed everything.
            assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(30));
            let list = parked.list();
            assert_eq!(list.len(), 1);
            assert_eq!((&list[0].session[..], list[0].since_offset), (&b"a"[..], 6));
            assert_eq!(list[0].parked_records, 7);

            // The operator releases the session and replays the DLQ in order.
            assert!(parked.release(&tp(0), b"a"));
            assert!(parked.is_empty());
            let replayed: Vec<Record> = letters
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let mut r = l.record.clone();
                    r.offset = 30 + i as i64;
                    r
                })
                .collect();
            handle.produce(&tp(0), replayed);
            tokio::time::sleep(Duration::from_secs(2)).await;
            handle.close();
            run.await.unwrap().unwrap();
            letters
        }
    });
    assert_eq!(letters.len(), 8);
    // The replayed records (offsets 30..38) were handled, in order, after the release.
    let ends: Vec<i64> = log
        .events()
        .iter()
        .filter_map(|e| match e {
            Ev::End {
                offset,
                step: Step::Ok,
                ..
            } if *offset >= 30 => Some(*offset),
            _ => None,
        })
        .collect();
    assert_eq!(ends, (30..38).collect::<Vec<_>>());
    assert_eq!(stats.ordering_violations(), 0);
    assert_eq!(dlq.inner.letters().len(), 8, "nothing more was parked");
}
