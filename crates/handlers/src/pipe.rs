//! `PipeHandler`: one long-lived child speaking JSON lines, answers in any order, restarted with backoff when it dies.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use orderly_engine::{Attempt, Handler, HandlerError, Record};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::meta::{Envelope, Meta};
use crate::session::SessionRouter;

/// Settings of a [`PipeHandler`]; `PipeConfig::new(cmd)` gives the documented defaults.
#[derive(Debug, Clone)]
pub struct PipeConfig {
    /// The command, run by `sh -c`.
    pub command: String,
    /// Records in flight in the child at most. Default 1024.
    pub concurrency: usize,
    /// Limit for one answer; on expiry the attempt is transient. Default 30 s.
    pub timeout: Duration,
    /// First restart delay after the child died; doubles while it keeps dying within 10 s of
    /// its start, up to [`PipeConfig::restart_backoff_max`]. Default 100 ms.
    pub restart_backoff: Duration,
    /// Longest restart delay. Default 10 s.
    pub restart_backoff_max: Duration,
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
        }
    }
}

/// One line to the child: the record's envelope plus the id to answer with.
#[derive(Serialize)]
struct Line<'a> {
    id: u64,
    #[serde(flatten)]
    envelope: Envelope<'a>,
}

/// One line from the child.
#[derive(Deserialize)]
struct Answer {
    id: u64,
    result: String,
    #[serde(default)]
    reason: Option<String>,
}

struct Job {
    id: u64,
    line: Bytes,
    reply: oneshot::Sender<Answer>,
}

/// Hands records to one long-lived child process over JSON lines.
///
/// To the child's stdin goes one JSON object per line: `id` plus the envelope of
/// [`crate::meta::Envelope`] (topic, partition, offset, timestamp, attempt, session, key, value,
/// headers, traceparent; non-UTF-8 bytes base64 with an `*_encoding` field). From its stdout comes
/// one line per record, in any order: `{"id":…, "result":"ok"|"retry"|"fail", "reason":…}`.
/// `retry` is transient, `fail` is permanent. The child's stderr is inherited.
///
/// If the child dies it is restarted with backoff; records it held get a transient error and are
/// retried by the engine (never lost). Records sent while it is down wait in the queue.
/// Dropping the handler ends the supervisor task and kills the child.
#[derive(Debug)]
pub struct PipeHandler {
    config: PipeConfig,
    router: SessionRouter,
    jobs: mpsc::Sender<Job>,
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
        tokio::spawn(supervise(config.clone(), rx));
        Self {
            permits: Arc::new(Semaphore::new(config.concurrency.max(1))),
            config,
            router,
            jobs,
            next_id: AtomicU64::new(1),
        }
    }
}

fn start(command: &str) -> std::io::Result<Child> {
    Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
}

/// Runs children one after the other until the handler is dropped.
async fn supervise(config: PipeConfig, mut jobs: mpsc::Receiver<Job>) {
    let mut backoff = config.restart_backoff;
    loop {
        let started = Instant::now();
        let mut child = match start(&config.command) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the pipe handler; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(config.restart_backoff_max);
                continue;
            }
        };
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return;
        };
        // The writer is its own task so a child that writes before it reads can never block us
        // while we block writing to it.
        let (line_tx, mut line_rx) = mpsc::unbounded_channel::<Bytes>();
        let writer = tokio::spawn(async move {
            while let Some(l) = line_rx.recv().await {
                if stdin.write_all(&l).await.is_err() {
                    break;
                }
                if line_rx.is_empty() && stdin.flush().await.is_err() {
                    break;
                }
            }
        });
        let mut pending: HashMap<u64, oneshot::Sender<Answer>> = HashMap::new();
        let mut lines = BufReader::new(stdout).lines();
        let closed = loop {
            tokio::select! {
                job = jobs.recv() => match job {
                    None => break true,
                    Some(j) => {
                        pending.retain(|_, s| !s.is_closed());
                        pending.insert(j.id, j.reply);
                        let _ = line_tx.send(j.line);
                    }
                },
                line = lines.next_line() => match line {
                    Ok(Some(l)) if l.trim().is_empty() => {}
                    Ok(Some(l)) => match serde_json::from_str::<Answer>(&l) {
                        Ok(a) => {
                            if let Some(s) = pending.remove(&a.id) {
                                let _ = s.send(a);
                            }
                        }
                        Err(e) => tracing::warn!(line = %l, error = %e, "pipe handler wrote a line that is not an answer"),
                    },
                    Ok(None) | Err(_) => break false,
                },
            }
        };
        drop(line_tx);
        writer.abort();
        let _ = writer.await;
        if closed {
            let _ = child.kill().await;
            return;
        }
        let status = child.wait().await;
        tracing::warn!(status = ?status.ok(), in_flight = pending.len(), "pipe handler exited; its records are retried, restarting");
        metrics::counter!("orderly_pipe_restarts_total").increment(1);
        // Dropping the senders gives each waiting attempt a transient error.
        drop(pending);
        if started.elapsed() > Duration::from_secs(10) {
            backoff = config.restart_backoff;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(config.restart_backoff_max);
    }
}

impl Handler for PipeHandler {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        let meta = Meta::of(record, attempt, &self.router)?;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| HandlerError::Transient("handler closed".into()))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut line = serde_json::to_vec(&Line {
            id,
            envelope: Envelope::new(record, &meta),
        })
        .map_err(|e| HandlerError::Permanent(format!("encoding the record: {e}")))?;
        line.push(b'\n');
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                id,
                line: Bytes::from(line),
                reply,
            })
            .await
            .map_err(|_| HandlerError::Transient("pipe handler stopped".into()))?;
        match tokio::time::timeout(self.config.timeout, answer).await {
            Err(_) => Err(HandlerError::Transient(format!(
                "no answer from the pipe handler within {:?}",
                self.config.timeout
            ))),
            Ok(Err(_)) => Err(HandlerError::Transient(
                "the pipe handler exited before answering".into(),
            )),
            Ok(Ok(a)) => {
                let reason = a.reason.unwrap_or_default();
                match a.result.as_str() {
                    "ok" => Ok(()),
                    "retry" => Err(HandlerError::Transient(reason)),
                    "fail" => Err(HandlerError::Permanent(reason)),
                    other => Err(HandlerError::Transient(format!(
                        "the pipe handler answered result {other:?} (expected ok, retry or fail)"
                    ))),
                }
            }
        }
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
            Err(HandlerError::Permanent("because".into()))
        );
        assert_eq!(
            h.handle(&rec(3, "later"), a).await,
            Err(HandlerError::Transient("because".into()))
        );
        assert!(matches!(
            h.handle(&rec(4, "die"), a).await,
            Err(HandlerError::Transient(_))
        ));
        // The child was restarted: the next record is handled.
        assert_eq!(h.handle(&rec(5, "fine"), a).await, Ok(()));
    }
}
