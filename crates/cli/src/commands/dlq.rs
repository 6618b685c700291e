//! `orderly dlq ls|show|replay`: read the dead-letter topic and re-produce chosen records to their source topic in their original order.
//!
//! The DLQ record format, the replay order and the replay markers are documented (and implemented)
//! in `orderly_consumer::tools::dlq`; this module parses the selection flags and prints.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use orderly_consumer::tools::dlq::{
    DeadLetterRecord as Letter, LetterFilter, read_dead_letters, replay, sort_for_replay,
};

use crate::kafka::KafkaArgs;

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

async fn load(a: &DlqArgs) -> Result<(Vec<Letter>, crate::kafka::Connected)> {
    let filter = LetterFilter {
        session: a.session.clone(),
        source_partition: a.source_partition,
        source_offsets: a
            .source_offsets
            .as_deref()
            .map(LetterFilter::parse_offsets)
            .transpose()
            .context("--source-offsets")?,
    };
    let (pool, cluster) = a.kafka.connect(vec![a.dlq_topic.clone()]).await?;
    let letters = read_dead_letters(&pool, &cluster, &a.dlq_topic, &filter)
        .await
        .with_context(|| format!("reading {}", a.dlq_topic))?;
    Ok((letters, (pool, cluster)))
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
            let replayed_before = letters.iter().filter(|l| l.replayed).count();
            if !force && replayed_before > 0 {
                if replayed_before == before {
                    bail!(
                        "all {before} chosen letters were replayed before; pass --force to replay them again"
                    );
                }
                eprintln!(
                    "skipping {replayed_before} letters replayed before (--force replays them)"
                );
            }
            if dry_run {
                if !force {
                    letters.retain(|l| !l.replayed);
                }
                sort_for_replay(&mut letters);
                print_table(&letters, a.json);
                return Ok(ExitCode::SUCCESS);
            }
            let done = replay(&pool, &cluster, &a.dlq_topic, letters, force).await?;
            println!(
                "replayed {} dead letters to {} (in source order) and marked them replayed in {}",
                done.replayed,
                done.topics.join(","),
                a.dlq_topic
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
