//! The classic-protocol member state machine (JoinGroup / SyncGroup / Heartbeat).
//!
//! # States
//!
//! ```text
//!            ┌──────────── rejoin (REBALANCE_IN_PROGRESS, cooperative 2nd round, metadata change)
//!            ▼                                                               │
//! UNJOINED → PREPARE ─→ JOINING ─→ SYNCING ─→ ASSIGNING ─→ STABLE ───────────┘
//!   (eager: Revoked(all))  │ gate held for writing │  (cooperative: Revoked(moved) → rejoin;
//!                          │  no commits           │   OffsetFetch; Assigned(added))
//!            reset (ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID): Lost(owned) → PREPARE
//!            no heartbeat for a session timeout: ownership in doubt (dispatch held, nothing lost;
//!              see `heartbeat`) until a heartbeat succeeds (confirmed) or the broker resets us
//!            FENCED_INSTANCE_ID / fatal codes: Lost(owned) → stop with GroupError
//!            shutdown: Revoked(owned) → stop heartbeats → LeaveGroup (dynamic members only)
//! ```
//!
//! One task runs this loop; it is the only sender of
//! [`RebalanceEvent`](crate::listener::RebalanceEvent)s, so events are ordered and never
//! concurrent. The heartbeat task (`heartbeat`) runs from the JoinGroup response until the next
//! JoinGroup, so it keeps running while the engine drains a revoke. Commits
//! ([`crate::GroupHandle::commit`]) run on their own tasks (see [`crate::offsets`]).
//!
//! # Layout
//!
//! * `member`: the member's state and what its phases return.
//! * `session`: the loop of sessions (PREPARE, ASSIGNING, STABLE) and the heartbeat's reports.
//! * `join`: JOINING and SYNCING (JoinGroup, SyncGroup, the subscriptions sent).
//! * `leader`: the leader's assignment.
//! * `release`: revoke, lose and the graceful close (LeaveGroup).

mod join;
mod leader;
mod member;
mod release;
mod session;

pub(crate) use member::ClassicMember;
