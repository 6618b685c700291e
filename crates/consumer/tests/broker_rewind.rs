//! The exactly-once mode against the real broker: the replies of many sessions share produce
//! requests and go out while a handler blocks the consumer's runtime; and when a transaction aborts and the producer can go on, the consumer keeps running, rewinds the partitions whose output was in the aborted
//! transaction to their committed offsets and hands their records to the handler again, so
//! Apache Kafka's own consumer under `isolation.level=read_committed` reads every record's
//! reply exactly once, in session order. The faults are injected by a proxy: one Produce to the
//! reply topic answered with INVALID_RECORD (the broker wrote the batch; the transaction holding
//! it can only abort), or one TxnOffsetCommit answered with TRANSACTION_ABORTABLE (the commit
//! can only abort), or one answered with ILLEGAL_GENERATION (a rebalance replaced the
//! generation while the transaction was open), or every TxnOffsetCommit held past the operation
//! timeout, or a partition lost with a reply unacknowledged. A broker of its own with
//! `offset.metadata.max.bytes=64` refuses long commit metadata.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{config, start, wait_until};
use orderly_consumer::Consumer;
use orderly_engine::{Attempt, Handler, HandlerError, Record, Reply};
use orderly_protocol::ErrorCode;
use orderly_protocol::messages::heartbeat::HeartbeatRequest;
use orderly_protocol::messages::produce::ProduceRequest;
use orderly_protocol::messages::txn_offset_commit::TxnOffsetCommitRequest;
use orderly_protocol::test_util::{refuse_every_partition, rewrite_response};
use orderly_testkit::TestTopic;
use orderly_testkit::proxy::KafkaProxy;

const PRODUCE: i16 = 0;
const HEARTBEAT: i16 = 12;
const SYNC_GROUP: i16 = 14;
const INIT_PRODUCER_ID: i16 = 22;
const END_TXN: i16 = 26;
const TXN_OFFSET_COMMIT: i16 = 28;

/// Replies with the record's `seq` header; counts its calls per `(session, seq)`.
#[derive(Clone, Default)]
struct Echo {
    calls: Arc<Mutex<HashMap<(String, String), usize>>>,
}

