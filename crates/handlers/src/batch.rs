//! What an answer to a batch of records means: how many are done, what happens to the next one, and the replies of the records done; shared by the HTTP and pipe handlers.
//!
//! The same JSON object answers a batch on both: `{"done": N}` (the first N done, the next
//! retried), `{"done": N, "result": "fail", "reason": ".."}` (the next dead-lettered),
//! `{"results": ["ok", "retry", ..]}` (one result per record from the front, the first that is
//! not `ok` deciding), and `"replies": [{"offset": O, ..}, ..]` naming their records. Where the
//! answer does not say how many are done, the answerer decides ([`Answerer`]).

use std::sync::atomic::{AtomicU64, Ordering};

use orderly_engine::{BatchOutcome, BatchReplies, HandlerError, Record, Reply};

use crate::replies;

/// The answer to a batch that a 2xx body or a pipe child's line may carry (see
/// [`batch_answer`]). Unknown fields (the pipe's `id`) are ignored.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct BatchAnswer {
    /// Records from the front that are done.
    pub(crate) done: Option<usize>,
    /// One result per record from the front (`ok`, `retry`, `fail`); the first that is not `ok`
    /// decides the next record.
    pub(crate) results: Option<Vec<String>>,
    /// The next record's result when `done` is given: `retry` (default) or `fail`. Without
    /// `done` or `results`, see [`Answerer`].
    pub(crate) result: Option<String>,
    /// Why, for the dead letter or the retry log.
    pub(crate) reason: Option<String>,
    /// Replies, each naming the `offset` of its record (read one by one: see [`batch_answer`]).
    #[serde(default)]
    pub(crate) replies: Vec<serde_json::Value>,
}

/// Who answered a batch: decides what an answer naming no count means, and the error texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answerer {
    /// An HTTP endpoint's 2xx: an answer naming no count means all done, as the status says,
    /// unless its `result` names a failure of the whole batch (`retry`: the whole batch is
    /// retried; `fail`: the first record is dead-lettered, the others sent again).
    Http,
    /// A pipe child's line: `result` without `done` or `results` is the whole batch's result
    /// (`ok` or none: all done; `retry`: the whole batch is retried; `fail`: the first record is
    /// dead-lettered, the others sent again), as a per-record line's `result` is its record's.
    /// The error text is the answer's `reason`, as for a per-record line.
    Pipe,
}

impl Answerer {
    /// Whether `result`, given without `done` or `results`, fails the whole batch: on a pipe
    /// anything but `ok`; after an HTTP 2xx only the results that name a failure (any other
    /// word cannot undo the status).
    fn names_a_failure(self, result: &str) -> bool {
        match self {
            Answerer::Pipe => result != "ok",
            Answerer::Http => matches!(result, "retry" | "fail" | "dead-letter" | "permanent"),
        }
    }

    /// The `handler` label of the metric.
    fn name(self) -> &'static str {
        match self {
            Answerer::Http => "http",
            Answerer::Pipe => "pipe",
        }
    }

    /// What precedes the texts of errors about the answer itself.
    fn prefix(self) -> &'static str {
        match self {
            Answerer::Http => "HTTP 2xx",
            Answerer::Pipe => "the pipe handler's batch answer",
        }
    }

    /// The error of the first record not done, answered `result` with `reason`.
    fn error(self, result: &str, reason: &str) -> HandlerError {
        let text = match self {
            Answerer::Http => format!("HTTP 2xx: the endpoint answered {result}: {reason}"),
            Answerer::Pipe => reason.to_owned(),
        };
        match result {
            "fail" | "dead-letter" | "permanent" => HandlerError::permanent(text),
            _ => HandlerError::transient(text),
        }
    }
}

/// The UTF-8 byte order mark, which some services write before a JSON body.
const BOM: &[u8] = b"\xef\xbb\xbf";

/// `body` without a leading UTF-8 BOM and JSON white space.
fn content(body: &[u8]) -> &[u8] {
    let b = body.strip_prefix(BOM).unwrap_or(body);
    let start = b
        .iter()
        .position(|c| !matches!(c, b' ' | b'\t' | b'\r' | b'\n'))
        .unwrap_or(b.len());
    &b[start..]
}

