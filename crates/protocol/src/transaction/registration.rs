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
    /// AddPartitionsToTxn for `topic`/`partition` unless the open transaction has it already.
    pub(super) async fn add_partition(
        &self,
        topic: &str,
        partition: i32,
        pid: ProducerId,
        transactional_id: &str,
        deadline: Instant,
    ) -> Result<(), TxnError> {
        let key = (topic.to_string(), partition);
        if self.lock().partitions.contains(&key) {
            return Ok(());
        }
        let _one = self.registration.lock().await;
        if self.lock().partitions.contains(&key) {
            return Ok(());
        }
        let req = AddPartitionsToTxnRequest {
            transactional_id: transactional_id.to_string(),
            producer_id: pid.id,
            producer_epoch: pid.epoch,
            topics: vec![AddPartitionsToTxnTopic {
                name: topic.to_string(),
                partitions: vec![partition],
            }],
        };
        let code = |resp: &AddPartitionsToTxnResponse| {
            let code = resp
                .topics
                .iter()
                .filter(|t| t.name == topic)
                .flat_map(|t| t.partitions.iter())
                .find(|p| p.partition_index == partition)
                .map_or(ErrorCode::UNKNOWN_SERVER_ERROR, |p| p.error_code);
            (code, partition_context(topic, partition))
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
                self.lock().partitions.insert(key);
                Ok(())
            }
            // Refused with a retriable code: the partition is not in the transaction and nothing
            // was produced.
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
