//! `PipeHandler`: one long-lived child speaking JSON lines (a record or a session's batch per line), answers in any order, restarted with backoff when it dies, hangs or misbehaves.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use orderly_engine::{
    Attempt, BatchOutcome, BatchReplies, Handler, HandlerError, Ownership, Record,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::batch::{Answerer, batch_answer};
use crate::child::{self, ProcessGroup, StartError};
use crate::meta::{Envelope, Meta, snippet};
use crate::session::SessionRouter;

/// Why a line was not written: its partition's ownership lapsed while it waited for the child.
const LAPSED: &str =
    "the partition's ownership lapsed while the line waited for the pipe handler: not written";

/// The longest line a child may write (without its newline). A longer one restarts the child,
/// and the records it held fail with a transient error that says so.
pub const MAX_LINE: usize = 1 << 20;

/// Settings of a [`PipeHandler`]; `PipeConfig::new(cmd)` gives the documented defaults.
#[derive(Debug, Clone)]
pub struct PipeConfig {
    /// The command, run by `sh -c`.
    pub command: String,
    /// Lines in flight in the child at most (a batch is one line). Default 1024.
    pub concurrency: usize,
    /// Limit for one answer (to a record or a whole batch); on expiry the attempt is transient
    /// and the child, which still holds the line, is restarted before any further line is
    /// sent. Default 30 s.
    pub timeout: Duration,
    /// First restart delay after the child died; doubles while it keeps dying within 10 s of
    /// its start, up to [`PipeConfig::restart_backoff_max`]. Default 100 ms.
    pub restart_backoff: Duration,
    /// Longest restart delay. Default 10 s.
    pub restart_backoff_max: Duration,
    /// Variables of orderly's environment passed to the child besides
    /// [`crate::child::PASS_ENV`] and `LC_*`. Default none.
    pub pass_env: Vec<String>,
}

impl PipeConfig {
    /// Defaults for `command`.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            concurrency: 1024,
            timeout: Duration::from_secs(30),
            restart_backoff: Duration::from_millis(100),
            restart_backoff_max: Duration::from_secs(10),
            pass_env: Vec::new(),
        }
    }

    /// Checks that the command can run at all (see [`child::check`]); for start-up.
    pub async fn check(&self) -> Result<(), StartError> {
        child::check(&self.command, &self.pass_env).await
    }
}

/// One line to the child: the record's envelope plus the id to answer with.
#[derive(Serialize)]
struct Line<'a> {
    id: u64,
    #[serde(flatten)]
    envelope: Envelope<'a>,
}

/// One line to the child carrying a batch: the records' envelopes plus the id to answer with.
#[derive(Serialize)]
struct BatchLine<'a> {
    id: u64,
    batch: Vec<Envelope<'a>>,
}

/// One line from the child. A record's answer needs `result`; a batch's is read again, whole,
/// as a [`crate::batch::BatchAnswer`].
#[derive(Deserialize)]
struct Answer {
    id: u64,
    #[serde(default)]
    result: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    /// With `ok`: the record's replies ([`crate::replies::JsonReply`]), read only then (so a
    /// malformed one is the record's error, not an unreadable answer).
    #[serde(default)]
    replies: Option<serde_json::Value>,
}

/// What the child answered to one line.
enum Answered {
    /// A record's answer.
    One(Answer),
    /// A batch's answer: the whole line.
    Batch(Bytes),
}

/// The child's answer, or why the line got none (a transient error's text).
type Reply = oneshot::Sender<Result<Answered, String>>;

/// A line sent, waiting for its answer.
struct Waiting {
    reply: Reply,
    batch: bool,
}

struct Job {
    id: u64,
    line: Bytes,
    /// The line carries a batch.
    batch: bool,
    reply: Reply,
    /// The ownership of the partition the line's records are from, asked right before the
    /// line is written.
    ownership: Ownership,
}

/// A line on its way to the child's stdin.
struct Out {
    id: u64,
    line: Bytes,
    ownership: Ownership,
}

