//! `orderly produce`: records from stdin or a file (`lines`, `kv`, `jsonl`), or a generated session workload at a given rate.
//!
//! The producing is `orderly_consumer::tools::produce` (`Batcher`, `SessionWorkload`); this module
//! parses the input formats, paces the generator and prints progress.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use orderly_protocol::records::{ProduceRecord, WireHeader};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

use orderly_consumer::tools::produce::{Batcher, SessionWorkload};

use crate::kafka::KafkaArgs;

/// Input formats.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Format {
    /// One value per line, no key.
    Lines,
    /// `key<SEP>value` per line (--separator, default a tab).
    Kv,
    /// One JSON object per line: {"key": "...", "value": "...", "headers": {"name": "value"}}.
    Jsonl,
}

/// Arguments of `orderly produce`.
#[derive(clap::Args, Debug)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub(crate) kafka: KafkaArgs,
    /// Topic to write to (must exist).
    #[arg(long)]
    topic: String,
    /// Read this file instead of stdin.
    #[arg(long, value_name = "FILE", conflicts_with = "generate")]
    file: Option<PathBuf>,
    /// Input format.
    #[arg(long, value_enum, default_value_t = Format::Lines)]
    format: Format,
    /// Key/value separator of --format kv.
    #[arg(long, default_value = "\t")]
    separator: String,
    /// Generate records instead of reading them: key s-000042, headers event-id and seq (1, 2, 3
    /// per session), a 100-byte value; sessions round robin.
    #[arg(long)]
    generate: bool,
    /// Sessions of --generate.
    #[arg(long, default_value_t = 10, requires = "generate")]
    sessions: usize,
    /// Records of --generate.
    #[arg(long, default_value_t = 50_000, requires = "generate")]
    records: u64,
    /// Records per second of --generate (default: as fast as the broker takes them).
    #[arg(long, requires = "generate")]
    rate: Option<f64>,
    /// Prefix of the generated event ids (default: the start time, so runs do not collide).
    #[arg(long, requires = "generate")]
    event_prefix: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonRecord {
    key: Option<String>,
    value: Option<serde_json::Value>,
    #[serde(default)]
    headers: BTreeMap<String, Option<String>>,
}

fn parse_line(format: Format, sep: &str, line: &str, n: u64) -> Result<ProduceRecord> {
    let mut r = ProduceRecord::default();
    match format {
        Format::Lines => r.value = Some(Bytes::from(line.to_owned())),
        Format::Kv => {
            let (k, v) = line
                .split_once(sep)
                .with_context(|| format!("line {n}: no separator {sep:?} between key and value"))?;
            r.key = Some(Bytes::from(k.to_owned()));
            r.value = Some(Bytes::from(v.to_owned()));
        }
        Format::Jsonl => {
            let j: JsonRecord =
                serde_json::from_str(line).with_context(|| format!("line {n}: invalid record"))?;
            r.key = j.key.map(Bytes::from);
            r.value = match j.value {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(s)) => Some(Bytes::from(s)),
                Some(other) => Some(Bytes::from(other.to_string())),
            };
            r.headers = j
                .headers
                .into_iter()
                .map(|(key, v)| WireHeader {
                    key: key.into(),
                    value: v.map(Bytes::from),
                })
                .collect();
        }
    }
    Ok(r)
}

struct Progress {
    tty: bool,
    last: Instant,
}

impl Progress {
    fn new() -> Self {
        Self {
            tty: std::io::stderr().is_terminal(),
            last: Instant::now(),
        }
    }
    fn tick(&mut self, n: u64, total: Option<u64>) {
        if self.tty && self.last.elapsed() > Duration::from_millis(200) {
            self.last = Instant::now();
            match total {
                Some(t) if t > 0 => {
                    let w = 30usize;
                    let done = usize::try_from(n * w as u64 / t).unwrap_or(w).min(w);
                    eprint!("\r[{}{}] {n}/{t}", "#".repeat(done), " ".repeat(w - done));
                }
                _ => eprint!("\r{n} records"),
            }
        }
    }
    fn done(&self) {
        if self.tty {
            eprint!("\r\x1b[2K");
        }
    }
}

