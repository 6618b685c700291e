//! Unit tests of the consumer-protocol member against a scripted ConsumerGroupHeartbeat fake:
//! revoke before ack (heartbeats keep reporting the revoked partitions until the engine acked),
//! no event for an epoch bump, and the fence paths of the error table.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::codes::{Api, ErrorCode};
use crate::config::{GroupConfig, GroupProtocol};
use crate::handle::GroupMember;
use crate::listener::{LostReason, RebalanceEvent};
use crate::transport::*;
use crate::types::{GroupPartition, PartitionSet};

const TOPIC_ID: TopicId = [7; 16];

type Script = Box<dyn FnMut(&ConsumerHeartbeatRequest) -> ConsumerHeartbeatResponse + Send>;

/// A coordinator that answers ConsumerGroupHeartbeat from a script and records every request.
struct Fake {
    script: Mutex<Script>,
    requests: Mutex<Vec<ConsumerHeartbeatRequest>>,
    commits: Mutex<Vec<OffsetCommitRequest>>,
    /// When set: the broker's member epoch; a commit with another epoch gets STALE_MEMBER_EPOCH,
    /// and the first commit bumps the epoch (the commit raced a rebalance elsewhere).
    broker_epoch: Option<Arc<AtomicI32>>,
    /// While set, every ConsumerGroupHeartbeat fails like a dead coordinator's connection.
    down: std::sync::atomic::AtomicBool,
    /// The coordinator FindCoordinator names.
    node: AtomicI32,
    /// DescribeConfigs answers by resource (a resource not here is refused with INVALID_REQUEST,
    /// as a broker without group configs refuses a group).
    configs: Mutex<BTreeMap<ConfigResource, DescribedConfigs>>,
    /// Every DescribeConfigs, with the coordinator it went to.
    describes: Mutex<Vec<(i32, ConfigResource)>>,
    /// When the last answered ConsumerGroupHeartbeat was sent.
    last_answered: Mutex<Option<tokio::time::Instant>>,
}

fn err(api: Api) -> TransportError {
    TransportError {
        api,
        message: "not used by the consumer-protocol member".into(),
    }
}

impl GroupTransport for Fake {
    async fn find_coordinator(&self, _: &str) -> Result<FindCoordinatorResponse, TransportError> {
        Ok(FindCoordinatorResponse {
            error_code: ErrorCode::NONE,
            coordinator: Coordinator {
                node_id: self.node.load(Ordering::SeqCst),
                host: "fake".into(),
                port: 9092,
            },
        })
    }
    async fn join_group(
        &self,
        _: &Coordinator,
        _: JoinGroupRequest,
    ) -> Result<JoinGroupResponse, TransportError> {
        Err(err(Api::JoinGroup))
    }
    async fn sync_group(
        &self,
        _: &Coordinator,
        _: SyncGroupRequest,
    ) -> Result<SyncGroupResponse, TransportError> {
        Err(err(Api::SyncGroup))
    }
    async fn heartbeat(
        &self,
        _: &Coordinator,
        _: HeartbeatRequest,
    ) -> Result<ErrorCode, TransportError> {
        Err(err(Api::Heartbeat))
    }
    async fn leave_group(
        &self,
        _: &Coordinator,
        _: LeaveGroupRequest,
    ) -> Result<ErrorCode, TransportError> {
        Err(err(Api::LeaveGroup))
    }
    async fn offset_commit(
        &self,
        _: &Coordinator,
        r: OffsetCommitRequest,
    ) -> Result<Vec<(GroupPartition, ErrorCode)>, TransportError> {
        let mut c = ErrorCode::NONE;
        if let Some(e) = &self.broker_epoch {
            if self.commits.lock().unwrap().is_empty() {
                e.fetch_add(1, Ordering::SeqCst);
            }
            if r.generation_id != e.load(Ordering::SeqCst) {
                c = ErrorCode::STALE_MEMBER_EPOCH;
            }
        }
        let codes = r.offsets.iter().map(|o| (o.partition.clone(), c)).collect();
        self.commits.lock().unwrap().push(r);
        Ok(codes)
    }
    async fn offset_fetch(
        &self,
        _: &Coordinator,
        _: &str,
        _: &[GroupPartition],
    ) -> Result<OffsetFetchResponse, TransportError> {
        Ok(OffsetFetchResponse::default())
    }
    async fn list_offsets(
        &self,
        p: &[GroupPartition],
        _: OffsetSpec,
    ) -> Result<BTreeMap<GroupPartition, Result<i64, ErrorCode>>, TransportError> {
        Ok(p.iter().map(|tp| (tp.clone(), Ok(0))).collect())
    }
    async fn partition_counts(
        &self,
        _: &[String],
    ) -> Result<BTreeMap<String, i32>, TransportError> {
        Err(err(Api::Metadata))
    }
    async fn consumer_group_heartbeat(
        &self,
        _: &Coordinator,
        r: ConsumerHeartbeatRequest,
    ) -> Result<ConsumerHeartbeatResponse, TransportError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(TransportError {
                api: Api::ConsumerGroupHeartbeat,
                message: "fake: early eof".into(),
            });
        }
        self.requests.lock().unwrap().push(r.clone());
        let resp = (self.script.lock().unwrap())(&r);
        *self.last_answered.lock().unwrap() = Some(tokio::time::Instant::now());
        Ok(resp)
    }
    async fn describe_configs(
        &self,
        c: &Coordinator,
        resource: ConfigResource,
        keys: &[&str],
    ) -> Result<DescribedConfigs, TransportError> {
        self.describes
            .lock()
            .unwrap()
            .push((c.node_id, resource.clone()));
        Ok(match self.configs.lock().unwrap().get(&resource) {
            Some(d) => DescribedConfigs {
                error_code: d.error_code,
                values: d
                    .values
                    .iter()
                    .filter(|(k, _)| keys.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            },
            None => DescribedConfigs {
                error_code: ErrorCode::INVALID_REQUEST,
                ..DescribedConfigs::default()
            },
        })
    }
    async fn topic_ids(
        &self,
        _: Option<&[String]>,
    ) -> Result<BTreeMap<String, TopicId>, TransportError> {
        Ok([("t".to_string(), TOPIC_ID)].into_iter().collect())
    }
}

