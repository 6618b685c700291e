//! Commit-metadata codec: completed offsets above the commit point, as compact text.
//!
//! # Format
//!
//! `o1:` followed by comma-separated base-36 numbers taken in pairs `gap,len`: starting at the
//! committed offset `W` (the next offset to read, never itself completed), skip `gap` offsets,
//! then `len` offsets are completed; the next pair continues where the previous run ended.
//! Example: completed `{W+2, W+3, W+7}` encodes as `o1:2,2,3,1`.
//!
//! # Overflow rule (never loses a record)
//!
//! The broker rejects metadata longer than `offset.metadata.max.bytes` (4096 by default). When
//! the runs do not fit, only the longest *prefix* of runs that fits is written. Runs left out are
//! simply not known as completed after a restart: those records are handled again
//! (at-least-once), none is skipped that was not completed. The first gap is never 0, so a
//! decoder cannot be tricked into skipping the committed offset itself.

use std::ops::Range;

/// The prefix that marks metadata written by this codec (version 1).
pub const PREFIX: &str = "o1:";

/// The broker's default `offset.metadata.max.bytes`.
pub const DEFAULT_LIMIT: usize = 4096;

/// Metadata that does not parse as ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// Not written by this codec (another client's metadata): ignored, nothing is skipped.
    #[error("commit metadata is not orderly's: {0:?}")]
    Foreign(String),
    /// Looks like ours but is malformed: ignored, nothing is skipped.
    #[error("malformed commit metadata at pair {pair}: {text:?}")]
    Malformed {
        /// Index of the offending pair.
        pair: usize,
        /// The whole metadata text.
        text: String,
    },
}

/// The result of [`encode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// The metadata text (empty when there is nothing to record).
    pub text: String,
    /// How many of the given runs are in `text`.
    pub runs_encoded: usize,
    /// True when some runs did not fit and were left out (those records will be replayed).
    pub truncated: bool,
}

fn push_base36(out: &mut String, mut n: u64) {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut buf = [0u8; 13];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = DIGITS[(n % 36) as usize];
        n /= 36;
        if n == 0 {
            break;
        }
    }
    for &b in &buf[i..] {
        out.push(char::from(b));
    }
}

/// Encodes completed runs (ascending, non-overlapping, all above `commit_offset`) within `limit`
/// bytes. Runs that are empty, overlap, or touch `commit_offset` or below end the encoding there
/// (prefix rule), so bad input can only make the result shorter, never wrong.
pub fn encode(
    commit_offset: i64,
    runs: impl IntoIterator<Item = Range<i64>>,
    limit: usize,
) -> Encoded {
    let mut text = String::new();
    let mut pos = commit_offset;
    let mut runs_encoded = 0;
    let mut truncated = false;
    let mut pair = String::new();
    for (i, r) in runs.into_iter().enumerate() {
        let first = i == 0;
        if r.start >= r.end || r.start < pos || (first && r.start == commit_offset) {
            truncated = true;
            break;
        }
        pair.clear();
        if !first {
            pair.push(',');
        }
        // Both differences are positive and fit in u64 by the checks above.
        push_base36(&mut pair, r.start.abs_diff(pos));
        pair.push(',');
        push_base36(&mut pair, r.end.abs_diff(r.start));
        let prefix_len = if first { PREFIX.len() } else { 0 };
        if text.len() + prefix_len + pair.len() > limit {
            truncated = true;
            break;
        }
        if first {
            text.push_str(PREFIX);
        }
        text.push_str(&pair);
        runs_encoded += 1;
        pos = r.end;
    }
    Encoded {
        text,
        runs_encoded,
        truncated,
    }
}

/// Decodes metadata written by [`encode`] for the same `commit_offset`. Empty text decodes to no
/// runs. Anything else that is not ours is an error the caller logs and ignores.
pub fn decode(commit_offset: i64, text: &str) -> Result<Vec<Range<i64>>, MetadataError> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let Some(body) = text.strip_prefix(PREFIX) else {
        return Err(MetadataError::Foreign(text.to_owned()));
    };
    let malformed = |pair| MetadataError::Malformed {
        pair,
        text: text.to_owned(),
    };
    let nums: Vec<&str> = body.split(',').collect();
    if nums.len() % 2 != 0 {
        return Err(malformed(nums.len() / 2));
    }
    let mut pos = commit_offset;
    let mut runs = Vec::with_capacity(nums.len() / 2);
    for (i, p) in nums.chunks_exact(2).enumerate() {
        let gap = i64::from_str_radix(p[0], 36).map_err(|_| malformed(i))?;
        let len = i64::from_str_radix(p[1], 36).map_err(|_| malformed(i))?;
        if gap < 0 || len <= 0 || (i == 0 && gap == 0) {
            return Err(malformed(i));
        }
        let start = pos.checked_add(gap).ok_or_else(|| malformed(i))?;
        let end = start.checked_add(len).ok_or_else(|| malformed(i))?;
        runs.push(start..end);
        pos = end;
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn example_from_the_docs() {
        let e = encode(100, [102..104, 107..108], DEFAULT_LIMIT);
        assert_eq!(e.text, "o1:2,2,3,1");
        assert_eq!(decode(100, &e.text), Ok(vec![102..104, 107..108]));
        assert_eq!(encode(100, std::iter::empty(), 10).text, "");
        assert_eq!(decode(5, ""), Ok(vec![]));
        assert!(matches!(
            decode(5, "something else"),
            Err(MetadataError::Foreign(_))
        ));
        assert!(matches!(
            decode(5, "o1:0,1"),
            Err(MetadataError::Malformed { .. })
        ));
        assert!(matches!(
            decode(5, "o1:1"),
            Err(MetadataError::Malformed { .. })
        ));
        // A run touching the committed offset is refused: the prefix rule stops there.
        assert_eq!(
            encode(100, std::iter::once(100..101), DEFAULT_LIMIT).runs_encoded,
            0
        );
    }

    fn runs_strategy() -> impl Strategy<Value = (i64, Vec<Range<i64>>)> {
        (
            0i64..1_000_000_000_000,
            prop::collection::vec((1i64..5000, 1i64..5000), 0..600),
        )
            .prop_map(|(base, pairs)| {
                let mut pos = base;
                let runs = pairs
                    .into_iter()
                    .map(|(gap, len)| {
                        let s = pos + gap;
                        pos = s + len;
                        s..pos
                    })
                    .collect();
                (base, runs)
            })
    }

    proptest! {
        #[test]
        fn round_trip_and_overflow_prefix((base, runs) in runs_strategy(), limit in 0usize..5000) {
            let e = encode(base, runs.clone(), limit);
            prop_assert!(e.text.len() <= limit);
            let back = decode(base, &e.text).map_err(|e| TestCaseError::fail(e.to_string()))?;
            // Only a prefix of the runs, exactly as given: nothing claimed that was not completed.
            prop_assert_eq!(&back[..], &runs[..e.runs_encoded]);
            prop_assert_eq!(e.truncated, e.runs_encoded < runs.len());
            // The prefix is maximal: the next run would not have fit.
            if e.truncated {
                let longer = encode(base, runs[..=e.runs_encoded].to_vec(), usize::MAX);
                prop_assert!(longer.text.len() > limit);
            }
        }

        #[test]
        fn decode_never_panics_and_never_skips_the_commit_point(base in -10i64..1_000_000, text in "o1:[0-9a-z,]{0,40}") {
            if let Ok(runs) = decode(base, &text) {
                for r in runs {
                    prop_assert!(r.start > base && r.end > r.start);
                }
            }
        }
    }
}
