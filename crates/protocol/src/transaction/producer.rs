//! `TransactionalProducer` and its settings: the state transitions every call shares (begin,
//! refusals, abortable, fenced, fatal) and the guard that marks a request cancelled in flight.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::error::{TxnError, copy_error};
use super::state::{Inner, ProducerId, SequenceLock, TxnState};
use crate::connection::ConnectionPool;
use crate::error::Error;
use crate::producer::{Producer, ProducerConfig};
use crate::records::Compression;

/// Settings of a [`TransactionalProducer`]. `Default`: no compression, 30 s produce timeout, 60 s
/// per operation.
#[derive(Debug, Clone, Copy)]
pub struct TransactionalConfig {
    /// Batch compression.
    pub compression: Compression,
    /// Server-side produce timeout (replication wait for acks=all).
    pub timeout: Duration,
    /// Upper bound on one call (`init`, `send`, `send_offsets`, `commit`, `abort`), its retries
    /// included (Java's `max.block.ms` and `delivery.timeout.ms`).
    pub operation_timeout: Duration,
}

impl Default for TransactionalConfig {
    fn default() -> Self {
        Self {
            compression: Compression::None,
            timeout: Duration::from_secs(30),
            operation_timeout: Duration::from_secs(60),
        }
    }
}

/// Produces records and commits consumer offsets in Kafka transactions (see the
/// [`transaction`](super) module doc).
///
/// All methods take `&self`: sends may run concurrently from many tasks; `commit`, `abort` and
/// `init` wait for the sends in flight.
#[derive(Debug)]
pub struct TransactionalProducer {
    pub(super) pool: Arc<ConnectionPool>,
    pub(super) config: TransactionalConfig,
    /// Metadata and leader connections (its own send path is not used).
    pub(super) leaders: Producer,
    /// Held shared by `send` and `send_offsets`, exclusively by `init`, `commit` and `abort`.
    pub(super) gate: tokio::sync::RwLock<()>,
    inner: std::sync::Mutex<Inner>,
    /// Serialises AddPartitionsToTxn and AddOffsetsToTxn.
    pub(super) registration: tokio::sync::Mutex<()>,
    pub(super) sequences: std::sync::Mutex<HashMap<(String, i32), SequenceLock>>,
    pub(super) round_robin: std::sync::atomic::AtomicU32,
}

/// Marks the transaction abortable, with a new epoch due after the abort, if dropped while
/// armed: a batch or a registration cancelled in flight may or may not have reached the broker.
pub(super) struct InFlight<'a> {
    pub(super) producer: &'a TransactionalProducer,
    pub(super) what: &'static str,
    pub(super) armed: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.producer.to_abortable(
                Error::Config(format!("a {} was cancelled in flight", self.what)),
                true,
            );
        }
    }
}

