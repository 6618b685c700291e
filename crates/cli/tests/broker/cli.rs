//! End-to-end tests of the `orderly` binary against the real broker: consume through a checking webhook, exec and pipe handlers (pipe batches too), SIGTERM under load, produce, dlq, status, bad input.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use orderly_testkit::broker;
use orderly_testkit::webhook::{Rules, Webhook, fnv1a};

use crate::common;

use common::{
    BIN, Consume, FAST_GROUP, QUICK_RETRIES, dlq_letters, group_topic_dlq, http, ok, orderly,
    produce_kv, tmp, total_lag, wait_until,
};

/// `orderly consume` with a fast group and, unless the test gives one, no admin endpoint.
fn spawn_consume(args: &[&str], log: &Path) -> Consume {
    let admin: &[&str] = if args.contains(&"--admin-addr") {
        &[]
    } else {
        &["--admin-addr", "off"]
    };
    Consume::start(&[args, &FAST_GROUP[..], admin].concat(), log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_http_batches_keep_order_retry_and_dead_letter_per_record() {
    let b = broker();
    let test_topic = b.topic("cli-http-batch", 4).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 2).await.unwrap();
    let group = format!("{topic}-g");
    let hook = Webhook::start(Rules {
        transient_pct: 10,
        permanent: true,
        work: Duration::from_millis(1),
    })
    .await
    .unwrap();
    let records = 3000u64;
    ok(&[
        "produce",
        "--topic",
        &topic,
        "--generate",
        "--sessions",
        "30",
        "--records",
        "3000",
        "--event-prefix",
        "e",
    ]);
    let expected_dlq = (0..records)
        .filter(|i| fnv1a(format!("e-{i}").as_bytes()) % 1000 == 999)
        .count();
    let log = tmp("http-batch.log");
    let mut c = spawn_consume(
        &[
            &group_topic_dlq(&group, &topic, &dlq)[..],
            &[
                "--http",
                &hook.url(),
                "--http-batch-max",
                "32",
                "--retry-max-attempts",
                "0",
            ],
            &QUICK_RETRIES[..],
        ]
        .concat(),
        &log,
    );
    wait_until("every record answered", Duration::from_secs(120), || {
        hook.terminal() >= records
    })
    .await;
    c.sigterm();
    assert_eq!(c.wait_exit(Duration::from_secs(60)), 0);
    let r = hook.report();
    assert_eq!(r.violations, 0, "order violations seen by the webhook");
    assert!(r.transient > 0, "transient failures were retried");
    assert_eq!(r.permanent as usize, expected_dlq);
    assert!(
        r.requests < records / 2,
        "records went in batches: {} requests for {records} records",
        r.requests
    );
    let letters = dlq_letters(&dlq);
    assert_eq!(letters.len(), expected_dlq);
    assert!(
        letters.iter().all(|l| l["reason"] == "permanent"
            && l["error"].as_str().unwrap().contains("invalid record")),
        "{letters:?}"
    );
    assert_eq!(total_lag(&group), Some(0));
}

/// A `--pipe` child for batches: appends `session seq` of each record it answers done to the
/// log named by its argument and the size of each batch to `<log>.sizes`; the first time it
/// sees a record whose `seq` is 5 modulo 37 it answers `{"done": i}` (the records before it
/// done, it and the rest sent again).
const PIPE_BATCH_CHILD: &str = r#"
import json, sys
log = open(sys.argv[1], "a")
sizes = open(sys.argv[1] + ".sizes", "a")
sighted = set()
for line in sys.stdin:
    msg = json.loads(line)
    batch = msg["batch"]
    sizes.write("%d\n" % len(batch))
    sizes.flush()
    done = len(batch)
    for i, r in enumerate(batch):
        seq = int(next(h["value"] for h in r["headers"] if h["name"] == "seq"))
        first = r["offset"] not in sighted
        sighted.add(r["offset"])
        if first and seq % 37 == 5:
            done = i
            break
    for r in batch[:done]:
        seq = next(h["value"] for h in r["headers"] if h["name"] == "seq")
        log.write("%s %s\n" % (r["session"], seq))
    log.flush()
    answer = {"id": msg["id"]} if done == len(batch) else {"id": msg["id"], "done": done}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_pipe_batches_deliver_a_seeded_topic_in_order_with_nothing_lost() {
    let b = broker();
    let test_topic = b.topic("cli-pipe-batch", 4).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let group = format!("{topic}-g");
    let (sessions, records) = (30usize, 3000usize);
    ok(&[
        "produce",
        "--topic",
        &topic,
        "--generate",
        "--sessions",
        &sessions.to_string(),
        "--records",
        &records.to_string(),
    ]);
    let script = tmp("pipe-batch-child.py");
    std::fs::write(&script, PIPE_BATCH_CHILD).unwrap();
    let seen = tmp("pipe-batch.seen");
    let sizes = PathBuf::from(format!("{}.sizes", seen.display()));
    let _ = std::fs::remove_file(&sizes);
    let child = format!("exec python3 {} {}", script.display(), seen.display());
    let log = tmp("pipe-batch.log");
    let mut c = spawn_consume(
        &[
            &group_topic_dlq(&group, &topic, &dlq)[..],
            &[
                "--pipe",
                &child,
                "--pipe-batch-max",
                "16",
                "--retry-base",
                "1ms",
                "--retry-cap",
                "20ms",
                "--retry-max-attempts",
                "0",
            ],
        ]
        .concat(),
        &log,
    );
    let lines = |p: &PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    wait_until("every record done", Duration::from_secs(120), || {
        lines(&seen).lines().count() >= records
    })
    .await;
    wait_until("lag 0", Duration::from_secs(60), || {
        total_lag(&group) == Some(0)
    })
    .await;
    c.sigterm();
    assert_eq!(c.wait_exit(Duration::from_secs(60)), 0);
    let mut got: HashMap<String, Vec<u64>> = HashMap::new();
    for l in lines(&seen).lines() {
        let (s, seq) = l.split_once(' ').unwrap();
        got.entry(s.to_owned())
            .or_default()
            .push(seq.parse().unwrap());
    }
    assert_eq!(got.len(), sessions);
    let per = (records / sessions) as u64;
    for (s, seqs) in &got {
        assert_eq!(
            *seqs,
            (1..=per).collect::<Vec<_>>(),
            "session {s}: each record once, in order"
        );
    }
    let batch_sizes: Vec<usize> = lines(&sizes).lines().map(|l| l.parse().unwrap()).collect();
    assert!(
        batch_sizes.iter().all(|n| (1..=16).contains(n)),
        "{batch_sizes:?}"
    );
    assert!(
        batch_sizes.len() < records / 2,
        "records went in batches: {} lines for {records} records",
        batch_sizes.len()
    );
    assert!(dlq_letters(&dlq).is_empty());
    let _ = std::fs::remove_file(&script);
    let _ = std::fs::remove_file(&seen);
    let _ = std::fs::remove_file(&sizes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_http_keeps_session_order_retries_and_dead_letters_then_dlq_replay() {
    let b = broker();
    let test_topic = b.topic("cli-http", 4).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 2).await.unwrap();
    let group = format!("{topic}-g");
    let hook = Webhook::start(Rules {
        transient_pct: 10,
        permanent: true,
        work: Duration::from_millis(1),
    })
    .await
    .unwrap();
    let records = 3000u64;
    let out = ok(&[
        "produce",
        "--topic",
        &topic,
        "--generate",
        "--sessions",
        "30",
        "--records",
        "3000",
        "--event-prefix",
        "e",
    ]);
    assert!(out.contains("produced 3000 records"), "{out}");
    let expected_dlq = (0..records)
        .filter(|i| fnv1a(format!("e-{i}").as_bytes()) % 1000 == 999)
        .count();
    assert!(expected_dlq > 0, "the workload has permanent failures");

    let log = tmp("http.log");
    let mut c = spawn_consume(
        &[
            &group_topic_dlq(&group, &topic, &dlq)[..],
            &["--http", &hook.url(), "--retry-max-attempts", "0"],
            &QUICK_RETRIES[..],
        ]
        .concat(),
        &log,
    );
    wait_until("every record answered", Duration::from_secs(120), || {
        hook.terminal() >= records
    })
    .await;
    c.sigterm();
    assert_eq!(c.wait_exit(Duration::from_secs(60)), 0);
    let r = hook.report();
    assert_eq!(r.violations, 0, "order violations seen by the webhook");
    assert!(r.transient > 0, "transient failures were retried");
    assert_eq!(r.permanent as usize, expected_dlq);
    let letters = dlq_letters(&dlq);
    assert_eq!(letters.len(), expected_dlq);
    assert!(letters.iter().all(
        |l| l["reason"] == "permanent" && l["error"].as_str().unwrap().starts_with("HTTP 422")
    ));
    assert_eq!(total_lag(&group), Some(0));
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(stderr.contains("left the group"), "{stderr}");

    // Replay one session's letters, then again (refused without --force).
    let session = letters[0]["session"].as_str().unwrap().to_owned();
    let n_session = letters
        .iter()
        .filter(|l| l["session"] == session.as_str())
        .count();
    let out = ok(&["dlq", "replay", "--dlq-topic", &dlq, "--session", &session]);
    assert!(
        out.contains(&format!("replayed {n_session} dead letters")),
        "{out}"
    );
    let again = orderly(&["dlq", "replay", "--dlq-topic", &dlq, "--session", &session]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    let after = dlq_letters(&dlq);
    assert_eq!(after.len(), expected_dlq, "markers are not letters");
    assert_eq!(
        after.iter().filter(|l| l["replayed"] == true).count(),
        n_session
    );
    // The replayed records are back on the source topic: the lag grew by them.
    assert_eq!(total_lag(&group), Some(n_session as i64));
    let show = ok(&["dlq", "show", "--dlq-topic", &dlq, "--session", &session]);
    assert!(show.contains("orderly-dlq-reason: permanent"), "{show}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_pipe_handlers_keep_order_and_dead_letter_failures() {
    let b = broker();
    let test_topic = b.topic("cli-proc", 2).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    // kv input: session<TAB>value; `bad` fails for good, `flaky` once (exit 75 / retry).
    let mut input = String::new();
    let mut expected: HashMap<String, Vec<String>> = HashMap::new();
    for i in 0..60 {
        let s = format!("s{}", i % 4);
        let v = match i % 20 {
            7 => "bad".to_owned(),
            3 => format!("flaky-{i}"),
            _ => format!("v-{i}"),
        };
        if v != "bad" {
            expected.entry(s.clone()).or_default().push(v.clone());
        }
        input.push_str(&format!("{s}\t{v}\n"));
    }
    produce_kv(&topic, &input);

    for mode in ["exec", "pipe"] {
        let seen = tmp(&format!("{mode}.seen"));
        let group = format!("{topic}-{mode}");
        let script = match mode {
            "exec" => format!(
                r#"v=$(cat); case "$v" in bad) echo "cannot parse $v" >&2; exit 3;; flaky*) [ "$ORDERLY_ATTEMPT" = 1 ] && exit 75;; esac; echo "$ORDERLY_SESSION $v" >> {}"#,
                seen.display()
            ),
            _ => format!(
                r#"while IFS= read -r l; do id=$(printf '%s' "$l" | sed 's/.*"id":\([0-9]*\).*/\1/'); s=$(printf '%s' "$l" | sed 's/.*"session":"\([^"]*\)".*/\1/'); v=$(printf '%s' "$l" | sed 's/.*"value":"\([^"]*\)".*/\1/'); a=$(printf '%s' "$l" | sed 's/.*"attempt":\([0-9]*\).*/\1/'); r=ok; case "$v" in bad) r=fail;; flaky*) [ "$a" = 1 ] && r=retry;; esac; [ $r = ok ] && echo "$s $v" >> {}; printf '{{"id":%s,"result":"%s","reason":"cannot parse %s"}}\n' "$id" "$r" "$v"; done"#,
                seen.display()
            ),
        };
        let log = tmp(&format!("{mode}.log"));
        let mut c = spawn_consume(
            &[
                &group_topic_dlq(&group, &topic, &dlq)[..],
                &[
                    &format!("--{mode}"),
                    &script,
                    "--retry-base",
                    "1ms",
                    "--retry-cap",
                    "20ms",
                ],
            ]
            .concat(),
            &log,
        );
        wait_until(
            &format!("{mode}: every good record handled"),
            Duration::from_secs(120),
            || std::fs::read_to_string(&seen).map_or(0, |s| s.lines().count()) >= 57,
        )
        .await;
        wait_until(&format!("{mode}: lag 0"), Duration::from_secs(60), || {
            total_lag(&group) == Some(0)
        })
        .await;
        c.sigterm();
        assert_eq!(c.wait_exit(Duration::from_secs(60)), 0, "{mode}");
        let mut got: HashMap<String, Vec<String>> = HashMap::new();
        for l in std::fs::read_to_string(&seen).unwrap().lines() {
            let (s, v) = l.split_once(' ').unwrap();
            got.entry(s.to_owned()).or_default().push(v.to_owned());
        }
        assert_eq!(
            got, expected,
            "{mode}: every session in order, each record once"
        );
    }
    let letters = dlq_letters(&dlq);
    assert_eq!(
        letters.len(),
        6,
        "3 bad records, dead-lettered by each of the two runs"
    );
    assert!(
        letters
            .iter()
            .all(|l| l["error"].as_str().unwrap().contains("cannot parse bad"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_load_commits_leaves_and_loses_nothing() {
    let b = broker();
    let test_topic = b.topic("cli-term", 3).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let group = format!("{topic}-g");
    let hook = Webhook::start(Rules {
        transient_pct: 0,
        permanent: false,
        work: Duration::from_millis(20),
    })
    .await
    .unwrap();
    ok(&[
        "produce",
        "--topic",
        &topic,
        "--generate",
        "--sessions",
        "20",
        "--records",
        "4000",
    ]);
    let args = [
        "--group",
        &group,
        "--topic",
        &topic,
        "--dlq-topic",
        &dlq,
        "--http",
        &hook.url(),
        "--http-concurrency",
        "64",
        "--shutdown-timeout",
        "1s",
    ];
    let log = tmp("term1.log");
    let mut c = spawn_consume(&args, &log);
    wait_until("some records handled", Duration::from_secs(60), || {
        hook.terminal() >= 300
    })
    .await;
    c.sigterm();
    assert_eq!(c.wait_exit(Duration::from_secs(60)), 0);
    let stopped_at = hook.terminal();
    assert!(stopped_at < 4000, "the signal came during the load");
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(stderr.contains("left the group"), "{stderr}");
    // What was handled is committed: the lag is at most what was not handled, plus the requests
    // (at most --http-concurrency) the drain deadline cancelled after the server answered them.
    let lag = total_lag(&group).unwrap();
    assert!(
        lag > 0 && lag <= 4000 - i64::try_from(stopped_at).unwrap() + 64,
        "lag {lag}, handled {stopped_at}"
    );
    // A second run picks up where the first left off and finishes; nothing is lost, nothing
    // overtakes (the webhook checks seq per session across both runs).
    let log2 = tmp("term2.log");
    let mut c2 = spawn_consume(&args, &log2);
    wait_until("the rest handled", Duration::from_secs(120), || {
        total_lag(&group) == Some(0)
    })
    .await;
    c2.sigterm();
    assert_eq!(c2.wait_exit(Duration::from_secs(60)), 0);
    let r = hook.report();
    assert_eq!(r.violations, 0);
    assert_eq!(r.done - r.duplicates, 4000, "every record handled");
}

/// SIGTERM with 1,000 busy sessions (every request takes 2 s, 20,000 records queued behind them)
/// and the default shutdown settings: the consumer starts no further record, lets the requests in
/// flight finish, commits and leaves, and exits well inside Kubernetes' default 30 s grace period
/// instead of working off the admitted backlog. The time from the signal to the exit is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_thousand_busy_sessions_exits_inside_the_grace_period() {
    let b = broker();
    let test_topic = b.topic("cli-term-busy", 4).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let group = format!("{topic}-g");
    let hook = Webhook::start(Rules {
        transient_pct: 0,
        permanent: false,
        work: Duration::from_secs(2),
    })
    .await
    .unwrap();
    ok(&[
        "produce",
        "--topic",
        &topic,
        "--generate",
        "--sessions",
        "1000",
        "--records",
        "20000",
    ]);
    let log = tmp("term-busy.log");
    let mut c = spawn_consume(
        &[
            &group_topic_dlq(&group, &topic, &dlq)[..],
            &["--http", &hook.url()],
        ]
        .concat(),
        &log,
    );
    wait_until("requests in flight", Duration::from_secs(60), || {
        hook.report().requests >= 200
    })
    .await;
    let t0 = std::time::Instant::now();
    c.sigterm();
    assert_eq!(c.wait_exit(Duration::from_secs(60)), 0);
    let took = t0.elapsed();
    eprintln!(
        "SIGTERM to exit with 1,000 busy sessions: {took:.2?} ({} records handled)",
        hook.terminal()
    );
    assert!(
        took < Duration::from_secs(25),
        "the stop must fit a 30 s grace period: {took:?}"
    );
    assert!(hook.terminal() < 20_000, "the backlog was not worked off");
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(stderr.contains("left the group"), "{stderr}");
    assert_eq!(hook.report().violations, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_one_clear_line_and_a_nonzero_exit() {
    let b = broker();
    let test_topic = b.topic("cli-bad", 1).await.unwrap();
    let topic = test_topic.name.clone();
    let check = |args: &[&str], env_bootstrap: Option<&str>, needle: &str| {
        let mut cmd = Command::new(BIN);
        // No admin endpoint: tests run in parallel and would race for its default port.
        cmd.args(args)
            .env("RUST_LOG", "off")
            .env("ORDERLY_ADMIN_ADDR", "off");
        match env_bootstrap {
            Some(bs) => cmd.env("ORDERLY_BOOTSTRAP", bs),
            None => cmd.env_remove("ORDERLY_BOOTSTRAP"),
        };
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(needle), "{args:?}: {err:?} lacks {needle:?}");
        assert!(
            !err.contains("panicked") && !err.contains("backtrace"),
            "{err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    };
    let bs = b.bootstrap();
    let base = ["consume", "--group", "g", "--http", "http://127.0.0.1:9/"];
    check(
        &[
            &base[..],
            &["--topic", &topic, "--bootstrap", "127.0.0.1:1"],
        ]
        .concat(),
        None,
        "127.0.0.1:1",
    );
    // A missing topic is only known missing once the wait for it to appear ends: both of
    // these wait that long, so they run side by side.
    std::thread::scope(|s| {
        s.spawn(|| {
            check(
                &[
                    &base[..],
                    &["--topic", "no-such-topic-xyz", "--dlq-topic", &topic],
                ]
                .concat(),
                Some(bs),
                "no-such-topic-xyz",
            );
        });
        s.spawn(|| {
            check(
                &[
                    &base[..],
                    &["--topic", &topic, "--dlq-topic", "no-such-dlq-xyz"],
                ]
                .concat(),
                Some(bs),
                "the dead-letter topic no-such-dlq-xyz does not exist",
            );
        });
    });
    check(
        &[&base[..], &["--topic", &topic, "--workers", "0"]].concat(),
        Some(bs),
        "--workers",
    );
    check(
        &[&base[..], &["--topic", &topic, "--retry-base", "soon"]].concat(),
        Some(bs),
        "--retry-base",
    );
    check(
        &["consume", "--group", "g", "--topic", &topic],
        Some(bs),
        "no handler",
    );
    let cfg = tmp("bad.toml");
    std::fs::write(&cfg, "group = \"g\"\nworkerz = 3\n").unwrap();
    check(
        &["config", "check", "--config", cfg.to_str().unwrap()],
        Some(bs),
        "unknown field `workerz`",
    );
    // config check: flags over the environment over the file, secrets masked.
    std::fs::write(
        &cfg,
        "group = \"from-file\"\nworkers = 3\ntopic = [\"t\"]\nhttp = \"http://127.0.0.1:9/\"\nsasl-mechanism = \"PLAIN\"\nsasl-username = \"u\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args([
            "config",
            "check",
            "--config",
            cfg.to_str().unwrap(),
            "--workers",
            "5",
            "--http-adaptive-concurrency",
        ])
        .env("ORDERLY_BOOTSTRAP", bs)
        .env("ORDERLY_GROUP", "from-env")
        .env("ORDERLY_SASL_PASSWORD", "hunter2")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("group = \"from-env\""), "{text}");
    assert!(text.contains("workers = 5"), "{text}");
    assert!(text.contains("http-adaptive-concurrency = true"), "{text}");
    assert!(text.contains("http-concurrency = 256"), "{text}");
    assert!(text.contains("sasl-password = \"********\""), "{text}");
    assert!(!text.contains("hunter2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn park_session_sends_later_records_to_the_dlq_until_released_and_admin_endpoints_answer() {
    let b = broker();
    let test_topic = b.topic("cli-park", 1).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let group = format!("{topic}-g");
    let seen = tmp("park.seen");
    produce_kv(&topic, "a\tok1\na\tbad\na\tok2\nb\tok1\na\tok3\n");
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let script = format!(
        r#"v=$(cat); [ "$v" = bad ] && exit 3; echo "$ORDERLY_SESSION $v" >> {}"#,
        seen.display()
    );
    let log = tmp("park.log");
    let mut c = spawn_consume(
        &[
            &group_topic_dlq(&group, &topic, &dlq)[..],
            &[
                "--exec",
                &script,
                "--dlq-mode",
                "park-session",
                "--admin-addr",
                &admin,
            ],
        ]
        .concat(),
        &log,
    );
    wait_until(
        "bad, ok2 and ok3 of session a in the DLQ",
        Duration::from_secs(90),
        || dlq_letters(&dlq).len() == 3,
    )
    .await;
    // Sessions a and b run concurrently: their lines may come in either order.
    let mut handled: Vec<String> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    handled.sort();
    assert_eq!(handled, ["a ok1", "b ok1"]);
    let reasons: Vec<String> = dlq_letters(&dlq)
        .iter()
        .map(|l| l["reason"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(reasons, ["permanent", "parked", "parked"]);
    let status = ok(&["status", "--group", &group, "--admin-addr", &admin]);
    assert!(
        status.contains("1 parked sessions") && status.contains("session a parked since offset 1"),
        "{status}"
    );
    assert!(http(&admin, "GET", "/healthz").starts_with("HTTP/1.1 200"));
    assert!(http(&admin, "GET", "/readyz").starts_with("HTTP/1.1 200"));
    assert!(http(&admin, "GET", "/metrics").contains("orderly_"));
    let rel = http(
        &admin,
        "POST",
        &format!("/parked/release?topic={topic}&partition=0&session=a"),
    );
    assert!(rel.contains("released 1"), "{rel}");
    // Released: the session's next record is handled again.
    produce_kv(&topic, "a\tok4\n");
    wait_until("ok4 handled", Duration::from_secs(60), || {
        std::fs::read_to_string(&seen).unwrap().contains("a ok4")
    })
    .await;
    c.sigterm();
    assert_eq!(c.wait_exit(Duration::from_secs(60)), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_credentials_work_and_a_wrong_password_is_one_clear_line() {
    use orderly_testkit::{BrokerOptions, DedicatedBroker, SASL_LISTENER, process::free_port};
    let opts = BrokerOptions {
        heap: "512m".into(),
        ..BrokerOptions::default()
    }
    .with_sasl_listener(free_port().unwrap(), &[("alice", "alice-secret")]);
    let broker = tokio::task::spawn_blocking(move || DedicatedBroker::start_with(opts))
        .await
        .unwrap()
        .unwrap();
    let sasl_addr = broker.listener(SASL_LISTENER).unwrap();
    orderly_testkit::create_topic(broker.bootstrap(), "sasl-t", 1)
        .await
        .unwrap();
    let run = |password: &str, args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .args([
                "--bootstrap",
                &sasl_addr,
                "--sasl-mechanism",
                "SCRAM-SHA-256",
            ])
            .args(["--sasl-username", "alice"])
            .env("ORDERLY_SASL_PASSWORD", password)
            .env("ORDERLY_ADMIN_ADDR", "off")
            .env("RUST_LOG", "off")
            .output()
            .unwrap()
    };
    let file = tmp("sasl.lines");
    std::fs::write(&file, "hello\n").unwrap();
    let produce = [
        "produce",
        "--topic",
        "sasl-t",
        "--file",
        file.to_str().unwrap(),
    ];
    let out = run("alice-secret", &produce);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // With every log line on, the password still appears nowhere.
    let out = Command::new(BIN)
        .args(produce)
        .args([
            "--bootstrap",
            &sasl_addr,
            "--sasl-mechanism",
            "SCRAM-SHA-512",
            "--sasl-username",
            "alice",
        ])
        .env("ORDERLY_SASL_PASSWORD", "alice-secret")
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{all}");
    assert!(
        all.to_lowercase().contains("sasl"),
        "trace logs cover the SASL exchange: {all}"
    );
    assert!(!all.contains("alice-secret"), "the password was printed");
    let out = run("wrong", &produce);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.to_lowercase().contains("authentication"), "{err}");
    assert!(
        !err.contains("wrong"),
        "the password is never printed: {err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let out = run(
        "wrong",
        &[
            "consume",
            "--group",
            "g",
            "--topic",
            "sasl-t",
            "--http",
            "http://127.0.0.1:9/",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.to_lowercase().contains("authentication"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// A webhook that never answers the record at offset `hang` (it holds the request open) and
/// answers every other one 200, remembering the offsets it answered.
struct HangingHook {
    addr: std::net::SocketAddr,
    answered: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<i64>>>,
    hung: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HangingHook {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HangingHook {
    async fn start(hang: i64) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answered =
            std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
        let hung = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (a, h) = (answered.clone(), hung.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(Self::serve(stream, hang, a.clone(), h.clone()));
            }
        });
        Self {
            addr,
            answered,
            hung,
            task,
        }
    }

    /// HTTP/1.1 with keep-alive, bodies with a content-length (what the handler sends).
    async fn serve(
        mut s: tokio::net::TcpStream,
        hang: i64,
        answered: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<i64>>>,
        hung: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            let head_end = loop {
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
            let header = |name: &str| {
                head.lines().find_map(|l| {
                    l.strip_prefix(name)
                        .and_then(|r| r.strip_prefix(':'))
                        .map(|v| v.trim().to_owned())
                })
            };
            let len: usize = header("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let offset: i64 = header("orderly-offset")
                .and_then(|v| v.parse().ok())
                .unwrap_or(-1);
            while buf.len() < head_end + len {
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            buf.drain(..head_end + len);
            if offset == hang {
                hung.store(true, std::sync::atomic::Ordering::SeqCst);
                std::future::pending::<()>().await;
            }
            answered.lock().unwrap().insert(offset);
            if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await
                .is_err()
            {
                return;
            }
        }
    }

    fn url(&self) -> String {
        format!("http://{}/records", self.addr)
    }

    fn answered(&self) -> usize {
        self.answered.lock().unwrap().len()
    }

    fn hung(&self) -> bool {
        self.hung.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A second signal exits at once after committing what is done. Offset 10 hangs in the
/// handler (the webhook never answers it); 15, 20 and 25 (its session) wait behind it; every other
/// record is answered. The first SIGTERM starts a drain that would wait 10 minutes for offset 10;
/// the second one makes the process cancel it, commit the contiguous done watermark (10, with the
/// done offsets above it in the metadata), leave the group and exit 0 promptly (not
/// exit 130 without that commit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_stops_at_once_and_commits_the_done_watermark() {
    const HANG: i64 = 10;
    let b = broker();
    let test_topic = b.topic("cli-stop", 1).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let group = format!("{topic}-g");
    let hook = HangingHook::start(HANG).await;
    // Sessions round robin: offset i belongs to session i % 5.
    ok(&[
        "produce",
        "--topic",
        &topic,
        "--generate",
        "--sessions",
        "5",
        "--records",
        "30",
    ]);
    let log = tmp("stop-now.log");
    let mut c = Consume::start(
        &[
            &group_topic_dlq(&group, &topic, &dlq)[..],
            &[
                "--http",
                &hook.url(),
                "--http-timeout",
                "600s",
                // Only the final commit can commit anything: no periodic commit within the test.
                "--commit-interval",
                "600s",
                "--shutdown-timeout",
                "600s",
                "--heartbeat-interval",
                "500ms",
                "--session-timeout",
                "10s",
                "--admin-addr",
                "off",
            ],
        ]
        .concat(),
        &log,
    );
    // 30 records minus offset 10 and the three of its session behind it.
    wait_until(
        "every record but offset 10's session answered",
        Duration::from_secs(120),
        || hook.answered() == 26 && hook.hung(),
    )
    .await;
    c.sigterm();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        c.running(),
        "the first signal drains: it must wait for the hanging record"
    );
    let second = Instant::now();
    c.sigterm();
    let code = c.wait_exit(Duration::from_secs(60));
    let took = second.elapsed();
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        took < Duration::from_secs(30),
        "the second signal took {took:?} to exit"
    );
    assert!(stderr.contains("left the group"), "{stderr}");
    let out = ok(&["status", "--group", &group, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p = &v["partitions"][0];
    assert_eq!(p["committed"].as_i64(), Some(HANG), "{out}");
    let above: Vec<(i64, i64)> = serde_json::from_value(p["completed_above"].clone()).unwrap();
    assert_eq!(
        above,
        vec![(11, 15), (16, 20), (21, 25), (26, 30)],
        "the metadata names exactly the done records above the watermark: {out}"
    );
}

/// Records without a session id, in each `--no-session` mode (poison input): `unordered`
/// handles them at once, `dlq` dead-letters each with the reason "no session id", `partition`
/// makes them one session per partition (in order among themselves). None is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_without_a_session_id_follow_the_no_session_mode() {
    let b = broker();
    let test_topic = b.topic("cli-nosession", 1).await.unwrap();
    let topic = test_topic.name.clone();
    let lines = [
        r#"{"id":"a","n":1}"#,
        r#"{"n":2}"#,
        r#"{"id":"a","n":3}"#,
        r#"{"n":4}"#,
        r#"{"n":5}"#,
    ];
    let file = tmp("nosession.lines");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    ok(&[
        "produce",
        "--topic",
        &topic,
        "--file",
        file.to_str().unwrap(),
    ]);
    for mode in ["unordered", "dlq", "partition"] {
        let dlq = format!("{topic}.{mode}.dlq");
        b.create_topic(&dlq, 1).await.unwrap();
        let group = format!("{topic}-{mode}");
        let seen = tmp(&format!("nosession-{mode}.seen"));
        // One append per record (the unordered lane runs records concurrently).
        let script = format!(r#"v=$(cat); printf '%s\n' "$v" >> {}"#, seen.display());
        let log = tmp(&format!("nosession-{mode}.log"));
        let mut c = spawn_consume(
            &[
                &group_topic_dlq(&group, &topic, &dlq)[..],
                &[
                    "--exec",
                    &script,
                    "--session",
                    "json:/id",
                    "--no-session",
                    mode,
                ],
            ]
            .concat(),
            &log,
        );
        // Lag reads 0 before the group's first commit too: wait for the work itself first.
        let (handled, dead) = if mode == "dlq" { (2, 3) } else { (5, 0) };
        wait_until(
            &format!("{mode}: records handled"),
            Duration::from_secs(120),
            || {
                std::fs::read_to_string(&seen).map_or(0, |s| s.lines().count()) >= handled
                    && (dead == 0 || dlq_letters(&dlq).len() >= dead)
            },
        )
        .await;
        wait_until(&format!("{mode}: lag 0"), Duration::from_secs(120), || {
            total_lag(&group) == Some(0)
        })
        .await;
        c.sigterm();
        assert_eq!(c.wait_exit(Duration::from_secs(60)), 0, "{mode}");
        let got: Vec<String> = std::fs::read_to_string(&seen)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        let letters = dlq_letters(&dlq);
        match mode {
            "dlq" => {
                assert_eq!(got, [lines[0], lines[2]], "{mode}: only session a handled");
                assert_eq!(letters.len(), 3, "{mode}: {letters:?}");
                assert!(
                    letters
                        .iter()
                        .all(|l| l["error"].as_str().unwrap().contains("no session id")),
                    "{letters:?}"
                );
            }
            "partition" => {
                // The records without an id form one session per partition: in order among
                // themselves, in parallel with session a.
                let keyless: Vec<&String> = got.iter().filter(|l| !l.contains("id")).collect();
                let a: Vec<&String> = got.iter().filter(|l| l.contains("id")).collect();
                assert_eq!(keyless, [lines[1], lines[3], lines[4]], "{mode}: {got:?}");
                assert_eq!(a, [lines[0], lines[2]], "{mode}: {got:?}");
                assert!(letters.is_empty(), "{letters:?}");
            }
            _ => {
                let mut sorted = got.clone();
                sorted.sort();
                let mut want: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
                want.sort();
                assert_eq!(sorted, want, "{mode}: each record once");
                assert!(letters.is_empty(), "{letters:?}");
            }
        }
    }
}