fn ok(epoch: i32, assignment: Option<&[i32]>) -> ConsumerHeartbeatResponse {
    ConsumerHeartbeatResponse {
        error_code: ErrorCode::NONE,
        member_epoch: epoch,
        heartbeat_interval_ms: 20,
        assignment: assignment.map(|a| vec![(TOPIC_ID, a.to_vec())]),
        ..ConsumerHeartbeatResponse::default()
    }
}

fn code(c: ErrorCode) -> ConsumerHeartbeatResponse {
    ConsumerHeartbeatResponse {
        error_code: c,
        ..ConsumerHeartbeatResponse::default()
    }
}

fn owned_in(r: &ConsumerHeartbeatRequest) -> Vec<i32> {
    let mut v: Vec<i32> = r
        .owned
        .iter()
        .flatten()
        .flat_map(|(_, p)| p.clone())
        .collect();
    v.sort_unstable();
    v
}

fn set(ps: &[i32]) -> PartitionSet {
    ps.iter().map(|p| GroupPartition::new("t", *p)).collect()
}

fn fake(script: Script) -> Arc<Fake> {
    Arc::new(Fake {
        script: Mutex::new(script),
        requests: Mutex::new(Vec::new()),
        commits: Mutex::new(Vec::new()),
        broker_epoch: None,
        down: Default::default(),
        node: AtomicI32::new(1),
        configs: Mutex::new(BTreeMap::new()),
        describes: Mutex::new(Vec::new()),
        last_answered: Mutex::new(None),
    })
}

/// A DescribeConfigs answer with one value.
fn described(key: &str, value: &str) -> DescribedConfigs {
    DescribedConfigs {
        error_code: ErrorCode::NONE,
        values: [(key.to_owned(), value.to_owned())].into_iter().collect(),
    }
}

fn config() -> GroupConfig {
    GroupConfig::new("g", ["t"])
        .with_protocol(GroupProtocol::Consumer)
        .with_session_timeout(Duration::from_secs(10))
        .with_heartbeat_interval(Duration::from_millis(20))
}