/// When the last warning about an unreadable batch answer was written: seconds since [`START`],
/// plus 60 (0: never).
static WARNED: AtomicU64 = AtomicU64::new(0);

/// Since when [`WARNED`] counts.
static START: std::sync::LazyLock<std::time::Instant> =
    std::sync::LazyLock::new(std::time::Instant::now);

/// The whole batch retried because its answer could not be read (see [`batch_answer`]): counted in `orderly_batch_answers_invalid_total`, warned about at most once a minute (the
/// retry's error names it every time).
fn unreadable(by: Answerer, why: &str) -> BatchReplies {
    metrics::counter!("orderly_batch_answers_invalid_total", "handler" => by.name()).increment(1);
    let now = START.elapsed().as_secs() + 60;
    let last = WARNED.load(Ordering::Relaxed);
    if now >= last + 60
        && WARNED
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        tracing::warn!(
            handler = by.name(),
            error = why,
            "a batch answer could not be read; the whole batch is retried (metric orderly_batch_answers_invalid_total counts them)"
        );
    }
    BatchOutcome::failed(HandlerError::transient(format!(
        "{}: {why}; the whole batch is retried",
        by.prefix()
    )))
    .into()
}

/// Maps an HTTP 2xx body answering a batch of `records` (the answer with their replies; `whole`:
/// whether `body` is the whole body). A UTF-8 BOM and white space before it are read past.
/// Content that is no JSON object or array (none at all, text, HTML) names no count: all done,
/// as the status says, even when only its start was read. A JSON object: `{"done": N}` the
/// first N done and the next retried; `{"done": N, "result": "fail", "reason": ".."}` the first
/// N done and the next dead-lettered; `{"results": ["ok", "ok", "retry", ..]}` one result per
/// record, the first that is not `ok` deciding. An answer that starts like JSON (`{` or `[`)
/// but does not parse as one (a syntax error, a field of the wrong type, an array), or was not
/// read whole, or a body of which nothing but white space was read before it broke off, retries
/// the whole batch: what it says is unknown. `"replies": [{"offset": O, ...}, ..]` are the
/// replies of the records, each naming its record's offset, in the order each record's replies
/// are written (those of records not done are ignored: they come again with the answer that
/// does them). A reply without an offset, or naming no record of the batch, or that does not
/// parse, makes the whole answer a permanent error of the first record.
pub(crate) fn batch_answer(
    body: &[u8],
    whole: bool,
    records: &[&Record],
    by: Answerer,
) -> BatchReplies {
    let n = records.len();
    let body = content(body);
    match body.first() {
        Some(b'{' | b'[') => {}
        None if !whole => {
            return unreadable(by, "the batch answer broke off before its content");
        }
        _ => return BatchOutcome::all(n).into(),
    }
    if !whole {
        return unreadable(
            by,
            "the batch answer was not read whole (over the answer size limit, or cut short)",
        );
    }
    let a = match serde_json::from_slice::<BatchAnswer>(body) {
        Ok(a) => a,
        Err(e) => return unreadable(by, &format!("invalid batch answer: {e}")),
    };
    let mut replies: Vec<Vec<Reply>> = Vec::new();
    for r in a.replies {
        let r = match serde_json::from_value::<replies::JsonReply>(r) {
            Ok(r) => r,
            Err(e) => {
                // An answer that names its replies but one cannot be read: they must not be
                // dropped.
                return BatchOutcome::failed(HandlerError::permanent(format!(
                    "{}: invalid reply in the batch answer: {e}",
                    by.prefix()
                )))
                .into();
            }
        };
        let Some(i) = r
            .offset
            .and_then(|o| records.iter().position(|rec| rec.offset == o))
        else {
            return BatchOutcome::failed(HandlerError::permanent(format!(
                "{}: a reply of the batch answer names offset {:?}, not a record of the batch ({}..={})",
                by.prefix(),
                r.offset,
                records.first().map_or(0, |r| r.offset),
                records.last().map_or(0, |r| r.offset)
            )))
            .into();
        };
        match r.into_reply() {
            Ok(reply) => {
                if replies.len() <= i {
                    replies.resize_with(i + 1, Vec::new);
                }
                replies[i].push(reply);
            }
            Err(e) => {
                return BatchOutcome::failed(HandlerError::permanent(format!(
                    "{}: {e}",
                    by.prefix()
                )))
                .into();
            }
        }
    }
    BatchReplies {
        outcome: batch_outcome(a.done, a.results, a.result, a.reason, n, by),
        replies,
    }
}

