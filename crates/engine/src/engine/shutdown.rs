//! How the dispatch loop ends: a shutdown stops as a revoke does (no queued record starts, running
//! attempts get `drain_timeout`, then the commit); a source that ended is drained whole; a stop-now
//! skips the drain. Every worker task has ended when `finish` returns.

use tokio::time::Instant;

use super::run::EngineError;
use super::state::{DispatchLoop, WorkerTasks};
use crate::handoff::work::WorkerMsg;
use crate::source::Source;

impl DispatchLoop {
    /// Waits until nothing is in flight, `deadline`, or a stop-now. Housekeeping keeps running
    /// meanwhile, so a stuck record cannot hold a drain to its deadline, and budget freed by the
    /// drain resumes paused partitions. Returns true if drained.
    pub(super) async fn wait_drained<S: Source>(
        &mut self,
        source: &mut S,
        deadline: Instant,
    ) -> bool {
        let period = self.cfg.tick.max(std::time::Duration::from_millis(1));
        let mut next_tick = Instant::now() + period;
        let stop = self.stop.clone();
        loop {
            self.apply_queued();
            self.resume_drained(source);
            if self.in_flight() == 0 {
                return true;
            }
            if stop.is_stopped() {
                return false;
            }
            let wake = next_tick.min(deadline);
            tokio::select! {
                biased;
                () = stop.stopped() => return false,
                r = tokio::time::timeout_at(wake, self.done_rx.recv()) => match r {
                    Ok(Some(b)) => self.apply(&b),
                    Ok(None) => return self.in_flight() == 0,
                    Err(_) if wake >= deadline => return self.in_flight() == 0,
                    Err(_) => {
                        let now = Instant::now();
                        self.housekeeping(now);
                        next_tick = now + period;
                    }
                },
            }
        }
    }

    pub(super) async fn finish<S: Source>(
        &mut self,
        source: &mut S,
        handles: &mut WorkerTasks,
        stopped: bool,
    ) -> Result<(), EngineError> {
        self.send_batches();
        if stopped {
            // A shutdown (SIGTERM) stops as a revoke does: no queued record starts any more
            // (they are skipped and stay above the watermark), records waiting for a retry are
            // abandoned, and only attempts already running get until `drain_timeout`. The
            // backlog a budget admitted is not worked off: the next owner resumes from the
            // commit.
            for p in self.parts.iter().flatten() {
                for s in &p.controls {
                    s.drain();
                }
            }
            let live: Vec<(u32, u32)> = self
                .parts
                .iter()
                .flatten()
                .map(|p| (p.slot, p.epoch))
                .collect();
            for (slot, epoch) in live {
                self.broadcast(|_| WorkerMsg::Purge { slot, epoch });
            }
        } else if self.in_doubt {
            // Held records cannot start (the partitions may belong to someone else now), so
            // they are abandoned at once instead of holding the drain to its deadline; the
            // records already running still finish.
            for p in self.parts.iter().flatten() {
                for s in &p.controls {
                    s.drain();
                }
            }
        }
        let deadline = Instant::now() + self.cfg.drain_timeout;
        if !self.wait_drained(source, deadline).await {
            if self.stop.is_stopped() {
                tracing::warn!(
                    in_flight = self.in_flight(),
                    "stopping now: cancelling records still running; they will be redelivered"
                );
            } else {
                tracing::warn!(
                    in_flight = self.in_flight(),
                    "drain timeout: cancelling records still running; they will be redelivered"
                );
            }
        }
        for p in self.parts.iter().flatten() {
            for s in &p.controls {
                s.cancel();
            }
        }
        let committed = self.commit_final(source).await;
        if let Err(e) = &committed {
            tracing::error!(error = %e, "final commit failed; records above the last successful commit will be handled again by the next owner");
        }
        // Revokes still in progress are answered now: their partitions drained (or were
        // cancelled) and were committed with the rest.
        for r in self.revokes.drain(..) {
            let _ = r.ack.send(());
        }
        self.housekeeping(Instant::now());
        // Closing the channels ends the workers once their (cancelled) futures are done.
        self.workers.clear();
        while self.done_rx.recv().await.is_some() {}
        let mut result = committed.map_err(|e| EngineError::Commit(e.to_string()));
        for h in handles.0.iter_mut() {
            if let Err(e) = h.await {
                tracing::error!(error = %e, "worker task failed");
                result = result.and(Err(EngineError::Worker(e.to_string())));
            }
        }
        result
    }
}
