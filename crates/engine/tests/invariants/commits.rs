//! Commits: a failed final commit is reported, a revoke's commit is retried before its ack, a
//! blocked commit does not stall dispatch, commit metadata is checked and shrunk to fit, and a loss
//! waits for the commit in flight.

use super::*;

/// A final commit that keeps failing makes `run` return an error, not `Ok`.
#[test]
fn run_reports_a_final_commit_that_failed() {
    let (log, handler, dlq) = logged();
    let (source, handle) = MemSource::new(100);
    handle.produce(&tp(0), (0..10).map(|i| rec(0, i, Some("k"))));
    handle.assign(&[tp(0)]);
    let cfg = EngineConfig {
        commit_interval: Duration::from_secs(3600),
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    let result = paused_runtime().block_on(async move {
        let run = tokio::spawn(run_checked(engine, source, log));
        tokio::time::sleep(Duration::from_secs(1)).await;
        handle.fail_commits(u32::MAX);
        handle.close();
        run.await.unwrap()
    });
    let err = result.expect_err("run returned Ok although its final commit failed");
    assert!(err.to_string().contains("commit"), "{err}");
}

/// A revoke's commit is retried; the revoke is acknowledged only once it succeeded.
#[test]
fn revoke_commit_is_retried_before_the_ack() {
    let (log, handler, dlq) = logged();
    let (source, handle) = MemSource::new(100);
    handle.produce(&tp(0), (0..10).map(|i| rec(0, i, Some("k"))));
    handle.assign(&[tp(0)]);
    let cfg = EngineConfig {
        commit_interval: Duration::from_secs(3600),
        ..config()
    };
    let engine = Engine::new(cfg, handler, dlq);
    paused_runtime().block_on(async move {
        let run = tokio::spawn(run_checked(engine, source, log));
        tokio::time::sleep(Duration::from_secs(1)).await;
        handle.fail_commits(2);
        handle.revoke(&[tp(0)]).await.unwrap();
        assert_eq!(
            handle.committed(&tp(0)).map(|c| c.offset),
            Some(10),
            "revoke acknowledged without its commit"
        );
        handle.close();
        run.await.unwrap().unwrap();
    });
}

/// A source whose commits block until released.
struct BlockingCommits<S> {
    inner: S,
    gate: Arc<tokio::sync::Semaphore>,
}

impl<S: Source> Source for BlockingCommits<S> {
    async fn next_event(&mut self) -> Result<Option<SourceEvent>, SourceError> {
        self.inner.next_event().await
    }
    fn pause(&mut self, tp: &TopicPartition) {
        self.inner.pause(tp);
    }
    fn resume(&mut self, tp: &TopicPartition) {
        self.inner.resume(tp);
    }
    fn commit(
        &mut self,
        offsets: Vec<(TopicPartition, CommitPoint)>,
    ) -> impl std::future::Future<Output = Result<(), SourceError>> + Send + 'static {
        let gate = self.gate.clone();
        let commit = self.inner.commit(offsets);
        async move {
            let _permit = gate.acquire().await;
            commit.await
        }
    }
}

/// A commit that waits (the group's gate is held over JoinGroup/SyncGroup) must not stall
/// dispatch: records fetched meanwhile are still handled.
#[test]
fn a_blocked_commit_does_not_stall_dispatch() {
    let (log, handler, dlq) = logged();
    let (source, handle) = MemSource::new(10);
    handle.produce(&tp(0), (0..50).map(|i| rec(0, i, Some(&format!("k{i}")))));
    handle.assign(&[tp(0)]);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let engine = Engine::new(config(), handler, dlq);
    let log2 = log.clone();
    let g = gate.clone();
    paused_runtime().block_on(async move {
        let run = tokio::spawn(engine.run(
            BlockingCommits {
                inner: source,
                gate: g,
            },
            std::future::pending(),
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(ends_ok(&log2, 0), 50);
        // The periodic commit is now blocked; more records arrive.
        handle.produce(&tp(0), (50..100).map(|i| rec(0, i, Some(&format!("k{i}")))));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            ends_ok(&log2, 0),
            100,
            "dispatch stalled behind a blocked commit"
        );
        gate.add_permits(1_000);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(100));
        handle.close();
        run.await.unwrap().unwrap();
    });
}