/// The outcome part of [`batch_answer`].
fn batch_outcome(
    done: Option<usize>,
    results: Option<Vec<String>>,
    result: Option<String>,
    reason: Option<String>,
    n: usize,
    by: Answerer,
) -> BatchOutcome {
    let reason = reason.unwrap_or_default();
    if let Some(results) = results {
        return match results.iter().position(|r| r != "ok") {
            Some(i) if i < n => BatchOutcome {
                done: i,
                error: Some(by.error(&results[i], &reason)),
            },
            // Fewer results than records: the rest are retried.
            None if results.len() < n => BatchOutcome {
                done: results.len(),
                error: None,
            },
            _ => BatchOutcome::all(n),
        };
    }
    match (done, result.as_deref()) {
        (Some(d), result) if d < n => BatchOutcome {
            done: d,
            error: Some(by.error(result.unwrap_or("retry"), &reason)),
        },
        (None, Some(result)) if n > 0 && by.names_a_failure(result) => {
            BatchOutcome::failed(by.error(result, &reason))
        }
        _ => BatchOutcome::all(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recs(n: i64) -> Vec<Record> {
        (10..10 + n)
            .map(|o| Record::new(orderly_engine::TopicPartition::new("t", 0), o, None, None))
            .collect()
    }

    /// The outcome of `body` as the answer to a batch of `n` records (offsets from 10).
    fn answer_by(body: &[u8], n: usize, by: Answerer) -> BatchOutcome {
        let recs = recs(n as i64);
        let refs: Vec<&Record> = recs.iter().collect();
        batch_answer(body, true, &refs, by).outcome
    }

    fn answer(body: &[u8], n: usize) -> BatchOutcome {
        answer_by(body, n, Answerer::Http)
    }

    #[test]
    fn a_2xx_naming_a_retry_or_a_failure_without_a_count_is_not_all_done() {
        let o = answer(br#"{"result": "retry", "reason": "busy"}"#, 3);
        assert_eq!(o.done, 0);
        assert!(
            matches!(o.error, Some(HandlerError::Transient { message: ref t, .. }) if t.contains("busy"))
        );
        let o = answer(br#"{"result": "fail", "reason": "bad"}"#, 3);
        assert_eq!(o.done, 0);
        assert!(
            matches!(o.error, Some(HandlerError::Permanent { message: ref t, .. }) if t.contains("bad"))
        );
        // Any other result names no failure: all done, as the status said.
        assert_eq!(answer(br#"{"result": "ok"}"#, 3), BatchOutcome::all(3));
        assert_eq!(
            answer(br#"{"result": "accepted"}"#, 3),
            BatchOutcome::all(3)
        );
    }

    #[test]
    fn batch_answers_name_what_is_done() {
        assert_eq!(answer(b"", 3), BatchOutcome::all(3));
        assert_eq!(answer(b"ok", 3), BatchOutcome::all(3));
        assert_eq!(answer(br#"{"done": 5}"#, 3), BatchOutcome::all(3));
        let o = answer(br#"{"done": 1}"#, 3);
        assert_eq!(o.done, 1);
        assert!(matches!(o.error, Some(HandlerError::Transient { .. })));
        let o = answer(br#"{"done": 2, "result": "fail", "reason": "bad"}"#, 3);
        assert_eq!(o.done, 2);
        assert!(
            matches!(o.error, Some(HandlerError::Permanent { message: ref t, .. }) if t.contains("bad"))
        );
        let o = answer(br#"{"results": ["ok", "retry", "ok"]}"#, 3);
        assert_eq!(o.done, 1);
        assert!(matches!(o.error, Some(HandlerError::Transient { .. })));
        let o = answer(br#"{"results": ["ok", "fail"]}"#, 3);
        assert_eq!(o.done, 1);
        assert!(matches!(o.error, Some(HandlerError::Permanent { .. })));
        let o = answer(br#"{"results": ["ok"]}"#, 3);
        assert_eq!((o.done, o.error), (1, None));
        assert_eq!(
            answer(br#"{"results": ["ok", "ok", "ok"]}"#, 3),
            BatchOutcome::all(3)
        );
    }

    #[test]
    fn malformed_json_answers_retry_the_whole_batch() {
        for by in [Answerer::Http, Answerer::Pipe] {
            for bad in [
                &br#"{"done": 1,}"#[..],
                br#"{"done": "1"}"#,
                br#"{"results": "ok"}"#,
                br#"{"done": 1"#,
                br#"[{"done": 1}]"#,
                b"\xef\xbb\xbf {\"done\": 1,}",
            ] {
                let o = answer_by(bad, 8, by);
                assert_eq!(o.done, 0, "{}", String::from_utf8_lossy(bad));
                assert!(
                    matches!(o.error, Some(HandlerError::Transient { message: ref t, .. }) if t.contains("batch answer")),
                    "{}: {o:?}",
                    String::from_utf8_lossy(bad)
                );
            }
        }
        // A UTF-8 BOM and white space before the answer are read past.
        let o = answer(b"\xef\xbb\xbf{\"done\":1}", 8);
        assert_eq!(o.done, 1);
        assert!(matches!(o.error, Some(HandlerError::Transient { .. })));
        let o = answer(b"\xef\xbb\xbf \r\n{\"done\":2}", 8);
        assert_eq!(o.done, 2);
        // Text that is no JSON object or array names no count: all done, as the status said.
        for fine in [
            &b"ok"[..],
            b"\xef\xbb\xbf",
            b"  ",
            b"\"accepted\"",
            b"204",
            b"<html>",
        ] {
            assert_eq!(answer(fine, 8), BatchOutcome::all(8));
        }
    }

    #[test]
    fn a_pipe_result_without_a_count_is_the_whole_batchs() {
        let pipe = |body: &[u8]| answer_by(body, 3, Answerer::Pipe);
        assert_eq!(pipe(br#"{"id": 1}"#), BatchOutcome::all(3));
        assert_eq!(pipe(br#"{"id": 1, "result": "ok"}"#), BatchOutcome::all(3));
        assert_eq!(
            pipe(br#"{"id": 1, "result": "retry", "reason": "busy"}"#),
            BatchOutcome::failed(HandlerError::transient("busy"))
        );
        assert_eq!(
            pipe(br#"{"id": 1, "result": "fail", "reason": "bad"}"#),
            BatchOutcome::failed(HandlerError::permanent("bad"))
        );
        assert_eq!(
            pipe(br#"{"id": 1, "done": 2, "result": "fail", "reason": "bad"}"#),
            BatchOutcome {
                done: 2,
                error: Some(HandlerError::permanent("bad"))
            }
        );
    }

    #[test]
    fn batch_answers_carry_replies_by_offset() {
        let recs = recs(3);
        let refs: Vec<&Record> = recs.iter().collect();
        let a = batch_answer(
            br#"{"done": 2, "replies": [{"offset": 11, "value": "b1"}, {"offset": 10, "value": "a"}, {"offset": 11, "value": "b2", "topic": "x"}]}"#,
            true,
            &refs,
            Answerer::Http,
        );
        assert_eq!(a.outcome.done, 2);
        assert_eq!(
            a.replies,
            vec![
                vec![Reply::new("a")],
                vec![Reply::new("b1"), Reply::new("b2").to_topic("x")]
            ]
        );
        // A reply naming no record of the batch, or none at all, or misspelt: not dropped.
        for bad in [
            &br#"{"replies": [{"offset": 9, "value": "x"}]}"#[..],
            br#"{"replies": [{"value": "x"}]}"#,
            br#"{"replies": [{"offset": 10, "valeu": "x"}]}"#,
        ] {
            let a = batch_answer(bad, true, &refs, Answerer::Http);
            assert_eq!(a.outcome.done, 0, "{}", String::from_utf8_lossy(bad));
            assert!(matches!(
                a.outcome.error,
                Some(HandlerError::Permanent { .. })
            ));
        }
    }
}
