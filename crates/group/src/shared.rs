//! State shared by the member task, the heartbeat task and commit tasks: coordinator, generation, locks.
//!
//! # Lock order
//!
//! `commit_lock` (serialises commits) before `gate` (read by commits, written by the member task for
//! the whole JoinGroup + SyncGroup, so no commit is sent between them). The two `std` mutexes are
//! leaf locks, never held across an `.await`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::Rng;
use tokio::sync::{mpsc, watch};

use crate::codes::{Action, Api, ErrorCode, action};
use crate::config::GroupConfig;
use crate::error::GroupError;
use crate::transport::{Coordinator, GroupTransport};
use crate::types::{Generation, PartitionSet};

/// Something a commit task observed that the member task must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// An OffsetCommit in `generation` returned a reset-type code.
    Reset { generation: i32, code: ErrorCode },
    /// An OffsetCommit returned FENCED_INSTANCE_ID in `generation`.
    Fenced { generation: i32 },
}

pub(crate) struct Shared<T> {
    pub(crate) config: GroupConfig,
    pub(crate) transport: Arc<T>,
    coordinator: Mutex<Option<Coordinator>>,
    discovery: tokio::sync::Mutex<()>,
    generation: Mutex<Generation>,
    owned: Mutex<PartitionSet>,
    /// Held for writing by the member task during JoinGroup + SyncGroup.
    pub(crate) gate: tokio::sync::RwLock<()>,
    /// Serialises commits.
    pub(crate) commit_lock: tokio::sync::Mutex<()>,
    pub(crate) triggers: mpsc::UnboundedSender<Trigger>,
    /// True while the member's ownership is in doubt: no heartbeat succeeded for a session
    /// timeout and no coordinator has said yet whether the member is still in the group (see
    /// [`crate::GroupHandle::in_doubt`]). Set by the heartbeat; cleared by the heartbeat when one
    /// succeeds again, and by the member task after it reported the partitions lost (never
    /// before: a "confirmed" that overtook the loss would let the engine start records of
    /// partitions someone else may own).
    in_doubt: watch::Sender<bool>,
    /// Until when the coordinator cannot have moved the partitions unheard
    /// ([`crate::GroupHandle::lease`]).
    pub(crate) lease: crate::lease::OwnershipLease,
}

/// The most by which the member's lease ends before the coordinator's session would (see
/// [`Shared::lease_length`]).
pub(crate) const LEASE_MARGIN_MAX: Duration = Duration::from_secs(1);

