//! Reading, selecting and replaying the dead-letter topic (what `orderly dlq ls|show|replay` does).
//!
//! # The DLQ record format
//!
//! A dead letter keeps the original key, value, timestamp and headers (in order, `traceparent`
//! included), then carries these headers (written by `orderly_engine::DeadLetter::headers`):
//! `orderly-dlq-topic`, `orderly-dlq-partition`, `orderly-dlq-offset` (where it came from),
//! `orderly-dlq-reason` (`permanent`, `retries-exhausted`, `stuck` or `parked`),
//! `orderly-dlq-error` (the handler's text), `orderly-dlq-attempts`,
//! `orderly-dlq-first-attempt-ms` and `orderly-dlq-last-attempt-ms` (ms since the Unix epoch).
//! The consumer's dead-letter sink puts all letters of one session on one DLQ partition, in the
//! order they were dead-lettered, which is the session's order.
//!
//! # Replay
//!
//! [`replay`] reads the DLQ in chunks (memory bounded by one fetch response, plus one entry per
//! replayed letter for de-duplication and markers) and re-produces the chosen letters, in DLQ
//! order, to their source topic and source partition (or, with [`ReplayOptions::to_topic`], to
//! the same partition number of another topic). A session's letters are in one DLQ partition in
//! its order, so they go back in that order. Each source record is replayed once even when it was
//! dead-lettered twice (a redelivery after a crash dead-letters it again): the first letter of a
//! `(source topic, partition, offset)` wins. The replayed record keeps the original key, value and
//! timestamp and its original headers except the `orderly-dlq-*` ones, the synthetic
//! [`SESSION_HEADER`] (the consumer's router writes it again) and the headers of an earlier
//! replay; it gets `orderly-replayed-from: <dlq topic>:<partition>:<offset>` and (when replayed to
//! its source topic) [`REPLAY_ORIGIN`], the source offset it copies.
//!
//! Replay to the source topic reaches **every** consumer group of that topic, not only the one
//! that dead-lettered the records; replay to another topic ([`ReplayOptions::to_topic`]) and a
//! consumer of that topic reach one application only.
//!
//! Only once every replayed record is acknowledged does [`replay`] write one **marker** per letter
//! into the DLQ topic itself (same partition, same key, no value, header
//! [`MARKER`]` = <partition>:<offset>`). Letters with a marker are replayed, and [`replay`] skips
//! them unless `force`. A crash between the two steps leaves letters replayed but unmarked: a
//! second replay writes them again (at-least-once, never lost).
//!
//! # Releasing a parked session
//!
//! [`replay_parked_session`] replays a parked session's dead letters as one replay round and so
//! releases it in order: the rules, and what happens to records that arrive meanwhile, are in
//! `orderly_engine::parked`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use orderly_engine::parked::{REPLAY_LAST, REPLAY_ORIGIN, REPLAY_ROUND};
use orderly_engine::{ParkedSession, TopicPartition};
use orderly_protocol::records::{FetchedRecord, ProduceRecord, WireHeader};
use orderly_protocol::{ConnectionPool, Producer};
use serde::Serialize;

use crate::error::DriverError;
use crate::metadata_cache::MetadataCache;
use crate::parked_store::KafkaParkedStore;
use crate::tools::produce::{Batcher, TopicReader};

/// The header of a replay marker: `<dlq partition>:<dlq offset>` of the letter it marks.
pub const MARKER: &str = "orderly-dlq-replayed";

/// The header a replayed record carries: `<dlq topic>:<dlq partition>:<dlq offset>`.
pub const REPLAYED_FROM: &str = "orderly-replayed-from";

/// The header `orderly-handlers`' session router writes the session id into on the consuming
/// side; a replayed record does not carry it back.
pub const SESSION_HEADER: &str = "orderly-session-id";

