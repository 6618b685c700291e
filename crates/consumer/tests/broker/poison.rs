//! Poison and malformed input against the real broker: binary keys and records without a key, a record larger than every budget, and (through a proxy that rewrites Fetch responses, a fake broker) a corrupt batch and an unknown codec.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{config, start, wait_until};
use orderly_consumer::Consumer;
use orderly_engine::{Attempt, Handler, HandlerError, Record};
use orderly_protocol::messages::fetch::FetchRequest;
use orderly_protocol::records::{Compression, ProduceRecord};
use orderly_protocol::test_util::rewrite_response;
use orderly_protocol::{BrokerConnection, ConnectionConfig, WireHeader};
use orderly_testkit::broker;
use orderly_testkit::proxy::KafkaProxy;

/// One handled record: key, `seq` header, value length.
type Handled = (Option<Vec<u8>>, u64, usize);

/// Every handled record, in the order the handler finished them.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Handled>>>);

impl Handler for Log {
    async fn handle(&self, record: &Record, _: Attempt) -> Result<(), HandlerError> {
        let seq = record
            .header("seq")
            .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
            .unwrap_or(0);
        self.0.lock().unwrap().push((
            record.key.as_deref().map(<[u8]>::to_vec),
            seq,
            record.value.as_ref().map_or(0, Bytes::len),
        ));
        Ok(())
    }
}

impl Log {
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// Produces `records` to partition 0 of `topic`, one batch per record (so a test can spoil one
/// batch and leave its neighbours alone).
async fn produce_one_by_one(topic: &str, records: Vec<ProduceRecord>) {
    let conn = BrokerConnection::connect(broker().bootstrap(), &ConnectionConfig::default())
        .await
        .unwrap();
    for r in records {
        conn.produce(
            topic,
            0,
            std::slice::from_ref(&r),
            Compression::None,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    }
}

fn rec(key: Option<&[u8]>, seq: u64, value_len: usize) -> ProduceRecord {
    ProduceRecord {
        key: key.map(Bytes::copy_from_slice),
        value: Some(Bytes::from(vec![b'v'; value_len])),
        headers: vec![WireHeader {
            key: "seq".into(),
            value: Some(Bytes::from(seq.to_string())),
        }],
        timestamp: None,
    }
}

/// Keys that are not UTF-8 are session ids like any other (bytes, compared as bytes), and records
/// without a key go to the unordered lane: each is handled once, none is skipped or dead-lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_keys_and_keyless_records_are_handled_in_order() {
    let b = broker();
    let topic = b.topic("poison-keys", 1).await.unwrap();
    let dlq = b.topic("poison-keys-dlq", 1).await.unwrap();
    let keys: [&[u8]; 3] = [&[0xff, 0xfe, 0x00], &[0xc3, 0x28], &[0x80]];
    let mut records = Vec::new();
    for seq in 1..=20u64 {
        for k in keys {
            records.push(rec(Some(k), seq, 10));
        }
        records.push(rec(None, seq, 10));
    }
    produce_one_by_one(&topic.name, records).await;

    let log = Log::default();
    let cfg = config(
        b.bootstrap(),
        &b.unique_topic("poison-keys-g"),
        &topic.name,
        &dlq.name,
    );
    let running = start(Consumer::new(cfg, log.clone()).unwrap());
    wait_until(Duration::from_secs(120), "80 records handled", || {
        log.len() >= 80
    })
    .await;
    let stats = running.stop().await;
    let seen = log.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 80, "each record once: {seen:?}");
    let mut per_key: HashMap<Option<Vec<u8>>, Vec<u64>> = HashMap::new();
    for (k, seq, _) in &seen {
        per_key.entry(k.clone()).or_default().push(*seq);
    }
    for k in keys {
        let seqs = &per_key[&Some(k.to_vec())];
        assert_eq!(
            *seqs,
            (1..=20).collect::<Vec<_>>(),
            "key {k:?} out of order"
        );
    }
    let mut keyless = per_key[&None].clone();
    keyless.sort_unstable();
    assert_eq!(keyless, (1..=20).collect::<Vec<_>>());
    assert_eq!(stats.dead_lettered(), 0);
}

