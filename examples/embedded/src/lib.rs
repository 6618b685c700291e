//! An application that embeds orderly as a library: a travel-booking chat whose sessions must see their messages in order.
//!
//! Each Kafka record is one chat message, keyed by its session id: `book <city>` opens a trip,
//! `change <city>` changes its destination. Applied out of order, "change to Paris" would land
//! before "book London" and the trip would end in the wrong city: exactly the bug orderly exists
//! to prevent. [`Itineraries`] is the application's own handler, running in-process; orderly
//! calls it for one message of a session at a time, in offset order, with sessions in parallel.
//!
//! What the handler does with failures shows the engine's two paths:
//! - the booking service is flaky: the first attempt of every 5th message fails with
//!   [`HandlerError::transient`], asking for at least [`BOOKING_RETRY_AFTER`] before the next
//!   attempt ([`HandlerError::retry_after`]), and is retried in place (later messages of that
//!   session wait);
//! - a message that is not a command fails with [`HandlerError::permanent`] (with the UTF-8
//!   error as its [`source`](HandlerError::with_source) when it is not even text) and goes to
//!   the dead-letter topic at once.
//!
//! [`config`] and [`run`] are the whole embedding: a [`ConsumerConfig`], the handler, a shutdown
//! future. Everything it names comes from `orderly-consumer`, its one orderly dependency.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orderly_consumer::{
    Attempt, AutoOffsetReset, Consumer, ConsumerConfig, DriverError, EngineStats, Handler,
    HandlerError, Record,
};

/// How long the booking service asks callers to wait after it timed out.
pub const BOOKING_RETRY_AFTER: Duration = Duration::from_millis(20);

/// One session's trip as the application sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trip {
    /// The destination after every message so far.
    pub destination: Option<String>,
    /// Messages applied.
    pub messages: u64,
    /// `change` messages that arrived before any `book`: the corruption out-of-order delivery
    /// causes. Always 0 under orderly.
    pub changes_before_booking: u64,
    /// The highest `seq` header applied; each message's must be one more.
    pub last_seq: u64,
    /// Messages whose `seq` was not `last_seq + 1`.
    pub out_of_order: u64,
}

/// The application's handler: trips per session, shared with the rest of the application.
#[derive(Debug, Clone, Default)]
pub struct Itineraries {
    trips: Arc<Mutex<HashMap<String, Trip>>>,
}

impl Itineraries {
    /// An empty set of trips.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of every session's trip.
    pub fn snapshot(&self) -> HashMap<String, Trip> {
        match self.trips.lock() {
            Ok(t) => t.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

/// A chat message parsed from a record value.
enum Command<'a> {
    Book(&'a str),
    Change(&'a str),
}

fn parse(text: &str) -> Option<Command<'_>> {
    match text.split_once(' ')? {
        ("book", city) if !city.is_empty() => Some(Command::Book(city)),
        ("change", city) if !city.is_empty() => Some(Command::Change(city)),
        _ => None,
    }
}

fn header_u64(record: &Record, name: &str) -> Option<u64> {
    let h = record.headers.iter().find(|h| h.key == name)?;
    std::str::from_utf8(h.value.as_deref()?).ok()?.parse().ok()
}

impl Handler for Itineraries {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        let session = match &record.key {
            Some(k) => String::from_utf8_lossy(k).into_owned(),
            None => return Err(HandlerError::permanent("message without a session")),
        };
        let text =
            std::str::from_utf8(record.value.as_deref().unwrap_or_default()).map_err(|e| {
                HandlerError::permanent(format!("not text at offset {}", record.offset))
                    .with_source(e)
            })?;
        let Some(command) = parse(text) else {
            return Err(HandlerError::permanent(format!(
                "not a command at offset {}",
                record.offset
            )));
        };
        let seq = header_u64(record, "seq").unwrap_or(0);
        // The booking service times out on the first attempt of every 5th message.
        if seq % 5 == 0 && attempt.number == 1 {
            tokio::task::yield_now().await;
            return Err(HandlerError::transient("booking service timed out")
                .retry_after(BOOKING_RETRY_AFTER));
        }
        let mut trips = match self.trips.lock() {
            Ok(t) => t,
            Err(poisoned) => poisoned.into_inner(),
        };
        let trip = trips.entry(session).or_default();
        if seq != trip.last_seq + 1 {
            trip.out_of_order += 1;
        }
        trip.last_seq = trip.last_seq.max(seq);
        trip.messages += 1;
        match command {
            Command::Book(city) => trip.destination = Some(city.to_string()),
            Command::Change(city) => {
                if trip.destination.is_none() {
                    trip.changes_before_booking += 1;
                }
                trip.destination = Some(city.to_string());
            }
        }
        Ok(())
    }
}

/// The application's consumer settings: group `group` reading `topic` from its start when the
/// group has no committed offset yet (every chat message matters), dead letters to `<topic>.dlq`.
pub fn config(bootstrap: &str, group: &str, topic: &str) -> ConsumerConfig {
    let mut config = ConsumerConfig::new([bootstrap], group, [topic]);
    config.group.auto_offset_reset = AutoOffsetReset::Earliest;
    config.dlq_topic = format!("{topic}.dlq");
    config
}

/// Consumes `config`'s topics with `handler` until `shutdown` completes; returns the engine's
/// final counters. This is all an embedding application needs to write.
pub async fn run(
    config: ConsumerConfig,
    handler: Itineraries,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<EngineStats, DriverError> {
    Consumer::new(config, handler)?.run(shutdown).await
}
