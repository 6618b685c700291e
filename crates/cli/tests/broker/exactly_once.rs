//! End-to-end exactly-once against the real broker: `orderly consume --exactly-once --pipe
//! --reply-topic`, its reply and dead-letter topics read back by Apache Kafka's own consumer
//! with `isolation.level=read_committed`. Every input record's reply (or dead letter)
//! must be there exactly once, in session order per session, after a clean run with transient
//! failures, a consumer SIGKILLed mid-transaction and restarted, a second consumer joining
//! mid-run (a revoke ends the open transaction), and a zombie: a consumer SIGSTOPped
//! mid-transaction until its partitions moved to a second one, then SIGCONTed, whose late
//! transaction must not commit (it aborts it, rejoins the group and goes on).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use orderly_testkit::broker;

use crate::common;

use common::{BIN, Consume, QUICK_RETRIES, orderly, produce_kv, tmp, wait_until_async};

/// Replies `{"value": <input value>}` after 20 ms; `flaky-*` values fail once first (retried),
/// `bad-*` values fail permanently (dead-lettered, no reply).
const SCRIPT: &str = r#"while IFS= read -r l; do id=$(printf '%s' "$l" | sed 's/.*"id":\([0-9]*\).*/\1/'); v=$(printf '%s' "$l" | sed 's/.*"value":"\([^"]*\)".*/\1/'); a=$(printf '%s' "$l" | sed 's/.*"attempt":\([0-9]*\).*/\1/'); sleep 0.02; case "$v" in flaky*) if [ "$a" = 1 ]; then printf '{"id":%s,"result":"retry","reason":"flaky"}\n' "$id"; continue; fi;; bad*) printf '{"id":%s,"result":"fail","reason":"bad"}\n' "$id"; continue;; esac; printf '{"id":%s,"result":"ok","replies":[{"value":"%s"}]}\n' "$id" "$v"; done"#;

/// Starts `orderly consume --exactly-once` in a process group of its own: a stopped process in
/// the test's group would be continued by the kernel (SIGHUP, SIGCONT) when another member of a
/// group without a parent outside it exits, and the zombie test must decide when it wakes.
fn spawn_consume(args: &[&str], log: &Path) -> Consume {
    spawn_consume_every(args, log, "500ms")
}

fn spawn_consume_every(args: &[&str], log: &Path, commit_interval: &str) -> Consume {
    spawn_consume_with(args, log, commit_interval, "10s")
}

fn spawn_consume_with(
    args: &[&str],
    log: &Path,
    commit_interval: &str,
    session_timeout: &str,
) -> Consume {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(BIN);
    cmd.process_group(0);
    let own: [&str; 8] = [
        "--exactly-once",
        "--heartbeat-interval",
        "500ms",
        "--session-timeout",
        session_timeout,
        "--commit-interval",
        commit_interval,
        "--admin-addr",
    ];
    Consume::start_with(
        cmd,
        &[&own[..], &["off"], args, &QUICK_RETRIES[..]].concat(),
        log,
    )
}

/// `(key, value)` of every record of `topic` that Apache Kafka's own consumer reads with
/// `isolation.level=read_committed` from the beginning to the end offsets as of the read (a
/// partition's records keep their order in the output; a key lives on one partition): what was
/// committed by then, not what the test expects.
async fn read_committed(topic: &str) -> Vec<(String, String)> {
    broker()
        .read_committed(topic, orderly_testkit::ReadUntil::End)
        .await
        .unwrap()
}

/// The values per session, in stream order.
fn by_session(records: &[(String, String)]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, v) in records {
        out.entry(k.clone()).or_default().push(v.clone());
    }
    out
}

/// What a run must leave in the read_committed streams: per session, the replies and the
/// dead-lettered values, each in the session's order.
struct Expected {
    replies: BTreeMap<String, Vec<String>>,
    dead: BTreeMap<String, Vec<String>>,
}

impl Expected {
    fn replies_total(&self) -> usize {
        self.replies.values().map(Vec::len).sum()
    }
}

/// Produces `records` kv records over 5 sessions to `topic`. Every tenth value is `flaky-*`
/// (its first attempt fails transiently), every 25th `bad-*` (dead-lettered).
fn produce(topic: &str, records: usize) -> Expected {
    let mut input = String::new();
    let mut replies: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut dead: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..records {
        let s = format!("s{}", i % 5);
        let (v, out) = if i % 25 == 7 {
            (format!("bad-{i}"), &mut dead)
        } else if i % 10 == 3 {
            (format!("flaky-{i}"), &mut replies)
        } else {
            (format!("v-{i}"), &mut replies)
        };
        out.entry(s.clone()).or_default().push(v.clone());
        input.push_str(&format!("{s}\t{v}\n"));
    }
    produce_kv(topic, &input);
    Expected { replies, dead }
}