impl Handler for Echo {
    async fn handle(&self, _record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn handle_replying(
        &self,
        record: &Record,
        _attempt: Attempt,
    ) -> Result<Vec<Reply>, HandlerError> {
        let session =
            String::from_utf8_lossy(record.key.as_deref().unwrap_or_default()).into_owned();
        let seq = seq_of(record);
        *self
            .calls
            .lock()
            .unwrap()
            .entry((session, seq.clone()))
            .or_default() += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
        Ok(vec![Reply::new(seq)])
    }
}

/// A consumer of `topic` in the exactly-once mode replying to `replies`, its group and
/// transactional id named after `name`.
fn txn_config(
    bootstrap: &str,
    name: &str,
    topic: &str,
    dlq: &str,
    replies: &str,
) -> orderly_consumer::ConsumerConfig {
    let b = orderly_testkit::broker();
    let mut cfg = config(bootstrap, &b.unique_topic(&format!("{name}-g")), topic, dlq);
    cfg.exactly_once = true;
    cfg.reply_topic = Some(replies.to_owned());
    cfg.transactional_id = Some(b.unique_topic(&format!("{name}-tid")));
    cfg
}

/// The record's `seq` header.
fn seq_of(record: &Record) -> String {
    String::from_utf8_lossy(record.header("seq").map_or(&b""[..], |b| b.as_ref())).into_owned()
}

/// The topics of one test, named after it: its input (`partitions`, holding `records` seed
/// records over `sessions` sessions), its reply topic and its dead-letter topic.
async fn topics(
    name: &str,
    partitions: i32,
    reply_partitions: i32,
    records: usize,
    sessions: usize,
) -> (TestTopic, TestTopic, TestTopic) {
    let b = orderly_testkit::broker();
    let topic = b.topic(&format!("{name}-in"), partitions).await.unwrap();
    let replies = b
        .topic(&format!("{name}-replies"), reply_partitions)
        .await
        .unwrap();
    let dlq = b.topic(&format!("{name}-dlq"), 1).await.unwrap();
    common::produce_seed(b.bootstrap(), &topic.name, partitions, records, sessions).await;
    (topic, replies, dlq)
}

/// `(key, value)` of every record of `topic` as Apache Kafka's own consumer reads it with
/// `isolation.level=read_committed`, up to the end offsets as of the read.
async fn read_committed(topic: &str) -> Vec<(String, String)> {
    orderly_testkit::broker()
        .read_committed(topic, orderly_testkit::ReadUntil::End)
        .await
        .unwrap()
}

/// Makes the proxy answer the `nth` Produce to `topic` (counting from 1) with INVALID_RECORD for
/// every partition in it. Returns the number of answers spoiled so far.
fn fail_nth_produce(proxy: &KafkaProxy, topic: String, nth: usize) -> Arc<AtomicUsize> {
    let seen = Arc::new(AtomicUsize::new(0));
    let spoiled = Arc::new(AtomicUsize::new(0));
    let done = spoiled.clone();
    proxy.rewrite_responses(
        PRODUCE,
        Arc::new(move |version, frame| {
            rewrite_response::<ProduceRequest>(version, frame, |resp| {
                if !resp.responses.iter().any(|t| t.name == topic)
                    || seen.fetch_add(1, Ordering::SeqCst) + 1 != nth
                {
                    return false;
                }
                refuse_every_partition(resp, ErrorCode::INVALID_RECORD);
                done.fetch_add(1, Ordering::SeqCst);
                true
            })
        }),
    );
    spoiled
}

/// Makes the proxy answer the first TxnOffsetCommit after a Produce to `replies` was answered
/// with `code` for every partition: the commit of that transaction, which holds that reply (the
/// commit waits for the writes in flight), can only abort.
fn fail_offsets_after_a_reply(
    proxy: &KafkaProxy,
    replies: &str,
    code: ErrorCode,
) -> Arc<AtomicUsize> {
    let replied = Arc::new(AtomicUsize::new(0));
    let counter = replied.clone();
    let topic = replies.to_owned();
    proxy.rewrite_responses(
        PRODUCE,
        Arc::new(move |version, frame| {
            // Only counted: the answer passes as it is.
            rewrite_response::<ProduceRequest>(version, frame, |resp| {
                if resp.responses.iter().any(|t| t.name == topic) {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                false
            })
        }),
    );
    let spoiled = Arc::new(AtomicUsize::new(0));
    let done = spoiled.clone();
    proxy.rewrite_responses(
        TXN_OFFSET_COMMIT,
        Arc::new(move |version, frame| {
            rewrite_response::<TxnOffsetCommitRequest>(version, frame, |resp| {
                if replied.load(Ordering::SeqCst) == 0 || done.load(Ordering::SeqCst) > 0 {
                    return false;
                }
                for t in &mut resp.topics {
                    for p in &mut t.partitions {
                        p.error_code = code;
                    }
                }
                done.fetch_add(1, Ordering::SeqCst);
                true
            })
        }),
    );
    spoiled
}

/// In the exactly-once mode a record counts as done once its reply is queued in the open
/// transaction (the commit waits for the queued replies, and a failed one aborts it), so a
/// session goes on while its reply is still on the way: with the first produce request of the
/// reply partition held at a proxy, every record of 200 sessions (two each) is handled. The
/// replies queued meanwhile go together in the next requests (far fewer requests than replies),
/// and the read_committed stream holds each reply once, in session order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_go_on_while_their_replies_queue_and_share_requests() {
    let b = orderly_testkit::broker();
    let (records, sessions) = (400, 200);
    let (topic, replies, dlq) = topics("txn-batch", 2, 1, records, sessions).await;

    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    proxy.hold(PRODUCE);
    let mut cfg = txn_config(
        proxy.bootstrap(),
        "txn-batch",
        &topic.name,
        &dlq.name,
        &replies.name,
    );
    // No commit while the request is held (a commit waits for the queued replies, and the
    // writes after it for the commit).
    cfg.engine.commit_interval = Duration::from_secs(20);
    let echo = Echo::default();
    let consumer = Consumer::new(cfg, echo.clone()).unwrap();
    let running = start(consumer);
    let calls = echo.calls.clone();
    wait_until(
        Duration::from_secs(120),
        "every record handled while the first reply request is held",
        || calls.lock().unwrap().len() >= records && proxy.held_now(PRODUCE) == 1,
    )
    .await;
    assert_eq!(proxy.seen(PRODUCE), 1, "one reply request went out");
    proxy.release(PRODUCE);
    // The shutdown commit waits for every queued reply and commits them with the offsets.
    running.stop().await;
    let requests = proxy.seen(PRODUCE);
    assert!(
        requests <= records / 4,
        "{requests} produce requests for {records} replies"
    );
    let got = read_committed(&replies.name).await;
    assert_each_reply_once_in_order(&got, records, sessions);
    assert!(
        echo.calls.lock().unwrap().values().all(|n| *n == 1),
        "no record was handled twice"
    );
}

/// A partition lost while the open transaction holds a reply of one of its records that the
/// broker has not acknowledged yet (its leader restarting, say) must not commit that reply: the
/// member rejoins and may get the partition back and handle its records again, and the
/// acknowledgement arriving after that would commit the first replies beside the second ones.
/// The consumer aborts the transaction once the write in flight ended, rewinds what it still
/// owns and goes on in the same process. The first reply request is held at a proxy while a
/// heartbeat is answered with UNKNOWN_MEMBER_ID (the member's partitions are lost and it
/// rejoins); then the request is let go, and the same consumer answers every record: the
/// read_committed stream holds each reply once, in session order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_lost_with_a_reply_unacknowledged_aborts_and_goes_on() {
    let b = orderly_testkit::broker();
    let (records, sessions) = (40, 4);
    let (topic, replies, dlq) = topics("txn-lost", 1, 1, records, sessions).await;

    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    proxy.hold(PRODUCE);
    let cfg = txn_config(
        proxy.bootstrap(),
        "txn-lost",
        &topic.name,
        &dlq.name,
        &replies.name,
    );
    let echo = Echo::default();
    let consumer = Consumer::new(cfg, echo.clone()).unwrap();
    let txn = consumer.transactions().unwrap().clone();
    let running = start(consumer);
    wait_until(Duration::from_secs(120), "a reply request held", || {
        proxy.held_now(PRODUCE) == 1
    })
    .await;
    let fenced = Arc::new(AtomicUsize::new(0));
    let once = fenced.clone();
    proxy.rewrite_responses(
        HEARTBEAT,
        Arc::new(move |version, frame| {
            rewrite_response::<HeartbeatRequest>(version, frame, |resp| {
                if once.fetch_add(1, Ordering::SeqCst) > 0 {
                    return false;
                }
                resp.error_code = ErrorCode::UNKNOWN_MEMBER_ID;
                true
            })
        }),
    );
    wait_until(
        Duration::from_secs(60),
        "the heartbeat answered UNKNOWN_MEMBER_ID",
        || fenced.load(Ordering::SeqCst) > 0,
    )
    .await;
    // The abort waits for the held request's answer.
    proxy.release(PRODUCE);
    wait_until(
        Duration::from_secs(120),
        "the transaction aborted and rewound",
        || txn.rewinds() >= 1 || running.task.is_finished(),
    )
    .await;
    let got = read_all_replies(&running, &txn, &replies.name, records).await;
    running.stop().await;
    assert_each_reply_once_in_order(&got, records, sessions);
}

