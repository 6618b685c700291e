//! A consumer group's offsets in the open transaction: AddOffsetsToTxn at the transaction
//! coordinator, then TxnOffsetCommit at the group's coordinator under the member's generation.

use tokio::time::Instant;

use super::coordinator::{Target, partition_context};
use super::error::{Action, TxnError, copy_error};
use super::producer::{InFlight, TransactionalProducer};
use super::state::ProducerId;
use crate::error::{Context, ErrorCode};
use crate::messages::Request;
use crate::messages::add_offsets_to_txn::AddOffsetsToTxnRequest;
use crate::messages::txn_offset_commit::{
    TxnOffsetCommitPartition, TxnOffsetCommitRequest, TxnOffsetCommitResponse, TxnOffsetCommitTopic,
};

/// A consumer group member whose offsets a transaction commits: what the group coordinator checks
/// to fence a zombie (KIP-447).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    /// The group id.
    pub group_id: String,
    /// The member's generation (classic protocol) or member epoch (KIP-848); -1 skips the check.
    pub generation_id: i32,
    /// The member id; "" skips the check.
    pub member_id: String,
    /// The static member's instance id.
    pub group_instance_id: Option<String>,
}

/// One partition's offset committed by a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnOffset {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The next offset to consume.
    pub offset: i64,
    /// Leader epoch of the last consumed record, -1 if unknown.
    pub leader_epoch: i32,
    /// Commit metadata.
    pub metadata: Option<String>,
}

impl TransactionalProducer {
    /// Adds a consumer group's offsets to the open transaction: AddOffsetsToTxn (once per group
    /// and transaction) at the transaction coordinator, then TxnOffsetCommit at the group's
    /// coordinator with `group`'s generation, member id and instance id. The offsets become the
    /// group's committed offsets when the transaction commits, and never if it aborts. A
    /// TxnOffsetCommit unanswered within the operation timeout makes the transaction abortable
    /// (with a new epoch after the abort); metadata refused as too long is
    /// [`TxnError::MetadataTooLarge`], and the transaction stays open.
    pub async fn send_offsets(
        &self,
        group: &GroupMetadata,
        offsets: &[TxnOffset],
    ) -> Result<(), TxnError> {
        let _gate = self.gate.read().await;
        let deadline = Instant::now() + self.config.operation_timeout;
        let (pid, transactional_id) = self.open_transaction("send_offsets")?;
        self.add_offsets(group, pid, &transactional_id, deadline)
            .await?;
        let mut topics: Vec<TxnOffsetCommitTopic> = Vec::new();
        for o in offsets {
            let p = TxnOffsetCommitPartition {
                partition_index: o.partition,
                committed_offset: o.offset,
                committed_leader_epoch: o.leader_epoch,
                committed_metadata: o.metadata.clone(),
            };
            match topics.iter_mut().find(|t| t.name == o.topic) {
                Some(t) => t.partitions.push(p),
                None => topics.push(TxnOffsetCommitTopic {
                    name: o.topic.clone(),
                    partitions: vec![p],
                }),
            }
        }
        let req = TxnOffsetCommitRequest {
            transactional_id: transactional_id.clone(),
            group_id: group.group_id.clone(),
            producer_id: pid.id,
            producer_epoch: pid.epoch,
            generation_id: group.generation_id,
            member_id: group.member_id.clone(),
            group_instance_id: group.group_instance_id.clone(),
            topics,
        };
        let code = |resp: &TxnOffsetCommitResponse| {
            resp.topics
                .iter()
                .find_map(|t| {
                    t.partitions
                        .iter()
                        .find(|p| p.error_code != ErrorCode::NONE)
                        .map(|p| (p.error_code, partition_context(&t.name, p.partition_index)))
                })
                .unwrap_or((ErrorCode::NONE, Context::default()))
        };
        match self
            .request(Target::Group(&group.group_id), &req, code, deadline)
            .await
        {
            Ok(_) => Ok(()),
            // TxnOffsetCommit may be sent again: the last one before EndTxn counts.
            Err((Action::Retry, e)) if e.code().is_some() => Err(TxnError::Retriable {
                op: "send_offsets",
                source: Box::new(e),
            }),
            // Unanswered: the offsets may still reach the group coordinator, after an abort
            // too. The abort takes a new epoch, under which they are refused.
            Err((Action::Retry, e)) => Err(self.send_failed(e, true)),
            // Nothing of this request counts for the refused partitions; the transaction is
            // as it was.
            Err((Action::Abort, e)) if e.code() == Some(ErrorCode::OFFSET_METADATA_TOO_LARGE) => {
                Err(TxnError::MetadataTooLarge {
                    group_id: group.group_id.clone(),
                    source: Box::new(e),
                })
            }
            Err((Action::Fenced, e)) => Err(self.fenced(e)),
            Err((Action::GroupFenced, e)) => {
                self.to_abortable(copy_error(&e), false);
                Err(TxnError::GroupFenced {
                    group_id: group.group_id.clone(),
                    source: Box::new(e),
                })
            }
            Err((Action::Abort, e)) => Err(self.send_failed(e, false)),
            Err((_, e)) => Err(self.fatal(e)),
        }
    }

