//! A checking webhook: an HTTP server that fails records by the benchmark's rules and checks order per session on its side.
//!
//! It is the "application" of `orderly consume --http` in the demo, the end-to-end tests and the
//! benchmarks. Rules (the same as the synthetic workload's, in `orderly-consumer`): a record fails
//! transiently (503) on its first attempt when `fnv1a(event-id) % 100 < transient_pct`,
//! permanently (422) when `fnv1a(event-id) % 1000 == 999` (if enabled). It reads the
//! `orderly-session`, `orderly-attempt`, `orderly-timestamp`, `kafka-h-event-id` and `kafka-h-seq`
//! headers.
//!
//! A batch request (header `orderly-batch-size`; a JSON array of envelopes) is judged record by
//! record with the same rules; the first record that fails ends it: `{"done": i}` for a
//! transient failure, `{"done": i, "result": "fail"}` for a permanent one.
//!
//! `GET /report` answers what the webhook saw so far as JSON ([`Report::to_json`]); a webhook
//! running as its own process (the `orderly-webhook` program of this crate, which the demo runs)
//! is read with [`fetch_report`].
//!
//! Order check: two requests of one session in flight at once is a violation; a terminal answer
//! (200 or 422) for `seq` must follow the previous terminal one of the session by exactly one
//! (lower or equal is a redelivery, counted as a duplicate; higher is a violation).
//!
//! Replying ([`Webhook::start_replying`]): every record answered done gets one reply whose value
//! is its event id. A record with an odd `seq` answers in the JSON form
//! (`application/vnd.orderly.replies+json`, header `seq` on the reply), one with an even `seq`
//! with the plain body and `orderly-reply-key: <session>` (the default key, named explicitly);
//! in a batch answer each reply names its record's `offset`. Both leave the topic to the
//! consumer's `--reply-topic`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

/// FNV-1a 64 (the failure-injection hash).
pub fn fnv1a(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// What the webhook fails.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// Percentage of records failing transiently on their first attempt.
    pub transient_pct: u64,
    /// Fail 0.1 % of records permanently.
    pub permanent: bool,
    /// Simulated work per request (an async sleep).
    pub work: Duration,
}

#[derive(Default)]
struct SessionState {
    in_flight: bool,
    last_seq: u64,
}

#[derive(Default)]
struct State {
    sessions: HashMap<String, SessionState>,
    done: u64,
    permanent: u64,
    transient: u64,
    violations: u64,
    duplicates: u64,
    samples: Vec<Sample>,
    first: Option<Instant>,
    last: Option<Instant>,
    requests: u64,
}

/// One terminal record: its CreateTime and when the webhook answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// The record's CreateTime (Unix milliseconds).
    pub created_ms: i64,
    /// The terminal answer (Unix microseconds, the webhook's clock).
    pub done_us: i64,
}

impl Sample {
    /// CreateTime → terminal answer, microseconds (0 if the clocks disagree).
    pub fn latency_us(&self) -> u64 {
        u64::try_from(self.done_us - self.created_ms * 1000).unwrap_or(0)
    }
}

/// What the webhook saw.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Requests answered 200.
    pub done: u64,
    /// Requests answered 422 (permanent).
    pub permanent: u64,
    /// Requests answered 503 (transient).
    pub transient: u64,
    /// Order violations (see the module docs).
    pub violations: u64,
    /// Terminal answers for a seq at or below the session's last one (redeliveries).
    pub duplicates: u64,
    /// All requests.
    pub requests: u64,
    /// CreateTime → terminal answer, per terminal record, microseconds, sorted.
    pub latencies_us: Vec<u64>,
    /// Every terminal record, in the order answered.
    pub samples: Vec<Sample>,
    /// First request to last terminal answer.
    pub span: Duration,
}

impl Report {
    /// Terminal answers (200 + 422).
    pub fn terminal(&self) -> u64 {
        self.done + self.permanent
    }

