//! `orderly consume` configuration: one type filled by serde from a TOML file, by clap from `ORDERLY_*` variables and flags (flags win), then resolved into library types.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use orderly_consumer::ConsumerConfig;
use orderly_consumer::fetcher::RecordHook;
use orderly_engine::{DlqMode, EngineConfig, RetryPolicy};
use orderly_group::AutoOffsetReset;
use orderly_group::assignor::{
    Assignor, CooperativeStickyAssignor, RangeAssignor, RoundRobinAssignor,
};
use orderly_group::config::GroupProtocol;
use orderly_handlers::http::{
    CloudEvents, ExtraHeader, SigningKey, StatusClasses, StatusSet, mask_header,
};
use orderly_handlers::{
    ExecConfig, HttpBody, HttpConfig, HttpFormat, NoSession, PipeConfig, SessionFrom, SessionRouter,
};
use orderly_protocol::Sasl;
use serde::{Deserialize, Serialize};

/// A secret (a password): read from a flag, the environment, the file or a file of its own, never
/// printed, never in `Debug`.
#[derive(Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"********\"")
    }
}

impl Secret {
    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

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

/// A secret given directly (`direct_key`) or as a file holding it (`file_key`; a trailing newline
/// is ignored). Both at once is ambiguous and refused; which one wins across flags, variables and
/// the file is settled before (see [`ConsumeOpts::with_file`], [`ConsumeOpts::prefer_flags`]).
fn secret(
    direct_key: &str,
    direct: Option<&Secret>,
    file_key: &str,
    file: Option<&Path>,
) -> Result<Option<String>> {
    match (direct, file) {
        (Some(_), Some(_)) => bail!("pass only one of {direct_key} and {file_key}"),
        (Some(p), None) => Ok(Some(p.0.clone())),
        (None, Some(f)) => Ok(Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("cannot read {file_key} {}", f.display()))?
                .trim_end_matches(['\n', '\r'])
                .to_owned(),
        )),
        (None, None) => Ok(None),
    }
}

/// Keys of `orderly consume` settings that are alternatives to each other: a flag or variable
/// that sets one of them replaces whatever the file or a lower level set for the others.
const ALTERNATIVES: [&[&str]; 3] = [
    &["sasl-password", "sasl-password-file"],
    &["admin-token", "admin-token-file"],
    &["http", "exec", "pipe"],
];

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

/// One `--http-header 'Name: value'`: `Debug` (and `config check`) show the name and an
/// `env:VAR` or `@file` reference, never a literal value.
#[derive(Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct HeaderArg(String);

impl std::fmt::Debug for HeaderArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", mask_header(&self.0))
    }
}

impl std::str::FromStr for HeaderArg {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(HeaderArg(s.to_owned()))
    }
}

/// Every knob of `orderly consume`. Each is a flag, an `ORDERLY_<NAME>` variable and a key of the
/// `--config` TOML file (the flag name without `--`); unknown keys are rejected by name.
#[derive(clap::Args, Deserialize, Serialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[command(next_help_heading = "Kafka")]
pub struct ConsumeOpts {
    /// TOML configuration file; flags and ORDERLY_* variables override its values.
    #[arg(long, env = "ORDERLY_CONFIG", value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Bootstrap brokers, `host:port[,host:port]`.
    #[arg(long, env = "ORDERLY_BOOTSTRAP", value_delimiter = ',')]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<Vec<String>>,
    /// Consumer group id.
    #[arg(long, env = "ORDERLY_GROUP")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Topics to consume, `T[,T2]`.
    #[arg(long, env = "ORDERLY_TOPIC", value_delimiter = ',')]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<Vec<String>>,
    /// Dead-letter topic (must exist). Default `<group>.dlq`.
    #[arg(long, env = "ORDERLY_DLQ_TOPIC")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dlq_topic: Option<String>,
    /// Topic of the handler's replies that name none (must exist); with --http a non-empty 2xx
    /// body is then the record's reply. Replies are keyed by the session id unless they carry
    /// a key, and written before their record counts as done. Default none.
    #[arg(long, env = "ORDERLY_REPLY_TOPIC")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_topic: Option<String>,
    /// Exactly-once: replies, dead letters and the group's offsets commit in one Kafka
    /// transaction per commit interval, fenced by the member's generation; readers with
    /// isolation.level=read_committed see each record's output once. Default false.
    #[arg(long, env = "ORDERLY_EXACTLY_ONCE", num_args = 0..=1, default_missing_value = "true")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exactly_once: Option<bool>,
    /// With --exactly-once: the transactional id. Default `<group>.<group instance id>` for a
    /// static member, else `<group>.<random>`; give each instance a stable one so a restart aborts
    /// its predecessor's open transaction at once.
    #[arg(long, env = "ORDERLY_TRANSACTIONAL_ID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transactional_id: Option<String>,
    /// With --exactly-once: the transaction timeout (at least three commit intervals). Default 60s.
    #[arg(long, env = "ORDERLY_TRANSACTION_TIMEOUT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transaction_timeout: Option<String>,
    /// Which records fetches return: read-committed (records of aborted transactions and of
    /// open ones are not handed out) or read-uncommitted. Default read-committed.
    #[arg(long, env = "ORDERLY_ISOLATION", value_parser = ["read-committed", "read-uncommitted"])]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<String>,
    /// With --dlq-mode park-session: the compacted topic that keeps parked sessions across
    /// restarts and rebalances (created if missing). Default `<dlq topic>.parked`.
    #[arg(long, env = "ORDERLY_PARKED_TOPIC")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parked_topic: Option<String>,
    /// Client id sent to the brokers. Default orderly.
    #[arg(long, env = "ORDERLY_CLIENT_ID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. Default none.
    #[arg(long, env = "ORDERLY_SASL_MECHANISM")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_mechanism: Option<String>,
    /// SASL user name.
    #[arg(long, env = "ORDERLY_SASL_USERNAME")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_username: Option<String>,
    /// SASL password; prefer ORDERLY_SASL_PASSWORD or --sasl-password-file (a flag shows in `ps`).
    #[arg(long, env = "ORDERLY_SASL_PASSWORD", hide_env_values = true)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_password: Option<Secret>,
    /// File holding the SASL password (trailing newline ignored).
    #[arg(long, env = "ORDERLY_SASL_PASSWORD_FILE", value_name = "FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sasl_password_file: Option<PathBuf>,

    /// TLS to the brokers: trust the CA certificates in this PEM file (certificate chain and host
    /// name are verified; the crypto provider is picked for the CPU, see `orderly --version`).
    #[arg(long, env = "ORDERLY_TLS_CA_FILE", value_name = "FILE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<PathBuf>,
    /// TLS: verify broker certificates against this name instead of the host reached.
    #[arg(long, env = "ORDERLY_TLS_SERVER_NAME")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_server_name: Option<String>,

