//! Revokes are state, not a wait: a revoked partition becomes a `Handback` (queued records
//! skipped, none admitted) while the loop goes on dispatching every other partition; it is frozen
//! once its running records are done (or cancelled at `revoke_timeout`), committed, and removed
//! only after that, when its revoke is acknowledged. An `Assigned` for a partition still handing
//! back waits for the removal.

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::commit::needs_commit;
use super::state::{DispatchLoop, Handback, PendingRevoke, Reassigned};
use crate::handoff::work::WorkerMsg;
use crate::record::TopicPartition;
use crate::source::{Assignment, RevokeAck, Source};

impl DispatchLoop {
    pub(super) fn on_assigned<S: Source>(&mut self, a: Assignment, source: &mut S) {
        let Some(slot) = self.by_tp.get(&a.partition).copied() else {
            self.assign(a);
            return;
        };
        let Some(h) = self.parts[slot as usize]
            .as_mut()
            .and_then(|p| p.handback.as_mut())
        else {
            tracing::debug!(partition = %a.partition, "assigned while already owned; ignored");
            return;
        };
        // The previous assignment still drains: its running records may belong to the same
        // sessions. The new one starts when the handback is done; until then the source is
        // paused for it and what it already delivered is held.
        tracing::debug!(partition = %a.partition, "assigned again while its revoke drains; it starts once the drain is committed");
        source.pause(&a.partition);
        h.reassigned = Some(Reassigned {
            assignment: a,
            held: Vec::new(),
        });
    }

    /// Starts handing partitions back. Nothing is awaited here: the loop advances the revoke
    /// after every event ([`DispatchLoop::advance_revokes`]) and acknowledges it when it is done.
    pub(super) fn on_revoked(&mut self, tps: Vec<TopicPartition>, ack: RevokeAck) {
        let now = Instant::now();
        let mut parts = Vec::with_capacity(tps.len());
        for tp in &tps {
            let Some(slot) = self.by_tp.get(tp).copied() else {
                continue;
            };
            let Some(p) = self.parts[slot as usize].as_mut() else {
                continue;
            };
            let epoch = p.epoch;
            parts.push((slot, epoch));
            if let Some(h) = p.handback.as_mut() {
                // Revoked again before the previous revoke finished: the assignment in between
                // never started (it waited for the drain), so it is dropped with what it held,
                // and this revoke waits for the same drain and commit.
                h.reassigned = None;
                continue;
            }
            p.handback = Some(Handback {
                drain_deadline: now + self.cfg.revoke_timeout,
                commit_deadline: None,
                gave_up: false,
                reassigned: None,
            });
            for s in &p.controls {
                s.drain();
            }
            // Records queued but not started are skipped, so the drain waits only for records
            // whose handler already runs.
            self.broadcast(|_| WorkerMsg::Purge { slot, epoch });
        }
        tracing::debug!(partitions = ?tps, "revoke: draining");
        self.revokes.push(PendingRevoke { tps, parts, ack });
    }

    /// Moves revokes along: freezes partitions whose running records are done (or whose drain
    /// timed out, cancelling the rest), commits frozen partitions (retried with backoff until
    /// `final_commit_timeout`), acknowledges revokes whose partitions are all committed, and then
    /// removes those partitions (starting an assignment that waited for one).
    pub(super) fn advance_revokes<S: Source>(&mut self, source: &mut S) {
        let now = Instant::now();
        let (limit, idle) = (self.metadata_limit, self.commit.is_none());
        let mut want_commit = false;
        for p in self.parts.iter_mut().flatten() {
            // Taken out and put back, so `p` can be read while `h` changes.
            let Some(mut h) = p.handback.take() else {
                continue;
            };
            let commit_deadline = match h.commit_deadline {
                Some(d) => d,
                None => {
                    let left = p.tracker.in_flight();
                    if left > 0 && now < h.drain_deadline {
                        p.handback = Some(h);
                        continue;
                    }
                    if left > 0 {
                        tracing::warn!(partition = %p.tp, in_flight = left,
                            "revoke timeout: cancelling records still running; they will be redelivered to the new owner");
                    }
                    // From here on nothing of this partition counts as completed: whatever
                    // finishes later is ignored, so the old owner never commits a record that
                    // finished after the drain ended.
                    for s in &p.controls {
                        s.cancel();
                    }
                    let d = now + self.cfg.final_commit_timeout;
                    h.commit_deadline = Some(d);
                    d
                }
            };
            if !h.gave_up && needs_commit(p, limit) {
                if idle && now >= commit_deadline {
                    h.gave_up = true;
                    self.metrics.final_commit_failures.increment(1);
                    tracing::error!(partition = %p.tp,
                        "revoke: the commit kept failing; acknowledging anyway (the rebalance cannot wait longer): the new owner handles the records above the last successful commit again");
                } else {
                    want_commit = true;
                }
            }
            p.handback = Some(h);
        }
        if want_commit && idle && now >= self.retry_at {
            // Only the handed-back partitions, as a revoke always did: a kept partition's
            // commit never delays (or fails) a handover.
            self.start_commit(source, true);
        }
        let mut i = 0;
        while i < self.revokes.len() {
            if !self.revokes[i]
                .parts
                .iter()
                .all(|&(slot, epoch)| self.handed_back(slot, epoch))
            {
                i += 1;
                continue;
            }
            let r = self.revokes.remove(i);
            tracing::debug!(partitions = ?r.tps, "revoke: drained and committed; acknowledging");
            // The driver may have given up waiting; then nobody needs the ack.
            let _ = r.ack.send(());
            for (slot, epoch) in r.parts {
                if !self
                    .revokes
                    .iter()
                    .any(|o| o.parts.contains(&(slot, epoch)))
                {
                    self.finish_handback(slot, epoch, source);
                }
            }
        }
    }