/// Waits until the read_committed stream holds at least `n` replies.
async fn wait_for_committed(topic: &str, n: usize, patience: Duration) {
    wait_until_async(&format!("{n} committed replies"), patience, async || {
        read_committed(topic).await.len() >= n
    })
    .await;
}

/// Reads the reply and dead-letter topics with read_committed and checks both: every record's
/// reply (or dead letter) once, each session's in its order.
async fn assert_exactly_once(s: &Setup, what: &str) {
    for (topic, expected, kind) in [
        (&s.replies, &s.expected.replies, "reply"),
        (&s.dlq, &s.expected.dead, "dead letter"),
    ] {
        let got = read_committed(topic).await;
        let total: usize = expected.values().map(Vec::len).sum();
        assert_eq!(
            got.len(),
            total,
            "{what}: one {kind} per record in the read_committed stream"
        );
        assert_eq!(
            &by_session(&got),
            expected,
            "{what}: each session's {kind}s once, in session order"
        );
    }
}

struct Setup {
    topic: orderly_testkit::TestTopic,
    dlq: String,
    replies: String,
    group: String,
    expected: Expected,
}

async fn setup(name: &str, records: usize) -> Setup {
    let b = broker();
    let topic = b.topic(name, 2).await.unwrap();
    let dlq = format!("{}.dlq", topic.name);
    b.create_topic(&dlq, 1).await.unwrap();
    let replies = format!("{}.replies", topic.name);
    b.create_topic(&replies, 2).await.unwrap();
    let expected = produce(&topic.name, records);
    Setup {
        group: format!("{}-g", topic.name),
        topic,
        dlq,
        replies,
        expected,
    }
}

impl Setup {
    fn args<'a>(&'a self, txn_id: &'a str) -> Vec<&'a str> {
        self.args_with(txn_id, SCRIPT)
    }

