//! The heartbeat task: one per generation, on its own timer (and the transport's own connection).
//!
//! It runs from the JoinGroup response until the member task stops it before the next JoinGroup,
//! on close, or after a reset. It keeps running while the engine drains a revoke, which is what
//! keeps the member in the group during a long drain. It reports what the member must act on
//! through a channel and never touches the engine.
//!
//! # When no heartbeat succeeds for a session timeout
//!
//! The member does **not** declare its partitions lost on its own. The usual cause is that the
//! coordinator's broker died: KRaft moves the group to a new coordinator only once it fenced the
//! dead broker (`broker.session.timeout.ms`, 9 s by default), and the new coordinator loads the
//! group from `__consumer_offsets` and restarts every member's session timer. A heartbeat that
//! then succeeds with the same generation proves the member still owns everything; expiring
//! client-side would drop all in-flight work and redeliver everything since the last commit for
//! nothing. Only the broker's answer (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, ...) says the
//! partitions are gone. This is what the Java client does too (the heartbeat thread marks the
//! coordinator unknown when the session timed out and keeps going).
//!
//! But once the last success is older than the session timeout the broker *may* have given the
//! partitions to another member, so the ownership is marked **in doubt**
//! ([`crate::GroupHandle::in_doubt`]): the engine starts no handler call for them until a
//! heartbeat succeeds again (in doubt cleared, dispatch goes on) or the broker says the member is
//! gone (the partitions are lost, as before). Meanwhile this task keeps rediscovering the
//! coordinator (FindCoordinator to any broker, with backoff) and heartbeating with the same
//! generation. Commits are not held: each carries the generation and member id, so a coordinator
//! that still knows the member accepts it (the records it names were finished while the member
//! owned them) and one that does not refuses it, which resets the member like a heartbeat would.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::codes::{Action, Api, ErrorCode, action};
use crate::shared::Shared;
use crate::transport::{GroupTransport, HeartbeatRequest};
use crate::types::Generation;

/// What the heartbeat task reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeartbeatEvent {
    /// REBALANCE_IN_PROGRESS: rejoin. Reported once per task; heartbeats continue.
    Rebalance,
    /// A reset-type code (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID). The task has stopped.
    Reset(ErrorCode),
    /// FENCED_INSTANCE_ID. The task has stopped.
    Fenced,
    /// A fatal code. The task has stopped.
    Fatal(ErrorCode),
}

/// A running heartbeat task.
pub(crate) struct Heartbeat {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    pub(crate) events: mpsc::UnboundedReceiver<HeartbeatEvent>,
}

impl Heartbeat {
    pub(crate) fn start<T: GroupTransport>(shared: Arc<Shared<T>>, generation: Generation) -> Self {
        let (stop_tx, stop_rx) = oneshot::channel();
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(shared, generation, tx, stop_rx));
        Heartbeat {
            stop: Some(stop_tx),
            task: Some(task),
            events: rx,
        }
    }

    /// Stops the task and waits until it ended. An in-flight heartbeat is allowed to finish
    /// (bounded by the request timeout), so the connection never sees a cancelled request.
    pub(crate) async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