/// Runs `orderly produce`.
pub async fn run(a: ProduceArgs) -> Result<ExitCode> {
    let (pool, cluster) = a.kafka.connect(vec![a.topic.clone()]).await?;
    let mut out = Batcher::new(pool, &cluster, &a.topic).await?;
    let acks = a.generate.then(|| out.measure_acks());
    let t0 = Instant::now();
    let mut progress = Progress::new();
    if a.generate {
        anyhow::ensure!(a.sessions > 0, "--sessions must be at least 1");
        if let Some(r) = a.rate {
            anyhow::ensure!(r.is_finite() && r > 0.0, "--rate must be above 0");
        }
        let prefix = a.event_prefix.clone().unwrap_or_else(|| {
            let ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            format!("e{ms}")
        });
        let mut workload = SessionWorkload::new(a.sessions, prefix)?;
        // Paced in 5 ms slots: each slot releases the records due by then, stamped with the
        // time they are released (CreateTime), then flushes.
        let slot = Duration::from_millis(5);
        let mut i = 0u64;
        while i < a.records {
            let due = match a.rate {
                Some(r) => ((t0.elapsed().as_secs_f64() + slot.as_secs_f64()) * r) as u64,
                None => i + 1000,
            }
            .min(a.records);
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            while i < due {
                out.push(workload.next_record(now_ms)).await?;
                i += 1;
            }
            out.flush().await?;
            progress.tick(i, Some(a.records));
            if a.rate.is_some() {
                tokio::time::sleep(slot).await;
            }
        }
    } else {
        let input: Box<dyn AsyncRead + Unpin + Send> = match &a.file {
            Some(f) => Box::new(
                tokio::fs::File::open(f)
                    .await
                    .with_context(|| format!("cannot open {}", f.display()))?,
            ),
            None => Box::new(tokio::io::stdin()),
        };
        let mut lines = BufReader::new(input).lines();
        let mut n = 0u64;
        loop {
            // Flush when input pauses, so an interactive line is sent at once.
            let next = tokio::time::timeout(Duration::from_millis(20), lines.next_line()).await;
            let line = match next {
                Err(_) => {
                    out.flush().await?;
                    continue;
                }
                Ok(l) => l.context("reading input")?,
            };
            let Some(line) = line else { break };
            n += 1;
            if line.is_empty() && !matches!(a.format, Format::Lines) {
                continue;
            }
            out.push(parse_line(a.format, &a.separator, &line, n)?)
                .await?;
            progress.tick(n, None);
        }
    }
    let written = out.finish().await?;
    progress.done();
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "produced {written} records to {} in {secs:.2} s ({:.0} records/s, acks=all, idempotent)",
        a.topic,
        written as f64 / secs.max(1e-9)
    );
    if let Some(acks) = acks {
        println!("{}", ack_line(&acks.sorted_us()));
    }
    if written == 0 && a.generate {
        bail!("nothing produced");
    }
    Ok(ExitCode::SUCCESS)
}

/// The broker's share of a generated record's latency: CreateTime → acknowledged (acks=all),
/// percentiles over every record, in milliseconds.
fn ack_line(sorted_us: &[u64]) -> String {
    let q = |q: f64| {
        let i = ((sorted_us.len().saturating_sub(1)) as f64 * q).round() as usize;
        sorted_us.get(i).map_or(0.0, |&v| v as f64 / 1000.0)
    };
    format!(
        "CreateTime -> acknowledged (ms): p50 {:.1} p99 {:.1} max {:.1}",
        q(0.5),
        q(0.99),
        q(1.0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ack_line_gives_percentiles_in_milliseconds() {
        let us: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(
            ack_line(&us),
            "CreateTime -> acknowledged (ms): p50 51.0 p99 99.0 max 100.0"
        );
        assert_eq!(
            ack_line(&[]),
            "CreateTime -> acknowledged (ms): p50 0.0 p99 0.0 max 0.0"
        );
    }

    #[test]
    fn formats_parse_and_errors_name_the_line() {
        let r = parse_line(Format::Kv, "\t", "k1\tv1", 1).unwrap();
        assert_eq!(r.key.as_deref(), Some(&b"k1"[..]));
        assert_eq!(r.value.as_deref(), Some(&b"v1"[..]));
        let e = parse_line(Format::Kv, "\t", "novalue", 7)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 7"), "{e}");
        let r = parse_line(
            Format::Jsonl,
            "",
            r#"{"key":"s-1","value":"hi","headers":{"seq":"1"}}"#,
            1,
        )
        .unwrap();
        assert_eq!(r.headers[0].key, "seq");
        assert_eq!(r.value.as_deref(), Some(&b"hi"[..]));
        assert!(parse_line(Format::Jsonl, "", r#"{"kee":"x"}"#, 2).is_err());
    }
}
