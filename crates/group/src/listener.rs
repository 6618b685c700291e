//! The rebalance-listener contract: assigned / revoked / lost, as an event stream or an async trait.
//!
//! # Contract
//!
//! * Events arrive **one at a time, in order**; the member sends the next event only after the
//!   previous one was acknowledged. So `assigned`, `revoked` and `lost` never run concurrently.
//! * [`RebalanceEvent::Revoked`]: stop fetching these partitions, drain in-flight work, commit
//!   (with [`crate::GroupHandle::commit`]), then acknowledge. The member neither rejoins nor tells
//!   the coordinator anything until then; heartbeats keep running on their own task, so a drain
//!   may take up to the rebalance timeout.
//! * [`RebalanceEvent::Lost`]: the partitions already belong to someone else (or may): stop at once
//!   and **do not commit** (a commit would be rejected, or worse, overwrite the new owner's).
//! * Not an event: while [`crate::GroupHandle::in_doubt`] is `true` (no heartbeat succeeded for a
//!   session timeout), start no processing of owned partitions but keep their state; `Lost`
//!   follows only if the coordinator says the member is gone.
//! * [`RebalanceEvent::Assigned`]: start consuming these partitions at their [`StartPosition`]s.
//!   Sent after every successful rebalance, also with an empty list (so the engine learns the
//!   generation).
//!
//! # Acknowledging and cancel safety
//!
//! Each event carries an [`Ack`]. Calling [`Ack::done`] **or dropping the event** acknowledges it.
//! So if the task handling an event is cancelled (dropped mid-drain), the member proceeds as if the
//! drain were complete: do not cancel a revoke handler before its commit finished.
//! [`RebalanceEvents::next`] itself is cancel safe (it is an mpsc receive): an event not yet received
//! stays queued.
//!
//! Dropping [`RebalanceEvents`] acknowledges every later event immediately; the member keeps
//! running (commits then happen without the engine's participation, i.e. not at all).

use std::future::Future;

use tokio::sync::{mpsc, oneshot};

use crate::types::{GroupPartition, PartitionSet, StartPosition};

/// An acknowledgement handle; see the module docs. Dropping it acknowledges too.
#[derive(Debug)]
pub struct Ack(Option<oneshot::Sender<()>>);

impl Ack {
    pub(crate) fn new() -> (Self, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        (Ack(Some(tx)), rx)
    }

    /// Acknowledges the event: the member may go on.
    pub fn done(mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

/// A newly assigned partition and where to start it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignedPartition {
    /// The partition.
    pub partition: GroupPartition,
    /// Where to start.
    pub start: StartPosition,
}

/// Why partitions were lost.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The coordinator no longer knows this member (session expired, or it was removed).
    ///
    /// A member that merely could not heartbeat for a session timeout is not told `Lost`: its
    /// ownership is only in doubt ([`crate::GroupHandle::in_doubt`]) until a coordinator answers.
    MemberReset,
    /// The generation is stale.
    GenerationReset,
    /// The member stopped with a fatal error.
    Fatal,
}

/// One rebalance step for the engine. See the module docs.
#[derive(Debug)]
#[non_exhaustive]
pub enum RebalanceEvent {
    /// Partitions added to this member, with start positions.
    Assigned {
        /// Generation they belong to.
        generation: i32,
        /// The added partitions (only the new ones in cooperative mode).
        partitions: Vec<AssignedPartition>,
        /// Acknowledge when the engine has taken them.
        ack: Ack,
    },
    /// Partitions this member must give back: drain, commit, then acknowledge.
    Revoked {
        /// Generation the commit must use (commits go through the handle, which knows it).
        generation: i32,
        /// The revoked partitions.
        partitions: PartitionSet,
        /// Acknowledge after the drain and commit.
        ack: Ack,
    },
    /// Partitions this member no longer owns: stop, no commit.
    Lost {
        /// The lost partitions.
        partitions: PartitionSet,
        /// Why.
        reason: LostReason,
        /// Acknowledge when processing of them has stopped.
        ack: Ack,
    },
}

/// The stream of [`RebalanceEvent`]s for the engine. Ends when the member stopped.
#[derive(Debug)]
pub struct RebalanceEvents {
    pub(crate) rx: mpsc::Receiver<RebalanceEvent>,
}

impl RebalanceEvents {
    /// The next event, or `None` once the member has stopped. Cancel safe.
    pub async fn next(&mut self) -> Option<RebalanceEvent> {
        self.rx.recv().await
    }

    /// Feeds every event to `listener` until the member stops, acknowledging each after the
    /// listener's method returned.
    ///
    /// Cancel safety: if this future is dropped while a listener method runs, that method's future
    /// is dropped too and the event counts as acknowledged (see the module docs).
    pub async fn drive<L: RebalanceListener>(mut self, listener: &mut L) {
        while let Some(event) = self.next().await {
            match event {
                RebalanceEvent::Assigned {
                    generation,
                    partitions,
                    ack,
                } => {
                    listener.assigned(generation, partitions).await;
                    ack.done();
                }
                RebalanceEvent::Revoked {
                    partitions, ack, ..
                } => {
                    listener.revoked(partitions).await;
                    ack.done();
                }
                RebalanceEvent::Lost {
                    partitions, ack, ..
                } => {
                    listener.lost(partitions).await;
                    ack.done();
                }
            }
        }
    }
}

/// The listener contract as an async trait (use [`RebalanceEvents::drive`]).
pub trait RebalanceListener: Send {
    /// Start consuming these partitions.
    fn assigned(
        &mut self,
        generation: i32,
        partitions: Vec<AssignedPartition>,
    ) -> impl Future<Output = ()> + Send;

    /// Drain and commit these partitions; return when done.
    fn revoked(&mut self, partitions: PartitionSet) -> impl Future<Output = ()> + Send;

    /// Stop these partitions without committing.
    fn lost(&mut self, partitions: PartitionSet) -> impl Future<Output = ()> + Send;
}

/// The sending side, used by the member task.
#[derive(Debug, Clone)]
pub(crate) struct EventSender {
    tx: mpsc::Sender<RebalanceEvent>,
}

impl EventSender {
    pub(crate) fn channel() -> (Self, RebalanceEvents) {
        // Capacity 1: there is never more than one unacknowledged event anyway.
        let (tx, rx) = mpsc::channel(1);
        (EventSender { tx }, RebalanceEvents { rx })
    }

    /// Sends an event built around a fresh [`Ack`] and waits for the acknowledgement.
    /// Returns at once if the receiver is gone.
    pub(crate) async fn send_and_wait(&self, make: impl FnOnce(Ack) -> RebalanceEvent) {
        let (ack, done) = Ack::new();
        if self.tx.send(make(ack)).await.is_ok() {
            // Err = the Ack was dropped, which also acknowledges.
            let _ = done.await;
        }
    }
}
