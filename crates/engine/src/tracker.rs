//! Per-partition offset tracker: in-flight and completed offsets, the commit point, and the
//! completed runs above it for the commit metadata.

use std::collections::VecDeque;
use std::ops::Range;

use tokio::time::Instant;

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

#[derive(Debug)]
struct Entry {
    offset: i64,
    bytes: u32,
    state: State,
    session: u64,
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
    in_flight: usize,
    bytes: usize,
    front_since: Instant,
}

impl OffsetTracker {
    pub(crate) fn new(next_offset: i64, restored: Vec<Range<i64>>, now: Instant) -> Self {
        Self {
            entries: VecDeque::new(),
            next_offset,
            restored: restored
                .into_iter()
                .filter(|r| r.end > next_offset)
                .collect(),
            in_flight: 0,
            bytes: 0,
            front_since: now,
        }
    }

    pub(crate) fn admit(&mut self, offset: i64, bytes: u32, session: u64, now: Instant) -> Admit {
        if offset < self.next_offset {
            return Admit::Duplicate;
        }
        self.next_offset = offset + 1;
        while self.restored.front().is_some_and(|r| r.end <= offset) {
            self.restored.pop_front();
        }
        if self.restored.front().is_some_and(|r| r.start <= offset) {
            // Completed before the restart. If nothing is in front of it, it is below the
            // watermark already; otherwise it waits as Done so the watermark can pass it later.
            if !self.entries.is_empty() {
                self.entries.push_back(Entry {
                    offset,
                    bytes: 0,
                    state: State::Done,
                    session,
                });
            }
            return Admit::Restored;
        }
        if self.entries.is_empty() {
            self.front_since = now;
        }
        self.entries.push_back(Entry {
            offset,
            bytes,
            state: State::InFlight,
            session,
        });
        self.in_flight += 1;
        self.bytes += bytes as usize;
        Admit::Dispatch
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
        let freed = e.bytes as usize;
        self.in_flight -= 1;
        self.bytes -= freed;
        if i == 0 {
            let mut popped = false;
            while self.entries.front().is_some_and(|e| e.state == State::Done) {
                self.entries.pop_front();
                popped = true;
            }
            if popped {
                self.front_since = now;
            }
        }
        freed
    }

    /// The commit point: the next offset to read after a restart. Everything below it is done.
    pub(crate) fn commit_offset(&self) -> i64 {
        self.entries.front().map_or(self.next_offset, |e| e.offset)
    }

    /// Completed runs above the commit point (finished out of order, plus restored runs not yet
    /// reached), ascending, for the commit metadata.
    pub(crate) fn completed_runs(&self) -> Vec<Range<i64>> {
        let mut runs: Vec<Range<i64>> = Vec::new();
        for e in self
            .entries
            .iter()
            .skip(1)
            .filter(|e| e.state == State::Done)
        {
            match runs.last_mut() {
                Some(r) if r.end == e.offset => r.end += 1,
                _ => runs.push(e.offset..e.offset + 1),
            }
        }
        for r in self.restored.iter().filter(|r| r.end > self.next_offset) {
            let r = r.start.max(self.next_offset)..r.end;
            match runs.last_mut() {
                Some(last) if last.end == r.start => last.end = r.end,
                _ => runs.push(r),
            }
        }
        runs
    }

    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
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

    #[test]
    fn watermark_is_contiguous_and_metadata_names_the_rest() {
        let now = Instant::now();
        let mut t = OffsetTracker::new(100, vec![], now);
        for o in 100..106 {
            assert_eq!(t.admit(o, 10, 0, now), Admit::Dispatch);
        }
        assert_eq!(t.admit(103, 10, 0, now), Admit::Duplicate);
        assert_eq!(t.finish(101, true, now), 10);
        assert_eq!(t.finish(103, true, now), 10);
        assert_eq!(t.finish(104, true, now), 10);
        assert_eq!(t.commit_offset(), 100);
        assert_eq!(t.completed_runs(), vec![101..102, 103..105]);
        assert_eq!(t.finish(100, true, now), 10);
        assert_eq!(t.commit_offset(), 102);
        assert_eq!(t.finish(102, false, now), 10);
        // Abandoned blocks the watermark forever (until the partition is dropped).
        assert_eq!(t.commit_offset(), 102);
        assert_eq!(t.in_flight(), 1);
        assert_eq!(t.bytes(), 10);
        assert_eq!(t.finish(102, true, now), 0);
    }

    #[test]
    fn restored_runs_are_skipped_and_kept_in_metadata_until_passed() {
        let now = Instant::now();
        let mut t = OffsetTracker::new(10, vec![12..14, 20..22], now);
        assert_eq!(t.completed_runs(), vec![12..14, 20..22]);
        assert_eq!(t.admit(10, 1, 0, now), Admit::Dispatch);
        assert_eq!(t.admit(11, 1, 0, now), Admit::Dispatch);
        assert_eq!(t.admit(12, 1, 0, now), Admit::Restored);
        assert_eq!(t.admit(13, 1, 0, now), Admit::Restored);
        assert_eq!(t.admit(14, 1, 0, now), Admit::Dispatch);
        assert_eq!(t.completed_runs(), vec![12..14, 20..22]);
        t.finish(10, true, now);
        t.finish(11, true, now);
        assert_eq!(t.commit_offset(), 14);
        assert_eq!(t.completed_runs(), vec![20..22]);
        t.finish(14, true, now);
        assert_eq!(t.commit_offset(), 15);
        assert_eq!(t.admit(20, 1, 0, now), Admit::Restored);
        assert_eq!(t.admit(21, 1, 0, now), Admit::Restored);
        assert_eq!(t.commit_offset(), 22);
        assert_eq!(t.completed_runs(), vec![]);
    }

    #[test]
    fn stuck_fires_once_for_the_front() {
        let now = Instant::now();
        let mut t = OffsetTracker::new(0, vec![], now);
        t.admit(0, 1, 7, now);
        t.admit(1, 1, 8, now);
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
}
