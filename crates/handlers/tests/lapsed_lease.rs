//! A partition's lease that lapses while a handler call waits inside the handler (the process
//! frozen past its session timeout, say): the webhook connecting to its endpoint, a command
//! waiting for a process slot, a pipe line queued behind a busy child. The call sends nothing
//! and fails transiently; once the lease holds again the engine retries it and the record is
//! delivered, once. Engine with an in-memory source and a lease the test switches; real
//! endpoints and children.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Response;
use orderly_engine::mem::{MemDeadLetters, MemSource};
use orderly_engine::{
    Attempt, BatchOutcome, Engine, EngineConfig, Handler, HandlerError, Lease, Record, RetryPolicy,
    TopicPartition,
};
use orderly_handlers::{
    ExecConfig, ExecHandler, HttpConfig, HttpHandler, PipeConfig, PipeHandler, SessionRouter,
};
use orderly_testkit::https::{HttpsOptions, HttpsServer, cert};
use tokio::sync::{Semaphore, mpsc, oneshot};

/// Longest wait for anything the test expects; only a broken build waits it out.
const PATIENCE: Duration = Duration::from_secs(120);

/// A lease the test switches.
#[derive(Debug)]
struct Switch(AtomicBool);

impl Switch {
    fn new() -> Arc<Self> {
        Arc::new(Switch(AtomicBool::new(true)))
    }

    fn set(&self, holds: bool) {
        self.0.store(holds, Ordering::SeqCst);
    }
}

impl Lease for Switch {
    fn holds(&self, _now: tokio::time::Instant) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// What a handler call did, as [`Observed`] reports it.
#[derive(Debug)]
enum Ev {
    /// The call (of the record or batch at this offset, this attempt) reached the handler.
    Entered(i64, u32),
    /// It ended: records done, and the error of the first one not done.
    Done(i64, u32, usize, Option<HandlerError>),
}

/// Wraps a handler: reports each call's entry and end, and holds the first attempt of the
/// records named in `hold` until the test lets it go (so calls enter in the test's order).
struct Observed<H> {
    inner: Arc<H>,
    events: mpsc::UnboundedSender<Ev>,
    hold: Mutex<HashMap<i64, oneshot::Receiver<()>>>,
}

impl<H> Observed<H> {
    async fn enter(&self, offset: i64, attempt: Attempt) {
        let held = self.hold.lock().unwrap().remove(&offset);
        if let Some(rx) = held {
            let _ = rx.await;
        }
        let _ = self.events.send(Ev::Entered(offset, attempt.number));
    }
}

impl<H: Handler> Handler for Observed<H> {
    fn available(&self) -> bool {
        self.inner.available()
    }

    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        self.enter(record.offset, attempt).await;
        let res = self.inner.handle(record, attempt).await;
        let (done, error) = match &res {
            Ok(()) => (1, None),
            Err(e) => (0, Some(e.clone())),
        };
        let _ = self
            .events
            .send(Ev::Done(record.offset, attempt.number, done, error));
        res
    }

    async fn handle_batch(&self, records: &[&Record], attempt: Attempt) -> BatchOutcome {
        let first = records[0].offset;
        self.enter(first, attempt).await;
        let out = self.inner.handle_batch(records, attempt).await;
        let _ = self
            .events
            .send(Ev::Done(first, attempt.number, out.done, out.error.clone()));
        out
    }
}

/// The test's side of a run: the calls' events, the lease, and the records held back.
struct Run {
    events: mpsc::UnboundedReceiver<Ev>,
    lease: Arc<Switch>,
    release: HashMap<i64, oneshot::Sender<()>>,
    dlq: Arc<MemDeadLetters>,
    run: tokio::task::JoinHandle<Result<orderly_engine::EngineStats, orderly_engine::EngineError>>,
}

impl Run {
    /// Runs `handler` over `records` (partition 0; keys as given) with a lease that holds, the
    /// first attempts of the offsets in `hold` held back until [`Run::release`].
    fn start<H: Handler>(
        handler: Arc<H>,
        records: Vec<Record>,
        hold: &[i64],
        batch_max: usize,
    ) -> Run {
        let tp = TopicPartition::new("orders", 0);
        let lease = Switch::new();
        let (source, handle) = MemSource::new(10);
        let source = source.with_lease(lease.clone());
        handle.produce(&tp, records);
        handle.assign(std::slice::from_ref(&tp));
        handle.finish_when_drained();
        let (tx, events) = mpsc::unbounded_channel();
        let mut held = HashMap::new();
        let mut release = HashMap::new();
        for &o in hold {
            let (go, wait) = oneshot::channel();
            held.insert(o, wait);
            release.insert(o, go);
        }
        let observed = Observed {
            inner: handler,
            events: tx,
            hold: Mutex::new(held),
        };
        let cfg = EngineConfig {
            workers: 2,
            batch_max,
            retry: RetryPolicy {
                base: Duration::from_millis(10),
                factor: 2.0,
                cap: Duration::from_millis(100),
                max_attempts: Some(20),
            },
            attempt_timeout: None,
            stuck_timeout: None,
            commit_interval: Duration::from_millis(50),
            drain_timeout: PATIENCE,
            ..EngineConfig::default()
        };
        let dlq = Arc::new(MemDeadLetters::new());
        let engine = Engine::from_arcs(cfg, Arc::new(observed), dlq.clone());
        let run = tokio::spawn(engine.run(source, std::future::pending()));
        Run {
            events,
            lease,
            release,
            dlq,
            run,
        }
    }

