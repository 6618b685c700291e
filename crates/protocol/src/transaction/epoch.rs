//! The producer id and epoch: `init` takes the transactional id, `recover_epoch` goes on after a
//! fence the coordinator raised itself, both with InitProducerId at the transaction coordinator.

use std::time::Duration;

use tokio::time::Instant;

use super::coordinator::Target;
use super::error::{Action, TxnError};
use super::producer::TransactionalProducer;
use super::state::{ProducerId, TxnState};
use crate::error::Context;
use crate::messages::init_producer_id::InitProducerIdRequest;

impl TransactionalProducer {
    /// Takes the transactional id (InitProducerId at its transaction coordinator) with
    /// `transaction_timeout`, after which the coordinator aborts a transaction left open. Fences
    /// every other producer with the same id and aborts what it had open. Accepted in every state;
    /// on success the producer is `Ready`.
    pub async fn init(
        &self,
        transactional_id: &str,
        transaction_timeout: Duration,
    ) -> Result<(), TxnError> {
        let _gate = self.gate.write().await;
        let deadline = Instant::now() + self.config.operation_timeout;
        let timeout_ms = i32::try_from(transaction_timeout.as_millis()).unwrap_or(i32::MAX);
        {
            let mut inner = self.lock();
            if inner.transactional_id != transactional_id {
                inner.coordinator = None;
            }
            inner.transactional_id = transactional_id.to_string();
            inner.transaction_timeout_ms = timeout_ms;
        }
        let req = InitProducerIdRequest {
            transactional_id: Some(transactional_id.to_string()),
            transaction_timeout_ms: timeout_ms,
            producer_id: -1,
            producer_epoch: -1,
        };
        let pid = self.init_producer_id(&req, "init", deadline).await?;
        let mut inner = self.lock();
        inner.pid = Some(pid);
        inner.partitions.clear();
        inner.groups.clear();
        inner.cause = None;
        inner.bump_epoch = false;
        inner.state = TxnState::Ready;
        tracing::debug!(
            transactional_id,
            producer_id = pid.id,
            epoch = pid.epoch,
            "transactional producer ready"
        );
        Ok(())
    }

    /// After [`TxnError::ProducerFenced`]: asks the transaction coordinator to go on under this
    /// producer's id with a new epoch, naming the id and epoch it holds (InitProducerId with
    /// them, KIP-360). The coordinator grants it only while no other producer took the
    /// transactional id since this one's last epoch: a fence it raised itself (a transaction it
    /// aborted at its timeout) is overcome, a fence by another producer with the id is not, and
    /// the producer stays [`TxnState::Fenced`] with [`TxnError::ProducerFenced`]. A coordinator
    /// without InitProducerId v3 (before Apache Kafka 2.5) cannot tell the two apart: the
    /// producer stays fenced there too. On success the producer is `Ready`.
    pub async fn recover_epoch(&self) -> Result<(), TxnError> {
        let _gate = self.gate.write().await;
        let deadline = Instant::now() + self.config.operation_timeout;
        let (pid, transactional_id, timeout_ms) = {
            let inner = self.lock();
            let Some(pid) = inner.pid else {
                return Err(Self::refusal("recover_epoch", inner.state, &inner));
            };
            (
                pid,
                inner.transactional_id.clone(),
                inner.transaction_timeout_ms,
            )
        };
        let v3 = match self.coordinator(Target::Transaction).await {
            Ok(conn) => conn
                .version_for::<InitProducerIdRequest>()
                .is_ok_and(|v| v >= 3),
            Err(e) => {
                return Err(TxnError::Retriable {
                    op: "recover_epoch",
                    source: Box::new(e),
                });
            }
        };
        if !v3 {
            let mut inner = self.lock();
            inner.state = TxnState::Fenced;
            return Err(Self::refusal("recover_epoch", TxnState::Fenced, &inner));
        }
        let req = InitProducerIdRequest {
            transactional_id: Some(transactional_id.clone()),
            transaction_timeout_ms: timeout_ms,
            producer_id: pid.id,
            producer_epoch: pid.epoch,
        };
        let new = self
            .init_producer_id(&req, "recover_epoch", deadline)
            .await?;
        let mut inner = self.lock();
        inner.pid = Some(new);
        inner.partitions.clear();
        inner.groups.clear();
        inner.cause = None;
        inner.bump_epoch = false;
        inner.state = TxnState::Ready;
        tracing::info!(
            transactional_id,
            producer_id = new.id,
            epoch = new.epoch,
            "transactional producer goes on with a new epoch after the coordinator fenced it"
        );
        Ok(())
    }

    /// InitProducerId at the transaction coordinator, retried until `deadline`.
    pub(super) async fn init_producer_id(
        &self,
        req: &InitProducerIdRequest,
        op: &'static str,
        deadline: Instant,
    ) -> Result<ProducerId, TxnError> {
        match self
            .request(
                Target::Transaction,
                req,
                |r| (r.error_code, Context::default()),
                deadline,
            )
            .await
        {
            Ok(r) => Ok(ProducerId {
                id: r.producer_id,
                epoch: r.producer_epoch,
            }),
            Err((Action::Retry, e)) => Err(TxnError::Retriable {
                op,
                source: Box::new(e),
            }),
            Err((Action::Fenced, e)) => Err(self.fenced(e)),
            Err((_, e)) => Err(self.fatal(e)),
        }
    }
}
