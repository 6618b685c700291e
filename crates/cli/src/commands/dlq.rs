//! `orderly dlq ls|show|replay`: read the dead-letter topic and re-produce chosen records to their source topic in their original order.
//!
//! # The DLQ record format
//!
//! A dead letter keeps the original key, value and headers (in order, `traceparent` included),
//! then carries these headers (written by `orderly_engine::DeadLetter::headers`):
//! `orderly-dlq-topic`, `orderly-dlq-partition`, `orderly-dlq-offset` (where it came from),
//! `orderly-dlq-reason` (`permanent`, `retries-exhausted` or `stuck`), `orderly-dlq-error` (the
//! handler's text), `orderly-dlq-attempts`, `orderly-dlq-first-attempt-ms` and
//! `orderly-dlq-last-attempt-ms` (ms since the Unix epoch).
//!
//! `replay` writes, after re-producing, one **marker** record per replayed letter into the DLQ
//! topic itself (same partition, no value, header `orderly-dlq-replayed: <partition>:<offset>`);
//! `ls` shows letters with a marker as replayed, and `replay` skips them unless `--force`.

use std::collections::{BTreeMap, HashSet};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use orderly_protocol::records::{Header, ProduceRecord, Record};
use serde::Serialize;

use crate::kafka::{Batcher, KafkaArgs, read_topic};

/// `orderly dlq` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum DlqCommand {
    /// List dead letters: where each came from, why, how often it was tried.
    Ls(DlqArgs),
    /// Show chosen dead letters in full (headers, value).
    Show(DlqArgs),
    /// Re-produce chosen dead letters to their source topic, in source order, and mark them replayed.
    Replay {
        #[command(flatten)]
        args: DlqArgs,
        /// Replay letters that were replayed before.
        #[arg(long)]
        force: bool,
        /// Print what would be replayed, produce nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Which dead letters.
#[derive(clap::Args, Debug)]
pub struct DlqArgs {
    #[command(flatten)]
    kafka: KafkaArgs,
    /// The dead-letter topic.
    #[arg(long, env = "ORDERLY_DLQ_TOPIC")]
    dlq_topic: String,
    /// Only letters of this session (record key).
    #[arg(long)]
    session: Option<String>,
    /// Only letters from this source partition.
    #[arg(long)]
    source_partition: Option<i32>,
    /// Only letters whose source offset is in FROM..TO (inclusive), e.g. 100..250.
    #[arg(long, value_name = "FROM..TO")]
    source_offsets: Option<String>,
    /// Every letter (the default for ls; replay and show need a selection or --all).
    #[arg(long)]
    all: bool,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    json: bool,
}

/// One dead letter, decoded.
#[derive(Debug, Serialize)]
struct Letter {
    dlq_partition: i32,
    dlq_offset: i64,
    source_topic: String,
    source_partition: i32,
    source_offset: i64,
    session: Option<String>,
    reason: String,
    error: String,
    attempts: u32,
    first_failure_ms: i64,
    last_failure_ms: i64,
    replayed: bool,
    #[serde(skip)]
    record: Record,
}

fn header<'a>(r: &'a Record, name: &str) -> Option<&'a str> {
    r.headers
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value.as_deref())
        .and_then(|v| std::str::from_utf8(v).ok())
}

const MARKER: &str = "orderly-dlq-replayed";

async fn load(a: &DlqArgs) -> Result<(Vec<Letter>, crate::kafka::Connected)> {
    let (pool, cluster) = a.kafka.connect(vec![a.dlq_topic.clone()]).await?;
    let records = read_topic(&pool, &cluster, &a.dlq_topic).await?;
    let replayed: HashSet<(i32, i64)> = records
        .iter()
        .flat_map(|(_, r)| r.headers.iter().filter(|h| h.key == MARKER))
        .filter_map(|h| {
            let v = std::str::from_utf8(h.value.as_deref()?).ok()?;
            let (p, o) = v.split_once(':')?;
            Some((p.parse().ok()?, o.parse().ok()?))
        })
        .collect();
    let range = match &a.source_offsets {
        None => None,
        Some(s) => {
            let (f, t) = s
                .split_once("..")
                .context("--source-offsets: expected FROM..TO, e.g. 100..250")?;
            let f: i64 = f
                .trim()
                .parse()
                .context("--source-offsets: FROM is not a number")?;
            let t: i64 = t
                .trim()
                .parse()
                .context("--source-offsets: TO is not a number")?;
            Some(f..=t)
        }
    };
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
        let l = Letter {
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
        };
        if a.session
            .as_ref()
            .is_some_and(|s| l.session.as_ref() != Some(s))
            || a.source_partition
                .is_some_and(|sp| sp != l.source_partition)
            || range
                .as_ref()
                .is_some_and(|r| !r.contains(&l.source_offset))
        {
            continue;
        }
        out.push(l);
    }
    Ok((out, (pool, cluster)))
}

fn has_selection(a: &DlqArgs) -> bool {
    a.all || a.session.is_some() || a.source_partition.is_some() || a.source_offsets.is_some()
}