    /// The report as JSON (`GET /report`): the counters, `span_us` and `samples` (each
    /// `[created_ms, done_us]`).
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "done": self.done,
            "permanent": self.permanent,
            "transient": self.transient,
            "violations": self.violations,
            "duplicates": self.duplicates,
            "requests": self.requests,
            "span_us": u64::try_from(self.span.as_micros()).unwrap_or(u64::MAX),
            "samples": self
                .samples
                .iter()
                .map(|x| [x.created_ms, x.done_us])
                .collect::<Vec<_>>(),
        })
        .to_string()
    }

    /// Reads [`Report::to_json`]'s form; `None` if `json` is not one.
    pub fn from_json(json: &[u8]) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_slice(json).ok()?;
        let n = |k: &str| v.get(k).and_then(serde_json::Value::as_u64);
        let samples = v
            .get("samples")?
            .as_array()?
            .iter()
            .map(|x| {
                let x = x.as_array()?;
                Some(Sample {
                    created_ms: x.first()?.as_i64()?,
                    done_us: x.get(1)?.as_i64()?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            done: n("done")?,
            permanent: n("permanent")?,
            transient: n("transient")?,
            violations: n("violations")?,
            duplicates: n("duplicates")?,
            requests: n("requests")?,
            latencies_us: sorted_latencies(&samples),
            samples,
            span: Duration::from_micros(n("span_us")?),
        })
    }

    /// The `q` quantile (0..=1) of the latencies, in milliseconds.
    pub fn quantile_ms(&self, q: f64) -> f64 {
        quantile_ms(&self.latencies_us, q)
    }

    /// The earliest CreateTime of a terminal record (Unix milliseconds).
    pub fn first_created_ms(&self) -> Option<i64> {
        self.samples.iter().map(|s| s.created_ms).min()
    }

    /// The sorted latencies (µs) of the records created in `[from, to)` after the first one.
    pub fn window(&self, from: Duration, to: Duration) -> Vec<u64> {
        let Some(t0) = self.first_created_ms() else {
            return Vec::new();
        };
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let (lo, hi) = (t0.saturating_add(ms(from)), t0.saturating_add(ms(to)));
        let mut lat: Vec<u64> = self
            .samples
            .iter()
            .filter(|s| s.created_ms >= lo && s.created_ms < hi)
            .map(Sample::latency_us)
            .collect();
        lat.sort_unstable();
        lat
    }
}

/// The `q` quantile (0..=1) of sorted latencies in microseconds, in milliseconds (0 if empty).
pub fn quantile_ms(sorted_us: &[u64], q: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let i = ((sorted_us.len() - 1) as f64 * q).round() as usize;
    sorted_us[i.min(sorted_us.len() - 1)] as f64 / 1000.0
}

fn sorted_latencies(samples: &[Sample]) -> Vec<u64> {
    let mut lat: Vec<u64> = samples.iter().map(Sample::latency_us).collect();
    lat.sort_unstable();
    lat
}

/// Reads the report of the webhook listening on `addr` (`host:port`) with `GET /report`.
pub async fn fetch_report(addr: &str) -> std::io::Result<Report> {
    let body = get(addr, "/report").await?;
    Report::from_json(&body).ok_or_else(|| invalid("GET /report: not a report"))
}

/// How far a run is, cheap to poll ([`fetch_progress`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Terminal answers (200 + 422).
    pub terminal: u64,
    /// Records answered 422 (permanent): the dead letters to come.
    pub permanent: u64,
    /// The p50 of CreateTime → terminal answer over the last [`PROGRESS_WINDOW`] terminal
    /// records, milliseconds.
    pub recent_p50_ms: f64,
}

/// The terminal records [`Progress::recent_p50_ms`] covers.
pub const PROGRESS_WINDOW: usize = 1000;

fn progress(st: &Mutex<State>) -> Progress {
    let Ok(s) = st.lock() else {
        return Progress {
            terminal: 0,
            permanent: 0,
            recent_p50_ms: 0.0,
        };
    };
    let recent = &s.samples[s.samples.len().saturating_sub(PROGRESS_WINDOW)..];
    Progress {
        terminal: s.done + s.permanent,
        permanent: s.permanent,
        recent_p50_ms: quantile_ms(&sorted_latencies(recent), 0.5),
    }
}

/// The progress of the webhook listening on `addr`, with `GET /progress` (`terminal permanent
/// recent_p50_ms`, space-separated).
pub async fn fetch_progress(addr: &str) -> std::io::Result<Progress> {
    let body = get(addr, "/progress").await?;
    let text = std::str::from_utf8(&body).map_err(|_| invalid("GET /progress: not text"))?;
    let mut words = text.split_whitespace();
    let mut next = || {
        words
            .next()
            .ok_or_else(|| invalid("GET /progress: too short"))
    };
    let bad = |_| invalid("GET /progress: not a number");
    Ok(Progress {
        terminal: next()?.parse().map_err(bad)?,
        permanent: next()?.parse().map_err(bad)?,
        recent_p50_ms: next()?
            .parse()
            .map_err(|_| invalid("GET /progress: not a number"))?,
    })
}

