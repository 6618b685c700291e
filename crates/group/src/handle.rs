//! A running member as its user sees it: [`GroupMember::spawn`] starts the member of the configured
//! protocol ([`crate::classic`] or [`crate::kip848`]); [`GroupHandle`] commits, reads the
//! generation and ownership and closes; [`MemberTask`] is awaited for the outcome.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::classic::ClassicMember;
use crate::config::{GroupConfig, GroupProtocol};
use crate::error::{CommitError, GroupError};
use crate::kip848::ConsumerMember;
use crate::listener::{EventSender, RebalanceEvents};
use crate::offsets;
use crate::shared::Shared;
use crate::shutdown::Shutdown;
use crate::transport::GroupTransport;
use crate::types::{CommitOffset, Generation, PartitionSet};

/// A running group member: its handle, its event stream and its task.
#[derive(Debug)]
pub struct GroupMember {
    /// Commit offsets, read the generation, close. Cheap to clone.
    pub handle: GroupHandle,
    /// The rebalance events the engine must consume (see [`crate::listener`]).
    pub events: RebalanceEvents,
    /// The member task; await [`MemberTask::wait`] for its outcome.
    pub task: MemberTask,
}

impl GroupMember {
    /// Validates `config` and spawns the member on the current tokio runtime.
    ///
    /// The member stops when `shutdown` completes or [`GroupHandle::close`] is called: it then
    /// revokes its partitions (the engine drains and commits), stops heartbeating, leaves the group
    /// (dynamic members only; static members stay until the session timeout so a restart gets the
    /// same partitions back) and ends. [`MemberTask::wait`] returns only after every task the
    /// member spawned has ended.
    pub fn spawn<T: GroupTransport>(
        config: GroupConfig,
        transport: Arc<T>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<GroupMember, GroupError> {
        config.validate()?;
        let group = config.group_id.clone();
        let (trigger_tx, trigger_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::new(config, transport, trigger_tx));
        let (events_tx, events) = EventSender::channel();
        let (close_tx, close_rx) = watch::channel(false);
        let close_tx = Arc::new(close_tx);
        let task = match shared.config.protocol {
            GroupProtocol::Consumer => {
                let member = ConsumerMember::new(
                    shared.clone(),
                    events_tx,
                    trigger_rx,
                    Shutdown::new(shutdown, close_rx),
                );
                tokio::spawn(member.run())
            }
            GroupProtocol::Classic => {
                let member = ClassicMember::new(
                    shared.clone(),
                    events_tx,
                    trigger_rx,
                    Shutdown::new(shutdown, close_rx),
                );
                tokio::spawn(member.run())
            }
        };
        let handle = GroupHandle {
            inner: shared,
            close: close_tx,
        };
        Ok(GroupMember {
            handle,
            events,
            task: MemberTask { group, task },
        })
    }
}

/// The member task.
#[derive(Debug)]
pub struct MemberTask {
    group: String,
    task: JoinHandle<Result<(), GroupError>>,
}

impl MemberTask {
    /// Waits until the member stopped; `Ok` after a graceful close, the fatal error otherwise.
    /// Cancel safe: dropping this future does not stop the member.
    pub async fn wait(self) -> Result<(), GroupError> {
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(GroupError::TaskFailed {
                group: self.group,
                message: e.to_string(),
            }),
        }
    }
}

/// Object-safe view of the shared state, so [`GroupHandle`] is not generic over the transport.
trait Committer: Send + Sync {
    fn commit(
        self: Arc<Self>,
        offsets: Vec<CommitOffset>,
    ) -> Pin<Box<dyn Future<Output = Result<(), CommitError>> + Send>>;
    fn generation(&self) -> Generation;
    fn owned(&self) -> PartitionSet;
    fn group(&self) -> &str;
    fn in_doubt(&self) -> watch::Receiver<bool>;
    fn lease(&self) -> crate::lease::OwnershipLease;
}

impl<T: GroupTransport> Committer for Shared<T> {
    fn commit(
        self: Arc<Self>,
        offsets: Vec<CommitOffset>,
    ) -> Pin<Box<dyn Future<Output = Result<(), CommitError>> + Send>> {
        Box::pin(offsets::commit(self, offsets))
    }
    fn generation(&self) -> Generation {
        Shared::generation(self)
    }
    fn owned(&self) -> PartitionSet {
        Shared::owned(self)
    }
    fn group(&self) -> &str {
        Shared::group(self)
    }
    fn in_doubt(&self) -> watch::Receiver<bool> {
        Shared::watch_in_doubt(self)
    }
    fn lease(&self) -> crate::lease::OwnershipLease {
        self.lease.clone()
    }
}

/// Handle to a running member: commits, state, close. Cheap to clone.
#[derive(Clone)]
pub struct GroupHandle {
    inner: Arc<dyn Committer>,
    close: Arc<watch::Sender<bool>>,
}

impl std::fmt::Debug for GroupHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupHandle")
            .field("group", &self.inner.group())
            .finish_non_exhaustive()
    }
}

impl GroupHandle {
    /// Commits offsets with the member's generation, member id and instance id.
    ///
    /// Commits are serialised and never sent between JoinGroup and SyncGroup. Cancel safe in the
    /// sense that matters: dropping this future does **not** cancel a request in flight; the
    /// commit completes (or fails) on its own task. Retriable failures (coordinator moves) are
    /// retried up to `commit_timeout`.
    pub async fn commit(&self, offsets: Vec<CommitOffset>) -> Result<(), CommitError> {
        self.inner.clone().commit(offsets).await
    }

    /// The generation the member holds now (`generation_id == -1` when none).
    pub fn generation(&self) -> Generation {
        self.inner.generation()
    }

    /// The partitions the engine was told it owns (acknowledged Assigned minus Revoked/Lost).
    pub fn owned(&self) -> PartitionSet {
        self.inner.owned()
    }

    /// Whether the member's ownership of its partitions is in doubt, as a watch (`true` = in
    /// doubt). It turns `true` when no heartbeat succeeded for a session timeout (typically the
    /// coordinator's broker died and the group has not moved to a new coordinator yet): the
    /// coordinator may have given the partitions to another member, so **start no processing of
    /// any owned partition** while it is `true`, but keep their state: the member keeps
    /// rediscovering the coordinator and heartbeating with the same generation. It turns `false`
    /// when a heartbeat (or a rejoin) succeeds, i.e. the member still owns what it owned and
    /// nothing was lost, or after a [`crate::RebalanceEvent::Lost`] for them was acknowledged when the
    /// broker said the member is gone. Commits need no hold: the coordinator accepts them only
    /// from a member it still knows.
    pub fn in_doubt(&self) -> watch::Receiver<bool> {
        self.inner.in_doubt()
    }

    /// Until when the member's ownership of its partitions holds ([`crate::OwnershipLease`]):
    /// start no processing of an owned partition once it lapsed, even before
    /// [`GroupHandle::in_doubt`] turns `true` (the heartbeat that would notice may not have run
    /// yet, for instance right after the process was frozen).
    pub fn lease(&self) -> crate::lease::OwnershipLease {
        self.inner.lease()
    }

    /// Asks the member to close gracefully (same as the shutdown future completing).
    pub fn close(&self) {
        let _ = self.close.send(true);
    }
}
