//! End-to-end replies against the real broker: `orderly consume --reply-topic` with `--http`
//! (single requests and batches) and with `--pipe`, reading the reply topic back and checking
//! that every input record's reply is there, in session order per session, once in a clean run
//! (with transient failures retried), and at least once, still in order, across a SIGKILL.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use orderly_consumer::__private::synthetic::session_key;
use orderly_consumer::tools::MetadataCache;
use orderly_consumer::tools::produce::read_topic;
use orderly_protocol::{ConnectionConfig, ConnectionPool};
use orderly_testkit::broker;
use orderly_testkit::webhook::{Rules, Webhook};

use crate::common;

use common::{
    Consume, FAST_GROUP, QUICK_RETRIES, group_topic_dlq, ok, produce_kv, tmp, total_lag,
    wait_until_async,
};

fn spawn_consume(args: &[&str], log: &Path) -> Consume {
    Consume::start(
        &[
            args,
            &FAST_GROUP[..],
            &["--admin-addr", "off"],
            &QUICK_RETRIES[..],
        ]
        .concat(),
        log,
    )
}

/// One reply as read back: (partition, key, value, headers).
type Read = (i32, String, String, Vec<(String, String)>);

/// Every record of `topic`, partition by partition, each in offset order.
async fn read_replies(topic: &str) -> Vec<Read> {
    try_read_replies(topic).await.unwrap()
}

/// [`read_replies`] for a wait loop: a topic created a moment ago may not have its leaders yet.
async fn replies_so_far(topic: &str) -> Vec<Read> {
    try_read_replies(topic).await.unwrap_or_default()
}

async fn try_read_replies(topic: &str) -> Result<Vec<Read>, orderly_consumer::DriverError> {
    let pool = Arc::new(ConnectionPool::new(
        vec![broker().bootstrap().to_owned()],
        ConnectionConfig::default(),
    ));
    let cluster = MetadataCache::new(
        pool.clone(),
        vec![topic.to_owned()],
        Duration::from_secs(60),
    );
    Ok(read_topic(&pool, &cluster, topic)
        .await?
        .into_iter()
        .map(|(p, r)| {
            let text = |b: Option<bytes::Bytes>| {
                String::from_utf8(b.unwrap_or_default().to_vec()).unwrap()
            };
            let headers = r
                .headers
                .into_iter()
                .map(|h| (h.key.to_string(), text(h.value)))
                .collect();
            (p, text(r.key), text(r.value), headers)
        })
        .collect())
}

/// Groups replies by key (the session): each key's values in reply-topic order, and asserts a
/// key's replies all lie on one partition.
fn by_session(replies: &[Read]) -> BTreeMap<String, Vec<String>> {
    let mut part: HashMap<&str, i32> = HashMap::new();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (p, k, v, _) in replies {
        assert_eq!(
            *part.entry(k).or_insert(*p),
            *p,
            "the replies of session {k} are on more than one partition"
        );
        out.entry(k.clone()).or_default().push(v.clone());
    }
    out
}