fn lock<G>(m: &Mutex<G>) -> MutexGuard<'_, G> {
    // A poisoned leaf lock only means another thread panicked while holding it; the value is a
    // plain snapshot and still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<T: GroupTransport> Shared<T> {
    pub(crate) fn new(
        config: GroupConfig,
        transport: Arc<T>,
        triggers: mpsc::UnboundedSender<Trigger>,
    ) -> Self {
        Shared {
            config,
            transport,
            coordinator: Mutex::new(None),
            discovery: tokio::sync::Mutex::new(()),
            generation: Mutex::new(Generation::empty()),
            owned: Mutex::new(PartitionSet::new()),
            gate: tokio::sync::RwLock::new(()),
            commit_lock: tokio::sync::Mutex::new(()),
            triggers,
            in_doubt: watch::Sender::new(false),
            lease: crate::lease::OwnershipLease::default(),
        }
    }

    /// How long an answered request (sent at `t`) keeps the ownership lease from `t`: the session
    /// timeout the coordinator enforces, minus a margin of a fifth of it, at most
    /// [`LEASE_MARGIN_MAX`]. The coordinator starts the session when it handles the request, after
    /// the send, so from the send time the session alone would already end no later than the
    /// coordinator's; the margin covers what that does not: the two hosts' clocks running at
    /// different rates, and the moment between a reader's lease check and the work it starts.
    pub(crate) fn lease_length(session: Duration) -> Duration {
        session.saturating_sub((session / 5).min(LEASE_MARGIN_MAX))
    }

    /// The coordinator answered a request sent at `sent` that keeps the member in the group for
    /// `session` (the session timeout the coordinator enforces): the lease now ends
    /// [`Shared::lease_length`] after `sent`.
    pub(crate) fn renew_lease(&self, sent: tokio::time::Instant, session: Duration) {
        self.lease.renew(sent, Self::lease_length(session));
    }

    /// Marks the ownership in doubt (or confirmed); logs only a change.
    pub(crate) fn set_in_doubt(&self, doubt: bool, generation: i32) {
        let changed = self.in_doubt.send_if_modified(|d| {
            let changed = *d != doubt;
            *d = doubt;
            changed
        });
        if changed && doubt {
            tracing::warn!(group = %self.group(), generation,
                "no successful heartbeat for a session timeout: ownership in doubt, holding dispatch \
                 (partitions are kept) until a coordinator confirms the membership or says it is gone");
        } else if changed {
            tracing::info!(group = %self.group(), generation, "ownership no longer in doubt");
        }
    }

    pub(crate) fn in_doubt(&self) -> bool {
        *self.in_doubt.borrow()
    }

    pub(crate) fn watch_in_doubt(&self) -> watch::Receiver<bool> {
        self.in_doubt.subscribe()
    }

    pub(crate) fn group(&self) -> &str {
        &self.config.group_id
    }

    pub(crate) fn generation(&self) -> Generation {
        lock(&self.generation).clone()
    }

    pub(crate) fn set_generation(&self, g: Generation) {
        *lock(&self.generation) = g;
    }

    pub(crate) fn owned(&self) -> PartitionSet {
        lock(&self.owned).clone()
    }

    pub(crate) fn set_owned(&self, s: PartitionSet) {
        *lock(&self.owned) = s;
    }

    /// Forgets `stale` as the coordinator (if it still is the cached one).
    pub(crate) fn invalidate(&self, stale: &Coordinator) {
        let mut c = lock(&self.coordinator);
        if c.as_ref() == Some(stale) {
            tracing::info!(group = %self.group(), node = stale.node_id, "coordinator marked unknown");
            *c = None;
        }
    }

    /// The coordinator, discovered with FindCoordinator if unknown. Retries retriable failures
    /// forever with backoff (callers bound it with their own deadline or shutdown). Cancel safe.
    pub(crate) async fn coordinator(&self) -> Result<Coordinator, GroupError> {
        if let Some(c) = lock(&self.coordinator).clone() {
            return Ok(c);
        }
        let _one_at_a_time = self.discovery.lock().await;
        let mut backoff = self.backoff();
        loop {
            if let Some(c) = lock(&self.coordinator).clone() {
                return Ok(c);
            }
            match tokio::time::timeout(
                self.config.request_timeout,
                self.transport.find_coordinator(&self.config.group_id),
            )
            .await
            {
                Ok(Ok(resp)) => match action(Api::FindCoordinator, resp.error_code) {
                    Action::Ok => {
                        tracing::info!(group = %self.group(), node = resp.coordinator.node_id,
                            host = %resp.coordinator.host, port = resp.coordinator.port, "found coordinator");
                        *lock(&self.coordinator) = Some(resp.coordinator.clone());
                        return Ok(resp.coordinator);
                    }
                    Action::Rediscover | Action::Backoff => {
                        tracing::debug!(group = %self.group(), code = %resp.error_code, "FindCoordinator: retrying");
                    }
                    _ => {
                        let g = self.generation();
                        return Err(GroupError::fatal(
                            self.group(),
                            Api::FindCoordinator,
                            resp.error_code,
                            &g.member_id,
                            g.generation_id,
                        ));
                    }
                },
                Ok(Err(e)) => {
                    tracing::debug!(group = %self.group(), error = %e, "FindCoordinator failed")
                }
                Err(_) => tracing::debug!(group = %self.group(), "FindCoordinator timed out"),
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }

    /// A fatal error as the member reports it: an `UNSUPPORTED_VERSION` answer becomes
    /// [`GroupError::Unsupported`] with the transport's line (API, both ranges, the release
    /// needed) when it has one.
    pub(crate) fn explain(&self, e: GroupError) -> GroupError {
        match e {
            GroupError::Fatal { code, .. }
                if code == crate::codes::ErrorCode::UNSUPPORTED_VERSION =>
            {
                match self.transport.refused() {
                    Some(detail) => GroupError::Unsupported {
                        group: self.group().to_owned(),
                        detail,
                    },
                    None => e,
                }
            }
            other => other,
        }
    }

    pub(crate) fn backoff(&self) -> Backoff {
        Backoff::new(self.config.retry_backoff, self.config.retry_backoff_max)
    }
}

/// Exponential backoff with ±20 % jitter.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            next: base,
            max: max.max(base),
        }
    }

    pub(crate) fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        let jitter: f64 = rand::rng().random_range(0.8..1.2);
        d.mul_f64(jitter)
    }
}