/// The broker shrinks the target from 0..4 to 0..2 at the same epoch: the member sends Revoked,
/// keeps heartbeating with all four owned while the engine drains (300 ms), commits with the
/// member epoch, and the first heartbeat after the ack reports two.
///
/// Paused time on one thread: the test reads the request count and acks with no await between,
/// so no heartbeat can be built in that gap. (On two worker threads a heartbeat the member built
/// just before the ack, with all four owned, could land after the count was read: a loaded CI
/// machine showed exactly that, a race in the test, not in the member.)
#[tokio::test(start_paused = true)]
async fn revoke_is_acknowledged_to_the_broker_only_after_the_engine_acked() {
    let script: Script = Box::new(|r| match r.member_epoch {
        0 => ok(5, Some(&[0, 1, 2, 3])),
        _ if owned_in(r) == [0, 1, 2, 3] => ok(5, Some(&[0, 1])),
        _ => ok(6, Some(&[0, 1])),
    });
    let f = fake(script);
    let GroupMember {
        handle,
        mut events,
        task,
    } = GroupMember::spawn(config(), f.clone(), std::future::pending()).unwrap();
    let Some(RebalanceEvent::Assigned {
        partitions, ack, ..
    }) = events.next().await
    else {
        panic!("first event must be Assigned");
    };
    assert_eq!(partitions.len(), 4);
    ack.done();
    let Some(RebalanceEvent::Revoked {
        partitions,
        ack,
        generation,
    }) = events.next().await
    else {
        panic!("then Revoked");
    };
    assert_eq!(partitions, set(&[2, 3]));
    assert_eq!(generation, 5);
    let sent_at_revoke = f.requests.lock().unwrap().len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let during: Vec<Vec<i32>> = f.requests.lock().unwrap()[sent_at_revoke..]
        .iter()
        .map(owned_in)
        .collect();
    assert!(
        during.len() >= 3,
        "heartbeats continue while the engine drains: {during:?}"
    );
    assert!(
        during.iter().all(|o| o == &[0, 1, 2, 3]),
        "revoked partitions released before the ack: {during:?}"
    );
    handle
        .commit(
            partitions
                .iter()
                .map(|p| crate::types::CommitOffset {
                    partition: p.clone(),
                    offset: 42,
                    leader_epoch: None,
                    metadata: None,
                })
                .collect(),
        )
        .await
        .unwrap();
    let acked_at = f.requests.lock().unwrap().len();
    ack.done();
    tokio::time::sleep(Duration::from_millis(200)).await;
    {
        let commits = f.commits.lock().unwrap();
        assert_eq!(commits.len(), 1);
        assert_eq!(
            commits[0].generation_id, 5,
            "the commit carries the member epoch"
        );
        let reqs = f.requests.lock().unwrap();
        let after: Vec<Vec<i32>> = reqs[acked_at..].iter().map(owned_in).collect();
        assert_eq!(after.first(), Some(&vec![0, 1]), "{after:?}");
        assert_eq!(reqs.last().map(|r| r.member_epoch), Some(6));
    }
    // An epoch bump with an unchanged target is no event.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), events.next())
            .await
            .is_err(),
        "no event without a change"
    );
    assert_eq!(handle.owned(), set(&[0, 1]));
    handle.close();
    let Some(RebalanceEvent::Revoked {
        partitions, ack, ..
    }) = events.next().await
    else {
        panic!("close revokes");
    };
    assert_eq!(partitions, set(&[0, 1]));
    ack.done();
    task.wait().await.unwrap();
    let last = f.requests.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        last.member_epoch, -1,
        "a dynamic member leaves with epoch -1"
    );
}

