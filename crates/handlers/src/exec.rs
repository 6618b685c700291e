//! `ExecHandler`: one process per record, the value on stdin, metadata in `ORDERLY_*` variables, the exit code as the outcome.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use orderly_engine::{Attempt, Handler, HandlerError, Record};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use crate::child::{self, ProcessGroup, StartError};
use crate::meta::{Meta, snippet};
use crate::session::{SESSION_HEADER, SessionRouter};

/// Why a record's process was not started: the partition's ownership lapsed while the attempt
/// waited for a slot.
const LAPSED: &str =
    "the partition's ownership lapsed while the record waited for a process slot: not started";
/// Bytes of a process's stderr kept for the reason of a failed attempt (the last ones).
const STDERR_TAIL: usize = 1024;
/// How long stderr is still read after the process exited and its group was killed, for what
/// the process wrote just before exiting. Bounded, since a process outside the group (one that
/// called `setsid`) may hold stderr open for ever.
const STDERR_DRAIN: Duration = Duration::from_millis(100);

/// Settings of an [`ExecHandler`]; `ExecConfig::new(cmd)` gives the documented defaults.
#[derive(Debug, Clone)]
pub struct ExecConfig {
    /// The command, run by `sh -c`.
    pub command: String,
    /// Exit codes that mean "try again". Default `[75]` (EX_TEMPFAIL).
    pub transient_codes: Vec<i32>,
    /// Processes running at once at most. Default 64.
    pub concurrency: usize,
    /// Limit for one process; on expiry its process group is killed and the attempt is
    /// transient. Default 30 s.
    pub timeout: Duration,
    /// Variables of orderly's environment passed to the process besides
    /// [`crate::child::PASS_ENV`] and `LC_*`. Default none.
    pub pass_env: Vec<String>,
}

impl ExecConfig {
    /// Defaults for `command`.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            transient_codes: vec![75],
            concurrency: 64,
            timeout: Duration::from_secs(30),
            pass_env: Vec::new(),
        }
    }

    /// Checks that the command can run at all (see [`child::check`]): `sh` starts and the
    /// program the command names exists. For start-up, so a missing program is one clear error
    /// instead of a failed attempt per record.
    pub async fn check(&self) -> Result<(), StartError> {
        child::check(&self.command, &self.pass_env).await
    }
}

/// Runs one process per record.
///
/// The value is written to the process's stdin (then stdin is closed). The environment carries
/// `ORDERLY_TOPIC`, `ORDERLY_PARTITION`, `ORDERLY_OFFSET`, `ORDERLY_ATTEMPT`,
/// `ORDERLY_TIMESTAMP`, `ORDERLY_SESSION`, `ORDERLY_KEY`, `ORDERLY_TRACEPARENT`, and each Kafka
/// header as `ORDERLY_H_<NAME>` (upper-cased, non-alphanumerics as `_`). A value that is not
/// UTF-8 or holds a NUL byte is base64, with `<VARIABLE>_ENCODING=base64` beside it. Of
/// orderly's own environment the process gets only what [`crate::child`] lets through. Exit 0
/// is done, an exit code in [`ExecConfig::transient_codes`] (or death by a signal) is
/// transient, any other exit is permanent with the last 1 KiB of stderr as the reason.
///
/// The process leads a process group of its own. When the attempt ends (exit, timeout or
/// cancellation), whatever is left in the group is killed, so no work of an attempt goes on
/// after it and a session's attempts never overlap. The attempt ends when the process exits:
/// stderr is read beside it, only its last 1 KiB kept, and a grandchild that holds stderr open
/// does not hold the attempt.
///
/// An attempt that waited for a slot asks right before it starts the process whether its
/// partition's ownership still holds ([`orderly_engine::ownership_holds`]); once it lapsed the
/// process is not started and the attempt fails transiently.
///
/// Cancel safety: the process group is killed when the attempt's future is dropped.
#[derive(Debug)]
pub struct ExecHandler {
    config: ExecConfig,
    router: SessionRouter,
    permits: Arc<Semaphore>,
}

impl ExecHandler {
    /// The handler.
    pub fn new(config: ExecConfig, router: SessionRouter) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(config.concurrency.max(1))),
            config,
            router,
        }
    }
}

fn env_name(header: &str) -> String {
    let mut s = String::from("ORDERLY_H_");
    s.extend(header.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    s
}

/// The last [`STDERR_TAIL`] bytes written to it.
#[derive(Default)]
struct Tail(Vec<u8>);

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        let bytes = &bytes[bytes.len().saturating_sub(STDERR_TAIL)..];
        self.0.extend_from_slice(bytes);
        let over = self.0.len().saturating_sub(STDERR_TAIL);
        self.0.drain(..over);
    }
}

/// Reads `stderr` into `tail` until EOF or an error.
async fn read_into(stderr: &mut tokio::process::ChildStderr, tail: &mut Tail) {
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = stderr.read(&mut buf).await {
        tail.push(&buf[..n]);
    }
}

/// The failure of a process that did not start. A record whose metadata and headers do not fit
/// the kernel's limits on the environment (`E2BIG`) can never start: permanent. Anything else
/// (no memory, too many processes or open files) may pass: transient.
fn spawn_error(e: std::io::Error) -> HandlerError {
    let text = format!("starting the command: {e}");
    if e.kind() == std::io::ErrorKind::ArgumentListTooLong {
        HandlerError::permanent(format!(
            "{text} (the record's metadata and headers exceed the environment's size limit)"
        ))
    } else {
        HandlerError::transient(text)
    }
}