/// One dead letter, decoded.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetterRecord {
    /// Its DLQ partition.
    pub dlq_partition: i32,
    /// Its DLQ offset.
    pub dlq_offset: i64,
    /// Source topic.
    pub source_topic: String,
    /// Source partition (-1 if the header is missing).
    pub source_partition: i32,
    /// Source offset (-1 if the header is missing).
    pub source_offset: i64,
    /// The source offset of the original record: [`REPLAY_ORIGIN`] when the dead-lettered record
    /// was itself a replay, else `source_offset`.
    pub origin: i64,
    /// The record key as text (lossy UTF-8): the session.
    pub session: Option<String>,
    /// `permanent`, `retries-exhausted`, `stuck`, `parked`.
    pub reason: String,
    /// The handler's error text.
    pub error: String,
    /// Attempts made.
    pub attempts: u32,
    /// First failure, ms since the epoch (-1 if unknown).
    pub first_failure_ms: i64,
    /// Last failure, ms since the epoch (-1 if unknown).
    pub last_failure_ms: i64,
    /// A replay marker for this letter exists.
    pub replayed: bool,
    /// The DLQ record itself.
    #[serde(skip)]
    pub record: FetchedRecord,
}

impl DeadLetterRecord {
    /// Whether this letter belongs to `session`: its key, or the synthetic session header.
    pub fn is_session(&self, session: &str) -> bool {
        self.session.as_deref() == Some(session)
            || header(&self.record, SESSION_HEADER) == Some(session)
    }
}

/// Which dead letters. The default selects every letter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LetterFilter {
    /// Only letters of this session (record key, or the synthetic session header).
    pub session: Option<String>,
    /// Only letters from this source topic.
    pub source_topic: Option<String>,
    /// Only letters from this source partition (of every selected topic).
    pub source_partition: Option<i32>,
    /// Only letters whose source offset is in this range.
    pub source_offsets: Option<RangeInclusive<i64>>,
}

impl LetterFilter {
    /// Parses `FROM..TO` (inclusive), e.g. `100..250`.
    pub fn parse_offsets(s: &str) -> Result<RangeInclusive<i64>, DriverError> {
        let (f, t) = s.split_once("..").ok_or_else(|| {
            DriverError::Config("source offsets: expected FROM..TO, e.g. 100..250".into())
        })?;
        let num = |v: &str, what: &str| {
            v.trim().parse::<i64>().map_err(|_| {
                DriverError::Config(format!("source offsets: {what} is not a number: {v:?}"))
            })
        };
        Ok(num(f, "FROM")?..=num(t, "TO")?)
    }

    /// Whether `l` is selected.
    pub fn matches(&self, l: &DeadLetterRecord) -> bool {
        self.session.as_ref().is_none_or(|s| l.is_session(s))
            && self
                .source_topic
                .as_ref()
                .is_none_or(|t| *t == l.source_topic)
            && self
                .source_partition
                .is_none_or(|sp| sp == l.source_partition)
            && self
                .source_offsets
                .as_ref()
                .is_none_or(|r| r.contains(&l.source_offset))
    }
}

fn header<'a>(r: &'a FetchedRecord, name: &str) -> Option<&'a str> {
    r.headers
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value.as_deref())
        .and_then(|v| std::str::from_utf8(v).ok())
}

/// The letter a marker names, if `r` is a marker.
fn marker_of(r: &FetchedRecord) -> Option<(i32, i64)> {
    let (p, o) = header(r, MARKER)?.split_once(':')?;
    Some((p.parse().ok()?, o.parse().ok()?))
}

/// Decodes one DLQ record; `None` for markers and records without `orderly-dlq-topic`.
/// `replayed` is left false.
pub fn decode_dead_letter(partition: i32, r: FetchedRecord) -> Option<DeadLetterRecord> {
    if header(&r, MARKER).is_some() {
        return None;
    }
    let src = header(&r, "orderly-dlq-topic")?.to_owned();
    let num = |n: &str| {
        header(&r, n)
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(-1)
    };
    let source_offset = num("orderly-dlq-offset");
    Some(DeadLetterRecord {
        dlq_partition: partition,
        dlq_offset: r.offset,
        source_topic: src,
        source_partition: i32::try_from(num("orderly-dlq-partition")).unwrap_or(-1),
        source_offset,
        origin: header(&r, REPLAY_ORIGIN)
            .and_then(|v| v.parse().ok())
            .unwrap_or(source_offset),
        session: r
            .key
            .as_deref()
            .map(|k| String::from_utf8_lossy(k).into_owned()),
        reason: header(&r, "orderly-dlq-reason").unwrap_or("").to_owned(),
        error: header(&r, "orderly-dlq-error").unwrap_or("").to_owned(),
        attempts: u32::try_from(num("orderly-dlq-attempts")).unwrap_or(0),
        first_failure_ms: num("orderly-dlq-first-attempt-ms"),
        last_failure_ms: num("orderly-dlq-last-attempt-ms"),
        replayed: false,
        record: r,
    })
}