/// Hands records to one long-lived child process over JSON lines.
///
/// To the child's stdin goes one JSON object per line: `id` plus the envelope of
/// [`crate::meta::Envelope`] (topic, partition, offset, timestamp, attempt, session, key, value,
/// headers, traceparent; non-UTF-8 bytes base64 with an `*_encoding` field). From its stdout comes
/// one line per record, in any order: `{"id":…, "result":"ok"|"retry"|"fail", "reason":…}`.
/// `retry` is transient, `fail` is permanent. An `ok` answer may carry the record's replies,
/// `"replies": [{"topic":…, "key":…, "value":…, "headers":{…}}, …]` (see [`crate::replies`]),
/// written in that order before the record counts as done; a malformed reply dead-letters the
/// record. An answer that is not UTF-8 is a transient error
/// of its record; a line longer than [`MAX_LINE`] restarts the child. The child's stderr is
/// inherited; its environment is as [`crate::child`] describes.
///
/// Batches ([`Handler::handle_batch`], which the engine calls with
/// [`EngineConfig::batch_max`](orderly_engine::EngineConfig::batch_max) above 1): one line
/// carries consecutive records of one session, `{"id":…, "batch":[envelope, …]}` (the first
/// envelope with the batch's attempt, the others on their first), and one line answers it, as
/// an HTTP batch answer does: `{"id":…}` or `"result":"ok"` all done;
/// `"done":N` the first N done and the next retried (`"result":"fail"` with it: dead-lettered);
/// `"results":["ok","retry",…]` one per record from the front; `"result":"retry"` or `"fail"`
/// alone is the first record's, the others are sent again; `"replies"` name their records'
/// `offset`. A batch whose line gets no answer (error, timeout, the child dying) is retried
/// whole; records answered done are never sent again.
///
/// The child leads a process group of its own. It is restarted (the group killed, then a new
/// child started with backoff) when it exits or closes its stdout, when it writes an over-long
/// line, and when an attempt it holds ends without its answer (timed out or cancelled): such
/// an attempt's record is still in the child, and the record's next attempt must not run beside
/// it, so the restart comes before any further record is sent. The other records the child
/// held get a transient error and are retried by the engine (never lost). Records sent while it
/// is down wait in the queue; one whose attempt ends while it waits is never sent, nor one whose
/// partition's ownership lapsed meanwhile (a freeze of the process past the group's session
/// timeout, say): right before a line is written, the ownership its attempt took
/// ([`Ownership`]) is asked, and once it lapsed the attempt fails transiently instead. What the
/// child answered before a restart still counts: its stdout is read to the end first. Dropping
/// the handler ends the supervisor task and kills the child's group.
#[derive(Debug)]
pub struct PipeHandler {
    config: PipeConfig,
    router: SessionRouter,
    jobs: mpsc::Sender<Job>,
    unanswered: mpsc::UnboundedSender<u64>,
    next_id: AtomicU64,
    permits: Arc<Semaphore>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Job({})", self.id)
    }
}

impl PipeHandler {
    /// Starts the supervisor (and the child) on the current tokio runtime.
    pub fn spawn(config: PipeConfig, router: SessionRouter) -> Self {
        let (jobs, rx) = mpsc::channel(config.concurrency.max(1));
        let (unanswered, unanswered_rx) = mpsc::unbounded_channel();
        tokio::spawn(supervise(config.clone(), rx, unanswered_rx));
        Self {
            permits: Arc::new(Semaphore::new(config.concurrency.max(1))),
            config,
            router,
            jobs,
            unanswered,
            next_id: AtomicU64::new(1),
        }
    }
}

fn start(config: &PipeConfig) -> std::io::Result<Child> {
    child::command(&config.command, &config.pass_env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
}

/// Reads lines of at most `max` bytes. Cancel safe: what was read stays in the buffer.
struct Lines<R> {
    inner: R,
    buf: BytesMut,
    /// Bytes at the front of `buf` known to hold no newline.
    scanned: usize,
    max: usize,
}

enum Read {
    Line(Bytes),
    TooLong,
    End,
}

impl<R: AsyncRead + Unpin> Lines<R> {
    fn new(inner: R, max: usize) -> Self {
        Self {
            inner,
            buf: BytesMut::new(),
            scanned: 0,
            max,
        }
    }

    async fn next(&mut self) -> Read {
        loop {
            if let Some(i) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
                let mut line = self.buf.split_to(self.scanned + i + 1);
                line.truncate(line.len() - 1);
                self.scanned = 0;
                return Read::Line(line.freeze());
            }
            self.scanned = self.buf.len();
            if self.buf.len() > self.max {
                return Read::TooLong;
            }
            self.buf.reserve(64 << 10);
            match self.inner.read_buf(&mut self.buf).await {
                Ok(1..) => {}
                Ok(0) | Err(_) => return Read::End,
            }
        }
    }
}

