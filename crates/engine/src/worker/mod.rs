//! Worker tasks: each runs its sessions' records, at most one record future per session
//! (`run.rs`, `session.rs`); a record's future makes its attempts and retries (`attempt.rs`),
//! writes its replies (`deliver.rs`), its dead letter (`dead_letter.rs`) and its parked-session
//! updates (`parked_writes.rs`) before it reports, each terminal write watched the same way
//! (`watch.rs`). What they share is in `context.rs`, attempt timeouts in `deadline.rs`. This file only wires.

mod attempt;
mod context;
mod dead_letter;
mod deadline;
mod deliver;
mod parked_writes;
mod run;
mod session;
mod watch;

pub(crate) use context::{Ctx, Metrics, partition_salt};
pub(crate) use deadline::Deadlines;
pub(crate) use run::run;
pub(crate) use session::session_id;
