//! The one HTTP endpoint of the benchmark's HTTP scenarios (S1-http, S1k-http, S2-http): every
//! system (`orderly consume --http`, the Go peer, Parallel Consumer's Vert.x module) posts the
//! records it consumes here, and this server, not the system, judges the run.
//!
//! Run by the harness: `bench-http-server --log FILE --report FILE --records N [--transient-pct 10]
//! [--threads 1] [--system NAME]`. It prints `LISTEN <url>` on stdout once it accepts
//! connections and `DONE` once `N` distinct records were answered done; on SIGTERM or SIGINT it
//! writes the `#` line of the log and the JSON report, then exits.
//!
//! # What it accepts
//!
//! - One record per request, the `orderly consume --http` contract: headers `orderly-session`,
//!   `orderly-timestamp` (CreateTime, ms), `kafka-h-event-id`, `kafka-h-seq`; the body is the value.
//! - A JSON body (`--http-body json`): one envelope (`topic`, `partition`, `offset`, `timestamp`,
//!   `session`, `headers: [{name, value}]`), or an array of them: a batch, which must hold records
//!   of one session, consecutive in sequence.
//!
//! # How it answers
//!
//! A record fails transiently on its first attempt when `fnv1a64(event-id) % 100 < pct` (the rule
//! of `orderly_testkit::webhook`), decided here: the first request that reaches such a record is
//! answered 503 for it, every later one as done. A request whose records are all done (now or
//! before) gets 200 with no body. In a batch, records are taken in order up to the first one that
//! fails: the answer is 503 if that is the first record, otherwise 200 with `{"done": N}`, N the
//! records before it (done); the records after it were not looked at and are not counted as
//! attempted.
//!
//! # What it checks and writes
//!
//! - Order, from its side: a request of a session arriving while another request of the same
//!   session is being answered is a violation; a record answered done whose `seq` is not the
//!   session's last done `seq` + 1 is a violation (at or below it: a duplicate).
//! - Each record answered done for the first time is a line of the shared handler log
//!   (`orderly_benches::verify`): session, seq, event id, the attempt that succeeded (counted
//!   here: 1 + the answers it got before), CreateTime and the time of the answer. So the shared
//!   verifier checks loss, duplicates, order and the failure injection of every system alike.
//! - Latency of a record = time of its done answer − its CreateTime.
//! - The JSON report: requests, records answered done, transient answers, violations (in flight
//!   and out of sequence), duplicates, records per request, latency percentiles, first request
//!   and the moment the last distinct record was done.

// A benchmark program reports on stdout and stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{Context as _, Result};
use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use orderly_benches::verify::{LogHeader, LogWriter, now_us, percentile};
use orderly_benches::workload;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

#[derive(Parser)]
#[command(about = "The shared HTTP endpoint of the benchmark's HTTP scenarios")]
struct Args {
    /// Handler log (the shared format of `orderly_benches::verify`).
    #[arg(long)]
    log: PathBuf,
    /// JSON report, written on SIGTERM/SIGINT.
    #[arg(long)]
    report: PathBuf,
    /// Records expected: `DONE` is printed once this many distinct records were answered done.
    #[arg(long)]
    records: u64,
    /// Percentage of records answered 503 on their first attempt.
    #[arg(long, default_value_t = 10)]
    transient_pct: u64,
    /// Threads of the server's runtime (1: a current-thread runtime).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// The system named in the log's `#` line.
    #[arg(long, default_value = "http")]
    system: String,
    /// Port on 127.0.0.1 (0: any free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
}

/// One record of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    session: String,
    seq: u64,
    event: String,
    create_ms: i64,
}

/// The part of an `--http-body json` envelope this server reads.
#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    timestamp: i64,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    headers: Vec<EnvelopeHeader>,
}

#[derive(Deserialize)]
struct EnvelopeHeader {
    name: String,
    #[serde(default)]
    value: Option<String>,
}

