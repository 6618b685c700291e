//! SASL/PLAIN on a release's `SASL_PLAINTEXT` listener: the library connects, `orderly status`
//! reads through it, a wrong password is refused.

use orderly_protocol::{BrokerConnection, ConnectionConfig};

use super::options::CompatOptions;
use super::orderly::orderly_env;
use super::outcome::Outcome;

/// The SASL/PLAIN user every release's `SASL_PLAINTEXT` listener accepts.
pub(super) const SASL_USER: &str = "orderly";
/// Its password.
pub(super) const SASL_PASSWORD: &str = "orderly-compat";

/// SASL on the release's `SASL_PLAINTEXT` listener (SASL/PLAIN): the library connects, with the
/// SaslHandshake and SaslAuthenticate versions it negotiated shown; `orderly status` reads the
/// workload's group through it (lag 0); a wrong password is refused by `orderly status` with a
/// non-zero exit instead of being retried.
pub(super) fn check_sasl(
    rt: &tokio::runtime::Runtime,
    opts: &CompatOptions,
    bootstrap: &str,
    group: &str,
    outcome: &mut Outcome,
) {
    let config = ConnectionConfig {
        sasl: Some(orderly_protocol::Sasl::Plain {
            username: SASL_USER.into(),
            password: SASL_PASSWORD.into(),
        }),
        ..ConnectionConfig::default()
    };
    match rt.block_on(BrokerConnection::connect(bootstrap, &config)) {
        Ok(conn) => {
            for n in conn.negotiated() {
                if n.api.starts_with("Sasl") {
                    match n.chosen {
                        Some(v) => eprintln!("    SASL/PLAIN: {} v{v}", n.api),
                        None => outcome.failures.push(format!(
                            "SASL/PLAIN connected, but {} has no version in common: {:?}",
                            n.api, n
                        )),
                    }
                }
            }
        }
        Err(e) => {
            outcome
                .failures
                .push(format!("SASL/PLAIN connect to {bootstrap}: {e}"));
            return;
        }
    }
    let sasl_env = |password: &'static str| {
        [
            ("ORDERLY_SASL_MECHANISM", "PLAIN"),
            ("ORDERLY_SASL_USERNAME", SASL_USER),
            ("ORDERLY_SASL_PASSWORD", password),
        ]
    };
    let status = orderly_env(
        opts,
        bootstrap,
        &["status", "--group", group, "--json"],
        &sasl_env(SASL_PASSWORD),
    );
    let lag = serde_json::from_slice::<serde_json::Value>(&status.stdout)
        .ok()
        .and_then(|v| v.get("total_lag").and_then(serde_json::Value::as_i64));
    if !status.status.success() || lag != Some(0) {
        outcome.failures.push(format!(
            "orderly status over SASL/PLAIN: {} lag {lag:?}: {}",
            status.status,
            String::from_utf8_lossy(&status.stderr).trim()
        ));
    }
    let wrong = orderly_env(
        opts,
        bootstrap,
        &["status", "--group", group],
        &sasl_env("not-the-password"),
    );
    let err = String::from_utf8_lossy(&wrong.stderr);
    if wrong.status.success() {
        outcome.failures.push(format!(
            "orderly status with a wrong SASL password succeeded: {}",
            err.trim()
        ));
    } else {
        eprintln!(
            "    SASL/PLAIN, wrong password: orderly status {}: {}",
            wrong.status,
            err.trim()
        );
    }
}
