//! The `orderly` binary against the real broker: one test binary, so one link and, under a plain
//! `cargo test`, one shared broker for all of these (each test uses topics and groups of its own,
//! so they run side by side). Run one module with
//! `cargo test -p orderly-cli --test broker exactly_once::`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod cli_parked;
mod cli_recovery;
mod exactly_once;
mod https;
mod readyz;
mod replies;
mod too_old;