    /// POST each record to this http:// or https:// URL.
    #[arg(
        long,
        env = "ORDERLY_HTTP",
        help_heading = "Handler",
        value_name = "URL"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// HTTP body: raw (the value) or json (an envelope). Default raw.
    #[arg(long, env = "ORDERLY_HTTP_BODY", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_body: Option<String>,
    /// HTTP requests in flight at most. Default 256.
    #[arg(long, env = "ORDERLY_HTTP_CONCURRENCY", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_concurrency: Option<usize>,
    /// Let the HTTP requests in flight follow the endpoint's latency: start at 16, grow while the
    /// round trip holds, shrink when requests only queue, between 8 and --http-concurrency.
    /// Helps an endpoint that answers at once; on a loaded host it can hold a slow one back.
    /// Default false (always --http-concurrency).
    #[arg(long, env = "ORDERLY_HTTP_ADAPTIVE_CONCURRENCY", help_heading = "Handler", num_args = 0..=1, default_missing_value = "true")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_adaptive_concurrency: Option<bool>,
    /// Per-request timeout: connect, send, the answer's status (transient when hit); the body is
    /// read within it too, but once a status has arrived the status decides. Default 30s.
    #[arg(long, env = "ORDERLY_HTTP_TIMEOUT", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_timeout: Option<String>,
    /// Speak HTTP/2 instead of HTTP/1.1 (prior knowledge on http://, ALPN on https://). Default false.
    #[arg(long, env = "ORDERLY_HTTP_H2C", help_heading = "Handler", num_args = 0..=1, default_missing_value = "true")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_h2c: Option<bool>,
    /// Records of one session in one request, at most: when a session's next record starts and
    /// more of its records are already queued, up to this many consecutive ones go as one JSON
    /// array of envelopes (see the README for the answer contract). Default 1: one record per
    /// request, as documented for --http-body.
    #[arg(long, env = "ORDERLY_HTTP_BATCH_MAX", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_batch_max: Option<usize>,
    /// Bytes (keys, values, headers) of one batch request, at most; the first record always goes.
    /// Default 1MiB.
    #[arg(long, env = "ORDERLY_HTTP_BATCH_MAX_BYTES", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_batch_max_bytes: Option<String>,
    /// How long a session's next request may wait for more of its records to fill the batch:
    /// it goes when --http-batch-max records are queued or when it has waited this long. Trades
    /// up to this much latency for fuller requests when a session's records trickle in. Needs
    /// --http-batch-max above 1. Default 0: never wait, send what is already queued.
    #[arg(
        long,
        env = "ORDERLY_HTTP_BATCH_LINGER",
        help_heading = "Handler",
        value_name = "DURATION"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_batch_linger: Option<String>,
    /// https:// handler: trust the CA certificates in this PEM file instead of the public web
    /// PKI (compiled in). Chain and host name are always verified.
    #[arg(
        long,
        env = "ORDERLY_HTTP_CA_FILE",
        help_heading = "Handler",
        value_name = "FILE"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_ca_file: Option<PathBuf>,
    /// https:// handler: client certificate chain (PEM) for mTLS; needs --http-client-key.
    #[arg(
        long,
        env = "ORDERLY_HTTP_CLIENT_CERT",
        help_heading = "Handler",
        value_name = "FILE"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_client_cert: Option<PathBuf>,
    /// https:// handler: the private key (PEM) of --http-client-cert.
    #[arg(
        long,
        env = "ORDERLY_HTTP_CLIENT_KEY",
        help_heading = "Handler",
        value_name = "FILE"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_client_key: Option<PathBuf>,
    /// A header added to every request, 'Name: value' (repeatable; in ORDERLY_HTTP_HEADER one
    /// per line). The value may be `env:VAR` (read from the environment) or `@/path` (read from
    /// a file); literal values are masked in logs and `config check`.
    #[arg(
        long,
        env = "ORDERLY_HTTP_HEADER",
        help_heading = "Handler",
        value_name = "NAME: VALUE",
        value_delimiter = '\n',
        hide_env_values = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_header: Option<Vec<HeaderArg>>,
    /// Sign every request (`orderly-signature: t=<unix>,v1=<hex HMAC-SHA256 of "<t>." + body>`)
    /// with this secret; prefer ORDERLY_HTTP_SIGNING_SECRET or --http-signing-secret-file.
    #[arg(
        long,
        env = "ORDERLY_HTTP_SIGNING_SECRET",
        help_heading = "Handler",
        hide_env_values = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_signing_secret: Option<Secret>,
    /// File holding the request signing secret (trailing newline ignored).
    #[arg(
        long,
        env = "ORDERLY_HTTP_SIGNING_SECRET_FILE",
        help_heading = "Handler",
        value_name = "FILE"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_signing_secret_file: Option<PathBuf>,
    /// Statuses retried, codes and ranges. Default 408,425,429,500-599.
    #[arg(
        long,
        env = "ORDERLY_HTTP_RETRY_ON",
        help_heading = "Handler",
        value_name = "STATUSES"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_retry_on: Option<String>,
    /// Statuses dead-lettered even if --http-retry-on or 2xx holds them (any other non-2xx
    /// status is dead-lettered anyway). Default none.
    #[arg(
        long,
        env = "ORDERLY_HTTP_DEAD_LETTER_ON",
        help_heading = "Handler",
        value_name = "STATUSES"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_dead_letter_on: Option<String>,
    /// Request headers: plain (orderly-*, kafka-h-*) or cloudevents (plus the CloudEvents HTTP
    /// binding's ce-* attributes, binary content mode). Default plain.
    #[arg(long, env = "ORDERLY_HTTP_FORMAT", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_format: Option<String>,
    /// --http-format cloudevents: ce-type. Default dev.orderly.record.
    #[arg(long, env = "ORDERLY_HTTP_CE_TYPE", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_ce_type: Option<String>,
    /// --http-format cloudevents: ce-source. Default `/topics/<topic>/partitions/<partition>`.
    #[arg(long, env = "ORDERLY_HTTP_CE_SOURCE", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_ce_source: Option<String>,
    /// An idle pooled connection to the handler is closed after this (keep it below the
    /// server's keep-alive timeout; Node.js closes idle connections after 5s). Default 4s.
    #[arg(long, env = "ORDERLY_HTTP_POOL_IDLE_TIMEOUT", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_pool_idle_timeout: Option<String>,
    /// Run this shell command once per record (value on stdin, ORDERLY_* variables).
    #[arg(
        long,
        env = "ORDERLY_EXEC",
        help_heading = "Handler",
        value_name = "CMD"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec: Option<String>,
    /// Exit codes of --exec that mean "retry". Default 75.
    #[arg(
        long,
        env = "ORDERLY_EXEC_TRANSIENT_CODES",
        help_heading = "Handler",
        value_delimiter = ','
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_transient_codes: Option<Vec<i32>>,
    /// --exec processes running at once at most. Default 64.
    #[arg(long, env = "ORDERLY_EXEC_CONCURRENCY", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_concurrency: Option<usize>,
    /// Start this shell command once and speak JSON lines with it.
    #[arg(
        long,
        env = "ORDERLY_PIPE",
        help_heading = "Handler",
        value_name = "CMD"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipe: Option<String>,
    /// Lines in flight in the --pipe child at most (a batch is one line). Default 1024.
    #[arg(long, env = "ORDERLY_PIPE_CONCURRENCY", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipe_concurrency: Option<usize>,
    /// Records of one session in one --pipe line, at most: when a session's next record starts
    /// and more of its records are already queued, up to this many consecutive ones go as one
    /// line {"id":..,"batch":[envelope,..]} (see the README for the answer contract). Default 1:
    /// one record per line.
    #[arg(long, env = "ORDERLY_PIPE_BATCH_MAX", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipe_batch_max: Option<usize>,
    /// Bytes (keys, values, headers) of one batch line, at most; the first record always goes.
    /// Default 1MiB.
    #[arg(long, env = "ORDERLY_PIPE_BATCH_MAX_BYTES", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipe_batch_max_bytes: Option<String>,
    /// How long a session's next line may wait for more of its records to fill the batch: it
    /// goes when --pipe-batch-max records are queued or when it has waited this long. Needs
    /// --pipe-batch-max above 1. Default 0: never wait, send what is already queued.
    #[arg(
        long,
        env = "ORDERLY_PIPE_BATCH_LINGER",
        help_heading = "Handler",
        value_name = "DURATION"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipe_batch_linger: Option<String>,
    /// Variables of orderly's environment to pass to --exec and --pipe children, besides PATH,
    /// HOME, USER, LOGNAME, SHELL, LANG, LANGUAGE, TZ, TMPDIR and LC_* (the rest, orderly's
    /// settings and secrets included, never reaches them).
    #[arg(
        long,
        env = "ORDERLY_PASS_ENV",
        help_heading = "Handler",
        value_name = "NAME",
        value_delimiter = ','
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pass_env: Option<Vec<String>>,
    /// Limit for one --exec process or --pipe answer. Default 30s.
    #[arg(long, env = "ORDERLY_HANDLER_TIMEOUT", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handler_timeout: Option<String>,
    /// Session id: key, header:NAME or json:/pointer. Default key.
    #[arg(long, env = "ORDERLY_SESSION", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Records without a session id: unordered, dlq or partition. Default unordered.
    #[arg(long, env = "ORDERLY_NO_SESSION", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_session: Option<String>,

