//! What the fetch loop and the rebalance bridge hand `KafkaSource`: one FIFO channel of
//! [`Internal`] messages. Both senders and the source import it; it imports neither.

use orderly_engine::{Assignment, Record, TopicPartition};
use tokio::sync::oneshot;

/// What the fetch loop and the rebalance bridge send to the source, in one FIFO channel.
#[derive(Debug)]
pub(crate) enum Internal {
    Records {
        tp: TopicPartition,
        epoch: u64,
        records: Vec<Record>,
        hw: Option<i64>,
    },
    HighWatermark {
        tp: TopicPartition,
        epoch: u64,
        hw: i64,
    },
    Assigned(Vec<(Assignment, u64)>),
    Revoked(Vec<TopicPartition>, oneshot::Sender<()>),
    Lost(Vec<TopicPartition>, oneshot::Sender<()>),
    Fatal(String),
}