impl TransactionalProducer {
    /// A producer on `pool`; call [`TransactionalProducer::init`] before anything else.
    pub fn new(pool: Arc<ConnectionPool>, config: TransactionalConfig) -> Self {
        let leaders = Producer::new(
            Arc::clone(&pool),
            ProducerConfig {
                idempotent: false,
                // Bounds its wait for a new topic's metadata.
                delivery_timeout: config.operation_timeout,
                ..ProducerConfig::default()
            },
        );
        Self {
            pool,
            config,
            leaders,
            gate: tokio::sync::RwLock::new(()),
            inner: std::sync::Mutex::new(Inner {
                state: TxnState::Uninitialized,
                transactional_id: String::new(),
                transaction_timeout_ms: 60_000,
                pid: None,
                coordinator: None,
                group_coordinators: HashMap::new(),
                partitions: HashSet::new(),
                groups: HashSet::new(),
                cause: None,
                bump_epoch: false,
            }),
            registration: tokio::sync::Mutex::new(()),
            sequences: std::sync::Mutex::new(HashMap::new()),
            round_robin: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// The current state.
    pub fn state(&self) -> TxnState {
        self.lock().state
    }

    /// The producer id and epoch in use, once `init` succeeded.
    pub fn producer_id(&self) -> Option<(i64, i16)> {
        self.lock().pid.map(|p| (p.id, p.epoch))
    }

    /// Starts a transaction (locally: the coordinator learns of it with the first send).
    pub fn begin(&self) -> Result<(), TxnError> {
        let mut inner = self.lock();
        match inner.state {
            TxnState::Ready => {
                inner.state = TxnState::InTransaction;
                Ok(())
            }
            state => Err(Self::refusal("begin", state, &inner)),
        }
    }

    /// The producer id and transactional id of the open transaction, or the refusal.
    pub(super) fn open_transaction(
        &self,
        op: &'static str,
    ) -> Result<(ProducerId, String), TxnError> {
        let inner = self.lock();
        match (inner.state, inner.pid) {
            (TxnState::InTransaction, Some(pid)) => Ok((pid, inner.transactional_id.clone())),
            (state, _) => Err(Self::refusal(op, state, &inner)),
        }
    }

    /// The error for `op` refused in `state`: the standing cause for a fenced, failed or
    /// abortable producer, so a caller sees the same kind of error on every call.
    pub(super) fn refusal(op: &'static str, state: TxnState, inner: &Inner) -> TxnError {
        let cause = || {
            inner.cause.as_ref().map_or_else(
                || Error::Config(format!("{op} refused in state {state:?}")),
                copy_error,
            )
        };
        match state {
            TxnState::Fenced => TxnError::ProducerFenced {
                transactional_id: inner.transactional_id.clone(),
                source: Box::new(cause()),
            },
            TxnState::AbortableError => TxnError::Abortable {
                source: Box::new(cause()),
            },
            TxnState::Fatal => TxnError::Fatal {
                source: Box::new(cause()),
            },
            state => TxnError::State { op, state },
        }
    }

    /// The transaction becomes abortable (unless the producer is already worse off).
    pub(super) fn to_abortable(&self, cause: Error, bump_epoch: bool) {
        let mut inner = self.lock();
        inner.bump_epoch |= bump_epoch;
        if matches!(inner.state, TxnState::InTransaction | TxnState::Committing) {
            inner.state = TxnState::AbortableError;
            inner.cause = Some(cause);
        }
    }

    /// A send or offsets call failed for good: the transaction must be aborted.
    pub(super) fn send_failed(&self, e: Error, bump_epoch: bool) -> TxnError {
        self.to_abortable(copy_error(&e), bump_epoch);
        match self.state() {
            TxnState::Fenced | TxnState::Fatal => {
                let inner = self.lock();
                Self::refusal("send", inner.state, &inner)
            }
            _ => TxnError::Abortable {
                source: Box::new(e),
            },
        }
    }

    /// Another producer took the transactional id: the producer is `Fenced`.
    pub(super) fn fenced(&self, e: Error) -> TxnError {
        let mut inner = self.lock();
        tracing::warn!(transactional_id = %inner.transactional_id, error = %e, "transactional producer fenced");
        inner.state = TxnState::Fenced;
        inner.cause = Some(copy_error(&e));
        TxnError::ProducerFenced {
            transactional_id: inner.transactional_id.clone(),
            source: Box::new(e),
        }
    }

    /// The producer cannot go on: it is `Fatal`.
    pub(super) fn fatal(&self, e: Error) -> TxnError {
        let mut inner = self.lock();
        inner.state = TxnState::Fatal;
        inner.cause = Some(copy_error(&e));
        TxnError::Fatal {
            source: Box::new(e),
        }
    }

    /// The producer's state.
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The state is plain data changed in single assignments: a panic elsewhere cannot leave
        // it half-written, so a poisoned lock's data is still sound.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Context, ErrorCode};

    fn producer() -> TransactionalProducer {
        TransactionalProducer::new(
            Arc::new(ConnectionPool::new(
                vec!["127.0.0.1:1".into()],
                Default::default(),
            )),
            TransactionalConfig::default(),
        )
    }

    #[tokio::test]
    async fn calls_out_of_order_are_refused_without_a_request() {
        let p = producer();
        assert_eq!(p.state(), TxnState::Uninitialized);
        assert!(matches!(
            p.begin(),
            Err(TxnError::State {
                op: "begin",
                state: TxnState::Uninitialized
            })
        ));
        let err = p.send_batch("t", 0, &[]).await.err();
        assert!(
            matches!(
                err,
                Some(TxnError::State {
                    op: "send",
                    state: TxnState::Uninitialized
                })
            ),
            "{err:?}"
        );
        assert!(matches!(
            p.commit().await,
            Err(TxnError::State { op: "commit", .. })
        ));
    }

    /// A fenced producer answers every later call with the fenced error, not a state error.
    #[tokio::test]
    async fn a_fenced_producer_keeps_saying_so() {
        let p = producer();
        {
            let mut inner = p.lock();
            inner.pid = Some(ProducerId { id: 1, epoch: 0 });
            inner.state = TxnState::InTransaction;
            inner.transactional_id = "tx".into();
        }
        let e = p.fenced(Error::Kafka {
            broker: "b".into(),
            api: "Produce",
            code: ErrorCode::PRODUCER_FENCED,
            context: Context::default(),
            message: None,
        });
        assert!(e.is_fenced() && !e.is_abortable());
        assert!(p.begin().is_err_and(|e| e.is_fenced()));
        assert!(
            p.send_batch("t", 0, &[])
                .await
                .is_err_and(|e| e.is_fenced())
        );
        assert!(p.commit().await.is_err_and(|e| e.is_fenced()));
        assert!(p.abort().await.is_err_and(|e| e.is_fenced()));
        let code = match p.commit().await {
            Err(TxnError::ProducerFenced { source, .. }) => source.code(),
            other => panic!("{other:?}"),
        };
        assert_eq!(code, Some(ErrorCode::PRODUCER_FENCED));
    }
}