/// Why a child is replaced.
enum Restart {
    /// It closed its stdout (exited, most likely).
    Exited,
    /// An attempt it holds ended without an answer (this id).
    Unanswered(u64),
    /// It wrote a line over [`MAX_LINE`].
    TooLong,
    /// The handler was dropped.
    Closed,
}

/// Delivers one line from the child.
fn deliver(line: &Bytes, pending: &mut HashMap<u64, Waiting>) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    match std::str::from_utf8(line) {
        Ok(text) => match serde_json::from_str::<Answer>(text) {
            Ok(a) => {
                let Some(w) = pending.get(&a.id) else {
                    return;
                };
                if !w.batch && a.result.is_none() {
                    tracing::warn!(line = %snippet(line, 256), "pipe handler wrote a line that is not an answer: no result");
                    return;
                }
                if let Some(w) = pending.remove(&a.id) {
                    let answered = if w.batch {
                        Answered::Batch(line.clone())
                    } else {
                        Answered::One(a)
                    };
                    let _ = w.reply.send(Ok(answered));
                }
            }
            Err(e) => {
                tracing::warn!(line = %snippet(line, 256), error = %e, "pipe handler wrote a line that is not an answer");
            }
        },
        Err(_) => {
            // Still an answer for a record, perhaps, with one bad byte in its reason.
            let lossy = String::from_utf8_lossy(line);
            match serde_json::from_str::<Answer>(&lossy) {
                Ok(a) => {
                    if let Some(w) = pending.remove(&a.id) {
                        let _ = w.reply.send(Err(
                            "the pipe handler's answer to this record is not UTF-8".into(),
                        ));
                    }
                }
                Err(_) => {
                    tracing::warn!(line = %snippet(line, 256), "pipe handler wrote a line that is not UTF-8");
                }
            }
        }
    }
}