    /// Engine worker tasks. Default: available parallelism.
    #[arg(long, env = "ORDERLY_WORKERS", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// An idle session is evicted after this. Default 30s.
    #[arg(long, env = "ORDERLY_SESSION_IDLE_TIMEOUT", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_idle_timeout: Option<String>,
    /// Limit of one handler attempt inside the engine (off = none). Default off for --http/--exec/--pipe (they have their own timeouts).
    #[arg(long, env = "ORDERLY_ATTEMPT_TIMEOUT", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt_timeout: Option<String>,
    /// A record holding its partition back this long is dead-lettered as stuck (off = never). Default 5m.
    #[arg(long, env = "ORDERLY_STUCK_TIMEOUT", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stuck_timeout: Option<String>,
    /// First retry backoff ceiling. Default 100ms.
    #[arg(long, env = "ORDERLY_RETRY_BASE", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_base: Option<String>,
    /// Backoff growth per retry. Default 2.
    #[arg(long, env = "ORDERLY_RETRY_FACTOR", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_factor: Option<f64>,
    /// Largest backoff ceiling. Default 30s.
    #[arg(long, env = "ORDERLY_RETRY_CAP", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_cap: Option<String>,
    /// Attempts before a record is dead-lettered (0 = retry forever). Default 10.
    #[arg(long, env = "ORDERLY_RETRY_MAX_ATTEMPTS", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_max_attempts: Option<u32>,
    /// Bytes held per partition before it is paused (e.g. 16MiB). Default 16MiB.
    #[arg(long, env = "ORDERLY_PARTITION_BUDGET", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_budget: Option<String>,
    /// Bytes held across partitions before fetching pauses. Default 256MiB.
    #[arg(long, env = "ORDERLY_GLOBAL_BUDGET", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global_budget: Option<String>,
    /// Periodic commit interval: bounds the work a crash makes the next owner redo (finished records above the watermark travel in the commit metadata). Default 1s.
    #[arg(long, env = "ORDERLY_COMMIT_INTERVAL", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_interval: Option<String>,
    /// Bytes of commit metadata carrying the completed offsets above the commit point, so a new
    /// owner skips them (0 = off: every record above the commit point is handled again). Default 4KiB.
    #[arg(long, env = "ORDERLY_COMMIT_METADATA_LIMIT", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_metadata_limit: Option<String>,
    /// Header with an event id for per-session dedup ("" = off). Default event-id.
    #[arg(long, env = "ORDERLY_DEDUP_HEADER", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dedup_header: Option<String>,
    /// Header with a per-session sequence number to check order ("" = off). Default off.
    #[arg(long, env = "ORDERLY_SEQ_HEADER", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq_header: Option<String>,
    /// After a dead letter: continue with the session's next record, or park-session (its later
    /// records follow it to the DLQ, in order, until released at the admin endpoint). Default continue.
    #[arg(long, env = "ORDERLY_DLQ_MODE", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dlq_mode: Option<String>,
    /// On SIGTERM, attempts already running may finish for this long before they are cancelled
    /// (queued records and records waiting for a retry stop at once and stay above the commit);
    /// then the final commit (retried for at most 10 s) and the LeaveGroup. Default 10s,
    /// so the whole stop fits Kubernetes' default 30 s grace period. Alias --drain-timeout.
    #[arg(
        long,
        alias = "drain-timeout",
        env = "ORDERLY_SHUTDOWN_TIMEOUT",
        help_heading = "Engine"
    )]
    #[serde(skip_serializing_if = "Option::is_none", alias = "drain-timeout")]
    pub shutdown_timeout: Option<String>,
    /// A revoke waits this long for running records. Default 30s.
    #[arg(long, env = "ORDERLY_REVOKE_TIMEOUT", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoke_timeout: Option<String>,

    /// Assignors in preference order: cooperative-sticky, range, roundrobin. Default cooperative-sticky.
    #[arg(
        long,
        env = "ORDERLY_ASSIGNOR",
        help_heading = "Group",
        value_delimiter = ','
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assignor: Option<Vec<String>>,
    /// Group protocol: classic (JoinGroup/SyncGroup, client-side assignors) or consumer (KIP-848,
    /// broker-side assignment). Default classic.
    #[arg(long, env = "ORDERLY_GROUP_PROTOCOL", help_heading = "Group")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_protocol: Option<String>,
    /// With --group-protocol consumer: the broker-side assignor (uniform or range). Default: the broker's first.
    #[arg(long, env = "ORDERLY_SERVER_ASSIGNOR", help_heading = "Group")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_assignor: Option<String>,
    /// group.instance.id for static membership. Default none (dynamic).
    #[arg(long, env = "ORDERLY_INSTANCE_ID", help_heading = "Group")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    /// Group session timeout. Default 45s.
    #[arg(long, env = "ORDERLY_SESSION_TIMEOUT", help_heading = "Group")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_timeout: Option<String>,
    /// Heartbeat interval. Default 3s.
    #[arg(long, env = "ORDERLY_HEARTBEAT_INTERVAL", help_heading = "Group")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat_interval: Option<String>,
    /// Rebalance timeout. Default 5m.
    #[arg(long, env = "ORDERLY_REBALANCE_TIMEOUT", help_heading = "Group")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebalance_timeout: Option<String>,
    /// Without a committed offset start at: earliest or latest. Default earliest.
    #[arg(long, env = "ORDERLY_OFFSET_RESET", help_heading = "Group")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset_reset: Option<String>,

    /// Serve /metrics, /healthz, /readyz and /parked here ("off" = no server). Default 127.0.0.1:9898.
    #[arg(long, env = "ORDERLY_ADMIN_ADDR", help_heading = "Operations")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_addr: Option<String>,
    /// Bearer token that POST /parked/release requires (`Authorization: Bearer <token>`); prefer
    /// ORDERLY_ADMIN_TOKEN or --admin-token-file. Without one, mutating routes are served only
    /// on a loopback --admin-addr.
    #[arg(
        long,
        env = "ORDERLY_ADMIN_TOKEN",
        hide_env_values = true,
        help_heading = "Operations"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token: Option<Secret>,
    /// File holding the admin bearer token (trailing newline ignored).
    #[arg(
        long,
        env = "ORDERLY_ADMIN_TOKEN_FILE",
        value_name = "FILE",
        help_heading = "Operations"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token_file: Option<PathBuf>,
}

/// Which handler runs.
// One value per process: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum HandlerChoice {
    /// `--http`.
    Http(HttpConfig),
    /// `--exec`.
    Exec(ExecConfig),
    /// `--pipe`.
    Pipe(PipeConfig),
}

/// The resolved configuration of `orderly consume`.
#[derive(Debug)]
pub struct Resolved {
    /// Kafka, group, engine.
    pub consumer: ConsumerConfig,
    /// The handler.
    pub handler: HandlerChoice,
    /// Session routing.
    pub router: SessionRouter,
    /// Admin server address, if any.
    pub admin_addr: Option<SocketAddr>,
    /// The bearer token the admin endpoint's mutating routes require, if any.
    pub admin_token: Option<Secret>,
    /// The effective settings, every default filled in (secrets masked when printed).
    pub effective: ConsumeOpts,
}

