//! A partition's done set: a watermark and the completed runs above it.

use std::ops::Range;

use orderly_engine::metadata;

/// A done set: every offset below `offset`, and the `runs` above it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Done {
    pub(super) offset: i64,
    pub(super) runs: Vec<Range<i64>>,
}

impl Done {
    pub(super) fn from_point(offset: i64, text: &str) -> Self {
        let runs = metadata::decode(offset, text).unwrap_or_default();
        Done { offset, runs }.normalized()
    }

    pub(super) fn union(&self, other: &Done) -> Done {
        let mut runs = self.runs.clone();
        runs.extend(other.runs.iter().cloned());
        Done {
            offset: self.offset.max(other.offset),
            runs,
        }
        .normalized()
    }

    pub(super) fn with_offsets(&self, offsets: impl IntoIterator<Item = i64>) -> Done {
        let mut runs = self.runs.clone();
        runs.extend(offsets.into_iter().map(|o| o..o.saturating_add(1)));
        Done {
            offset: self.offset,
            runs,
        }
        .normalized()
    }

    /// Sorts and merges the runs and moves the watermark over those that touch it.
    fn normalized(mut self) -> Done {
        self.runs.retain(|r| r.start < r.end);
        self.runs.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<i64>> = Vec::with_capacity(self.runs.len());
        for r in self.runs {
            if r.end <= self.offset {
                continue;
            }
            if r.start <= self.offset {
                self.offset = r.end;
                continue;
            }
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        // A watermark moved by a later run may now reach earlier merged runs.
        let mut out = Vec::with_capacity(merged.len());
        for r in merged {
            if r.start <= self.offset {
                self.offset = self.offset.max(r.end);
            } else {
                out.push(r);
            }
        }
        self.runs = out;
        self
    }
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::Done;

    #[test]
    fn union_moves_the_watermark_over_touching_runs() {
        let a = Done {
            offset: 10,
            runs: vec![12..14, 20..21],
        };
        let d = a.with_offsets([10, 11, 14, 30]);
        assert_eq!(
            d,
            Done {
                offset: 15,
                runs: vec![20..21, 30..31]
            }
        );
        let b = Done {
            offset: 21,
            runs: vec![25..26],
        };
        assert_eq!(
            d.union(&b),
            Done {
                offset: 21,
                runs: vec![25..26, 30..31]
            }
        );
    }

    #[test]
    fn a_point_round_trips_through_the_metadata() {
        let d = Done {
            offset: 5,
            runs: vec![7..9, 11..12],
        };
        let enc = orderly_engine::metadata::encode(d.offset, d.runs.iter().cloned(), 4096);
        assert_eq!(Done::from_point(5, &enc.text), d);
    }
}
