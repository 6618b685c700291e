//! orderly-handlers: ready-made [`orderly_engine::Handler`]s that hand records to code in any language.
//!
//! A team that does not write Rust points the engine at its own service or program:
//!
//! - [`HttpHandler`]: POSTs each record to a URL (`http://` or `https://` with optional mTLS,
//!   keep-alive pool, requests in flight capped, per-request timeout, HTTP/1.1 or HTTP/2, extra
//!   headers, an HMAC signature, CloudEvents binary mode); the status code decides done / retry /
//!   dead-letter.
//! - [`ExecHandler`]: one process per record, value on stdin, metadata in `ORDERLY_*`
//!   variables; the exit code decides.
//! - [`PipeHandler`]: one long-lived child speaking JSON lines (a record, or a session's batch,
//!   per line; answers in any order), restarted with backoff when it dies; what it held is
//!   retried.
//!
//! [`SessionRouter`] extracts session ids (`key`, `header:NAME`, `json:/pointer`) and applies
//! the no-session policy (`unordered`, `dlq`, `partition`).
//!
//! These types are what `orderly consume` runs; an embedding program uses them the same way,
//! with `orderly_consumer::Consumer`. This crate holds no ordering logic and no Kafka code. Its
//! HTTP stack is hyper (pure Rust); HTTPS is rustls on orderly-protocol's pure-Rust crypto
//! providers (no C).
//!
//! # Layout
//! - [`session`]: [`SessionRouter`], [`SessionFrom`], [`NoSession`].
//! - [`metric_specs`]: every metric the handlers emit, described.
//! - [`meta`]: record metadata as headers / environment, the JSON envelope, `traceparent`.
//! - [`http`], [`exec`], [`pipe`]: the three handlers ([`http`] with its connector, status
//!   classes and header encodings in submodules); `endpoint`: the HTTP handler's URL
//!   (validation, userinfo as Basic auth, [`redact_url`] for what logs show); [`child`]: what the
//!   process handlers share (environment allow-list, process groups, the start-up check).
//! - `batch`: what an answer to a batch of records means (the HTTP and pipe handlers share it).
//! - [`replies`]: the JSON form in which an endpoint or a child returns replies (records written
//!   before the record counts as done).
//! - [`limit`]: the HTTP handler's cap on requests in flight, fixed or adaptive.
//! - [`circuit`]: the HTTP handler's endpoint circuit: an outage holds records instead of
//!   failing them.

mod batch;
pub mod child;
pub mod circuit;
mod endpoint;
pub mod exec;
pub mod http;
pub mod limit;
pub mod meta;
pub mod metric_specs;
pub mod pipe;
pub mod replies;
pub mod session;

pub use endpoint::redact_url;
pub use exec::{ExecConfig, ExecHandler};
pub use http::{HttpBody, HttpConfig, HttpFormat, HttpHandler, HttpSetupError};
pub use pipe::{PipeConfig, PipeHandler};
pub use session::{NoSession, SESSION_HEADER, SessionFrom, SessionRouter};
