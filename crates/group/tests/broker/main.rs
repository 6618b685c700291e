//! Group membership against the real broker: one test binary, so one link and, under a plain
//! `cargo test`, one shared broker for all of these (each test uses topics and groups of its own,
//! so they run side by side; `coordinator_kill` starts a 3-node cluster of its own, `restart` a
//! dedicated broker). Run one module with `cargo test -p orderly-group --test broker kip848::`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod coordinator_kill;
mod group;
mod kip848;
mod restart;
mod too_old;
