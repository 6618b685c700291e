//! `ExecHandler` and `PipeHandler` with real child processes: a timed-out or cancelled attempt ends
//! its work (process group, child restart) before the next attempt, encoded environment values,
//! the environment allow-list, bounded and non-blocking reads of what children write, answers a
//! pipe child wrote before its restart.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use orderly_engine::{Attempt, Handler, HandlerError, Header, Record, TopicPartition};
use orderly_handlers::{ExecConfig, ExecHandler, PipeConfig, PipeHandler, SessionRouter};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("orderly-proc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn rec(offset: i64, value: &str) -> Record {
    Record::new(
        TopicPartition::new("t", 0),
        offset,
        Some(Bytes::from_static(b"s-1")),
        Some(Bytes::from(value.to_owned())),
    )
}

fn attempt(n: u32) -> Attempt {
    Attempt {
        number: n,
        backoff: Duration::ZERO,
    }
}

/// Whether `pid` is a process that can still run (a zombie has ended its work).
fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .map(|(_, r)| r.trim_start().chars().next());
    !matches!(state, Some(Some('Z' | 'X')) | None)
}

/// Waits until `pid` has ended; `false` if it still runs after a generous while (a process
/// that was sent SIGKILL dies in far less; the bound is not what the test measures).
async fn ended(pid: i32) -> bool {
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

async fn wait_for_file(path: &Path) {
    while read_pid(path).is_none() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn exec(cmd: &str, timeout: Duration) -> ExecHandler {
    let mut c = ExecConfig::new(cmd);
    c.timeout = timeout;
    ExecHandler::new(c, SessionRouter::default())
}

#[tokio::test]
async fn a_timed_out_exec_attempt_kills_its_whole_process_group() {
    let dir = tmp("exec-timeout");
    let gc = dir.join("gc");
    let cmd = format!("sleep 1000 & echo $! > {}; wait", gc.display());
    // The timeout must fire after the grandchild wrote its pid; on a busy machine the first
    // timeouts may be too short for that, so it doubles until it is (the bound is generous).
    let mut t = Duration::from_millis(500);
    let pid = loop {
        let _ = std::fs::remove_file(&gc);
        let r = exec(&cmd, t).handle(&rec(1, "v"), attempt(1)).await;
        assert!(matches!(r, Err(HandlerError::Transient { .. })), "{r:?}");
        if let Some(pid) = read_pid(&gc) {
            break pid;
        }
        assert!(t < Duration::from_secs(30), "the grandchild never started");
        t *= 2;
    };
    assert!(
        ended(pid).await,
        "grandchild {pid} outlived the timed-out attempt"
    );
}

#[tokio::test]
async fn a_cancelled_exec_attempt_kills_its_whole_process_group() {
    let dir = tmp("exec-cancel");
    let gc = dir.join("gc");
    let h = exec(
        &format!("sleep 1000 & echo $! > {}; wait", gc.display()),
        Duration::from_secs(600),
    );
    // The attempt's future is dropped (the engine's attempt timeout, a stop) once the
    // grandchild runs.
    let r1 = rec(1, "v");
    tokio::select! {
        r = h.handle(&r1, attempt(1)) => panic!("finished: {r:?}"),
        () = wait_for_file(&gc) => {}
    }
    let pid = read_pid(&gc).unwrap();
    assert!(
        ended(pid).await,
        "grandchild {pid} outlived the cancelled attempt"
    );
}

#[tokio::test]
async fn stderr_held_open_by_a_grandchild_does_not_hold_the_attempt() {
    let dir = tmp("exec-stderr");
    let gc = dir.join("gc");
    // `sh` exits at once; the grandchild keeps stderr open. The attempt ends with `sh` (the
    // timeout is far away), and the grandchild is ended with it.
    let h = exec(
        &format!(
            "sleep 1000 >&2 & echo $! > {}; echo broken >&2; exit 3",
            gc.display()
        ),
        Duration::from_secs(60),
    );
    let r = h.handle(&rec(1, "v"), attempt(1)).await;
    assert_eq!(r, Err(HandlerError::permanent("exit 3: broken")));
    let pid = read_pid(&gc).unwrap();
    assert!(ended(pid).await, "grandchild {pid} outlived the attempt");
}

#[tokio::test]
async fn stderr_is_kept_as_its_last_kibibyte() {
    // Far more stderr than is kept: the reason is the tail.
    let h = exec(
        "head -c 3000000 /dev/zero | tr '\\0' a >&2; echo; echo the-end >&2; exit 4",
        Duration::from_secs(60),
    );
    let Err(HandlerError::Permanent { message: t, .. }) = h.handle(&rec(1, "v"), attempt(1)).await
    else {
        panic!("permanent expected");
    };
    assert!(t.starts_with("exit 4: "), "{t}");
    assert!(t.ends_with("the-end"), "{t}");
    assert!(t.len() <= 1100, "{} bytes", t.len());
}

#[tokio::test]
async fn nul_and_non_utf8_bytes_reach_the_child_base64_encoded() {
    let mut r = Record::new(
        TopicPartition::new("t", 0),
        5,
        Some(Bytes::from_static(b"k\0ey")),
        Some(Bytes::from_static(b"v")),
    );
    r.headers
        .push(Header::new("bin", Bytes::from_static(&[0xff, 0x00, 0x41])));
    r.headers
        .push(Header::new("nul", Bytes::from_static(b"a\0b")));
    r.headers.push(Header::new("plain", "text"));
    let h = exec(
        r#"test "$ORDERLY_KEY" = awBleQ== && test "$ORDERLY_KEY_ENCODING" = base64 &&
           test "$ORDERLY_H_BIN" = /wBB && test "$ORDERLY_H_BIN_ENCODING" = base64 &&
           test "$ORDERLY_H_NUL" = YQBi && test "$ORDERLY_H_NUL_ENCODING" = base64 &&
           test "$ORDERLY_H_PLAIN" = text && test -z "${ORDERLY_H_PLAIN_ENCODING+set}" || exit 9"#,
        Duration::from_secs(60),
    );
    assert_eq!(h.handle(&r, attempt(1)).await, Ok(()));
}

/// What a child gets from orderly's own environment (and every `LC_*`).
const PASSED: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
];

/// Variables a shell sets by itself.
const SHELL_SET: &[&str] = &["PWD", "OLDPWD", "SHLVL", "_"];

fn names(env_dump: &str) -> Vec<String> {
    env_dump
        .lines()
        .filter_map(|l| l.split_once('=').map(|(n, _)| n.to_owned()))
        .collect()
}

#[tokio::test]
async fn the_child_gets_only_the_allowed_environment() {
    // cargo runs tests with CARGO_* variables (and this process may have ORDERLY_* ones, as
    // orderly itself does: ORDERLY_SASL_PASSWORD); none of them may reach the child.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let dir = tmp("exec-env");
    let out = dir.join("env");
    let h = exec(&format!("env > {}", out.display()), Duration::from_secs(60));
    assert_eq!(h.handle(&rec(1, "v"), attempt(1)).await, Ok(()));
    let seen = names(&std::fs::read_to_string(&out).unwrap());
    let record = [
        "ORDERLY_TOPIC",
        "ORDERLY_PARTITION",
        "ORDERLY_OFFSET",
        "ORDERLY_ATTEMPT",
        "ORDERLY_TIMESTAMP",
        "ORDERLY_SESSION",
        "ORDERLY_KEY",
        "ORDERLY_TRACEPARENT",
    ];
    for n in &seen {
        let allowed = PASSED.contains(&n.as_str())
            || n.starts_with("LC_")
            || SHELL_SET.contains(&n.as_str())
            || record.contains(&n.as_str());
        assert!(allowed, "{n} reached the child");
    }
    assert!(seen.iter().any(|n| n == "PATH"), "{seen:?}");
}

#[tokio::test]
async fn named_variables_pass_to_the_child() {
    let mut c =
        ExecConfig::new(r#"test -n "$CARGO_MANIFEST_DIR" && test -z "${CARGO_PKG_NAME+set}""#);
    c.pass_env = vec!["CARGO_MANIFEST_DIR".into()];
    let h = ExecHandler::new(c, SessionRouter::default());
    assert_eq!(h.handle(&rec(1, "v"), attempt(1)).await, Ok(()));
}

/// A pipe child in `sh`: logs `PID OFFSET ATTEMPT` for each line it reads to `log`, then answers
/// by the value: `hang` on attempt 1 starts a grandchild (pid to `gc`) and never answers,
/// `die` exits, `latin1` answers with a reason that is not UTF-8, `stall` writes a line that is
/// not UTF-8 and stops reading, `big` writes a 2 MB line; anything else is `ok`.
fn pipe_child(dir: &Path) -> String {
    let log = dir.join("log");
    let gc = dir.join("gc");
    format!(
        r#"while IFS= read -r l; do
  id=$(printf '%s' "$l" | sed 's/.*"id":\([0-9]*\).*/\1/')
  off=$(printf '%s' "$l" | sed 's/.*"offset":\([0-9]*\).*/\1/')
  att=$(printf '%s' "$l" | sed 's/.*"attempt":\([0-9]*\).*/\1/')
  echo "$$ $off $att" >> {log}
  case "$l" in
    *'"value":"hang"'*) if [ "$att" = 1 ]; then sleep 1000 & echo $! > {gc}; continue; fi;;
    *'"value":"die"'*) exit 1;;
    *'"value":"latin1"'*) printf '{{"id":%s,"result":"ok","reason":"\351"}}\n' "$id"; continue;;
    *'"value":"stall"'*) printf '\377\376\n'; exec sleep 1000;;
    *'"value":"big"'*) head -c 2000000 /dev/zero | tr '\0' x; echo; continue;;
  esac
  printf '{{"id":%s,"result":"ok"}}\n' "$id"
