//! Per-partition offset tracker: in-flight and completed offsets, the commit point, and the
//! completed runs above it for the commit metadata.
//!
//! Memory: every entry between the commit point and the fetch position costs `ENTRY_BYTES` in
//! the byte budget until it leaves from the front, on top of its record's bytes while it is in
//! flight. So a watermark held by one record pauses the partition once the finished entries
//! behind it fill the budget, instead of growing the tracker without limit.
//!
//! Records whose fields are slices of one [shared buffer](crate::SharedBuffer) are consecutive
//! in a partition (the driver decodes consecutive records of a batch into it), so the tracker
//! charges each buffer once, from the admission of its first record until the last of its
//! records finishes: what the buffer really costs while any record keeps it alive.

use std::collections::VecDeque;
use std::ops::Range;

use tokio::time::Instant;

use crate::record::SharedBuffer;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Admitted, not yet terminal.
    InFlight,
    /// Admitted, the stuck-gap timeout already fired for it (do not fire twice).
    InFlightStuck,
    /// Handled, dead-lettered, deduplicated, or completed before a restart.
    Done,
    /// Given up without completion (revoke skipped it): not in flight, but never committed past.
    Abandoned,
}

/// What one tracker entry is charged against the byte budget while it exists (the entry itself,
/// its share of the deque and of the run index).
pub(crate) const ENTRY_BYTES: usize = 32;

/// What one slot of the shared-buffer queue is charged while it exists.
pub(crate) const CHUNK_SLOT_BYTES: usize = 24;

#[derive(Debug)]
struct Entry {
    offset: i64,
    bytes: u32,
    /// The sequence number of its shared buffer in [`OffsetTracker::chunks`] while it holds it.
    chunk: Option<u32>,
    state: State,
    session: u64,
}

/// A shared buffer some in-flight records of this partition are slices of.
#[derive(Debug)]
struct Chunk {
    addr: usize,
    /// Charged while `live > 0`; 0 after.
    bytes: usize,
    /// Its records still in flight.
    live: u32,
}

/// What [`OffsetTracker::admit`] decided for a fetched record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// New work: dispatch it.
    Dispatch,
    /// Already seen or below the commit point: drop it silently (the source re-sent it).
    Duplicate,
    /// Completed before a restart (from the commit metadata): do not handle it again.
    Restored,
}

/// The oldest record still in flight on a partition (the one holding the watermark back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OldestInFlight {
    /// Its offset (equal to the commit point).
    pub offset: i64,
    /// How long it has been holding the watermark back.
    pub age: std::time::Duration,
    /// The routing hash of its session (0 for the unordered lane). The id itself is not kept per
    /// record, because cloning it would add a shared refcount update per record on the hot path;
    /// the stuck-gap log line and the DLQ record name the session id.
    pub session_hash: u64,
}

/// Tracks one partition. Offsets are admitted in ascending order (gaps allowed: compaction,
/// transaction markers); entries leave from the front once done, so memory follows the records
/// between the watermark and the fetch position.
#[derive(Debug)]
pub(crate) struct OffsetTracker {
    entries: VecDeque<Entry>,
    /// One past the highest offset admitted so far (the fetch position).
    next_offset: i64,
    /// Runs completed before a restart, above `next_offset` or not yet reached.
    restored: VecDeque<Range<i64>>,
    /// False until [`OffsetTracker::check_restored`] compared the restored runs with the
    /// partition's high watermark; unchecked runs are never used to skip a record.
    restored_checked: bool,
    /// One bit per entry, in entry order, set while the entry is `Done`: the run index. A commit
    /// finds the runs of done entries with word scans (64 entries per step) instead of a walk
    /// over every entry, and a finish sets one bit (no ordered map of runs to update on every
    /// out-of-order finish).
    done_bits: VecDeque<u64>,
    /// The bit of `entries[0]` in `done_bits[0]` (0..64); bits below it belong to popped entries.
    bit_base: usize,
    in_flight: usize,
    bytes: usize,
    front_since: Instant,
    /// Shared buffers in admission order, from the oldest one with a record in flight; a buffer
    /// whose records all finished stays as an uncharged slot until those before it are gone.
    chunks: VecDeque<Chunk>,
    /// The sequence number of `chunks[0]` (wrapping).
    chunk_base: u32,
}

