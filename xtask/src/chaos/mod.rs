//! `cargo xtask chaos`: `orderly consume` processes against a 3-node cluster under a seeded fault schedule, judged by a checker outside the consumer.
//!
//! Pieces, all in this process except the brokers and the consumers:
//! - a 3-node KRaft cluster ([`orderly_testkit::cluster`]) whose `EXTERNAL` listeners advertise
//!   the ports of one `FaultProxy` per node, so the consumers (bootstrapped on those ports) reach
//!   every broker only through a proxy; the producer, the offset poller and the final reads use the
//!   `PLAINTEXT` listeners directly and are never faulted;
//! - a producer writing live (acks=all) with keys `s-NNNN` (the session) and values naming a
//!   deterministic outcome: `ok`, `tN` (answer 503 to the first N deliveries) or `perm` (422);
//! - an HTTP server the consumers POST to (`--http http://127.0.0.1:P/<consumer>`), recording the
//!   start and end time and status of every delivery;
//! - a poller recording the group's committed offsets;
//! - the fault schedule drawn from the seed (each kind at least once, then random kinds until the
//!   time is up): SIGKILL of a consumer and its restart, SIGKILL of a partition leader's node and
//!   its restart, proxy drop, proxy stall (longer than the 30 s request timeout), proxy reset, a
//!   member joining then leaving, a controlled shutdown of a node and its restart. A fault comes
//!   1–3 s after every partition delivered again since the one before ended (at most 45 s after;
//!   partitions behind a proxy fault in progress are not waited for), so the schedule is as dense
//!   as the group's recovery allows, on an idle machine or a busy one.
//!
//! After the schedule the producer stops, the harness waits until the group has committed the end
//! of every partition, stops the consumers, reads the topic and the DLQ back, and checks:
//! 1. every acknowledged record was answered 2xx or is in the DLQ (else: lost);
//! 2. per session (key order in its partition), each delivery of record n started after the latest
//!    delivery of record n-1 that started before it had ended with a terminal answer (2xx or the
//!    permanent 422) — so a replay must re-finish n-1 before n, and a zombie cannot overlap;
//! 3. a record delivered again after a terminal answer lies at or above the committed offset of its
//!    partition as last seen before the repeat (a repeat below the watermark is a violation);
//! 4. the DLQ holds exactly the `perm` records of the log (a record may appear more than once only if
//!    it was delivered, and failed, that many times);
//! 5. no consumer exits unless the harness ends it (a SIGKILL of the schedule, or a SIGTERM: a
//!    member leaving, the end of the run). A consumer found gone otherwise, or gone just before
//!    the harness's SIGKILL or SIGTERM reached it, or dead by anything but that SIGKILL, is
//!    counted with its name, exit status, the fault before it and the last lines of its log, and
//!    started again under its name (as a supervisor would), so the rest of the run still checks
//!    order and loss.
//!
//! A violation prints the session, the offsets, the fault before it and the seed; an unexpected
//! exit prints the consumer, its status and its log's tail. Either fails the run.
//!
//! With `--exactly-once` the consumers run `--exactly-once --reply-topic chaos-replies` (a
//! stable transactional id per consumer name, so a restart fences its predecessor), the HTTP
//! server answers each 2xx with the record's coordinates as the reply body, the consumers' session
//! timeout is 6 s instead of 10 s, the schedule adds a zombie (SIGSTOP of a consumer that works
//! partitions until the group moved them, then SIGCONT: it must abort, rewind and rejoin in
//! process, not exit) and a kill of the transaction coordinator's node, and runs at least ten
//! consumer kills. The checker then also reads the reply topic with Apache Kafka's own consumer
//! under `isolation.level=read_committed`:
//! 6. every record of the log that is not a permanent failure has exactly one reply, a permanent
//!    failure none, and each session's replies are in the session's order.
//!
//! Module map: `run` (the cluster, the schedule, the read-back), `workload` (producer, HTTP
//! server), `consumers` (the `orderly consume` processes and which of their exits the harness
//! caused), `kafka` (offsets, leaders, coordinators
//! and reads over the direct listeners), `observe` (what the harness records, and the plain
//! `observe::Observations` the checker takes), `check` (the checker), `report` (figures and
//! their print-out).

mod check;
mod consumers;
mod kafka;
mod observe;
mod report;
mod run;
mod workload;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