/// `30s`, `100ms`, `5m`, `1h`, `250us`; a bare number is seconds.
pub fn parse_duration(key: &str, s: &str) -> Result<Duration> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)
        .with_context(|| {
            format!("invalid value {s:?} for {key}: expected a duration such as 500ms, 30s, 5m")
        })?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        u => bail!("invalid value {s:?} for {key}: unknown unit {u:?} (use ms, s, m or h)"),
    };
    Duration::try_from_secs_f64(secs)
        .map_err(|_| anyhow::anyhow!("invalid value {s:?} for {key}: too large for a duration"))
}

/// A duration that must be more than zero (a timeout of 0 would fail everything at once).
fn parse_positive_duration(key: &str, s: &str) -> Result<Duration> {
    let d = parse_duration(key, s)?;
    anyhow::ensure!(
        !d.is_zero(),
        "invalid value {s:?} for {key}: must be greater than 0"
    );
    Ok(d)
}

/// `off`/`none` or a duration.
fn parse_opt_duration(key: &str, s: &str) -> Result<Option<Duration>> {
    if matches!(s.trim(), "off" | "none" | "0") {
        Ok(None)
    } else {
        parse_duration(key, s).map(Some)
    }
}

/// `16MiB`, `512KiB`, `1GiB`, `1000000`.
pub fn parse_bytes(key: &str, s: &str) -> Result<usize> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num.parse().with_context(|| {
        format!("invalid value {s:?} for {key}: expected a size such as 16MiB or 1048576")
    })?;
    let mult = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" | "KB" => 1 << 10,
        "MiB" | "M" | "MB" => 1 << 20,
        "GiB" | "G" | "GB" => 1 << 30,
        u => bail!("invalid value {s:?} for {key}: unknown unit {u:?} (use KiB, MiB or GiB)"),
    };
    n.checked_mul(mult)
        .with_context(|| format!("invalid value {s:?} for {key}: too large"))
}

/// A duration as the shortest of `Nms`, `Ns`.
pub fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

fn fmt_bytes(b: usize) -> String {
    if b == 0 {
        "0".into()
    } else if b % (1 << 20) == 0 {
        format!("{}MiB", b >> 20)
    } else if b % (1 << 10) == 0 {
        format!("{}KiB", b >> 10)
    } else {
        b.to_string()
    }
}

impl ConsumeOpts {
    /// Applies flags over variables within each group of alternatives: clap fills a setting from
    /// its flag or else its variable, so `ORDERLY_SASL_PASSWORD` and `--sasl-password-file`
    /// would both arrive; the variable is dropped when a flag of its group was given.
    pub fn prefer_flags(&mut self, m: &clap::ArgMatches) {
        use clap::parser::ValueSource;
        let from_flag = |id: &str| m.value_source(id) == Some(ValueSource::CommandLine);
        let from_env = |id: &str| m.value_source(id) == Some(ValueSource::EnvVariable);
        let id = |k: &str| k.replace('-', "_");
        for group in ALTERNATIVES {
            if !group.iter().any(|k| from_flag(&id(k))) {
                continue;
            }
            for k in group {
                if from_env(&id(k)) {
                    match *k {
                        "sasl-password" => self.sasl_password = None,
                        "sasl-password-file" => self.sasl_password_file = None,
                        "admin-token" => self.admin_token = None,
                        "admin-token-file" => self.admin_token_file = None,
                        "http" => self.http = None,
                        "exec" => self.exec = None,
                        "pipe" => self.pipe = None,
                        _ => {}
                    }
                }
            }
        }
    }

    /// Reads the TOML file (if any) and lays these options (flags and environment) over it.
    pub fn with_file(self) -> Result<Self> {
        let Some(path) = self.config.clone() else {
            return Ok(self);
        };
        let file = Self::read_file(&path)?;
        let mut merged = toml::Table::try_from(&file).context("re-reading the configuration")?;
        let over = toml::Table::try_from(&self).context("re-reading the flags")?;
        for group in ALTERNATIVES {
            if group.iter().any(|k| over.contains_key(*k)) {
                for k in group {
                    merged.remove(*k);
                }
            }
        }
        merged.extend(over);
        let mut out: Self = merged.try_into().context("merging flags over the file")?;
        out.config = Some(path);
        Ok(out)
    }

