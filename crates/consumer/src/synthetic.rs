//! The benchmark's synthetic workload: a seed producer and a handler with deterministic failure injection and an order check.
//!
//! Shared by the `orderly` CLI, the broker tests and the benchmarks, so every figure and every
//! test uses the same records and the same failure rules (BENCHMARKS.md, "The scenarios"):
//! key `s-000042`, 100-byte value, headers `event-id` (unique) and `seq` (1, 2, 3 per session);
//! a record fails transiently on its first attempt when `fnv1a(event-id) % 100 < transient_pct`,
//! and permanently when `fnv1a(event-id) % 1000 == 999` (if enabled).

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use orderly_engine::{Attempt, Handler, HandlerError, Record};
use orderly_protocol::partitioner::partition_for_key;
use orderly_protocol::{
    ConnectionConfig, ConnectionPool, ProduceRecord, Producer, ProducerConfig, WireHeader,
};

use crate::error::DriverError;

/// FNV-1a 64: the failure-injection hash (simple enough to reimplement in any peer).
pub fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The session key of session `s`.
pub fn session_key(s: usize) -> String {
    format!("s-{s:06}")
}

/// True if record `i` (event id `e-{i}`) is one of the permanent failures.
pub fn is_permanent(event_id: &[u8]) -> bool {
    fnv1a(event_id) % 1000 == 999
}

/// Produces `records` records for `sessions` sessions (round robin) to `topic`, partitioned like
/// Java's default partitioner, in batches of up to 2,000 per partition, acks=all.
pub async fn produce_seed(
    bootstrap: &[String],
    topic: &str,
    records: usize,
    sessions: usize,
) -> Result<(), DriverError> {
    let pool = Arc::new(ConnectionPool::new(
        bootstrap.to_vec(),
        ConnectionConfig::default(),
    ));
    let producer = Producer::new(pool.clone(), ProducerConfig::default());
    let cluster = crate::metadata_cache::MetadataCache::new(
        pool.clone(),
        vec![topic.to_string()],
        Duration::from_secs(300),
    );
    let partitions = cluster
        .wait_for_topic(topic, Duration::from_secs(10))
        .await?;
    let mut per_partition: BTreeMap<i32, Vec<ProduceRecord>> = BTreeMap::new();
    let mut seq = vec![0u64; sessions.max(1)];
    let value = Bytes::from(vec![b'v'; 100]);
    let now_ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    for i in 0..records {
        let s = i % sessions.max(1);
        seq[s] += 1;
        let key = session_key(s);
        let p = partition_for_key(key.as_bytes(), partitions);
        per_partition.entry(p).or_default().push(ProduceRecord {
            key: Some(Bytes::from(key)),
            value: Some(value.clone()),
            headers: vec![
                WireHeader {
                    key: "event-id".into(),
                    value: Some(Bytes::from(format!("e-{i}"))),
                },
                WireHeader {
                    key: "seq".into(),
                    value: Some(Bytes::from(seq[s].to_string())),
                },
            ],
            timestamp: Some(now_ms),
        });
    }
    for (p, recs) in per_partition {
        for chunk in recs.chunks(2000) {
            producer.send_batch(topic, p, chunk).await?;
        }
    }
    Ok(())
}