/// Decodes the letters among `records` (a DLQ topic's `(partition, record)` pairs), leaving out
/// markers and records without `orderly-dlq-topic`, and flags those a marker names as replayed.
pub fn decode_dead_letters(records: Vec<(i32, FetchedRecord)>) -> Vec<DeadLetterRecord> {
    let replayed: HashSet<(i32, i64)> = records.iter().filter_map(|(_, r)| marker_of(r)).collect();
    records
        .into_iter()
        .filter_map(|(p, r)| decode_dead_letter(p, r))
        .map(|mut l| {
            l.replayed = replayed.contains(&(l.dlq_partition, l.dlq_offset));
            l
        })
        .collect()
}

/// The letters of a DLQ topic that a marker names (one pass over the topic, in chunks).
pub async fn replayed_letters(
    pool: &Arc<ConnectionPool>,
    cluster: &MetadataCache,
    dlq_topic: &str,
) -> Result<HashSet<(i32, i64)>, DriverError> {
    let mut reader = TopicReader::open(pool, cluster, dlq_topic).await?;
    let mut set = HashSet::new();
    while let Some(chunk) = reader.next_chunk().await? {
        set.extend(chunk.iter().filter_map(|(_, r)| marker_of(r)));
    }
    Ok(set)
}

/// Reads the DLQ topic (up to its end now) in chunks and calls `each` with every letter `filter`
/// selects, in DLQ order (partition by partition), `replayed` set. Memory is bounded by one
/// chunk plus the set of marked letters.
pub async fn for_each_dead_letter(
    pool: &Arc<ConnectionPool>,
    cluster: &MetadataCache,
    dlq_topic: &str,
    filter: &LetterFilter,
    mut each: impl FnMut(DeadLetterRecord),
) -> Result<(), DriverError> {
    let marked = replayed_letters(pool, cluster, dlq_topic).await?;
    let mut reader = TopicReader::open(pool, cluster, dlq_topic).await?;
    while let Some(chunk) = reader.next_chunk().await? {
        for (p, r) in chunk {
            if let Some(mut l) = decode_dead_letter(p, r) {
                if filter.matches(&l) {
                    l.replayed = marked.contains(&(l.dlq_partition, l.dlq_offset));
                    each(l);
                }
            }
        }
    }
    Ok(())
}

/// Reads the whole DLQ topic (up to its end now) and returns the letters `filter` selects, in DLQ
/// order (partition by partition). Holds them all: for a DLQ of any size use
/// [`for_each_dead_letter`].
pub async fn read_dead_letters(
    pool: &Arc<ConnectionPool>,
    cluster: &MetadataCache,
    dlq_topic: &str,
    filter: &LetterFilter,
) -> Result<Vec<DeadLetterRecord>, DriverError> {
    let mut out = Vec::new();
    for_each_dead_letter(pool, cluster, dlq_topic, filter, |l| out.push(l)).await?;
    Ok(out)
}

fn is_replay_header(key: &str) -> bool {
    key.starts_with("orderly-dlq-")
        || key == SESSION_HEADER
        || key == REPLAYED_FROM
        || key == REPLAY_ROUND
        || key == REPLAY_ORIGIN
        || key == REPLAY_LAST
}

/// The record a letter is replayed as: its key, value, timestamp and original headers (see the
/// module doc for the ones left out), plus [`REPLAYED_FROM`].
pub fn replay_record(dlq_topic: &str, l: &DeadLetterRecord) -> ProduceRecord {
    let mut headers: Vec<WireHeader> = l
        .record
        .headers
        .iter()
        .filter(|h| !is_replay_header(&h.key))
        .cloned()
        .collect();
    headers.push(WireHeader {
        key: REPLAYED_FROM.into(),
        value: Some(Bytes::from(format!(
            "{dlq_topic}:{}:{}",
            l.dlq_partition, l.dlq_offset
        ))),
    });
    ProduceRecord {
        key: l.record.key.clone(),
        value: l.record.value.clone(),
        headers,
        // The dead letter carries the original record's timestamp (unless the DLQ topic stamps
        // its own: then the original is gone and the broker stamps the replay too).
        timestamp: (!l.record.log_append_time).then_some(l.record.timestamp),
    }
}