    fn read_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        toml::from_str(&text).map_err(|e| {
            // toml's message spans several lines with a caret; one line names key and place.
            let msg = e.message().trim().to_owned();
            let at = e
                .span()
                .map(|s| {
                    let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            anyhow::anyhow!("{}{at}: {msg}", path.display())
        })
    }

    /// Validates everything and builds the library configuration.
    pub fn resolve(self) -> Result<Resolved> {
        let o = self.with_file()?;
        let bootstrap = o.bootstrap.clone().filter(|b| !b.is_empty()).context(
            "no brokers: pass --bootstrap host:port (or ORDERLY_BOOTSTRAP, or bootstrap in --config)",
        )?;
        let group = o
            .group
            .clone()
            .context("no group: pass --group G (or ORDERLY_GROUP)")?;
        let topics = o
            .topic
            .clone()
            .filter(|t| !t.is_empty())
            .context("no topic: pass --topic T[,T2] (or ORDERLY_TOPIC)")?;
        let mut c = ConsumerConfig::new(bootstrap, group, topics);
        if let Some(d) = &o.dlq_topic {
            c.dlq_topic.clone_from(d);
        }
        c.parked_topic.clone_from(&o.parked_topic);
        c.reply_topic = o.reply_topic.clone().filter(|t| !t.is_empty());
        if let Some(t) = c
            .reply_topic
            .as_ref()
            .filter(|t| c.group.topics.contains(t))
        {
            bail!(
                "invalid value {t:?} for --reply-topic: it is also consumed (--topic); that would loop"
            );
        }
        c.exactly_once = o.exactly_once.unwrap_or(false);
        c.transactional_id = o.transactional_id.clone().filter(|t| !t.is_empty());
        if let Some(t) = &o.transaction_timeout {
            c.transaction_timeout = parse_duration("--transaction-timeout", t)?;
        }
        anyhow::ensure!(
            c.exactly_once || (c.transactional_id.is_none() && o.transaction_timeout.is_none()),
            "--transactional-id and --transaction-timeout need --exactly-once"
        );
        c.fetch.isolation = match o.isolation.as_deref() {
            None | Some("read-committed") => orderly_protocol::IsolationLevel::ReadCommitted,
            Some("read-uncommitted") => orderly_protocol::IsolationLevel::ReadUncommitted,
            Some(other) => {
                bail!("invalid value {other:?} for --isolation: read-committed or read-uncommitted")
            }
        };
        if let Some(id) = &o.client_id {
            c.connection.client_id.clone_from(id);
        }
        // SASL.
        let password = secret(
            "--sasl-password",
            o.sasl_password.as_ref(),
            "--sasl-password-file",
            o.sasl_password_file.as_deref(),
        )?;
        if let Some(mech) = &o.sasl_mechanism {
            let username = o
                .sasl_username
                .clone()
                .context("--sasl-mechanism needs --sasl-username")?;
            let password = password.context(
                "--sasl-mechanism needs a password: ORDERLY_SASL_PASSWORD or --sasl-password-file",
            )?;
            c.connection.sasl = Some(sasl(mech, username, password)?);
        }

        apply_tls(
            &mut c.connection,
            o.tls_ca_file.as_deref(),
            o.tls_server_name.as_deref(),
        )?;

        // Handler.
        let timeout = o
            .handler_timeout
            .as_deref()
            .map(|s| parse_positive_duration("--handler-timeout", s))
            .transpose()?
            .unwrap_or(Duration::from_secs(30));
        let handler = match (&o.http, &o.exec, &o.pipe) {
            (Some(url), None, None) => {
                let mut h = HttpConfig::new(url.clone());
                if let Some(b) = &o.http_body {
                    h.body = b
                        .parse::<HttpBody>()
                        .map_err(|e| anyhow::anyhow!("--http-body: {e}"))?;
                }
                if let Some(n) = o.http_concurrency {
                    anyhow::ensure!(
                        n > 0,
                        "invalid value 0 for --http-concurrency: must be at least 1"
                    );
                    h.concurrency = n;
                }
                if let Some(t) = &o.http_timeout {
                    h.timeout = parse_positive_duration("--http-timeout", t)?;
                }
                h.validate()?;
                h.h2c = o.http_h2c.unwrap_or(false);
                h.adaptive_concurrency = o.http_adaptive_concurrency.unwrap_or(false);
                http_service_settings(&o, &mut h)?;
                h.reply_with_body = c.reply_topic.is_some();
                HandlerChoice::Http(h)
            }
            (None, Some(cmd), None) => {
                let mut e = ExecConfig::new(cmd.clone());
                if let Some(codes) = &o.exec_transient_codes {
                    e.transient_codes.clone_from(codes);
                }
                if let Some(n) = o.exec_concurrency {
                    anyhow::ensure!(
                        n > 0,
                        "invalid value 0 for --exec-concurrency: must be at least 1"
                    );
                    e.concurrency = n;
                }
                e.timeout = timeout;
                e.pass_env = o.pass_env.clone().unwrap_or_default();
                HandlerChoice::Exec(e)
            }
            (None, None, Some(cmd)) => {
                let mut p = PipeConfig::new(cmd.clone());
                if let Some(n) = o.pipe_concurrency {
                    anyhow::ensure!(
                        n > 0,
                        "invalid value 0 for --pipe-concurrency: must be at least 1"
                    );
                    p.concurrency = n;
                }
                p.timeout = timeout;
                p.pass_env = o.pass_env.clone().unwrap_or_default();
                HandlerChoice::Pipe(p)
            }
            (None, None, None) => {
                bail!("no handler: pass one of --http URL, --exec CMD or --pipe CMD")
            }
            _ => bail!("more than one handler: pass only one of --http, --exec and --pipe"),
        };
        let from: SessionFrom = o
            .session
            .as_deref()
            .unwrap_or("key")
            .parse()
            .map_err(|e| anyhow::anyhow!("--session: {e}"))?;
        let missing: NoSession = o
            .no_session
            .as_deref()
            .unwrap_or("unordered")
            .parse()
            .map_err(|e| anyhow::anyhow!("--no-session: {e}"))?;
        let router = SessionRouter::new(from, missing);

        // Engine.
        let e = &mut c.engine;
        e.session_id = router.engine_source();
        if router.needs_prepare() {
            let r = router.clone();
            c.fetch.prepare = Some(RecordHook(Arc::new(move |rec| r.prepare(rec))));
        }
        if let Some(w) = o.workers {
            anyhow::ensure!(w > 0, "invalid value 0 for --workers: must be at least 1");
            e.workers = w;
        }
        let dur = |key: &str, v: &Option<String>, d: Duration| -> Result<Duration> {
            v.as_deref().map_or(Ok(d), |s| parse_duration(key, s))
        };
        e.session_idle_timeout = dur(
            "--session-idle-timeout",
            &o.session_idle_timeout,
            e.session_idle_timeout,
        )?;
        // The handlers bound their own work; an engine limit on top is opt-in.
        e.attempt_timeout = match &o.attempt_timeout {
            Some(s) => parse_opt_duration("--attempt-timeout", s)?,
            None => None,
        };
        if let Some(s) = &o.stuck_timeout {
            e.stuck_timeout = parse_opt_duration("--stuck-timeout", s)?;
        }
        e.retry = RetryPolicy {
            base: dur("--retry-base", &o.retry_base, e.retry.base)?,
            factor: o.retry_factor.unwrap_or(e.retry.factor),
            cap: dur("--retry-cap", &o.retry_cap, e.retry.cap)?,
            max_attempts: match o.retry_max_attempts {
                Some(0) => None,
                Some(n) => Some(n),
                None => e.retry.max_attempts,
            },
        };
        anyhow::ensure!(
            e.retry.factor.is_finite() && e.retry.factor >= 1.0,
            "invalid value {} for --retry-factor: must be at least 1",
            e.retry.factor
        );
        if let Some(b) = &o.partition_budget {
            e.partition_budget_bytes = parse_bytes("--partition-budget", b)?;
        }
        batch_settings(&o, e)?;
        if let Some(b) = &o.global_budget {
            e.global_budget_bytes = parse_bytes("--global-budget", b)?;
        }
        e.commit_interval = dur("--commit-interval", &o.commit_interval, e.commit_interval)?;
        anyhow::ensure!(
            !e.commit_interval.is_zero(),
            "invalid value 0 for --commit-interval: must be greater than 0"
        );
        if let Some(b) = &o.commit_metadata_limit {
            e.metadata_limit = parse_bytes("--commit-metadata-limit", b)?;
        }
        e.drain_timeout = dur("--shutdown-timeout", &o.shutdown_timeout, e.drain_timeout)?;
        e.dlq_mode = match o.dlq_mode.as_deref().unwrap_or("continue") {
            "continue" => DlqMode::Continue,
            "park-session" => DlqMode::ParkSession,
            other => {
                bail!("invalid value {other:?} for --dlq-mode: expected continue or park-session")
            }
        };
        e.revoke_timeout = dur("--revoke-timeout", &o.revoke_timeout, e.revoke_timeout)?;
        if let Some(h) = &o.dedup_header {
            e.event_id_header = (!h.is_empty()).then(|| h.clone());
        }
        if let Some(h) = &o.seq_header {
            e.seq_header = (!h.is_empty()).then(|| h.clone());
        }

        // Group.
        let g = &mut c.group;
        if let Some(names) = &o.assignor {
            let mut list: Vec<Arc<dyn Assignor>> = Vec::new();
            for n in names {
                list.push(match n.as_str() {
                    "cooperative-sticky" => Arc::new(CooperativeStickyAssignor),
                    "range" => Arc::new(RangeAssignor),
                    "roundrobin" => Arc::new(RoundRobinAssignor),
                    other => bail!(
                        "invalid value {other:?} for --assignor: expected cooperative-sticky, range or roundrobin"
                    ),
                });
            }
            g.assignors = list;
        }
        g.protocol = match o.group_protocol.as_deref().unwrap_or("classic") {
            "classic" => GroupProtocol::Classic,
            "consumer" => GroupProtocol::Consumer,
            other => {
                bail!("invalid value {other:?} for --group-protocol: expected classic or consumer")
            }
        };
        g.server_assignor.clone_from(&o.server_assignor);
        g.instance_id.clone_from(&o.instance_id);
        let positive = |key: &str, v: &Option<String>, d: Duration| -> Result<Duration> {
            v.as_deref()
                .map_or(Ok(d), |s| parse_positive_duration(key, s))
        };
        g.session_timeout = positive("--session-timeout", &o.session_timeout, g.session_timeout)?;
        g.heartbeat_interval = positive(
            "--heartbeat-interval",
            &o.heartbeat_interval,
            g.heartbeat_interval,
        )?;
        g.rebalance_timeout = positive(
            "--rebalance-timeout",
            &o.rebalance_timeout,
            g.rebalance_timeout,
        )?;
        g.auto_offset_reset = match o.offset_reset.as_deref().unwrap_or("earliest") {
            "earliest" => AutoOffsetReset::Earliest,
            "latest" => AutoOffsetReset::Latest,
            other => {
                bail!("invalid value {other:?} for --offset-reset: expected earliest or latest")
            }
        };
        g.validate()
            .map_err(|e| anyhow::anyhow!("invalid group settings: {e}"))?;

        // CloudEvents ids come from the same header as the engine's dedup.
        let mut handler = handler;
        if let HandlerChoice::Http(HttpConfig {
            format: HttpFormat::CloudEvents(ce),
            ..
        }) = &mut handler
        {
            ce.id_header.clone_from(&c.engine.event_id_header);
        }

        let admin_addr = match o.admin_addr.as_deref().unwrap_or("127.0.0.1:9898") {
            "off" | "none" | "" => None,
            a => Some(a.parse::<SocketAddr>().with_context(|| {
                format!("invalid value {a:?} for --admin-addr: expected host:port such as 127.0.0.1:9898, or off")
            })?),
        };
        let admin_token = secret(
            "--admin-token",
            o.admin_token.as_ref(),
            "--admin-token-file",
            o.admin_token_file.as_deref(),
        )?
        .map(Secret);
        if let Some(Secret(t)) = &admin_token {
            anyhow::ensure!(
                !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()),
                "the admin token must be non-empty printable ASCII without spaces"
            );
        }
        let effective = effective(&o, &c, &handler, &router, admin_addr);
        Ok(Resolved {
            consumer: c,
            handler,
            router,
            admin_addr,
            admin_token,
            effective,
        })
    }
}

