//! `KafkaReplies`: the engine's reply sink on Kafka topics (idempotent producer, acks=all,
//! session-keyed, batched per partition).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use orderly_engine::{Record, Reply, ReplyError, ReplyFuture, ReplySink};
use orderly_protocol::error::ErrorCode;
use orderly_protocol::partitioner::partition_for_key;
use orderly_protocol::{ProduceRecord, Producer, WireHeader};
use tokio::sync::oneshot;

use crate::output::Spawner;

/// The most records one produce request of a partition carries.
const BATCH_RECORDS: usize = 500;
/// The most bytes (roughly) one produce request of a partition carries; a larger reply goes alone.
const BATCH_BYTES: usize = 512 * 1024;

/// Writes handlers' replies to Kafka.
///
/// A reply goes to its own topic, else to the default topic ([`KafkaReplies::new`]; a reply
/// with neither is refused, and its record dead-lettered). It keeps its own key, else takes the
/// **session id** of the record that produced it as its key, so every reply of a session lands on
/// one partition (Java's murmur2 partitioner, like any Kafka producer with that key) in the order
/// the engine hands them over, which is the session's order: the engine starts a session's next
/// record only after this sink acknowledged the previous record's replies. Replies of the
/// unordered lane without a key go round robin.
///
/// Writes are batched per partition: one produce request in flight per partition (so order on
/// the partition holds), carrying every reply queued for that partition meanwhile, from all
/// sessions. The producer is idempotent (acks=all, producer id and sequences): a request retried
/// after a lost answer is not written twice. `send` completes once the broker acknowledged every
/// reply of the call; a failure reports how many of them (from the front) were acknowledged, so
/// the engine writes only the rest again.
///
/// Each partition's batches are sent by a task of their own, which ends when the partition's
/// queue is empty; a `send` dropped meanwhile (a revoke, a shutdown deadline) does not stop the
/// batch its replies are in. [`KafkaReplies::idle`] waits for those tasks.
#[derive(Debug, Clone)]
pub struct KafkaReplies {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    producer: Producer,
    default_topic: Option<String>,
    queues: Mutex<HashMap<(String, i32), Queue>>,
    round_robin: AtomicU32,
    /// Notified whenever a partition's sending task ends.
    ended: tokio::sync::Notify,
    /// Where the sending tasks run.
    output: Spawner,
}

type Ack = oneshot::Sender<Result<(), Failure>>;

/// The replies waiting for one partition, and whether a task is sending them.
#[derive(Debug, Default)]
struct Queue {
    waiting: VecDeque<(ProduceRecord, Ack)>,
    sending: bool,
}

impl KafkaReplies {
    /// Readies the producer for replies to `topic` before the first one (its metadata, leader
    /// connections and producer id).
    pub(crate) async fn prepare(&self, topic: &str) {
        self.inner.producer.prepare(topic).await;
    }

    /// Sends the batches from `output` (the consumer's output thread) from now on.
    pub(crate) fn set_output(&self, output: tokio::runtime::Handle) {
        self.inner.output.set(output);
    }

    /// A sink writing through `producer` (use an idempotent one), replies without a topic to
    /// `default_topic`.
    pub fn new(producer: Producer, default_topic: Option<String>) -> Self {
        Self {
            inner: Arc::new(Inner {
                producer,
                default_topic,
                queues: Mutex::new(HashMap::new()),
                round_robin: AtomicU32::new(0),
                ended: tokio::sync::Notify::new(),
                output: Spawner::default(),
            }),
        }
    }

    /// Completes once no reply is queued or being sent (every sending task has ended).
    /// Cancel safe.
    pub async fn idle(&self) {
        loop {
            // Created before the check, so a task ending after it wakes this wait.
            let ended = self.inner.ended.notified();
            let busy = self.inner.queues.lock().is_ok_and(|q| !q.is_empty());
            if !busy {
                return;
            }
            ended.await;
        }
    }

    /// The topic of replies that name none.
    pub fn default_topic(&self) -> Option<&str> {
        self.inner.default_topic.as_deref()
    }