/// Produces the seed's records **live**: `rate` records per second for `sessions` sessions (round
/// robin, `seq` 1, 2, 3 per session, CreateTime = the moment of sending) until `stop` completes.
/// Returns how many records were written (acks=all). The rate holds on average: a late tick sends
/// what it owes.
pub async fn produce_live(
    bootstrap: &[String],
    topic: &str,
    sessions: usize,
    rate: u64,
    stop: impl std::future::Future<Output = ()>,
) -> Result<u64, DriverError> {
    let pool = Arc::new(ConnectionPool::new(
        bootstrap.to_vec(),
        ConnectionConfig::default(),
    ));
    let producer = Producer::new(pool.clone(), ProducerConfig::default());
    let cluster = crate::metadata_cache::MetadataCache::new(
        pool.clone(),
        vec![topic.to_string()],
        Duration::from_secs(300),
    );
    let partitions = cluster
        .wait_for_topic(topic, Duration::from_secs(10))
        .await?;
    let sessions = sessions.max(1);
    let mut seq = vec![0u64; sessions];
    let value = Bytes::from(vec![b'v'; 100]);
    let start = Instant::now();
    let mut sent: u64 = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(sent),
            _ = tick.tick() => {}
        }
        let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
        if due <= sent {
            continue;
        }
        let now_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut per_partition: BTreeMap<i32, Vec<ProduceRecord>> = BTreeMap::new();
        for i in sent..due {
            let s = (i % sessions as u64) as usize;
            seq[s] += 1;
            let key = session_key(s);
            let p = partition_for_key(key.as_bytes(), partitions);
            per_partition.entry(p).or_default().push(ProduceRecord {
                key: Some(Bytes::from(key)),
                value: Some(value.clone()),
                headers: vec![
                    WireHeader {
                        key: "event-id".into(),
                        value: Some(Bytes::from(format!("e-{i}"))),
                    },
                    WireHeader {
                        key: "seq".into(),
                        value: Some(Bytes::from(seq[s].to_string())),
                    },
                ],
                timestamp: Some(now_ms),
            });
        }
        let sends = per_partition
            .iter()
            .map(|(p, recs)| producer.send_batch(topic, *p, recs));
        for r in futures::future::join_all(sends).await {
            r?;
        }
        sent = due;
    }
}

/// What the synthetic handler observed, gathered from its [`Tally`] by [`Tally::observed`].
#[derive(Debug, Default)]
pub struct Observed {
    /// Sessions seen (told apart by a 64-bit hash of their key, see [`Tally`]).
    pub sessions: usize,
    /// Records whose `seq` was not the session's previous `seq + 1` on its first attempt.
    pub violations: u64,
    /// First attempts of a `seq` at or below the session's highest (replays).
    pub replays: u64,
    /// Record latencies (handler success − CreateTime), in microseconds, in no particular order.
    pub latencies_us: Vec<u64>,
    /// When the first record was handed to the handler.
    pub first_handled: Option<Instant>,
    /// The same moment on the wall clock (to compare with [`orderly_engine::EngineStats::last_commit`]).
    pub first_handled_at: Option<SystemTime>,
    /// The process's CPU time (every thread, user and system) at that moment, see
    /// [`process_cpu_time`].
    pub first_handled_cpu: Option<Duration>,
}

/// The peak resident memory of this process so far (`VmHWM` in `/proc/self/status`), in KiB;
/// `None` where that file is missing (not Linux).
pub fn peak_rss_kib() -> Option<u64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU time this process has used so far: every thread's, live or exited, user and system
/// (`CLOCK_PROCESS_CPUTIME_ID`, nanosecond resolution). The difference of two readings is the
/// CPU a stretch of a run cost, both sides of every hand-off included.
pub fn process_cpu_time() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Shards of a [`Tally`]: a record's session picks one by its hash, so the threads that run
/// handlers rarely wait for one another.
const SHARDS: usize = 64;

/// A [`Hasher`](std::hash::Hasher) for keys that are already well-mixed 64-bit hashes: it
/// passes them through.
#[derive(Debug, Default, Clone, Copy)]
struct PreHashed(u64);