impl Envelope {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.name == name)
            .and_then(|h| h.value.as_deref())
    }

    fn rec(&self, session: Option<&str>) -> Rec {
        Rec {
            session: self
                .session
                .as_deref()
                .or(session)
                .unwrap_or_default()
                .to_owned(),
            seq: self.header("seq").and_then(|v| v.parse().ok()).unwrap_or(0),
            event: self.header("event-id").unwrap_or_default().to_owned(),
            create_ms: self.timestamp,
        }
    }
}

/// The records of one request: from the headers (one record, raw body), or from a JSON body (one
/// envelope or an array of them). `None` when neither gives a record.
fn records_of(headers: &hyper::HeaderMap, body: &[u8]) -> Option<Vec<Rec>> {
    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let session = h("orderly-session");
    if let Some(event) = h("kafka-h-event-id") {
        return Some(vec![Rec {
            session: session.unwrap_or_default().to_owned(),
            seq: h("kafka-h-seq").and_then(|v| v.parse().ok()).unwrap_or(0),
            event: event.to_owned(),
            create_ms: h("orderly-timestamp")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
        }]);
    }
    let first = body.iter().find(|b| !b.is_ascii_whitespace())?;
    match first {
        b'[' => {
            let all: Vec<Envelope> = serde_json::from_slice(body).ok()?;
            Some(all.iter().map(|e| e.rec(session)).collect())
        }
        b'{' => {
            let one: Envelope = serde_json::from_slice(body).ok()?;
            Some(vec![one.rec(session)])
        }
        _ => None,
    }
}

#[derive(Default)]
struct Session {
    in_flight: bool,
    last_seq: u64,
}

/// Per event id: answers given so far (done or failed), and whether it was answered done.
#[derive(Default, Clone, Copy)]
struct Seen {
    answers: u32,
    done: bool,
}

#[derive(Default)]
struct State {
    sessions: HashMap<String, Session>,
    seen: HashMap<String, Seen>,
    requests: u64,
    /// Requests carrying more than one record.
    batches: u64,
    /// Records in all requests (a record sent again counts again).
    records_sent: u64,
    /// Distinct records answered done.
    done: u64,
    transient: u64,
    violations_in_flight: u64,
    violations_sequence: u64,
    /// Requests whose records are not of one session, consecutive.
    violations_batch: u64,
    duplicates: u64,
    unreadable: u64,
    latencies_us: Vec<i64>,
    first_us: i64,
    done_at_us: i64,
}

/// The JSON report.
#[derive(Serialize, Deserialize, Debug, Default)]
struct Report {
    requests: u64,
    batches: u64,
    records_sent: u64,
    done: u64,
    transient: u64,
    violations_in_flight: u64,
    violations_sequence: u64,
    violations_batch: u64,
    duplicates: u64,
    unreadable: u64,
    first_us: i64,
    done_at_us: i64,
    latency_p50_ms: f64,
    latency_p99_ms: f64,
    latency_p999_ms: f64,
    latency_max_ms: f64,
}

struct Server {
    state: Mutex<State>,
    log: LogWriter,
    records: u64,
    transient_pct: u64,
    done_tx: tokio::sync::watch::Sender<bool>,
}

impl Server {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fails_first(&self, event: &str) -> bool {
        workload::fails_first_attempt_pct(event.as_bytes(), self.transient_pct)
    }

    /// Marks `session` in flight; counts a violation when it already was.
    fn enter(&self, session: &str) {
        let mut s = self.lock();
        let e = s.sessions.entry(session.to_owned()).or_default();
        let overlap = e.in_flight;
        e.in_flight = true;
        if overlap {
            s.violations_in_flight += 1;
        }
    }

    fn leave(&self, session: &str) {
        if let Some(e) = self.lock().sessions.get_mut(session) {
            e.in_flight = false;
        }
    }

