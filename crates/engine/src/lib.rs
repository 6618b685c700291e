//! orderly-engine: per-session ordering with parallelism across sessions.
//!
//! The core is Kafka-agnostic: it is generic over a record source and a handler, and can be driven
//! with deterministic time in tests. It does not speak Kafka's wire format.
