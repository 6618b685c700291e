//! `cargo xtask demo`: the main job: a local broker, the seed workload produced live, `orderly consume` handing it to a real HTTP handler, one table.
//!
//! Live mode (default): start the local broker (or reuse it), create a topic and its dead-letter
//! topic, start the checking webhook as a service of its own (the release-built `orderly-webhook`
//! program, `orderly_testkit::webhook`: 10 % of records fail transiently on their first attempt,
//! 0.1 % permanently, order per session checked on its side), start `orderly consume --http` on it and wait until it holds the partitions, then
//! produce the seed workload at a fixed rate with `orderly produce --generate`. When every record
//! got a terminal answer, stop the consumer with SIGTERM (drain, commit, leave) and print records/s,
//! CreateTime → handler-done latency, violations, DLQ count and the lag after the run, beside the
//! seed's figures.
//!
//! Backlog mode (`--backlog`): the previous demo: write the records first with `orderly seed`,
//! then consume the backlog with `orderly run` (its latency is queueing time).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use orderly_testkit::webhook::{fetch_progress, fetch_report, quantile_ms};
use tokio::io::AsyncBufReadExt;

/// Demo parameters.
#[derive(Debug, Clone, Copy)]
pub struct DemoOptions {
    /// Records to produce and consume.
    pub records: usize,
    /// Sessions.
    pub sessions: usize,
    /// Partitions of the topic.
    pub partitions: i32,
    /// Production rate (live mode).
    pub rate: u64,
    /// The old backlog demo.
    pub backlog: bool,
}

/// What one live run measured.
struct Live {
    report: orderly_testkit::webhook::Report,
    dlq: usize,
    lag: i64,
    exit: Option<i32>,
    /// `orderly produce`'s CreateTime → acknowledged p50, p99 and max (ms): the broker's share.
    acked: Option<[f64; 3]>,
    rate: u64,
    batch_max: usize,
    records: usize,
}

impl Live {
    fn clean(&self) -> bool {
        self.report.violations == 0
            && self.lag == 0
            && self.exit == Some(0)
            && self.report.terminal() >= self.records as u64
    }
}

/// Records of the first seconds of production are start-up: the consumer has just joined, its
/// connections, sessions and the broker's caches are new. The table shows them apart.
const STARTUP: Duration = Duration::from_secs(1);

/// Batch size of the demo's second live run.
const BATCH: usize = 64;
/// Offered rate of the demo's second live run.
const BATCH_RATE: u64 = 50_000;

/// Records of the batched run: as many as it takes to offer `BATCH_RATE` for as long as the
/// first run offers its rate, so both have a steady window after [`STARTUP`].
fn batched_records(records: usize, rate: u64) -> usize {
    let secs = records as f64 / rate.max(1) as f64;
    (secs * BATCH_RATE as f64).round() as usize
}

