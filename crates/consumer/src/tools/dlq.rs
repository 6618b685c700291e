//! Reading, selecting and replaying the dead-letter topic (what `orderly dlq ls|show|replay` does).
//!
//! # The DLQ record format
//!
//! A dead letter keeps the original key, value and headers (in order, `traceparent` included),
//! then carries these headers (written by `orderly_engine::DeadLetter::headers`):
//! `orderly-dlq-topic`, `orderly-dlq-partition`, `orderly-dlq-offset` (where it came from),
//! `orderly-dlq-reason` (`permanent`, `retries-exhausted`, `stuck` or `parked`),
//! `orderly-dlq-error` (the handler's text), `orderly-dlq-attempts`,
//! `orderly-dlq-first-attempt-ms` and `orderly-dlq-last-attempt-ms` (ms since the Unix epoch).
//!
//! # Replay
//!
//! [`replay`] re-produces the chosen letters to their source topic and source partition, sorted by
//! source offset (so a session's records go back in their original order), without the
//! `orderly-dlq-*` headers and with `orderly-replayed-from: <dlq topic>:<partition>:<offset>`.
//! Only once every replayed record is acknowledged does it write one **marker** per letter into the
//! DLQ topic itself (same partition, same key, no value, header
//! [`MARKER`]` = <partition>:<offset>`). [`read_dead_letters`] marks letters with a marker as
//! replayed, and [`replay`] skips them unless `force`. A crash between the two steps leaves letters
//! replayed but unmarked: a second replay writes them again (at-least-once, never lost).

use std::collections::{BTreeMap, HashSet};
use std::ops::RangeInclusive;
use std::sync::Arc;

use bytes::Bytes;
use orderly_protocol::ConnectionPool;
use orderly_protocol::records::{Header, ProduceRecord, Record};
use serde::Serialize;

use crate::cluster::Cluster;
use crate::error::DriverError;
use crate::tools::produce::{Batcher, read_topic};

/// The header of a replay marker: `<dlq partition>:<dlq offset>` of the letter it marks.
pub const MARKER: &str = "orderly-dlq-replayed";

/// The header a replayed record carries: `<dlq topic>:<dlq partition>:<dlq offset>`.
pub const REPLAYED_FROM: &str = "orderly-replayed-from";

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
    pub record: Record,
}

/// Which dead letters. The default selects every letter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LetterFilter {
    /// Only letters of this session (record key).
    pub session: Option<String>,
    /// Only letters from this source partition.
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
        self.session
            .as_ref()
            .is_none_or(|s| l.session.as_ref() == Some(s))
            && self
                .source_partition
                .is_none_or(|sp| sp == l.source_partition)
            && self
                .source_offsets
                .as_ref()
                .is_none_or(|r| r.contains(&l.source_offset))
    }
}

fn header<'a>(r: &'a Record, name: &str) -> Option<&'a str> {
    r.headers
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value.as_deref())
        .and_then(|v| std::str::from_utf8(v).ok())
}

/// Decodes the letters among `records` (a DLQ topic's `(partition, record)` pairs), leaving out
/// markers and records without `orderly-dlq-topic`, and flags those a marker names as replayed.
pub fn decode_dead_letters(records: Vec<(i32, Record)>) -> Vec<DeadLetterRecord> {
    let replayed: HashSet<(i32, i64)> = records
        .iter()
        .flat_map(|(_, r)| r.headers.iter().filter(|h| h.key == MARKER))
        .filter_map(|h| {
            let v = std::str::from_utf8(h.value.as_deref()?).ok()?;
            let (p, o) = v.split_once(':')?;
            Some((p.parse().ok()?, o.parse().ok()?))
        })
        .collect();
    let mut out = Vec::new();
    for (p, r) in records {
        if header(&r, MARKER).is_some() {
            continue;
        }
        let Some(src) = header(&r, "orderly-dlq-topic") else {
            continue;
        };
        let num = |n: &str| {
            header(&r, n)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(-1)
        };
        out.push(DeadLetterRecord {
            dlq_partition: p,
            dlq_offset: r.offset,
            source_topic: src.to_owned(),
            source_partition: i32::try_from(num("orderly-dlq-partition")).unwrap_or(-1),
            source_offset: num("orderly-dlq-offset"),
            session: r
                .key
                .as_deref()
                .map(|k| String::from_utf8_lossy(k).into_owned()),
            reason: header(&r, "orderly-dlq-reason").unwrap_or("").to_owned(),
            error: header(&r, "orderly-dlq-error").unwrap_or("").to_owned(),
            attempts: u32::try_from(num("orderly-dlq-attempts")).unwrap_or(0),
            first_failure_ms: num("orderly-dlq-first-attempt-ms"),
            last_failure_ms: num("orderly-dlq-last-attempt-ms"),
            replayed: replayed.contains(&(p, r.offset)),
            record: r,
        });
    }
    out
}

