//! The protocol layer against the real broker: one test binary, so one link and, under a plain
//! `cargo test`, one shared broker for all of these (each test uses topics, groups and
//! transactional ids of its own, so they run side by side; the SASL and TLS tests start dedicated
//! brokers with those listeners). Run one module with
//! `cargo test -p orderly-protocol --test broker idempotent::`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod fetch;
mod group;
mod idempotent;
mod no_producer_ids;
mod sasl;
#[cfg(feature = "tls")]
mod tls;
mod transactions;
mod txn;