done"#,
        log = log.display(),
        gc = gc.display()
    )
}

/// The log lines of `offset`: (pid, attempt).
fn received(dir: &Path, offset: i64) -> Vec<(i32, u32)> {
    std::fs::read_to_string(dir.join("log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split(' ');
            let (p, o, a) = (w.next()?, w.next()?, w.next()?);
            if o.parse::<i64>().ok()? != offset {
                return None;
            }
            Some((p.parse().ok()?, a.parse().ok()?))
        })
        .collect()
}

fn pipe(dir: &Path, timeout: Duration, backoff: Duration) -> PipeHandler {
    let mut c = PipeConfig::new(pipe_child(dir));
    c.timeout = timeout;
    c.restart_backoff = backoff;
    PipeHandler::spawn(c, SessionRouter::default())
}

#[tokio::test]
async fn a_timed_out_pipe_attempt_restarts_the_child_before_the_next_attempt() {
    let dir = tmp("pipe-timeout");
    let h = pipe(&dir, Duration::from_millis(500), Duration::from_millis(10));
    assert_eq!(h.handle(&rec(1, "fine"), attempt(1)).await, Ok(()));
    let r = h.handle(&rec(2, "hang"), attempt(1)).await;
    assert!(matches!(r, Err(HandlerError::Transient { .. })), "{r:?}");
    // The retry: whichever child gets it, the one that held the first attempt has ended, and
    // its grandchild with it.
    let mut n = 2;
    loop {
        match h.handle(&rec(2, "hang"), attempt(n)).await {
            Ok(()) => break,
            // A busy machine may time out the retry too; the bound is generous.
            Err(e) => assert!(n < 20, "{e:?}"),
        }
        n += 1;
    }
    let got = received(&dir, 2);
    let (first, _) = got[0];
    let (last, _) = *got.last().unwrap();
    assert_ne!(
        first, last,
        "the retry went to the child holding the first attempt: {got:?}"
    );
    assert!(
        ended(first).await,
        "the child that held the record still runs"
    );
    let gc = read_pid(&dir.join("gc")).unwrap();
    assert!(ended(gc).await, "its grandchild still runs");
}

