//! The end of a transaction: `commit` and `abort` (EndTxn), and the new epoch an abort takes
//! after a batch of unknown outcome.

use tokio::time::Instant;

use super::coordinator::Target;
use super::error::{Action, TxnError};
use super::producer::TransactionalProducer;
use super::state::TxnState;
use crate::error::Context;
use crate::messages::end_txn::EndTxnRequest;
use crate::messages::init_producer_id::InitProducerIdRequest;

impl TransactionalProducer {
    /// Commits the open transaction (EndTxn): its records become visible to read_committed
    /// consumers and its offsets become the groups' committed offsets. Waits for the sends in
    /// flight first. After [`TxnError::Retriable`] the state is `Committing`: call `commit` again.
    pub async fn commit(&self) -> Result<(), TxnError> {
        self.end("commit", true).await
    }

    /// Aborts the open transaction (EndTxn): its records are never visible to read_committed
    /// consumers and its offsets are dropped. Waits for the sends in flight first. In `Ready`
    /// there is nothing to abort and it returns at once. After [`TxnError::Retriable`] the state
    /// is `Aborting`: call `abort` again.
    pub async fn abort(&self) -> Result<(), TxnError> {
        self.end("abort", false).await
    }

    async fn end(&self, op: &'static str, commit: bool) -> Result<(), TxnError> {
        let _gate = self.gate.write().await;
        let deadline = Instant::now() + self.config.operation_timeout;
        let (pid, transactional_id, send_end, bump) = {
            let mut inner = self.lock();
            let allowed = match (inner.state, commit) {
                (TxnState::InTransaction, _)
                | (TxnState::Committing, true)
                | (TxnState::Aborting | TxnState::AbortableError, false) => true,
                (TxnState::Ready, false) => return Ok(()),
                _ => false,
            };
            let Some(pid) = inner.pid.filter(|_| allowed) else {
                return Err(Self::refusal(op, inner.state, &inner));
            };
            // Partitions and groups are forgotten only once EndTxn succeeded: with none, nothing
            // reached the coordinator and there is no transaction there to end.
            let send_end = inner.has_work();
            let bump = !commit && inner.bump_epoch;
            if !send_end && !bump {
                inner.state = TxnState::Ready;
                inner.cause = None;
                return Ok(());
            }
            inner.state = if commit {
                TxnState::Committing
            } else {
                TxnState::Aborting
            };
            (pid, inner.transactional_id.clone(), send_end, bump)
        };
        if send_end {
            let req = EndTxnRequest {
                transactional_id: transactional_id.clone(),
                producer_id: pid.id,
                producer_epoch: pid.epoch,
                committed: commit,
            };
            match self
                .request(
                    Target::Transaction,
                    &req,
                    |r| (r.error_code, Context::default()),
                    deadline,
                )
                .await
            {
                Ok(_) => {}
                Err((Action::Retry, e)) => {
                    return Err(TxnError::Retriable {
                        op,
                        source: Box::new(e),
                    });
                }
                Err((Action::Fenced, e)) => return Err(self.fenced(e)),
                Err((Action::Abort | Action::GroupFenced, e)) if commit => {
                    return Err(self.send_failed(e, false));
                }
                Err((_, e)) => return Err(self.fatal(e)),
            }
            let mut inner = self.lock();
            inner.partitions.clear();
            inner.groups.clear();
        }
        if bump {
            // KIP-360: the same id with a new epoch, so every partition's sequence restarts.
            let req = InitProducerIdRequest {
                transactional_id: Some(transactional_id),
                transaction_timeout_ms: self.lock().transaction_timeout_ms,
                producer_id: pid.id,
                producer_epoch: pid.epoch,
            };
            let new = self.init_producer_id(&req, op, deadline).await?;
            tracing::debug!(
                producer_id = new.id,
                epoch = new.epoch,
                "new epoch after a batch of unknown outcome"
            );
            let mut inner = self.lock();
            inner.pid = Some(new);
            inner.bump_epoch = false;
        }
        let mut inner = self.lock();
        inner.state = TxnState::Ready;
        inner.cause = None;
        Ok(())
    }
}
