//! `ExecHandler`: one process per record, the value on stdin, metadata in `ORDERLY_*` variables, the exit code as the outcome.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use orderly_engine::{Attempt, Handler, HandlerError, Record};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::sync::Semaphore;

use crate::meta::{Meta, snippet};
use crate::session::{SESSION_HEADER, SessionRouter};

/// Settings of an [`ExecHandler`]; `ExecConfig::new(cmd)` gives the documented defaults.
#[derive(Debug, Clone)]
pub struct ExecConfig {
    /// The command, run by `sh -c`.
    pub command: String,
    /// Exit codes that mean "try again". Default `[75]` (EX_TEMPFAIL).
    pub transient_codes: Vec<i32>,
    /// Processes running at once at most. Default 64.
    pub concurrency: usize,
    /// Limit for one process; on expiry it is killed and the attempt is transient. Default 30 s.
    pub timeout: Duration,
}

impl ExecConfig {
    /// Defaults for `command`.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            transient_codes: vec![75],
            concurrency: 64,
            timeout: Duration::from_secs(30),
        }
    }
}

/// Runs one process per record.
///
/// The value is written to the process's stdin (then stdin is closed). The environment carries
/// `ORDERLY_TOPIC`, `ORDERLY_PARTITION`, `ORDERLY_OFFSET`, `ORDERLY_ATTEMPT`,
/// `ORDERLY_TIMESTAMP`, `ORDERLY_SESSION`, `ORDERLY_KEY` (with `ORDERLY_KEY_ENCODING=base64`
/// when the key is not UTF-8), `ORDERLY_TRACEPARENT`, and each Kafka header as
/// `ORDERLY_H_<NAME>` (upper-cased, non-alphanumerics as `_`). Exit 0 is done, an exit code in
/// [`ExecConfig::transient_codes`] (or death by a signal) is transient, any other exit is
/// permanent with the last 1 KiB of stderr as the reason.
///
/// Cancel safety: the child is killed when the attempt's future is dropped.
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

impl Handler for ExecHandler {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        let meta = Meta::of(record, attempt, &self.router)?;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| HandlerError::Transient("handler closed".into()))?;
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(&self.config.command)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in meta.pairs(true) {
            cmd.env(k, v);
        }
        cmd.env("ORDERLY_TRACEPARENT", &meta.traceparent);
        for h in &record.headers {
            if h.key == SESSION_HEADER {
                continue;
            }
            if let Some(v) = h.value.as_deref() {
                cmd.env(env_name(&h.key), String::from_utf8_lossy(v).as_ref());
            }
        }
        // Error texts name the command, never quote it: they reach logs and the dead letter's
        // error header, and a command line may carry a secret.
        let mut child = cmd
            .spawn()
            .map_err(|e| HandlerError::Transient(format!("starting the command: {e}")))?;
        let value = record.value.clone().unwrap_or_default();
        let mut stdin = child.stdin.take();
        let mut stderr = child.stderr.take();
        let run = async {
            // A child that does not read its stdin closes it early: that is not an error.
            let write = async {
                if let Some(mut s) = stdin.take() {
                    let _ = s.write_all(&value).await;
                    let _ = s.shutdown().await;
                }
            };
            let read = async {
                let mut buf = Vec::new();
                if let Some(e) = stderr.as_mut() {
                    let _ = e.read_to_end(&mut buf).await;
                }
                buf
            };
            let ((), err) = tokio::join!(write, read);
            let status = child.wait().await;
            (status, err)
        };
        let (status, err) = tokio::time::timeout(self.config.timeout, run)
            .await
            .map_err(|_| {
                HandlerError::Transient(format!(
                    "the command did not finish within {:?}",
                    self.config.timeout
                ))
            })?;
        let status = status.map_err(|e| HandlerError::Transient(format!("waiting: {e}")))?;
        let tail = snippet(&err[err.len().saturating_sub(1024)..], 1024);
        match status.code() {
            Some(0) => Ok(()),
            Some(c) if self.config.transient_codes.contains(&c) => {
                Err(HandlerError::Transient(format!("exit {c}: {tail}")))
            }
            Some(c) => Err(HandlerError::Permanent(format!("exit {c}: {tail}"))),
            None => Err(HandlerError::Transient(format!(
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
            Err(HandlerError::Transient(_))
        ));
        let Err(HandlerError::Permanent(t)) = run("echo broken >&2; exit 3").await else {
            panic!("permanent expected");
        };
        assert_eq!(t, "exit 3: broken");
        assert!(matches!(
            run("kill -9 $$").await,
            Err(HandlerError::Transient(_))
        ));
    }
}
