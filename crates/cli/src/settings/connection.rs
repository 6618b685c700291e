//! The connection to the brokers: TLS and SASL settings built from their flags.

use std::path::Path;

#[cfg(feature = "tls")]
use anyhow::Context;
use anyhow::{Result, bail};
use orderly_protocol::Sasl;

/// Applies the TLS flags to `c`.
#[cfg_attr(
    not(feature = "tls"),
    allow(unused_variables, clippy::needless_pass_by_ref_mut)
)]
pub fn apply_tls(
    c: &mut orderly_protocol::ConnectionConfig,
    ca_file: Option<&Path>,
    server_name: Option<&str>,
) -> Result<()> {
    let Some(ca) = ca_file else {
        anyhow::ensure!(
            server_name.is_none(),
            "--tls-server-name needs --tls-ca-file"
        );
        return Ok(());
    };
    #[cfg(feature = "tls")]
    {
        let pem = std::fs::read(ca)
            .with_context(|| format!("cannot read --tls-ca-file {}", ca.display()))?;
        let mut t = orderly_protocol::tls::TlsConfig::with_root_certificates_pem(&pem)
            .map_err(|e| anyhow::anyhow!("--tls-ca-file {}: {e}", ca.display()))?;
        if let Some(n) = server_name {
            t = t.server_name(n);
        }
        c.tls = Some(t);
        Ok(())
    }
    #[cfg(not(feature = "tls"))]
    bail!(
        "--tls-ca-file: this orderly was built without its default `tls` feature; rebuild it with default features"
    )
}

/// The SASL settings for a mechanism name.
pub fn sasl(mechanism: &str, username: String, password: String) -> Result<Sasl> {
    Ok(match mechanism.to_ascii_uppercase().as_str() {
        "PLAIN" => Sasl::Plain { username, password },
        "SCRAM-SHA-256" => Sasl::ScramSha256 { username, password },
        "SCRAM-SHA-512" => Sasl::ScramSha512 { username, password },
        other => bail!(
            "invalid value {other:?} for --sasl-mechanism: expected PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
        ),
    })
}