/// The `--http-*` settings of what a service behind a webhook needs: TLS files, extra headers,
/// signing, status classes, CloudEvents, the pool's idle timeout.
/// The batch settings of the handler that runs, `--http-batch-*` or `--pipe-batch-*`. They are
/// the engine's (`EngineConfig::batch_max`, `batch_max_bytes`, `batch_linger`): a run has one
/// handler, and each name says which handler a batch setting is for, so a setting for another
/// handler is refused instead of silently applied.
fn batch_settings(o: &ConsumeOpts, e: &mut EngineConfig) -> Result<()> {
    let handlers = [
        (
            "http",
            o.http.is_some(),
            o.http_batch_max,
            &o.http_batch_max_bytes,
            &o.http_batch_linger,
        ),
        (
            "pipe",
            o.pipe.is_some(),
            o.pipe_batch_max,
            &o.pipe_batch_max_bytes,
            &o.pipe_batch_linger,
        ),
    ];
    for (name, runs, max, bytes, linger) in handlers {
        if let Some(n) = max {
            anyhow::ensure!(
                n > 0,
                "invalid value 0 for --{name}-batch-max: must be at least 1"
            );
            anyhow::ensure!(
                runs || n == 1,
                "--{name}-batch-max needs --{name} (--{name}-batch-* set the batches of that handler)"
            );
        }
        if !runs {
            continue;
        }
        if let Some(n) = max {
            e.batch_max = n;
        }
        if let Some(b) = bytes {
            e.batch_max_bytes = parse_bytes(&format!("--{name}-batch-max-bytes"), b)?;
            anyhow::ensure!(
                e.batch_max_bytes > 0,
                "invalid value 0 for --{name}-batch-max-bytes"
            );
        }
        if let Some(d) = linger {
            e.batch_linger = parse_duration(&format!("--{name}-batch-linger"), d)?;
            anyhow::ensure!(
                e.batch_linger.is_zero() || e.batch_max > 1,
                "--{name}-batch-linger needs --{name}-batch-max above 1 (a batch to fill)"
            );
        }
    }
    Ok(())
}

fn http_service_settings(o: &ConsumeOpts, h: &mut HttpConfig) -> Result<()> {
    h.ca_file.clone_from(&o.http_ca_file);
    h.client_cert.clone_from(&o.http_client_cert);
    h.client_key.clone_from(&o.http_client_key);
    anyhow::ensure!(
        h.client_cert.is_some() == h.client_key.is_some(),
        "--http-client-cert and --http-client-key go together"
    );
    let https = h.url.starts_with("https://");
    anyhow::ensure!(
        https || (h.ca_file.is_none() && h.client_cert.is_none()),
        "--http-ca-file and --http-client-cert need an https:// handler URL"
    );
    for spec in o.http_header.iter().flatten() {
        h.headers
            .push(ExtraHeader::parse(&spec.0).map_err(|e| anyhow::anyhow!("--http-header: {e}"))?);
    }
    let secret = match (&o.http_signing_secret, &o.http_signing_secret_file) {
        (Some(s), _) => Some(s.0.clone()),
        (None, Some(f)) => Some(
            std::fs::read_to_string(f)
                .with_context(|| format!("cannot read --http-signing-secret-file {}", f.display()))?
                .trim_end_matches(['\n', '\r'])
                .to_owned(),
        ),
        (None, None) => None,
    };
    if let Some(s) = secret {
        anyhow::ensure!(!s.is_empty(), "the request signing secret is empty");
        h.signing_key = Some(SigningKey::new(s.into_bytes()));
    }
    let set = |key: &str, v: &Option<String>, d: StatusSet| -> Result<StatusSet> {
        v.as_deref().map_or(Ok(d), |s| {
            s.parse()
                .map_err(|e| anyhow::anyhow!("invalid value for {key}: {e}"))
        })
    };
    let d = StatusClasses::default();
    h.classes = StatusClasses {
        retry_on: set("--http-retry-on", &o.http_retry_on, d.retry_on)?,
        dead_letter_on: set(
            "--http-dead-letter-on",
            &o.http_dead_letter_on,
            d.dead_letter_on,
        )?,
    };
    h.format = match o.http_format.as_deref().unwrap_or("plain") {
        "plain" => {
            anyhow::ensure!(
                o.http_ce_type.is_none() && o.http_ce_source.is_none(),
                "--http-ce-type and --http-ce-source need --http-format cloudevents"
            );
            HttpFormat::Plain
        }
        "cloudevents" => {
            let mut ce = CloudEvents::default();
            if let Some(t) = &o.http_ce_type {
                ce.event_type.clone_from(t);
            }
            ce.source.clone_from(&o.http_ce_source);
            HttpFormat::CloudEvents(ce)
        }
        other => bail!("invalid value {other:?} for --http-format: expected plain or cloudevents"),
    };
    if let Some(t) = &o.http_pool_idle_timeout {
        h.pool_idle_timeout = parse_duration("--http-pool-idle-timeout", t)?;
    }
    Ok(())
}

