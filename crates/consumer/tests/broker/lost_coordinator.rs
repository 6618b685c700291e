//! A member that cannot reach its coordinator while another member joins: its JoinGroup and its
//! commits are held at its proxy (a stalled connection; a classic coordinator takes a member's
//! commit as a sign of life too), the coordinator expires it a session timeout after its last
//! heartbeat and gives every partition to the newcomer. The old member must stop starting
//! calls once its lease ended (four fifths of the session after the last answered request was
//! sent), before the newcomer can start, so no partition's calls overlap across the two.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{config, produce_seed, wait_until};
use orderly_consumer::Consumer;
use orderly_engine::{Attempt, Handler, HandlerError, Record};
use orderly_testkit::broker;
use orderly_testkit::proxy::KafkaProxy;

/// OffsetCommit's API key.
const OFFSET_COMMIT: i16 = 8;
/// JoinGroup's API key.
const JOIN_GROUP: i16 = 11;

/// One handler call: the consumer, the partition, when it started and when it ended (`None`
/// while it runs).
type Call = (u32, i32, Instant, Option<Instant>);

#[derive(Clone)]
struct Calls {
    consumer: u32,
    log: Arc<Mutex<Vec<Call>>>,
}

/// Sets the end of a call when the call's future ends, completed or dropped.
struct Ends {
    log: Arc<Mutex<Vec<Call>>>,
    at: usize,
}

impl Drop for Ends {
    fn drop(&mut self) {
        self.log.lock().unwrap()[self.at].3 = Some(Instant::now());
    }
}

impl Handler for Calls {
    async fn handle(&self, record: &Record, _: Attempt) -> Result<(), HandlerError> {
        let at = {
            let mut log = self.log.lock().unwrap();
            log.push((
                self.consumer,
                record.partition.partition,
                Instant::now(),
                None,
            ));
            log.len() - 1
        };
        let _ends = Ends {
            log: self.log.clone(),
            at,
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_join_stalls_starts_nothing_once_its_session_may_have_ended() {
    let b = broker();
    let topic = b.topic("lost-coordinator", 2).await.unwrap();
    let dlq = b.topic("lost-coordinator-dlq", 1).await.unwrap();
    // A backlog that outlasts the test: 16 sessions of 50 ms calls run about 320 records/s.
    produce_seed(b.bootstrap(), &topic.name, 2, 20_000, 16).await;
    let group = b.unique_topic("lost-coordinator-g");
    let log: Arc<Mutex<Vec<Call>>> = Arc::default();
    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();

    // Session 10 s; the lease is 8 s of it.
    let old = Consumer::new(
        config(proxy.bootstrap(), &group, &topic.name, &dlq.name),
        Calls {
            consumer: 1,
            log: log.clone(),
        },
    )
    .unwrap();
    let old = crate::common::start(old);
    let old_stats = old.stats.clone();
    wait_until(Duration::from_secs(120), "the first member working", || {
        old_stats.handled() >= 100
    })
    .await;

    // From now on the old member's JoinGroup and commits never reach the coordinator.
    proxy.hold(JOIN_GROUP);
    proxy.hold(OFFSET_COMMIT);
    let new = Consumer::new(
        config(b.bootstrap(), &group, &topic.name, &dlq.name),
        Calls {
            consumer: 2,
            log: log.clone(),
        },
    )
    .unwrap();
    let new = crate::common::start(new);
    // The newcomer's join makes the coordinator answer the old member's next heartbeat with
    // REBALANCE_IN_PROGRESS: the old member's JoinGroup follows and is held.
    wait_until(
        Duration::from_secs(60),
        "the old member's JoinGroup held",
        || proxy.held_now(JOIN_GROUP) > 0,
    )
    .await;
    // The last answer the old member had was sent before its JoinGroup.
    let join_held = Instant::now();
    wait_until(
        Duration::from_secs(120),
        "the newcomer handling records",
        || log.lock().unwrap().iter().filter(|c| c.0 == 2).count() >= 200,
    )
    .await;
    // A few seconds of both running, had the old one not stopped.
    tokio::time::sleep(Duration::from_secs(3)).await;
    new.stop().await;
    // Its last commit is held: it cannot finish its shutdown.
    old.end_within(Duration::from_secs(5)).await;

    let log = log.lock().unwrap().clone();
    let end_of_lease = join_held + Duration::from_secs(8);
    // A start is logged a moment after the engine checked the lease; 2 s covers a busy machine.
    let late: Vec<Duration> = log
        .iter()
        .filter(|c| c.0 == 1 && c.2 > end_of_lease + Duration::from_secs(2))
        .map(|c| c.2 - join_held)
        .collect();
    assert!(
        late.is_empty(),
        "the old member started {} calls after its lease ended, the last {:?} after its join was held",
        late.len(),
        late.last()
    );
    let mut overlaps = Vec::new();
    for partition in 0..2 {
        let calls = |consumer: u32| {
            log.iter()
                .filter(move |c| c.0 == consumer && c.1 == partition)
                .map(|c| (c.2, c.3.unwrap_or_else(Instant::now)))
        };
        for (a_start, a_end) in calls(1) {
            for (b_start, b_end) in calls(2) {
                if a_start < b_end && b_start < a_end {
                    overlaps.push(format!(
                        "partition {partition}: old {:?}..{:?} and new {:?}..{:?} after the hold",
                        a_start.saturating_duration_since(join_held),
                        a_end.saturating_duration_since(join_held),
                        b_start.saturating_duration_since(join_held),
                        b_end.saturating_duration_since(join_held),
                    ));
                }
            }
        }
    }
    assert!(
        overlaps.is_empty(),
        "{} overlapping calls across members, e.g. {:?}",
        overlaps.len(),
        &overlaps[..overlaps.len().min(3)]
    );
    assert!(
        log.iter().any(|c| c.0 == 2),
        "the newcomer never took a partition"
    );
}
