//! `orderly dlq ls|show|replay`: read the dead-letter topic and re-produce chosen records to their source topic in their original order.
//!
//! The DLQ record format, the replay order, the replay markers and the release of a parked
//! session are documented (and implemented) in `orderly_consumer::tools::dlq`; this module parses
//! the selection flags and prints.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use orderly_consumer::tools::dlq::{
    DeadLetterRecord as Letter, LetterFilter, ReplayOptions, RoundResult, for_each_dead_letter,
    replay, replay_parked_session, wait_for_round,
};
use orderly_engine::TopicPartition;

use crate::kafka::KafkaArgs;

/// `orderly dlq` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum DlqCommand {
    /// List dead letters: where each came from, why, how often it was tried.
    Ls(DlqArgs),
    /// Show chosen dead letters in full (headers, value).
    Show(DlqArgs),
    /// Re-produce chosen dead letters to their source topic, in source order, and mark them
    /// replayed. Replay to the source topic reaches every consumer group of that topic.
    Replay {
        #[command(flatten)]
        args: DlqArgs,
        /// Replay letters that were replayed before.
        #[arg(long)]
        force: bool,
        /// Print what would be replayed, produce nothing.
        #[arg(long)]
        dry_run: bool,
        /// Write to this topic instead of the source topic (same partition number as the source
        /// partition), so only the consumers of that topic see the records.
        #[arg(long, value_name = "TOPIC", conflicts_with = "release")]
        to_topic: Option<String>,
        /// Release a parked session in order: replay its dead letters as one replay round; the
        /// consumer releases it once it handled them. Needs --session, --source-topic and
        /// --source-partition.
        #[arg(long)]
        release: bool,
        /// The parked-session store topic (default: `<dlq topic>.parked`).
        #[arg(long, value_name = "TOPIC")]
        parked_topic: Option<String>,
        /// With --release: wait up to this many seconds for the consumer to finish the round.
        #[arg(long, value_name = "SECONDS", default_value_t = 0)]
        wait: u64,
    },
}

impl DlqCommand {
    /// The brokers and connection flags of this subcommand.
    pub fn kafka_mut(&mut self) -> &mut KafkaArgs {
        match self {
            DlqCommand::Ls(a) | DlqCommand::Show(a) | DlqCommand::Replay { args: a, .. } => {
                &mut a.kafka
            }
        }
    }
}

