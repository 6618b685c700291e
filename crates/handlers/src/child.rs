//! What the process handlers share: the environment a child gets, a process group per child, the start-up check of a command.
//!
//! **Environment.** A child starts with an empty environment plus the variables named in
//! [`PASS_ENV`], every `LC_*` variable and the names the operator adds (`--pass-env`), each taken
//! from orderly's own environment when set there; then the record's `ORDERLY_*` variables. So
//! orderly's own settings and secrets (`ORDERLY_SASL_PASSWORD`, any credential in its
//! environment) never reach a handler unless named.
//!
//! **Process group.** Each child is the leader of a process group of its own, and a
//! `ProcessGroup` kills the whole group (SIGKILL), so the processes a command starts
//! (`sh -c 'a | b'`, a script's background jobs) end with it. A process that moves itself into
//! another group or session (`setsid`) escapes; nothing short of a cgroup could follow it.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Stdio;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use rustix::process::{Pid, Signal, kill_process_group};
use tokio::process::{Child, Command};

/// Variables of orderly's environment every child gets (when set), besides every `LC_*`.
pub const PASS_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
];

/// A command that cannot run at all: `sh` cannot be started, or the program the command
/// starts with does not exist or is not executable.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `sh` itself cannot be started (an image without a shell).
    #[error("cannot start `sh`: {source}")]
    NoShell {
        /// Why.
        source: std::io::Error,
    },
    /// The command's first word names no program `sh` can run.
    #[error("`{program}`, the program the command starts, is not one `sh` can find and run")]
    NoProgram {
        /// The command's first word.
        program: String,
    },
}

/// Whether a variable of orderly's environment passes to children.
fn passes(name: &OsStr, extra: &[String]) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    PASS_ENV.contains(&name) || name.starts_with("LC_") || extra.iter().any(|e| e == name)
}

/// `sh -c command` in a process group of its own, with the environment described in the
/// module doc (the record's variables are the caller's to add).
pub(crate) fn command(command: &str, pass_env: &[String]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c").arg(command).env_clear().process_group(0);
    for (k, v) in std::env::vars_os() {
        if passes(&k, pass_env) {
            c.env(k, v);
        }
    }
    c
}

/// A value for an environment variable: itself when it is UTF-8 without NUL, else base64
/// (`true`), since a variable cannot hold a NUL byte and handlers expect text.
pub(crate) fn env_value(bytes: &[u8]) -> (OsString, bool) {
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.contains('\0') => (OsString::from(s), false),
        _ => (OsString::from(B64.encode(bytes)), true),
    }
}

/// Sets `name` to `bytes` on `cmd`, base64 with `<name>_ENCODING=base64` beside it when the
/// bytes are not UTF-8 or hold a NUL.
pub(crate) fn set_env(cmd: &mut Command, name: &str, bytes: &[u8]) {
    let (v, b64) = env_value(bytes);
    cmd.env(name, v);
    if b64 {
        cmd.env(format!("{name}_ENCODING"), "base64");
    }
}

/// The process group of a child started by [`command`]; killed (SIGKILL) by [`Self::kill`] or
/// on drop, so a cancelled attempt or a dropped handler leaves nothing running.
#[derive(Debug)]
pub(crate) struct ProcessGroup(Option<Pid>);

impl ProcessGroup {
    /// The group `child` leads.
    pub(crate) fn of(child: &Child) -> Self {
        Self(
            child
                .id()
                .and_then(|p| i32::try_from(p).ok())
                .and_then(Pid::from_raw),
        )
    }

    /// Kills every process of the group (once; later calls do nothing). Called while the leader
    /// is unreaped, or just after its reaping: a group id is not reused while any process of the
    /// group lives, and the kernel hands out process ids in sequence, so the id names no other
    /// group then.
    pub(crate) fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH: the group has ended already.
            let _ = kill_process_group(pgid, Signal::KILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The first word of `command` when it plainly names a program (no quoting, expansion or
/// assignment, which only the shell can read).
fn program(command: &str) -> Option<&str> {
    let word = command.split_whitespace().next()?;
    let plain = word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_./+-".contains(c));
    (plain && !word.starts_with('-')).then_some(word)
}

/// Checks at start-up that `command` can run: `sh` starts (with the environment children get),
/// and the command's first word, when it plainly names a program, is a builtin, a program on
/// `PATH`, or (with a `/`) an executable file. Runs nothing of the command itself.
pub async fn check(command_line: &str, pass_env: &[String]) -> Result<(), StartError> {
    let word = program(command_line);
    let probe = match word {
        Some(w) if !w.contains('/') => "command -v \"$1\" >/dev/null 2>&1",
        _ => "exit 0",
    };
    let status = command(probe, pass_env)
        .arg("sh")
        .args(word)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|source| StartError::NoShell { source })?;
    let found = match word {
        Some(w) if w.contains('/') => std::fs::metadata(Path::new(w))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0),
        _ => status.success(),
    };
    match word {
        Some(w) if !found => Err(StartError::NoProgram {
            program: w.to_owned(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_is_the_plain_first_word() {
        assert_eq!(program("./handle.sh --fast"), Some("./handle.sh"));
        assert_eq!(program("  python3 h.py"), Some("python3"));
        assert_eq!(program("A=1 run"), None);
        assert_eq!(program("\"my prog\" x"), None);
        assert_eq!(program("$HOME/bin/x"), None);
        assert_eq!(program(""), None);
    }

    #[test]
    fn env_values_without_nul_stay_text() {
        assert_eq!(env_value(b"abc"), (OsString::from("abc"), false));
        assert_eq!(env_value(b"a\0b"), (OsString::from("YQBi"), true));
        assert_eq!(
            env_value(&[0xff, 0x00, 0x41]),
            (OsString::from("/wBB"), true)
        );
    }

    #[tokio::test]
    async fn check_refuses_a_missing_program_and_accepts_builtins_and_programs() {
        assert!(check("cat", &[]).await.is_ok());
        assert!(check("while read l; do :; done", &[]).await.is_ok());
        assert!(check("exit 0", &[]).await.is_ok());
        assert!(check("\"quoted\" prog", &[]).await.is_ok());
        let e = check("no-such-program-orderly-xyz --flag", &[])
            .await
            .unwrap_err();
        assert!(matches!(e, StartError::NoProgram { .. }), "{e}");
        assert!(e.to_string().contains("no-such-program-orderly-xyz"), "{e}");
        let e = check("./no/such/script.sh", &[]).await.unwrap_err();
        assert!(matches!(e, StartError::NoProgram { .. }), "{e}");
    }
}