/// A group coordinator that does not answer TxnOffsetCommit within the operation timeout (here
/// the transaction timeout, 10 s) leaves the offsets' fate unknown: the consumer aborts the
/// transaction with a new epoch (so the held request, should it arrive, is refused), rewinds the
/// partitions with output in it and goes on in the same process. Every TxnOffsetCommit is held
/// at the proxy until the rewind; then they pass, and the read_committed stream holds each reply
/// once, in session order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_offset_commit_aborts_rewinds_and_goes_on() {
    unanswered_run("txn-unanswered", &[TXN_OFFSET_COMMIT]).await;
}

/// The rewind's abort is not answered either: its EndTxn stays held at the proxy past the
/// transaction timeout (the coordinator unreachable, or still loading after a failover). By then
/// the coordinator has aborted the transaction itself; the consumer takes a new epoch
/// (InitProducerId with its id and epoch, which ends the transaction for certain and fences the
/// held EndTxn), rewinds and goes on in the same process: every reply once, in session order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_unanswered_past_the_transaction_timeout_takes_a_new_epoch_and_goes_on() {
    unanswered_run("txn-abort-unanswered", &[TXN_OFFSET_COMMIT, END_TXN]).await;
}

/// The transaction coordinator's answers to InitProducerId do not reach the consumer when it
/// starts (a broken path, or a coordinator loading after a failover): the consumer asks again
/// until an answer arrives, then works, rather than exiting. Every reply once, in session order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_coordinator_silent_at_start_is_waited_for() {
    let b = orderly_testkit::broker();
    let (records, sessions) = (100, 5);
    let name = "txn-silent-start";
    let (topic, replies, dlq) = topics(name, 1, 1, records, sessions).await;
    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    proxy.lose_responses(INIT_PRODUCER_ID, 1_000_000);
    let mut cfg = txn_config(
        proxy.bootstrap(),
        name,
        &topic.name,
        &dlq.name,
        &replies.name,
    );
    cfg.transaction_timeout = Duration::from_secs(5);
    let consumer = Consumer::new(cfg, Echo::default()).unwrap();
    let txn = consumer.transactions().unwrap().clone();
    let running = start(consumer);
    // Unanswered for three operation timeouts (the transaction timeout, 5 s): every try so far
    // ran out without an answer.
    wait_until(
        Duration::from_secs(120),
        "an InitProducerId answer lost",
        || proxy.lost(INIT_PRODUCER_ID) >= 1 || running.task.is_finished(),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(
        !running.task.is_finished(),
        "the consumer stopped instead of waiting for the coordinator"
    );
    assert!(proxy.seen(INIT_PRODUCER_ID) >= 2, "it asked again");
    proxy.stop_losing(INIT_PRODUCER_ID);
    let got = read_all_replies(&running, &txn, &replies.name, records).await;
    running.stop().await;
    assert_each_reply_once_in_order(&got, records, sessions);
}

/// A commit whose EndTxn reaches the coordinator but whose every answer is lost for longer than
/// the transaction timeout: the transaction committed, and the consumer cannot know it from the
/// answer. It takes a new epoch, reads the group's committed offsets back and goes on from them:
/// the replies of the committed transaction are not produced again (every reply once, in
/// session order), and the consumer does not stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answers_are_lost_past_the_timeout_goes_on_from_what_committed() {
    let b = orderly_testkit::broker();
    let (records, sessions) = (100, 5);
    let name = "txn-commit-unknown";
    let (topic, replies, dlq) = topics(name, 1, 1, records, sessions).await;
    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    proxy.lose_responses(END_TXN, 1_000_000);
    let mut cfg = txn_config(
        proxy.bootstrap(),
        name,
        &topic.name,
        &dlq.name,
        &replies.name,
    );
    cfg.transaction_timeout = Duration::from_secs(10);
    cfg.engine.commit_interval = Duration::from_millis(300);
    let consumer = Consumer::new(cfg, Echo::default()).unwrap();
    let txn = consumer.transactions().unwrap().clone();
    let running = start(consumer);
    wait_until(
        Duration::from_secs(240),
        "the commit's outcome settled by a new epoch",
        || txn.rewinds() >= 1 || running.task.is_finished(),
    )
    .await;
    assert_eq!(txn.failure(), None, "the consumer goes on");
    assert!(proxy.lost(END_TXN) >= 1, "EndTxn answers were lost");
    // Answers pass again.
    proxy.stop_losing(END_TXN);
    let got = read_all_replies(&running, &txn, &replies.name, records).await;
    running.stop().await;
    assert_each_reply_once_in_order(&got, records, sessions);
}