/// FENCED_MEMBER_EPOCH: Lost (no Revoked), then a join with epoch 0, the same member id and an
/// empty owned list. UNKNOWN_MEMBER_ID: the same, with a new member id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_epoch_and_unknown_member_lose_partitions_and_rejoin_at_epoch_zero() {
    // Phase 0: join, then FENCED_MEMBER_EPOCH once the member reports the assignment as owned;
    // phase 1: the same with UNKNOWN_MEMBER_ID; phase 2: stable.
    let mut phase = 0;
    let script: Script = Box::new(move |r| {
        if r.member_epoch == 0 {
            return ok(3, Some(&[0, 1]));
        }
        if owned_in(r) == [0, 1] && phase < 2 {
            phase += 1;
            return code(if phase == 1 {
                ErrorCode::FENCED_MEMBER_EPOCH
            } else {
                ErrorCode::UNKNOWN_MEMBER_ID
            });
        }
        ok(3, Some(&[0, 1]))
    });
    let f = fake(script);
    let GroupMember {
        handle,
        mut events,
        task,
    } = GroupMember::spawn(config(), f.clone(), std::future::pending()).unwrap();
    let mut kinds = Vec::new();
    while kinds.len() < 5 {
        match tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .unwrap()
            .unwrap()
        {
            RebalanceEvent::Assigned { ack, .. } => {
                kinds.push("assigned".to_string());
                ack.done()
            }
            RebalanceEvent::Lost {
                reason,
                ack,
                partitions,
            } => {
                assert_eq!(partitions, set(&[0, 1]));
                kinds.push(format!("lost {reason:?}"));
                ack.done()
            }
            RebalanceEvent::Revoked { .. } => panic!("a fenced member must not revoke"),
        }
    }
    assert_eq!(
        kinds,
        [
            "assigned",
            &format!("lost {:?}", LostReason::GenerationReset),
            "assigned",
            &format!("lost {:?}", LostReason::MemberReset),
            "assigned"
        ]
    );
    let reqs = f.requests.lock().unwrap().clone();
    let joins: Vec<&ConsumerHeartbeatRequest> =
        reqs.iter().filter(|r| r.member_epoch == 0).collect();
    assert_eq!(joins.len(), 3, "initial join and two rejoins");
    for j in &joins {
        assert_eq!(j.owned.as_deref(), Some(&[][..]), "a join owns nothing");
        assert!(j.rebalance_timeout_ms > 0 && j.subscribed_topic_names.is_some());
    }
    assert_eq!(
        joins[0].member_id, joins[1].member_id,
        "FENCED_MEMBER_EPOCH keeps the id"
    );
    assert_ne!(
        joins[1].member_id, joins[2].member_id,
        "UNKNOWN_MEMBER_ID gets a new id"
    );
    handle.close();
    while let Some(ev) = events.next().await {
        drop(ev);
    }
    task.wait().await.unwrap();
}

/// GROUP_MAX_SIZE_REACHED stops the member with that error; a static member leaves with -2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_full_is_fatal_and_static_members_leave_with_minus_two() {
    let f = fake(Box::new(|_| code(ErrorCode::GROUP_MAX_SIZE_REACHED)));
    let GroupMember { task, .. } =
        GroupMember::spawn(config(), f.clone(), std::future::pending()).unwrap();
    let e = task.wait().await.unwrap_err();
    assert!(
        matches!(&e, crate::GroupError::Fatal { code, .. } if *code == ErrorCode::GROUP_MAX_SIZE_REACHED),
        "{e}"
    );

    let f = fake(Box::new(|r| match r.member_epoch {
        0 => ok(1, Some(&[0])),
        _ => ok(1, None),
    }));
    let GroupMember {
        handle,
        mut events,
        task,
    } = GroupMember::spawn(
        config().with_instance_id("i-1"),
        f.clone(),
        std::future::pending(),
    )
    .unwrap();
    let driver = tokio::spawn(async move { while events.next().await.is_some() {} });
    while handle.owned().is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    handle.close();
    task.wait().await.unwrap();
    driver.await.unwrap();
    let reqs = f.requests.lock().unwrap();
    let last = reqs.last().unwrap();
    assert_eq!(last.member_epoch, -2);
    assert_eq!(last.instance_id.as_deref(), Some("i-1"));
}

/// NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE (the coordinator moved): rediscover and go on with
/// the same epoch and partitions, no event. UNRELEASED_INSTANCE_ID on the join: retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_moves_keep_the_epoch_and_unreleased_instance_id_is_retried() {
    let mut n = 0;
    let script: Script = Box::new(move |r| {
        n += 1;
        match (n, r.member_epoch) {
            (1, 0) => code(ErrorCode::UNRELEASED_INSTANCE_ID),
            (_, 0) => ok(4, Some(&[0, 1])),
            (4, _) => code(ErrorCode::NOT_COORDINATOR),
            (6, _) => code(ErrorCode::COORDINATOR_NOT_AVAILABLE),
            _ => ok(4, Some(&[0, 1])),
        }
    });
    let f = fake(script);
    let GroupMember {
        handle,
        mut events,
        task,
    } = GroupMember::spawn(
        config().with_instance_id("i-2"),
        f.clone(),
        std::future::pending(),
    )
    .unwrap();
    let Some(RebalanceEvent::Assigned { ack, .. }) = events.next().await else {
        panic!("Assigned first");
    };
    ack.done();
    while f.requests.lock().unwrap().len() < 9 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(100), events.next())
            .await
            .is_err(),
        "a coordinator move is no event"
    );
    let epochs: Vec<i32> = f
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.member_epoch)
        .collect();
    assert_eq!(
        &epochs[..2],
        &[0, 0],
        "the join is retried after UNRELEASED_INSTANCE_ID"
    );
    assert!(
        epochs[2..].iter().all(|e| *e == 4),
        "the epoch survives coordinator moves: {epochs:?}"
    );
    assert_eq!(handle.owned(), set(&[0, 1]));
    handle.close();
    while let Some(ev) = events.next().await {
        drop(ev);
    }
    task.wait().await.unwrap();
}