impl std::hash::Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | u64::from(*b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// First attempts a shard notes before it checks them against its sessions, in a batch.
const CHECK_BATCH: usize = 1024;

/// One shard's observations.
#[derive(Debug, Default)]
struct Shard {
    /// Highest `seq` per session, by the session key's hash, as of the last [`Shard::check`].
    last_seq: HashMap<u64, u64, BuildHasherDefault<PreHashed>>,
    /// First attempts not checked yet, `(session hash, seq)` in the order they started: appended
    /// in order (no lookup of a session's entry, which is rarely in the cache by the time the
    /// session's next record comes), checked in batches, where the lookups overlap.
    unchecked: Vec<(u64, u64)>,
    violations: u64,
    replays: u64,
    latencies_us: Vec<u64>,
}

impl Shard {
    /// Checks the unchecked first attempts, in the order they started, against each session's
    /// highest `seq`.
    fn check(&mut self) {
        for (h, seq) in self.unchecked.drain(..) {
            let last = self.last_seq.entry(h).or_insert(0);
            if seq == *last + 1 {
                *last = seq;
            } else if seq <= *last {
                self.replays += 1;
            } else {
                *last = seq;
                self.violations += 1;
            }
        }
    }
}

/// A shard on cache lines of its own, so two threads locking neighbouring shards do not
/// contend for one line.
#[derive(Debug, Default)]
#[repr(align(128))]
struct PaddedShard(Mutex<Shard>);

/// What the synthetic handler records while it runs: per session the highest `seq` seen, the
/// ordering violations and replays, each successful record's latency, and when the first record
/// arrived.
///
/// Sessions are told apart by a 64-bit hash of their key (FNV-1a, then a 64-bit finalizer), so
/// a record costs one short lock of one of 64 shards, two appends and no copy of its key; a
/// shard checks first attempts against its sessions in batches (and when read), so a count read
/// while the handler runs includes every first attempt that started before the read. Two sessions whose
/// keys hash alike would be checked as one; among a million sessions the chance that any pair
/// does is about 3 in 100 million.
#[derive(Debug)]
pub struct Tally {
    shards: Box<[PaddedShard]>,
    first: OnceLock<(Instant, SystemTime, Duration)>,
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            shards: (0..SHARDS).map(|_| PaddedShard::default()).collect(),
            first: OnceLock::new(),
        }
    }
}

/// MurmurHash3's 64-bit finalizer: spreads FNV-1a's weakly mixed low bits over the whole word.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

impl Tally {
    /// The shard of the session whose key hashes to `h`: bits 32..38, which neither the map's
    /// bucket index (the low bits) nor its control byte (the top 7 bits) depends on for the
    /// tables a shard holds.
    fn shard(&self, h: u64) -> std::sync::MutexGuard<'_, Shard> {
        let i = (h >> 32) as usize % self.shards.len();
        self.shards[i]
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes, for the session whose key hashes to `h`, the `seq` of a first attempt and the
    /// latency of a success (either may be absent), under one lock of its shard.
    fn note(&self, h: u64, seq: Option<u64>, latency_us: Option<u64>) {
        if seq.is_none() && latency_us.is_none() {
            return;
        }
        if seq.is_some() {
            self.first
                .get_or_init(|| (Instant::now(), SystemTime::now(), process_cpu_time()));
        }
        let mut guard = self.shard(h);
        let s = &mut *guard;
        if let Some(seq) = seq {
            s.unchecked.push((h, seq));
            if s.unchecked.len() >= CHECK_BATCH {
                s.check();
            }
        }
        if let Some(l) = latency_us {
            s.latencies_us.push(l);
        }
    }

    /// Everything observed so far, gathered from the shards.
    pub fn observed(&self) -> Observed {
        let mut o = Observed {
            first_handled: self.first.get().map(|f| f.0),
            first_handled_at: self.first.get().map(|f| f.1),
            first_handled_cpu: self.first.get().map(|f| f.2),
            ..Observed::default()
        };
        for shard in &self.shards {
            let mut s = shard
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            s.check();
            o.sessions += s.last_seq.len();
            o.violations += s.violations;
            o.replays += s.replays;
            o.latencies_us.extend_from_slice(&s.latencies_us);
        }
        o
    }
}

/// A handler applying the failure rules, checking order and measuring latency.
#[derive(Debug, Clone)]
pub struct Synthetic {
    transient_pct: u64,
    permanent: bool,
    work: Duration,
    tally: Arc<Tally>,
}

