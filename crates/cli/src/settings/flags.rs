//! `ConsumeOpts`: every knob of `orderly consume` as a flag, an `ORDERLY_*` variable and a key of
//! the TOML file, and which of them are alternatives to each other.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::alternatives::{ALTERNATIVES, variables_beside_flags};
use super::choice::{
    Assignor, DlqMode, GroupProtocol, HttpBody, HttpFormat, Isolation, NoSession, OffsetReset,
};
use super::connection::ConnectionFlags;
use super::places::{AdminAddr, SessionSource};
use super::secret::{HeaderArg, Secret};
use super::units::{ByteSize, DurationOrOff, HumanDuration, Statuses};

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
    pub transaction_timeout: Option<HumanDuration>,
    /// Which records fetches return: read-committed (records of aborted transactions and of
    /// open ones are not handed out) or read-uncommitted. Default read-committed.
    #[arg(long, env = "ORDERLY_ISOLATION")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<Isolation>,
    /// With --dlq-mode park-session: the compacted topic that keeps parked sessions across
    /// restarts and rebalances (created if missing). Default `<dlq topic>.parked`.
    #[arg(long, env = "ORDERLY_PARKED_TOPIC")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parked_topic: Option<String>,
    /// Client id sent to the brokers. Default orderly.
    #[arg(long, env = "ORDERLY_CLIENT_ID")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// SASL and TLS to the brokers.
    #[command(flatten)]
    #[serde(flatten)]
    pub connection: ConnectionFlags,

    /// POST each record to this http:// or https:// URL.
    #[arg(
        long,
        env = "ORDERLY_HTTP",
        help_heading = "Handler",
        value_name = "URL",
        hide_env_values = true
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// HTTP body: raw (the value) or json (an envelope). Default raw.
    #[arg(long, env = "ORDERLY_HTTP_BODY", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_body: Option<HttpBody>,
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
    /// Per-request timeout: send and the answer's status (transient when hit); the body is read
    /// within it too, but once a status has arrived the status decides. Over HTTP/1.1 it starts
    /// once the connection stands; over HTTP/2 the connect and TLS handshake limits are added to
    /// it. Default 30s.
    #[arg(long, env = "ORDERLY_HTTP_TIMEOUT", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_timeout: Option<HumanDuration>,
    /// Limit for making a TCP connection to the endpoint, name lookup included. Running out of it
    /// counts as the endpoint being down, like a refused connection: records are held, not
    /// failed. Default 10s.
    #[arg(long, env = "ORDERLY_HTTP_CONNECT_TIMEOUT", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_connect_timeout: Option<HumanDuration>,
    /// https://: limit for the TLS handshake on a new connection. Running out of it counts as the
    /// endpoint being down, like a refused connection. Default 10s.
    #[arg(
        long,
        env = "ORDERLY_HTTP_TLS_HANDSHAKE_TIMEOUT",
        help_heading = "Handler"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_tls_handshake_timeout: Option<HumanDuration>,
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
    pub http_batch_max_bytes: Option<ByteSize>,
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
    pub http_batch_linger: Option<HumanDuration>,
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
    /// Sign every request (`orderly-signature: t=<unix>,v1=..,v2=..`, HMAC-SHA256 over `<t>.` +
    /// body, v2 also over the orderly-* headers naming the record; see the README) with this
    /// secret; prefer ORDERLY_HTTP_SIGNING_SECRET or --http-signing-secret-file.
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
    pub http_retry_on: Option<Statuses>,
    /// Statuses dead-lettered even if --http-retry-on or 2xx holds them (any other non-2xx
    /// status is dead-lettered anyway). Default none.
    #[arg(
        long,
        env = "ORDERLY_HTTP_DEAD_LETTER_ON",
        help_heading = "Handler",
        value_name = "STATUSES"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_dead_letter_on: Option<Statuses>,
    /// Request headers: plain (orderly-*, kafka-h-*) or cloudevents (plus the CloudEvents HTTP
    /// binding's ce-* attributes, binary content mode). Default plain.
    #[arg(long, env = "ORDERLY_HTTP_FORMAT", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_format: Option<HttpFormat>,
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
    pub http_pool_idle_timeout: Option<HumanDuration>,
    /// Run this shell command once per record (value on stdin, ORDERLY_* variables).
    #[arg(
        long,
        env = "ORDERLY_EXEC",
        help_heading = "Handler",
        value_name = "CMD",
        hide_env_values = true
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
        value_name = "CMD",
        hide_env_values = true
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
    pub pipe_batch_max_bytes: Option<ByteSize>,
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
    pub pipe_batch_linger: Option<HumanDuration>,
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
    pub handler_timeout: Option<HumanDuration>,
    /// Session id: key, header:NAME or json:/pointer. Default key.
    #[arg(long, env = "ORDERLY_SESSION", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionSource>,
    /// Records without a session id: unordered (handled at once, beside every session), dlq
    /// (dead-lettered) or partition (handled in partition order, as one session per partition).
    /// Default unordered.
    #[arg(long, env = "ORDERLY_NO_SESSION", help_heading = "Handler")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_session: Option<NoSession>,

    /// Engine worker tasks. Default: available parallelism.
    #[arg(long, env = "ORDERLY_WORKERS", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// An idle session is evicted after this. Default 30s.
    #[arg(long, env = "ORDERLY_SESSION_IDLE_TIMEOUT", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_idle_timeout: Option<HumanDuration>,
    /// Limit of one handler attempt inside the engine (off = none). Default off for --http/--exec/--pipe (they have their own timeouts).
    #[arg(long, env = "ORDERLY_ATTEMPT_TIMEOUT", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt_timeout: Option<DurationOrOff>,
    /// A record holding its partition back this long is dead-lettered as stuck (off = never). Default 5m.
    #[arg(long, env = "ORDERLY_STUCK_TIMEOUT", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stuck_timeout: Option<DurationOrOff>,
    /// First retry backoff ceiling. Default 100ms.
    #[arg(long, env = "ORDERLY_RETRY_BASE", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_base: Option<HumanDuration>,
    /// Backoff growth per retry. Default 2.
    #[arg(long, env = "ORDERLY_RETRY_FACTOR", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_factor: Option<f64>,
    /// Largest backoff ceiling. Default 30s.
    #[arg(long, env = "ORDERLY_RETRY_CAP", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_cap: Option<HumanDuration>,
    /// Attempts before a record is dead-lettered (0 = retry forever). Default 10.
    #[arg(long, env = "ORDERLY_RETRY_MAX_ATTEMPTS", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_max_attempts: Option<u32>,
    /// Bytes held per partition before it is paused (e.g. 16MiB). Default 16MiB.
    #[arg(long, env = "ORDERLY_PARTITION_BUDGET", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_budget: Option<ByteSize>,
    /// Bytes held across partitions before fetching pauses. Default 256MiB.
    #[arg(long, env = "ORDERLY_GLOBAL_BUDGET", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub global_budget: Option<ByteSize>,
    /// Periodic commit interval: bounds the work a crash makes the next owner redo (finished records above the watermark travel in the commit metadata). Default 1s.
    #[arg(long, env = "ORDERLY_COMMIT_INTERVAL", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_interval: Option<HumanDuration>,
    /// Bytes of commit metadata carrying the completed offsets above the commit point, so a new
    /// owner skips them (0 = off: every record above the commit point is handled again). Default 4KiB.
    #[arg(long, env = "ORDERLY_COMMIT_METADATA_LIMIT", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit_metadata_limit: Option<ByteSize>,
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
    pub dlq_mode: Option<DlqMode>,
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
    pub shutdown_timeout: Option<HumanDuration>,
    /// A revoke waits this long for running records. Default 30s.
    #[arg(long, env = "ORDERLY_REVOKE_TIMEOUT", help_heading = "Engine")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoke_timeout: Option<HumanDuration>,

    /// Assignors in preference order, `A[,A2]`. Default cooperative-sticky.
    #[arg(
        long,
        env = "ORDERLY_ASSIGNOR",
        help_heading = "Group",
        value_delimiter = ','
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assignor: Option<Vec<Assignor>>,
    /// Group protocol: classic (JoinGroup/SyncGroup, client-side assignors) or consumer (KIP-848,
    /// broker-side assignment). Default classic.
    #[arg(long, env = "ORDERLY_GROUP_PROTOCOL", help_heading = "Group")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_protocol: Option<GroupProtocol>,
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
    pub session_timeout: Option<HumanDuration>,
    /// Heartbeat interval. Default 3s.
    #[arg(long, env = "ORDERLY_HEARTBEAT_INTERVAL", help_heading = "Group")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heartbeat_interval: Option<HumanDuration>,
    /// Rebalance timeout. Default 5m.
    #[arg(long, env = "ORDERLY_REBALANCE_TIMEOUT", help_heading = "Group")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebalance_timeout: Option<HumanDuration>,
    /// Where a partition without a committed offset starts. Default earliest.
    #[arg(long, env = "ORDERLY_OFFSET_RESET", help_heading = "Group")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset_reset: Option<OffsetReset>,

    /// Serve /metrics, /healthz, /readyz and /parked here ("off" = no server). Default 127.0.0.1:9898.
    #[arg(long, env = "ORDERLY_ADMIN_ADDR", help_heading = "Operations")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_addr: Option<AdminAddr>,
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

impl ConsumeOpts {
    /// Applies flags over variables within each group of alternatives: clap fills a setting from
    /// its flag or else its variable, so `ORDERLY_SASL_PASSWORD` and `--sasl-password-file`
    /// would both arrive; the variable is dropped when a flag of its group was given.
    pub fn prefer_flags(&mut self, m: &clap::ArgMatches) {
        for group in ALTERNATIVES {
            for key in variables_beside_flags(m, group) {
                match key {
                    "admin-token" => self.admin_token = None,
                    "admin-token-file" => self.admin_token_file = None,
                    "http" => self.http = None,
                    "exec" => self.exec = None,
                    "pipe" => self.pipe = None,
                    other => self.connection.clear(other),
                }
            }
        }
    }
}