/// Which dead letters.
#[derive(clap::Args, Debug)]
pub struct DlqArgs {
    #[command(flatten)]
    pub(crate) kafka: KafkaArgs,
    /// The dead-letter topic.
    #[arg(long, env = "ORDERLY_DLQ_TOPIC")]
    dlq_topic: String,
    /// Only letters of this session (record key).
    #[arg(long)]
    session: Option<String>,
    /// Only letters from this source topic.
    #[arg(long)]
    source_topic: Option<String>,
    /// Only letters from this source partition (of every topic unless --source-topic).
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

fn filter(a: &DlqArgs) -> Result<LetterFilter> {
    Ok(LetterFilter {
        session: a.session.clone(),
        source_topic: a.source_topic.clone(),
        source_partition: a.source_partition,
        source_offsets: a
            .source_offsets
            .as_deref()
            .map(LetterFilter::parse_offsets)
            .transpose()
            .context("--source-offsets")?,
    })
}

fn has_selection(a: &DlqArgs) -> bool {
    a.all
        || a.session.is_some()
        || a.source_topic.is_some()
        || a.source_partition.is_some()
        || a.source_offsets.is_some()
}

const TABLE_HEADER: &str = "DLQ          SOURCE                       SESSION        REASON             ATTEMPTS REPLAYED ERROR";

fn print_row(l: &Letter, json: bool) {
    if json {
        println!("{}", serde_json::to_string(l).unwrap_or_default());
        return;
    }
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

const CHOOSE: &str = "choose letters: --session S, --source-topic T, --source-partition P, --source-offsets FROM..TO or --all";

/// Runs `orderly dlq`.
pub async fn run(cmd: DlqCommand) -> Result<ExitCode> {
    match cmd {
        DlqCommand::Ls(a) => {
            let f = filter(&a)?;
            let (pool, cluster) = a.kafka.connect(vec![a.dlq_topic.clone()]).await?;
            if !a.json {
                println!("{TABLE_HEADER}");
            }
            let mut n = 0u64;
            for_each_dead_letter(&pool, &cluster, &a.dlq_topic, &f, |l| {
                n += 1;
                print_row(&l, a.json);
            })
            .await
            .with_context(|| format!("reading {}", a.dlq_topic))?;
            if !a.json {
                println!("{n} dead letters");
            }
        }
        DlqCommand::Show(a) => {
            if !has_selection(&a) {
                bail!(CHOOSE);
            }
            let f = filter(&a)?;
            let (pool, cluster) = a.kafka.connect(vec![a.dlq_topic.clone()]).await?;
            for_each_dead_letter(&pool, &cluster, &a.dlq_topic, &f, |l| {
                if a.json {
                    println!("{}", serde_json::to_string(&l).unwrap_or_default());
                } else {
                    show(&l);
                }
            })
            .await
            .with_context(|| format!("reading {}", a.dlq_topic))?;
        }
        DlqCommand::Replay {
            args: a,
            force,
            dry_run,
            to_topic,
            release,
            parked_topic,
            wait,
        } => {
            if release {
                return release_session(&a, parked_topic, wait).await;
            }
            if !has_selection(&a) {
                bail!(CHOOSE);
            }
            let f = filter(&a)?;
            let (pool, cluster) = a.kafka.connect(vec![a.dlq_topic.clone()]).await?;
            if dry_run && !a.json {
                println!("{TABLE_HEADER}");
            }
            let opts = ReplayOptions {
                force,
                to_topic,
                dry_run,
            };
            let done = replay(&pool, &cluster, &a.dlq_topic, &f, &opts, |l| {
                if dry_run {
                    print_row(l, a.json);
                }
            })
            .await
            .with_context(|| format!("replaying {}", a.dlq_topic))?;
            if done.skipped_replayed_before > 0 {
                eprintln!(
                    "skipped {} letters replayed before (--force replays them)",
                    done.skipped_replayed_before
                );
            }
            if done.skipped_duplicates > 0 {
                eprintln!(
                    "skipped {} letters of source records dead-lettered more than once (each record is replayed once)",
                    done.skipped_duplicates
                );
            }
            if dry_run {
                println!("{} dead letters would be replayed", done.replayed);
            } else if done.replayed == 0 && done.skipped_replayed_before > 0 {
                bail!(
                    "all {} chosen letters were replayed before; pass --force to replay them again",
                    done.skipped_replayed_before
                );
            } else {
                println!(
                    "replayed {} dead letters to {} (in source order) and marked them replayed in {}",
                    done.replayed,
                    done.topics.join(","),
                    a.dlq_topic
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn release_session(a: &DlqArgs, parked_topic: Option<String>, wait: u64) -> Result<ExitCode> {
    let (Some(session), Some(topic), Some(partition)) =
        (&a.session, &a.source_topic, a.source_partition)
    else {
        bail!("--release needs --session, --source-topic and --source-partition");
    };
    let parked_topic = parked_topic.unwrap_or_else(|| format!("{}.parked", a.dlq_topic));
    let (pool, cluster) = a
        .kafka
        .connect(vec![
            a.dlq_topic.clone(),
            parked_topic.clone(),
            topic.clone(),
        ])
        .await?;
    let tp = TopicPartition::new(topic.as_str(), partition);
    let round = replay_parked_session(&pool, &cluster, &a.dlq_topic, &parked_topic, &tp, session)
        .await
        .with_context(|| format!("releasing session {session:?} of {tp}"))?;
    println!(
        "replayed {} dead letters of session {session:?} to {tp} as replay round {} (origins {}..={})",
        round.origins.len(),
        round.round,
        round.origins.first().copied().unwrap_or(-1),
        round.origins.last().copied().unwrap_or(-1),
    );
    if wait == 0 {
        println!("the consumer releases the session once it has handled the round");
        return Ok(ExitCode::SUCCESS);
    }
    match wait_for_round(
        &pool,
        &cluster,
        &parked_topic,
        &round,
        Duration::from_secs(wait),
    )
    .await?
    {
        RoundResult::Released => println!("released"),
        RoundResult::ParkedBehind(since) => bail!(
            "the round was handled, but records of the session arrived behind it: still parked from offset {since}; run the release again"
        ),
        RoundResult::Failed(since) => {
            bail!("a replayed record was dead-lettered again: still parked from offset {since}")
        }
        RoundResult::Pending => bail!(
            "no consumer finished the round within {wait} s; the session is released once one does"
        ),
    }
    Ok(ExitCode::SUCCESS)
}