/// Metadata claiming offsets beyond the partition's high watermark is rejected (trusted,
/// `o1:1,<huge>` would mark every future record done and they would be silently skipped).
#[test]
fn metadata_beyond_the_high_watermark_is_rejected() {
    let (log, handler, dlq) = logged();
    let (mut source, handle) = MemSource::new(100);
    let produced: Vec<_> = (0..20).map(|i| rec(0, i, Some(&format!("k{i}")))).collect();
    handle.produce(&tp(0), produced.clone());
    let rt = paused_runtime();
    rt.block_on(source.commit(vec![(
        tp(0),
        CommitPoint {
            offset: 0,
            metadata: "o1:1,zzzzzzzzzzzz".into(),
        },
    )]))
    .unwrap();
    handle.assign(&[tp(0)]);
    handle.finish_when_drained();
    let engine = Engine::new(config(), handler, dlq);
    rt.block_on(run_checked(engine, source, log.clone()))
        .unwrap();
    assert_each_once(&log, &produced);
    assert_eq!(handle.committed(&tp(0)).map(|c| c.offset), Some(20));
}

/// A broker with a smaller `offset.metadata.max.bytes` refuses the metadata; the engine
/// halves its limit until the commit fits, instead of failing every commit forever.
#[test]
fn metadata_refused_as_too_large_is_shrunk_until_it_fits() {
    let (log, mut handler, dlq) = logged();
    // Even offsets are slow, odd ones fast: 50 completed runs above the watermark.
    for i in (0..100).step_by(2) {
        handler.durations.insert((0, i), Duration::from_secs(10));
    }
    let (source, handle) = MemSource::new(100);
    handle.produce(&tp(0), (0..100).map(|i| rec(0, i, Some(&format!("k{i}")))));
    handle.assign(&[tp(0)]);
    handle.limit_metadata(40);
    let engine = Engine::new(config(), handler, dlq);
    let stats = engine.stats();
    paused_runtime().block_on(async move {
        let run = tokio::spawn(run_checked(engine, source, log));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cp = handle.committed(&tp(0)).expect("no commit got through");
        assert_eq!(cp.offset, 0);
        assert!(
            !cp.metadata.is_empty() && cp.metadata.len() <= 40,
            "{:?}",
            cp.metadata
        );
        assert!(stats.commit_failures() >= 1);
        handle.close();
        run.await.unwrap().unwrap();
    });
}

/// A loss is acknowledged only after the commit the engine had in flight finished, so
/// the driver cannot let the member join a new generation under which that commit would land.
#[test]
fn lost_is_acknowledged_after_the_commit_in_flight() {
    let (log, handler, dlq) = logged();
    let (source, handle) = MemSource::new(10);
    handle.produce(&tp(0), (0..20).map(|i| rec(0, i, Some(&format!("k{i}")))));
    handle.assign(&[tp(0)]);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let engine = Engine::new(config(), handler, dlq);
    let g = gate.clone();
    paused_runtime().block_on(async move {
        let run = tokio::spawn(engine.run(
            BlockingCommits {
                inner: Checking { inner: source, log },
                gate: g,
            },
            std::future::pending(),
        ));
        // Records done; the periodic commit is sent and now waits (as behind a rebalance).
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut ack = handle.lose(&[tp(0)]);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            ack.try_recv().is_err(),
            "loss acknowledged while a commit naming it was in flight"
        );
        let commits_before = handle.commits().len();
        gate.add_permits(1_000);
        tokio::time::timeout(Duration::from_secs(5), ack)
            .await
            .expect("no ack after the commit finished")
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        // The blocked commit went through (the mem source does not model the generation), and
        // nothing after the ack names the lost partition.
        assert_eq!(handle.commits().len(), commits_before + 1);
        handle.close();
        run.await.unwrap().unwrap();
    });
}