fn print_table(letters: &[Letter], json: bool) {
    if json {
        for l in letters {
            println!("{}", serde_json::to_string(l).unwrap_or_default());
        }
        return;
    }
    println!(
        "{:<12} {:<28} {:<14} {:<18} {:>8} {:<8} ERROR",
        "DLQ", "SOURCE", "SESSION", "REASON", "ATTEMPTS", "REPLAYED"
    );
    for l in letters {
        let mut err = l.error.replace('\n', " ");
        if err.len() > 60 {
            err.truncate(err.char_indices().nth(57).map_or(err.len(), |(i, _)| i));
            err.push_str("...");
        }
        println!(
            "{:<12} {:<28} {:<14} {:<18} {:>8} {:<8} {err}",
            format!("{}:{}", l.dlq_partition, l.dlq_offset),
            format!(
                "{}-{}@{}",
                l.source_topic, l.source_partition, l.source_offset
            ),
            l.session.as_deref().unwrap_or("-"),
            l.reason,
            l.attempts,
            if l.replayed { "yes" } else { "no" },
        );
    }
    println!("{} dead letters", letters.len());
}

fn show(l: &Letter) {
    println!(
        "dead letter {}:{} from {}-{}@{}",
        l.dlq_partition, l.dlq_offset, l.source_topic, l.source_partition, l.source_offset
    );
    println!("  session:   {}", l.session.as_deref().unwrap_or("-"));
    println!("  reason:    {} ({} attempts)", l.reason, l.attempts);
    println!("  error:     {}", l.error);
    println!(
        "  failures:  first {} ms, last {} ms since the epoch",
        l.first_failure_ms, l.last_failure_ms
    );
    println!("  replayed:  {}", if l.replayed { "yes" } else { "no" });
    println!("  headers:");
    for h in &l.record.headers {
        let v = h
            .value
            .as_deref()
            .map_or("(null)".into(), |v| String::from_utf8_lossy(v).into_owned());
        println!("    {}: {v}", h.key);
    }
    let v = l.record.value.as_deref().map_or("(null)".into(), |v| {
        String::from_utf8(v.to_vec()).unwrap_or_else(|_| {
            use base64::Engine as _;
            format!(
                "base64:{}",
                base64::engine::general_purpose::STANDARD.encode(v)
            )
        })
    });
    println!("  value:     {v}");
}

/// Runs `orderly dlq`.
pub async fn run(cmd: DlqCommand) -> Result<ExitCode> {
    match cmd {
        DlqCommand::Ls(a) => {
            let (letters, _) = load(&a).await?;
            print_table(&letters, a.json);
        }
        DlqCommand::Show(a) => {
            if !has_selection(&a) {
                bail!(
                    "choose letters: --session S, --source-partition P, --source-offsets FROM..TO or --all"
                );
            }
            let (letters, _) = load(&a).await?;
            for l in &letters {
                if a.json {
                    println!("{}", serde_json::to_string(l).unwrap_or_default());
                } else {
                    show(l);
                }
            }
        }
        DlqCommand::Replay {
            args: a,
            force,
            dry_run,
        } => {
            if !has_selection(&a) {
                bail!(
                    "choose letters: --session S, --source-partition P, --source-offsets FROM..TO or --all"
                );
            }
            let (mut letters, (pool, cluster)) = load(&a).await?;
            let before = letters.len();
            if !force {
                letters.retain(|l| !l.replayed);
                let skipped = before - letters.len();
                if skipped > 0 && letters.is_empty() {
                    bail!(
                        "all {skipped} chosen letters were replayed before; pass --force to replay them again"
                    );
                }
                if skipped > 0 {
                    eprintln!("skipping {skipped} letters replayed before (--force replays them)");
                }
            }
            // Source order: per source topic and partition, by offset.
            letters.sort_by(|x, y| {
                (&x.source_topic, x.source_partition, x.source_offset).cmp(&(
                    &y.source_topic,
                    y.source_partition,
                    y.source_offset,
                ))
            });
            if dry_run {
                print_table(&letters, a.json);
                return Ok(ExitCode::SUCCESS);
            }
            let mut by_topic: BTreeMap<String, Vec<&Letter>> = BTreeMap::new();
            for l in &letters {
                by_topic.entry(l.source_topic.clone()).or_default().push(l);
            }
            let mut total = 0;
            for (topic, ls) in &by_topic {
                let mut out = Batcher::new(pool.clone(), &cluster, topic).await?;
                for l in ls {
                    let mut headers: Vec<Header> = l
                        .record
                        .headers
                        .iter()
                        .filter(|h| !h.key.starts_with("orderly-dlq-"))
                        .cloned()
                        .collect();
                    headers.push(Header {
                        key: "orderly-replayed-from".into(),
                        value: Some(Bytes::from(format!(
                            "{}:{}:{}",
                            a.dlq_topic, l.dlq_partition, l.dlq_offset
                        ))),
                    });
                    let rec = ProduceRecord {
                        key: l.record.key.clone(),
                        value: l.record.value.clone(),
                        headers,
                        timestamp: None,
                    };
                    // The letter's source partition, so the records land where they came from
                    // (in order, one batch in flight per partition).
                    out.push_to(l.source_partition, rec).await?;
                }
                total += out.finish().await?;
            }
            // Only once every replayed record is acknowledged: the markers.
            let mut marks = Batcher::new(pool.clone(), &cluster, &a.dlq_topic).await?;
            for l in &letters {
                marks
                    .push_to(
                        l.dlq_partition,
                        ProduceRecord {
                            key: l.record.key.clone(),
                            value: None,
                            headers: vec![Header {
                                key: MARKER.into(),
                                value: Some(Bytes::from(format!(
                                    "{}:{}",
                                    l.dlq_partition, l.dlq_offset
                                ))),
                            }],
                            timestamp: None,
                        },
                    )
                    .await?;
            }
            marks.finish().await?;
            println!(
                "replayed {total} dead letters to {} (in source order) and marked them replayed in {}",
                by_topic.keys().cloned().collect::<Vec<_>>().join(","),
                a.dlq_topic
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
