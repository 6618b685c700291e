//! The engine's invariants under paused (deterministic) time, one module per concern: the memory
//! budget ([`budget`]), commits ([`commits`]), dead letters ([`dead_letters`]) and dispatch
//! ([`dispatch`]).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../common/mod.rs"]
mod common;

mod budget;
mod commits;
mod dead_letters;
mod dispatch;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use common::*;
use orderly_engine::mem::{MemDeadLetters, MemSource};
use orderly_engine::{
    Attempt, CommitPoint, DeadLetter, DeadLetterSink, DlqError, Engine, EngineConfig, Handler,
    HandlerError, Header, Record, RetryPolicy, Source, SourceError, SourceEvent, TopicPartition,
};

fn ends_ok(log: &Log, part: i32) -> usize {
    log.events()
        .iter()
        .filter(|e| matches!(e, Ev::End { part: p, step: Step::Ok, .. } if *p == part))
        .count()
}

fn starts(log: &Log) -> usize {
    log.events()
        .iter()
        .filter(|e| matches!(e, Ev::Start { .. }))
        .count()
}