pub use report::{ChaosReport, ConsumerExit, print};
pub use run::run;

const TOPIC: &str = "chaos";
const DLQ: &str = "chaos-dlq";
const GROUP: &str = "chaos-group";
/// The reply topic of the exactly-once mode.
const REPLIES: &str = "chaos-replies";

/// Longer than the consumers' request timeout (30 s, `ConnectionConfig::default`).
const STALL: Duration = Duration::from_secs(35);

/// Options of a chaos run.
#[derive(Debug, Clone)]
pub struct ChaosOptions {
    /// Fault schedule length (every kind runs at least once, even if that takes longer).
    pub minutes: f64,
    /// Seed of the workload and the fault schedule.
    pub seed: u64,
    /// Consumers in the group (one more joins and leaves during member churn).
    pub consumers: usize,
    /// Partitions of the topic.
    pub partitions: i32,
    /// Sessions (keys).
    pub sessions: usize,
    /// Records per second the producer aims at.
    pub rate: u32,
    /// The `orderly` binary.
    pub binary: PathBuf,
    /// Working directory (cluster, consumer logs, report).
    pub dir: PathBuf,
    /// Keep the completed offsets above the commit point in the commit metadata (the default);
    /// false runs the consumers with `--commit-metadata-limit 0`, to measure what it saves.
    pub commit_metadata: bool,
    /// Run the consumers with `--exactly-once` and a reply topic, add the zombie and the
    /// transaction-coordinator kill to the schedule, and check the replies.
    pub exactly_once: bool,
}

/// The consumers' `--session-timeout`: the goal for records to flow again after a leader kill.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The exactly-once mode's `--session-timeout`: each of its consumer kills stalls the killed
/// member's partitions until the group expires its session, so a shorter one keeps the ten kills
/// (and the zombie, stopped for two of them) from dominating the run's length.
pub const EXACTLY_ONCE_SESSION_TIMEOUT: Duration = Duration::from_secs(6);

/// The consumers' session timeout in a run with these options.
fn session_timeout(opts: &ChaosOptions) -> Duration {
    if opts.exactly_once {
        EXACTLY_ONCE_SESSION_TIMEOUT
    } else {
        SESSION_TIMEOUT
    }
}

/// The kinds of fault the schedule injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL of a consumer process, restarted 2 s later.
    ConsumerKill,
    /// SIGKILL of the node leading a partition, restarted 3 s later.
    LeaderKill,
    /// One proxy closes every connection and refuses new ones for 5 s.
    ProxyDrop,
    /// One proxy moves no byte for longer than the request timeout.
    ProxyStall,
    /// Every proxy aborts every connection with RST.
    ProxyReset,
    /// A consumer joins, works a few seconds, and leaves (SIGTERM), twice.
    MemberChurn,
    /// A controlled shutdown (SIGTERM) of a node, restarted 3 s later.
    BrokerShutdown,
    /// SIGSTOP of a consumer that works partitions until the group moved them (twice the
    /// session timeout, and until every partition delivered again), then SIGCONT (exactly-once
    /// mode only).
    Zombie,
    /// SIGKILL of the node leading the transaction state log (every transactional id's
    /// coordinator), restarted 3 s later (exactly-once mode only).
    CoordinatorKill,
}

/// The kinds every run injects.
const KINDS: [FaultKind; 7] = [
    FaultKind::ConsumerKill,
    FaultKind::LeaderKill,
    FaultKind::ProxyDrop,
    FaultKind::ProxyStall,
    FaultKind::ProxyReset,
    FaultKind::MemberChurn,
    FaultKind::BrokerShutdown,
];

/// The kinds only the exactly-once mode injects.
const EXACTLY_ONCE_KINDS: [FaultKind; 2] = [FaultKind::Zombie, FaultKind::CoordinatorKill];

/// Consumer kills an exactly-once run makes at least.
const EXACTLY_ONCE_KILLS: usize = 10;

/// The kinds a run with these options injects.
fn kinds(opts: &ChaosOptions) -> Vec<FaultKind> {
    let mut k = KINDS.to_vec();
    if opts.exactly_once {
        k.extend(EXACTLY_ONCE_KINDS);
    }
    k
}

/// Where a chaos run keeps its files.
pub fn default_dir(root: &Path) -> PathBuf {
    root.join(".kafka").join("chaos")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