/// Runs 100 records of 5 sessions in the exactly-once mode (transaction timeout 10 s) while the
/// proxy holds every request of the APIs `held` (TxnOffsetCommit first): waits for the last of
/// them to be held and for the rewind, releases them, and checks that the consumer went on and
/// committed each reply once, in session order.
async fn unanswered_run(name: &str, held: &[i16]) {
    let b = orderly_testkit::broker();
    let (records, sessions) = (100, 5);
    let (topic, replies, dlq) = topics(name, 1, 1, records, sessions).await;

    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    for &api in held {
        proxy.hold(api);
    }
    let mut cfg = txn_config(
        proxy.bootstrap(),
        name,
        &topic.name,
        &dlq.name,
        &replies.name,
    );
    cfg.transaction_timeout = Duration::from_secs(10);
    cfg.engine.commit_interval = Duration::from_millis(300);
    let echo = Echo::default();
    let consumer = Consumer::new(cfg, echo.clone()).unwrap();
    let txn = consumer.transactions().unwrap().clone();
    let running = start(consumer);
    let last = *held.last().unwrap();
    wait_until(Duration::from_secs(120), "a request held", || {
        proxy.held_now(last) >= 1 || running.task.is_finished()
    })
    .await;
    wait_until(
        Duration::from_secs(240),
        "the transaction aborted and rewound",
        || txn.rewinds() >= 1 || running.task.is_finished(),
    )
    .await;
    assert_eq!(txn.failure(), None, "the consumer goes on");
    for &api in held {
        proxy.release(api);
    }
    let got = read_all_replies(&running, &txn, &replies.name, records).await;
    running.stop().await;
    assert_each_reply_once_in_order(&got, records, sessions);
}

/// Reads the reply topic with read_committed until it holds `records` replies (at most 180 s),
/// failing at once if the consumer stopped meanwhile.
async fn read_all_replies(
    running: &common::Running,
    txn: &orderly_consumer::exactly_once::Transactions,
    replies: &str,
    records: usize,
) -> Vec<(String, String)> {
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        assert!(
            !running.task.is_finished(),
            "the consumer stopped instead of going on: {:?}",
            txn.failure()
        );
        let got = read_committed(replies).await;
        if got.len() >= records || std::time::Instant::now() > deadline {
            assert_eq!(txn.failure(), None);
            return got;
        }
    }
}

/// Blocks the consumer's runtime in the handler of the record with `seq` `last`. The record
/// before it returns only once the first reply request is held at the proxy, so its reply queues
/// behind that request; the last one releases the request and holds the runtime's only thread
/// until the next reply request reached the proxy (or 3 s passed, well within the group's
/// session timeout), noting how many it saw.
struct BlockLast {
    proxy: Arc<KafkaProxy>,
    last: u64,
    seen_while_blocked: Arc<Mutex<Option<usize>>>,
}

impl Handler for BlockLast {
    async fn handle(&self, _record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn handle_replying(
        &self,
        record: &Record,
        _attempt: Attempt,
    ) -> Result<Vec<Reply>, HandlerError> {
        let seq = seq_of(record);
        let n: u64 = seq.parse().unwrap();
        if n == self.last - 1 {
            let t0 = std::time::Instant::now();
            while self.proxy.held_now(PRODUCE) == 0 && t0.elapsed() < Duration::from_secs(30) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        if n == self.last && self.seen_while_blocked.lock().unwrap().is_none() {
            self.proxy.release(PRODUCE);
            let t0 = std::time::Instant::now();
            // Blocking on purpose: this handler holds its runtime's only thread.
            while self.proxy.seen(PRODUCE) < 2 && t0.elapsed() < Duration::from_secs(3) {
                std::thread::sleep(Duration::from_millis(5));
            }
            *self.seen_while_blocked.lock().unwrap() = Some(self.proxy.seen(PRODUCE));
        }
        Ok(vec![Reply::new(seq)])
    }
}

/// The exactly-once mode's produce rounds do not wait for the handlers' runtime: on a
/// current-thread runtime whose only thread the last record's handler blocks, the answer to the
/// first reply request is read and the next request, carrying the replies queued meanwhile, goes
/// out (the rounds and their connections run on the consumer's output thread). Then every reply
/// commits once, in order.
#[test]
fn replies_go_out_while_a_handler_blocks_the_runtime_thread() {
    let records = 20;
    // The broker's tools and the proxy run on a runtime of their own, which the handler does
    // not block.
    let aux = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (proxy, cfg, replies) = aux.block_on(async {
        let b = orderly_testkit::broker();
        let (topic, replies, dlq) = topics("txn-block", 1, 1, records, 1).await;
        let proxy = Arc::new(KafkaProxy::start(b.bootstrap()).await.unwrap());
        proxy.hold(PRODUCE);
        let mut cfg = txn_config(
            proxy.bootstrap(),
            "txn-block",
            &topic.name,
            &dlq.name,
            &replies.name,
        );
        cfg.engine.commit_interval = Duration::from_secs(20);
        (proxy, cfg, replies.name.clone())
    });
    let seen = Arc::new(Mutex::new(None));
    let handler = BlockLast {
        proxy: proxy.clone(),
        last: records as u64,
        seen_while_blocked: seen.clone(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let consumer = Consumer::new(cfg, handler).unwrap();
        let running = start(consumer);
        let stats = running.stats.clone();
        wait_until(Duration::from_secs(120), "every record handled", || {
            stats.handled() >= records as u64
        })
        .await;
        running.stop().await;
    });
    let seen = seen.lock().unwrap().expect("the last record's handler ran");
    assert!(
        seen >= 2,
        "reply requests seen while the handler blocked the runtime's thread: {seen}"
    );
    let got = aux.block_on(read_committed(&replies));
    assert_each_reply_once_in_order(&got, records, 1);
}

/// Replies with the record's `seq`, but 2 MiB of it for `seq` `big`; counts its calls per `seq`.
#[derive(Clone)]
struct OneTooLarge {
    big: String,
    calls: Arc<Mutex<HashMap<String, usize>>>,
}

impl Handler for OneTooLarge {
    async fn handle(&self, _record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn handle_replying(
        &self,
        record: &Record,
        _attempt: Attempt,
    ) -> Result<Vec<Reply>, HandlerError> {
        let seq = seq_of(record);
        *self.calls.lock().unwrap().entry(seq.clone()).or_default() += 1;
        if seq == self.big {
            return Ok(vec![Reply::new(vec![b'x'; 2 << 20])]);
        }
        Ok(vec![Reply::new(seq)])
    }
}

/// A reply larger than any produce request may carry is refused before it joins the transaction:
/// its record is dead-lettered (in the transaction), the others' replies commit once each, in
/// order, and nothing is rewound. (Sent, the broker refused it, the transaction aborted, and the
/// record came back with the same reply, for ever.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_too_large_dead_letters_its_record_without_a_rewind() {
    let b = orderly_testkit::broker();
    let records = 10;
    let (topic, replies, dlq) = topics("txn-large", 1, 1, records, 1).await;
    let cfg = txn_config(
        b.bootstrap(),
        "txn-large",
        &topic.name,
        &dlq.name,
        &replies.name,
    );
    let handler = OneTooLarge {
        big: "4".into(),
        calls: Arc::default(),
    };
    let consumer = Consumer::new(cfg, handler.clone()).unwrap();
    let rewinds = consumer.transactions().unwrap().clone();
    let running = start(consumer);
    let stats = running.stats.clone();
    wait_until(
        Duration::from_secs(60),
        "the large reply's record dead-lettered and the others handled",
        || stats.dead_lettered() >= 1 && stats.handled() >= records as u64 - 1,
    )
    .await;
    running.stop().await;
    assert_eq!(stats.dead_lettered(), 1);
    assert_eq!(rewinds.rewinds(), 0, "no transaction was rewound");
    assert!(
        handler.calls.lock().unwrap().values().all(|n| *n == 1),
        "no record was handled twice: {:?}",
        handler.calls.lock().unwrap()
    );
    let got = read_committed(&replies.name).await;
    let values: Vec<&str> = got.iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(values, ["1", "2", "3", "5", "6", "7", "8", "9", "10"]);
}

/// A failed reply write (the second produce request of the reply topic refused; the transaction
/// can only abort): rewound in process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_reply_write_rewinds_and_replies_exactly_once() {
    rewinds_after("rewind-write", |proxy, replies| {
        fail_nth_produce(proxy, replies.to_owned(), 2)
    })
    .await;
}

/// The transaction's offsets refused as abortable at the commit: rewound in process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abortable_commit_rewinds_and_replies_exactly_once() {
    rewinds_after("rewind-commit", |proxy, replies| {
        fail_offsets_after_a_reply(proxy, replies, ErrorCode::TRANSACTION_ABORTABLE)
    })
    .await;
}

