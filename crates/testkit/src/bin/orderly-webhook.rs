//! `orderly-webhook`: the checking webhook (`orderly_testkit::webhook`) as a process of its own,
//! the way a team's service runs beside `orderly consume --http`.
//!
//! ```text
//! orderly-webhook [--listen 127.0.0.1:0] [--transient-pct 10] [--no-permanent]
//! ```
//!
//! Prints `http://ADDR/records` on its first stdout line once it listens, then serves until it
//! is killed. `GET /report` answers what it saw as JSON.

use std::io::Write;
use std::time::Duration;

use orderly_testkit::webhook::{Rules, Webhook};

const USAGE: &str = "usage: orderly-webhook [--listen ADDR] [--transient-pct N] [--no-permanent]";

fn main() -> std::process::ExitCode {
    let mut listen = "127.0.0.1:0".to_owned();
    let mut rules = Rules {
        transient_pct: 10,
        permanent: true,
        work: Duration::ZERO,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--listen" => match args.next() {
                Some(v) => listen = v,
                None => return fail("--listen needs an address"),
            },
            "--transient-pct" => match args.next().and_then(|v| v.parse().ok()) {
                Some(v) if v <= 100 => rules.transient_pct = v,
                _ => return fail("--transient-pct needs a number 0..=100"),
            },
            "--no-permanent" => rules.permanent = false,
            "-h" | "--help" => {
                let _ = writeln!(std::io::stdout(), "{USAGE}");
                return std::process::ExitCode::SUCCESS;
            }
            other => return fail(&format!("unknown argument {other}")),
        }
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => return fail(&format!("cannot start the runtime: {e}")),
    };
    runtime.block_on(async move {
        let hook = match Webhook::start_on(&listen, rules).await {
            Ok(h) => h,
            Err(e) => return fail(&format!("cannot listen on {listen}: {e}")),
        };
        let mut out = std::io::stdout();
        if writeln!(out, "{}", hook.url())
            .and_then(|()| out.flush())
            .is_err()
        {
            return std::process::ExitCode::FAILURE;
        }
        std::future::pending::<()>().await;
        std::process::ExitCode::SUCCESS
    })
}

fn fail(message: &str) -> std::process::ExitCode {
    let _ = writeln!(std::io::stderr(), "orderly-webhook: {message}\n{USAGE}");
    std::process::ExitCode::from(2)
}