/// Runs children one after the other until the handler is dropped.
async fn supervise(
    config: PipeConfig,
    mut jobs: mpsc::Receiver<Job>,
    mut unanswered: mpsc::UnboundedReceiver<u64>,
) {
    let mut backoff = config.restart_backoff;
    // A job taken from the queue when its child had to be replaced first: the next child's
    // first line.
    let mut carried: Option<Job> = None;
    loop {
        let started = Instant::now();
        let mut child = match start(&config) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the pipe handler; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(config.restart_backoff_max);
                continue;
            }
        };
        let mut group = ProcessGroup::of(&child);
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return;
        };
        // The writer is its own task so a child that writes before it reads can never block us
        // while we block writing to it. A line waits there while the child reads slower than
        // lines come; the last moment to ask its ownership is right before its write. It tells
        // us the lines it did not write.
        let (line_tx, mut line_rx) = mpsc::unbounded_channel::<Out>();
        let (withdrawn_tx, mut withdrawn) = mpsc::unbounded_channel::<u64>();
        let writer = tokio::spawn(async move {
            while let Some(out) = line_rx.recv().await {
                if !out.ownership.holds() {
                    if withdrawn_tx.send(out.id).is_err() {
                        break;
                    }
                } else if stdin.write_all(&out.line).await.is_err() {
                    break;
                }
                if line_rx.is_empty() && stdin.flush().await.is_err() {
                    break;
                }
            }
        });
        let mut pending: HashMap<u64, Waiting> = HashMap::new();
        let mut lines = Lines::new(stdout, MAX_LINE);
        let send = |j: Job, pending: &mut HashMap<u64, Waiting>| {
            // An attempt that ended while its record waited in the queue: never sent.
            if !j.reply.is_closed() {
                pending.insert(
                    j.id,
                    Waiting {
                        reply: j.reply,
                        batch: j.batch,
                    },
                );
                let _ = line_tx.send(Out {
                    id: j.id,
                    line: j.line,
                    ownership: j.ownership,
                });
            }
        };
        if let Some(j) = carried.take() {
            send(j, &mut pending);
        }
        let why = loop {
            tokio::select! {
                biased;
                // Before `unanswered`: an attempt that ends after its line was withdrawn left
                // nothing in the child.
                Some(id) = withdrawn.recv() => {
                    if let Some(w) = pending.remove(&id) {
                        let _ = w.reply.send(Err(LAPSED.to_owned()));
                    }
                }
                id = unanswered.recv() => match id {
                    None => break Restart::Closed,
                    Some(id) if pending.contains_key(&id) => break Restart::Unanswered(id),
                    Some(_) => {}
                },
                job = jobs.recv() => match job {
                    None => break Restart::Closed,
                    Some(j) => {
                        // An attempt that ended without its answer is reported before its
                        // record's next attempt can be queued; so if this child holds such a
                        // record, it is in `unanswered` now, and the child is replaced first.
                        let mut held = None;
                        while let Ok(id) = unanswered.try_recv() {
                            if pending.contains_key(&id) {
                                held = Some(id);
                            }
                        }
                        if let Some(id) = held {
                            carried = Some(j);
                            break Restart::Unanswered(id);
                        }
                        send(j, &mut pending);
                    }
                },
                read = lines.next() => match read {
                    Read::Line(l) => deliver(&l, &mut pending),
                    Read::TooLong => break Restart::TooLong,
                    Read::End => break Restart::Exited,
                },
            }
        };
        drop(line_tx);
        writer.abort();
        let _ = writer.await;
        let status = match why {
            // It closed its stdout: give it a moment to exit by itself, for an exit status
            // worth logging, then end whatever is left of its group.
            Restart::Exited => {
                let status = tokio::time::timeout(Duration::from_secs(1), child.wait()).await;
                group.kill();
                match status {
                    Ok(s) => s.ok(),
                    Err(_) => child.wait().await.ok(),
                }
            }
            // Answers it wrote before it was killed still count (records it did handle are
            // not retried): its stdout is read to the end, bounded in case a process that left
            // its group holds it open.
            Restart::Unanswered(_) => {
                group.kill();
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    while let Read::Line(l) = lines.next().await {
                        deliver(&l, &mut pending);
                    }
                })
                .await;
                child.wait().await.ok()
            }
            Restart::TooLong | Restart::Closed => {
                group.kill();
                child.wait().await.ok()
            }
        };
        let reason = match why {
            Restart::Closed => return,
            Restart::Exited => "the pipe handler exited before answering".to_owned(),
            Restart::Unanswered(id) => {
                format!("the pipe handler was restarted: it held line {id} past its attempt's end")
            }
            Restart::TooLong => format!(
                "the pipe handler wrote a line longer than {} MiB; it was restarted",
                MAX_LINE >> 20
            ),
        };
        tracing::warn!(status = ?status, in_flight = pending.len(), reason = %reason, "pipe handler restarting; its records are retried");
        metrics::counter!("orderly_pipe_restarts_total").increment(1);
        for (_, w) in pending.drain() {
            let _ = w.reply.send(Err(reason.clone()));
        }
        if started.elapsed() > Duration::from_secs(10) {
            backoff = config.restart_backoff;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(config.restart_backoff_max);
    }
}

/// Reports an attempt that ends (returns or is dropped) without its answer, so the supervisor
/// replaces the child that still holds its record.
struct Unanswered<'a> {
    id: u64,
    tx: &'a mpsc::UnboundedSender<u64>,
    armed: bool,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.tx.send(self.id);
        }
    }
}