/// The offsets refused under a generation a rebalance has just replaced (the member is still in
/// the group, its partitions not yet given to anyone): rewound in process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_refused_for_a_replaced_generation_rewind_and_reply_exactly_once() {
    rewinds_after("rewind-generation", |proxy, replies| {
        fail_offsets_after_a_reply(proxy, replies, ErrorCode::ILLEGAL_GENERATION)
    })
    .await;
}

/// Runs an exactly-once consumer of 300 records over 10 sessions through a proxy that `inject`
/// arms with one fault (it returns how many times the fault struck), and checks that the
/// consumer rewound instead of stopping and that the read_committed reply stream holds each
/// record's reply once, in session order.
async fn rewinds_after(name: &str, inject: impl FnOnce(&KafkaProxy, &str) -> Arc<AtomicUsize>) {
    let _ = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_test_writer()
        .try_init();
    let b = orderly_testkit::broker();
    let records = 300;
    let sessions = 10;
    let (topic, replies, dlq) = topics(name, 2, 2, records, sessions).await;

    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    let spoiled = inject(&proxy, &replies.name);
    let mut cfg = txn_config(
        proxy.bootstrap(),
        name,
        &topic.name,
        &dlq.name,
        &replies.name,
    );
    cfg.engine.commit_interval = Duration::from_millis(300);
    let echo = Echo::default();
    let consumer = Consumer::new(cfg, echo.clone()).unwrap();
    let txn = consumer.transactions().unwrap().clone();
    let running = start(consumer);

    wait_until(Duration::from_secs(120), "the injected failure", || {
        spoiled.load(Ordering::SeqCst) == 1
    })
    .await;
    let calls = echo.calls.clone();
    wait_until(Duration::from_secs(180), "every record handled", || {
        calls.lock().unwrap().len() == records || running.task.is_finished()
    })
    .await;
    // Everything handled and committed: the read_committed stream holds every reply.
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let got = loop {
        assert!(
            !running.task.is_finished(),
            "the consumer stopped instead of rewinding: {:?}",
            txn.failure()
        );
        let got = read_committed(&replies.name).await;
        if got.len() >= records || std::time::Instant::now() > deadline {
            break got;
        }
    };
    assert!(txn.rewinds() >= 1, "the aborted transaction was rewound");
    assert_eq!(txn.failure(), None);
    running.stop().await;

    let handled_again = echo
        .calls
        .lock()
        .unwrap()
        .values()
        .filter(|n| **n > 1)
        .count();
    assert!(
        handled_again > 0,
        "the records whose replies were aborted were handled again"
    );
    assert_each_reply_once_in_order(&got, records, sessions);
}