/// A record larger than the partition's and the global byte budget is admitted alone (a budget
/// pauses fetching, it never refuses the record at the front), handled in its place, and the
/// partition moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_larger_than_every_budget_is_handled_in_its_place() {
    let b = broker();
    let topic = b.topic("poison-big", 1).await.unwrap();
    let dlq = b.topic("poison-big-dlq", 1).await.unwrap();
    let records = (1..=10u64)
        .map(|seq| rec(Some(b"big"), seq, if seq == 5 { 300 * 1024 } else { 10 }))
        .collect();
    produce_one_by_one(&topic.name, records).await;
    let log = Log::default();
    let mut cfg = config(
        b.bootstrap(),
        &b.unique_topic("poison-big-g"),
        &topic.name,
        &dlq.name,
    );
    cfg.engine.partition_budget_bytes = 1024;
    cfg.engine.global_budget_bytes = 2048;
    let running = start(Consumer::new(cfg, log.clone()).unwrap());
    wait_until(Duration::from_secs(120), "10 records handled", || {
        log.len() >= 10
    })
    .await;
    let stats = running.stop().await;
    let seen = log.0.lock().unwrap().clone();
    let seqs: Vec<u64> = seen.iter().map(|(_, s, _)| *s).collect();
    assert_eq!(seqs, (1..=10).collect::<Vec<_>>());
    assert_eq!(seen[4].2, 300 * 1024);
    assert_eq!(stats.dead_lettered(), 0);
}

#[derive(Clone, Copy)]
enum Spoil {
    /// One byte of the batch changed: its CRC-32C no longer matches.
    Crc,
    /// Compression codec 6 (Kafka defines 0-4), with a CRC that matches.
    Codec,
}

/// Makes the proxy spoil the batch at `offset` of partition 0 in the next `times` Fetch
/// responses that carry it. Returns how many spoilings are left.
fn spoil_fetches(proxy: &KafkaProxy, offset: i64, how: Spoil, times: usize) -> Arc<Mutex<usize>> {
    let left = Arc::new(Mutex::new(times));
    let counter = left.clone();
    proxy.rewrite_responses(
        1,
        Arc::new(move |version, frame| {
            rewrite_response::<FetchRequest>(version, frame, |resp| {
                let mut spoiled = false;
                for t in &mut resp.responses {
                    for p in t.partitions.iter_mut().filter(|p| p.partition_index == 0) {
                        let Some(data) = &p.records else { continue };
                        let mut data = data.to_vec();
                        let mut at = 0;
                        while at + 61 <= data.len() {
                            let base = i64::from_be_bytes(data[at..at + 8].try_into().unwrap());
                            let len = i32::from_be_bytes(data[at + 8..at + 12].try_into().unwrap());
                            let end = at + 12 + usize::try_from(len).unwrap();
                            if end > data.len() {
                                break;
                            }
                            if base == offset && *left.lock().unwrap() > 0 {
                                match how {
                                    Spoil::Crc => data[end - 1] ^= 0x55,
                                    Spoil::Codec => {
                                        data[at + 22] = (data[at + 22] & !0x07) | 6;
                                        let crc = crc32c(&data[at + 21..end]);
                                        data[at + 17..at + 21].copy_from_slice(&crc.to_be_bytes());
                                    }
                                }
                                spoiled = true;
                            }
                            at = end;
                        }
                        p.records = Some(Bytes::from(data));
                    }
                }
                if spoiled {
                    *left.lock().unwrap() -= 1;
                }
                spoiled
            })
        }),
    );
    counter
}

/// CRC-32C (Castagnoli), bitwise: the test's own, so it does not lean on the decoder's.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Runs a consumer through a proxy that spoils the batch at offset 5 of 10 single-record batches
/// `times` times; returns the topic, what was handled, how the run ended and how many spoilings
/// were left over.
async fn run_spoiled(
    how: Spoil,
    times: usize,
) -> (
    String,
    Vec<u64>,
    Result<orderly_engine::EngineStats, String>,
    usize,
) {
    let b = broker();
    let topic = b.topic("poison-batch", 1).await.unwrap();
    let dlq = b.topic("poison-batch-dlq", 1).await.unwrap();
    produce_one_by_one(
        &topic.name,
        (1..=10u64).map(|s| rec(Some(b"k"), s, 10)).collect(),
    )
    .await;
    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    let left = spoil_fetches(&proxy, 5, how, times);
    let log = Log::default();
    let cfg = config(
        proxy.bootstrap(),
        &b.unique_topic("poison-batch-g"),
        &topic.name,
        &dlq.name,
    );
    let running = start(Consumer::new(cfg, log.clone()).unwrap());
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if running.task.is_finished() || log.len() >= 10 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(ended.is_ok(), "neither finished nor failed in 60 s");
    let result = if running.task.is_finished() {
        running.task.await.unwrap().map_err(|e| e.to_string())
    } else {
        Ok(running.stop().await)
    };
    let seqs = log.0.lock().unwrap().iter().map(|(_, s, _)| *s).collect();
    let left = *left.lock().unwrap();
    (topic.name.clone(), seqs, result, left)
}