impl PipeHandler {
    /// Sends one line (`encode` gets its id and returns it without the newline) and waits for
    /// its answer within the timeout. Holds one of the `concurrency` permits meanwhile.
    async fn exchange(
        &self,
        batch: bool,
        encode: impl FnOnce(u64) -> serde_json::Result<Vec<u8>>,
    ) -> Result<Answered, HandlerError> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| HandlerError::transient("handler closed"))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut line =
            encode(id).map_err(|e| HandlerError::permanent(format!("encoding the record: {e}")))?;
        line.push(b'\n');
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                id,
                line: Bytes::from(line),
                batch,
                reply,
                ownership: Ownership::current(),
            })
            .await
            .map_err(|_| HandlerError::transient("pipe handler stopped"))?;
        let mut watch = Unanswered {
            id,
            tx: &self.unanswered,
            armed: true,
        };
        let answer = tokio::time::timeout(self.config.timeout, answer).await;
        watch.armed = answer.is_err();
        drop(watch);
        match answer {
            Err(_) => Err(HandlerError::transient(format!(
                "no answer from the pipe handler within {:?}; it is restarted",
                self.config.timeout
            ))),
            Ok(Err(_)) => Err(HandlerError::transient("pipe handler stopped")),
            Ok(Ok(Err(reason))) => Err(HandlerError::transient(reason)),
            Ok(Ok(Ok(a))) => Ok(a),
        }
    }

    /// Sends `records` (with their `metas`) as one batch line and maps the answer.
    async fn send_batch(&self, records: &[&Record], metas: &[Meta<'_>]) -> BatchReplies {
        let answered = self
            .exchange(true, |id| {
                serde_json::to_vec(&BatchLine {
                    id,
                    batch: records
                        .iter()
                        .zip(metas)
                        .map(|(r, m)| Envelope::new(r, m))
                        .collect(),
                })
            })
            .await;
        match answered {
            Ok(Answered::Batch(line)) => batch_answer(&line, true, records, Answerer::Pipe),
            Ok(Answered::One(_)) => BatchOutcome::failed(HandlerError::transient(
                "the pipe handler's answer to a batch was taken for a record's",
            ))
            .into(),
            Err(e) => BatchOutcome::failed(e).into(),
        }
    }
}