    async fn next(&mut self) -> Ev {
        tokio::time::timeout(PATIENCE, self.events.recv())
            .await
            .expect("a handler call event")
            .expect("the engine runs")
    }

    /// Waits for the call of `offset`'s attempt `attempt` to enter the handler.
    async fn entered(&mut self, offset: i64, attempt: u32) {
        loop {
            if let Ev::Entered(o, a) = self.next().await {
                if (o, a) == (offset, attempt) {
                    return;
                }
            }
        }
    }

    /// Waits for the call of `offset`'s attempt `attempt` to end: records done, and the error.
    async fn done(&mut self, offset: i64, attempt: u32) -> (usize, Option<HandlerError>) {
        loop {
            if let Ev::Done(o, a, done, error) = self.next().await {
                if (o, a) == (offset, attempt) {
                    return (done, error);
                }
            }
        }
    }

    fn release(&mut self, offset: i64) {
        let _ = self.release.remove(&offset).unwrap().send(());
    }

    /// Waits for the run to end (every record done) and checks that nothing was dead-lettered.
    async fn finish(self) {
        tokio::time::timeout(PATIENCE, self.run)
            .await
            .expect("the run ends")
            .unwrap()
            .unwrap();
        assert!(self.dlq.letters().is_empty(), "{:?}", self.dlq.letters());
    }
}

fn record(offset: i64, key: &str, value: impl Into<Bytes>) -> Record {
    Record::new(
        TopicPartition::new("orders", 0),
        offset,
        Some(Bytes::from(key.to_owned())),
        Some(value.into()),
    )
}

/// Asserts that the attempt failed transiently, without sending, because the lease lapsed.
fn assert_lapsed(done: usize, error: Option<HandlerError>) {
    assert_eq!(done, 0);
    let e = error.expect("the attempt fails");
    assert!(
        e.is_transient() && e.message().contains("ownership") && e.message().contains("lapsed"),
        "{e:?}"
    );
}

/// A fresh directory with a FIFO `go` in it, for a child to wait on.
fn fifo_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("orderly-lapse-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(d.join("go"))
        .status()
        .unwrap();
    assert!(status.success());
    d
}

/// Lets the child waiting on `dir/go` go on (opening the FIFO waits for the child to open it).
async fn go(dir: &Path) {
    let go = dir.join("go");
    tokio::task::spawn_blocking(move || std::fs::write(go, b"go\n").unwrap())
        .await
        .unwrap();
}

/// Record 0's call enters and holds the child (until `dir/go`); record 1's call enters and
/// waits behind it; the lease lapses, the child goes on, and record 1's attempt fails as lapsed.
async fn lapse_while_record_1_waits(run: &mut Run, dir: &Path) {
    run.entered(0, 1).await;
    run.release(1);
    run.entered(1, 1).await;
    run.lease.set(false);
    go(dir).await;
    let (done, error) = run.done(1, 1).await;
    assert_lapsed(done, error);
}

