//! The reply check of the reply scenarios, shared by every system: the reply topic read back by
//! Apache Kafka's own console consumer with `isolation.level=read_committed`, and every input
//! record's reply required there exactly once, in its session's order.
//!
//! Every system answers input record `i` (event id `e-<i>`, session `i % sessions`, `seq`
//! `i / sessions + 1`, see [`crate::workload`]) with one reply: key the session key, value the
//! event id. The check, over the replies in the order a read_committed reader sees them (each
//! partition in offset order):
//!
//! - a value that names no input record, or a key that is not that record's session: **mismatch**;
//! - a record's reply seen again: **duplicate** (an aborted transaction's replies are not seen;
//!   at-least-once replies written twice are);
//! - a record's reply seen after the reply of a later record of its session: **violation**; so is
//!   a session whose replies are on more than one partition (no order holds between partitions);
//! - an input record without a reply: **lost** (a transaction left open hides its replies from a
//!   read_committed reader, so they count as lost too).

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use crate::workload;

/// One reply as a read_committed reader saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenReply {
    /// The partition of the reply topic it was read from.
    pub partition: i32,
    /// Its key.
    pub key: String,
    /// Its value.
    pub value: String,
}

/// The reply check's findings for one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyVerdict {
    /// Replies read.
    pub read: u64,
    /// Input records whose reply was read.
    pub seen: u64,
    /// Input records without a reply.
    pub lost: u64,
    /// Replies of a record already seen.
    pub duplicates: u64,
    /// Replies seen after a later record's reply of the same session, and replies of a session
    /// on a second partition.
    pub violations: u64,
    /// Replies that name no input record, or carry a key other than their record's session.
    pub mismatches: u64,
}

impl ReplyVerdict {
    /// Every input record's reply exactly once, in session order.
    pub fn ok(&self) -> bool {
        self.lost == 0 && self.duplicates == 0 && self.violations == 0 && self.mismatches == 0
    }
}

/// Checks the replies a read_committed reader saw against `records` input records spread round
/// robin over `sessions` sessions.
pub fn check(replies: &[SeenReply], records: u64, sessions: u64) -> ReplyVerdict {
    let sessions = sessions.max(1);
    let mut v = ReplyVerdict::default();
    let mut seen = vec![false; records as usize];
    // Per session: the partition its replies are on, and the highest seq seen.
    let mut state: HashMap<u64, (i32, u64)> = HashMap::new();
    for r in replies {
        v.read += 1;
        let Some(i) = r
            .value
            .strip_prefix("e-")
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|i| *i < records)
        else {
            v.mismatches += 1;
            continue;
        };
        let (session, seq) = (i % sessions, i / sessions + 1);
        if r.key != workload::session_key(session as usize) {
            v.mismatches += 1;
            continue;
        }
        let (partition, max) = state.entry(session).or_insert((r.partition, 0));
        if *partition != r.partition {
            v.violations += 1;
            continue;
        }
        let slot = &mut seen[i as usize];
        if *slot {
            v.duplicates += 1;
            continue;
        }
        *slot = true;
        v.seen += 1;
        if seq < *max {
            v.violations += 1;
        }
        *max = (*max).max(seq);
    }
    v.lost = records - v.seen;
    v
}

/// What the console consumer prints per record with [`CONSOLE_FORMAT`]:
/// `Partition:<p>\t<key>\t<value>`.
const CONSOLE_FORMAT: [&str; 8] = [
    "--formatter-property",
    "print.partition=true",
    "--formatter-property",
    "print.key=true",
    "--formatter-property",
    "key.separator=\t",
    "--formatter-property",
    "line.separator=\n",
];

/// Reads the console consumer's output (printed with `CONSOLE_FORMAT`) into replies.
pub fn parse_console(text: &str) -> Result<Vec<SeenReply>> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut f = l.splitn(3, '\t');
            let (Some(p), Some(key), Some(value)) = (f.next(), f.next(), f.next()) else {
                bail!("unexpected console consumer line {l:?}");
            };
            let partition = p
                .strip_prefix("Partition:")
                .and_then(|n| n.trim().parse().ok())
                .with_context(|| format!("no partition in console consumer line {l:?}"))?;
            Ok(SeenReply {
                partition,
                key: key.to_owned(),
                value: value.to_owned(),
            })
        })
        .collect()
}

