//! The idempotent producer against the real broker: a batch whose response is lost is retried and
//! written once (and twice without idempotence, so the test can tell), the same sequence sent twice
//! through the codec is one batch, a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER, a send dropped in
//! flight never lends its sequence to the next batch, a throttled Produce is waited out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use orderly_protocol::{
    BatchSequence, BrokerConnection, Compression, ConnectionConfig, ConnectionPool, ErrorCode,
    FetchOptions, FetchSpec, FetchedRecord, ProduceRecord, Producer, ProducerConfig,
};
use orderly_testkit::proxy::KafkaProxy;

use super::wait_for_leader;

const PRODUCE: i16 = 0;

fn records(tag: &str, n: usize) -> Vec<ProduceRecord> {
    (0..n)
        .map(|i| ProduceRecord {
            key: Some(Bytes::from(format!("k-{tag}"))),
            value: Some(Bytes::from(format!("{tag}-{i}"))),
            ..Default::default()
        })
        .collect()
}

/// Every record of partition 0 of `topic`, up to its end.
async fn read_partition(conn: &BrokerConnection, topic: &str, end: i64) -> Vec<FetchedRecord> {
    let mut out = Vec::new();
    let mut offset = 0;
    for _ in 0..100 {
        if offset >= end {
            break;
        }
        let res = conn
            .fetch(
                &[FetchSpec {
                    topic: topic.into(),
                    topic_id: [0; 16],
                    partition: 0,
                    offset,
                    leader_epoch: -1,
                    max_bytes: 1 << 20,
                }],
                &FetchOptions {
                    max_wait: Duration::from_millis(100),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let pf = res.into_iter().next().unwrap();
        assert!(pf.error.is_none(), "{:?}", pf.error);
        offset = pf.next_offset;
        out.extend(pf.records);
    }
    out
}

async fn end_offset(conn: &BrokerConnection, topic: &str) -> i64 {
    conn.list_offset(
        topic,
        0,
        orderly_protocol::messages::list_offsets::LATEST,
        orderly_protocol::IsolationLevel::ReadUncommitted,
    )
    .await
    .unwrap()
    .0
}

/// A new one-partition topic named after `name`, with its leader elected, and a direct connection.
async fn one_partition_topic(
    broker: &orderly_testkit::TestBroker,
    name: &str,
) -> (Arc<BrokerConnection>, String) {
    let direct = ConnectionPool::new(
        vec![broker.bootstrap().to_string()],
        ConnectionConfig::default(),
    );
    let conn = direct.any().await.unwrap();
    let topic = broker.unique_topic(name);
    conn.create_topic(&topic, 1, -1, &[]).await.unwrap();
    wait_for_leader(&conn, &topic).await;
    (conn, topic)
}

fn values(rs: &[FetchedRecord]) -> Vec<String> {
    rs.iter()
        .map(|r| String::from_utf8(r.value.as_deref().unwrap().to_vec()).unwrap())
        .collect()
}

/// Produces two batches through a proxy that loses the response to the first attempt of the first
/// batch; returns what the partition holds afterwards.
async fn lost_response_run(idempotent: bool) -> (Vec<String>, usize, i64) {
    let broker = orderly_testkit::broker();
    let (conn, topic) =
        one_partition_topic(broker, if idempotent { "idem" } else { "plain" }).await;

    let proxy = KafkaProxy::start(broker.bootstrap()).await.unwrap();
    let pool = Arc::new(ConnectionPool::new(
        vec![proxy.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let producer = Producer::new(
        pool,
        ProducerConfig {
            idempotent,
            ..ProducerConfig::default()
        },
    );
    // Metadata first, so the only Produce requests are the ones below.
    assert_eq!(producer.partitions(&topic).await.unwrap(), 1);
    proxy.lose_responses(PRODUCE, 1);
    let first = producer
        .send_batch(&topic, 0, &records("a", 5))
        .await
        .unwrap();
    assert_eq!(proxy.lost(PRODUCE), 1, "the first response was lost");
    let second = producer
        .send_batch(&topic, 0, &records("b", 3))
        .await
        .unwrap();
    let sent = proxy.seen(PRODUCE);
    let end = end_offset(&conn, &topic).await;
    let got = values(&read_partition(&conn, &topic, end).await);
    assert_eq!(i64::try_from(got.len()).unwrap(), end);
    assert_eq!(second, end - 3, "the second batch is the last one");
    (got, sent, first)
}

#[tokio::test]
async fn a_retry_after_a_lost_response_is_written_once() {
    let (got, sent, first) = lost_response_run(true).await;
    assert_eq!(sent, 3, "the first batch went out twice, the second once");
    assert_eq!(
        first, 0,
        "the retry is answered with the first attempt's offset"
    );
    let want: Vec<String> = (0..5)
        .map(|i| format!("a-{i}"))
        .chain((0..3).map(|i| format!("b-{i}")))
        .collect();
    assert_eq!(got, want, "each record once, in order");
}

/// The same run without idempotence writes the first batch twice: the lost response is real and
/// the retry does reach the broker, so the test above would see a duplicate if the broker did not
/// recognise the batch by its sequence.
#[tokio::test]
async fn without_idempotence_the_same_retry_duplicates() {
    let (got, sent, first) = lost_response_run(false).await;
    assert_eq!(sent, 3);
    assert_eq!(first, 5, "the retry was appended after the first attempt");
    assert_eq!(got.len(), 13, "{got:?}");
    assert_eq!(got[..5], got[5..10], "the first batch twice");
}

#[tokio::test]
async fn same_sequence_twice_is_one_batch_and_a_gap_is_refused() {
    let broker = orderly_testkit::broker();
    let pool = Arc::new(ConnectionPool::new(
        vec![broker.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let conn = pool.any().await.unwrap();
    let topic = broker.unique_topic("seq");
    conn.create_topic(&topic, 1, -1, &[]).await.unwrap();
    wait_for_leader(&conn, &topic).await;
    let (producer_id, producer_epoch) = conn.init_producer_id().await.unwrap();
    assert!(producer_id >= 0, "{producer_id}");
    let stamp = move |base_sequence| {
        Some(BatchSequence {
            producer_id,
            producer_epoch,
            base_sequence,
        })
    };
    let send = |recs: Vec<ProduceRecord>, seq: i32| {
        let (conn, topic) = (conn.clone(), topic.clone());
        async move {
            conn.produce_sequenced(
                &topic,
                0,
                &recs,
                Compression::None,
                Duration::from_secs(30),
                stamp(seq),
            )
            .await
        }
    };
    let a = records("a", 3);
    assert_eq!(send(a.clone(), 0).await.unwrap(), 0);
    // The very same batch again (a retry whose first answer was lost): the broker answers with the
    // original offset, or DUPLICATE_SEQUENCE_NUMBER, and appends nothing.
    match send(a, 0).await {
        Ok(offset) => assert_eq!(offset, 0),
        Err(e) => assert_eq!(e.code(), Some(ErrorCode::DUPLICATE_SEQUENCE_NUMBER), "{e}"),
    }
    assert_eq!(end_offset(&conn, &topic).await, 3);
    // A gap (next expected is 3).
    let e = send(records("gap", 1), 7).await.unwrap_err();
    assert_eq!(
        e.code(),
        Some(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER),
        "{e}"
    );
    assert_eq!(send(records("b", 2), 3).await.unwrap(), 3);
    assert_eq!(
        values(&read_partition(&conn, &topic, 5).await),
        ["a-0", "a-1", "a-2", "b-0", "b-1"]
    );
    // A second id is a different producer: its sequences start at 0.
    let (other, _) = conn.init_producer_id().await.unwrap();
    assert_ne!(other, producer_id);
}

/// The default producer is idempotent and has a producer id once it has written.
#[tokio::test]
async fn the_default_producer_is_idempotent() {
    let broker = orderly_testkit::broker();
    let pool = Arc::new(ConnectionPool::new(
        vec![broker.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let topic = broker.unique_topic("default-idem");
    pool.any()
        .await
        .unwrap()
        .create_topic(&topic, 2, -1, &[])
        .await
        .unwrap();
    let producer = Producer::new(pool, ProducerConfig::default());
    assert!(producer.config().idempotent);
    assert_eq!(producer.config().delivery_timeout, Duration::from_secs(120));
    assert_eq!(producer.producer_id().await, None);
    for i in 0..4 {
        producer
            .send_batch(&topic, i % 2, &records("x", 2))
            .await
            .unwrap();
    }
    let (id, epoch) = producer.producer_id().await.unwrap();
    assert!(id >= 0 && epoch >= 0);
}

/// A producer whose epoch was fenced (here: the same id written at a higher epoch behind its back)
/// gets INVALID_PRODUCER_EPOCH, takes a new producer id, restarts its sequences and writes the
/// batch once.
#[tokio::test]
async fn a_fenced_epoch_makes_the_producer_take_a_new_id() {
    let broker = orderly_testkit::broker();
    let pool = Arc::new(ConnectionPool::new(
        vec![broker.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let conn = pool.any().await.unwrap();
    let topic = broker.unique_topic("fenced");
    conn.create_topic(&topic, 1, -1, &[]).await.unwrap();
    wait_for_leader(&conn, &topic).await;
    let producer = Producer::new(pool.clone(), ProducerConfig::default());
    producer
        .send_batch(&topic, 0, &records("a", 3))
        .await
        .unwrap();
    let (id, epoch) = producer.producer_id().await.unwrap();
    // Someone writes under the same id at the next epoch: the broker now fences `epoch`.
    conn.produce_sequenced(
        &topic,
        0,
        &records("fence", 1),
        Compression::None,
        Duration::from_secs(30),
        Some(BatchSequence {
            producer_id: id,
            producer_epoch: epoch + 1,
            base_sequence: 0,
        }),
    )
    .await
    .unwrap();
    let offset = producer
        .send_batch(&topic, 0, &records("b", 2))
        .await
        .unwrap();
    assert_eq!(offset, 4);
    let (new_id, _) = producer.producer_id().await.unwrap();
    assert_ne!(new_id, id, "a new producer id after the fence");
    assert_eq!(
        values(&read_partition(&conn, &topic, 6).await),
        ["a-0", "a-1", "a-2", "fence-0", "b-0", "b-1"]
    );
    // And the new id's sequences continue normally.
    assert_eq!(
        producer
            .send_batch(&topic, 0, &records("c", 1))
            .await
            .unwrap(),
        6
    );
}

/// OUT_OF_ORDER_SEQUENCE_NUMBER (the broker's sequence for this producer moved on without it, here
/// by a write under its id behind its back) fails the batch with that error, as the Java client
/// does, and retires the producer id: the next batch goes out under a new id and is written.
#[tokio::test]
async fn out_of_order_sequence_fails_the_batch_and_retires_the_id() {
    let broker = orderly_testkit::broker();
    let pool = Arc::new(ConnectionPool::new(
        vec![broker.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let conn = pool.any().await.unwrap();
    let topic = broker.unique_topic("ooo");
    conn.create_topic(&topic, 1, -1, &[]).await.unwrap();
    wait_for_leader(&conn, &topic).await;
    let producer = Producer::new(pool.clone(), ProducerConfig::default());
    producer
        .send_batch(&topic, 0, &records("a", 3))
        .await
        .unwrap();
    let (id, epoch) = producer.producer_id().await.unwrap();
    // Sequence 3 written under the producer's id by someone else: the broker now expects 4.
    conn.produce_sequenced(
        &topic,
        0,
        &records("intruder", 1),
        Compression::None,
        Duration::from_secs(30),
        Some(BatchSequence {
            producer_id: id,
            producer_epoch: epoch,
            base_sequence: 3,
        }),
    )
    .await
    .unwrap();
    let err = producer
        .send_batch(&topic, 0, &records("b", 2))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER),
        "{err}"
    );
    assert_eq!(producer.producer_id().await, None, "the id is retired");
    assert_eq!(
        producer
            .send_batch(&topic, 0, &records("c", 2))
            .await
            .unwrap(),
        4
    );
    assert_ne!(producer.producer_id().await.unwrap().0, id);
    assert_eq!(
        values(&read_partition(&conn, &topic, 6).await),
        ["a-0", "a-1", "a-2", "intruder-0", "c-0", "c-1"]
    );
}

/// Retries are bounded by time: a batch for a partition that never becomes writable (here a topic
/// that does not exist, UNKNOWN_TOPIC_OR_PARTITION, retriable) fails with DeliveryTimeout once the
/// delivery timeout has passed, not after a count of attempts, and not much later.
#[tokio::test]
async fn retries_end_at_the_delivery_timeout() {
    let broker = orderly_testkit::broker();
    let pool = Arc::new(ConnectionPool::new(
        vec![broker.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let producer = Producer::new(
        pool,
        ProducerConfig {
            delivery_timeout: Duration::from_secs(3),
            ..ProducerConfig::default()
        },
    );
    let started = std::time::Instant::now();
    let err = producer
        .send_batch(&broker.unique_topic("never-created"), 0, &records("x", 1))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(
        matches!(err, orderly_protocol::Error::DeliveryTimeout { .. }),
        "{err:?}"
    );
    assert_eq!(err.code(), Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION));
    assert!(err.to_string().contains("delivery timeout"), "{err}");
    assert!(took >= Duration::from_secs(2), "gave up early: {took:?}");
    assert!(took < Duration::from_secs(20), "gave up late: {took:?}");
}

/// A `send_batch` dropped while its request is in flight (here: parked in the proxy) may still be
/// written when the request reaches the broker. The next batch of that partition must not reuse the
/// dropped batch's sequence: the broker would take it for that batch's duplicate, answer with its
/// offset and not write it (a dead letter "acknowledged" but lost; found by the chaos run).
#[tokio::test]
async fn a_dropped_send_never_lends_its_sequence_to_the_next_batch() {
    let broker = orderly_testkit::broker();
    let (conn, topic) = one_partition_topic(broker, "dropped-send").await;

    let proxy = KafkaProxy::start(broker.bootstrap()).await.unwrap();
    let pool = Arc::new(ConnectionPool::new(
        vec![proxy.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let producer = Arc::new(Producer::new(pool, ProducerConfig::default()));
    // One acknowledged batch first, so the producer id and the partition's sequence exist.
    assert_eq!(
        producer
            .send_batch(&topic, 0, &records("a", 1))
            .await
            .unwrap(),
        0
    );
    let first_id = producer.producer_id().await.unwrap();

    // The second batch's request is parked in the proxy; the caller gives up on it.
    proxy.hold(PRODUCE);
    let p = Arc::clone(&producer);
    let t = topic.clone();
    let task = tokio::spawn(async move { p.send_batch(&t, 0, &records("b", 1)).await });
    for _ in 0..2_000 {
        if proxy.held_now(PRODUCE) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(proxy.held_now(PRODUCE), 1, "the batch is in flight");
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    // Now the abandoned request reaches the broker and is written after all.
    proxy.release(PRODUCE);
    for _ in 0..2_000 {
        if end_offset(&conn, &topic).await == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        end_offset(&conn, &topic).await,
        2,
        "the abandoned batch was written"
    );

    // The next batch is written (at its own offset), under a new producer id.
    let third = producer
        .send_batch(&topic, 0, &records("c", 1))
        .await
        .unwrap();
    let end = end_offset(&conn, &topic).await;
    let got = values(&read_partition(&conn, &topic, end).await);
    assert_eq!(got, ["a-0", "b-0", "c-0"], "every batch written once");
    assert_eq!(third, 2, "acknowledged at the offset that holds it");
    assert_ne!(producer.producer_id().await.unwrap(), first_id);
}

/// A broker enforcing a produce quota answers with `throttle_time_ms` (KIP-219) and expects the
/// client to hold back: the producer sends its next Produce only after the throttle time. The proxy
/// sets 800 ms on every Produce answer and notes when each arrives; a request goes out after the
/// previous answer's throttle time and its answer can only come later, so consecutive answers are
/// at least that far apart. Every batch is still written once.
#[tokio::test]
async fn a_throttled_produce_waits_out_the_throttle_time() {
    use orderly_protocol::messages::produce::ProduceRequest;
    use orderly_protocol::test_util::rewrite_response;
    use std::sync::Mutex;

    let broker = orderly_testkit::broker();
    let (conn, topic) = one_partition_topic(broker, "throttled-produce").await;

    let proxy = KafkaProxy::start(broker.bootstrap()).await.unwrap();
    let answered: Arc<Mutex<Vec<std::time::Instant>>> = Arc::default();
    let log = Arc::clone(&answered);
    proxy.rewrite_responses(
        PRODUCE,
        Arc::new(move |version, frame| {
            rewrite_response::<ProduceRequest>(version, frame, |resp| {
                resp.throttle_time_ms = 800;
                log.lock().unwrap().push(std::time::Instant::now());
                true
            })
        }),
    );
    let pool = Arc::new(ConnectionPool::new(
        vec![proxy.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let producer = Producer::new(pool, ProducerConfig::default());
    for i in 0..4 {
        producer
            .send_batch(&topic, 0, &records(&format!("t{i}"), 1))
            .await
            .unwrap();
    }
    let answered = answered.lock().unwrap().clone();
    assert_eq!(answered.len(), 4, "one Produce per batch");
    for w in answered.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap >= Duration::from_millis(760),
            "a Produce went out {gap:?} after a throttled answer"
        );
    }
    let end = end_offset(&conn, &topic).await;
    let got = values(&read_partition(&conn, &topic, end).await);
    assert_eq!(got, ["t0-0", "t1-0", "t2-0", "t3-0"]);
}

/// The first attempt of a batch is written but its answer is lost, and then the broker cannot be
/// reached for a while (the proxy closes every new connection during set-up, as a proxy in front
/// of a restarting broker does; the pool gives up after its connect attempts). The producer keeps
/// retrying the batch with the same sequence until the broker answers, so it is acknowledged once
/// and written once. (Failing the call with the connect error would make the caller's retry, as
/// the engine makes for a dead letter, a new batch that writes the record a second time.)
#[tokio::test]
async fn an_unreachable_leader_after_a_lost_answer_is_retried_under_the_same_sequence() {
    let broker = orderly_testkit::broker();
    let (conn, topic) = one_partition_topic(broker, "unreachable").await;

    let proxy = KafkaProxy::start(broker.bootstrap()).await.unwrap();
    let pool = Arc::new(ConnectionPool::new(
        vec![proxy.bootstrap().to_string()],
        ConnectionConfig {
            connect_attempts: 2,
            backoff_initial: Duration::from_millis(20),
            backoff_max: Duration::from_millis(100),
            ..ConnectionConfig::default()
        },
    ));
    let producer = Producer::new(pool, ProducerConfig::default());
    assert_eq!(producer.partitions(&topic).await.unwrap(), 1);
    proxy.lose_responses(PRODUCE, 1);
    // Every new connection fails for a while: the pool gives up (2 attempts) several times over.
    proxy.close_new_connections(8);
    let offset = producer
        .send_batch(&topic, 0, &records("u", 1))
        .await
        .expect("retried until the broker answers");
    assert_eq!(proxy.lost(PRODUCE), 1, "the first answer was lost");
    assert_eq!(offset, 0, "acknowledged with the first attempt's offset");
    let end = end_offset(&conn, &topic).await;
    assert_eq!(
        values(&read_partition(&conn, &topic, end).await),
        ["u-0"],
        "written once"
    );
}

/// `send` looks the topic's partitions up first. A topic whose metadata is not there yet (created
/// a moment later, as a freshly created topic looks to a broker that has not caught up) is
/// asked for again until it appears, within the delivery timeout, instead of failing at once.
#[tokio::test]
async fn send_waits_for_a_topic_that_appears_within_the_delivery_timeout() {
    let broker = orderly_testkit::broker();
    let pool = Arc::new(ConnectionPool::new(
        vec![broker.bootstrap().to_string()],
        ConnectionConfig::default(),
    ));
    let producer = Producer::new(pool, ProducerConfig::default());
    let name = broker.unique_topic("appears-later");
    let creator = {
        let (bootstrap, name) = (broker.bootstrap().to_string(), name.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            orderly_testkit::create_topic(&bootstrap, &name, 1).await
        })
    };
    let sent = producer.send(&name, records("late", 1).remove(0)).await;
    creator.await.unwrap().unwrap();
    assert_eq!(sent.unwrap(), (0, 0));

    // A topic that never appears: DeliveryTimeout naming the last answer.
    let short = Producer::new(
        Arc::new(ConnectionPool::new(
            vec![broker.bootstrap().to_string()],
            ConnectionConfig::default(),
        )),
        ProducerConfig {
            delivery_timeout: Duration::from_secs(2),
            ..ProducerConfig::default()
        },
    );
    let err = short
        .send(&broker.unique_topic("never"), records("x", 1).remove(0))
        .await
        .unwrap_err();
    assert!(
        matches!(err, orderly_protocol::Error::DeliveryTimeout { .. }),
        "{err:?}"
    );
    assert_eq!(err.code(), Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION));
}
