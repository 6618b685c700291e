//! [`Handler`] for [`HttpHandler`]: one request per record, or one per batch.

use super::*;

impl Handler for HttpHandler {
    fn available(&self) -> bool {
        self.circuit.as_ref().is_none_or(Circuit::available)
    }

    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        self.handle_replying(record, attempt).await.map(drop)
    }

    async fn handle_replying(
        &self,
        record: &Record,
        attempt: Attempt,
    ) -> Result<Vec<Reply>, HandlerError> {
        let meta = Meta::of(record, attempt, &self.router)?;
        let answer = self.send(|| self.request(record, &meta)).await?;
        self.outcome(&answer).await?;
        self.replies(&answer)
    }

    async fn handle_batch(&self, records: &[&Record], attempt: Attempt) -> BatchOutcome {
        self.handle_batch_replying(records, attempt).await.outcome
    }

    /// One request for the whole batch: a JSON array of the records' envelopes with the
    /// headers `orderly-batch-size`, `orderly-first-offset` and `orderly-last-offset`. 2xx: the
    /// body may name what is done (see the README's batch contract); the retried classes (408/425/429/5xx by default), timeouts and
    /// connection failures: the whole batch is retried; a dead-lettering status cannot name the
    /// record at fault, so the records are sent again one per request within this call, each
    /// getting its own verdict. Replies come in the answer's `replies`, each naming the
    /// `offset` of its record (see [`crate::replies`] and the README).
    async fn handle_batch_replying(&self, records: &[&Record], attempt: Attempt) -> BatchReplies {
        let mut metas = Vec::with_capacity(records.len());
        for (i, r) in records.iter().enumerate() {
            let at = if i == 0 { attempt } else { Attempt::FIRST };
            match Meta::of(r, at, &self.router) {
                Ok(m) => metas.push(m),
                Err(e) => {
                    // The records before it go on their own; this one gets the error.
                    return self.one_by_one(&records[..i], attempt, Some(e)).await;
                }
            }
        }
        let answer = match self.send(|| self.batch_request(records, &metas)).await {
            Ok(a) => a,
            Err(e) => return BatchOutcome::failed(e).into(),
        };
        match self.outcome(&answer).await {
            Ok(()) => batch_answer(&answer.body, answer.complete, records, Answerer::Http),
            Err(e) if e.is_permanent() => self.one_by_one(records, attempt, None).await,
            Err(e) => BatchOutcome::failed(e).into(),
        }
    }
}

impl HttpHandler {
    /// Sends `records` one per request, stopping at the first failure; `then`: the error of the
    /// record after them.
    async fn one_by_one(
        &self,
        records: &[&Record],
        attempt: Attempt,
        then: Option<HandlerError>,
    ) -> BatchReplies {
        let mut replies = Vec::with_capacity(records.len());
        for (i, r) in records.iter().enumerate() {
            let at = if i == 0 { attempt } else { Attempt::FIRST };
            match self.handle_replying(r, at).await {
                Ok(rs) => replies.push(rs),
                Err(e) => {
                    return BatchReplies {
                        outcome: BatchOutcome {
                            done: i,
                            error: Some(e),
                        },
                        replies,
                    };
                }
            }
        }
        let outcome = match then {
            Some(e) => BatchOutcome {
                done: records.len(),
                error: Some(e),
            },
            None => BatchOutcome::all(records.len()),
        };
        BatchReplies { outcome, replies }
    }
}
