//! Broker connections: [`BrokerConnection`] (one rskafka `Messenger` over TCP or TLS with
//! negotiated versions and timeouts) and [`ConnectionPool`] (per broker, separate connections per
//! [`ConnectionKind`], reconnect with bounded exponential backoff).
//!
//! # Layout
//! - `config`: [`ConnectionConfig`], [`Sasl`], [`ConnectionKind`].
//! - `broker`: [`BrokerConnection`]: connect, send within a timeout, broken connections.
//! - `negotiation`: ApiVersions, the broker floor (`REQUIRED_APIS`), [`Negotiated`] per API.
//! - `pool`: [`ConnectionPool`] and [`backoff_delay`].

mod broker;
mod config;
mod negotiation;
mod pool;

pub use broker::BrokerConnection;
pub use config::{ConnectionConfig, ConnectionKind, Sasl};
pub use negotiation::Negotiated;
pub use pool::{ConnectionPool, backoff_delay};