#[tokio::test]
async fn a_cancelled_pipe_attempt_is_never_handed_to_a_child() {
    let dir = tmp("pipe-cancel");
    // A long restart delay: the cancelled record waits in the queue while the child is down.
    let h = pipe(&dir, Duration::from_secs(60), Duration::from_secs(1));
    assert_eq!(h.handle(&rec(1, "fine"), attempt(1)).await, Ok(()));
    let r = h.handle(&rec(2, "die"), attempt(1)).await;
    assert!(matches!(r, Err(HandlerError::Transient { .. })), "{r:?}");
    // Polled once (queued), then dropped.
    let r3 = rec(3, "fine");
    tokio::select! {
        biased;
        r = h.handle(&r3, attempt(1)) => panic!("answered while the child is down: {r:?}"),
        () = std::future::ready(()) => {}
    }
    assert_eq!(h.handle(&rec(4, "fine"), attempt(1)).await, Ok(()));
    assert_eq!(
        received(&dir, 3),
        vec![],
        "the cancelled record reached a child"
    );
}

#[tokio::test]
async fn a_non_utf8_answer_fails_its_record_and_keeps_the_child() {
    let dir = tmp("pipe-latin1");
    let h = pipe(&dir, Duration::from_secs(60), Duration::from_millis(10));
    let r = h.handle(&rec(1, "latin1"), attempt(1)).await;
    let Err(HandlerError::Transient { message: t, .. }) = r else {
        panic!("transient expected: {r:?}");
    };
    assert!(t.contains("UTF-8"), "{t}");
    assert_eq!(h.handle(&rec(2, "fine"), attempt(1)).await, Ok(()));
    assert_eq!(received(&dir, 1)[0].0, received(&dir, 2)[0].0, "restarted");
}

