//! The dispatch loop: admits fetched records into each partition's tracker, charges their bytes to
//! the budgets (pausing a partition over budget, resuming it below half), hashes each session onto
//! a worker and hands records over in batches, applies completion batches, and runs the
//! housekeeping (stuck gaps, handler availability, ownership in doubt).

use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::commit::{COMMIT_RETRY_BASE, commit_done};
use super::state::{DispatchLoop, Ended, EngineMetrics, PartGauges, Partition};
use super::stop::StopHandle;
use crate::config::EngineConfig;
use crate::handoff::control::PartitionControl;
use crate::handoff::recycle::Pools;
use crate::handoff::work::{BATCH_MAX, Completion, Work, WorkerMsg};
use crate::hash::{jump_consistent_hash, session_hash};
use crate::metadata;
use crate::record::TopicPartition;
use crate::source::{Assignment, CommitPoint, Source, SourceError, SourceEvent};
use crate::stats::{EngineStats, PartitionStats};
use crate::tracker::{Admit, OffsetTracker};
use crate::worker::{self};

/// Completes at `at`; pending forever without it.
pub(super) async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

impl DispatchLoop {
    pub(super) fn new(
        cfg: EngineConfig,
        workers: Vec<mpsc::UnboundedSender<WorkerMsg>>,
        done_rx: mpsc::UnboundedReceiver<Vec<Completion>>,
        pools: Arc<Pools>,
        stats: EngineStats,
        stop: StopHandle,
    ) -> Self {
        let n = workers.len();
        Self {
            next_commit: Instant::now() + cfg.commit_interval,
            commit_retry: COMMIT_RETRY_BASE,
            retry_at: Instant::now(),
            revokes: Vec::new(),
            in_doubt: false,
            lease: None,
            available: Box::new(|| true),
            handler_down: false,
            stop,
            metadata_limit: cfg.metadata_limit,
            commit: None,
            released: false,
            cfg,
            parts: Vec::new(),
            by_tp: HashMap::new(),
            free_slots: Vec::new(),
            next_epoch: 0,
            workers,
            batches: (0..n).map(|_| Vec::new()).collect(),
            done_rx,
            pools,
            global_bytes: 0,
            paused_count: 0,
            unordered_rr: 0,
            stats,
            metrics: EngineMetrics {
                in_flight: metrics::gauge!("orderly_records_in_flight"),
                buffered: metrics::gauge!("orderly_buffered_bytes"),
                paused: metrics::gauge!("orderly_paused_partitions"),
                commit_latency: metrics::histogram!("orderly_commit_duration_seconds"),
                commit_failures: metrics::counter!("orderly_commit_failures_total"),
                final_commit_failures: metrics::counter!("orderly_final_commit_failures_total"),
                metadata_truncated: metrics::counter!("orderly_commit_metadata_truncated_total"),
                metadata_rejected: metrics::counter!("orderly_commit_metadata_rejected_total"),
                restored: metrics::counter!("orderly_records_restored_total"),
                in_doubt: metrics::gauge!("orderly_ownership_in_doubt"),
                handler_available: metrics::gauge!("orderly_handler_available"),
            },
        }
    }