impl Synthetic {
    /// A handler failing `transient_pct` % of records once, 0.1 % permanently if `permanent`, each
    /// attempt taking `work` (an async sleep).
    pub fn new(transient_pct: u64, permanent: bool, work: Duration) -> Self {
        Synthetic {
            transient_pct,
            permanent,
            work,
            tally: Arc::default(),
        }
    }

    /// What it observes, shared: read it with [`Tally::observed`] after (or during) a run.
    pub fn tally(&self) -> Arc<Tally> {
        Arc::clone(&self.tally)
    }
}

impl Handler for Synthetic {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        // Borrowed, not cloned: a clone would count a reference on the buffer the record shares
        // with its neighbours, an atomic that the other workers touch too.
        let id: &[u8] = record.header("event-id").map_or(&[], |v| &v[..]);
        let h = fnv1a(id);
        let session = mix(fnv1a(record.key.as_deref().unwrap_or_default()));
        let first = attempt.number == 1;
        let mut seq = first.then(|| {
            record
                .header("seq")
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        });
        if !self.work.is_zero() {
            // The order is checked as the attempt starts, before its work.
            self.tally.note(session, seq.take(), None);
            tokio::time::sleep(self.work).await;
        }
        let failure = if self.permanent && h % 1000 == 999 {
            Some(HandlerError::permanent(format!(
                "invalid data in {}",
                String::from_utf8_lossy(id)
            )))
        } else if first && h % 100 < self.transient_pct {
            Some(HandlerError::transient("dependency timed out"))
        } else {
            None
        };
        let latency_us = failure.is_none().then(|| {
            let now_us = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64);
            (now_us - record.timestamp_ms * 1000).max(0) as u64
        });
        // Without work the attempt starts and ends here: one lock for both notes.
        self.tally.note(session, seq, latency_us);
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The `p`-th percentile (0..=100) of sorted values.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let idx = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// A future that completes once `target` records are terminal (handled or dead-lettered), or
/// on Ctrl-C; with no target only on Ctrl-C. It completes at the engine's report of the record
/// that reaches the target ([`orderly_engine::EngineStats::wait_terminal`]), not at a later poll.
pub async fn stop_after(stats: orderly_engine::EngineStats, target: Option<u64>) {
    let ctrl_c = tokio::signal::ctrl_c();
    let Some(t) = target else {
        let _ = ctrl_c.await;
        return;
    };
    let started = Instant::now();
    tokio::select! {
        _ = ctrl_c => {}
        () = stats.wait_terminal(t) => {
            tracing::info!(after = ?started.elapsed(), "target reached; shutting down");
        }
    }
}

#[cfg(test)]
mod tests {
    use orderly_engine::{Header, TopicPartition};

    use super::*;