impl OffsetTracker {
    pub(crate) fn new(next_offset: i64, restored: Vec<Range<i64>>, now: Instant) -> Self {
        // Adjacent or overlapping runs are merged, so the commit point can step over a whole run.
        let mut merged: VecDeque<Range<i64>> = VecDeque::new();
        for r in restored
            .into_iter()
            .filter(|r| r.end > next_offset && r.start < r.end)
        {
            match merged.back_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push_back(r),
            }
        }
        Self {
            entries: VecDeque::new(),
            next_offset,
            restored_checked: merged.is_empty(),
            restored: merged,
            done_bits: VecDeque::new(),
            bit_base: 0,
            in_flight: 0,
            bytes: 0,
            front_since: now,
            chunks: VecDeque::new(),
            chunk_base: 0,
        }
    }

    /// Checks the restored runs against the partition's high watermark (`None`: unknown). A
    /// completed record lies below the high watermark, so a run reaching above it was not written
    /// by a healthy consumer: all restored runs are dropped and those records are handled again.
    /// Returns the number of restored offsets rejected (0 when the runs are plausible). Without a
    /// known high watermark the runs are dropped too (a replay is safe; a skip is not).
    pub(crate) fn check_restored(&mut self, high_watermark: Option<i64>) -> u64 {
        if self.restored_checked {
            return 0;
        }
        self.restored_checked = true;
        let fits =
            high_watermark.is_some_and(|hw| self.restored.back().is_none_or(|r| r.end <= hw));
        if fits {
            return 0;
        }
        let rejected = self
            .restored
            .iter()
            .map(|r| u64::try_from(r.end.saturating_sub(r.start)).unwrap_or(u64::MAX))
            .fold(0u64, u64::saturating_add);
        self.restored.clear();
        rejected
    }

    /// Admits a fetched record of `bytes` (its own charge) and, if its fields are slices of a
    /// shared buffer, that buffer (charged once, with its first record).
    pub(crate) fn admit(
        &mut self,
        offset: i64,
        bytes: u32,
        shared: Option<SharedBuffer>,
        session: u64,
        now: Instant,
    ) -> Admit {
        if offset < self.next_offset {
            return Admit::Duplicate;
        }
        self.next_offset = offset + 1;
        while self.restored.front().is_some_and(|r| r.end <= offset) {
            self.restored.pop_front();
        }
        if self.restored_checked && self.restored.front().is_some_and(|r| r.start <= offset) {
            // Completed before the restart. If nothing is in front of it, it is below the
            // watermark already; otherwise it waits as Done so the watermark can pass it later.
            if !self.entries.is_empty() {
                self.push_entry(Entry {
                    offset,
                    bytes: 0,
                    chunk: None,
                    state: State::Done,
                    session,
                });
                self.set_done_bit(self.entries.len() - 1);
                self.bytes += ENTRY_BYTES;
            }
            return Admit::Restored;
        }
        if self.entries.is_empty() {
            self.front_since = now;
        }
        let chunk = shared.map(|s| self.hold_chunk(s));
        self.push_entry(Entry {
            offset,
            bytes,
            chunk,
            state: State::InFlight,
            session,
        });
        self.in_flight += 1;
        self.bytes += bytes as usize + ENTRY_BYTES;
        Admit::Dispatch
    }

    /// One more in-flight record of buffer `s`: the newest buffer if that is `s` and still held
    /// (its records are consecutive, and a held buffer's address cannot belong to another one),
    /// else a new one, charged now. Returns its sequence number.
    fn hold_chunk(&mut self, s: SharedBuffer) -> u32 {
        let newest = self.chunk_base.wrapping_add(self.chunks.len() as u32);
        if let Some(c) = self.chunks.back_mut()
            && c.live > 0
            && c.addr == s.addr
        {
            c.live += 1;
            return newest.wrapping_sub(1);
        }
        let bytes = s.charged_bytes();
        self.chunks.push_back(Chunk {
            addr: s.addr,
            bytes,
            live: 1,
        });
        self.bytes += bytes + CHUNK_SLOT_BYTES;
        newest
    }

    /// One record of buffer `seq` finished: the buffer's charge is freed with its last record,
    /// and slots leave from the front. Returns the bytes freed.
    fn release_chunk(&mut self, seq: u32) -> usize {
        let i = seq.wrapping_sub(self.chunk_base) as usize;
        let Some(c) = self.chunks.get_mut(i) else {
            debug_assert!(false, "unknown shared buffer {seq}");
            return 0;
        };
        c.live -= 1;
        let mut freed = 0;
        if c.live == 0 {
            freed += std::mem::take(&mut c.bytes);
        }
        while self.chunks.front().is_some_and(|c| c.live == 0) {
            self.chunks.pop_front();
            self.chunk_base = self.chunk_base.wrapping_add(1);
            freed += CHUNK_SLOT_BYTES;
        }
        freed
    }

    /// Appends an entry, with a clear bit in the run index.
    fn push_entry(&mut self, e: Entry) {
        if (self.bit_base + self.entries.len()) / 64 >= self.done_bits.len() {
            self.done_bits.push_back(0);
        }
        self.entries.push_back(e);
    }

    /// Marks entry `i` done in the run index. A missing word (never: `push_entry` adds one per 64
    /// entries) would only leave the run out of the commit metadata: a replay, never a skip.
    fn set_done_bit(&mut self, i: usize) {
        let bit = self.bit_base + i;
        match self.done_bits.get_mut(bit / 64) {
            Some(w) => *w |= 1 << (bit % 64),
            None => debug_assert!(false, "no run-index word for entry {i}"),
        }
    }

    /// Removes the front entry; its bit is left behind, below `bit_base`.
    fn pop_entry(&mut self) {
        if self.entries.pop_front().is_some() {
            self.bit_base += 1;
            if self.bit_base == 64 {
                self.done_bits.pop_front();
                self.bit_base = 0;
            }
        }
    }

    /// The index of the first entry at or after `from` whose done bit is `set`. Bits past the
    /// last entry are clear, so a search for a clear bit ends there at the latest.
    fn next_bit(&self, from: usize, set: bool) -> Option<usize> {
        let end = self.bit_base + self.entries.len();
        let mut pos = self.bit_base + from;
        while pos < end {
            let w = pos / 64;
            let word = self.done_bits.get(w).copied().unwrap_or(0);
            let word = if set { word } else { !word } & (!0u64 << (pos % 64));
            if word != 0 {
                let found = w * 64 + word.trailing_zeros() as usize;
                return (found < end).then(|| found - self.bit_base);
            }
            pos = (w + 1) * 64;
        }
        None
    }

    /// Runs of done entries, as offset ranges, ascending; a run of entries whose offsets have a
    /// gap (compaction, transaction markers) is split there. O(runs) when offsets are contiguous.
    fn done_runs(&self) -> impl Iterator<Item = Range<i64>> + '_ {
        let e = &self.entries;
        let mut next = 0;
        // The current run of entries, `k..b`, not yet yielded.
        let (mut k, mut b) = (0, 0);
        std::iter::from_fn(move || {
            if k >= b {
                k = self.next_bit(next, true)?;
                b = self.next_bit(k, false).unwrap_or(e.len());
                next = b;
            }
            let start = e[k].offset;
            if e[b - 1].offset - start == (b - 1 - k) as i64 {
                k = b;
                return Some(start..e[b - 1].offset + 1);
            }
            let mut end = start + 1;
            k += 1;
            while k < b && e[k].offset == end {
                end += 1;
                k += 1;
            }
            Some(start..end)
        })
    }

    fn find(&self, offset: i64) -> Option<usize> {
        // Offsets are nearly always contiguous, so the distance from the front is the index.
        let front = self.entries.front()?.offset;
        let guess = usize::try_from(offset.checked_sub(front)?).ok()?;
        if self.entries.get(guess).is_some_and(|e| e.offset == offset) {
            return Some(guess);
        }
        let (a, b) = self.entries.as_slices();
        match a.binary_search_by_key(&offset, |e| e.offset) {
            Ok(i) => Some(i),
            Err(_) => b
                .binary_search_by_key(&offset, |e| e.offset)
                .ok()
                .map(|i| i + a.len()),
        }
    }

    /// Marks `offset` terminal (`done`) or abandoned. Returns the bytes released (0 if the offset
    /// was not in flight: a late or repeated report is harmless).
    pub(crate) fn finish(&mut self, offset: i64, done: bool, now: Instant) -> usize {
        let Some(i) = self.find(offset) else { return 0 };
        let e = &mut self.entries[i];
        if !matches!(e.state, State::InFlight | State::InFlightStuck) {
            return 0;
        }
        e.state = if done { State::Done } else { State::Abandoned };
        let mut freed = e.bytes as usize;
        e.bytes = 0;
        let chunk = e.chunk.take();
        self.in_flight -= 1;
        if let Some(seq) = chunk {
            freed += self.release_chunk(seq);
        }
        if i == 0 {
            let mut popped = 0usize;
            while self.entries.front().is_some_and(|e| e.state == State::Done) {
                self.pop_entry();
                popped += 1;
            }
            if popped > 0 {
                self.front_since = now;
                freed += popped * ENTRY_BYTES;
            }
        } else if done {
            self.set_done_bit(i);
        }
        self.bytes -= freed;
        freed
    }

    /// The commit point: the next offset to read after a restart. Everything below it is done.
    /// With nothing in flight it is the fetch position, moved past a restored run that covers it
    /// (those offsets were completed before the restart).
    pub(crate) fn commit_offset(&self) -> i64 {
        match self.entries.front() {
            Some(e) => e.offset,
            None => match self.restored.front() {
                Some(r) if self.restored_checked && r.start <= self.next_offset => {
                    r.end.max(self.next_offset)
                }
                _ => self.next_offset,
            },
        }
    }

    /// Completed runs above the commit point (finished out of order, plus restored runs not yet
    /// reached), ascending, for the commit metadata. O(runs): the caller encodes a prefix.
    pub(crate) fn completed_runs(&self) -> impl Iterator<Item = Range<i64>> + '_ {
        let commit = self.commit_offset();
        let mut pending: Option<Range<i64>> = None;
        let done = self.done_runs();
        let restored = self
            .restored
            .iter()
            .filter(move |r| self.restored_checked && r.end > commit)
            .map(move |r| r.start.max(self.next_offset).max(commit + 1)..r.end)
            .filter(|r| r.start < r.end);
        // Both sources are ascending and the restored ones lie at or above the fetch position,
        // so a plain chain is ascending; touching runs are merged.
        let mut it = done.chain(restored).filter(move |r| r.start > commit);
        std::iter::from_fn(move || {
            loop {
                match (pending.take(), it.next()) {
                    (None, None) => return None,
                    (Some(p), None) => return Some(p),
                    (None, Some(r)) => pending = Some(r),
                    (Some(p), Some(r)) if p.end >= r.start => {
                        pending = Some(p.start..r.end.max(p.end))
                    }
                    (Some(p), Some(r)) => {
                        pending = Some(r);
                        return Some(p);
                    }
                }
            }
        })
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The records of this partition not finished yet, as far as this member knows: those in
    /// flight (admitted, not terminal) plus those between the fetch position and
    /// `high_watermark`, less those known to be completed before a restart (restored runs, skipped
    /// when fetched). Unlike the lag behind the commit point, records finished above the
    /// watermark do not count. `None` while the high watermark is unknown.
    pub(crate) fn pending(&self, high_watermark: Option<i64>) -> Option<u64> {
        let hw = high_watermark?;
        let unfetched = hw.saturating_sub(self.next_offset).max(0);
        let restored: i64 = if self.restored_checked {
            self.restored
                .iter()
                .map(|r| (r.end.min(hw) - r.start.max(self.next_offset)).max(0))
                .sum()
        } else {
            0
        };
        let unfetched = u64::try_from(unfetched.saturating_sub(restored)).unwrap_or(0);
        Some(unfetched.saturating_add(self.in_flight as u64))
    }

    /// The front record if it is still in flight.
    pub(crate) fn oldest_in_flight(&self, now: Instant) -> Option<OldestInFlight> {
        let e = self.entries.front()?;
        matches!(e.state, State::InFlight | State::InFlightStuck).then(|| OldestInFlight {
            offset: e.offset,
            age: now.saturating_duration_since(self.front_since),
            session_hash: e.session,
        })
    }

    /// Restarts the front record's stuck clock: time its start was held (ownership in doubt) is
    /// not time a handler was stuck.
    pub(crate) fn restart_stuck_clock(&mut self, now: Instant) {
        self.front_since = now;
    }

    /// Restarts the stuck clock of record `offset` if it is the front record and was flagged
    /// stuck: its call was waiting for its endpoint, not stuck, and may be flagged again.
    pub(crate) fn rearm_stuck(&mut self, offset: i64, now: Instant) {
        if let Some(e) = self.entries.front_mut() {
            if e.offset == offset && e.state == State::InFlightStuck {
                e.state = State::InFlight;
                self.front_since = now;
            }
        }
    }

    /// If the front record has held the watermark back for `timeout` and was not flagged yet,
    /// flags it and returns its offset.
    pub(crate) fn take_stuck(&mut self, timeout: std::time::Duration, now: Instant) -> Option<i64> {
        let since = self.front_since;
        let e = self.entries.front_mut()?;
        if e.state == State::InFlight && now.saturating_duration_since(since) >= timeout {
            e.state = State::InFlightStuck;
            return Some(e.offset);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const E: usize = ENTRY_BYTES;

    fn runs(t: &OffsetTracker) -> Vec<Range<i64>> {
        t.completed_runs().collect()
    }

    #[test]
    fn pending_counts_unfinished_work_not_completed_offsets_above_the_watermark() {
        let now = Instant::now();
        let mut t = OffsetTracker::new(100, vec![], now);
        assert_eq!(
            t.pending(None),
            None,
            "unknown until a high watermark is known"
        );
        assert_eq!(t.pending(Some(110)), Some(10), "nothing fetched yet");
        for o in 100..106 {
            t.admit(o, 10, None, 0, now);
        }
        // 6 in flight, 4 not fetched.
        assert_eq!(t.pending(Some(110)), Some(10));
        // Finished above the watermark: no longer pending, though the watermark stays at 100
        // (what a lag from committed offsets counts).
        t.finish(101, true, now);
        t.finish(103, true, now);
        t.finish(105, true, now);
        assert_eq!(t.commit_offset(), 100);
        assert_eq!(t.pending(Some(110)), Some(7));
        // A high watermark behind the fetch position (stale) counts no negative backlog.
        assert_eq!(t.pending(Some(104)), Some(3));
        // Completed before a restart (restored runs) are skipped when fetched: not pending.
        let mut t = OffsetTracker::new(10, vec![12..14, 20..22], now);
        assert_eq!(t.check_restored(Some(30)), 0);
        assert_eq!(t.pending(Some(30)), Some(20 - 4));
        assert_eq!(t.pending(Some(21)), Some(11 - 3));
    }

    #[test]
    fn watermark_is_contiguous_and_metadata_names_the_rest() {
        let now = Instant::now();
        let mut t = OffsetTracker::new(100, vec![], now);
        for o in 100..106 {
            assert_eq!(t.admit(o, 10, None, 0, now), Admit::Dispatch);
        }
        assert_eq!(t.bytes(), 6 * (10 + E));
        assert_eq!(t.admit(103, 10, None, 0, now), Admit::Duplicate);
        // Finishing behind the front frees the record's bytes; the entry stays charged.
        assert_eq!(t.finish(101, true, now), 10);
        assert_eq!(t.finish(103, true, now), 10);
        assert_eq!(t.finish(104, true, now), 10);
        assert_eq!(t.commit_offset(), 100);
        assert_eq!(runs(&t), vec![101..102, 103..105]);
        // The front frees its bytes and the two entries that leave with it.
        assert_eq!(t.finish(100, true, now), 10 + 2 * E);
        assert_eq!(t.commit_offset(), 102);
        assert_eq!(runs(&t), vec![103..105]);
        assert_eq!(t.finish(102, false, now), 10);
        // Abandoned blocks the watermark forever (until the partition is dropped).
        assert_eq!(t.commit_offset(), 102);
        assert_eq!(t.in_flight(), 1);
        assert_eq!(t.bytes(), 4 * E + 10);
        assert_eq!(t.finish(102, true, now), 0);
    }

    #[test]
    fn restored_runs_are_skipped_and_kept_in_metadata_until_passed() {
        let now = Instant::now();
        let mut t = OffsetTracker::new(10, vec![12..14, 20..22], now);
        assert_eq!(t.check_restored(Some(30)), 0);
        assert_eq!(runs(&t), vec![12..14, 20..22]);
        assert_eq!(t.admit(10, 1, None, 0, now), Admit::Dispatch);
        assert_eq!(t.admit(11, 1, None, 0, now), Admit::Dispatch);
        assert_eq!(t.admit(12, 1, None, 0, now), Admit::Restored);
        assert_eq!(t.admit(13, 1, None, 0, now), Admit::Restored);
        assert_eq!(t.admit(14, 1, None, 0, now), Admit::Dispatch);
        assert_eq!(runs(&t), vec![12..14, 20..22]);
        t.finish(10, true, now);
        t.finish(11, true, now);
        assert_eq!(t.commit_offset(), 14);
        assert_eq!(runs(&t), vec![20..22]);
        t.finish(14, true, now);
        assert_eq!(t.commit_offset(), 15);
        assert_eq!(t.admit(20, 1, None, 0, now), Admit::Restored);
        assert_eq!(t.admit(21, 1, None, 0, now), Admit::Restored);
        assert_eq!(t.commit_offset(), 22);
        assert_eq!(runs(&t), vec![]);
    }

    /// When the tracker empties inside a restored run, the commit point steps over the run and
    /// the later restored runs stay in the metadata (a commit point inside the run would make the
    /// encoder refuse the run touching it and leave the metadata empty).
    #[test]
    fn emptying_inside_a_restored_run_keeps_the_later_runs() {
        let now = Instant::now();
        let mut t = OffsetTracker::new(10, vec![12..14, 20..22], now);
        assert_eq!(t.check_restored(Some(30)), 0);
        assert_eq!(t.admit(10, 1, None, 0, now), Admit::Dispatch);
        assert_eq!(t.admit(11, 1, None, 0, now), Admit::Dispatch);
        assert_eq!(t.admit(12, 1, None, 0, now), Admit::Restored);
        t.finish(10, true, now);
        t.finish(11, true, now);
        assert_eq!(t.in_flight(), 0);
        assert_eq!(t.commit_offset(), 14);
        assert_eq!(runs(&t), vec![20..22]);
        let enc = crate::metadata::encode(t.commit_offset(), t.completed_runs(), 4096);
        assert_eq!(enc.text, "o1:6,2");
    }

    /// Runs above the high watermark are not trusted.
    #[test]
    #[allow(clippy::single_range_in_vec_init)]
    fn restored_runs_above_the_high_watermark_are_rejected() {
        let now = Instant::now();
        let mut t = OffsetTracker::new(0, vec![1..4_700_000_000_000_000_000], now);
        assert_eq!(t.check_restored(Some(20)), 4_699_999_999_999_999_999);
        for o in 0..20 {
            assert_eq!(t.admit(o, 1, None, 0, now), Admit::Dispatch, "offset {o}");
        }
        assert_eq!(runs(&t), vec![]);
        // Unknown high watermark: not trusted either.
        let mut u = OffsetTracker::new(0, vec![2..3], now);
        assert_eq!(u.check_restored(None), 1);
        assert_eq!(u.admit(2, 1, None, 0, now), Admit::Dispatch);
        // Plausible runs are kept.
        let mut v = OffsetTracker::new(0, vec![2..3], now);
        assert_eq!(v.check_restored(Some(3)), 0);
        assert_eq!(v.admit(2, 1, None, 0, now), Admit::Restored);
    }

    #[test]
    fn stuck_fires_once_for_the_front() {
        let now = Instant::now();
        let mut t = OffsetTracker::new(0, vec![], now);
        t.admit(0, 1, None, 7, now);
        t.admit(1, 1, None, 8, now);
        let later = now + std::time::Duration::from_secs(10);
        assert_eq!(
            t.take_stuck(std::time::Duration::from_secs(11), later),
            None
        );
        assert_eq!(
            t.take_stuck(std::time::Duration::from_secs(5), later),
            Some(0)
        );
        assert_eq!(t.take_stuck(std::time::Duration::from_secs(5), later), None);
        assert_eq!(
            t.oldest_in_flight(later)
                .map(|o| (o.offset, o.session_hash)),
            Some((0, 7))
        );
        t.finish(0, true, later);
        assert_eq!(
            t.oldest_in_flight(later).map(|o| (o.offset, o.age)),
            Some((1, std::time::Duration::ZERO))
        );
    }

    /// The naive definition the run index must agree with: done entries behind the front,
    /// grouped into offset-contiguous runs.
    fn naive_runs(t: &OffsetTracker) -> Vec<Range<i64>> {
        let mut out: Vec<Range<i64>> = Vec::new();
        for e in t.entries.iter().skip(1).filter(|e| e.state == State::Done) {
            match out.last_mut() {
                Some(r) if r.end == e.offset => r.end += 1,
                _ => out.push(e.offset..e.offset + 1),
            }
        }
        out
    }

    proptest! {
        /// Random admits (with offset gaps) and finishes in random order: the incremental run
        /// index equals the naive walk, bytes return to zero, and the commit point never passes
        /// an unfinished offset.
        #[test]
        fn run_index_matches_a_full_walk(
            gaps in prop::collection::vec(0i64..3, 1..200),
            order in prop::collection::vec((any::<prop::sample::Index>(), any::<bool>()), 0..300),
        ) {
            let now = Instant::now();
            let mut t = OffsetTracker::new(0, vec![], now);
            let mut offsets = Vec::new();
            let mut o = 0;
            for g in gaps {
                o += g;
                prop_assert_eq!(t.admit(o, 5, None, 0, now), Admit::Dispatch);
                offsets.push(o);
                o += 1;
            }
            let mut open: Vec<i64> = offsets.clone();
            let mut done = std::collections::BTreeSet::new();
            for (idx, ok) in order {
                if open.is_empty() { break; }
                let off = open.swap_remove(idx.index(open.len()));
                // Abandon rarely: an abandoned offset holds the watermark for good.
                let ok = ok || off % 7 != 0;
                t.finish(off, ok, now);
                if ok { done.insert(off); }
                prop_assert_eq!(runs(&t), naive_runs(&t));
                let c = t.commit_offset();
                for x in offsets.iter().filter(|x| **x < c) {
                    prop_assert!(done.contains(x), "commit {} passes unfinished {}", c, x);
                }
            }
            if open.is_empty() && done.len() == offsets.len() {
                prop_assert_eq!(t.bytes(), 0);
                prop_assert_eq!(t.commit_offset(), o);
            }
        }

        /// Records in shared buffers (runs of consecutive offsets; some records in none),
        /// finished in random order: at every step the tracker charges exactly each record's own
        /// bytes while it is in flight, each buffer once while any of its records is, one slot
        /// per buffer from the oldest held one on, and the entries; nothing once all finished.
        #[test]
        fn shared_buffers_are_charged_once_while_any_of_their_records_is_in_flight(
            runs in prop::collection::vec((0usize..6, 1usize..2000), 1..60),
            order in prop::collection::vec((any::<prop::sample::Index>(), any::<bool>()), 0..400),
        ) {
            let now = Instant::now();
            let mut t = OffsetTracker::new(0, vec![], now);
            // Per offset: its own bytes and its buffer's index in `bufs` (None: no buffer).
            let mut recs: Vec<(u32, Option<usize>)> = Vec::new();
            let mut bufs: Vec<SharedBuffer> = Vec::new();
            for (n, len) in runs {
                // n == 0: one record of its own; else n records sharing a buffer. Addresses
                // repeat (a freed buffer's address is reused), but two buffers in a row differ
                // (both are alive when the second one is decoded).
                let shared = (n > 0).then(|| SharedBuffer { addr: 4096 * (bufs.len() % 2), len });
                if let Some(s) = shared { bufs.push(s); }
                for k in 0..n.max(1) {
                    let own = 100 + k as u32;
                    let o = recs.len() as i64;
                    prop_assert_eq!(t.admit(o, own, shared, 0, now), Admit::Dispatch);
                    recs.push((own, shared.map(|_| bufs.len() - 1)));
                }
            }
            let mut live = vec![true; recs.len()];
            let mut open: Vec<usize> = (0..recs.len()).collect();
            let model = |live: &[bool], t: &OffsetTracker| -> usize {
                let own: usize = recs.iter().zip(live).filter(|(_, l)| **l).map(|(r, _)| r.0 as usize).sum();
                let mut held = vec![false; bufs.len()];
                for ((_, b), l) in recs.iter().zip(live) {
                    if let (Some(b), true) = (b, l) { held[*b] = true; }
                }
                let charged: usize = bufs.iter().zip(&held).filter(|(_, h)| **h).map(|(b, _)| b.len + 16).sum();
                let slots = held.iter().position(|h| *h).map_or(0, |first| bufs.len() - first);
                own + charged + slots * CHUNK_SLOT_BYTES + t.entries.len() * ENTRY_BYTES
            };
            prop_assert_eq!(t.bytes(), model(&live, &t));
            for (idx, ok) in order {
                if open.is_empty() { break; }
                let i = open.swap_remove(idx.index(open.len()));
                t.finish(i as i64, ok, now);
                live[i] = false;
                prop_assert_eq!(t.bytes(), model(&live, &t));
            }
            for i in open {
                t.finish(i as i64, true, now);
                live[i] = false;
            }
            prop_assert_eq!(t.bytes(), model(&live, &t));
            prop_assert!(t.chunks.is_empty());
        }
    }
}