    /// Answers the records of one request (see the module docs).
    fn answer(&self, recs: &[Rec]) -> (StatusCode, Option<usize>) {
        let now = now_us();
        let mut s = self.lock();
        s.records_sent += recs.len() as u64;
        if recs.len() > 1 {
            s.batches += 1;
            let one_session = recs.iter().all(|r| r.session == recs[0].session);
            let consecutive = recs.windows(2).all(|w| w[1].seq == w[0].seq + 1);
            if !(one_session && consecutive) {
                s.violations_batch += 1;
            }
        }
        for (i, r) in recs.iter().enumerate() {
            let seen = s.seen.get(&r.event).copied().unwrap_or_default();
            if seen.done {
                s.duplicates += 1;
                continue;
            }
            if seen.answers == 0 && self.fails_first(&r.event) {
                s.seen.insert(
                    r.event.clone(),
                    Seen {
                        answers: 1,
                        done: false,
                    },
                );
                s.transient += 1;
                return if i == 0 {
                    (StatusCode::SERVICE_UNAVAILABLE, None)
                } else {
                    (StatusCode::OK, Some(i))
                };
            }
            let attempt = seen.answers + 1;
            s.seen.insert(
                r.event.clone(),
                Seen {
                    answers: attempt,
                    done: true,
                },
            );
            let e = s.sessions.entry(r.session.clone()).or_default();
            let out_of_sequence = r.seq != e.last_seq + 1;
            e.last_seq = e.last_seq.max(r.seq);
            if out_of_sequence {
                s.violations_sequence += 1;
            }
            s.done += 1;
            s.latencies_us.push(now - r.create_ms * 1000);
            self.log.line(
                r.session.as_bytes(),
                r.seq.to_string().as_bytes(),
                r.event.as_bytes(),
                attempt,
                r.create_ms,
                now,
            );
            if s.done == self.records {
                s.done_at_us = now;
                let _ = self.done_tx.send(true);
            }
        }
        (StatusCode::OK, None)
    }

    fn report(&self) -> Report {
        let mut s = self.lock();
        let mut lat = std::mem::take(&mut s.latencies_us);
        lat.sort_unstable();
        let ms = |p: f64| percentile(&lat, p) as f64 / 1000.0;
        Report {
            requests: s.requests,
            batches: s.batches,
            records_sent: s.records_sent,
            done: s.done,
            transient: s.transient,
            violations_in_flight: s.violations_in_flight,
            violations_sequence: s.violations_sequence,
            violations_batch: s.violations_batch,
            duplicates: s.duplicates,
            unreadable: s.unreadable,
            first_us: s.first_us,
            done_at_us: s.done_at_us,
            latency_p50_ms: ms(50.0),
            latency_p99_ms: ms(99.0),
            latency_p999_ms: ms(99.9),
            latency_max_ms: lat.last().copied().unwrap_or(0) as f64 / 1000.0,
        }
    }
}

/// Marks the session idle again when the request ends, also when the client gave up on it (the
/// future is dropped), so its next request does not look like an overlap.
struct InFlight<'a> {
    server: &'a Server,
    session: Option<String>,
}

impl InFlight<'_> {
    fn enter(&mut self, session: &str) {
        if self.session.is_none() {
            self.server.enter(session);
            self.session = Some(session.to_owned());
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(s) = &self.session {
            self.server.leave(s);
        }
    }
}

async fn handle(req: Request<hyper::body::Incoming>, server: &Server) -> Response<Full<Bytes>> {
    {
        let mut s = server.lock();
        s.requests += 1;
        if s.first_us == 0 {
            s.first_us = now_us();
        }
    }
    let mut guard = InFlight {
        server,
        session: None,
    };
    if let Some(session) = req
        .headers()
        .get("orderly-session")
        .and_then(|v| v.to_str().ok())
    {
        guard.enter(session);
    }
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let Some(recs) = records_of(&parts.headers, &body).filter(|r| !r.is_empty()) else {
        server.lock().unreadable += 1;
        return reply(
            StatusCode::BAD_REQUEST,
            "no record: expected the kafka-h-event-id header or a JSON envelope (or an array of them)",
        );
    };
    guard.enter(&recs[0].session);
    // Let every other request that is ready be read before this one is answered, so a second
    // request of the same session sent before this answer is seen while this one is in flight.
    tokio::task::yield_now().await;
    let (status, done) = server.answer(&recs);
    drop(guard);
    match (status, done) {
        (StatusCode::OK, Some(n)) => {
            let mut r = Response::new(Full::new(Bytes::from(format!("{{\"done\": {n}}}"))));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            r
        }
        (StatusCode::OK, None) => reply(StatusCode::OK, ""),
        (s, _) => reply(s, "try again"),
    }
}