/// `got` (key = session, value = the record's `seq`) holds one reply per record, `records` of
/// them over `sessions` sessions, each session's in its order 1, 2, 3, ...
fn assert_each_reply_once_in_order(got: &[(String, String)], records: usize, sessions: usize) {
    let mut by_session: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (k, v) in got {
        by_session.entry(k).or_default().push(v.parse().unwrap());
    }
    assert_eq!(got.len(), records, "one reply per record: {by_session:?}");
    assert_eq!(by_session.len(), sessions);
    for (s, seqs) in &by_session {
        let want: Vec<u64> = (1..=seqs.len() as u64).collect();
        assert_eq!(seqs, &want, "{s}: each reply once, in session order");
    }
}

/// Replies with the record's `seq`; the records named in `blocked` (by event id) wait until
/// `open` is set, so their sessions stand still behind them while the others go on.
#[derive(Clone)]
struct Blocking {
    blocked: Arc<Vec<String>>,
    open: Arc<std::sync::atomic::AtomicBool>,
    calls: Arc<Mutex<HashMap<(String, String), usize>>>,
}

impl Handler for Blocking {
    async fn handle(&self, _record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn handle_replying(
        &self,
        record: &Record,
        _attempt: Attempt,
    ) -> Result<Vec<Reply>, HandlerError> {
        let session =
            String::from_utf8_lossy(record.key.as_deref().unwrap_or_default()).into_owned();
        let seq = seq_of(record);
        *self
            .calls
            .lock()
            .unwrap()
            .entry((session, seq.clone()))
            .or_default() += 1;
        let id =
            String::from_utf8_lossy(record.header("event-id").map_or(&b""[..], |b| b.as_ref()))
                .into_owned();
        if self.blocked.contains(&id) {
            while !self.open.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(vec![Reply::new(seq)])
    }
}

/// The group's committed offset of `topic`-0, if any.
async fn committed_offset(bootstrap: &str, group: &str, topic: &str) -> Option<i64> {
    use orderly_protocol::messages::offset_fetch::{OffsetFetchGroup, OffsetFetchRequest};
    let pool = orderly_protocol::ConnectionPool::new(
        vec![bootstrap.to_owned()],
        orderly_protocol::ConnectionConfig::default(),
    );
    let conn = pool.any().await.ok()?;
    let resp = conn
        .offset_fetch(&OffsetFetchRequest {
            groups: vec![OffsetFetchGroup {
                group_id: group.to_owned(),
                member_id: None,
                member_epoch: -1,
                topics: None,
            }],
            require_stable: false,
        })
        .await
        .ok()?;
    resp.groups
        .iter()
        .flat_map(|g| &g.topics)
        .filter(|t| t.name == topic)
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == 0 && p.committed_offset >= 0)
        .map(|p| p.committed_offset)
}

/// A broker whose `offset.metadata.max.bytes` is 64 refuses the transaction's offsets while the
/// completed offsets above the watermark do not fit: the consumer shortens the metadata (halving
/// it as the at-least-once commit does) and sends the offsets again in the same transaction,
/// instead of aborting and rewinding every commit for ever. One partition, ten sessions; the
/// fourth record of five sessions waits, so the others' records above it are many runs. The
/// reply requests are held at a proxy until every other record was handled: a commit waits for
/// the replies queued, and counts every record whose reply was acknowledged, so the first commit
/// with any record done carries all those runs. The committed offset reaches the waiting records
/// without a rewind; then they go on, and every reply commits once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_over_the_brokers_metadata_limit_commit_with_shorter_metadata() {
    let opts = orderly_testkit::BrokerOptions {
        heap: "512m".into(),
        extra_properties: vec!["offset.metadata.max.bytes=64".into()],
        ..orderly_testkit::BrokerOptions::default()
    };
    let broker =
        tokio::task::spawn_blocking(move || orderly_testkit::DedicatedBroker::start_with(opts))
            .await
            .unwrap()
            .unwrap();
    let bootstrap = broker.bootstrap().to_owned();
    let (records, sessions) = (200, 10);
    let name = |s: &str| format!("meta64-{s}-{}", std::process::id());
    let (topic, replies, dlq, group) = (name("in"), name("replies"), name("dlq"), name("g"));
    for t in [&topic, &replies, &dlq] {
        orderly_testkit::create_topic(&bootstrap, t, 1)
            .await
            .unwrap();
    }
    common::produce_seed(&bootstrap, &topic, 1, records, sessions).await;

