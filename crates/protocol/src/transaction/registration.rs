//! A partition's registration in the open transaction: AddPartitionsToTxn at the transaction
//! coordinator before the partition's first batch.

use tokio::time::Instant;

use super::coordinator::{Target, partition_context};
use super::error::{Action, TxnError};
use super::producer::{InFlight, TransactionalProducer};
use super::state::ProducerId;
use crate::error::ErrorCode;
use crate::messages::Request;
use crate::messages::add_partitions_to_txn::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, AddPartitionsToTxnTopic,
};

impl TransactionalProducer {
    /// AddPartitionsToTxn, in one request, for those of `partitions` of `topic` the open
    /// transaction does not have yet.
    pub(super) async fn add_partitions(
        &self,
        topic: &str,
        partitions: &[i32],
        pid: ProducerId,
        transactional_id: &str,
        deadline: Instant,
    ) -> Result<(), TxnError> {
        let missing = |this: &Self| -> Vec<i32> {
            let inner = this.lock();
            partitions
                .iter()
                .copied()
                .filter(|p| !inner.partitions.contains(&(topic.to_string(), *p)))
                .collect()
        };
        if missing(self).is_empty() {
            return Ok(());
        }
        let _one = self.registration.lock().await;
        let new = missing(self);
        if new.is_empty() {
            return Ok(());
        }
        let req = AddPartitionsToTxnRequest {
            transactional_id: transactional_id.to_string(),
            producer_id: pid.id,
            producer_epoch: pid.epoch,
            topics: vec![AddPartitionsToTxnTopic {
                name: topic.to_string(),
                partitions: new.clone(),
            }],
        };
        // A partition refused (or missing from the answer) speaks for the request; the cause
        // before the OPERATION_NOT_ATTEMPTED the broker gives the others.
        let code = |resp: &AddPartitionsToTxnResponse| {
            let mut codes: Vec<_> = new
                .iter()
                .map(|&partition| {
                    let code = resp
                        .topics
                        .iter()
                        .filter(|t| t.name == topic)
                        .flat_map(|t| t.partitions.iter())
                        .find(|p| p.partition_index == partition)
                        .map_or(ErrorCode::UNKNOWN_SERVER_ERROR, |p| p.error_code);
                    (code, partition_context(topic, partition))
                })
                .filter(|(code, _)| *code != ErrorCode::NONE)
                .collect();
            codes.sort_by_key(|(code, _)| *code == ErrorCode::OPERATION_NOT_ATTEMPTED);
            codes
                .into_iter()
                .next()
                .unwrap_or_else(|| (ErrorCode::NONE, partition_context(topic, new[0])))
        };
        let mut guard = InFlight {
            producer: self,
            what: AddPartitionsToTxnRequest::NAME,
            armed: true,
        };
        let result = self
            .request(Target::Transaction, &req, code, deadline)
            .await;
        guard.armed = false;
        match result {
            Ok(_) => {
                let mut inner = self.lock();
                for p in new {
                    inner.partitions.insert((topic.to_string(), p));
                }
                Ok(())
            }
            // Refused with a retriable code: the partitions are not in the transaction and
            // nothing was produced.
            Err((Action::Retry, e)) if e.code().is_some() => Err(TxnError::Retriable {
                op: "send",
                source: Box::new(e),
            }),
            // Unanswered: the coordinator may have added it (see `Cancellation`).
            Err((Action::Retry, e)) => Err(self.send_failed(e, true)),
            Err((Action::Fenced, e)) => Err(self.fenced(e)),
            Err((Action::Abort | Action::GroupFenced, e)) => Err(self.send_failed(e, false)),
            Err((_, e)) => Err(self.fatal(e)),
        }
    }
}
