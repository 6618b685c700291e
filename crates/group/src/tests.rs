//! State-machine tests against the scripted fake coordinator, with paused tokio time.

use std::sync::Arc;
use std::time::Duration;

use crate::assignor::RangeAssignor;
use crate::codes::{Api, ErrorCode as E};
use crate::testing::{Call, FakeCoordinator, Reply};
use crate::*;

fn config() -> GroupConfig {
    let mut c = GroupConfig::new("g", ["t"])
        .with_session_timeout(Duration::from_secs(10))
        .with_heartbeat_interval(Duration::from_secs(1));
    c.retry_backoff = Duration::from_millis(10);
    c.retry_backoff_max = Duration::from_millis(50);
    c
}

struct Running {
    fake: Arc<FakeCoordinator>,
    handle: GroupHandle,
    events: RebalanceEvents,
    task: MemberTask,
}

fn start(cfg: GroupConfig) -> Running {
    start_with(cfg, FakeCoordinator::new([("t", 4)]))
}

fn start_with(cfg: GroupConfig, fake: FakeCoordinator) -> Running {
    let fake = Arc::new(fake);
    let GroupMember {
        handle,
        events,
        task,
    } = GroupMember::spawn(cfg, fake.clone(), std::future::pending()).unwrap();
    Running {
        fake,
        handle,
        events,
        task,
    }
}

async fn next(events: &mut RebalanceEvents) -> RebalanceEvent {
    tokio::time::timeout(Duration::from_secs(120), events.next())
        .await
        .expect("no event within 120 s")
        .expect("member stopped")
}

/// Receives an Assigned event, acknowledges it, returns its partitions.
async fn assigned(events: &mut RebalanceEvents) -> Vec<AssignedPartition> {
    match next(events).await {
        RebalanceEvent::Assigned {
            partitions, ack, ..
        } => {
            ack.done();
            partitions
        }
        other => panic!("expected Assigned, got {other:?}"),
    }
}

fn tp(p: i32) -> GroupPartition {
    GroupPartition::new("t", p)
}

fn joins(fake: &FakeCoordinator) -> Vec<crate::transport::JoinGroupRequest> {
    fake.calls()
        .into_iter()
        .filter_map(|c| if let Call::Join(j) = c { Some(j) } else { None })
        .collect()
}

async fn close(r: Running) -> (Arc<FakeCoordinator>, Result<(), GroupError>) {
    r.handle.close();
    let Running {
        fake,
        mut events,
        task,
        ..
    } = r;
    // Acknowledge the close-time revoke.
    let drain = tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            drop(ev);
        }
    });
    let result = task.wait().await;
    drain.await.unwrap();
    (fake, result)
}

#[tokio::test(start_paused = true)]
async fn member_id_required_then_assigned_with_start_positions() {
    let fake = FakeCoordinator::new([("t", 4)]);
    fake.set_committed(tp(1), 42);
    let mut r = start_with(config(), fake);
    let parts = assigned(&mut r.events).await;
    assert_eq!(parts.len(), 4);
    let p1 = parts.iter().find(|a| a.partition == tp(1)).unwrap();
    assert!(matches!(
        p1.start,
        StartPosition::Committed { offset: 42, .. }
    ));
    let p0 = parts.iter().find(|a| a.partition == tp(0)).unwrap();
    assert_eq!(
        p0.start,
        StartPosition::Reset {
            offset: 100,
            policy: AutoOffsetReset::Latest
        }
    );
    let j = joins(&r.fake);
    assert_eq!(
        j.len(),
        2,
        "first join gets MEMBER_ID_REQUIRED, second uses the id"
    );
    assert_eq!(j[0].member_id, "");
    assert_eq!(j[1].member_id, "member-1");
    assert_eq!(j[1].protocols[0].0, "cooperative-sticky");
    assert_eq!(j[1].session_timeout_ms, 10_000);
    assert_eq!(j[1].rebalance_timeout_ms, 300_000);
    let g = r.handle.generation();
    assert_eq!((g.generation_id, g.member_id.as_str()), (1, "member-1"));
    assert_eq!(r.handle.owned().len(), 4);

    // Commit carries generation and member id.
    r.handle
        .commit(vec![CommitOffset {
            partition: tp(0),
            offset: 7,
            leader_epoch: None,
            metadata: Some("m".into()),
        }])
        .await
        .unwrap();
    let commit = r
        .fake
        .calls()
        .into_iter()
        .find_map(|c| {
            if let Call::Commit(c) = c {
                Some(c)
            } else {
                None
            }
        })
        .unwrap();
    assert_eq!(
        (commit.generation_id, commit.member_id.as_str()),
        (1, "member-1")
    );

    // Heartbeats run on their timer.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(r.fake.count(Api::Heartbeat) >= 4);

    // Graceful close: Revoked(all), then LeaveGroup.
    r.handle.close();
    match next(&mut r.events).await {
        RebalanceEvent::Revoked {
            partitions, ack, ..
        } => {
            assert_eq!(partitions.len(), 4);
            // Commits are still allowed inside the revoke.
            r.handle
                .commit(vec![CommitOffset {
                    partition: tp(0),
                    offset: 8,
                    leader_epoch: None,
                    metadata: None,
                }])
                .await
                .unwrap();
            ack.done();
        }
        other => panic!("expected Revoked, got {other:?}"),
    }
    r.task.wait().await.unwrap();
    assert_eq!(r.fake.count(Api::LeaveGroup), 1);
    assert_eq!(r.fake.committed()[&tp(0)].0, 8);
    assert!(
        r.events.next().await.is_none(),
        "event stream ends with the member"
    );
}

