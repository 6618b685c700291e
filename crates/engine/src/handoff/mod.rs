//! What the dispatch loop and its workers hand each other: record batches and completion batches
//! (`work`), the buffers those batches are reused in (`recycle`), and each partition's control
//! block (`control`), and the lease a running handler call can read (`ownership`). Both sides
//! depend on this module; it depends on neither.

pub(crate) mod control;
pub(crate) mod ownership;
pub(crate) mod recycle;
pub(crate) mod work;