/// Reads the whole DLQ topic (up to its end now) and returns the letters `filter` selects, in DLQ
/// order (partition by partition).
pub async fn read_dead_letters(
    pool: &Arc<ConnectionPool>,
    cluster: &Cluster,
    dlq_topic: &str,
    filter: &LetterFilter,
) -> Result<Vec<DeadLetterRecord>, DriverError> {
    let records = read_topic(pool, cluster, dlq_topic).await?;
    let mut letters = decode_dead_letters(records);
    letters.retain(|l| filter.matches(l));
    Ok(letters)
}

/// The replay order: per source topic and partition, by source offset.
pub fn sort_for_replay(letters: &mut [DeadLetterRecord]) {
    letters.sort_by(|x, y| {
        (&x.source_topic, x.source_partition, x.source_offset).cmp(&(
            &y.source_topic,
            y.source_partition,
            y.source_offset,
        ))
    });
}

/// The record a letter is replayed as: its key, value and original headers (no `orderly-dlq-*`),
/// plus [`REPLAYED_FROM`].
pub fn replay_record(dlq_topic: &str, l: &DeadLetterRecord) -> ProduceRecord {
    let mut headers: Vec<Header> = l
        .record
        .headers
        .iter()
        .filter(|h| !h.key.starts_with("orderly-dlq-"))
        .cloned()
        .collect();
    headers.push(Header {
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
        timestamp: None,
    }
}

/// What [`replay`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayOutcome {
    /// Letters re-produced (and marked).
    pub replayed: u64,
    /// Letters left out because they were replayed before (without `force`).
    pub skipped_replayed_before: usize,
    /// The source topics written to.
    pub topics: Vec<String>,
}

/// Replays `letters` (read from `dlq_topic`): without `force`, letters replayed before are left
/// out; the rest are re-produced to their source partition in source order, then marked (see the
/// module doc). An empty selection writes nothing.
pub async fn replay(
    pool: &Arc<ConnectionPool>,
    cluster: &Cluster,
    dlq_topic: &str,
    mut letters: Vec<DeadLetterRecord>,
    force: bool,
) -> Result<ReplayOutcome, DriverError> {
    let before = letters.len();
    if !force {
        letters.retain(|l| !l.replayed);
    }
    let mut outcome = ReplayOutcome {
        skipped_replayed_before: before - letters.len(),
        ..ReplayOutcome::default()
    };
    if letters.is_empty() {
        return Ok(outcome);
    }
    sort_for_replay(&mut letters);
    let mut by_topic: BTreeMap<&str, Vec<&DeadLetterRecord>> = BTreeMap::new();
    for l in &letters {
        by_topic.entry(l.source_topic.as_str()).or_default().push(l);
    }
    let producer = Arc::new(orderly_protocol::Producer::new(
        pool.clone(),
        orderly_protocol::ProducerConfig::default(),
    ));
    for (topic, ls) in &by_topic {
        let mut out = Batcher::with_producer(producer.clone(), cluster, topic).await?;
        for l in ls {
            // The letter's source partition, so the records land where they came from (in
            // order, one batch in flight per partition).
            out.push_to(l.source_partition, replay_record(dlq_topic, l))
                .await?;
        }
        outcome.replayed += out.finish().await?;
        outcome.topics.push((*topic).to_owned());
    }
    // Only once every replayed record is acknowledged: the markers.
    let mut marks = Batcher::with_producer(producer, cluster, dlq_topic).await?;
    for l in &letters {
        marks
            .push_to(
                l.dlq_partition,
                ProduceRecord {
                    key: l.record.key.clone(),
                    value: None,
                    headers: vec![Header {
                        key: MARKER.into(),
                        value: Some(Bytes::from(format!("{}:{}", l.dlq_partition, l.dlq_offset))),
                    }],
                    timestamp: None,
                },
            )
            .await?;
    }
    marks.finish().await?;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(offset: i64, key: &str, headers: &[(&str, &str)]) -> Record {
        Record {
            offset,
            timestamp: 0,
            log_append_time: false,
            key: Some(Bytes::from(key.to_owned())),
            value: Some(Bytes::from_static(b"v")),
            headers: headers
                .iter()
                .map(|(k, v)| Header {
                    key: (*k).into(),
                    value: Some(Bytes::from((*v).to_owned())),
                })
                .collect(),
            leader_epoch: -1,
            shared: None,
        }
    }

    fn letter(offset: i64, key: &str, src_offset: &str) -> Record {
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

        let mut all = ls;
        sort_for_replay(&mut all);
        let order: Vec<i64> = all.iter().map(|l| l.source_offset).collect();
        assert_eq!(order, [7, 12, 40], "source order");
        let r = replay_record("orders.dlq", &all[0]);
        let keys: Vec<&str> = r.headers.iter().map(|h| &*h.key).collect();
        assert_eq!(keys, ["trace", REPLAYED_FROM], "no orderly-dlq-* headers");
        assert_eq!(r.headers[1].value.as_deref(), Some(&b"orders.dlq:1:0"[..]));
    }
}