#[tokio::test(start_paused = true)]
async fn static_member_skips_member_id_required_and_leave() {
    let mut r = start(config().with_instance_id("i-1"));
    assigned(&mut r.events).await;
    let j = joins(&r.fake);
    assert_eq!(j.len(), 1);
    assert_eq!(j[0].instance_id.as_deref(), Some("i-1"));
    r.handle
        .commit(vec![CommitOffset {
            partition: tp(0),
            offset: 1,
            leader_epoch: None,
            metadata: None,
        }])
        .await
        .unwrap();
    let commit = r
        .fake
        .calls()
        .into_iter()
        .find_map(|c| {
            if let Call::Commit(c) = c {
                Some(c)
            } else {
                None
            }
        })
        .unwrap();
    assert_eq!(commit.instance_id.as_deref(), Some("i-1"));
    let (fake, result) = close(r).await;
    result.unwrap();
    assert_eq!(
        fake.count(Api::LeaveGroup),
        0,
        "static members do not leave"
    );
}

#[tokio::test(start_paused = true)]
async fn fenced_instance_is_fatal_and_clearly_worded() {
    let mut r = start(config().with_instance_id("i-1"));
    assigned(&mut r.events).await;
    r.fake
        .script(Api::Heartbeat, [Reply::Code(E::FENCED_INSTANCE_ID)]);
    match next(&mut r.events).await {
        RebalanceEvent::Lost {
            partitions, ack, ..
        } => {
            assert_eq!(partitions.len(), 4);
            ack.done();
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    let err = r.task.wait().await.unwrap_err();
    assert!(matches!(err, GroupError::FencedInstance { .. }));
    let text = err.to_string();
    assert!(text.contains("same group.instance.id \"i-1\""), "{text}");
    assert!(text.contains("has stopped"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn fenced_instance_on_join_is_fatal() {
    let fake = FakeCoordinator::new([("t", 4)]);
    fake.script(Api::JoinGroup, [Reply::Code(E::FENCED_INSTANCE_ID)]);
    let r = start_with(config().with_instance_id("i-1"), fake);
    assert!(matches!(
        r.task.wait().await,
        Err(GroupError::FencedInstance { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn cooperative_rebalance_in_progress_keeps_partitions() {
    let mut r = start(config());
    assigned(&mut r.events).await;
    r.fake
        .script(Api::Heartbeat, [Reply::Code(E::REBALANCE_IN_PROGRESS)]);
    // Same assignment again: nothing revoked, nothing added.
    let parts = assigned(&mut r.events).await;
    assert!(parts.is_empty());
    let j = joins(&r.fake);
    let last = j.last().unwrap();
    assert_eq!(last.member_id, "member-1", "rejoin keeps the member id");
    // The cooperative rejoin reports owned partitions and generation in the subscription.
    let sub = crate::payload::Subscription::decode(&last.protocols[0].1).unwrap();
    assert_eq!(sub.owned.len(), 4);
    assert_eq!(sub.generation, 1);
    assert_eq!(r.handle.owned().len(), 4);
    close(r).await.1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn eager_revokes_all_and_heartbeats_continue_during_revoke() {
    let cfg = config().with_assignors(vec![Arc::new(RangeAssignor)]);
    let mut r = start(cfg);
    assigned(&mut r.events).await;
    r.fake
        .script(Api::Heartbeat, [Reply::Code(E::REBALANCE_IN_PROGRESS)]);
    match next(&mut r.events).await {
        RebalanceEvent::Revoked {
            partitions, ack, ..
        } => {
            assert_eq!(partitions.len(), 4);
            let joins_before = joins(&r.fake).len();
            let hb_before = r.fake.count(Api::Heartbeat);
            // A slow drain: 30 s, three session timeouts' worth of heartbeats.
            tokio::time::sleep(Duration::from_secs(30)).await;
            assert!(
                r.fake.count(Api::Heartbeat) >= hb_before + 25,
                "heartbeats continue while revoking"
            );
            assert_eq!(
                joins(&r.fake).len(),
                joins_before,
                "no rejoin before the revoke returns"
            );
            ack.done();
        }
        other => panic!("expected Revoked, got {other:?}"),
    }
    // Eager: everything is assigned anew, and the subscription reports nothing owned.
    assert_eq!(assigned(&mut r.events).await.len(), 4);
    let sub = crate::payload::Subscription::decode(&joins(&r.fake).last().unwrap().protocols[0].1)
        .unwrap();
    assert!(sub.owned.is_empty());
    close(r).await.1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn unknown_member_id_loses_partitions_and_resets_member() {
    let mut r = start(config());
    assigned(&mut r.events).await;
    r.fake
        .script(Api::Heartbeat, [Reply::Code(E::UNKNOWN_MEMBER_ID)]);
    match next(&mut r.events).await {
        RebalanceEvent::Lost {
            partitions,
            reason,
            ack,
        } => {
            assert_eq!(partitions.len(), 4);
            assert_eq!(reason, LostReason::MemberReset);
            // No commit for lost partitions.
            let err = r
                .handle
                .commit(vec![CommitOffset {
                    partition: tp(0),
                    offset: 1,
                    leader_epoch: None,
                    metadata: None,
                }])
                .await
                .unwrap_err();
            assert!(matches!(err, CommitError::NotMember { .. }), "{err}");
            ack.done();
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert_eq!(assigned(&mut r.events).await.len(), 4);
    let j = joins(&r.fake);
    // Rejoin from scratch: "" then MEMBER_ID_REQUIRED then a new id.
    assert_eq!(j[j.len() - 2].member_id, "");
    assert_eq!(j[j.len() - 1].member_id, "member-2");
    close(r).await.1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn illegal_generation_loses_partitions_keeps_member_id() {
    let mut r = start(config());
    assigned(&mut r.events).await;
    r.fake
        .script(Api::Heartbeat, [Reply::Code(E::ILLEGAL_GENERATION)]);
    match next(&mut r.events).await {
        RebalanceEvent::Lost { reason, ack, .. } => {
            assert_eq!(reason, LostReason::GenerationReset);
            ack.done();
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert_eq!(assigned(&mut r.events).await.len(), 4);
    let j = joins(&r.fake);
    assert_eq!(j.last().unwrap().member_id, "member-1");
    let sub = crate::payload::Subscription::decode(&j.last().unwrap().protocols[0].1).unwrap();
    assert!(sub.owned.is_empty(), "lost partitions are not claimed");
    close(r).await.1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn coordinator_errors_rediscover_and_retry() {
    let fake = FakeCoordinator::new([("t", 4)]);
    fake.script(
        Api::FindCoordinator,
        [Reply::Code(E::COORDINATOR_NOT_AVAILABLE), Reply::Disconnect],
    );
    fake.script(
        Api::JoinGroup,
        [
            Reply::Code(E::NOT_COORDINATOR),
            Reply::Code(E::COORDINATOR_LOAD_IN_PROGRESS),
            Reply::Disconnect,
        ],
    );
    fake.script(Api::SyncGroup, [Reply::Code(E::COORDINATOR_NOT_AVAILABLE)]);
    let mut r = start_with(config(), fake);
    assert_eq!(assigned(&mut r.events).await.len(), 4);
    // 2 failed finds + 1 success, then rediscoveries after NOT_COORDINATOR, the disconnect and
    // the SyncGroup COORDINATOR_NOT_AVAILABLE (LOAD_IN_PROGRESS keeps the coordinator).
    assert_eq!(r.fake.count(Api::FindCoordinator), 6);
    // Heartbeat NOT_COORDINATOR: rediscover, no rebalance.
    let finds = r.fake.count(Api::FindCoordinator);
    let generation = r.handle.generation().generation_id;
    r.fake.script(
        Api::Heartbeat,
        [Reply::Code(E::NOT_COORDINATOR), Reply::Disconnect],
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(r.fake.count(Api::FindCoordinator), finds + 2);
    assert_eq!(
        r.handle.generation().generation_id,
        generation,
        "generation kept"
    );
    close(r).await.1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn rebalance_in_progress_on_sync_rejoins() {
    let fake = FakeCoordinator::new([("t", 4)]);
    fake.script(Api::SyncGroup, [Reply::Code(E::REBALANCE_IN_PROGRESS)]);
    let mut r = start_with(config(), fake);
    assert_eq!(assigned(&mut r.events).await.len(), 4);
    assert_eq!(joins(&r.fake).len(), 3);
    assert_eq!(r.handle.generation().generation_id, 2);
    close(r).await.1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn unknown_member_on_join_resets_member_id() {
    let fake = FakeCoordinator::new([("t", 4)]);
    fake.script(
        Api::JoinGroup,
        [Reply::Default, Reply::Code(E::UNKNOWN_MEMBER_ID)],
    );
    let mut r = start_with(config(), fake);
    assert_eq!(assigned(&mut r.events).await.len(), 4);
    let ids: Vec<String> = joins(&r.fake).into_iter().map(|j| j.member_id).collect();
    assert_eq!(ids, ["", "member-1", "", "member-2"]);
    close(r).await.1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn fatal_join_errors_stop_the_member_with_a_hint() {
    for (code, needle) in [
        (E::INVALID_SESSION_TIMEOUT, "group.min.session.timeout.ms"),
        (E::INCONSISTENT_GROUP_PROTOCOL, "no assignor is shared"),
        (E::GROUP_MAX_SIZE_REACHED, "group.max.size"),
        (E::GROUP_AUTHORIZATION_FAILED, "may not use the group"),
        (E::INVALID_GROUP_ID, "INVALID_GROUP_ID"),
    ] {
        let fake = FakeCoordinator::new([("t", 4)]);
        fake.script(Api::JoinGroup, [Reply::Default, Reply::Code(code)]);
        let r = start_with(config(), fake);
        let err = r.task.wait().await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains(needle) && text.contains("group g"), "{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn inconsistent_protocol_type_is_fatal() {
    let fake = FakeCoordinator::new([("t", 4)]);
    fake.script(
        Api::JoinGroup,
        [Reply::Join(crate::transport::JoinGroupResponse {
            protocol_type: Some("connect".into()),
            generation_id: 1,
            member_id: "x".into(),
            leader: "y".into(),
            ..Default::default()
        })],
    );
    let r = start_with(config(), fake);
    let err = r.task.wait().await.unwrap_err();
    assert!(
        matches!(
            err,
            GroupError::Fatal {
                code: E::INCONSISTENT_GROUP_PROTOCOL,
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn cooperative_revoke_only_moved_partitions_then_rejoin() {
    let mut r = start(config());
    assert_eq!(assigned(&mut r.events).await.len(), 4);
    // Another leader now gives this member only partitions 0 and 1.
    r.fake
        .force_assignment([tp(0), tp(1)].into_iter().collect());
    r.fake
        .script(Api::Heartbeat, [Reply::Code(E::REBALANCE_IN_PROGRESS)]);
    match next(&mut r.events).await {
        RebalanceEvent::Revoked {
            partitions, ack, ..
        } => {
            assert_eq!(partitions, [tp(2), tp(3)].into_iter().collect());
            ack.done();
        }
        other => panic!("expected Revoked, got {other:?}"),
    }
    assert!(assigned(&mut r.events).await.is_empty());
    // The second (KIP-429) rebalance follows at once, reporting only 0 and 1 as owned.
    assert!(assigned(&mut r.events).await.is_empty());
    let last = joins(&r.fake).last().cloned().unwrap();
    let sub = crate::payload::Subscription::decode(&last.protocols[0].1).unwrap();
    assert_eq!(sub.owned, [tp(0), tp(1)].into_iter().collect());
    assert_eq!(r.handle.owned(), [tp(0), tp(1)].into_iter().collect());
    close(r).await.1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn no_commit_between_join_and_sync() {
    let mut r = start(config());
    assigned(&mut r.events).await;
    r.fake.set_sync_delay(Duration::from_secs(3));
    r.fake
        .script(Api::Heartbeat, [Reply::Code(E::REBALANCE_IN_PROGRESS)]);
    // Wait until the rejoin's JoinGroup was sent, then commit while SyncGroup is pending.
    while joins(&r.fake).len() < 3 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let h = r.handle.clone();
    let commit = tokio::spawn(async move {
        h.commit(vec![CommitOffset {
            partition: tp(0),
            offset: 5,
            leader_epoch: None,
            metadata: None,
        }])
        .await
    });
    assigned(&mut r.events).await;
    commit.await.unwrap().unwrap();
    assert_eq!(r.fake.commits_during_rebalance(), 0);
    assert_eq!(r.fake.committed()[&tp(0)].0, 5);
    let c = r
        .fake
        .calls()
        .into_iter()
        .filter_map(|c| {
            if let Call::Commit(c) = c {
                Some(c)
            } else {
                None
            }
        })
        .last()
        .unwrap();
    assert_eq!(
        c.generation_id, 2,
        "the commit waited for the new generation"
    );
    close(r).await.1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn commit_errors() {
    let mut r = start(config());
    assigned(&mut r.events).await;
    let one = |m: Option<String>| {
        vec![CommitOffset {
            partition: tp(0),
            offset: 1,
            leader_epoch: None,
            metadata: m,
        }]
    };

    // Too long metadata is refused before sending.
    let calls = r.fake.count(Api::OffsetCommit);
    let err = r
        .handle
        .commit(one(Some("x".repeat(4097))))
        .await
        .unwrap_err();
    assert!(
        matches!(err, CommitError::MetadataTooLarge { len: 4097, .. }),
        "{err}"
    );
    assert_eq!(r.fake.count(Api::OffsetCommit), calls);
    r.handle.commit(one(Some("x".repeat(4096)))).await.unwrap();

    // Coordinator moved: retried transparently.
    r.fake.script(
        Api::OffsetCommit,
        [Reply::Code(E::NOT_COORDINATOR), Reply::Disconnect],
    );
    r.handle.commit(one(None)).await.unwrap();

    // REBALANCE_IN_PROGRESS: retriable, no reset.
    r.fake
        .script(Api::OffsetCommit, [Reply::Code(E::REBALANCE_IN_PROGRESS)]);
    let err = r.handle.commit(one(None)).await.unwrap_err();
    assert!(err.is_retriable(), "{err}");
    assert_eq!(r.handle.generation().generation_id, 1);

    // OFFSET_METADATA_TOO_LARGE from the broker: per-partition, not retriable.
    r.fake.script(
        Api::OffsetCommit,
        [Reply::Code(E::OFFSET_METADATA_TOO_LARGE)],
    );
    let err = r.handle.commit(one(None)).await.unwrap_err();
    assert!(
        matches!(err, CommitError::Partitions { .. }) && !err.is_retriable(),
        "{err}"
    );

    // ILLEGAL_GENERATION: the commit fails and the member loses its partitions and rejoins.
    r.fake
        .script(Api::OffsetCommit, [Reply::Code(E::ILLEGAL_GENERATION)]);
    let err = r.handle.commit(one(None)).await.unwrap_err();
    assert!(
        matches!(
            err,
            CommitError::Rejected {
                code: E::ILLEGAL_GENERATION,
                ..
            }
        ),
        "{err}"
    );
    match next(&mut r.events).await {
        RebalanceEvent::Lost { ack, .. } => ack.done(),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert_eq!(assigned(&mut r.events).await.len(), 4);
    close(r).await.1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn commit_future_dropped_does_not_cancel_the_request() {
    let mut r = start(config());
    assigned(&mut r.events).await;
    let fut = r.handle.commit(vec![CommitOffset {
        partition: tp(3),
        offset: 9,
        leader_epoch: None,
        metadata: None,
    }]);
    // Poll it once, then drop it.
    let _ = tokio::time::timeout(Duration::from_nanos(1), fut).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(r.fake.committed().get(&tp(3)).map(|c| c.0), Some(9));
    close(r).await.1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn auto_offset_reset_policies() {
    for (policy, want) in [
        (
            AutoOffsetReset::Earliest,
            StartPosition::Reset {
                offset: 0,
                policy: AutoOffsetReset::Earliest,
            },
        ),
        (AutoOffsetReset::None, StartPosition::Missing),
    ] {
        let mut r = start(config().with_auto_offset_reset(policy));
        let parts = assigned(&mut r.events).await;
        assert!(parts.iter().all(|p| p.start == want));
        close(r).await.1.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn offset_fetch_retries_transient_errors() {
    let fake = FakeCoordinator::new([("t", 4)]);
    fake.script(
        Api::OffsetFetch,
        [
            Reply::Code(E::COORDINATOR_LOAD_IN_PROGRESS),
            Reply::Code(E::UNSTABLE_OFFSET_COMMIT),
            Reply::Disconnect,
        ],
    );
    fake.script(Api::ListOffsets, [Reply::Code(E::NOT_LEADER_OR_FOLLOWER)]);
    let mut r = start_with(config(), fake);
    assert_eq!(assigned(&mut r.events).await.len(), 4);
    assert_eq!(r.fake.count(Api::OffsetFetch), 4);
    assert_eq!(r.fake.count(Api::ListOffsets), 2);
    close(r).await.1.unwrap();
}

/// No event may be pending on the stream (checked after letting every ready task run).
async fn no_event(events: &mut RebalanceEvents, what: &str) {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    if let Ok(ev) = events.rx.try_recv() {
        panic!("{what}: unexpected event {ev:?}");
    }
}

/// The coordinator's broker dies and no heartbeat succeeds for longer than a session
/// timeout (KRaft moves the group only after fencing the dead broker). The member must not expire
/// itself: its ownership is in doubt (dispatch held) while it keeps rediscovering and
/// heartbeating, and the first heartbeat the new coordinator answers with the same generation
/// confirms it. No Lost, no rejoin, same generation and partitions. Before the fix the member
/// reported its partitions lost after the session timeout and rejoined.
#[tokio::test(start_paused = true)]
async fn coordinator_gone_past_the_session_timeout_holds_then_confirms_without_loss() {
    let mut r = start(config());
    assert_eq!(assigned(&mut r.events).await.len(), 4);
    let generation = r.handle.generation();
    let joins_before = r.fake.count(Api::JoinGroup);
    let mut doubt = r.handle.in_doubt();
    assert!(!*doubt.borrow_and_update());
    let lease = r.handle.lease();
    assert!(lease.holds(tokio::time::Instant::now()), "held once joined");
    // The coordinator is gone for about 25 s: the heartbeat fails, and every lookup stalls
    // (each is cut after a heartbeat interval, 1 s) until the new coordinator is known.
    r.fake.script(Api::Heartbeat, [Reply::Disconnect]);
    r.fake
        .script(Api::FindCoordinator, std::iter::repeat_n(Reply::Stall, 25));
    let since = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(60), doubt.wait_for(|d| *d))
        .await
        .expect("ownership never in doubt")
        .unwrap();
    let noticed = since.elapsed();
    assert!(
        noticed >= Duration::from_secs(9) && noticed <= Duration::from_secs(12),
        "in doubt after {noticed:?} (session timeout 10 s)"
    );
    // The lease ended a session timeout after the last answered heartbeat was sent, before the
    // heartbeat task could notice.
    assert!(!lease.holds(since + Duration::from_secs(10)), "{lease:?}");
    assert!(!lease.holds(tokio::time::Instant::now()));
    no_event(&mut r.events, "in doubt").await;
    assert_eq!(r.handle.generation(), generation, "the generation is kept");
    assert_eq!(r.handle.owned().len(), 4, "the partitions are kept");
    // The new coordinator answers: confirmed.
    tokio::time::timeout(Duration::from_secs(120), doubt.wait_for(|d| !*d))
        .await
        .expect("ownership never confirmed")
        .unwrap();
    assert!(lease.holds(tokio::time::Instant::now()), "renewed");
    no_event(&mut r.events, "confirmed").await;
    assert_eq!(r.handle.generation(), generation);
    assert_eq!(r.handle.owned().len(), 4);
    assert_eq!(r.fake.count(Api::JoinGroup), joins_before, "no rejoin");
    let hb: Vec<i32> = r
        .fake
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Heartbeat(h) => Some(h.generation_id),
            _ => None,
        })
        .collect();
    assert!(
        hb.iter().all(|g| *g == generation.generation_id),
        "heartbeats keep the generation: {hb:?}"
    );
    let (_, result) = close(r).await;
    result.unwrap();
}

/// In doubt, and then the coordinator says the member is gone (its session expired there):
/// only that answer loses the partitions. The doubt is cleared only after the engine
/// acknowledged the loss, so it can never start records of the lost partitions in between.
#[tokio::test(start_paused = true)]
async fn in_doubt_then_unknown_member_loses_partitions_and_rejoins() {
    let mut r = start(config());
    assigned(&mut r.events).await;
    let mut doubt = r.handle.in_doubt();
    r.fake.script(
        Api::Heartbeat,
        [Reply::Disconnect, Reply::Code(E::UNKNOWN_MEMBER_ID)],
    );
    r.fake
        .script(Api::FindCoordinator, std::iter::repeat_n(Reply::Stall, 15));
    tokio::time::timeout(Duration::from_secs(60), doubt.wait_for(|d| *d))
        .await
        .expect("ownership never in doubt")
        .unwrap();
    match next(&mut r.events).await {
        RebalanceEvent::Lost {
            reason,
            ack,
            partitions,
        } => {
            assert_eq!(reason, LostReason::MemberReset);
            assert_eq!(partitions.len(), 4);
            tokio::time::sleep(Duration::from_secs(1)).await;
            assert!(
                *doubt.borrow(),
                "the doubt was cleared before the engine handled the loss"
            );
            ack.done();
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert_eq!(assigned(&mut r.events).await.len(), 4);
    assert!(!*doubt.borrow());
    close(r).await.1.unwrap();
}

/// A member must never go silent: a heartbeat whose answer never comes must
/// not hide the end of the session for a whole request timeout (30 s here, against a 10 s
/// session). The member puts its ownership in doubt (dispatch held) when the session ends.
#[tokio::test(start_paused = true)]
async fn unanswered_heartbeat_does_not_hide_the_end_of_the_session() {
    let cfg = config();
    assert!(cfg.request_timeout > cfg.session_timeout * 2);
    let mut r = start(cfg);
    assigned(&mut r.events).await;
    let mut doubt = r.handle.in_doubt();
    let since = tokio::time::Instant::now();
    r.fake.script(Api::Heartbeat, [Reply::Stall]);
    // The first change of the watch is to `true` (it only ever changes value); by the time this
    // task runs, the next heartbeat may have confirmed the membership again.
    tokio::time::timeout(Duration::from_secs(60), doubt.changed())
        .await
        .expect("ownership never in doubt")
        .unwrap();
    // Session timeout 10 s, counted from the last answered heartbeat (at most 1 s before `since`).
    let took = since.elapsed();
    assert!(
        took <= Duration::from_secs(11),
        "the end of the session was noticed after {took:?}"
    );
    no_event(&mut r.events, "in doubt").await;
    close(r).await.1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn leader_rejoins_when_partition_count_changes() {
    let mut cfg = config();
    cfg.metadata_refresh = Duration::from_secs(5);
    let mut r = start(cfg);
    assert_eq!(assigned(&mut r.events).await.len(), 4);
    r.fake.set_partitions("t", 6);
    let added = assigned(&mut r.events).await;
    assert_eq!(added.len(), 2);
    close(r).await.1.unwrap();
}

/// KRaft answers CreateTopics before the broker's metadata shows the topic, so a
/// member that forms its group right after the topic was created sees no partitions for it. A
/// leader that assigned nothing and, its snapshot being empty, never looked again would leave the
/// member in the group with nothing, heartbeating, until the process ended. It must rebalance as soon as
/// the topic appears, within the retry backoff, not the 5 min metadata refresh.
#[tokio::test(start_paused = true)]
async fn leader_rebalances_when_a_missing_topic_appears() {
    let cfg = config();
    assert_eq!(cfg.metadata_refresh, Duration::from_secs(300));
    let mut r = start_with(cfg, FakeCoordinator::new([("other", 2)]));
    assert!(
        assigned(&mut r.events).await.is_empty(),
        "nothing to assign while the topic is not in the metadata"
    );
    r.fake.set_partitions("t", 4);
    let added = tokio::time::timeout(Duration::from_secs(5), assigned(&mut r.events))
        .await
        .expect("the leader did not rebalance within 5 s of the topic appearing");
    assert_eq!(added.len(), 4);
    assert_eq!(r.handle.owned().len(), 4);
    // Once every topic is known the leader is back to the slow refresh: no metadata storm.
    let before = r.fake.count(Api::Metadata);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(r.fake.count(Api::Metadata), before);
    close(r).await.1.unwrap();
}

/// The same when the metadata request itself kept failing while the leader assigned.
#[tokio::test(start_paused = true)]
async fn leader_rebalances_when_metadata_returns_after_failing_at_assignment() {
    let fake = FakeCoordinator::new([("t", 4)]);
    fake.script(Api::Metadata, (0..5).map(|_| Reply::Disconnect));
    let mut r = start_with(config(), fake);
    assert!(assigned(&mut r.events).await.is_empty());
    let added = tokio::time::timeout(Duration::from_secs(5), assigned(&mut r.events))
        .await
        .expect("the leader did not rebalance within 5 s of the metadata coming back");
    assert_eq!(added.len(), 4);
    close(r).await.1.unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_future_stops_the_member() {
    let fake = Arc::new(FakeCoordinator::new([("t", 4)]));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let GroupMember {
        mut events, task, ..
    } = GroupMember::spawn(config(), fake.clone(), async {
        let _ = rx.await;
    })
    .unwrap();
    assigned(&mut events).await;
    tx.send(()).unwrap();
    match next(&mut events).await {
        RebalanceEvent::Revoked { ack, .. } => ack.done(),
        other => panic!("expected Revoked, got {other:?}"),
    }
    task.wait().await.unwrap();
    assert_eq!(fake.count(Api::LeaveGroup), 1);
}

#[tokio::test(start_paused = true)]
async fn listener_trait_sees_events_in_order() {
    #[derive(Default)]
    struct Log(Vec<String>);
    impl RebalanceListener for Log {
        async fn assigned(&mut self, _g: i32, p: Vec<AssignedPartition>) {
            self.0.push(format!("assigned {}", p.len()));
        }
        async fn revoked(&mut self, p: PartitionSet) {
            tokio::time::sleep(Duration::from_secs(2)).await;
            self.0.push(format!("revoked {}", p.len()));
        }
        async fn lost(&mut self, p: PartitionSet) {
            self.0.push(format!("lost {}", p.len()));
        }
    }
    let r = start(config());
    let Running {
        fake,
        handle,
        events,
        task,
    } = r;
    let driver = tokio::spawn(async move {
        let mut log = Log::default();
        events.drive(&mut log).await;
        log.0
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    fake.force_assignment([tp(0)].into_iter().collect());
    fake.script(Api::Heartbeat, [Reply::Code(E::REBALANCE_IN_PROGRESS)]);
    tokio::time::sleep(Duration::from_secs(10)).await;
    fake.script(Api::Heartbeat, [Reply::Code(E::UNKNOWN_MEMBER_ID)]);
    tokio::time::sleep(Duration::from_secs(10)).await;
    handle.close();
    task.wait().await.unwrap();
    let log = driver.await.unwrap();
    assert_eq!(
        log,
        [
            "assigned 4",
            "revoked 3",
            "assigned 0",
            "assigned 0",
            "lost 1",
            "assigned 1",
            "revoked 1"
        ]
    );
}

#[test]
fn config_is_validated() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _g = rt.enter();
    let bad = GroupConfig::new("", ["t"]);
    assert!(matches!(
        GroupMember::spawn(
            bad,
            Arc::new(FakeCoordinator::default()),
            std::future::pending()
        ),
        Err(GroupError::Config {
            setting: "group.id",
            ..
        })
    ));
}

/// A commit that keeps retrying (coordinator loading) gives up with `NotMember` as soon as the
/// member lost its generation, instead of retrying for the whole commit timeout: the engine waits
/// for its commit in flight before it acknowledges a loss.
#[tokio::test(start_paused = true)]
async fn a_retrying_commit_gives_up_when_the_member_loses_its_generation() {
    let mut r = start(config());
    assigned(&mut r.events).await;
    r.fake.script(
        Api::OffsetCommit,
        std::iter::repeat_n(Reply::Code(E::COORDINATOR_LOAD_IN_PROGRESS), 10_000),
    );
    let handle = r.handle.clone();
    let commit = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let res = handle
            .commit(vec![CommitOffset {
                partition: tp(0),
                offset: 1,
                leader_epoch: None,
                metadata: None,
            }])
            .await;
        (res, started.elapsed())
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    r.fake
        .script(Api::Heartbeat, [Reply::Code(E::UNKNOWN_MEMBER_ID)]);
    match next(&mut r.events).await {
        RebalanceEvent::Lost { ack, .. } => {
            let (res, took) = commit.await.unwrap();
            assert!(matches!(res, Err(CommitError::NotMember { .. })), "{res:?}");
            assert!(
                took < Duration::from_secs(10),
                "gave up only after {took:?}"
            );
            ack.done();
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    close(r).await.1.unwrap();
}

/// Waits (in paused time) until `api` was called more than `before` times.
async fn called(fake: &FakeCoordinator, api: Api, before: usize) {
    tokio::time::timeout(Duration::from_secs(60), async {
        while fake.count(api) <= before {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{api:?} was not called"));
}

/// The coordinator answers a heartbeat REBALANCE_IN_PROGRESS, the JoinGroup that follows dies
/// with its connection, and every FindCoordinator after it stalls (a proxy that swallows them).
/// The coordinator expires the member a session timeout after that heartbeat reached it and may
/// give its partitions to another member then, while this member is still looking for it: the
/// lease must end before that, with the margin, whatever the join loop is doing. The member
/// keeps its partitions (cooperative) and has heard nothing that says they are gone.
#[tokio::test(start_paused = true)]
async fn lease_ends_within_the_session_of_the_last_answer_while_the_coordinator_is_lost() {
    let mut r = start(config());
    assert_eq!(assigned(&mut r.events).await.len(), 4);
    let lease = r.handle.lease();
    let joins = r.fake.count(Api::JoinGroup);
    r.fake
        .script(Api::Heartbeat, [Reply::Code(E::REBALANCE_IN_PROGRESS)]);
    r.fake.script(Api::JoinGroup, [Reply::Disconnect]);
    r.fake.script(
        Api::FindCoordinator,
        std::iter::repeat_n(Reply::Stall, 1000),
    );
    // The answered heartbeat goes out within one interval (1 s) from here.
    let scripted = tokio::time::Instant::now();
    called(&r.fake, Api::JoinGroup, joins).await;
    tokio::time::sleep_until(scripted + Duration::from_secs(5)).await;
    assert!(
        lease.holds(tokio::time::Instant::now()),
        "the answer renewed it"
    );
    // Session 10 s less its fifth, from a send at most 1 s after `scripted`.
    tokio::time::sleep_until(scripted + Duration::from_secs(9)).await;
    assert!(
        !lease.holds(tokio::time::Instant::now()),
        "the lease outlived the session of the last answered request: {lease:?}"
    );
    // Nothing renews it while no answer comes.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(!lease.holds(tokio::time::Instant::now()), "{lease:?}");
    assert!(
        r.fake.count(Api::FindCoordinator) >= 2,
        "the member kept looking for its coordinator"
    );
    no_event(&mut r.events, "coordinator lost").await;
    assert_eq!(
        r.handle.owned().len(),
        4,
        "nothing said the partitions are gone"
    );
}

/// An answer that says the member is gone ends the lease at once: no call may start in the time
/// the member task takes to report the partitions lost.
#[tokio::test(start_paused = true)]
async fn a_reset_answer_ends_the_lease_before_the_loss_is_reported() {
    let mut r = start(config());
    assigned(&mut r.events).await;
    let lease = r.handle.lease();
    assert!(lease.holds(tokio::time::Instant::now()));
    r.fake
        .script(Api::Heartbeat, [Reply::Code(E::UNKNOWN_MEMBER_ID)]);
    match next(&mut r.events).await {
        RebalanceEvent::Lost { ack, .. } => {
            assert!(
                !lease.holds(tokio::time::Instant::now()),
                "the lease held after UNKNOWN_MEMBER_ID: {lease:?}"
            );
            ack.done();
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert_eq!(assigned(&mut r.events).await.len(), 4);
    assert!(
        lease.holds(tokio::time::Instant::now()),
        "the new SyncGroup renewed it"
    );
    close(r).await.1.unwrap();
}

/// A heartbeat answered normally keeps the lease four fifths of the session timeout from its send.
#[tokio::test(start_paused = true)]
async fn an_answered_heartbeat_keeps_the_lease_short_of_the_session() {
    let mut r = start(config());
    assigned(&mut r.events).await;
    let lease = r.handle.lease();
    let beats = r.fake.count(Api::Heartbeat);
    r.fake
        .script(Api::Heartbeat, std::iter::repeat_n(Reply::Stall, 100));
    let scripted = tokio::time::Instant::now();
    called(&r.fake, Api::Heartbeat, beats).await;
    // The last answered heartbeat was sent before `scripted`.
    assert!(!lease.holds(scripted + Duration::from_secs(8)), "{lease:?}");
    close(r).await.1.unwrap();
}
