//! What the dispatch loop and its workers hand each other: record batches and completion batches
//! (`work`), the buffers those batches are reused in (`recycle`), each partition's control
//! block (`control`), the lease a running handler call can read (`ownership`), and the waits
//! for its endpoint a call marks so the attempt timeout leaves them out (`held`). Both sides
//! depend on this module; it depends on neither.

pub(crate) mod control;
pub(crate) mod held;
pub(crate) mod ownership;
pub(crate) mod recycle;
pub(crate) mod work;
