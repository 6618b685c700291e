//! orderly-protocol: the only crate in orderly that speaks Kafka's wire format.
//!
//! It is built on [rskafka]'s framing and primitives (its `unstable-fuzzing` surface) and adds what a
//! consumer stack needs and rskafka lacks: per-broker connections, a multi-partition fetch, a correct
//! record-batch decoder, and the consumer-group APIs.
//!
//! It does not hold group state, assignment logic, or anything about ordering: those live in
//! `orderly-group` and `orderly-engine`.