/// The settings with every default written out.
fn effective(
    o: &ConsumeOpts,
    c: &ConsumerConfig,
    handler: &HandlerChoice,
    router: &SessionRouter,
    admin: Option<SocketAddr>,
) -> ConsumeOpts {
    let e = &c.engine;
    let g = &c.group;
    let mut out = ConsumeOpts {
        config: o.config.clone(),
        bootstrap: Some(c.bootstrap.clone()),
        group: Some(g.group_id.clone()),
        topic: Some(g.topics.clone()),
        dlq_topic: Some(c.dlq_topic.clone()),
        reply_topic: c.reply_topic.clone(),
        exactly_once: Some(c.exactly_once),
        transactional_id: c.transactional_id.clone(),
        transaction_timeout: c.exactly_once.then(|| fmt_duration(c.transaction_timeout)),
        isolation: Some(
            match c.fetch.isolation {
                orderly_protocol::IsolationLevel::ReadUncommitted => "read-uncommitted",
                _ => "read-committed",
            }
            .into(),
        ),
        parked_topic: (e.dlq_mode == DlqMode::ParkSession).then(|| {
            c.parked_topic
                .clone()
                .unwrap_or_else(|| format!("{}.parked", c.dlq_topic))
        }),
        client_id: Some(c.connection.client_id.clone()),
        sasl_mechanism: o.sasl_mechanism.clone(),
        sasl_username: o.sasl_username.clone(),
        sasl_password: o.sasl_password.clone(),
        sasl_password_file: o.sasl_password_file.clone(),
        admin_token: o.admin_token.clone(),
        admin_token_file: o.admin_token_file.clone(),
        tls_ca_file: o.tls_ca_file.clone(),
        tls_server_name: o.tls_server_name.clone(),
        session: Some(router.from.to_string()),
        no_session: Some(router.missing.to_string()),
        workers: Some(e.workers),
        session_idle_timeout: Some(fmt_duration(e.session_idle_timeout)),
        attempt_timeout: Some(e.attempt_timeout.map_or("off".into(), fmt_duration)),
        stuck_timeout: Some(e.stuck_timeout.map_or("off".into(), fmt_duration)),
        retry_base: Some(fmt_duration(e.retry.base)),
        retry_factor: Some(e.retry.factor),
        retry_cap: Some(fmt_duration(e.retry.cap)),
        retry_max_attempts: Some(e.retry.max_attempts.unwrap_or(0)),
        partition_budget: Some(fmt_bytes(e.partition_budget_bytes)),
        global_budget: Some(fmt_bytes(e.global_budget_bytes)),
        commit_interval: Some(fmt_duration(e.commit_interval)),
        commit_metadata_limit: Some(fmt_bytes(e.metadata_limit)),
        dedup_header: Some(e.event_id_header.clone().unwrap_or_default()),
        seq_header: Some(e.seq_header.clone().unwrap_or_default()),
        shutdown_timeout: Some(fmt_duration(e.drain_timeout)),
        dlq_mode: Some(
            if e.dlq_mode == DlqMode::ParkSession {
                "park-session"
            } else {
                "continue"
            }
            .into(),
        ),
        revoke_timeout: Some(fmt_duration(e.revoke_timeout)),
        assignor: Some(g.assignors.iter().map(|a| a.name().to_owned()).collect()),
        group_protocol: Some(
            if g.protocol == GroupProtocol::Consumer {
                "consumer"
            } else {
                "classic"
            }
            .into(),
        ),
        server_assignor: g.server_assignor.clone(),
        instance_id: g.instance_id.clone(),
        session_timeout: Some(fmt_duration(g.session_timeout)),
        heartbeat_interval: Some(fmt_duration(g.heartbeat_interval)),
        rebalance_timeout: Some(fmt_duration(g.rebalance_timeout)),
        offset_reset: Some(
            if g.auto_offset_reset == AutoOffsetReset::Earliest {
                "earliest"
            } else {
                "latest"
            }
            .into(),
        ),
        admin_addr: Some(admin.map_or("off".into(), |a| a.to_string())),
        ..ConsumeOpts::default()
    };
    match handler {
        HandlerChoice::Http(h) => {
            out.http = Some(orderly_handlers::redact_url(&h.url));
            out.http_body = Some(
                if h.body == HttpBody::Json {
                    "json"
                } else {
                    "raw"
                }
                .into(),
            );
            out.http_concurrency = Some(h.concurrency);
            out.http_adaptive_concurrency = Some(h.adaptive_concurrency);
            out.http_timeout = Some(fmt_duration(h.timeout));
            out.http_h2c = Some(h.h2c);
            out.http_batch_max = Some(e.batch_max);
            out.http_batch_max_bytes = Some(fmt_bytes(e.batch_max_bytes));
            out.http_batch_linger = Some(fmt_duration(e.batch_linger));
            out.http_ca_file.clone_from(&h.ca_file);
            out.http_client_cert.clone_from(&h.client_cert);
            out.http_client_key.clone_from(&h.client_key);
            out.http_header = o.http_header.clone();
            out.http_signing_secret = o.http_signing_secret.clone();
            out.http_signing_secret_file = o.http_signing_secret_file.clone();
            out.http_retry_on = Some(h.classes.retry_on.to_string());
            out.http_dead_letter_on = Some(h.classes.dead_letter_on.to_string());
            match &h.format {
                HttpFormat::CloudEvents(ce) => {
                    out.http_format = Some("cloudevents".into());
                    out.http_ce_type = Some(ce.event_type.clone());
                    out.http_ce_source.clone_from(&ce.source);
                }
                _ => out.http_format = Some("plain".into()),
            }
            out.http_pool_idle_timeout = Some(fmt_duration(h.pool_idle_timeout));
        }
        HandlerChoice::Exec(x) => {
            out.exec = Some(x.command.clone());
            out.exec_transient_codes = Some(x.transient_codes.clone());
            out.exec_concurrency = Some(x.concurrency);
            out.handler_timeout = Some(fmt_duration(x.timeout));
            out.pass_env = Some(x.pass_env.clone());
        }
        HandlerChoice::Pipe(p) => {
            out.pipe = Some(p.command.clone());
            out.pipe_concurrency = Some(p.concurrency);
            out.pipe_batch_max = Some(e.batch_max);
            out.pipe_batch_max_bytes = Some(fmt_bytes(e.batch_max_bytes));
            out.pipe_batch_linger = Some(fmt_duration(e.batch_linger));
            out.handler_timeout = Some(fmt_duration(p.timeout));
            out.pass_env = Some(p.pass_env.clone());
        }
    }
    out
}