/// The demo's table: a column per live run, beside the seed's backlog figures.
fn table(one: &Live, batched: &Live) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<46} {:>18} {:>18} {:>16}",
        "", "one per request", "batched", "seed (backlog)"
    );
    let mut row = |name: &str, f: &dyn Fn(&Live) -> String, seed: &str| {
        let _ = writeln!(
            out,
            "{name:<46} {:>18} {:>18} {seed:>16}",
            f(one),
            f(batched)
        );
    };
    let ms = |v: f64| format!("{v:.1}");
    let steady = |l: &Live| l.report.window(STARTUP, Duration::MAX);
    let startup = |l: &Live| l.report.window(Duration::ZERO, STARTUP);
    row("offered records/s", &|l| l.rate.to_string(), "-");
    row("--http-batch-max", &|l| l.batch_max.to_string(), "-");
    row(
        "records handled (terminal)",
        &|l| l.report.terminal().to_string(),
        "50000",
    );
    row(
        "records/s",
        &|l| {
            format!(
                "{:.0}",
                l.report.terminal() as f64 / l.report.span.as_secs_f64().max(1e-9)
            )
        },
        "14027",
    );
    let s = STARTUP.as_secs();
    row(
        &format!("steady (created after {s} s): records"),
        &|l| steady(l).len().to_string(),
        "-",
    );
    row(
        "  p50 CreateTime -> handler done (ms)",
        &|l| ms(quantile_ms(&steady(l), 0.50)),
        "11.7",
    );
    row("  p99 (ms)", &|l| ms(quantile_ms(&steady(l), 0.99)), "-");
    row("  p99.9 (ms)", &|l| ms(quantile_ms(&steady(l), 0.999)), "-");
    row(
        &format!("start-up (created in the first {s} s): records"),
        &|l| startup(l).len().to_string(),
        "-",
    );
    row("  p50 (ms)", &|l| ms(quantile_ms(&startup(l), 0.50)), "-");
    row("  p99 (ms)", &|l| ms(quantile_ms(&startup(l), 0.99)), "-");
    row("  max (ms)", &|l| ms(quantile_ms(&startup(l), 1.0)), "-");
    let acked = |l: &Live, i: usize| l.acked.map_or("-".into(), |a| ms(a[i]));
    row(
        "producer: CreateTime -> acknowledged p50 (ms)",
        &|l| acked(l, 0),
        "-",
    );
    row("  p99 (ms)", &|l| acked(l, 1), "-");
    row("  max (ms)", &|l| acked(l, 2), "-");
    row(
        "order violations (checked by the handler)",
        &|l| l.report.violations.to_string(),
        "0",
    );
    row(
        "redeliveries seen",
        &|l| l.report.duplicates.to_string(),
        "-",
    );
    row(
        "transient failures answered (503)",
        &|l| l.report.transient.to_string(),
        "-",
    );
    row("dead letters in the DLQ topic", &|l| l.dlq.to_string(), "-");
    row("lag after the run", &|l| l.lag.to_string(), "-");
    row(
        "orderly consume exit",
        &|l| l.exit.map_or("signal".into(), |c| c.to_string()),
        "-",
    );
    let _ = writeln!(
        out,
        "(live: records/s is bounded by the rate `orderly produce --generate` offers; latency is \
         split by the record's CreateTime: the first {s} s of production are start-up, the rest \
         steady; seed: the issue's reference figures for the backlog run)"
    );
    out
}

/// Runs the demo.
pub async fn run(o: DemoOptions) -> Result<()> {
    let broker = crate::kafka::start(None, "1g")?;
    let bs = broker.bootstrap.clone();
    eprintln!("==> building orderly and orderly-webhook (release)");
    let (bin, webhook) = build_release()?;
    if o.backlog {
        let (topic, dlq, group) = topics(&bs, o.partitions, "backlog").await?;
        return backlog(&bin, &bs, &topic, &dlq, &group, o);
    }
    // A fresh broker's JVM runs its produce and fetch paths unoptimised for the first seconds
    // (the producer's own CreateTime -> acknowledged then takes hundreds of ms); a deployed
    // broker is warm. A short run first, not reported, warms it.
    let warm = usize::try_from(o.rate).unwrap_or(usize::MAX).min(o.records);
    eprintln!("==> warm-up run ({warm} records, not reported)");
    live(&bin, &webhook, &bs, o, o.rate, 1, warm).await?;
    let one = live(&bin, &webhook, &bs, o, o.rate, 1, o.records).await?;
    let batched = live(
        &bin,
        &webhook,
        &bs,
        o,
        BATCH_RATE,
        BATCH,
        batched_records(o.records, o.rate),
    )
    .await?;
    print!("{}", table(&one, &batched));
    eprintln!("==> the broker keeps running ({bs}); stop it with: cargo xtask kafka stop");
    if !one.clean() || !batched.clean() {
        bail!("the demo run was not clean (see the table)");
    }
    Ok(())
}

/// The p50, p99 and max of `orderly produce --generate`'s line
/// `CreateTime -> acknowledged (ms): p50 A p99 B max C`.
fn ack_percentiles(out: &str) -> Option<[f64; 3]> {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("CreateTime -> acknowledged (ms):"))?;
    let mut v = [0.0; 3];
    let mut words = line.split_whitespace();
    for (slot, name) in v.iter_mut().zip(["p50", "p99", "max"]) {
        if words.next()? != name {
            return None;
        }
        *slot = words.next()?.parse().ok()?;
    }
    Some(v)
}

/// A fresh topic, its dead-letter topic and a group name.
async fn topics(bs: &str, partitions: i32, tag: &str) -> Result<(String, String, String)> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let topic = format!("orderly-demo-{tag}-{stamp}");
    let dlq = format!("{topic}.dlq");
    let group = format!("{topic}-group");
    orderly_testkit::create_topic(bs, &topic, partitions).await?;
    orderly_testkit::create_topic(bs, &dlq, 3).await?;
    eprintln!("==> topic {topic} ({partitions} partitions), dead-letter topic {dlq}");
    Ok((topic, dlq, group))
}