    pub(super) async fn main_loop<S: Source>(
        &mut self,
        source: &mut S,
        shutdown: impl Future<Output = ()>,
    ) -> Result<Ended, SourceError> {
        let stop = self.stop.clone();
        // A stop-now ends the loop like a shutdown; `finish` then skips the drain.
        let shutdown = async {
            tokio::select! {
                () = shutdown => {}
                () = stop.stopped() => {}
            }
        };
        let mut shutdown = pin!(shutdown);
        let mut tick =
            tokio::time::interval(self.cfg.tick.max(std::time::Duration::from_millis(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.next_commit = Instant::now() + self.cfg.commit_interval;
        loop {
            // Only while a revoke is in progress: its next deadline or commit retry.
            let wake = if self.revokes.is_empty() {
                None
            } else {
                self.revoke_wake()
            };
            // Biased: shutdown first; the tick (ready once per period) cannot starve anything;
            // completions before new records, so memory is released before more is admitted.
            // A commit in flight is polled here too: it never stalls dispatch. A revoke is no
            // branch of its own: it is state the loop advances after every event (see
            // `advance_revokes`), so records of other partitions keep flowing while it drains.
            tokio::select! {
                biased;
                () = &mut shutdown => return Ok(Ended::Shutdown),
                _ = tick.tick() => {
                    let now = Instant::now();
                    self.housekeeping(now);
                    if now >= self.next_commit && self.commit.is_none() {
                        self.start_commit(source, false);
                        self.next_commit = now + self.cfg.commit_interval;
                    }
                }
                r = commit_done(&mut self.commit) => {
                    if let Some(pc) = self.commit.take() {
                        let now = Instant::now();
                        match self.on_commit_result(pc, r) {
                            Ok(()) => {
                                self.commit_retry = COMMIT_RETRY_BASE;
                                self.retry_at = now;
                            }
                            // Retried at once with the halved limit.
                            Err(SourceError::MetadataTooLarge(_)) => {
                                self.next_commit = now;
                                self.retry_at = now;
                            }
                            Err(_) => {
                                self.next_commit = now + self.commit_retry;
                                self.retry_at = self.next_commit;
                                self.commit_retry = (self.commit_retry * 2).min(self.cfg.commit_interval);
                            }
                        }
                    }
                }
                Some(batch) = self.done_rx.recv() => {
                    self.apply(&batch);
                    self.pools.done.give(batch);
                    self.apply_queued();
                }
                ev = source.next_event() => match ev? {
                    Some(ev) => self.on_event(ev, source),
                    None => return Ok(Ended::SourceDone),
                },
                () = sleep_until_opt(wake) => {}
            }
            if !self.revokes.is_empty() {
                self.advance_revokes(source);
            }
            self.send_batches();
            self.resume_drained(source);
        }
    }

    pub(super) fn send_batches(&mut self) {
        for (tx, batch) in self.workers.iter().zip(self.batches.iter_mut()) {
            if !batch.is_empty() {
                // A send fails only if the worker died (panicked); `finish` reports that.
                let next = self.pools.works.take();
                let _ = tx.send(WorkerMsg::Batch(std::mem::replace(batch, next)));
            }
        }
    }

    /// Sends a control message to every worker, after any pending records so the per-worker
    /// channel order matches the order the engine decided things in.
    pub(super) fn broadcast(&mut self, make: impl Fn(usize) -> WorkerMsg) {
        self.send_batches();
        for (i, tx) in self.workers.iter().enumerate() {
            let _ = tx.send(make(i));
        }
    }

    pub(super) fn apply(&mut self, batch: &[Completion]) {
        let now = Instant::now();
        for c in batch {
            if let Some(Some(p)) = self.parts.get_mut(c.slot as usize) {
                if p.epoch == c.epoch {
                    // A frozen handback's commit point is final: a late completion (a record
                    // that finished after the drain ended) only frees its entry.
                    let frozen = p
                        .handback
                        .as_ref()
                        .is_some_and(|h| h.commit_deadline.is_some());
                    let freed = p.tracker.finish(c.offset, c.done && !frozen, now);
                    self.global_bytes -= freed;
                    self.released |= freed > 0;
                }
            }
        }
    }

    pub(super) fn apply_queued(&mut self) {
        while let Ok(b) = self.done_rx.try_recv() {
            self.apply(&b);
            self.pools.done.give(b);
        }
    }

    /// Resumes paused partitions that fell below half their budget, once the global total is
    /// below half too. Runs after every release of budget (completions, a revoke's drain, a
    /// removed partition), so a partition paused by the global budget resumes whichever
    /// partition freed it.
    pub(super) fn resume_drained<S: Source>(&mut self, source: &mut S) {
        if !std::mem::take(&mut self.released)
            || self.paused_count == 0
            || self.global_bytes > self.cfg.global_budget_bytes / 2
        {
            return;
        }
        let low = self.cfg.partition_budget_bytes / 2;
        for p in self.parts.iter_mut().flatten() {
            if p.paused && p.handback.is_none() && p.tracker.bytes() <= low {
                p.paused = false;
                self.paused_count -= 1;
                source.resume(&p.tp);
                tracing::debug!(partition = %p.tp, "resumed fetching");
            }
        }
        self.metrics.paused.set(self.paused_count as f64);
    }

    pub(super) fn on_event<S: Source>(&mut self, ev: SourceEvent, source: &mut S) {
        match ev {
            SourceEvent::Assigned(list) => {
                for a in list {
                    self.on_assigned(a, source);
                }
            }
            SourceEvent::Records {
                partition,
                records,
                high_watermark,
            } => {
                self.admit(&partition, records, high_watermark, source);
            }
            SourceEvent::HighWatermark(tp, hw) => {
                if let Some(p) = self
                    .by_tp
                    .get(&tp)
                    .and_then(|s| self.parts[*s as usize].as_mut())
                {
                    p.high_watermark = Some(hw);
                }
            }
            SourceEvent::Revoked(tps, ack) => self.on_revoked(tps, ack),
            SourceEvent::OwnershipInDoubt => self.set_in_doubt(true),
            SourceEvent::OwnershipConfirmed => self.set_in_doubt(false),
            SourceEvent::Lost(tps, ack) => {
                let mut released = Vec::new();
                for tp in &tps {
                    if let Some(slot) = self.by_tp.get(tp).copied() {
                        tracing::warn!(partition = %tp, "partition lost: dropping its work without committing");
                        released.extend(self.remove(slot));
                    }
                }
                // The ack waits until no call of the lost partitions runs any more: a source may
                // hand a partition out again right after it (an exactly-once rewind does), and a
                // call of the old ownership must not write output beside the new one's.
                let ack = if released.is_empty() {
                    ack
                } else {
                    let (tx, rx) = oneshot::channel::<()>();
                    tokio::spawn(async move {
                        let _ = rx.await;
                        for r in released {
                            let _ = r.await;
                        }
                        let _ = ack.send(());
                    });
                    tx
                };
                // A commit sent before the loss may name these partitions: the ack waits for it
                // (the member has already given up its generation, so it is refused), so it
                // cannot land under a new generation the ack lets the member join.
                match self.commit.as_mut() {
                    Some(pc) => pc.lost_acks.push(ack),
                    None => {
                        let _ = ack.send(());
                    }
                }
            }
        }
    }

    /// Holds (or releases) the start of every handler call: records keep being admitted and
    /// queued, running calls finish, commits go on; only new starts wait. The stuck-gap rule is
    /// suspended meanwhile (see `housekeeping`) and its clock restarts on confirmation, so waiting
    /// is never mistaken for a stuck record.
    pub(super) fn set_in_doubt(&mut self, doubt: bool) {
        if self.in_doubt == doubt {
            return;
        }
        self.in_doubt = doubt;
        self.metrics.in_doubt.set(if doubt { 1.0 } else { 0.0 });
        if doubt {
            tracing::warn!(
                partitions = self.by_tp.len(),
                "ownership in doubt: holding the start of every record (their state is kept)"
            );
        } else {
            tracing::info!(
                partitions = self.by_tp.len(),
                "ownership confirmed: records start again"
            );
        }
        let now = Instant::now();
        for p in self.parts.iter_mut().flatten() {
            if !doubt {
                p.tracker.restart_stuck_clock(now);
            }
            for s in &p.controls {
                s.hold(doubt);
            }
        }
    }

    pub(super) fn assign(&mut self, a: Assignment) {
        if self.by_tp.contains_key(&a.partition) {
            return;
        }
        let restored = metadata::decode(a.next_offset, &a.metadata).unwrap_or_else(|e| {
            tracing::warn!(partition = %a.partition, error = %e, "ignoring commit metadata; records above the commit point will be handled again");
            Vec::new()
        });
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.parts.push(None);
            (self.parts.len() - 1) as u32
        });
        self.next_epoch = self.next_epoch.wrapping_add(1);
        let epoch = self.next_epoch;
        let salt = worker::partition_salt(
            self.cfg.hash_seed,
            &a.partition.topic,
            a.partition.partition,
        );
        let controls: Vec<Arc<PartitionControl>> = (0..self.workers.len())
            .map(|_| {
                let s = PartitionControl::new(slot, epoch, salt, self.lease.clone());
                // Assigned while the ownership is in doubt: held like the others.
                s.hold(self.in_doubt);
                Arc::new(s)
            })
            .collect();
        self.broadcast(|i| WorkerMsg::AddPartition(controls[i].clone()));
        tracing::info!(partition = %a.partition, next_offset = a.next_offset, restored_runs = restored.len(), "partition assigned");
        let p = Partition {
            gauges: PartGauges::new(&a.partition),
            tp: a.partition.clone(),
            slot,
            epoch,
            salt,
            controls,
            tracker: OffsetTracker::new(a.next_offset, restored, Instant::now()),
            paused: false,
            handback: None,
            high_watermark: None,
            committed: CommitPoint {
                offset: a.next_offset,
                metadata: a.metadata,
            },
            stored: a.committed,
        };
        self.parts[slot as usize] = Some(p);
        self.by_tp.insert(a.partition, slot);
    }

    pub(super) fn admit<S: Source>(
        &mut self,
        tp: &TopicPartition,
        records: Vec<crate::record::Record>,
        hw: Option<i64>,
        source: &mut S,
    ) {
        let Some(slot) = self.by_tp.get(tp).copied() else {
            tracing::debug!(partition = %tp, n = records.len(), "records for a partition not owned; ignored");
            return;
        };
        let Some(p) = self.parts[slot as usize].as_mut() else {
            return;
        };
        if let Some(h) = p.handback.as_mut() {
            // Records of a reassignment wait for the drain; the old assignment's are dropped
            // (the source stopped delivering them; their owner fetches them again).
            if let Some(r) = h.reassigned.as_mut() {
                r.held.push((records, hw));
            }
            return;
        }
        if hw.is_some() {
            p.high_watermark = hw;
        }
        let rejected = p.tracker.check_restored(p.high_watermark);
        if rejected > 0 {
            self.metrics.metadata_rejected.increment(1);
            tracing::warn!(partition = %tp, high_watermark = ?p.high_watermark, claimed = rejected,
                "commit metadata claims completed offsets at or above the high watermark (or it is unknown); ignoring it: those records are handled again");
        }
        let now = Instant::now();
        let n = self.workers.len() as u32;
        let (seed, from, salt) = (self.cfg.hash_seed, &self.cfg.session_id, p.salt);
        let before = p.tracker.bytes();
        let mut restored = 0u64;
        let total = records.len();
        for (i, record) in records.into_iter().enumerate() {
            let sid = worker::session_id(from, &record);
            let hash = sid.map_or(0, |s| session_hash(seed, salt, s));
            let bytes = u32::try_from(record.charged_bytes()).unwrap_or(u32::MAX);
            match p
                .tracker
                .admit(record.offset, bytes, record.shared, hash, now)
            {
                Admit::Dispatch => {}
                Admit::Duplicate => continue,
                Admit::Restored => {
                    restored += 1;
                    continue;
                }
            }
            let w = if sid.is_some() {
                jump_consistent_hash(hash, n)
            } else {
                // The unordered lane has no order to keep: spread it round-robin.
                self.unordered_rr = self.unordered_rr.wrapping_add(1);
                self.unordered_rr % n
            };
            let batch = &mut self.batches[w as usize];
            if batch.capacity() == 0 {
                // A fresh buffer (the pool had none): sized once, not grown by doubling.
                batch.reserve((total - i).min(BATCH_MAX));
            }
            batch.push(Work {
                slot,
                epoch: p.epoch,
                hash,
                session: sid.is_some(),
                parked: None,
                record,
                batch: Vec::new(),
            });
            if batch.len() >= BATCH_MAX {
                // Sent now, so batch buffers stay small enough for the pool to keep (see
                // `BATCH_MAX`). A send fails only if the worker died; `finish` reports that.
                let next = self.pools.works.take();
                let full = std::mem::replace(batch, next);
                let _ = self.workers[w as usize].send(WorkerMsg::Batch(full));
            }
        }
        if restored > 0 {
            self.metrics.restored.increment(restored);
        }
        self.global_bytes += p.tracker.bytes() - before;
        if !p.paused
            && (p.tracker.bytes() >= self.cfg.partition_budget_bytes
                || self.global_bytes >= self.cfg.global_budget_bytes)
        {
            p.paused = true;
            self.paused_count += 1;
            source.pause(tp);
            self.metrics.paused.set(self.paused_count as f64);
            tracing::debug!(partition = %tp, bytes = p.tracker.bytes(), global = self.global_bytes, "paused fetching");
        }
    }

    pub(super) fn in_flight(&self) -> usize {
        self.parts
            .iter()
            .flatten()
            .map(|p| p.tracker.in_flight())
            .sum()
    }

    /// Reads [`Handler::available`](crate::Handler::available). While the handler is unavailable the stuck-gap rule is
    /// suspended (see `housekeeping`); when it is available again every partition's stuck clock
    /// restarts, so time spent waiting for the service is never mistaken for a stuck record.
    pub(super) fn check_handler(&mut self, now: Instant) {
        let down = !(self.available)();
        if down == self.handler_down {
            return;
        }
        self.handler_down = down;
        self.stats.0.handler_unavailable.store(down, Relaxed);
        self.metrics
            .handler_available
            .set(if down { 0.0 } else { 1.0 });
        if down {
            tracing::warn!(
                "handler unavailable: records wait for it; the stuck-gap rule is suspended"
            );
        } else {
            tracing::info!("handler available again");
            for p in self.parts.iter_mut().flatten() {
                p.tracker.restart_stuck_clock(now);
            }
        }
    }

    pub(super) fn housekeeping(&mut self, now: Instant) {
        self.check_handler(now);
        let mut snapshot = Vec::with_capacity(self.by_tp.len());
        let mut in_flight = 0;
        for p in self.parts.iter_mut().flatten() {
            for s in &p.controls {
                if let Some(offset) = s.take_declined() {
                    p.tracker.rearm_stuck(offset, now);
                }
            }
            // Not while the ownership is in doubt or the handler is unavailable: records wait
            // for those, not for a stuck handler.
            if let Some(timeout) = self
                .cfg
                .stuck_timeout
                .filter(|_| !self.in_doubt && !self.handler_down)
            {
                if let Some(offset) = p.tracker.take_stuck(timeout, now) {
                    // The worker running it logs the session id and dead-letters it.
                    for s in &p.controls {
                        s.flag_stuck(offset);
                    }
                }
            }
            let commit_offset = p.tracker.commit_offset();
            let lag = p.high_watermark.map(|hw| (hw - commit_offset).max(0));
            let oldest = p.tracker.oldest_in_flight(now);
            p.gauges.watermark.set(commit_offset as f64);
            if let Some(hw) = p.high_watermark {
                p.gauges.high_watermark.set(hw as f64);
            }
            if let Some(l) = lag {
                p.gauges.lag.set(l as f64);
            }
            if let Some(n) = p.tracker.pending(p.high_watermark) {
                p.gauges.pending.set(n as f64);
            }
            p.gauges
                .oldest_age
                .set(oldest.map_or(0.0, |o| o.age.as_secs_f64()));
            in_flight += p.tracker.in_flight();
            snapshot.push(PartitionStats {
                partition: p.tp.clone(),
                commit_offset,
                high_watermark: p.high_watermark,
                lag,
                in_flight: p.tracker.in_flight(),
                buffered_bytes: p.tracker.bytes(),
                paused: p.paused,
                oldest_in_flight: oldest,
            });
        }
        self.metrics.in_flight.set(in_flight as f64);
        self.metrics.buffered.set(self.global_bytes as f64);
        if let Ok(mut s) = self.stats.0.partitions.lock() {
            *s = snapshot;
        }
    }
}
