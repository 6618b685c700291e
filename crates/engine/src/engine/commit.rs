//! The commit path: at most one commit in flight, polled beside dispatch (its future owns what it
//! needs), retried with backoff, its metadata halved when the broker refuses it as too large; a
//! revoke's or shutdown's commit retried for `final_commit_timeout`.

use std::sync::atomic::Ordering::Relaxed;

use tokio::time::Instant;

use super::state::{DispatchLoop, Partition, PendingCommit};
use crate::metadata;
use crate::source::{CommitPoint, Source, SourceError};

/// Completes when the pending commit does; pending forever without one.
pub(super) async fn commit_done(c: &mut Option<PendingCommit>) -> Result<(), SourceError> {
    match c {
        Some(pc) => pc.fut.as_mut().await,
        None => std::future::pending().await,
    }
}

/// Whether the partition's commit point differs from what the group holds (or the group holds
/// none yet).
pub(super) fn needs_commit(p: &Partition, metadata_limit: usize) -> bool {
    !p.stored || commit_point(p, metadata_limit).0 != p.committed
}

/// What a commit of `p` would store now, and whether its metadata had to be truncated.
pub(super) fn commit_point(p: &Partition, metadata_limit: usize) -> (CommitPoint, bool) {
    let offset = p.tracker.commit_offset();
    // A limit of 0 turns the metadata off (configured so, or halved to nothing by the broker's
    // refusals): nothing to encode, and nothing truncated worth counting.
    let enc = if metadata_limit == 0 {
        metadata::Encoded {
            text: String::new(),
            runs_encoded: 0,
            truncated: false,
        }
    } else {
        metadata::encode(offset, p.tracker.completed_runs(), metadata_limit)
    };
    (
        CommitPoint {
            offset,
            metadata: enc.text,
        },
        enc.truncated,
    )
}

/// First delay after a failed periodic commit; it doubles up to the commit interval.
pub(super) const COMMIT_RETRY_BASE: std::time::Duration = std::time::Duration::from_millis(100);

impl DispatchLoop {
    /// Starts a commit of every partition (only those a revoke froze if `handed_back`) whose
    /// commit point or metadata changed. Returns false when there is nothing to commit. At most
    /// one commit is in flight.
    pub(super) fn start_commit<S: Source>(&mut self, source: &mut S, handed_back: bool) -> bool {
        debug_assert!(self.commit.is_none());
        let mut offsets = Vec::new();
        let mut points = Vec::new();
        for p in self.parts.iter().flatten() {
            if handed_back
                && p.handback
                    .as_ref()
                    .is_none_or(|h| h.commit_deadline.is_none())
            {
                continue;
            }
            let (cp, truncated) = commit_point(p, self.metadata_limit);
            if truncated {
                // Not an error: the records left out are handled again after a restart.
                self.metrics.metadata_truncated.increment(1);
                tracing::debug!(partition = %p.tp, "commit metadata truncated to its limit");
            }
            if cp != p.committed || !p.stored {
                points.push((p.slot, p.epoch, cp.clone()));
                offsets.push((p.tp.clone(), cp));
            }
        }
        if offsets.is_empty() {
            return false;
        }
        self.commit = Some(PendingCommit {
            fut: Box::pin(source.commit(offsets)),
            points,
            started: Instant::now(),
            lost_acks: Vec::new(),
        });
        true
    }

    /// Books a finished commit: on success each partition (still of the same epoch) remembers
    /// what it committed; a failure is counted and logged, and the caller retries.
    pub(super) fn on_commit_result(
        &mut self,
        pc: PendingCommit,
        result: Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        for ack in pc.lost_acks {
            let _ = ack.send(());
        }
        match result {
            Ok(()) => {
                self.metrics
                    .commit_latency
                    .record(pc.started.elapsed().as_secs_f64());
                self.stats.0.commits.fetch_add(1, Relaxed);
                self.stats.set_last_commit(std::time::SystemTime::now());
                for (slot, epoch, cp) in pc.points {
                    if let Some(p) = self.parts[slot as usize]
                        .as_mut()
                        .filter(|p| p.epoch == epoch)
                    {
                        p.committed = cp;
                        p.stored = true;
                    }
                }
                Ok(())
            }
            Err(e) => {
                self.metrics.commit_failures.increment(1);
                self.stats.0.commit_failures.fetch_add(1, Relaxed);
                if matches!(e, SourceError::MetadataTooLarge(_)) {
                    self.metadata_limit /= 2;
                    tracing::warn!(error = %e, limit = self.metadata_limit,
                        "commit metadata refused as too large; halving the metadata limit (records it leaves out are handled again after a restart)");
                } else {
                    tracing::warn!(error = %e, "commit failed; will commit again");
                }
                Err(e)
            }
        }
    }

    /// Waits for the commit in flight, if any, and books it.
    pub(super) async fn finish_pending_commit(&mut self) {
        if let Some(mut pc) = self.commit.take() {
            let r = pc.fut.as_mut().await;
            let _ = self.on_commit_result(pc, r);
        }
    }

    /// Commits every partition now (shutdown): after the commit in flight, retried
    /// with backoff until it succeeds or `final_commit_timeout` passes.
    pub(super) async fn commit_final<S: Source>(
        &mut self,
        source: &mut S,
    ) -> Result<(), SourceError> {
        self.finish_pending_commit().await;
        let deadline = Instant::now() + self.cfg.final_commit_timeout;
        let mut delay = COMMIT_RETRY_BASE;
        loop {
            if !self.start_commit(source, false) {
                return Ok(());
            }
            let Some(mut pc) = self.commit.take() else {
                return Ok(());
            };
            let r = pc.fut.as_mut().await;
            let Err(e) = self.on_commit_result(pc, r) else {
                return Ok(());
            };
            if matches!(e, SourceError::MetadataTooLarge(_)) && self.metadata_limit > 0 {
                continue;
            }
            if Instant::now() + delay >= deadline {
                self.metrics.final_commit_failures.increment(1);
                return Err(e);
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(std::time::Duration::from_secs(5));
        }
    }
}