/// One live run: the checking webhook, `orderly consume --http` on it (with `batch_max`
/// records per request at most), `orderly produce --generate` at `rate`, SIGTERM at the end.
async fn live(
    bin: &std::path::Path,
    webhook: &std::path::Path,
    bs: &str,
    o: DemoOptions,
    rate: u64,
    batch_max: usize,
    records: usize,
) -> Result<Live> {
    let (topic, dlq, group) = topics(bs, o.partitions, &format!("b{batch_max}")).await?;
    let hook = Hook::start(webhook).await?;
    let admin = free_port()?;
    let logs = log_dir()?;
    let (consume_log, produce_log) = (
        logs.join(format!("{topic}.consume.log")),
        logs.join(format!("{topic}.produce.log")),
    );
    eprintln!(
        "==> orderly consume --http {} --http-batch-max {batch_max} (group {group}; the handler fails 10 % of records once, 0.1 % for good)",
        hook.url()
    );
    eprintln!(
        "    logs: {} and {}",
        consume_log.display(),
        produce_log.display()
    );
    let mut consume = Command::new(bin)
        .args([
            "consume",
            "--bootstrap",
            bs,
            "--group",
            &group,
            "--topic",
            &topic,
        ])
        .args(["--dlq-topic", &dlq, "--http", &hook.url()])
        .args(["--http-batch-max", &batch_max.to_string()])
        .args([
            "--retry-base",
            "1ms",
            "--retry-cap",
            "100ms",
            "--retry-max-attempts",
            "0",
        ])
        .args(["--heartbeat-interval", "1s", "--session-timeout", "10s"])
        .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
        .env("RUST_LOG", "info")
        .stderr(std::fs::File::create(&consume_log).context("creating the consumer's log")?)
        .spawn()
        .context("starting orderly consume")?;
    let ready = wait_ready(admin, Duration::from_secs(60)).await;
    if let Err(e) = ready {
        let _ = consume.kill();
        return Err(e.context(log_tail(&consume_log)));
    }
    eprintln!(
        "==> orderly produce --generate: {records} records, {} sessions, {rate} records/s, live",
        o.sessions
    );
    let produced = Command::new(bin)
        .args([
            "produce",
            "--bootstrap",
            bs,
            "--topic",
            &topic,
            "--generate",
        ])
        .args(["--sessions", &o.sessions.to_string()])
        .args(["--records", &records.to_string()])
        .args(["--rate", &rate.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running orderly produce")?;
    // The producer runs beside the progress line; its output goes to its log.
    let produced = tokio::task::spawn_blocking(move || produced.wait_with_output());
    let started = Instant::now();
    let deadline = started + Duration::from_secs(300);
    let mut progress = ProgressLine::new(records);
    let mut produced = Some(produced);
    let mut acked = None;
    loop {
        if let Some(p) = produced.as_mut().filter(|p| p.is_finished()) {
            let out = p
                .await
                .context("waiting for orderly produce")?
                .context("running orderly produce")?;
            produced = None;
            let said = String::from_utf8_lossy(&out.stdout);
            let mut log = said.clone().into_owned();
            log.push_str(&String::from_utf8_lossy(&out.stderr));
            std::fs::write(&produce_log, log).context("writing the producer's log")?;
            if !out.status.success() {
                progress.end();
                let _ = consume.kill();
                bail!(
                    "orderly produce failed ({}){}",
                    out.status,
                    log_tail(&produce_log)
                );
            }
            acked = ack_percentiles(&said);
        }
        let now = hook.progress().await?;
        progress.show(&now, started.elapsed());
        if produced.is_none() && now.terminal >= records as u64 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    progress.end();
    let _ = Command::new("kill")
        .args(["-TERM", &consume.id().to_string()])
        .status();
    let exit = consume.wait().context("waiting for orderly consume")?;
    if exit.code() != Some(0) {
        eprintln!(
            "==> orderly consume exited with {exit}{}",
            log_tail(&consume_log)
        );
    }
    Ok(Live {
        report: hook.report().await?,
        dlq: count_dlq(bin, bs, &dlq)?,
        lag: total_lag(bin, bs, &group)?,
        exit: exit.code(),
        acked,
        rate,
        batch_max,
        records,
    })
}

fn backlog(
    bin: &std::path::Path,
    bs: &str,
    topic: &str,
    dlq: &str,
    group: &str,
    o: DemoOptions,
) -> Result<()> {
    eprintln!(
        "==> writing {} records for {} sessions (backlog)",
        o.records, o.sessions
    );
    run_bin(
        bin,
        &[
            "seed",
            "--bootstrap",
            bs,
            "--topic",
            topic,
            "--records",
            &o.records.to_string(),
            "--sessions",
            &o.sessions.to_string(),
        ],
    )?;
    eprintln!("==> orderly run: group {group}, 10 % transient failures, 0.1 % permanent failures");
    run_bin(
        bin,
        &[
            "run",
            "--bootstrap",
            bs,
            "--group",
            group,
            "--topic",
            topic,
            "--dlq-topic",
            dlq,
            "--records",
            &o.records.to_string(),
            "--transient-pct",
            "10",
            "--permanent",
        ],
    )?;
    eprintln!(
        "==> committed offsets, as Apache Kafka's consumer-groups tool sees them (LAG 0 = nothing left)"
    );
    crate::kafka::tool(
        "consumer-groups",
        &[
            "--bootstrap-server".into(),
            bs.to_owned(),
            "--describe".into(),
            "--group".into(),
            group.to_owned(),
        ],
    )?;
    eprintln!("==> the broker keeps running ({bs}); stop it with: cargo xtask kafka stop");
    Ok(())
}

/// The demo's HTTP service: `orderly-webhook` running as a process of its own; killed when
/// dropped.
struct Hook {
    child: tokio::process::Child,
    url: String,
    addr: String,
}

impl Hook {
    async fn start(program: &std::path::Path) -> Result<Self> {
        let mut child = tokio::process::Command::new(program)
            .args(["--transient-pct", "10"])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting orderly-webhook")?;
        let stdout = child
            .stdout
            .take()
            .context("orderly-webhook has no stdout")?;
        let mut line = String::new();
        tokio::io::BufReader::new(stdout)
            .read_line(&mut line)
            .await
            .context("reading orderly-webhook's address")?;
        let url = line.trim().to_owned();
        let addr = url
            .strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .with_context(|| format!("orderly-webhook printed {url:?}, not its URL"))?
            .to_owned();
        Ok(Self { child, url, addr })
    }

    fn url(&self) -> String {
        self.url.clone()
    }

    async fn progress(&self) -> Result<orderly_testkit::webhook::Progress> {
        fetch_progress(&self.addr)
            .await
            .context("reading the webhook's progress")
    }

    async fn report(&self) -> Result<orderly_testkit::webhook::Report> {
        fetch_report(&self.addr)
            .await
            .context("reading the webhook's report")
    }
}

impl Drop for Hook {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Builds the release binaries `orderly` and `orderly-webhook` and returns their paths.
fn build_release() -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(crate::root())
        .args([
            "build",
            "--quiet",
            "--release",
            "--package",
            "orderly-cli",
            "--bin",
            "orderly",
            "--package",
            "orderly-testkit",
            "--bin",
            "orderly-webhook",
        ])
        .status()
        .context("building orderly")?;
    if !status.success() {
        bail!("building orderly failed ({status})");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| crate::root().join("target"), std::path::PathBuf::from);
    let release = target.join("release");
    Ok((release.join("orderly"), release.join("orderly-webhook")))
}

/// Where the demo's processes log: `<target>/demo`.
fn log_dir() -> Result<std::path::PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| crate::root().join("target"), std::path::PathBuf::from);
    let dir = target.join("demo");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The last lines of the log at `path`, to print beside a failure.
fn log_tail(path: &std::path::Path) -> String {
    const LINES: usize = 20;
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(LINES)..].join("\n");
    format!("\n--- the last lines of {} ---\n{tail}", path.display())
}

/// One progress line per run: rewritten in place on a terminal, printed once at the end
/// otherwise.
struct ProgressLine {
    records: usize,
    terminal: bool,
    last: String,
}

impl ProgressLine {
    fn new(records: usize) -> Self {
        use std::io::IsTerminal;
        Self {
            records,
            terminal: std::io::stderr().is_terminal(),
            last: String::new(),
        }
    }

    fn show(&mut self, p: &orderly_testkit::webhook::Progress, elapsed: Duration) {
        self.last = format!(
            "    {}/{} records handled, {:.0}/s, p50 {:.1} ms (last {} records), {} for the DLQ",
            p.terminal,
            self.records,
            p.terminal as f64 / elapsed.as_secs_f64().max(1e-9),
            p.recent_p50_ms,
            orderly_testkit::webhook::PROGRESS_WINDOW
                .min(usize::try_from(p.terminal).unwrap_or(usize::MAX)),
            p.permanent
        );
        if self.terminal {
            eprint!("\r\x1b[2K{}", self.last);
        }
    }

    fn end(&mut self) {
        if self.terminal {
            eprintln!();
        } else if !self.last.is_empty() {
            eprintln!("{}", self.last);
        }
        self.last.clear();
    }
}

fn run_bin(bin: &std::path::Path, args: &[&str]) -> Result<()> {
    let status = Command::new(bin)
        .args(args)
        .status()
        .context("running orderly")?;
    if !status.success() {
        bail!(
            "orderly {} failed ({status})",
            args.first().copied().unwrap_or_default()
        );
    }
    Ok(())
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Polls `/readyz` until it answers 200 (the consumer holds its partitions).
async fn wait_ready(port: u16, patience: Duration) -> Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = Instant::now() + patience;
    loop {
        if let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            let _ = s
                .write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                .await;
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf).await;
            if buf.starts_with(b"HTTP/1.1 200") {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("orderly consume did not become ready within {patience:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn output(bin: &std::path::Path, args: &[&str]) -> Result<String> {
    let out = Command::new(bin)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .context("running orderly")?;
    if !out.status.success() {
        bail!("orderly {} failed ({})", args.join(" "), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn count_dlq(bin: &std::path::Path, bs: &str, dlq: &str) -> Result<usize> {
    let out = output(
        bin,
        &["dlq", "ls", "--bootstrap", bs, "--dlq-topic", dlq, "--json"],
    )?;
    Ok(out.lines().filter(|l| l.starts_with('{')).count())
}

fn total_lag(bin: &std::path::Path, bs: &str, group: &str) -> Result<i64> {
    let out = output(
        bin,
        &["status", "--bootstrap", bs, "--group", group, "--json"],
    )?;
    let v: serde_json::Value = serde_json::from_str(&out).context("reading orderly status")?;
    v.get("total_lag")
        .and_then(serde_json::Value::as_i64)
        .context("orderly status printed no total_lag")
}

#[cfg(test)]
mod tests {
    use super::*;
    use orderly_testkit::webhook::{Report, Sample};

    fn live(samples: Vec<Sample>) -> Live {
        let mut latencies: Vec<u64> = samples.iter().map(Sample::latency_us).collect();
        latencies.sort_unstable();
        Live {
            report: Report {
                done: samples.len() as u64,
                latencies_us: latencies,
                samples,
                span: Duration::from_secs(2),
                ..Report::default()
            },
            dlq: 0,
            lag: 0,
            exit: Some(0),
            acked: Some([1.0, 2.5, 9.0]),
            rate: 10_000,
            batch_max: 1,
            records: 4,
        }
    }

    #[test]
    fn demo_batched_run_offers_its_rate_as_long_as_the_first() {
        assert_eq!(batched_records(50_000, 10_000), 250_000);
        assert_eq!(batched_records(10_000, 50_000), 10_000);
    }

    #[test]
    fn demo_reads_the_producers_ack_line() {
        let out = "produced 5 records to t in 1.00 s (5 records/s, acks=all, idempotent)\n\
                   CreateTime -> acknowledged (ms): p50 1.2 p99 7.5 max 30.0\n";
        assert_eq!(ack_percentiles(out), Some([1.2, 7.5, 30.0]));
        assert_eq!(ack_percentiles("produced 5 records"), None);
        assert_eq!(
            ack_percentiles("CreateTime -> acknowledged (ms): p50 1.2 max 3"),
            None
        );
    }

    #[test]
    fn demo_table_shows_start_up_apart_from_the_steady_window() {
        // Two records in the first second (200 and 100 ms), two after it (3 and 5 ms).
        let t0 = 1_700_000_000_000i64;
        let at = |created_ms: i64, latency_ms: i64| Sample {
            created_ms,
            done_us: (created_ms + latency_ms) * 1000,
        };
        let one = live(vec![
            at(t0, 200),
            at(t0 + 10, 100),
            at(t0 + 1_500, 3),
            at(t0 + 1_600, 5),
        ]);
        let batched = live(vec![at(t0, 1)]);
        let table = table(&one, &batched);
        let row = |name: &str| {
            table
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("no row {name:?} in\n{table}"))
                .split_whitespace()
                .rev()
                .nth(2)
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(row("steady (created after 1 s): records"), "2");
        assert_eq!(row("  p50 CreateTime -> handler done (ms)"), "5.0");
        assert_eq!(row("start-up (created in the first 1 s): records"), "2");
        assert_eq!(row("  max (ms)"), "200.0");
        assert_eq!(row("producer: CreateTime -> acknowledged p50 (ms)"), "1.0");
        assert!(one.clean());
    }
}