impl Handler for PipeHandler {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        self.handle_replying(record, attempt).await.map(drop)
    }

    async fn handle_replying(
        &self,
        record: &Record,
        attempt: Attempt,
    ) -> Result<Vec<orderly_engine::Reply>, HandlerError> {
        let meta = Meta::of(record, attempt, &self.router)?;
        let answered = self
            .exchange(false, |id| {
                serde_json::to_vec(&Line {
                    id,
                    envelope: Envelope::new(record, &meta),
                })
            })
            .await?;
        let Answered::One(a) = answered else {
            return Err(HandlerError::transient(
                "the pipe handler's answer to a record was taken for a batch's",
            ));
        };
        let reason = a.reason.unwrap_or_default();
        match a.result.as_deref().unwrap_or_default() {
            "ok" => match a.replies {
                None | Some(serde_json::Value::Null) => Ok(Vec::new()),
                Some(v) => serde_json::from_value::<Vec<crate::replies::JsonReply>>(v)
                    .map_err(|e| e.to_string())
                    .and_then(|rs| {
                        rs.into_iter()
                            .map(crate::replies::JsonReply::into_reply)
                            .collect()
                    })
                    .map_err(|e| {
                        HandlerError::permanent(format!(
                            "the pipe handler's replies are invalid: {e}"
                        ))
                    }),
            },
            "retry" => Err(HandlerError::transient(reason)),
            "fail" => Err(HandlerError::permanent(reason)),
            other => Err(HandlerError::transient(format!(
                "the pipe handler answered result {other:?} (expected ok, retry or fail)"
            ))),
        }
    }

    async fn handle_batch(&self, records: &[&Record], attempt: Attempt) -> BatchOutcome {
        self.handle_batch_replying(records, attempt).await.outcome
    }

    /// One line for the whole batch, `{"id": .., "batch": [envelope, ..]}`, answered by one
    /// line naming what is done (see [`PipeHandler`]). A record whose metadata cannot be read
    /// (its session id, by the router's policy) ends the batch before it: the records before
    /// it go, and it gets the error once they are all done.
    async fn handle_batch_replying(&self, records: &[&Record], attempt: Attempt) -> BatchReplies {
        let mut metas = Vec::with_capacity(records.len());
        let mut then = None;
        for (i, r) in records.iter().enumerate() {
            let at = if i == 0 { attempt } else { Attempt::FIRST };
            match Meta::of(r, at, &self.router) {
                Ok(m) => metas.push(m),
                Err(e) => {
                    then = Some(e);
                    break;
                }
            }
        }
        let sent = &records[..metas.len()];
        if sent.is_empty() {
            return match then {
                Some(e) => BatchOutcome::failed(e),
                None => BatchOutcome::all(0),
            }
            .into();
        }
        let mut answer = self.send_batch(sent, &metas).await;
        if answer.outcome.done == sent.len() && then.is_some() {
            answer.outcome.error = then;
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use orderly_engine::TopicPartition;

    use super::*;

    fn rec(offset: i64, value: &str) -> Record {
        Record::new(
            TopicPartition::new("t", 0),
            offset,
            Some(Bytes::from_static(b"k")),
            Some(Bytes::from(value.to_owned())),
        )
    }

    /// A child in Python would do the same; `sh` + `sed` keeps the test free of interpreters:
    /// it answers each line with the id and a result chosen by the value.
    const ECHO: &str = r#"while IFS= read -r l; do id=$(printf '%s' "$l" | sed 's/.*"id":\([0-9]*\).*/\1/'); case "$l" in *'"value":"bad"'*) r=fail;; *'"value":"later"'*) r=retry;; *'"value":"die"'*) exit 1;; *) r=ok;; esac; printf '{"id":%s,"result":"%s","reason":"because"}\n' "$id" "$r"; done"#;

    #[tokio::test]
    async fn answers_map_to_outcomes_and_a_dead_child_is_restarted() {
        let h = PipeHandler::spawn(PipeConfig::new(ECHO), SessionRouter::default());
        let a = Attempt::FIRST;
        assert_eq!(h.handle(&rec(1, "fine"), a).await, Ok(()));
        assert_eq!(
            h.handle(&rec(2, "bad"), a).await,
            Err(HandlerError::permanent("because"))
        );
        assert_eq!(
            h.handle(&rec(3, "later"), a).await,
            Err(HandlerError::transient("because"))
        );
        assert!(matches!(
            h.handle(&rec(4, "die"), a).await,
            Err(HandlerError::Transient { .. })
        ));
        // The child was restarted: the next record is handled.
        assert_eq!(h.handle(&rec(5, "fine"), a).await, Ok(()));
    }

    #[tokio::test]
    async fn an_ok_answer_carries_the_records_replies() {
        // Value "many": two replies; "bad": a malformed reply; anything else: none.
        const REPLIER: &str = r#"while IFS= read -r l; do id=$(printf '%s' "$l" | sed 's/.*"id":\([0-9]*\).*/\1/'); case "$l" in *'"value":"many"'*) printf '{"id":%s,"result":"ok","replies":[{"value":"r-%s"},{"topic":"x","key":"k2","value":"two","headers":{"h":"v"}}]}\n' "$id" "$id";; *'"value":"bad"'*) printf '{"id":%s,"result":"ok","replies":[{"valeu":1}]}\n' "$id";; *) printf '{"id":%s,"result":"ok"}\n' "$id";; esac; done"#;
        let h = PipeHandler::spawn(PipeConfig::new(REPLIER), SessionRouter::default());
        let a = Attempt::FIRST;
        let replies = h.handle_replying(&rec(1, "many"), a).await.unwrap();
        assert_eq!(replies.len(), 2);
        assert!(replies[0].value.as_deref().unwrap().starts_with(b"r-"));
        assert_eq!(replies[0].topic, None);
        assert_eq!(
            replies[1],
            orderly_engine::Reply::new("two")
                .to_topic("x")
                .with_key("k2")
                .with_header(orderly_engine::Header::new("h", "v"))
        );
        assert_eq!(h.handle_replying(&rec(2, "none"), a).await, Ok(Vec::new()));
        assert!(matches!(
            h.handle_replying(&rec(3, "bad"), a).await,
            Err(HandlerError::Permanent { message: e, .. }) if e.contains("replies are invalid")
        ));
    }
}
