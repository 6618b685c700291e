//! What the harness records while it runs ([`Shared`]) and the plain snapshot the checker takes
//! ([`Observations`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
    /// The reply topic as Apache Kafka's console consumer read it under read_committed:
    /// `(key, value)` in each partition's order; `None` without the exactly-once mode.
    pub(super) replies: Option<Vec<(String, String)>>,
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
}