    fn args_with<'a>(&'a self, txn_id: &'a str, script: &'a str) -> Vec<&'a str> {
        vec![
            "--group",
            &self.group,
            "--topic",
            &self.topic.name,
            "--dlq-topic",
            &self.dlq,
            "--pipe",
            script,
            "--reply-topic",
            &self.replies,
            "--transactional-id",
            txn_id,
        ]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_run_with_transient_failures_replies_exactly_once() {
    let s = setup("eos-clean", 300).await;
    let log = tmp("clean.log");
    let txn_id = format!("{}-a", s.group);
    let mut c = spawn_consume(&s.args(&txn_id), &log);
    wait_for_committed(
        &s.replies,
        s.expected.replies_total(),
        Duration::from_secs(180),
    )
    .await;
    c.signal("-TERM");
    assert_eq!(c.wait_exit(Duration::from_secs(60)), 0);
    assert_exactly_once(&s, "clean run").await;
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(!stderr.contains("transaction failed"), "{stderr}");
    let _ = std::fs::remove_file(&log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_mid_run_and_restarted_leaves_no_duplicate() {
    let records = 400;
    let s = setup("eos-kill", records).await;
    let txn_id = format!("{}-a", s.group);
    let (log1, log2, marks) = (tmp("kill-1.log"), tmp("kill-2.log"), tmp("kill.marks"));
    let script = marking_script(&marks, "0.05");
    let mut c = spawn_consume_every(&s.args_with(&txn_id, &script), &log1, "2s");
    // Killed with replies in its open transaction (stopped first to check that).
    stop_mid_transaction(&c, &s.group, &marks, records).await;
    c.signal("-KILL");
    c.wait_exit(Duration::from_secs(30));
    // The same transactional id: the restart aborts what the killed process left open.
    let mut c = spawn_consume(&s.args(&txn_id), &log2);
    wait_for_committed(
        &s.replies,
        s.expected.replies_total(),
        Duration::from_secs(180),
    )
    .await;
    c.signal("-TERM");
    assert_eq!(c.wait_exit(Duration::from_secs(60)), 0);
    assert_exactly_once(&s, "kill and restart").await;
    for f in [&log1, &log2, &marks] {
        let _ = std::fs::remove_file(f);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_mid_run_hands_over_without_duplicates() {
    let records = 400;
    let s = setup("eos-rebalance", records).await;
    let (id_a, id_b) = (format!("{}-a", s.group), format!("{}-b", s.group));
    let (log_a, log_b, marks) = (tmp("reb-a.log"), tmp("reb-b.log"), tmp("reb.marks"));
    let script = marking_script(&marks, "0.05");
    let mut a = spawn_consume_every(&s.args_with(&id_a, &script), &log_a, "2s");
    wait_until_async("A answers records", Duration::from_secs(120), async || {
        answered(&marks) >= 60
    })
    .await;
    // B joins while A has replies in its open transaction: A's revoke commit ends that
    // transaction with the offsets of every record whose replies it holds.
    let mut b = spawn_consume(&s.args_with(&id_b, &script), &log_b);
    let topic = &s.topic.name;
    wait_until_async("B owns a partition", Duration::from_secs(120), async || {
        let log = plain(&std::fs::read_to_string(&log_b).unwrap());
        log.contains(&format!("partition assigned partition={topic}-"))
    })
    .await;
    wait_for_committed(
        &s.replies,
        s.expected.replies_total(),
        Duration::from_secs(180),
    )
    .await;
    for (c, log) in [(&mut a, &log_a), (&mut b, &log_b)] {
        c.signal("-TERM");
        let code = c.wait_exit(Duration::from_secs(60));
        assert_eq!(code, 0, "{}", plain(&std::fs::read_to_string(log).unwrap()));
    }
    assert_exactly_once(&s, "rebalance").await;
    for f in [&log_a, &log_b, &marks] {
        let _ = std::fs::remove_file(f);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_woken_after_its_partitions_moved_aborts_and_rejoins() {
    let records = 400;
    let s = setup("eos-zombie", records).await;
    let (id_a, id_b) = (format!("{}-a", s.group), format!("{}-b", s.group));
    let (log_a, log_b, marks) = (
        tmp("zombie-a.log"),
        tmp("zombie-b.log"),
        tmp("zombie.marks"),
    );
    // A commits every 10 s, so it is stopped with replies in its open transaction. Its
    // transaction outlives the stop however long the move takes on a busy machine (were it
    // older than its timeout, the coordinator would abort it and A would wake to a rewind).
    let script = marking_script(&marks, "0.1");
    let mut args_a = s.args_with(&id_a, &script);
    args_a.extend(["--transaction-timeout", "10m"]);
    let mut a = spawn_consume_every(&args_a, &log_a, "10s");
    stop_mid_transaction(&a, &s.group, &marks, records).await;
    let mut b = spawn_consume(
        &s.args_with(&id_b, &SCRIPT.replace("sleep 0.02", "sleep 0.05")),
        &log_b,
    );
    // The group drops A after its session timeout and B takes every partition; A's open
    // transaction holds replies but no offsets, so B starts from A's last committed ones.
    let topic = &s.topic.name;
    wait_until_async(
        "B owns both partitions",
        Duration::from_secs(120),
        async || {
            let log = plain(&std::fs::read_to_string(&log_b).unwrap());
            (0..2).all(|p| log.contains(&format!("partition assigned partition={topic}-{p} ")))
        },
    )
    .await;
    assert!(stopped(&a), "A stayed stopped until its partitions moved");
    a.signal("-CONT");
    // A wakes as a zombie with replies in its open transaction: whatever it meets first (the
    // heartbeat's UNKNOWN_MEMBER_ID, its offsets refused under its old generation) aborts the
    // transaction, and A rejoins the group in the same process and goes on.
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let stderr_a = plain(&std::fs::read_to_string(&log_a).unwrap());
        assert!(
            a.running(),
            "the zombie exited instead of rejoining: {stderr_a}"
        );
        if stderr_a.contains("transaction aborted")
            && read_committed(&s.replies).await.len() >= s.expected.replies_total()
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for the abort and the replies: {stderr_a}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for (c, log) in [(&mut a, &log_a), (&mut b, &log_b)] {
        c.signal("-TERM");
        let code = c.wait_exit(Duration::from_secs(60));
        let stderr = plain(&std::fs::read_to_string(log).unwrap());
        assert_eq!(code, 0, "{stderr}");
        assert!(!stderr.contains("transaction failed"), "{stderr}");
    }
    assert_exactly_once(&s, "zombie").await;
    for f in [&log_a, &log_b, &marks] {
        let _ = std::fs::remove_file(f);
    }
}

/// A consumer stopped with replies in its open transaction past the transaction timeout (but
/// not past its session timeout) finds its producer fenced by the coordinator, which aborted
/// that transaction. No other producer took its transactional id, so it goes on under a new
/// epoch (KIP-360) and rewinds: it keeps running and hands the records of the aborted
/// transaction to its handler again. Every reply once, in session order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_timed_out_while_stopped_is_rewound_in_process() {
    let records = 400;
    let s = setup("eos-timeout", records).await;
    let txn_id = format!("{}-a", s.group);
    let (log, marks) = (tmp("timeout.log"), tmp("timeout.marks"));
    let script = marking_script(&marks, "0.05");
    let mut args = s.args_with(&txn_id, &script);
    args.extend(["--transaction-timeout", "3s"]);
    let mut c = spawn_consume_with(&args, &log, "1s", "60s");
    stop_mid_transaction(&c, &s.group, &marks, records).await;
    // The coordinator aborts the open transaction at its first sweep after the timeout.
    tokio::time::sleep(Duration::from_secs(20)).await;
    c.signal("-CONT");
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        assert!(
            c.running(),
            "the consumer exited instead of rewinding: {}",
            plain(&std::fs::read_to_string(&log).unwrap())
        );
        if read_committed(&s.replies).await.len() >= s.expected.replies_total() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for the replies"
        );
    }
    let code = c.stop(Duration::from_secs(60));
    let stderr = plain(&std::fs::read_to_string(&log).unwrap());
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("transaction aborted"), "{stderr}");
    assert!(!stderr.contains("transaction failed"), "{stderr}");
    assert_exactly_once(&s, "transaction timeout").await;
    for f in [&log, &marks] {
        let _ = std::fs::remove_file(f);
    }
}

/// The handler script, `delay` seconds per record, noting every value it answers done in
/// `marks` (replied to, or failed for the dead-letter topic: both count as done in the group's
/// commits, a retry does not), so a test knows when its consumer holds answered records whose
/// offsets it has not committed (their replies are in the open transaction).
fn marking_script(marks: &Path, delay: &str) -> String {
    let mark = |answer: &str| {
        format!(
            r#"printf '%s\n' "$v" >> {}; printf '{{"id":%s,"result":"{answer}""#,
            marks.display()
        )
    };
    SCRIPT
        .replace("sleep 0.02", &format!("sleep {delay}"))
        .replace(r#"printf '{"id":%s,"result":"ok""#, &mark("ok"))
        .replace(r#"printf '{"id":%s,"result":"fail""#, &mark("fail"))
}

/// SIGSTOPs `c` at a moment when it has answered at least 3 records more than its group has
/// committed (and is at least 50 records from the end), CONTinuing and trying again otherwise.
async fn stop_mid_transaction(c: &Consume, group: &str, marks: &Path, records: usize) {
    let total = i64::try_from(records).unwrap();
    loop {
        wait_until_async("answered records", Duration::from_secs(120), async || {
            answered(marks) >= 30
        })
        .await;
        c.signal("-STOP");
        // Stopped: neither its answers nor its commits move now (its handler child may finish
        // the one record it holds).
        let committed = loop {
            if let Some(done) = group_done(group) {
                break done;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let done = i64::try_from(answered(marks)).unwrap();
        assert!(
            committed < total - 50,
            "the consumer finished before it could be stopped mid-transaction"
        );
        if done - committed >= 3 {
            return;
        }
        // Stopped right after a commit: try again.
        c.signal("-CONT");
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
}

/// How many values the marking handler answered.
fn answered(marks: &Path) -> usize {
    std::fs::read_to_string(marks).map_or(0, |s| s.lines().count())
}

/// How many input records the group's committed offsets count as done (the records below each
/// commit point and those its metadata names), per `orderly status`; `None` while it cannot tell.
fn group_done(group: &str) -> Option<i64> {
    let out = orderly(&["status", "--group", group, "--json"]);
    if !out.status.success() {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let mut done = 0;
    for p in v["partitions"].as_array()? {
        done += p["committed"].as_i64()?;
        for r in p["completed_above"].as_array()? {
            done += r[1].as_i64()? - r[0].as_i64()?;
        }
    }
    Some(done)
}

/// A log without its ANSI colours.
fn plain(log: &str) -> String {
    let mut out = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether the process is stopped (state `T` in /proc).
fn stopped(child: &Consume) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", child.id())).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('T'))
    })
}