/// How [`replay`] replays.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Replay letters that were replayed before.
    pub force: bool,
    /// Write to this topic instead of each letter's source topic (same partition number as the
    /// source partition; the topic must have that many partitions).
    pub to_topic: Option<String>,
    /// Select and count, write nothing.
    pub dry_run: bool,
}

/// What [`replay`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayOutcome {
    /// Letters re-produced (and marked); with `dry_run`, the letters that would be.
    pub replayed: u64,
    /// Letters left out because they were replayed before (without `force`).
    pub skipped_replayed_before: usize,
    /// Letters left out because an earlier letter of the same source record was replayed.
    pub skipped_duplicates: usize,
    /// The topics written to (or that would be).
    pub topics: Vec<String>,
}

/// Replays the letters of `dlq_topic` that `filter` selects (see the module doc): streamed, in
/// DLQ order, each source record once, then marked. An empty selection writes nothing.
/// `chosen` sees every letter that is (or with `dry_run` would be) replayed.
pub async fn replay(
    pool: &Arc<ConnectionPool>,
    cluster: &MetadataCache,
    dlq_topic: &str,
    filter: &LetterFilter,
    opts: &ReplayOptions,
    mut chosen: impl FnMut(&DeadLetterRecord),
) -> Result<ReplayOutcome, DriverError> {
    let marked = replayed_letters(pool, cluster, dlq_topic).await?;
    let mut outcome = ReplayOutcome::default();
    let producer = Arc::new(orderly_protocol::Producer::new(
        pool.clone(),
        orderly_protocol::ProducerConfig::default(),
    ));
    let mut out: BTreeMap<String, Batcher> = BTreeMap::new();
    let mut seen: HashSet<(Arc<str>, i32, i64)> = HashSet::new();
    let mut topics: HashMap<String, Arc<str>> = HashMap::new();
    // The letters to mark: DLQ partition, offset and key.
    let mut marks: Vec<(i32, i64, Option<Bytes>)> = Vec::new();
    let mut reader = TopicReader::open(pool, cluster, dlq_topic).await?;
    while let Some(chunk) = reader.next_chunk().await? {
        for (p, r) in chunk {
            let Some(l) = decode_dead_letter(p, r) else {
                continue;
            };
            if !filter.matches(&l) {
                continue;
            }
            if !opts.force && marked.contains(&(l.dlq_partition, l.dlq_offset)) {
                outcome.skipped_replayed_before += 1;
                continue;
            }
            let topic = topics
                .entry(l.source_topic.clone())
                .or_insert_with(|| Arc::from(l.source_topic.as_str()))
                .clone();
            if !seen.insert((topic, l.source_partition, l.source_offset)) {
                outcome.skipped_duplicates += 1;
                continue;
            }
            chosen(&l);
            outcome.replayed += 1;
            let target = opts.to_topic.as_ref().unwrap_or(&l.source_topic);
            if !outcome.topics.contains(target) {
                outcome.topics.push(target.clone());
            }
            if opts.dry_run {
                continue;
            }
            let mut record = replay_record(dlq_topic, &l);
            if opts.to_topic.is_none() {
                record.headers.push(WireHeader {
                    key: REPLAY_ORIGIN.into(),
                    value: Some(Bytes::from(l.origin.to_string())),
                });
            }
            let batcher = match out.get_mut(target) {
                Some(b) => b,
                None => {
                    let b = Batcher::with_producer(producer.clone(), cluster, target).await?;
                    out.entry(target.clone()).or_insert(b)
                }
            };
            // The letter's source partition, so the records land where they came from (in
            // order, one batch in flight per partition).
            batcher.push_to(l.source_partition, record).await?;
            marks.push((l.dlq_partition, l.dlq_offset, l.record.key.clone()));
        }
    }
    if opts.dry_run {
        return Ok(outcome);
    }
    for (_, b) in out {
        b.finish().await?;
    }
    // Only once every replayed record is acknowledged: the markers.
    if !marks.is_empty() {
        write_markers(producer, cluster, dlq_topic, marks).await?;
    }
    Ok(outcome)
}