/// Every record of `topic` as Apache Kafka's console consumer reads it from the beginning with
/// `isolation.level=read_committed`, stopping after `idle` without a new record (so it reads what
/// is committed when it runs, not what the caller expects).
pub async fn read_committed(
    bootstrap: &str,
    topic: &str,
    idle: Duration,
) -> Result<Vec<SeenReply>> {
    let idle_ms = idle.as_millis().to_string();
    let mut args = vec![
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--command-property",
        "isolation.level=read_committed",
        "--timeout-ms",
        &idle_ms,
    ];
    args.extend(CONSOLE_FORMAT);
    let out = orderly_testkit::run_tool("console-consumer", &args, None)
        .await
        .context("running Apache Kafka's console consumer")?;
    parse_console(&String::from_utf8_lossy(&out.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The replies of a clean run: each session's in order on the partition `session % 3`.
    fn clean(records: u64, sessions: u64) -> Vec<SeenReply> {
        (0..records)
            .map(|i| SeenReply {
                partition: (i % sessions % 3) as i32,
                key: workload::session_key((i % sessions) as usize),
                value: format!("e-{i}"),
            })
            .collect()
    }

    #[test]
    fn every_reply_once_in_order_passes() {
        let v = check(&clean(100, 7), 100, 7);
        assert!(v.ok(), "{v:?}");
        assert_eq!((v.read, v.seen), (100, 100));
    }

    #[test]
    fn a_missing_reply_is_lost_and_a_repeated_one_a_duplicate() {
        let mut r = clean(100, 7);
        r.remove(40);
        let v = check(&r, 100, 7);
        assert_eq!((v.lost, v.duplicates), (1, 0), "{v:?}");
        assert!(!v.ok());
        let mut r = clean(100, 7);
        r.push(r[10].clone());
        let v = check(&r, 100, 7);
        assert_eq!((v.lost, v.duplicates), (0, 1), "{v:?}");
        assert!(!v.ok());
    }

    #[test]
    fn a_reply_after_a_later_one_of_its_session_is_a_violation() {
        let mut r = clean(100, 7);
        // Records 3 and 10 are the first two of session s-000003.
        r.swap(3, 10);
        let v = check(&r, 100, 7);
        assert_eq!(v.violations, 1, "{v:?}");
        assert_eq!(v.lost, 0);
        // Other sessions' replies may interleave in any way.
        let mut r = clean(100, 7);
        r.swap(3, 4);
        assert!(check(&r, 100, 7).ok());
    }

    #[test]
    fn a_session_on_two_partitions_and_a_foreign_reply_are_caught() {
        let mut r = clean(100, 7);
        r[10].partition += 1;
        let v = check(&r, 100, 7);
        assert_eq!((v.violations, v.lost), (1, 1), "{v:?}");
        let mut r = clean(100, 7);
        r[5].key = workload::session_key(6);
        r.push(SeenReply {
            partition: 0,
            key: workload::session_key(0),
            value: "e-100".into(),
        });
        let v = check(&r, 100, 7);
        assert_eq!((v.mismatches, v.lost), (2, 1), "{v:?}");
    }

    #[test]
    fn console_lines_are_read_and_a_foreign_line_refused() {
        let r = parse_console("Partition:3\ts-000001\te-1\nPartition:11\ts-000002\te-2\n").unwrap();
        assert_eq!(
            r,
            [
                SeenReply {
                    partition: 3,
                    key: "s-000001".into(),
                    value: "e-1".into()
                },
                SeenReply {
                    partition: 11,
                    key: "s-000002".into(),
                    value: "e-2".into()
                }
            ]
        );
        assert!(parse_console("s-000001\te-1\n").is_err());
    }
}
