//! What the harness records while it runs ([`Shared`]) and the plain snapshot the checker takes
//! ([`Observations`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::report::ConsumerExit;
use super::{FaultKind, lock};

/// One HTTP delivery as the server saw it.
#[derive(Debug, Clone)]
pub(super) struct Delivery {
    pub(super) consumer: String,
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) session: String,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) status: u16,
}

/// One injected fault.
#[derive(Debug, Clone)]
pub(super) struct FaultEvent {
    pub(super) at: u64,
    pub(super) kind: FaultKind,
    pub(super) what: String,
    /// Partitions of the topic whose leader was on the killed node (leader kills only): they
    /// need an election.
    pub(super) moved: Vec<i32>,
    /// Partitions led, at a leader kill, by a node whose proxy was stalling or dropping right
    /// then (another fault in progress). The rest are the kill's *surviving* partitions.
    pub(super) impaired: Vec<i32>,
}

/// Everything the harness records while it runs, times in µs since the start.
pub(super) struct Shared {
    pub(super) t0: Instant,
    pub(super) seed: u64,
    /// Answer 2xx with the record's coordinates as the body (the reply in exactly-once mode).
    pub(super) reply: bool,
    pub(super) deliveries: Mutex<Vec<Delivery>>,
    pub(super) attempts: Mutex<HashMap<(i32, i64), u32>>,
    pub(super) faults: Mutex<Vec<FaultEvent>>,
    /// Proxy faults in progress: (node id, until µs since the start).
    pub(super) proxy_faults: Mutex<Vec<(i32, u64)>>,
    pub(super) commits: Mutex<Vec<(u64, i32, i64)>>,
    /// (partition, offset, when the acknowledgement came).
    pub(super) acked: Mutex<Vec<(i32, i64, u64)>>,
    pub(super) produce_errors: AtomicU64,
    pub(super) stop_producing: AtomicBool,
    pub(super) stop_polling: AtomicBool,
}

/// What the checker judges, as plain values: a snapshot of [`Shared`] plus what was read back
/// from the topics at the end.
#[derive(Debug, Clone, Default)]
pub(super) struct Observations {
    pub(super) seed: u64,
    pub(super) deliveries: Vec<Delivery>,
    pub(super) faults: Vec<FaultEvent>,
    /// (when, partition, committed offset) as the poller saw the group's commits change.
    pub(super) commits: Vec<(u64, i32, i64)>,
    /// (partition, offset, when the acknowledgement came).
    pub(super) acked: Vec<(i32, i64, u64)>,
    pub(super) produce_errors: u64,
    /// The topic's records: (partition, offset) → (session, kind).
    pub(super) log: BTreeMap<(i32, i64), (String, String)>,
    /// Dead letters read back (read_committed): source (partition, offset) → how many.
    pub(super) dlq: HashMap<(i32, i64), usize>,
    /// The reply topic as Apache Kafka's own consumer read it under read_committed:
    /// `(key, value)` in each partition's order; `None` without the exactly-once mode.
    pub(super) replies: Option<Vec<(String, String)>>,
    /// Consumer exits the harness did not cause (their `after` left empty: the checker fills
    /// it in).
    pub(super) exits: Vec<ConsumerExit>,
}

impl Shared {
    pub(super) fn new(t0: Instant, seed: u64, reply: bool) -> Self {
        Shared {
            t0,
            seed,
            reply,
            deliveries: Mutex::new(Vec::new()),
            attempts: Mutex::new(HashMap::new()),
            faults: Mutex::new(Vec::new()),
            proxy_faults: Mutex::new(Vec::new()),
            commits: Mutex::new(Vec::new()),
            acked: Mutex::new(Vec::new()),
            produce_errors: AtomicU64::new(0),
            stop_producing: AtomicBool::new(false),
            stop_polling: AtomicBool::new(false),
        }
    }

    /// What was recorded so far, as plain values (the topics' contents left empty).
    pub(super) fn observations(&self) -> Observations {
        Observations {
            seed: self.seed,
            deliveries: lock(&self.deliveries).clone(),
            faults: lock(&self.faults).clone(),
            commits: lock(&self.commits).clone(),
            acked: lock(&self.acked).clone(),
            produce_errors: self.produce_errors.load(Ordering::Relaxed),
            ..Observations::default()
        }
    }