async fn write_markers(
    producer: Arc<Producer>,
    cluster: &MetadataCache,
    dlq_topic: &str,
    marks: Vec<(i32, i64, Option<Bytes>)>,
) -> Result<(), DriverError> {
    let mut out = Batcher::with_producer(producer, cluster, dlq_topic).await?;
    for (p, o, key) in marks {
        out.push_to(
            p,
            ProduceRecord {
                key,
                value: None,
                headers: vec![WireHeader {
                    key: MARKER.into(),
                    value: Some(Bytes::from(format!("{p}:{o}"))),
                }],
                timestamp: None,
            },
        )
        .await?;
    }
    out.finish().await?;
    Ok(())
}

/// What [`replay_parked_session`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundOutcome {
    /// The replay round's id ([`REPLAY_ROUND`]).
    pub round: String,
    /// The session's entry in the store before the round.
    pub parked: ParkedSession,
    /// Letters replayed, in origin order (their origins).
    pub origins: Vec<i64>,
}

/// Where a parked session stands after a round (see [`wait_for_round`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoundResult {
    /// The round was handled and the session released.
    Released,
    /// The round was handled, but records of the session were parked behind it: it stays parked
    /// from this origin; replay it again for them.
    ParkedBehind(i64),
    /// A record of the round was dead-lettered again: the session stays parked from this origin.
    Failed(i64),
    /// No consumer finished the round within the wait.
    Pending,
}

/// Releases the parked session `session` of `partition` in order by one replay round (see the
/// module doc and `orderly_engine::parked`): reads its entry in the parked-session store
/// (`parked_topic`), replays its dead letters from the entry's `since` on to the source
/// partition, in origin order and each origin once, the last one marked as the round's end, and
/// marks them replayed in the DLQ. The consumer that owns the partition releases the session once
/// it has handled the round; [`wait_for_round`] watches for that.
pub async fn replay_parked_session(
    pool: &Arc<ConnectionPool>,
    cluster: &MetadataCache,
    dlq_topic: &str,
    parked_topic: &str,
    partition: &TopicPartition,
    session: &str,
) -> Result<RoundOutcome, DriverError> {
    let store = KafkaParkedStore::new(pool.clone(), cluster.clone(), parked_topic);
    let entry = store
        .read_all()
        .await?
        .into_iter()
        .find(|e| e.partition == *partition && e.session == session.as_bytes())
        .ok_or_else(|| {
            DriverError::Config(format!(
                "session {session:?} of {partition} is not parked (no entry in {parked_topic})"
            ))
        })?;
    let filter = LetterFilter {
        session: Some(session.to_owned()),
        source_topic: Some(partition.topic.to_string()),
        source_partition: Some(partition.partition),
        source_offsets: None,
    };
    // One session's letters from `since` on, by origin; the first letter of an origin wins.
    let mut letters: BTreeMap<i64, DeadLetterRecord> = BTreeMap::new();
    for_each_dead_letter(pool, cluster, dlq_topic, &filter, |l| {
        if l.origin >= entry.since_offset {
            letters.entry(l.origin).or_insert(l);
        }
    })
    .await?;
    if letters.is_empty() {
        return Err(DriverError::Config(format!(
            "session {session:?} of {partition} is parked since offset {}, but the DLQ holds none of its letters from there; release it through the consumer instead",
            entry.since_offset
        )));
    }
    let round = format!(
        "{:x}-{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
        std::process::id()
    );
    let producer = Arc::new(Producer::new(
        pool.clone(),
        orderly_protocol::ProducerConfig::default(),
    ));
    let mut out = Batcher::with_producer(producer.clone(), cluster, &partition.topic).await?;
    let n = letters.len();
    let h = |k: &str, v: String| WireHeader {
        key: k.into(),
        value: Some(Bytes::from(v)),
    };
    let mut marks = Vec::with_capacity(n);
    for (i, (origin, l)) in letters.iter().enumerate() {
        let mut record = replay_record(dlq_topic, l);
        record.headers.push(h(REPLAY_ROUND, round.clone()));
        record.headers.push(h(REPLAY_ORIGIN, origin.to_string()));
        if i + 1 == n {
            record.headers.push(h(REPLAY_LAST, "1".into()));
        }
        out.push_to(partition.partition, record).await?;
        marks.push((l.dlq_partition, l.dlq_offset, l.record.key.clone()));
    }
    out.finish().await?;
    write_markers(producer, cluster, dlq_topic, marks).await?;
    Ok(RoundOutcome {
        round,
        parked: entry,
        origins: letters.into_keys().collect(),
    })
}