/// A commit that raced a member-epoch bump (STALE_MEMBER_EPOCH) is retried with the new epoch once
/// the heartbeat brought it, and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_member_epoch_commit_is_retried_with_the_new_epoch() {
    let epoch = Arc::new(AtomicI32::new(5));
    let e = epoch.clone();
    let script: Script = Box::new(move |_| ok(e.load(Ordering::SeqCst), Some(&[0, 1])));
    let f = Arc::new(Fake {
        script: Mutex::new(script),
        requests: Mutex::new(Vec::new()),
        commits: Mutex::new(Vec::new()),
        broker_epoch: Some(epoch.clone()),
        down: Default::default(),
        node: AtomicI32::new(1),
        configs: Mutex::new(BTreeMap::new()),
        describes: Mutex::new(Vec::new()),
        last_answered: Mutex::new(None),
    });
    let GroupMember {
        handle,
        mut events,
        task,
    } = GroupMember::spawn(config(), f.clone(), std::future::pending()).unwrap();
    let Some(RebalanceEvent::Assigned { ack, .. }) = events.next().await else {
        panic!("Assigned first");
    };
    ack.done();
    assert_eq!(handle.generation().generation_id, 5);
    handle
        .commit(vec![crate::types::CommitOffset {
            partition: GroupPartition::new("t", 0),
            offset: 7,
            leader_epoch: None,
            metadata: None,
        }])
        .await
        .unwrap();
    let gens: Vec<i32> = f
        .commits
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.generation_id)
        .collect();
    assert_eq!(gens.first(), Some(&5));
    assert_eq!(
        gens.last(),
        Some(&6),
        "retried with the new epoch: {gens:?}"
    );
    handle.close();
    while let Some(ev) = events.next().await {
        drop(ev);
    }
    task.wait().await.unwrap();
}

/// Consumer protocol: the coordinator is unreachable for longer than the session
/// timeout. The member keeps its epoch and partitions (ownership in doubt, dispatch held) and the
/// first answered heartbeat confirms them: no Lost, no rejoin at epoch 0.
#[tokio::test(start_paused = true)]
async fn coordinator_gone_past_the_session_timeout_keeps_the_epoch() {
    let script: Script = Box::new(|_| ok(3, Some(&[0, 1])));
    let f = fake(script);
    let GroupMember {
        handle,
        mut events,
        task,
    } = GroupMember::spawn(config(), f.clone(), std::future::pending()).unwrap();
    let Some(RebalanceEvent::Assigned { ack, .. }) = events.next().await else {
        panic!("Assigned first");
    };
    ack.done();
    let mut doubt = handle.in_doubt();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!*doubt.borrow_and_update());
    let lease = handle.lease();
    assert!(lease.holds(tokio::time::Instant::now()), "held once joined");
    f.down.store(true, Ordering::SeqCst);
    let since = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(60), doubt.wait_for(|d| *d))
        .await
        .expect("ownership never in doubt")
        .unwrap();
    assert!(
        since.elapsed() >= Duration::from_secs(9),
        "{:?}",
        since.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!lease.holds(tokio::time::Instant::now()), "lapsed");
    assert!(events.rx.try_recv().is_err(), "in doubt is no event");
    assert_eq!(handle.generation().generation_id, 3);
    f.down.store(false, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(60), doubt.wait_for(|d| !*d))
        .await
        .expect("ownership never confirmed")
        .unwrap();
    assert!(lease.holds(tokio::time::Instant::now()), "renewed");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(events.rx.try_recv().is_err(), "confirmed is no event");
    assert_eq!(handle.generation().generation_id, 3);
    assert_eq!(handle.owned(), set(&[0, 1]));
    let epochs: Vec<i32> = f
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.member_epoch)
        .collect();
    assert_eq!(
        epochs.iter().filter(|e| **e == 0).count(),
        1,
        "no rejoin: {epochs:?}"
    );
    handle.close();
    while let Some(ev) = events.next().await {
        drop(ev);
    }
    task.wait().await.unwrap();
}