    let proxy = KafkaProxy::start(&bootstrap).await.unwrap();
    proxy.hold(PRODUCE);
    let mut cfg = config(proxy.bootstrap(), &group, &topic, &dlq);
    cfg.exactly_once = true;
    cfg.reply_topic = Some(replies.clone());
    cfg.transactional_id = Some(name("tid"));
    cfg.engine.commit_interval = Duration::from_millis(300);
    cfg.engine.attempt_timeout = None;
    // Records 30, 32, ..., 38: the fourth of sessions 0, 2, 4, 6 and 8.
    let blocked: Vec<String> = (30..40).step_by(2).map(|i| format!("e-{i}")).collect();
    let waiting = blocked.len() * (records / sessions - 3);
    let handler = Blocking {
        blocked: Arc::new(blocked),
        open: Arc::default(),
        calls: Arc::default(),
    };
    let consumer = Consumer::new(cfg, handler.clone()).unwrap();
    let txn = consumer.transactions().unwrap().clone();
    let running = start(consumer);
    let calls = handler.calls.clone();
    wait_until(
        Duration::from_secs(120),
        "every record but the waiting sessions' handled",
        || calls.lock().unwrap().len() >= records - waiting + 5,
    )
    .await;
    proxy.release(PRODUCE);
    let stats = running.stats.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        assert!(
            !running.task.is_finished(),
            "the consumer stopped: {:?}",
            txn.failure()
        );
        assert_eq!(txn.rewinds(), 0, "a commit was aborted and rewound");
        let committed = committed_offset(&bootstrap, &group, &topic).await;
        if committed == Some(30) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the committed offset did not reach 30 in 120 s: {committed:?}, {} commits, {} failed",
            stats.commits(),
            stats.commit_failures()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    handler.open.store(true, Ordering::SeqCst);
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while committed_offset(&bootstrap, &group, &topic).await != Some(records as i64) {
        assert!(
            std::time::Instant::now() < deadline,
            "the committed offset did not reach the end"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    running.stop().await;
    assert_eq!(txn.rewinds(), 0);
    let got = orderly_testkit::read_committed_to_end(&bootstrap, &replies)
        .await
        .unwrap();
    assert_each_reply_once_in_order(&got, records, sessions);
}

/// Makes the proxy answer the next heartbeat with REBALANCE_IN_PROGRESS: the member (eager, the
/// only one of its group) revokes its partitions, joins again and gets them back.
fn rebalance_once(proxy: &KafkaProxy) -> Arc<AtomicUsize> {
    let rewritten = Arc::new(AtomicUsize::new(0));
    let once = rewritten.clone();
    proxy.rewrite_responses(
        HEARTBEAT,
        Arc::new(move |version, frame| {
            rewrite_response::<HeartbeatRequest>(version, frame, |resp| {
                if once.fetch_add(1, Ordering::SeqCst) > 0 {
                    return false;
                }
                resp.error_code = ErrorCode::REBALANCE_IN_PROGRESS;
                true
            })
        }),
    );
    rewritten
}

/// Replies with the record's `seq`, counting calls per `(session, seq)`; the first call for
/// `held` waits (without blocking its thread) until `go` is set.
#[derive(Clone, Default)]
struct HoldOne {
    calls: Arc<Mutex<HashMap<(String, String), usize>>>,
    held: (String, String),
    holding: Arc<AtomicBool>,
    go: Arc<AtomicBool>,
}

impl Handler for HoldOne {
    async fn handle(&self, _record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn handle_replying(
        &self,
        record: &Record,
        _attempt: Attempt,
    ) -> Result<Vec<Reply>, HandlerError> {
        let session =
            String::from_utf8_lossy(record.key.as_deref().unwrap_or_default()).into_owned();
        let seq = seq_of(record);
        let key = (session, seq.clone());
        let first = {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.entry(key.clone()).or_default();
            *n += 1;
            *n == 1
        };
        if first && key == self.held {
            self.holding.store(true, Ordering::SeqCst);
            let t0 = std::time::Instant::now();
            while !self.go.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(120) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        Ok(vec![Reply::new(seq)])
    }
}

/// A revoke whose transaction aborts (the answer to the reply write of the record the revoke
/// waits for is lost: the proxy turns it into INVALID_RECORD, so the write's outcome is unknown
/// and the transaction can only abort) and whose partition comes back to the same member: the
/// records handled before the revoke are handled again, not skipped as duplicates of event ids
/// their sessions remembered, so the read_committed stream holds every record's reply once, in
/// session order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_whose_transaction_aborts_handles_its_records_again_on_return() {
    let b = orderly_testkit::broker();
    let (records, sessions) = (30, 3);
    let (topic, replies, dlq) = topics("txn-revoke-abort", 1, 1, records, sessions).await;
    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    let mut cfg = txn_config(
        proxy.bootstrap(),
        "txn-revoke-abort",
        &topic.name,
        &dlq.name,
        &replies.name,
    );
    // Eager: the rebalance revokes the partition and assigns it again.
    cfg.group.assignors = vec![Arc::new(orderly_group::RangeAssignor)];
    // Nothing commits before the shutdown but the revoke's commit.
    cfg.engine.commit_interval = Duration::from_secs(20);
    cfg.engine.session_idle_timeout = Duration::from_secs(600);
    let handler = HoldOne {
        held: ("s-000001".into(), "5".into()),
        ..HoldOne::default()
    };
    let consumer = Consumer::new(cfg, handler.clone()).unwrap();
    let txn = consumer.transactions().unwrap().clone();
    let running = start(consumer);
    let stats = running.stats.clone();
    let calls = handler.calls.clone();
    wait_until(
        Duration::from_secs(120),
        "every record handled but s-000001's from its 5th on",
        || handler.holding.load(Ordering::SeqCst) && calls.lock().unwrap().len() == records - 5,
    )
    .await;
    let rebalanced = rebalance_once(&proxy);
    // The revoke reached the engine once s-000001's queued records (6 on) were skipped.
    wait_until(Duration::from_secs(60), "the revoke under way", || {
        stats.abandoned() >= 1
    })
    .await;
    assert!(rebalanced.load(Ordering::SeqCst) >= 1);
    let spoiled = fail_nth_produce(&proxy, replies.name.clone(), 1);
    handler.go.store(true, Ordering::SeqCst);
    wait_until(Duration::from_secs(60), "the reply write failed", || {
        spoiled.load(Ordering::SeqCst) == 1
    })
    .await;
    // First pass: 25 handled (s-000001 from 6 on skipped by the revoke); then every record
    // once more, handled or (wrongly) skipped as seen.
    wait_until(
        Duration::from_secs(180),
        "every record of the partition's return",
        || stats.handled() + stats.deduplicated() >= (records - 5 + records) as u64,
    )
    .await;
    assert!(txn.rewinds() >= 1, "the revoke's transaction was aborted");
    running.stop().await;
    let got = read_committed(&replies.name).await;
    assert_eq!(stats.deduplicated(), 0, "no record skipped as seen");
    assert_each_reply_once_in_order(&got, records, sessions);
}

/// Replies with the record's `seq`, counting calls per `(session, seq)`. On their first calls:
/// `s-000000`'s record waits until the proxy holds an EndTxn (a commit holds the transaction's
/// gate), then returns, so its reply's write waits at the gate; `s-000001`'s then blocks the
/// engine's worker (one for the test) until `unblock` is set, so the write is not polled
/// meanwhile.
#[derive(Clone)]
struct GateAndBlock {
    proxy: Arc<KafkaProxy>,
    calls: Arc<Mutex<HashMap<(String, String), usize>>>,
    written: Arc<AtomicBool>,
    blocking: Arc<AtomicBool>,
    unblock: Arc<AtomicBool>,
}

impl Handler for GateAndBlock {
    async fn handle(&self, _record: &Record, _attempt: Attempt) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn handle_replying(
        &self,
        record: &Record,
        _attempt: Attempt,
    ) -> Result<Vec<Reply>, HandlerError> {
        let session =
            String::from_utf8_lossy(record.key.as_deref().unwrap_or_default()).into_owned();
        let seq = seq_of(record);
        let first = {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.entry((session.clone(), seq.clone())).or_default();
            *n += 1;
            *n == 1
        };
        let limit = Duration::from_secs(120);
        if first && session == "s-000000" {
            let t0 = std::time::Instant::now();
            while self.proxy.held_now(END_TXN) == 0 && t0.elapsed() < limit {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // Its reply's write goes on in this same poll, up to the gate.
            self.written.store(true, Ordering::SeqCst);
        }
        if first && session == "s-000001" {
            let t0 = std::time::Instant::now();
            while !self.written.load(Ordering::SeqCst) && t0.elapsed() < limit {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            self.blocking.store(true, Ordering::SeqCst);
            // Blocking on purpose: the worker polls nothing else meanwhile. In place, so the
            // runtime's other tasks (the dispatch loop, the group member) move to another
            // thread and go on.
            tokio::task::block_in_place(|| {
                while !self.unblock.load(Ordering::SeqCst) && t0.elapsed() < limit {
                    std::thread::sleep(Duration::from_millis(5));
                }
            });
        }
        Ok(vec![Reply::new(seq)])
    }
}

/// A revoke fences the writes of its partition's records: a reply write waiting at the gate
/// (behind a commit held at the proxy) while another handler blocks the worker's thread past the
/// 1 s revoke timeout does not go on once the revoke cancelled its record, so it cannot commit
/// after the revoke's commit. The partition comes back to the same member, which handles the
/// cancelled records again: every reply once in the read_committed stream, in session order,
/// and the group's offset at the end of the partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waiting_at_the_gate_does_not_commit_after_the_revoke() {
    let b = orderly_testkit::broker();
    let (records, sessions) = (2, 2);
    let (topic, replies, dlq) = topics("txn-revoke-gate", 1, 1, records, sessions).await;
    let proxy = Arc::new(KafkaProxy::start(b.bootstrap()).await.unwrap());
    proxy.hold(END_TXN);
    let mut cfg = txn_config(
        proxy.bootstrap(),
        "txn-revoke-gate",
        &topic.name,
        &dlq.name,
        &replies.name,
    );
    let group = cfg.group.group_id.clone();
    cfg.group.assignors = vec![Arc::new(orderly_group::RangeAssignor)];
    cfg.engine.workers = 1;
    cfg.engine.commit_interval = Duration::from_millis(500);
    cfg.engine.revoke_timeout = Duration::from_secs(1);
    let handler = GateAndBlock {
        proxy: proxy.clone(),
        calls: Arc::default(),
        written: Arc::default(),
        blocking: Arc::default(),
        unblock: Arc::default(),
    };
    let consumer = Consumer::new(cfg, handler.clone()).unwrap();
    let running = start(consumer);
    let stats = running.stats.clone();
    wait_until(
        Duration::from_secs(120),
        "a write at the gate and the worker blocked",
        || handler.blocking.load(Ordering::SeqCst),
    )
    .await;
    let syncs = proxy.seen(SYNC_GROUP);
    rebalance_once(&proxy);
    proxy.release(END_TXN);
    // The revoke cancels both records at its timeout and is acknowledged; the member joins
    // again and gets the partition back.
    wait_until(
        Duration::from_secs(120),
        "the partition assigned again",
        || proxy.seen(SYNC_GROUP) > syncs,
    )
    .await;
    handler.unblock.store(true, Ordering::SeqCst);
    let calls = handler.calls.clone();
    wait_until(
        Duration::from_secs(120),
        "the cancelled records handled again",
        || {
            let c = calls.lock().unwrap();
            c.get(&("s-000000".into(), "1".into())) >= Some(&2)
                && c.get(&("s-000001".into(), "1".into())) >= Some(&2)
        },
    )
    .await;
    wait_until(Duration::from_secs(60), "their replies handled", || {
        stats.handled() >= 2
    })
    .await;
    running.stop().await;
    let got = read_committed(&replies.name).await;
    assert_each_reply_once_in_order(&got, records, sessions);
    let pool = Arc::new(orderly_protocol::ConnectionPool::new(
        vec![b.bootstrap().to_owned()],
        orderly_protocol::ConnectionConfig::default(),
    ));
    let cluster =
        orderly_consumer::tools::MetadataCache::new(pool.clone(), vec![], Duration::from_secs(300));
    let status = orderly_consumer::tools::status::group_status(&pool, &cluster, &group)
        .await
        .unwrap();
    let committed: Vec<i64> = status.partitions.iter().map(|p| p.committed).collect();
    assert_eq!(committed, [records as i64], "the group's offset");
}
