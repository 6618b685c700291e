//! The consumer against the real broker: one test binary, so one link and, under a plain
//! `cargo test`, one broker for all of these (each test uses topics and groups of its own, so they
//! run side by side). Run one module with `cargo test -p orderly-consumer --test broker seed::`.
//!
//! A test that sets process-wide state keeps a binary of its own beside this one:
//! `broker_memory.rs` measures the resident set of the whole process, `broker_offset_reset.rs`
//! installs the global metrics recorder and log subscriber it reads, `broker_rewind.rs` and
//! `broker_scram.rs` install the global log subscriber.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../common/mod.rs"]
mod common;

mod dlq_replay;
mod lost_coordinator;
mod migration;
mod parked;
mod poison;
mod replies;
mod restart;
mod seed;
mod tools;