fn reply(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r
}

async fn serve(a: Args) -> Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", a.port)).await?;
    let addr = listener.local_addr()?;
    let (done_tx, mut done_rx) = tokio::sync::watch::channel(false);
    let server = Arc::new(Server {
        state: Mutex::new(State::default()),
        log: LogWriter::create(&a.log, false)?,
        records: a.records,
        transient_pct: a.transient_pct,
        done_tx,
    });
    let srv = server.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let srv = srv.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let srv = srv.clone();
                    async move { Ok::<_, Infallible>(handle(req, &srv).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    println!("LISTEN http://{addr}/records");
    std::io::stdout().flush()?;
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut done_printed = false;
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            r = done_rx.changed(), if !done_printed => {
                if r.is_err() {
                    done_printed = true;
                    continue;
                }
                if *done_rx.borrow() {
                    done_printed = true;
                    println!("DONE");
                    std::io::stdout().flush()?;
                }
            }
        }
    }
    let report = server.report();
    let end = if report.done_at_us > 0 {
        report.done_at_us
    } else {
        now_us()
    };
    server.log.finish(&LogHeader {
        system: a.system.clone(),
        first_us: report.first_us,
        end_us: end,
        rss_kib: 0,
        drawn_floor_us: None,
        cpu_us: None,
    })?;
    std::fs::write(&a.report, serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("writing {}", a.report.display()))?;
    Ok(())
}

