//! What resolving `orderly consume`'s settings yields: the library configuration, the handler
//! choice, the session router, the admin endpoint and the effective settings.

use std::net::SocketAddr;

use orderly_consumer::ConsumerConfig;
use orderly_handlers::{ExecConfig, HttpConfig, PipeConfig, SessionRouter};

use super::flags::ConsumeOpts;
use super::secret::Secret;

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