impl Handler for ExecHandler {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        let meta = Meta::of(record, attempt, &self.router)?;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| HandlerError::transient("handler closed"))?;
        let mut cmd = child::command(&self.config.command, &self.config.pass_env);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in meta.pairs(true) {
            child::set_env(&mut cmd, &k, v.as_bytes());
        }
        cmd.env("ORDERLY_TRACEPARENT", meta.traceparent.as_str());
        for h in &record.headers {
            if h.key == SESSION_HEADER {
                continue;
            }
            if let Some(v) = h.value.as_deref() {
                child::set_env(&mut cmd, &env_name(&h.key), v);
            }
        }
        // The wait for a slot can span a freeze of the process past the group's session
        // timeout: the record may be another member's by now. Starting the process hands it the
        // record; the last moment to refrain is here.
        if !orderly_engine::ownership_holds() {
            return Err(HandlerError::transient(LAPSED));
        }
        // Error texts name the command, never quote it: they reach logs and the dead letter's
        // error header, and a command line may carry a secret.
        let mut child = cmd.spawn().map_err(spawn_error)?;
        // Declared after `child`, so dropped before it: on cancellation the group is killed
        // while the leader is still unreaped.
        let mut group = ProcessGroup::of(&child);
        let value = record.value.clone().unwrap_or_default();
        let stdin = child.stdin.take();
        let mut stderr = child.stderr.take();
        let mut tail = Tail::default();
        let run = async {
            // A child that does not read its stdin closes it early: that is not an error. A
            // child that neither reads nor exits leaves the write pending; it ends with the
            // attempt.
            let write = async {
                if let Some(mut s) = stdin {
                    let _ = s.write_all(&value).await;
                    let _ = s.shutdown().await;
                }
                std::future::pending::<()>().await;
            };
            tokio::pin!(write);
            let mut buf = [0u8; 4096];
            loop {
                tokio::select! {
                    biased;
                    status = child.wait() => break status,
                    r = async { match stderr.as_mut() {
                        Some(e) => e.read(&mut buf).await,
                        None => std::future::pending().await,
                    } } => match r {
                        Ok(n @ 1..) => tail.push(&buf[..n]),
                        _ => stderr = None,
                    },
                    () = &mut write => {}
                }
            }
        };
        let outcome = tokio::time::timeout(self.config.timeout, run).await;
        // The attempt is over: nothing it started may go on.
        group.kill();
        let status = match outcome {
            Ok(status) => status,
            Err(_) => {
                let _ = child.wait().await;
                return Err(HandlerError::transient(format!(
                    "the command did not finish within {:?}; its process group was killed",
                    self.config.timeout
                )));
            }
        };
        let status = status.map_err(|e| HandlerError::transient(format!("waiting: {e}")))?;
        if let Some(e) = stderr.as_mut() {
            let _ = tokio::time::timeout(STDERR_DRAIN, read_into(e, &mut tail)).await;
        }
        let tail = snippet(&tail.0, STDERR_TAIL);
        match status.code() {
            Some(0) => Ok(()),
            Some(c) if self.config.transient_codes.contains(&c) => {
                Err(HandlerError::transient(format!("exit {c}: {tail}")))
            }
            Some(c) => Err(HandlerError::permanent(format!("exit {c}: {tail}"))),
            None => Err(HandlerError::transient(format!(
                "killed by a signal: {tail}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use orderly_engine::{Header, TopicPartition};

    use super::*;

    fn rec() -> Record {
        let mut r = Record::new(
            TopicPartition::new("t", 2),
            9,
            Some(Bytes::from_static(b"s-1")),
            Some(Bytes::from_static(b"hello")),
        );
        r.headers.push(Header::new("event-id", "e-9"));
        r
    }

    async fn run(cmd: &str) -> Result<(), HandlerError> {
        ExecHandler::new(ExecConfig::new(cmd), SessionRouter::default())
            .handle(&rec(), Attempt::FIRST)
            .await
    }

    #[tokio::test]
    async fn exit_codes_stdin_and_environment() {
        assert_eq!(
            run(r#"test "$(cat)" = hello && test "$ORDERLY_SESSION" = s-1 && test "$ORDERLY_OFFSET" = 9 && test "$ORDERLY_H_EVENT_ID" = e-9"#).await,
            Ok(())
        );
        assert!(matches!(
            run("exit 75").await,
            Err(HandlerError::Transient { .. })
        ));
        let Err(HandlerError::Permanent { message: t, .. }) = run("echo broken >&2; exit 3").await
        else {
            panic!("permanent expected");
        };
        assert_eq!(t, "exit 3: broken");
        assert!(matches!(
            run("kill -9 $$").await,
            Err(HandlerError::Transient { .. })
        ));
    }

    #[tokio::test]
    async fn a_record_too_large_for_the_environment_is_a_permanent_failure() {
        // One variable longer than the kernel takes (MAX_ARG_STRLEN, 128 KiB on Linux): the
        // process cannot start with this record, however often it is tried.
        let mut r = rec();
        r.headers.push(Header::new("big", "x".repeat(200 << 10)));
        let e = ExecHandler::new(ExecConfig::new("true"), SessionRouter::default())
            .handle(&r, Attempt::FIRST)
            .await;
        assert!(
            matches!(&e, Err(HandlerError::Permanent { message, .. }) if message.contains("starting the command")),
            "{e:?}"
        );
    }
}