    async fn write(&self, session: Option<&[u8]>, replies: &[Reply]) -> Result<(), ReplyError> {
        let inner = &self.inner;
        let mut acks = Vec::with_capacity(replies.len());
        for (i, reply) in replies.iter().enumerate() {
            let (topic, key) = destination(reply, inner.default_topic.as_deref(), session)?;
            let n = match inner.producer.partitions(topic).await {
                Ok(n) => n,
                Err(e) => {
                    // The replies queued before this one are on their way: count them.
                    let delivered = settled(acks).await.0.min(i);
                    return Err(ReplyError::Write {
                        delivered,
                        reason: format!("reply topic {topic}: {e}"),
                    });
                }
            };
            let partition = match key.as_deref() {
                Some(k) => partition_for_key(k, n),
                None => {
                    let r = inner.round_robin.fetch_add(1, Relaxed);
                    i32::try_from(r % u32::try_from(n.max(1)).unwrap_or(1)).unwrap_or(0)
                }
            };
            acks.push(self.enqueue(topic, partition, reply_record(reply, key)));
        }
        match settled(acks).await {
            (_, None) => Ok(()),
            (delivered, Some(f)) if f.refused => Err(ReplyError::Invalid(format!(
                "{} (after {delivered} replies of the record were written)",
                f.text
            ))),
            (delivered, Some(f)) => Err(ReplyError::Write {
                delivered,
                reason: f.text,
            }),
        }
    }

    /// Queues `record` for `topic`/`partition` and starts the partition's sending task if none
    /// runs.
    fn enqueue(
        &self,
        topic: &str,
        partition: i32,
        record: ProduceRecord,
    ) -> oneshot::Receiver<Result<(), Failure>> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let Ok(mut queues) = self.inner.queues.lock() else {
                let _ = tx.send(Err(Failure::failed("reply queue lock poisoned")));
                return rx;
            };
            let q = queues.entry((topic.to_owned(), partition)).or_default();
            q.waiting.push_back((record, tx));
            !std::mem::replace(&mut q.sending, true)
        };
        if start {
            let inner = self.inner.clone();
            let topic = topic.to_owned();
            self.inner
                .output
                .spawn(async move { inner.send_queued(topic, partition).await });
        }
        rx
    }
}

impl Inner {
    /// Sends the partition's queued replies, a batch at a time, until the queue is empty.
    async fn send_queued(&self, topic: String, partition: i32) {
        self.send_all(&topic, partition).await;
        self.ended.notify_waiters();
    }

    async fn send_all(&self, topic: &str, partition: i32) {
        let key = (topic.to_owned(), partition);
        loop {
            let batch = {
                let Ok(mut queues) = self.queues.lock() else {
                    return;
                };
                let Some(q) = queues.get_mut(&key) else {
                    return;
                };
                if q.waiting.is_empty() {
                    queues.remove(&key);
                    return;
                }
                let n = batch_len(q.waiting.iter().map(|(r, _)| r));
                q.waiting
                    .drain(..n)
                    .unzip::<_, _, Vec<ProduceRecord>, Vec<Ack>>()
            };
            let (records, acks) = batch;
            let result = self
                .producer
                .send_batch(topic, partition, &records)
                .await
                .map(drop)
                .map_err(|e| Failure {
                    // The broker will never take these records: retrying cannot help.
                    refused: matches!(
                        e.code(),
                        Some(
                            ErrorCode::MESSAGE_TOO_LARGE
                                | ErrorCode::RECORD_LIST_TOO_LARGE
                                | ErrorCode::INVALID_RECORD
                        )
                    ),
                    text: format!("writing to {topic}/{partition}: {e}"),
                });
            for ack in acks {
                let _ = ack.send(result.clone());
            }
        }
    }
}

/// Why a queued reply was not written.
#[derive(Debug, Clone)]
struct Failure {
    /// The broker refused the record itself (too large, invalid): writing it again cannot help.
    refused: bool,
    text: String,
}

impl Failure {
    fn failed(text: impl Into<String>) -> Self {
        Self {
            refused: false,
            text: text.into(),
        }
    }
}

/// Waits for every acknowledgement; returns how many succeeded from the front and the first
/// failure.
async fn settled(acks: Vec<oneshot::Receiver<Result<(), Failure>>>) -> (usize, Option<Failure>) {
    let mut delivered = 0;
    let mut failure = None;
    for ack in acks {
        let r = ack
            .await
            .unwrap_or_else(|_| Err(Failure::failed("the reply sender ended")));
        match r {
            Ok(()) if failure.is_none() => delivered += 1,
            Err(e) if failure.is_none() => failure = Some(e),
            _ => {}
        }
    }
    (delivered, failure)
}