/// A batch whose CRC does not match, every time it is fetched: the records before it are
/// handled, then the consumer stops with one error naming the topic, partition and offset. It
/// never skips the batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_batch_stops_the_consumer_with_one_clear_error() {
    let (topic, seqs, result, _) = run_spoiled(Spoil::Crc, usize::MAX).await;
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    let e = result.expect_err("a corrupt batch must end the run");
    assert!(e.contains(&format!("{topic}-0 offset 5")), "{e}");
    assert!(e.contains("CRC mismatch"), "{e}");
}

/// The same batch corrupt only twice (a flaky network or broker): re-fetched, then every record
/// handled once and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_corrupt_twice_is_fetched_again_and_nothing_is_lost() {
    let (_, seqs, result, left) = run_spoiled(Spoil::Crc, 2).await;
    assert_eq!(left, 0, "the batch was served corrupt twice");
    assert_eq!(seqs, (1..=10).collect::<Vec<_>>());
    assert!(result.is_ok(), "{result:?}");
}

/// A batch with compression codec 6 (not a Kafka codec): one clear error, nothing skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_codec_stops_the_consumer_with_one_clear_error() {
    let (topic, seqs, result, _) = run_spoiled(Spoil::Codec, usize::MAX).await;
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    let e = result.expect_err("an undecodable batch must end the run");
    assert!(e.contains(&format!("{topic}-0 offset 5")), "{e}");
    assert!(e.contains("unknown compression codec 6"), "{e}");
}

/// A broker answering every Fetch with `throttle_time_ms` = 1000 (what a quota does, KIP-219):
/// the consumer sends its next Fetch only after the throttle time, and still handles everything.
/// Each response is one single-record batch (`partition_max_bytes` = 1), so the run needs many
/// fetches; the proxy notes when each Fetch request arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_fetch_waits_out_the_throttle_time() {
    let b = broker();
    let topic = b.topic("poison-throttle", 1).await.unwrap();
    let dlq = b.topic("poison-throttle-dlq", 1).await.unwrap();
    produce_one_by_one(
        &topic.name,
        (1..=6u64).map(|s| rec(Some(b"k"), s, 10)).collect(),
    )
    .await;
    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    let answered: Arc<Mutex<Vec<std::time::Instant>>> = Arc::default();
    let log_answers = answered.clone();
    proxy.rewrite_responses(
        1,
        Arc::new(move |version, frame| {
            rewrite_response::<FetchRequest>(version, frame, |resp| {
                resp.throttle_time_ms = 1000;
                log_answers.lock().unwrap().push(std::time::Instant::now());
                true
            })
        }),
    );
    let log = Log::default();
    let mut cfg = config(
        proxy.bootstrap(),
        &b.unique_topic("poison-throttle-g"),
        &topic.name,
        &dlq.name,
    );
    cfg.fetch.partition_max_bytes = 1;
    let running = start(Consumer::new(cfg, log.clone()).unwrap());
    wait_until(Duration::from_secs(120), "6 records handled", || {
        log.len() >= 6
    })
    .await;
    running.stop().await;
    let seqs: Vec<u64> = log.0.lock().unwrap().iter().map(|(_, s, _)| *s).collect();
    assert_eq!(seqs, (1..=6).collect::<Vec<_>>());
    let answered = answered.lock().unwrap().clone();
    assert!(answered.len() >= 6, "{} fetches", answered.len());
    // A Fetch goes out only after the previous answer's throttle time; a response can only come
    // later than its request, so consecutive answers are at least the throttle time apart.
    for w in answered.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            gap >= Duration::from_millis(950),
            "a Fetch went out {gap:?} after a throttled answer"
        );
    }
}

/// Fails records whose value starts with `perm` permanently (they go to the DLQ); logs the rest.
#[derive(Clone, Default)]
struct FailPerm(Log);

impl Handler for FailPerm {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        if record
            .value
            .as_deref()
            .is_some_and(|v| v.starts_with(b"perm"))
        {
            return Err(HandlerError::permanent("bad record"));
        }
        self.0.handle(record, attempt).await
    }
}

fn valued(key: &[u8], seq: u64, value: &str) -> ProduceRecord {
    ProduceRecord {
        value: Some(Bytes::copy_from_slice(value.as_bytes())),
        ..rec(Some(key), seq, 0)
    }
}

