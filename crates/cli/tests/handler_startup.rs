//! `orderly consume --exec/--pipe` with a command that cannot run at all: one clear line and
//! exit 1 at start-up, before any broker is contacted, instead of a failed attempt per record.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_orderly");

/// Runs `orderly` (no broker listens at the bootstrap address) and returns its exit code and
/// stderr; a run that does not end is killed and fails the test.
fn run(args: &[&str], path: Option<&str>) -> (i32, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env("RUST_LOG", "off")
        .env("ORDERLY_ADMIN_ADDR", "off")
        .env_remove("ORDERLY_BOOTSTRAP")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    let mut child = cmd.spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            return (status.code().unwrap_or(-1), err);
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still runs after 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

const BASE: [&str; 7] = [
    "consume",
    "--group",
    "g",
    "--topic",
    "t",
    "--bootstrap",
    "127.0.0.1:1",
];

#[test]
fn a_command_that_cannot_run_is_a_start_up_error() {
    for flag in ["--exec", "--pipe"] {
        let (code, err) = run(
            &[&BASE[..], &[flag, "no-such-program-orderly-xyz --fast"]].concat(),
            None,
        );
        assert_eq!(code, 1, "{flag}: {err}");
        assert!(err.contains(flag), "{flag}: {err}");
        assert!(err.contains("no-such-program-orderly-xyz"), "{flag}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    }
    // No `sh` at all (an image built from scratch).
    let (code, err) = run(
        &[&BASE[..], &["--exec", "cat"]].concat(),
        Some("/nonexistent-orderly-path"),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("`sh`"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
}
