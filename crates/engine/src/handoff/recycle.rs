//! Batch buffers handed between the dispatch loop and the workers, reused instead of reallocated.
//!
//! The dispatch loop sends each worker its records in a `Vec<Work>` and each worker reports completions in
//! a `Vec<Completion>`; both cross threads. Freed by the receiver, each would be grown again from
//! empty by the sender on every turn: under glibc each such buffer above a kilobyte or so is a
//! "large" request that first consolidates the small chunks freed since (the per-record frees),
//! and the growth reallocates ~log2(n) times, a cost paid on every batch of a saturated run. A
//! small shared pool hands the emptied buffers back.

use std::sync::Mutex;

use super::work::{BATCH_MAX, Completion, Work};

/// Buffers larger than this many bytes are dropped rather than kept, so one huge batch does not
/// stay allocated for the engine's lifetime. Large enough for a worker's usual turn (up to
/// `READY_BATCH` = 2,048 records started, and their completions), so a saturated worker's
/// completion buffers are not dropped and regrown from empty on most turns. At most `keep`
/// buffers per pool, so at most `keep` × 512 KiB stays allocated.
pub(crate) const KEEP_BYTES: usize = 512 << 10;
const _: () = assert!(BATCH_MAX * size_of::<Work>() <= KEEP_BYTES);

/// A pool of empty `Vec<T>`s.
pub(crate) struct Recycle<T> {
    pool: Mutex<Vec<Vec<T>>>,
    keep: usize,
}

impl<T> Recycle<T> {
    /// A pool that keeps up to `keep` buffers.
    pub(crate) fn new(keep: usize) -> Self {
        Self {
            pool: Mutex::new(Vec::new()),
            keep,
        }
    }

    /// An empty buffer: a returned one when there is one.
    pub(crate) fn take(&self) -> Vec<T> {
        self.pool
            .lock()
            .ok()
            .and_then(|mut p| p.pop())
            .unwrap_or_default()
    }

    /// Returns a buffer for reuse (its elements are dropped here).
    pub(crate) fn give(&self, mut v: Vec<T>) {
        v.clear();
        if v.capacity() == 0 || v.capacity().saturating_mul(size_of::<T>()) > KEEP_BYTES {
            return;
        }
        if let Ok(mut p) = self.pool.lock()
            && p.len() < self.keep
        {
            p.push(v);
        }
    }
}

/// The pools one engine's dispatch loop and workers share.
pub(crate) struct Pools {
    pub(crate) works: Recycle<Work>,
    pub(crate) done: Recycle<Completion>,
}

impl Pools {
    pub(crate) fn new(workers: usize) -> Self {
        Self {
            works: Recycle::new(2 * workers + 2),
            done: Recycle::new(2 * workers + 2),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_returned_buffer_comes_back_empty_with_its_capacity() {
        let pool = Recycle::<u64>::new(2);
        let mut v = pool.take();
        assert_eq!(v.capacity(), 0);
        v.extend(0..100);
        let cap = v.capacity();
        pool.give(v);
        let again = pool.take();
        assert!(again.is_empty());
        assert_eq!(again.capacity(), cap);
        assert_eq!(pool.take().capacity(), 0, "the pool had one buffer");
    }

    #[test]
    fn the_pool_keeps_a_bounded_number_of_modest_buffers() {
        let pool = Recycle::<u8>::new(2);
        for _ in 0..5 {
            pool.give(Vec::with_capacity(16));
        }
        pool.give(Vec::with_capacity(KEEP_BYTES + 1));
        // Counted in bytes, not elements: 2,048 completions (24 bytes each) are kept.
        let big = Recycle::<[u8; 24]>::new(1);
        big.give(Vec::with_capacity(2048));
        assert_eq!(big.take().capacity(), 2048);
        big.give(Vec::with_capacity(KEEP_BYTES / 24 + 1));
        assert_eq!(big.take().capacity(), 0);
        let kept: Vec<_> = std::iter::from_fn(|| Some(pool.take()))
            .take_while(|v| v.capacity() > 0)
            .collect();
        assert_eq!(kept.len(), 2);
        assert!(kept.iter().all(|v| v.capacity() == 16));
    }
}