    /// Whether the partition a revoke named is handed back: frozen and committed (or the commit
    /// was given up), or gone (lost meanwhile).
    pub(super) fn handed_back(&self, slot: u32, epoch: u32) -> bool {
        match self.parts[slot as usize].as_ref() {
            Some(p) if p.epoch == epoch => p.handback.as_ref().is_some_and(|h| {
                h.commit_deadline.is_some() && (h.gave_up || !needs_commit(p, self.metadata_limit))
            }),
            _ => true,
        }
    }

    /// Removes a handed-back partition and starts the assignment that waited for it, if any.
    pub(super) fn finish_handback<S: Source>(&mut self, slot: u32, epoch: u32, source: &mut S) {
        let Some(p) = self.parts[slot as usize]
            .as_mut()
            .filter(|p| p.epoch == epoch)
        else {
            return;
        };
        let reassigned = p.handback.as_mut().and_then(|h| h.reassigned.take());
        let ours = p.committed.clone();
        let ours_stored = p.stored;
        drop(self.remove(slot));
        let Some(Reassigned {
            mut assignment,
            held,
        }) = reassigned
        else {
            return;
        };
        // Nobody else owned the partition since our commit (the revoke was not acknowledged),
        // so the group's commit point is ours unless the assignment names a later one.
        if ours.offset >= assignment.next_offset {
            assignment.next_offset = ours.offset;
            assignment.metadata = ours.metadata;
            assignment.committed = ours_stored;
        }
        let tp = assignment.partition.clone();
        self.assign(assignment);
        source.resume(&tp);
        for (records, hw) in held {
            self.admit(&tp, records, hw, source);
        }
    }

    /// The next moment a revoke needs the loop without any event: a drain deadline, a commit
    /// retry or a commit deadline. `None` when only events can move it.
    pub(super) fn revoke_wake(&self) -> Option<Instant> {
        let mut wake: Option<Instant> = None;
        for p in self.parts.iter().flatten() {
            let Some(h) = p.handback.as_ref() else {
                continue;
            };
            let t = match h.commit_deadline {
                None => h.drain_deadline,
                // A commit in flight wakes the loop by finishing.
                Some(d)
                    if !h.gave_up
                        && self.commit.is_none()
                        && needs_commit(p, self.metadata_limit) =>
                {
                    d.min(self.retry_at)
                }
                Some(_) => continue,
            };
            wake = Some(wake.map_or(t, |w| w.min(t)));
        }
        wake
    }

    /// Forgets a partition: cancels its records and frees its slot. Commits nothing. Its
    /// sessions also forget the event ids they remember, whether the partition was lost or
    /// handed back: the next assignment starts from the group's commit, and what they handled
    /// above it is not durable (a lost partition's work, a revoke whose commit was given up, or
    /// in the exactly-once mode a revoke whose transaction aborted), so a record handled again
    /// must not be skipped as a duplicate, as after a restart.
    ///
    /// Returns one receiver per worker that completes once that worker and every record future
    /// of the partition on it have let go of the partition (see `PartitionControl::on_release`).
    pub(super) fn remove(&mut self, slot: u32) -> Vec<oneshot::Receiver<()>> {
        let Some(p) = self.parts[slot as usize].take() else {
            return Vec::new();
        };
        let released = p.controls.iter().map(|s| s.on_release()).collect();
        for s in &p.controls {
            s.cancel();
        }
        // Its work is another member's now: a sum over members must not count it here too.
        p.gauges.pending.set(0.0);
        let epoch = p.epoch;
        self.broadcast(|_| WorkerMsg::Purge { slot, epoch });
        self.broadcast(|_| WorkerMsg::RemovePartition {
            slot,
            epoch,
            partition: p.tp.clone(),
        });
        self.global_bytes -= p.tracker.bytes();
        self.released = true;
        if p.paused {
            self.paused_count -= 1;
            self.metrics.paused.set(self.paused_count as f64);
        }
        self.by_tp.remove(&p.tp);
        self.free_slots.push(slot);
        released
    }
}