    pub(super) fn now(&self) -> u64 {
        u64::try_from(self.t0.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
    pub(super) fn fault(&self, kind: FaultKind, what: String) {
        self.fault_moving(kind, what, Vec::new(), Vec::new());
    }

    /// A fault that takes the leadership of `moved` partitions away while `impaired` ones are
    /// behind another fault.
    pub(super) fn fault_moving(
        &self,
        kind: FaultKind,
        what: String,
        moved: Vec<i32>,
        impaired: Vec<i32>,
    ) {
        let at = self.now();
        eprintln!("[chaos {:>7.1}s] {kind:?}: {what}", at as f64 / 1e6);
        lock(&self.faults).push(FaultEvent {
            at,
            kind,
            what,
            moved,
            impaired,
        });
    }

    /// Notes that the proxy of `node` misbehaves for `length` from now.
    pub(super) fn proxy_fault(&self, node: i32, length: Duration) {
        let until = self.now() + u64::try_from(length.as_micros()).unwrap_or(u64::MAX);
        lock(&self.proxy_faults).push((node, until));
    }

    /// Nodes whose proxy misbehaves right now.
    pub(super) fn impaired_nodes(&self) -> Vec<i32> {
        let now = self.now();
        lock(&self.proxy_faults)
            .iter()
            .filter(|(_, until)| *until > now)
            .map(|(n, _)| *n)
            .collect()
    }

    /// True once each partition in `0..partitions` but those in `skip` has a delivery answered
    /// 2xx that started at or after `since` (µs since the start): the report's recovery from a
    /// fault at `since`.
    pub(super) fn flowing_since(&self, since: u64, partitions: i32, skip: &[i32]) -> bool {
        let mut flowing: Vec<bool> = (0..partitions).map(|p| skip.contains(&p)).collect();
        // Deliveries are recorded as they end, so the scan stops a second before `since`
        // (slack for those recorded a moment out of order).
        for d in lock(&self.deliveries).iter().rev() {
            if d.end.saturating_add(1_000_000) < since {
                break;
            }
            if d.start >= since
                && (200..300).contains(&d.status)
                && let Some(f) = usize::try_from(d.partition)
                    .ok()
                    .and_then(|p| flowing.get_mut(p))
            {
                *f = true;
            }
        }
        flowing.iter().all(|f| *f)
    }

    /// The consumers with a delivery answered 2xx that ended at or after `since`: those that
    /// own partitions and work them.
    pub(super) fn delivering_since(&self, since: u64) -> HashSet<String> {
        let mut names = HashSet::new();
        for d in lock(&self.deliveries).iter().rev() {
            if d.end.saturating_add(1_000_000) < since {
                break;
            }
            if d.end >= since && (200..300).contains(&d.status) {
                names.insert(d.consumer.clone());
            }
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(partition: i32, start: u64, end: u64, status: u16) -> Delivery {
        Delivery {
            consumer: "c0".into(),
            partition,
            offset: 0,
            session: "s-0001".into(),
            start,
            end,
            status,
        }
    }

    #[test]
    fn flowing_needs_a_2xx_delivery_started_after_the_fault_on_every_partition() {
        let shared = Shared::new(Instant::now(), 1, false);
        let push = |d| lock(&shared.deliveries).push(d);
        push(delivery(0, 100, 200, 200));
        push(delivery(1, 500, 2_000, 200));
        assert!(
            !shared.flowing_since(1_000, 2, &[]),
            "one started before the fault"
        );
        push(delivery(0, 1_500, 1_600, 200));
        push(delivery(1, 1_700, 1_800, 503));
        assert!(!shared.flowing_since(1_000, 2, &[]), "a 503 is no recovery");
        push(delivery(1, 1_900, 2_100, 200));
        assert!(shared.flowing_since(1_000, 2, &[]));
        assert!(
            !shared.flowing_since(1_000, 3, &[]),
            "partition 2 never delivered"
        );
        assert!(
            shared.flowing_since(1_000, 3, &[2]),
            "partition 2 not waited for"
        );
        assert!(!shared.flowing_since(1_950, 2, &[]));
    }

    #[test]
    fn delivering_consumers_are_those_with_a_recent_2xx() {
        let shared = Shared::new(Instant::now(), 1, false);
        let mut old = delivery(0, 100, 200, 200);
        old.consumer = "c1".into();
        let mut failing = delivery(1, 1_500, 1_600, 503);
        failing.consumer = "c2".into();
        let push = |d| lock(&shared.deliveries).push(d);
        push(old);
        push(failing);
        push(delivery(0, 1_700, 1_800, 200));
        assert_eq!(
            shared.delivering_since(1_000),
            HashSet::from(["c0".to_string()])
        );
    }
}