#[tokio::test]
async fn a_child_that_stops_reading_is_restarted_not_waited_for() {
    let dir = tmp("pipe-stall");
    let h = pipe(&dir, Duration::from_secs(2), Duration::from_millis(10));
    let r = h.handle(&rec(1, "stall"), attempt(1)).await;
    assert!(matches!(r, Err(HandlerError::Transient { .. })), "{r:?}");
    // The supervisor goes on: a later record is handled by a new child. Each try that times
    // out restarts the child again; the bound on tries is generous, not the assertion.
    let mut n = 1;
    while let Err(e) = h.handle(&rec(2, "fine"), attempt(n)).await {
        assert!(n < 10, "{e:?}");
        n += 1;
    }
    let stalled = received(&dir, 1)[0].0;
    assert!(ended(stalled).await, "the stalled child still runs");
}

#[tokio::test]
async fn an_over_long_line_restarts_the_child_and_says_why() {
    let dir = tmp("pipe-big");
    let h = pipe(&dir, Duration::from_secs(60), Duration::from_millis(10));
    let r = h.handle(&rec(1, "big"), attempt(1)).await;
    let Err(HandlerError::Transient { message: t, .. }) = r else {
        panic!("transient expected: {r:?}");
    };
    assert!(t.contains("1 MiB"), "{t}");
    assert_eq!(h.handle(&rec(2, "fine"), attempt(1)).await, Ok(()));
    let big = received(&dir, 1)[0].0;
    assert_ne!(big, received(&dir, 2)[0].0, "not restarted");
}

/// The child holds record `held` unanswered until it has also read `trigger`; then it writes
/// its pid to `got`, waits for the file `go`, answers `held`, writes `wrote` and hangs.
fn late_answer_child(dir: &Path) -> String {
    format!(
        r#"held=; trig=
while IFS= read -r l; do
  id=$(printf '%s' "$l" | sed 's/.*"id":\([0-9]*\).*/\1/')
  case "$l" in
    *'"value":"held"'*) held=$id;;
    *'"value":"trigger"'*) trig=$id;;
    *) printf '{{"id":%s,"result":"ok"}}\n' "$id"; continue;;
  esac
  if [ -n "$held" ] && [ -n "$trig" ]; then
    echo $$ > {d}/got
    while [ ! -e {d}/go ]; do sleep 0.01; done
    printf '{{"id":%s,"result":"ok"}}\n' "$held"
    echo $$ > {d}/wrote
    exec sleep 1000
  fi
done"#,
        d = dir.display()
    )
}

// A current-thread runtime: the supervisor runs only when this test yields, so it finds the
// restart report and the child's answer ready at the same time.
#[tokio::test]
async fn an_answer_written_before_a_restart_still_counts() {
    let dir = tmp("pipe-late");
    let mut c = PipeConfig::new(late_answer_child(&dir));
    c.timeout = Duration::from_secs(60);
    c.restart_backoff = Duration::from_millis(10);
    let h = std::sync::Arc::new(PipeHandler::spawn(c, SessionRouter::default()));
    let ha = h.clone();
    let held = tokio::spawn(async move { ha.handle(&rec(1, "held"), attempt(1)).await });
    let trigger = rec(2, "trigger");
    let got = dir.join("got");
    {
        let t = h.handle(&trigger, attempt(1));
        tokio::pin!(t);
        tokio::select! {
            biased;
            r = &mut t => panic!("trigger answered: {r:?}"),
            () = wait_for_file(&got) => {}
        }
        // Dropped here, unanswered: the child that holds it is replaced.
    }
    std::fs::write(dir.join("go"), "").unwrap();
    // Blocks the runtime's only thread until the child has written the held record's answer.
    while read_pid(&dir.join("wrote")).is_none() {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        held.await.unwrap(),
        Ok(()),
        "the answer written before the restart was lost"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