fn main() -> Result<()> {
    let a = Args::parse();
    let rt = if a.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(a.threads)
            .enable_all()
            .build()?
    };
    rt.block_on(serve(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(records: u64) -> (Server, PathBuf) {
        let path = std::env::temp_dir().join(format!(
            "bench-http-server-{}-{records}.log",
            std::process::id()
        ));
        let (done_tx, _) = tokio::sync::watch::channel(false);
        let s = Server {
            state: Mutex::new(State::default()),
            log: LogWriter::create(&path, false).unwrap(),
            records,
            transient_pct: 10,
            done_tx,
        };
        (s, path)
    }

    /// Record `i` of a workload with `sessions` sessions (round robin, as bench-load writes).
    fn rec(i: u64, sessions: u64) -> Rec {
        Rec {
            session: workload::session_key((i % sessions) as usize),
            seq: i / sessions + 1,
            event: format!("e-{i}"),
            create_ms: 1,
        }
    }

    fn failing(sessions: u64) -> u64 {
        (0..)
            .find(|i| {
                i % sessions == 0
                    && *i >= sessions
                    && workload::fails_first_attempt_pct(format!("e-{i}").as_bytes(), 10)
            })
            .unwrap_or(0)
    }

    #[test]
    fn one_record_per_request_fails_once_then_is_done() {
        let (s, path) = server(3);
        let f = failing(1);
        let recs: Vec<Rec> = (0..=f).map(|i| rec(i, 1)).collect();
        for r in &recs[..recs.len() - 1] {
            if !workload::fails_first_attempt_pct(r.event.as_bytes(), 10) {
                assert_eq!(s.answer(std::slice::from_ref(r)), (StatusCode::OK, None));
            }
        }
        let last = recs.last().cloned().unwrap_or_else(|| rec(0, 1));
        assert_eq!(
            s.answer(std::slice::from_ref(&last)),
            (StatusCode::SERVICE_UNAVAILABLE, None)
        );
        assert_eq!(
            s.answer(std::slice::from_ref(&last)),
            (StatusCode::OK, None)
        );
        let r = s.report();
        assert_eq!(r.transient, 1);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_batch_is_done_up_to_its_first_failing_record() {
        let (s, path) = server(100);
        let f = failing(1);
        // A batch of the records before the failing one, the failing one and one after it,
        // after everything before was done.
        let start = f.saturating_sub(2);
        for i in 0..start {
            let r = rec(i, 1);
            if workload::fails_first_attempt_pct(r.event.as_bytes(), 10) {
                let _ = s.answer(std::slice::from_ref(&r));
            }
            assert_eq!(s.answer(std::slice::from_ref(&r)), (StatusCode::OK, None));
        }
        let batch: Vec<Rec> = (start..=f + 1).map(|i| rec(i, 1)).collect();
        let before = (f - start) as usize;
        assert_eq!(s.answer(&batch), (StatusCode::OK, Some(before)));
        // Sent again from the failing record: all done now.
        assert_eq!(s.answer(&batch[before..]), (StatusCode::OK, None));
        let r = s.report();
        assert_eq!(
            (
                r.violations_sequence,
                r.violations_batch,
                r.duplicates,
                r.batches
            ),
            (0, 0, 0, 2)
        );
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn out_of_sequence_mixed_batches_and_overlaps_are_violations() {
        let (s, path) = server(100);
        let ok = |i| {
            let r = rec(i, 1);
            !workload::fails_first_attempt_pct(r.event.as_bytes(), 10)
        };
        let (a, b) = (0..)
            .filter(|i| ok(*i) && ok(*i + 1))
            .map(|i| (i, i + 1))
            .next()
            .unwrap_or((0, 1));
        // Skipping ahead of the session's sequence.
        let _ = s.answer(&[rec(b, 1)]);
        assert_eq!(s.report().violations_sequence, 1);
        // The skipped one, later: out of sequence too, and below the last done.
        let _ = s.answer(&[rec(a, 1)]);
        assert_eq!(s.report().violations_sequence, 2);
        // Done again: a duplicate.
        let _ = s.answer(&[rec(a, 1)]);
        assert_eq!(s.report().duplicates, 1);
        // A batch of two sessions.
        let _ = s.answer(&[rec(0, 2), rec(1, 2)]);
        assert_eq!(s.report().violations_batch, 1);
        // Two requests of one session at once.
        s.enter("s-000009");
        s.enter("s-000009");
        s.leave("s-000009");
        s.enter("s-000009");
        assert_eq!(s.report().violations_in_flight, 1);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn headers_a_json_envelope_and_an_array_are_read() {
        let mut h = hyper::HeaderMap::new();
        h.insert("orderly-session", "s-000001".parse().unwrap());
        h.insert("orderly-timestamp", "1700".parse().unwrap());
        h.insert("kafka-h-event-id", "e-1".parse().unwrap());
        h.insert("kafka-h-seq", "1".parse().unwrap());
        let want = Rec {
            session: "s-000001".into(),
            seq: 1,
            event: "e-1".into(),
            create_ms: 1700,
        };
        assert_eq!(records_of(&h, b"xxxx"), Some(vec![want.clone()]));
        let env = |seq: u64, id: &str| {
            format!(
                r#"{{"topic":"t","partition":0,"offset":5,"timestamp":1700,"attempt":1,"session":"s-000001","key":"s-000001","key_encoding":"utf8","value":"v","value_encoding":"utf8","headers":[{{"name":"event-id","value":"{id}","encoding":"utf8"}},{{"name":"seq","value":"{seq}","encoding":"utf8"}}],"traceparent":"00-x-y-01"}}"#
            )
        };
        let none = hyper::HeaderMap::new();
        assert_eq!(
            records_of(&none, env(1, "e-1").as_bytes()),
            Some(vec![want.clone()])
        );
        let arr = format!("[{},{}]", env(1, "e-1"), env(2, "e-11"));
        let got = records_of(&none, arr.as_bytes()).unwrap_or_default();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], want);
        assert_eq!((got[1].seq, got[1].event.as_str()), (2, "e-11"));
        assert_eq!(records_of(&none, b"raw value"), None);
    }
}