async fn run<T: GroupTransport>(
    shared: Arc<Shared<T>>,
    generation: Generation,
    events: mpsc::UnboundedSender<HeartbeatEvent>,
    mut stop: oneshot::Receiver<()>,
) {
    let cfg = &shared.config;
    let mut last_ok = Instant::now();
    let mut reported_rebalance = false;
    let mut delay = cfg.heartbeat_interval;
    let mut backoff = shared.backoff();
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(delay) => {}
        }
        if last_ok.elapsed() > cfg.session_timeout {
            // Not a loss (see the module docs): hold dispatch and keep trying.
            shared.set_in_doubt(true, generation.generation_id);
        }
        // Bounded, so that the loop keeps turning (and the session check above runs) even while
        // no coordinator can be found.
        let lookup = tokio::time::timeout(cfg.heartbeat_interval, shared.coordinator());
        let coordinator = tokio::select! {
            _ = &mut stop => return,
            c = lookup => c,
        };
        let coordinator = match coordinator {
            Err(_elapsed) => {
                delay = std::time::Duration::ZERO;
                continue;
            }
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                tracing::error!(group = %shared.group(), error = %e, "heartbeat: coordinator lookup failed fatally");
                // `coordinator()` fails only with `GroupError::Fatal` (a fatal FindCoordinator
                // code); anything else would be a new failure kind, reported as "unknown".
                let code = match e {
                    crate::GroupError::Fatal { code, .. } => code,
                    _ => ErrorCode(-1),
                };
                let _ = events.send(HeartbeatEvent::Fatal(code));
                return;
            }
        };
        let request = HeartbeatRequest {
            group_id: cfg.group_id.clone(),
            generation_id: generation.generation_id,
            member_id: generation.member_id.clone(),
            instance_id: cfg.instance_id.clone(),
        };
        // Bounded by what is left of the session too: a heartbeat whose answer never comes (a
        // half-open connection) must not hide the session's end for a whole request timeout
        // (30 s by default, against sessions of 6-45 s). The member then holds dispatch when the
        // coordinator may have given its partitions away, not long after another member took
        // them. Once in doubt, a heartbeat may take up to a session timeout (never less than an
        // interval, so a slow but live coordinator can still answer).
        let left = if shared.in_doubt() {
            cfg.session_timeout
        } else {
            cfg.session_timeout.saturating_sub(last_ok.elapsed())
        };
        let sent = Instant::now();
        let result = tokio::time::timeout(
            cfg.request_timeout.min(left.max(cfg.heartbeat_interval)),
            shared.transport.heartbeat(&coordinator, request),
        )
        .await;
        let code = match result {
            Ok(Ok(code)) => code,
            Ok(Err(e)) => {
                tracing::info!(group = %shared.group(), error = %e, "heartbeat failed; rediscovering coordinator");
                shared.invalidate(&coordinator);
                delay = backoff.next_delay();
                continue;
            }
            Err(_) => {
                tracing::info!(group = %shared.group(), "heartbeat timed out; rediscovering coordinator");
                shared.invalidate(&coordinator);
                delay = backoff.next_delay();
                continue;
            }
        };
        match action(Api::Heartbeat, code) {
            Action::Ok => {
                shared.renew_lease(sent, cfg.session_timeout);
                shared.set_in_doubt(false, generation.generation_id);
                last_ok = Instant::now();
                backoff = shared.backoff();
                delay = cfg.heartbeat_interval;
            }
            Action::Rejoin => {
                // The broker refreshed our session with this answer: the member is in the group
                // with this generation (it may still revoke and commit), so nothing is in doubt.
                shared.renew_lease(sent, cfg.session_timeout);
                shared.set_in_doubt(false, generation.generation_id);
                last_ok = Instant::now();
                delay = cfg.heartbeat_interval;
                if !reported_rebalance {
                    reported_rebalance = true;
                    tracing::info!(group = %shared.group(), generation = generation.generation_id,
                        "heartbeat: rebalance in progress");
                    let _ = events.send(HeartbeatEvent::Rebalance);
                }
            }
            Action::Rediscover => {
                shared.invalidate(&coordinator);
                delay = backoff.next_delay().min(cfg.heartbeat_interval);
            }
            Action::Backoff => delay = backoff.next_delay().min(cfg.heartbeat_interval),
            Action::ResetGeneration | Action::ResetMember => {
                tracing::warn!(group = %shared.group(), member = %generation.member_id,
                    generation = generation.generation_id, code = %code, "heartbeat: member reset");
                // The partitions may be another member's already: no call starts from now on,
                // even before the member task reports them lost.
                shared.end_lease();
                let _ = events.send(HeartbeatEvent::Reset(code));
                return;
            }
            Action::Fenced => {
                shared.end_lease();
                let _ = events.send(HeartbeatEvent::Fenced);
                return;
            }
            Action::AdoptMemberId | Action::FailCommit { .. } | Action::Fatal => {
                shared.end_lease();
                let _ = events.send(HeartbeatEvent::Fatal(code));
                return;
            }
        }
    }
}