/// Terminal answers so far of the webhook listening on `addr`, with `GET /terminal` (a number,
/// cheap to poll: [`fetch_report`] carries every latency).
pub async fn fetch_terminal(addr: &str) -> std::io::Result<u64> {
    let body = get(addr, "/terminal").await?;
    std::str::from_utf8(&body)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .ok_or_else(|| invalid("GET /terminal: not a number"))
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned())
}

/// The body of a `GET path` answered 200.
async fn get(addr: &str, path: &str) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nhost: webhook\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    if !buf.starts_with(b"HTTP/1.1 200") {
        return Err(invalid(&format!("GET {path} was not answered 200")));
    }
    let start = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| invalid(&format!("GET {path}: no end of headers")))?;
    Ok(buf.split_off(start + 4))
}

/// A running webhook; stops when dropped.
pub struct Webhook {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn header<'a>(req: &'a Request<hyper::body::Incoming>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

impl Webhook {
    /// Starts on 127.0.0.1, a free port.
    pub async fn start(rules: Rules) -> std::io::Result<Self> {
        Self::start_on("127.0.0.1:0", rules).await
    }

    /// Like [`Webhook::start`], answering each record done with a reply (see the module docs).
    pub async fn start_replying(rules: Rules) -> std::io::Result<Self> {
        Self::start_with("127.0.0.1:0", rules, true).await
    }

    /// Starts listening on `addr` (`host:port`; port 0 picks a free one).
    pub async fn start_on(addr: &str, rules: Rules) -> std::io::Result<Self> {
        Self::start_with(addr, rules, false).await
    }