    fn record(session: usize, seq: u64, event: &str) -> Record {
        let mut r = Record::new(
            TopicPartition::new("t", 0),
            0,
            Some(Bytes::from(session_key(session))),
            Some(Bytes::from_static(b"v")),
        );
        r.headers.push(Header::new("event-id", event.to_owned()));
        r.headers.push(Header::new("seq", seq.to_string()));
        r
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_peak_resident_memory_covers_what_was_touched() {
        // 64 MiB written page by page is resident at once, so the peak is at least that.
        let v = vec![1u8; 64 << 20];
        assert_eq!(std::hint::black_box(&v)[(64 << 20) - 1], 1);
        let kib = peak_rss_kib().expect("VmHWM on Linux");
        assert!(kib >= 64 << 10, "{kib} KiB");
    }

    #[test]
    fn the_process_cpu_clock_counts_work_on_other_threads() {
        let before = process_cpu_time();
        // 30 ms of CPU (by the thread's own clock, however busy the machine) on a thread that
        // has exited by the second reading.
        std::thread::spawn(|| {
            let thread_cpu = || {
                let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
                Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
            };
            let start = thread_cpu();
            let mut x = 0u64;
            while thread_cpu() - start < Duration::from_millis(30) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        })
        .join()
        .unwrap();
        let used = process_cpu_time() - before;
        assert!(used >= Duration::from_millis(30), "{used:?}");
    }

    #[tokio::test]
    async fn the_tally_counts_sessions_order_replays_and_latencies() {
        let h = Synthetic::new(0, false, Duration::ZERO);
        let tally = h.tally();
        assert!(tally.observed().first_handled.is_none());
        // 300 sessions (spread over every shard), three records each, in order.
        for seq in 1..=3 {
            for s in 0..300 {
                let r = record(s, seq, &format!("e-{s}-{seq}"));
                h.handle(&r, Attempt::FIRST).await.unwrap();
            }
        }
        let o = tally.observed();
        assert_eq!(
            (o.sessions, o.violations, o.replays, o.latencies_us.len()),
            (300, 0, 0, 900)
        );
        assert!(o.first_handled.is_some() && o.first_handled_at.is_some());
        // `s-000007` at seq 2 again: a replay; then seq 5 after 3: a gap, a violation.
        h.handle(&record(7, 2, "e-7-2"), Attempt::FIRST)
            .await
            .unwrap();
        h.handle(&record(7, 5, "e-7-5"), Attempt::FIRST)
            .await
            .unwrap();
        // A retry is not a first attempt: it is not checked again.
        h.handle(&record(8, 9, "e-8-9"), Attempt::retry(2, Duration::ZERO))
            .await
            .unwrap();
        let o = tally.observed();
        assert_eq!(
            (o.sessions, o.violations, o.replays, o.latencies_us.len()),
            (300, 1, 1, 903)
        );
    }

    #[tokio::test]
    async fn a_transient_failure_counts_order_once_and_latency_on_success() {
        // Every record fails its first attempt.
        let h = Synthetic::new(100, false, Duration::ZERO);
        let tally = h.tally();
        let r = record(1, 1, "e-1");
        assert!(matches!(
            h.handle(&r, Attempt::FIRST).await,
            Err(HandlerError::Transient { .. })
        ));
        assert_eq!(tally.observed().latencies_us.len(), 0);
        h.handle(&r, Attempt::retry(2, Duration::ZERO))
            .await
            .unwrap();
        let o = tally.observed();
        assert_eq!(
            (o.sessions, o.violations, o.replays, o.latencies_us.len()),
            (1, 0, 0, 1)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn with_work_the_order_is_checked_as_the_attempt_starts() {
        let h = Synthetic::new(0, true, Duration::from_millis(5));
        let tally = h.tally();
        let r1 = record(3, 1, "e-a");
        let r2 = record(3, 2, "e-b");
        let mut first = std::pin::pin!(h.handle(&r1, Attempt::FIRST));
        assert!(futures::poll!(first.as_mut()).is_pending());
        // Checked before the work ends: the session is known, nothing handled yet.
        let o = tally.observed();
        assert_eq!((o.sessions, o.latencies_us.len()), (1, 0));
        first.await.unwrap();
        h.handle(&r2, Attempt::FIRST).await.unwrap();
        let o = tally.observed();
        assert_eq!(
            (o.sessions, o.violations, o.replays, o.latencies_us.len()),
            (1, 0, 0, 2)
        );
        // A permanent failure (fnv1a(event-id) % 1000 == 999) is checked for order and has no
        // latency.
        let id = (0..)
            .map(|i| format!("e-{i}"))
            .find(|e| is_permanent(e.as_bytes()))
            .unwrap();
        let r3 = record(3, 3, &id);
        assert!(matches!(
            h.handle(&r3, Attempt::FIRST).await,
            Err(HandlerError::Permanent { .. })
        ));
        let o = tally.observed();
        assert_eq!((o.violations, o.latencies_us.len()), (0, 2));
    }
}