impl ConsumeOpts {
    /// These settings as TOML, secrets masked.
    pub fn to_masked_toml(&self) -> Result<String> {
        let mut t = toml::Table::try_from(self)?;
        for key in ["sasl-password", "admin-token", "http-signing-secret"] {
            if t.contains_key(key) {
                t.insert(key.into(), toml::Value::String("********".into()));
            }
        }
        if let Some(toml::Value::String(url)) = t.get_mut("http") {
            *url = orderly_handlers::redact_url(url);
        }
        if let Some(h) = &self.http_header {
            t.insert(
                "http-header".into(),
                toml::Value::Array(
                    h.iter()
                        .map(|a| toml::Value::String(mask_header(&a.0)))
                        .collect(),
                ),
            );
        }
        Ok(toml::to_string(&t)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("k", "30s").unwrap(), Duration::from_secs(30));
        assert_eq!(
            parse_duration("k", "250ms").unwrap(),
            Duration::from_millis(250)
        );
        assert_eq!(parse_duration("k", "5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("k", "2").unwrap(), Duration::from_secs(2));
        let e = parse_duration("--x", "soon").unwrap_err().to_string();
        assert!(e.contains("--x") && e.contains("soon"), "{e}");
        assert_eq!(parse_bytes("k", "16MiB").unwrap(), 16 << 20);
        assert_eq!(parse_bytes("k", "1000").unwrap(), 1000);
        assert!(parse_bytes("k", "16XB").is_err());
        assert_eq!(fmt_duration(Duration::from_millis(1500)), "1500ms");
    }

    fn minimal() -> ConsumeOpts {
        ConsumeOpts {
            bootstrap: Some(vec!["127.0.0.1:9092".into()]),
            group: Some("g".into()),
            topic: Some(vec!["t".into()]),
            http: Some("http://127.0.0.1:8080/".into()),
            ..ConsumeOpts::default()
        }
    }

    #[test]
    fn admin_endpoint_binds_loopback_unless_configured() {
        let r = minimal().resolve().unwrap();
        let addr = r.admin_addr.unwrap();
        assert!(addr.ip().is_loopback(), "{addr}");
        assert_eq!(addr.to_string(), "127.0.0.1:9898");
        let r = ConsumeOpts {
            admin_addr: Some("0.0.0.0:9000".into()),
            ..minimal()
        }
        .resolve()
        .unwrap();
        assert_eq!(r.admin_addr.unwrap().to_string(), "0.0.0.0:9000");
        let r = ConsumeOpts {
            admin_addr: Some("off".into()),
            ..minimal()
        }
        .resolve()
        .unwrap();
        assert_eq!(r.admin_addr, None);
    }

    #[test]
    fn secrets_never_print() {
        let o = ConsumeOpts {
            sasl_password: Some(Secret("hunter2".into())),
            ..ConsumeOpts::default()
        };
        assert!(!format!("{o:?}").contains("hunter2"));
        assert!(!o.to_masked_toml().unwrap().contains("hunter2"));
        // Nor in what resolving builds from them (the effective settings `config check` prints,
        // the consumer's configuration with its SASL credentials).
        let r = ConsumeOpts {
            sasl_mechanism: Some("SCRAM-SHA-512".into()),
            sasl_username: Some("alice".into()),
            sasl_password: Some(Secret("hunter2".into())),
            ..minimal()
        }
        .resolve()
        .unwrap();
        assert!(r.consumer.connection.sasl.is_some());
        assert!(!format!("{:?}", r.consumer).contains("hunter2"));
        assert!(!format!("{:?}", r.effective).contains("hunter2"));
        assert!(!r.effective.to_masked_toml().unwrap().contains("hunter2"));
    }

    fn tmp_file(name: &str, text: &str) -> PathBuf {
        let p =
            std::env::temp_dir().join(format!("orderly-settings-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    fn password(r: &Resolved) -> String {
        match r.consumer.connection.sasl.as_ref().unwrap() {
            Sasl::Plain { password, .. }
            | Sasl::ScramSha256 { password, .. }
            | Sasl::ScramSha512 { password, .. } => password.clone(),
            _ => panic!("unexpected SASL mechanism"),
        }
    }

    #[test]
    fn zero_and_huge_durations_are_clear_errors() {
        let e = ConsumeOpts {
            http_timeout: Some("0".into()),
            ..minimal()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("--http-timeout") && e.contains("greater than 0"),
            "{e}"
        );
        let e = ConsumeOpts {
            http: None,
            exec: Some("true".into()),
            handler_timeout: Some("0s".into()),
            ..minimal()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(e.contains("--handler-timeout"), "{e}");
        for key in [
            "--session-timeout",
            "--heartbeat-interval",
            "--rebalance-timeout",
        ] {
            let mut o = minimal();
            let v = Some("0ms".to_owned());
            match key {
                "--session-timeout" => o.session_timeout = v,
                "--heartbeat-interval" => o.heartbeat_interval = v,
                _ => o.rebalance_timeout = v,
            }
            let e = o.resolve().unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
        // Too large for a duration: an error naming the flag, not a panic.
        let e = parse_duration("--retry-cap", "99999999999999999999999h")
            .unwrap_err()
            .to_string();
        assert!(e.contains("--retry-cap") && e.contains("too large"), "{e}");
        let e = ConsumeOpts {
            stuck_timeout: Some("1e400".into()),
            ..minimal()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(e.contains("--stuck-timeout"), "{e}");
    }

    #[test]
    fn a_password_file_flag_beats_a_password_in_the_file() {
        let file = tmp_file("pw", "from-password-file\n");
        let config = tmp_file(
            "pw.toml",
            "sasl-mechanism = \"PLAIN\"\nsasl-username = \"u\"\nsasl-password = \"from-config\"\n",
        );
        let r = ConsumeOpts {
            config: Some(config.clone()),
            sasl_password_file: Some(file.clone()),
            ..minimal()
        }
        .resolve()
        .unwrap();
        assert_eq!(password(&r), "from-password-file");
        // The effective settings name the source that is used, and only that one.
        let text = r.effective.to_masked_toml().unwrap();
        assert!(
            text.contains("sasl-password-file") && !text.contains("sasl-password = "),
            "{text}"
        );
        // Without the flag the file's password is used.
        let r = ConsumeOpts {
            config: Some(config),
            ..minimal()
        }
        .resolve()
        .unwrap();
        assert_eq!(password(&r), "from-config");
        // Both at the same level: ambiguous, refused.
        let e = ConsumeOpts {
            sasl_mechanism: Some("PLAIN".into()),
            sasl_username: Some("u".into()),
            sasl_password: Some(Secret("p".into())),
            sasl_password_file: Some(file),
            ..minimal()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(e.contains("only one of"), "{e}");
    }

    #[test]
    fn the_handler_url_is_validated_and_masked() {
        let e = ConsumeOpts {
            http: Some("ftp://h/".into()),
            ..minimal()
        }
        .resolve()
        .unwrap_err()
        .to_string();
        assert!(e.contains("invalid handler URL"), "{e}");
        let r = ConsumeOpts {
            http: Some("http://alice:pa55word@127.0.0.1:8080/in?token=t0ken&x=1".into()),
            ..minimal()
        }
        .resolve()
        .unwrap();
        let text = r.effective.to_masked_toml().unwrap();
        let shown = format!("{text}{:?}{:?}", r.effective, r.handler);
        assert!(
            !shown.contains("pa55word") && !shown.contains("t0ken"),
            "{shown}"
        );
        assert!(
            text.contains("http://alice:***@127.0.0.1:8080/in?token=***&x=***"),
            "{text}"
        );
    }

    #[test]
    fn http_service_flags_resolve_and_their_secrets_never_print() {
        let o = ConsumeOpts {
            http: Some("https://hooks.example/in".into()),
            http_header: Some(vec![
                HeaderArg("Authorization: Bearer tok-123".into()),
                HeaderArg("X-Api-Key: env:PATH".into()),
            ]),
            http_signing_secret: Some(Secret("sign-456".into())),
            http_retry_on: Some("429,502-504".into()),
            http_dead_letter_on: Some("501".into()),
            http_format: Some("cloudevents".into()),
            http_ce_type: Some("com.example.order".into()),
            http_pool_idle_timeout: Some("2s".into()),
            dedup_header: Some("msg-id".into()),
            ..minimal()
        };
        assert!(!format!("{o:?}").contains("tok-123"));
        let r = o.resolve().unwrap();
        let HandlerChoice::Http(h) = &r.handler else {
            panic!("http handler expected");
        };
        assert_eq!(h.headers.len(), 2);
        assert_eq!(h.headers[0].value.to_str().unwrap(), "Bearer tok-123");
        assert!(h.signing_key.is_some());
        assert_eq!(h.classes.retry_on.to_string(), "429,502-504");
        assert!(h.classes.dead_letter_on.contains(501));
        let HttpFormat::CloudEvents(ce) = &h.format else {
            panic!("cloudevents expected");
        };
        assert_eq!(ce.event_type, "com.example.order");
        assert_eq!(ce.id_header.as_deref(), Some("msg-id"));
        assert_eq!(h.pool_idle_timeout, Duration::from_secs(2));
        for printed in [
            format!("{:?}", r.handler),
            format!("{:?}", r.effective),
            r.effective.to_masked_toml().unwrap(),
        ] {
            assert!(!printed.contains("tok-123"), "{printed}");
            assert!(!printed.contains("sign-456"), "{printed}");
        }
        let toml = r.effective.to_masked_toml().unwrap();
        assert!(toml.contains("Authorization: ********"), "{toml}");
        assert!(toml.contains("X-Api-Key: env:PATH"), "{toml}");
        assert!(toml.contains("http-retry-on = \"429,502-504\""), "{toml}");
        assert!(toml.contains("http-pool-idle-timeout = \"2s\""), "{toml}");

        // Defaults, printed.
        let r = minimal().resolve().unwrap();
        let toml = r.effective.to_masked_toml().unwrap();
        assert!(
            toml.contains("http-retry-on = \"408,425,429,500-599\""),
            "{toml}"
        );
        assert!(toml.contains("http-dead-letter-on = \"none\""), "{toml}");
        assert!(toml.contains("http-format = \"plain\""), "{toml}");
        assert!(toml.contains("http-pool-idle-timeout = \"4s\""), "{toml}");

        // Mistakes are named.
        let err = |o: ConsumeOpts| o.resolve().unwrap_err().to_string();
        let e = err(ConsumeOpts {
            http_retry_on: Some("5xx".into()),
            ..minimal()
        });
        assert!(e.contains("--http-retry-on"), "{e}");
        let e = err(ConsumeOpts {
            http_ca_file: Some("ca.pem".into()),
            ..minimal()
        });
        assert!(e.contains("https://"), "{e}");
        let e = err(ConsumeOpts {
            http_header: Some(vec![HeaderArg("no colon".into())]),
            ..minimal()
        });
        assert!(e.contains("--http-header"), "{e}");
        let e = err(ConsumeOpts {
            http_format: Some("xml".into()),
            ..minimal()
        });
        assert!(e.contains("--http-format"), "{e}");
    }
}
