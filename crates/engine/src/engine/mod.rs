//! The engine: [`Engine`] (`run.rs`) and the dispatch loop it runs, the one task that owns all
//! partition state (`state.rs`) and feeds the workers: records in and completions back
//! (`dispatch.rs`), revokes as state (`handback.rs`), the commit path (`commit.rs`), the drain and
//! the end (`shutdown.rs`), the stop-now handle (`stop.rs`). This file only wires.

mod commit;
mod dispatch;
mod handback;
mod run;
mod shutdown;
mod state;
mod stop;

pub use run::{Engine, EngineError};
pub use stop::StopHandle;