/// The broker enforces a 6 s session for the group (its `consumer.session.timeout.ms`) while the
/// client's config says 45 s: the lease lapses no later than 6 s after the send of the last
/// answered heartbeat, and the ownership is in doubt once 6 s passed without an answer.
#[tokio::test(start_paused = true)]
async fn lease_follows_the_session_timeout_the_broker_enforces() {
    let f = fake(Box::new(|_| ok(3, Some(&[0, 1]))));
    f.configs.lock().unwrap().insert(
        ConfigResource::Group("g".into()),
        described("consumer.session.timeout.ms", "6000"),
    );
    let GroupMember {
        handle,
        mut events,
        task,
    } = GroupMember::spawn(
        config().with_session_timeout(Duration::from_secs(45)),
        f.clone(),
        std::future::pending(),
    )
    .unwrap();
    let Some(RebalanceEvent::Assigned { ack, .. }) = events.next().await else {
        panic!("Assigned first");
    };
    ack.done();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lease = handle.lease();
    let mut doubt = handle.in_doubt();
    assert!(lease.holds(tokio::time::Instant::now()), "held once joined");
    f.down.store(true, Ordering::SeqCst);
    let last = f
        .last_answered
        .lock()
        .unwrap()
        .expect("answered heartbeats");
    assert!(
        lease.holds(last + Duration::from_secs(3)),
        "the lease is not cut short: {lease:?}"
    );
    tokio::time::sleep_until(last + Duration::from_secs(6)).await;
    assert!(
        !lease.holds(tokio::time::Instant::now()),
        "the lease outlasts the broker's 6 s session (the client's 45 s?): {lease:?}"
    );
    tokio::time::timeout(Duration::from_secs(2), doubt.wait_for(|d| *d))
        .await
        .expect("in doubt once the broker's session passed")
        .unwrap();
    assert_eq!(
        f.describes.lock().unwrap().clone(),
        [(1, ConfigResource::Group("g".into()))],
        "read once, from the group resource"
    );
    handle.close();
    while let Some(ev) = events.next().await {
        drop(ev);
    }
    task.wait().await.unwrap();
}

/// A broker that refuses the group resource: the coordinator's broker resource gives the session
/// (7 s). After the group moves to a coordinator that answers neither, the member keeps going and
/// falls back to the client's session timeout (10 s), read once per coordinator.
#[tokio::test(start_paused = true)]
async fn session_timeout_falls_back_to_the_broker_then_the_client_per_coordinator() {
    let moved = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let m = moved.clone();
    let f = fake(Box::new(move |_| {
        if m.swap(false, Ordering::SeqCst) {
            code(ErrorCode::NOT_COORDINATOR)
        } else {
            ok(3, Some(&[0, 1]))
        }
    }));
    f.configs.lock().unwrap().insert(
        ConfigResource::Broker(1),
        described("group.consumer.session.timeout.ms", "7000"),
    );
    let GroupMember {
        handle,
        mut events,
        task,
    } = GroupMember::spawn(config(), f.clone(), std::future::pending()).unwrap();
    let Some(RebalanceEvent::Assigned { ack, .. }) = events.next().await else {
        panic!("Assigned first");
    };
    ack.done();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let lease = handle.lease();
    let last = f.last_answered.lock().unwrap().unwrap();
    assert!(lease.holds(last + Duration::from_secs(3)), "{lease:?}");
    assert!(
        !lease.holds(last + Duration::from_secs(7)),
        "the broker resource's 7 s, not the client's 10 s: {lease:?}"
    );
    assert_eq!(
        f.describes.lock().unwrap().clone(),
        [
            (1, ConfigResource::Group("g".into())),
            (1, ConfigResource::Broker(1))
        ]
    );
    // The group moves to node 2, which answers neither resource.
    f.node.store(2, Ordering::SeqCst);
    moved.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let last = f.last_answered.lock().unwrap().unwrap();
    assert!(
        lease.holds(last + Duration::from_secs(7)),
        "the client's 10 s once no resource answers: {lease:?}"
    );
    assert!(!lease.holds(last + Duration::from_secs(10)), "{lease:?}");
    assert_eq!(
        f.describes.lock().unwrap()[2..],
        [
            (2, ConfigResource::Group("g".into())),
            (2, ConfigResource::Broker(2))
        ],
        "read again from the new coordinator, once"
    );
    assert!(
        events.rx.try_recv().is_err(),
        "a coordinator move is no event"
    );
    assert_eq!(handle.generation().generation_id, 3);
    handle.close();
    while let Some(ev) = events.next().await {
        drop(ev);
    }
    task.wait().await.unwrap();
}