/// The lines of `dir/log`.
fn log(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// One process at a time: record 1's call waits for the slot while record 0's process runs
/// (until the test lets it end); the lease lapses meanwhile. Record 1's process is never
/// started: its attempt fails transiently, and after the lease holds again the retry runs it,
/// once.
#[tokio::test]
async fn a_command_waiting_for_a_process_slot_does_not_start_once_the_lease_lapsed() {
    let dir = fifo_dir("exec");
    let d = dir.display();
    let mut config = ExecConfig::new(format!(
        r#"printf '%s\n' "$ORDERLY_OFFSET" >> '{d}/log'; if [ "$(cat)" = hold ]; then read -r _ < '{d}/go'; fi"#
    ));
    config.concurrency = 1;
    config.timeout = PATIENCE;
    let exec = Arc::new(ExecHandler::new(config, SessionRouter::default()));
    let records = vec![record(0, "a", "hold"), record(1, "b", "v")];
    let mut run = Run::start(exec, records, &[1], 1);
    lapse_while_record_1_waits(&mut run, &dir).await;
    assert_eq!(log(&dir), ["0"], "started while the lease lapsed");
    run.lease.set(true);
    assert_eq!(run.done(1, 2).await, (1, None));
    run.finish().await;
    assert_eq!(log(&dir), ["0", "1"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The pipe's child: waits on the FIFO `go` before it reads anything, then answers every line
/// (a record or a batch) done, appending the offsets each line carried to `log` first.
const PIPE_CHILD: &str = r#"
import json, os, sys
d = sys.argv[1]
open(os.path.join(d, "go")).read()
log = open(os.path.join(d, "log"), "a")
for line in sys.stdin:
    m = json.loads(line)
    offsets = [r["offset"] for r in m["batch"]] if "batch" in m else [m["offset"]]
    log.write(" ".join(map(str, offsets)) + "\n")
    log.flush()
    print(json.dumps({"id": m["id"], "result": "ok"}), flush=True)
"#;

/// Record 0's line is larger than any pipe buffer and the child reads nothing until the test
/// lets it: the line written after it, record 1's, waits in the handler's queue; the lease
/// lapses meanwhile. Record 1's line is never written: its attempt fails transiently, and after
/// the lease holds again the retry writes it, once.
async fn pipe_line_waits_behind_a_busy_child(batch: bool) {
    let dir = fifo_dir(if batch { "pipe-batch" } else { "pipe" });
    std::fs::write(dir.join("child.py"), PIPE_CHILD).unwrap();
    let mut config = PipeConfig::new(format!("exec python3 '{0}/child.py' '{0}'", dir.display()));
    config.timeout = PATIENCE;
    let pipe = Arc::new(PipeHandler::spawn(config, SessionRouter::default()));
    let big = "x".repeat(8 << 20);
    let records = vec![record(0, "a", big), record(1, "b", "v")];
    let batch_max = if batch { 4 } else { 1 };
    let mut run = Run::start(pipe, records, &[1], batch_max);
    lapse_while_record_1_waits(&mut run, &dir).await;
    run.lease.set(true);
    assert_eq!(run.done(1, 2).await, (1, None));
    run.finish().await;
    assert_eq!(log(&dir), ["0", "1"], "written while the lease lapsed");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_pipe_line_queued_behind_a_busy_child_is_not_written_once_the_lease_lapsed() {
    pipe_line_waits_behind_a_busy_child(false).await;
}

#[tokio::test]
async fn a_pipe_batch_queued_behind_a_busy_child_is_not_written_once_the_lease_lapsed() {
    pipe_line_waits_behind_a_busy_child(true).await;
}

/// An HTTPS endpoint whose TLS handshakes wait: each accepted connection waits for a permit of
/// `handshakes` before its handshake. Records the offset of every request its application code
/// receives (`orderly-offset`, or a batch's `orderly-first-offset`).
async fn slow_handshake_server(handshakes: Arc<Semaphore>) -> (HttpsServer, Arc<Mutex<Vec<i64>>>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let seen = received.clone();
    let options = HttpsOptions {
        handshake_permits: Some(handshakes),
        ..HttpsOptions::default()
    };
    let server = HttpsServer::start(options, move |req| {
        let h = |n: &str| {
            req.headers()
                .get(n)
                .and_then(|v| v.to_str().ok()?.parse::<i64>().ok())
        };
        let offset = h("orderly-first-offset").or_else(|| h("orderly-offset"));
        seen.lock().unwrap().push(offset.unwrap_or(-1));
        async move {
            let _ = req.into_body().collect().await;
            Response::new(Full::new(Bytes::new()))
        }
    })
    .await
    .unwrap();
    (server, received)
}

/// The webhook's call waits for its connection's TLS handshake; the lease lapses meanwhile.
/// Once the handshake completes the request is not written: the attempt fails transiently (not
/// as an endpoint failure: the handler stays available), and after the lease holds again the
/// retry delivers the record, once.
async fn webhook_waits_for_its_connection(h2: bool, batch: bool) {
    let handshakes = Arc::new(Semaphore::new(0));
    let (mut server, received) = slow_handshake_server(handshakes.clone()).await;
    let mut config = HttpConfig::new(format!("https://localhost:{}/in", server.port()));
    config.ca_file = Some(cert("ca.pem"));
    config.h2c = h2;
    config.timeout = PATIENCE;
    let http = Arc::new(HttpHandler::new(config, SessionRouter::default()).unwrap());
    let batch_max = if batch { 4 } else { 1 };
    let mut run = Run::start(http.clone(), vec![record(0, "s", "v")], &[], batch_max);
    run.entered(0, 1).await;
    let connected = tokio::time::timeout(PATIENCE, server.accepted()).await;
    assert_eq!(connected, Ok(true), "the webhook connects");
    run.lease.set(false);
    handshakes.add_permits(1);
    let (done, error) = run.done(0, 1).await;
    assert_lapsed(done, error);
    assert!(
        received.lock().unwrap().is_empty(),
        "sent while the lease lapsed"
    );
    assert!(
        http.available(),
        "a lapsed lease says nothing about the endpoint"
    );
    run.lease.set(true);
    handshakes.add_permits(100);
    let (done, error) = run.done(0, 2).await;
    assert_eq!((done, error), (1, None));
    run.finish().await;
    assert_eq!(*received.lock().unwrap(), [0]);
}

#[tokio::test]
async fn a_webhook_request_waiting_for_its_connection_is_not_sent_once_the_lease_lapsed() {
    webhook_waits_for_its_connection(false, false).await;
}

#[tokio::test]
async fn a_webhook_batch_waiting_for_its_connection_is_not_sent_once_the_lease_lapsed() {
    webhook_waits_for_its_connection(false, true).await;
}

#[tokio::test]
async fn an_h2_webhook_request_waiting_for_its_connection_is_not_sent_once_the_lease_lapsed() {
    webhook_waits_for_its_connection(true, false).await;
}