/// Where a reply goes: its own topic or `default_topic`, keyed by its own key or the session
/// id; `Invalid` when it names no topic and there is no default.
pub(crate) fn destination<'a>(
    reply: &'a Reply,
    default_topic: Option<&'a str>,
    session: Option<&[u8]>,
) -> Result<(&'a str, Option<bytes::Bytes>), ReplyError> {
    let topic = match reply.topic.as_deref().or(default_topic) {
        Some(t) if !t.is_empty() => t,
        _ => {
            return Err(ReplyError::Invalid(
                "the reply names no topic and no default reply topic is set".into(),
            ));
        }
    };
    let key = reply
        .key
        .clone()
        .or_else(|| session.map(bytes::Bytes::copy_from_slice));
    Ok((topic, key))
}

/// The record a reply is written as, with `key` (the reply's own or the session id).
pub(crate) fn reply_record(reply: &Reply, key: Option<bytes::Bytes>) -> ProduceRecord {
    ProduceRecord {
        key,
        value: reply.value.clone(),
        headers: reply
            .headers
            .iter()
            .map(|h| WireHeader {
                key: h.key.clone(),
                value: h.value.clone(),
            })
            .collect(),
        timestamp: None,
    }
}

/// How many records from the front of `waiting` the next produce request takes: at least one,
/// then up to [`BATCH_RECORDS`] and [`BATCH_BYTES`].
pub(crate) fn batch_len<'a>(waiting: impl IntoIterator<Item = &'a ProduceRecord>) -> usize {
    let mut n = 0;
    let mut bytes = 0usize;
    for r in waiting {
        let b = record_bytes(r);
        if n > 0 && (n >= BATCH_RECORDS || bytes + b > BATCH_BYTES) {
            break;
        }
        bytes += b;
        n += 1;
    }
    n
}

/// The most bytes one record may take in a produce request, its batch's header included: Java's
/// producer default (`max.request.size`), just under the broker's default `message.max.bytes`.
pub(crate) const MAX_RECORD_BYTES: usize = 1 << 20;

/// `r`'s size in a produce request of its own: the batch that carries it, as the protocol crate
/// encodes it, uncompressed (Java's producer, too, holds a record's uncompressed size to
/// `max.request.size`).
pub(crate) fn record_bytes_in_request(r: &ProduceRecord) -> usize {
    // Alone in its batch, a record's timestamp delta is 0 whatever the time.
    orderly_protocol::records::uncompressed_batch_len(std::slice::from_ref(r), 0)
}

pub(crate) fn record_bytes(r: &ProduceRecord) -> usize {
    r.key.as_ref().map_or(0, bytes::Bytes::len)
        + r.value.as_ref().map_or(0, bytes::Bytes::len)
        + r.headers
            .iter()
            .map(|h| h.key.len() + h.value.as_ref().map_or(0, bytes::Bytes::len))
            .sum::<usize>()
        + 64
}

impl ReplySink for KafkaReplies {
    fn send<'a>(
        &'a self,
        origin: &'a Record,
        session: Option<&'a [u8]>,
        replies: &'a [Reply],
    ) -> ReplyFuture<'a> {
        let _ = origin;
        Box::pin(self.write(session, replies))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use orderly_protocol::records::{BatchSpec, encode_batch};

    /// A reply is held against [`MAX_RECORD_BYTES`] by the bytes its batch takes on the wire,
    /// with or without key and headers, small or large.
    #[test]
    fn a_reply_is_measured_as_its_batch_is_encoded() {
        let header = |k: &str, v: Option<&[u8]>| WireHeader {
            key: k.into(),
            value: v.map(Bytes::copy_from_slice),
        };
        let records = [
            ProduceRecord::default(),
            ProduceRecord {
                key: Some(Bytes::from_static(b"session-1")),
                value: Some(Bytes::from_static(b"reply")),
                ..Default::default()
            },
            ProduceRecord {
                key: None,
                value: Some(Bytes::from(vec![b'x'; MAX_RECORD_BYTES])),
                headers: vec![header("trace", Some(b"abc")), header("none", None)],
                timestamp: Some(1_700_000_000_000),
            },
        ];
        for record in records {
            let encoded = encode_batch(
                &BatchSpec::default(),
                std::slice::from_ref(&record),
                0,
                None,
            )
            .unwrap();
            assert_eq!(record_bytes_in_request(&record), encoded.len());
        }
    }
}