/// The DLQ topic deleted while the consumer runs: a permanent failure cannot be dead-lettered, so
/// its write is retried (a dead letter is never dropped) and its session waits behind it, while
/// other sessions keep flowing; once the topic exists again the dead letter lands and the
/// session goes on. Nothing is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_dlq_topic_holds_the_failed_session_until_it_exists_again() {
    let b = broker();
    let topic = b.topic("poison-dlqdel", 1).await.unwrap();
    let dlq = b.topic("poison-dlqdel-dlq", 1).await.unwrap();
    produce_one_by_one(
        &topic.name,
        vec![valued(b"a", 1, "ok"), valued(b"a", 2, "perm")],
    )
    .await;
    let handler = FailPerm::default();
    let log = handler.0.clone();
    let cfg = config(
        b.bootstrap(),
        &b.unique_topic("poison-dlqdel-g"),
        &topic.name,
        &dlq.name,
    );
    let running = start(Consumer::new(cfg, handler).unwrap());
    let stats = running.stats.clone();
    wait_until(Duration::from_secs(120), "the first dead letter", || {
        stats.dead_lettered() == 1
    })
    .await;

    let client = b.client().await.unwrap();
    client
        .controller_client()
        .unwrap()
        .delete_topic(dlq.name.clone(), 30_000)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    produce_one_by_one(
        &topic.name,
        vec![
            valued(b"b", 1, "perm"),
            valued(b"c", 1, "ok"),
            valued(b"b", 2, "ok"),
        ],
    )
    .await;
    let handled = |key: &[u8], seq: u64| {
        log.0
            .lock()
            .unwrap()
            .iter()
            .any(|(k, s, _)| k.as_deref() == Some(key) && *s == seq)
    };
    wait_until(Duration::from_secs(120), "session c flowing", || {
        handled(b"c", 1)
    })
    .await;
    // Session b waits behind its dead letter, which has nowhere to go.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!handled(b"b", 2), "b-2 ran before b-1 was dead-lettered");
    assert_eq!(stats.dead_lettered(), 1);

    b.create_topic(&dlq.name, 1).await.unwrap();
    wait_until(
        Duration::from_secs(180),
        "b-1 dead-lettered and b-2 handled",
        || stats.dead_lettered() == 2 && handled(b"b", 2),
    )
    .await;
    running.stop().await;
    let pc = client
        .partition_client(
            dlq.name.clone(),
            0,
            rskafka::client::partition::UnknownTopicHandling::Retry,
        )
        .await
        .unwrap();
    let (recs, _) = pc.fetch_records(0, 1..1_000_000, 1_000).await.unwrap();
    let keys: Vec<Option<Vec<u8>>> = recs.into_iter().map(|r| r.record.key).collect();
    assert_eq!(keys, [Some(b"b".to_vec())], "the re-created DLQ holds b-1");
}

/// Never answers records whose value is `hang`; logs the rest.
#[derive(Clone, Default)]
struct Hangs(Log);

impl Handler for Hangs {
    async fn handle(&self, record: &Record, attempt: Attempt) -> Result<(), HandlerError> {
        if record.value.as_deref() == Some(&b"hang"[..]) {
            std::future::pending::<()>().await;
        }
        self.0.handle(record, attempt).await
    }
}

/// A handler that hangs forever on one record (no attempt timeout): after the stuck timeout the
/// attempt is dropped and the record dead-lettered with reason `stuck`; its session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_hanging_forever_is_dead_lettered_as_stuck() {
    let b = broker();
    let topic = b.topic("poison-hang", 1).await.unwrap();
    let dlq = b.topic("poison-hang-dlq", 1).await.unwrap();
    produce_one_by_one(
        &topic.name,
        vec![
            valued(b"h", 1, "ok"),
            valued(b"h", 2, "hang"),
            valued(b"h", 3, "ok"),
        ],
    )
    .await;
    let handler = Hangs::default();
    let log = handler.0.clone();
    let mut cfg = config(
        b.bootstrap(),
        &b.unique_topic("poison-hang-g"),
        &topic.name,
        &dlq.name,
    );
    cfg.engine.attempt_timeout = None;
    cfg.engine.stuck_timeout = Some(Duration::from_secs(3));
    let running = start(Consumer::new(cfg, handler).unwrap());
    wait_until(Duration::from_secs(120), "h-3 handled", || log.len() >= 2).await;
    let stats = running.stop().await;
    let seqs: Vec<u64> = log.0.lock().unwrap().iter().map(|(_, s, _)| *s).collect();
    assert_eq!(seqs, [1, 3]);
    assert_eq!(stats.dead_lettered(), 1);
    let client = b.client().await.unwrap();
    let pc = client
        .partition_client(
            dlq.name.clone(),
            0,
            rskafka::client::partition::UnknownTopicHandling::Retry,
        )
        .await
        .unwrap();
    let (recs, _) = pc.fetch_records(0, 1..1_000_000, 1_000).await.unwrap();
    assert_eq!(recs.len(), 1);
    let reason = recs[0].record.headers.get("orderly-dlq-reason").cloned();
    assert_eq!(reason.as_deref(), Some(&b"stuck"[..]));
}
