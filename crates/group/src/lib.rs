//! orderly-group: a hand-written Kafka consumer-group coordinator (classic protocol).
//!
//! It owns group membership and tells its user which partitions it owns and when it must give them
//! back. It does not fetch records or process them; that is the engine's job.