/// The generated workload's replies (event ids `e-<i>`, session `i % sessions`), per session in
/// session order.
fn expected_generated(records: usize, sessions: usize) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..records {
        out.entry(session_key(i % sessions))
            .or_default()
            .push(format!("e-{i}"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_http_replies_every_record_once_in_session_order() {
    let b = broker();
    let test_topic = b.topic("replies-http", 4).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let (records, sessions) = (2000usize, 20usize);
    ok(&[
        "produce",
        "--topic",
        &topic,
        "--generate",
        "--sessions",
        &sessions.to_string(),
        "--records",
        &records.to_string(),
        "--event-prefix",
        "e",
    ]);
    let expected = expected_generated(records, sessions);
    for (mode, batch) in [("single", "1"), ("batch", "16")] {
        let replies_topic = format!("{topic}.replies-{mode}");
        b.create_topic(&replies_topic, 3).await.unwrap();
        let group = format!("{topic}-{mode}");
        let hook = Webhook::start_replying(Rules {
            transient_pct: 10,
            permanent: false,
            work: Duration::from_millis(1),
        })
        .await
        .unwrap();
        let log = tmp(&format!("http-{mode}.log"));
        let mut c = spawn_consume(
            &[
                &group_topic_dlq(&group, &topic, &dlq)[..],
                &[
                    "--http",
                    &hook.url(),
                    "--http-batch-max",
                    batch,
                    "--reply-topic",
                    &replies_topic,
                    "--retry-max-attempts",
                    "0",
                ],
            ]
            .concat(),
            &log,
        );
        wait_until_async(
            &format!("{mode}: lag 0"),
            Duration::from_secs(180),
            // Every record answered and its reply written (a group that has not committed yet
            // shows no lag).
            async || {
                hook.terminal() >= records as u64
                    && replies_so_far(&replies_topic).await.len() >= records
                    && total_lag(&group) == Some(0)
            },
        )
        .await;
        c.signal("-TERM");
        assert_eq!(c.wait_exit(Duration::from_secs(60)), 0, "{mode}");
        let r = hook.report();
        assert_eq!(
            r.violations, 0,
            "{mode}: order violations seen by the webhook"
        );
        assert!(r.transient > 0, "{mode}: transient failures were retried");
        let replies = read_replies(&replies_topic).await;
        assert_eq!(
            by_session(&replies),
            expected,
            "{mode}: every record's reply, once, in session order"
        );
        if mode == "single" {
            // The JSON form (odd seq) carries its header; the plain form (even seq) none.
            let with_seq = replies
                .iter()
                .filter(|r| r.3.iter().any(|h| h.0 == "seq"))
                .count();
            assert_eq!(with_seq, records / 2, "{mode}");
        }
        let stderr = std::fs::read_to_string(&log).unwrap();
        assert!(!stderr.contains("reply write failed"), "{mode}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_pipe_replies_once_in_a_clean_run_and_in_order_across_a_kill() {
    let b = broker();
    let test_topic = b.topic("replies-pipe", 2).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    // kv input: session<TAB>value; `flaky-*` values fail once (retry) before they reply.
    let mut input = String::new();
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let records = 400;
    for i in 0..records {
        let s = format!("s{}", i % 5);
        let v = if i % 10 == 3 {
            format!("flaky-{i}")
        } else {
            format!("v-{i}")
        };
        expected.entry(s.clone()).or_default().push(v.clone());
        input.push_str(&format!("{s}\t{v}\n"));
    }
    produce_kv(&topic, &input);
    // Each answer takes a little while, so the kill lands mid-run.
    let script = r#"while IFS= read -r l; do id=$(printf '%s' "$l" | sed 's/.*"id":\([0-9]*\).*/\1/'); v=$(printf '%s' "$l" | sed 's/.*"value":"\([^"]*\)".*/\1/'); a=$(printf '%s' "$l" | sed 's/.*"attempt":\([0-9]*\).*/\1/'); sleep 0.02; case "$v" in flaky*) if [ "$a" = 1 ]; then printf '{"id":%s,"result":"retry","reason":"flaky"}\n' "$id"; continue; fi;; esac; printf '{"id":%s,"result":"ok","replies":[{"value":"%s","headers":{"from":"pipe"}}]}\n' "$id" "$v"; done"#;
    for kill in [false, true] {
        let replies_topic = format!("{topic}.replies-{kill}");
        b.create_topic(&replies_topic, 2).await.unwrap();
        let group = format!("{topic}-pipe-{kill}");
        let args = [
            "--group",
            &group,
            "--topic",
            &topic,
            "--dlq-topic",
            &dlq,
            "--pipe",
            script,
            "--reply-topic",
            &replies_topic,
        ];
        let mut c = spawn_consume(&args, &tmp(&format!("pipe-{kill}-1.log")));
        if kill {
            wait_until_async("some replies", Duration::from_secs(120), async || {
                replies_so_far(&replies_topic).await.len() >= 60
            })
            .await;
            c.signal("-KILL");
            c.wait_exit(Duration::from_secs(30));
            c = spawn_consume(&args, &tmp(&format!("pipe-{kill}-2.log")));
        }
        // Every record's reply there (a group that has not committed yet shows no lag).
        wait_until_async("every reply, lag 0", Duration::from_secs(180), async || {
            let distinct: std::collections::HashSet<String> = replies_so_far(&replies_topic)
                .await
                .into_iter()
                .map(|r| r.2)
                .collect();
            distinct.len() >= records && total_lag(&group) == Some(0)
        })
        .await;
        c.signal("-TERM");
        assert_eq!(c.wait_exit(Duration::from_secs(60)), 0);
        check_pipe_replies(&read_replies(&replies_topic).await, &expected, kill);
    }
}

/// Checks the replies of the pipe test: each session's replies are its records' values in its
/// order; once each in a clean run, and after a kill at least once, a repeated stretch
/// resuming from the session's committed record (a reply never comes before the reply of the
/// record preceding it).
fn check_pipe_replies(replies: &[Read], expected: &BTreeMap<String, Vec<String>>, kill: bool) {
    assert!(
        replies
            .iter()
            .all(|r| r.3 == [("from".to_owned(), "pipe".to_owned())])
    );
    let got = by_session(replies);
    if !kill {
        assert_eq!(
            &got, expected,
            "a clean run: each reply once, in session order"
        );
        return;
    }
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (s, want) in expected {
        let seen = &got[s];
        // At-least-once: after the kill a session's replies resume from its committed record,
        // so a stretch may repeat; without the repeats each session's replies are exactly its
        // records, in order. A reply never comes before the one of the record preceding it.
        let pos: HashMap<&str, usize> = want
            .iter()
            .enumerate()
            .map(|(i, v)| (v.as_str(), i))
            .collect();
        let mut next = 0usize;
        for v in seen {
            let i = *pos
                .get(v.as_str())
                .unwrap_or_else(|| panic!("{s}: unexpected reply {v}"));
            assert!(
                i <= next,
                "{s}: reply {v} skipped ahead of {}",
                want[next.min(want.len() - 1)]
            );
            if i == next {
                next += 1;
            }
        }
        assert_eq!(
            next,
            want.len(),
            "{s}: replies missing after {}",
            want[next.min(want.len() - 1)]
        );
    }
}