/// Watches the parked-session store until the consumer finished `round` of the session (or
/// `wait` passed).
pub async fn wait_for_round(
    pool: &Arc<ConnectionPool>,
    cluster: &MetadataCache,
    parked_topic: &str,
    round: &RoundOutcome,
    wait: Duration,
) -> Result<RoundResult, DriverError> {
    let store = KafkaParkedStore::new(pool.clone(), cluster.clone(), parked_topic);
    let last = round.origins.last().copied().unwrap_or(-1);
    let started = Instant::now();
    loop {
        let entry =
            store.read_all().await?.into_iter().find(|e| {
                e.partition == round.parked.partition && e.session == round.parked.session
            });
        match entry {
            None => return Ok(RoundResult::Released),
            Some(e) if e.failed_round.as_deref() == Some(round.round.as_str()) => {
                return Ok(RoundResult::Failed(e.since_offset));
            }
            Some(e) if e.since_offset > last => {
                return Ok(RoundResult::ParkedBehind(e.since_offset));
            }
            Some(_) => {}
        }
        if started.elapsed() >= wait {
            return Ok(RoundResult::Pending);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(offset: i64, key: &str, headers: &[(&str, &str)]) -> FetchedRecord {
        FetchedRecord {
            offset,
            timestamp: 0,
            log_append_time: false,
            key: Some(Bytes::from(key.to_owned())),
            value: Some(Bytes::from_static(b"v")),
            headers: headers
                .iter()
                .map(|(k, v)| WireHeader {
                    key: (*k).into(),
                    value: Some(Bytes::from((*v).to_owned())),
                })
                .collect(),
            leader_epoch: -1,
            shared: None,
        }
    }

    fn letter(offset: i64, key: &str, src_offset: &str) -> FetchedRecord {
        rec(
            offset,
            key,
            &[
                ("trace", "t"),
                ("orderly-dlq-topic", "orders"),
                ("orderly-dlq-partition", "2"),
                ("orderly-dlq-offset", src_offset),
                ("orderly-dlq-reason", "permanent"),
                ("orderly-dlq-attempts", "3"),
            ],
        )
    }

    #[test]
    fn markers_flag_letters_and_are_not_letters() {
        let records = vec![
            (0, letter(0, "s1", "40")),
            (0, letter(1, "s1", "12")),
            (1, letter(0, "s2", "7")),
            (0, rec(2, "s1", &[(MARKER, "0:1")])),
            (0, rec(3, "x", &[("unrelated", "1")])),
        ];
        let ls = decode_dead_letters(records);
        assert_eq!(ls.len(), 3);
        assert!(!ls[0].replayed && ls[1].replayed && !ls[2].replayed);
        assert_eq!(ls[0].source_offset, 40);
        assert_eq!(ls[0].source_partition, 2);
        assert_eq!(ls[0].attempts, 3);
        assert_eq!(ls[0].reason, "permanent");

        let f = LetterFilter {
            session: Some("s1".into()),
            source_offsets: Some(LetterFilter::parse_offsets("10..20").unwrap_or(0..=0)),
            ..Default::default()
        };
        let chosen: Vec<i64> = ls
            .iter()
            .filter(|l| f.matches(l))
            .map(|l| l.source_offset)
            .collect();
        assert_eq!(chosen, [12]);
        assert!(LetterFilter::parse_offsets("10-20").is_err());
        assert!(LetterFilter::parse_offsets("a..2").is_err());

        let mut stale = ls[2].clone();
        stale.record.headers.push(WireHeader {
            key: SESSION_HEADER.into(),
            value: Some(Bytes::from_static(b"old")),
        });
        stale.record.timestamp = 1234;
        let r = replay_record("orders.dlq", &stale);
        let keys: Vec<&str> = r.headers.iter().map(|h| &*h.key).collect();
        assert_eq!(
            keys,
            ["trace", REPLAYED_FROM],
            "no orderly-dlq-* or session headers"
        );
        assert_eq!(r.headers[1].value.as_deref(), Some(&b"orders.dlq:1:0"[..]));
        assert_eq!(r.timestamp, Some(1234), "the original timestamp");
    }
}