    async fn start_with(addr: &str, rules: Rules, reply: bool) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let st = st.clone();
                        async move { Ok::<_, Infallible>(handle(req, &st, rules, reply).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok(Self { addr, state, task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT/records`.
    pub fn url(&self) -> String {
        format!("http://{}/records", self.addr)
    }

    /// Terminal answers so far.
    pub fn terminal(&self) -> u64 {
        self.state.lock().map(|s| s.done + s.permanent).unwrap_or(0)
    }

    /// What it saw so far.
    pub fn report(&self) -> Report {
        report(&self.state)
    }
}

fn report(state: &Mutex<State>) -> Report {
    let Ok(s) = state.lock() else {
        return Report::default();
    };
    Report {
        done: s.done,
        permanent: s.permanent,
        transient: s.transient,
        violations: s.violations,
        duplicates: s.duplicates,
        requests: s.requests,
        latencies_us: sorted_latencies(&s.samples),
        samples: s.samples.clone(),
        span: match (s.first, s.last) {
            (Some(f), Some(l)) => l.saturating_duration_since(f),
            _ => Duration::ZERO,
        },
    }
}

/// One record of a request, as the webhook judges it.
struct Item {
    offset: i64,
    attempt: u32,
    created_ms: i64,
    event: String,
    seq: u64,
}

/// The fields of an envelope the webhook reads; the others are skipped unparsed.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(default)]
    offset: Option<i64>,
    #[serde(default)]
    attempt: Option<u32>,
    #[serde(default)]
    timestamp: Option<i64>,
    #[serde(default, borrow)]
    headers: Vec<EnvelopeHeader<'a>>,
}

#[derive(serde::Deserialize)]
struct EnvelopeHeader<'a> {
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    value: Option<std::borrow::Cow<'a, str>>,
}

/// The items of a batch request: a JSON array of envelopes (`--http-batch-max` above 1).
fn batch_items(body: &[u8]) -> Option<Vec<Item>> {
    let envelopes: Vec<Envelope<'_>> = serde_json::from_slice(body).ok()?;
    Some(
        envelopes
            .into_iter()
            .map(|e| {
                let header = |name: &str| {
                    e.headers
                        .iter()
                        .find(|h| h.name == name)
                        .and_then(|h| h.value.as_deref())
                };
                Item {
                    offset: e.offset.unwrap_or(-1),
                    attempt: e.attempt.unwrap_or(1),
                    created_ms: e.timestamp.unwrap_or(0),
                    event: header("event-id").unwrap_or("").to_owned(),
                    seq: header("seq").and_then(|v| v.parse().ok()).unwrap_or(0),
                }
            })
            .collect(),
    )
}

/// What the rules say of one record.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Done,
    Permanent,
    Transient,
}

/// Judges one record by the rules and books it: counts, order check, latency.
fn judge(s: &mut State, session: &str, item: &Item, rules: Rules) -> Verdict {
    let h = fnv1a(item.event.as_bytes());
    let verdict = if item.attempt == 1 && h % 100 < rules.transient_pct {
        Verdict::Transient
    } else if rules.permanent && h % 1000 == 999 {
        Verdict::Permanent
    } else {
        Verdict::Done
    };
    match verdict {
        Verdict::Done => s.done += 1,
        Verdict::Permanent => s.permanent += 1,
        Verdict::Transient => {
            s.transient += 1;
            return verdict;
        }
    }
    if !s.sessions.contains_key(session) {
        s.sessions
            .insert(session.to_owned(), SessionState::default());
    }
    let Some(e) = s.sessions.get_mut(session) else {
        return verdict;
    };
    let (mut dup, mut viol) = (false, false);
    if item.seq > 0 {
        if item.seq <= e.last_seq {
            dup = true;
        } else {
            viol = item.seq != e.last_seq + 1;
            e.last_seq = item.seq;
        }
    }
    if dup {
        s.duplicates += 1;
    }
    if viol {
        s.violations += 1;
    }
    let done_us = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    s.samples.push(Sample {
        created_ms: item.created_ms,
        done_us,
    });
    s.last = Some(Instant::now());
    verdict
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    st: &Mutex<State>,
    rules: Rules,
    reply: bool,
) -> Response<Full<Bytes>> {
    if req.method() == hyper::Method::GET {
        match req.uri().path() {
            "/report" => return json(report(st).to_json()),
            "/terminal" => {
                let n = st.lock().map_or(0, |s| s.done + s.permanent);
                return json(n.to_string());
            }
            "/progress" => {
                let p = progress(st);
                return json(format!(
                    "{} {} {}",
                    p.terminal, p.permanent, p.recent_p50_ms
                ));
            }
            _ => {}
        }
    }
    let session = header(&req, "orderly-session").unwrap_or("").to_owned();
    let batch = req.headers().contains_key("orderly-batch-size");
    let single = Item {
        offset: header(&req, "orderly-offset")
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1),
        attempt: header(&req, "orderly-attempt")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1),
        created_ms: header(&req, "orderly-timestamp")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        event: header(&req, "kafka-h-event-id").unwrap_or("").to_owned(),
        seq: header(&req, "kafka-h-seq")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    };
    {
        let Ok(mut s) = st.lock() else {
            return answer(StatusCode::INTERNAL_SERVER_ERROR, "poisoned");
        };
        s.requests += 1;
        if s.first.is_none() {
            s.first = Some(Instant::now());
        }
        if !s.sessions.contains_key(&session) {
            s.sessions.insert(session.clone(), SessionState::default());
        }
        let Some(e) = s.sessions.get_mut(&session) else {
            return answer(StatusCode::INTERNAL_SERVER_ERROR, "no session state");
        };
        let concurrent = !session.is_empty() && e.in_flight;
        e.in_flight = true;
        if concurrent {
            s.violations += 1;
        }
    }
    // A request the client gives up on (a cancelled attempt) drops this future: the guard still
    // marks the session idle, or its next record would look like an overlap.
    let mut guard = InFlight {
        st,
        session: &session,
        armed: true,
    };
    let body = req
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    if !rules.work.is_zero() {
        tokio::time::sleep(rules.work).await;
    }
    let items = if batch {
        match batch_items(&body) {
            Some(items) => items,
            None => return answer(StatusCode::BAD_REQUEST, "not a JSON array of envelopes"),
        }
    } else {
        vec![single]
    };
    guard.armed = false;
    let Ok(mut s) = st.lock() else {
        return answer(StatusCode::INTERNAL_SERVER_ERROR, "poisoned");
    };
    if let Some(e) = s.sessions.get_mut(&session) {
        e.in_flight = false;
    }
    // Replies of the records answered done (batch form, each naming its offset).
    let mut replies = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match (judge(&mut s, &session, item, rules), batch) {
            (Verdict::Done, _) => {
                if reply && batch {
                    replies.push(serde_json::json!({"offset": item.offset, "value": item.event}));
                }
            }
            (Verdict::Transient, false) => {
                return answer(StatusCode::SERVICE_UNAVAILABLE, "try again");
            }
            (Verdict::Permanent, false) => {
                return answer(StatusCode::UNPROCESSABLE_ENTITY, "invalid record");
            }
            (Verdict::Transient, true) => {
                return json(serde_json::json!({"done": i, "replies": replies}).to_string());
            }
            (Verdict::Permanent, true) => {
                return json(
                    serde_json::json!({"done": i, "result": "fail", "reason": "invalid record", "replies": replies})
                        .to_string(),
                );
            }
        }
    }
    if !reply {
        return answer(StatusCode::OK, "");
    }
    if batch {
        return json(serde_json::json!({"replies": replies}).to_string());
    }
    let Some(item) = items.first() else {
        return answer(StatusCode::OK, "");
    };
    if item.seq % 2 == 1 {
        let body = serde_json::json!({"replies": [{"value": item.event, "headers": {"seq": item.seq.to_string()}}]});
        let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/vnd.orderly.replies+json"),
        );
        r
    } else {
        let mut r = Response::new(Full::new(Bytes::from(item.event.clone())));
        if let Ok(v) = hyper::header::HeaderValue::from_str(&session) {
            r.headers_mut().insert("orderly-reply-key", v);
        }
        r
    }
}

fn json(body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

struct InFlight<'a> {
    st: &'a Mutex<State>,
    session: &'a str,
    armed: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.armed {
            if let Ok(mut s) = self.st.lock() {
                if let Some(e) = s.sessions.get_mut(self.session) {
                    e.in_flight = false;
                }
            }
        }
    }
}

fn answer(status: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn get_report_answers_what_the_webhook_saw() {
        let hook = Webhook::start(Rules {
            transient_pct: 0,
            permanent: false,
            work: Duration::ZERO,
        })
        .await
        .unwrap();
        let addr = hook.addr().to_string();
        for seq in 1..=3u64 {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let req = format!(
                "POST /records HTTP/1.1\r\nhost: x\r\norderly-session: s1\r\n\
                 kafka-h-seq: {seq}\r\nkafka-h-event-id: e{seq}\r\n\
                 content-length: 0\r\nconnection: close\r\n\r\n"
            );
            s.write_all(req.as_bytes()).await.unwrap();
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).await.unwrap();
            assert!(
                buf.starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&buf)
            );
        }
        assert_eq!(fetch_terminal(&addr).await.unwrap(), 3);
        let progress = fetch_progress(&addr).await.unwrap();
        assert_eq!((progress.terminal, progress.permanent), (3, 0));
        let remote = fetch_report(&addr).await.unwrap();
        let local = hook.report();
        assert_eq!(remote.done, 3);
        assert_eq!(remote.requests, 3);
        assert_eq!(remote.violations, 0);
        assert_eq!(remote.latencies_us.len(), 3);
        assert_eq!(remote.latencies_us, local.latencies_us);
        assert_eq!(remote.samples, local.samples);
        assert_eq!(
            progress.recent_p50_ms,
            quantile_ms(&local.latencies_us, 0.5)
        );
        assert_eq!(
            remote.span,
            Duration::from_micros(local.span.as_micros() as u64)
        );
    }

    #[test]
    fn batch_envelopes_give_attempt_time_event_and_seq() {
        let body = br#"[
            {"topic":"t","partition":0,"offset":4,"timestamp":1700,"attempt":2,"session":"s",
             "key":"s","value":"v","headers":[{"name":"event-id","value":"e4","encoding":"utf8"},
             {"name":"seq","value":"5","encoding":"utf8"},{"name":"x","value":null,"encoding":"utf8"}],
             "traceparent":"00-1-2-01"},
            {"headers":[{"name":"seq","value":"6"},{"name":"event-id","value":"e\u00e9"}]}
        ]"#;
        let items = batch_items(body).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!((items[0].attempt, items[0].created_ms), (2, 1700));
        assert_eq!((items[0].event.as_str(), items[0].seq), ("e4", 5));
        assert_eq!((items[1].attempt, items[1].created_ms), (1, 0));
        assert_eq!((items[1].event.as_str(), items[1].seq), ("e\u{e9}", 6));
        assert!(batch_items(b"{}").is_none());
    }
}