    /// AddOffsetsToTxn for `group` unless the open transaction has it already.
    async fn add_offsets(
        &self,
        group: &GroupMetadata,
        pid: ProducerId,
        transactional_id: &str,
        deadline: Instant,
    ) -> Result<(), TxnError> {
        if self.lock().groups.contains(&group.group_id) {
            return Ok(());
        }
        let _one = self.registration.lock().await;
        if self.lock().groups.contains(&group.group_id) {
            return Ok(());
        }
        let req = AddOffsetsToTxnRequest {
            transactional_id: transactional_id.to_string(),
            producer_id: pid.id,
            producer_epoch: pid.epoch,
            group_id: group.group_id.clone(),
        };
        let mut guard = InFlight {
            producer: self,
            what: AddOffsetsToTxnRequest::NAME,
            armed: true,
        };
        let result = self
            .request(
                Target::Transaction,
                &req,
                |r| (r.error_code, Context::default()),
                deadline,
            )
            .await;
        guard.armed = false;
        match result {
            Ok(_) => {
                self.lock().groups.insert(group.group_id.clone());
                Ok(())
            }
            Err((Action::Retry, e)) if e.code().is_some() => Err(TxnError::Retriable {
                op: "send_offsets",
                source: Box::new(e),
            }),
            // Unanswered: the coordinator may have added the group (see `Cancellation`).
            Err((Action::Retry, e)) => Err(self.send_failed(e, true)),
            Err((Action::Fenced, e)) => Err(self.fenced(e)),
            Err((Action::Abort | Action::GroupFenced, e)) => Err(self.send_failed(e, false)),
            Err((_, e)) => Err(self.fatal(e)),
        }
    }
}

/// A group's committed offset of one partition, as [`TransactionalProducer::committed_offsets`]
/// reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The next offset to consume, -1 when the group committed none.
    pub offset: i64,
    /// Commit metadata.
    pub metadata: Option<String>,
}

impl TransactionalProducer {
    /// Reads `group_id`'s committed offsets of `partitions` at the group's coordinator
    /// (OffsetFetch with `require_stable`: offsets of a transaction not yet ended are waited for,
    /// within the operation timeout). After a commit whose outcome is unknown and a new epoch
    /// (which ends that transaction one way or the other), they say which way it went.
    pub async fn committed_offsets(
        &self,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<CommittedOffset>, TxnError> {
        use crate::messages::offset_fetch::{
            OffsetFetchGroup, OffsetFetchRequest, OffsetFetchTopic,
        };
        let deadline = Instant::now() + self.config.operation_timeout;
        let mut topics: Vec<OffsetFetchTopic> = Vec::new();
        for (topic, partition) in partitions {
            match topics.iter_mut().find(|t| &t.name == topic) {
                Some(t) => t.partition_indexes.push(*partition),
                None => topics.push(OffsetFetchTopic {
                    name: topic.clone(),
                    partition_indexes: vec![*partition],
                }),
            }
        }
        let req = OffsetFetchRequest {
            groups: vec![OffsetFetchGroup {
                group_id: group_id.to_owned(),
                member_id: None,
                member_epoch: -1,
                topics: Some(topics),
            }],
            require_stable: true,
        };
        let code = |resp: &crate::messages::offset_fetch::OffsetFetchResponse| {
            let Some(g) = resp.groups.first() else {
                return (ErrorCode::UNKNOWN_SERVER_ERROR, Context::default());
            };
            if g.error_code != ErrorCode::NONE {
                return (g.error_code, Context::default());
            }
            g.topics
                .iter()
                .find_map(|t| {
                    t.partitions
                        .iter()
                        .find(|p| p.error_code != ErrorCode::NONE)
                        .map(|p| (p.error_code, partition_context(&t.name, p.partition_index)))
                })
                .unwrap_or((ErrorCode::NONE, Context::default()))
        };
        match self
            .request(Target::Group(group_id), &req, code, deadline)
            .await
        {
            Ok(resp) => Ok(resp
                .groups
                .into_iter()
                .flat_map(|g| g.topics)
                .flat_map(|t| {
                    let topic = t.name;
                    t.partitions.into_iter().map(move |p| CommittedOffset {
                        topic: topic.clone(),
                        partition: p.partition_index,
                        offset: p.committed_offset,
                        metadata: p.metadata,
                    })
                })
                .collect()),
            Err((Action::Retry | Action::Rediscover, e)) => Err(TxnError::Retriable {
                op: "committed_offsets",
                source: Box::new(e),
            }),
            // Refused (not authorized to describe the group, for one): nothing to learn here,
            // and the producer's state is untouched.
            Err((_, e)) => Err(TxnError::Fatal {
                source: Box::new(e),
            }),
        }
    }
}
