//! `orderly consume --http` against the real broker and a real webhook through the failures an
//! operator sees in production: the service down for longer than the stuck timeout, and the
//! consumer killed (SIGKILL) and restarted under the same name several times in a run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use orderly_testkit::broker;
use orderly_testkit::webhook::{Rules, Webhook};

use crate::common;

use common::{
    Consume, FAST_GROUP, dlq_letters, free_addr, group_topic_dlq, http, ok, tmp, total_lag,
    wait_until,
};

/// The value of an unlabelled gauge in a Prometheus text answer.
fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix(' ')?;
        rest.trim().parse().ok()
    })
}

/// The service refuses connections for three times the stuck timeout while 2,000 records of 200
/// sessions wait for it (every session's first record is held from the start, the way a deploy
/// or a crash loop of the service looks). The consumer holds them and says so
/// (`orderly_handler_available` 0, `/readyz` 503 naming the handler); once the service listens every record reaches it once, in
/// order per session: 0 dead-lettered, 0 lost, the group's lag 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_down_past_the_stuck_timeout_dead_letters_nothing_and_loses_nothing() {
    const RECORDS: u64 = 2_000;
    let b = broker();
    let test_topic = b.topic("cli-outage", 3).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let group = format!("{topic}-g");
    ok(&[
        "produce",
        "--topic",
        &topic,
        "--generate",
        "--sessions",
        "200",
        "--records",
        &RECORDS.to_string(),
    ]);
    let service = free_addr();
    let admin = free_addr();
    // Long enough for the 200 held requests, released at once on new connections, to be
    // answered on a loaded machine: the test is about the outage, not the burst after it.
    let stuck = Duration::from_secs(5);
    let log = tmp("outage.log");
    let mut c = Consume::start(
        &[
            &group_topic_dlq(&group, &topic, &dlq)[..],
            &[
                "--http",
                &format!("http://{service}/records"),
                "--stuck-timeout",
                &format!("{}s", stuck.as_secs()),
                "--retry-max-attempts",
                "3",
                "--retry-base",
                "10ms",
                "--retry-cap",
                "100ms",
                "--admin-addr",
                &admin,
            ],
            &FAST_GROUP[..],
        ]
        .concat(),
        &log,
    );
    wait_until(
        "the consumer to see the endpoint down",
        Duration::from_secs(90),
        || {
            gauge(
                &http(&admin, "GET", "/metrics"),
                "orderly_handler_available",
            ) == Some(0.0)
        },
    )
    .await;
    let down_since = Instant::now();
    tokio::time::sleep(stuck * 3).await;
    assert_eq!(
        gauge(
            &http(&admin, "GET", "/metrics"),
            "orderly_handler_available"
        ),
        Some(0.0),
        "still held after three stuck timeouts"
    );
    let ready = http(&admin, "GET", "/readyz");
    assert!(
        ready.starts_with("HTTP/1.1 503") && ready.contains("handler unavailable"),
        "not ready while the records wait for the service, and says why: {ready}"
    );
    let hook = Webhook::start_on(
        &service,
        Rules {
            transient_pct: 0,
            permanent: false,
            work: Duration::ZERO,
        },
    )
    .await
    .unwrap();
    let outage = down_since.elapsed();
    // Every record is done (handled, or dead-lettered) once the lag is 0.
    wait_until("the lag committed to 0", Duration::from_secs(120), || {
        total_lag(&group) == Some(0)
    })
    .await;
    c.signal("-TERM");
    assert_eq!(c.wait_exit(Duration::from_secs(60)), 0);
    let stderr = std::fs::read_to_string(&log).unwrap();
    let letters = dlq_letters(&dlq);
    assert!(
        letters.is_empty(),
        "nothing is dead-lettered while the endpoint is down ({outage:?} with a {stuck:?} stuck timeout): {} letters, first {:?}\n{stderr}",
        letters.len(),
        letters.first()
    );
    let r = hook.report();
    assert_eq!(r.violations, 0, "order per session held");
    assert_eq!(r.done - r.duplicates, RECORDS, "nothing lost");
    assert!(stderr.contains("handler unavailable"), "{stderr}");
    eprintln!(
        "endpoint down {outage:.1?} (stuck timeout {stuck:?}): 0 dead letters, {} records handled, {} duplicates",
        r.done - r.duplicates,
        r.duplicates
    );
    let _ = std::fs::remove_file(&log);
}

/// What one crash cost, as the webhook saw it.
struct Crash {
    /// Records the webhook answered done in the run the SIGKILL ended, and that run's length.
    done_in_run: u64,
    run: Duration,
    /// Records delivered again after the restart (done before, done again).
    redone: u64,
    /// From the SIGKILL to the restarted process's first request.
    first_delivery: Duration,
}

/// The figures of redone work and resumption after a SIGKILL: 1,000 sessions, 100,000 records
/// over 4 partitions, a webhook taking 50 ms per request; `orderly consume --instance-id pod-0` (as
/// the StatefulSet names its pods) with the default commit interval and session timeout is killed
/// up to 5 times (while records remain), each time 3 s into delivery, and started again at once
/// under the same name.
/// Asserted: each restarted process delivers before the killed member's session timeout
/// (45 s) would have let the coordinator give its partitions away, nothing lost, no order
/// violation, no dead letter, lag 0. Printed (not asserted, they
/// depend on the machine): per crash the records redone, what that is in seconds of the run's
/// own pace, and the time from the kill to the restarted process's first delivery.
/// `cargo test -p orderly-cli --test broker cli_recovery::sigkill -- --nocapture` shows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_restarts_under_the_same_name_lose_nothing_and_redo_little() {
    const RECORDS: u64 = 100_000;
    const CRASHES: usize = 5;
    let b = broker();
    let test_topic = b.topic("cli-sigkill", 4).await.unwrap();
    let topic = test_topic.name.clone();
    let dlq = format!("{topic}.dlq");
    b.create_topic(&dlq, 1).await.unwrap();
    let group = format!("{topic}-g");
    ok(&[
        "produce",
        "--topic",
        &topic,
        "--generate",
        "--sessions",
        "1000",
        "--records",
        &RECORDS.to_string(),
    ]);
    let hook = Webhook::start(Rules {
        transient_pct: 0,
        permanent: false,
        work: Duration::from_millis(50),
    })
    .await
    .unwrap();
    let url = hook.url();
    let args = [
        &group_topic_dlq(&group, &topic, &dlq)[..],
        &[
            "--http",
            &url,
            "--instance-id",
            "pod-0",
            "--session-timeout",
            "45s",
            "--admin-addr",
            "off",
        ],
    ]
    .concat();
    let session_timeout = Duration::from_secs(45);
    let log = tmp("sigkill.log");
    let mut c = Consume::start(&args, &log);
    let mut crashes = Vec::new();
    for i in 0..CRASHES {
        let before = hook.report();
        wait_until("delivery under way", Duration::from_secs(120), || {
            hook.report().requests > before.requests
        })
        .await;
        let started = Instant::now();
        let done_at_start = hook.report().done;
        tokio::time::sleep(Duration::from_secs(3)).await;
        c.signal("-KILL");
        let killed = Instant::now();
        c.wait_exit(Duration::from_secs(30));
        let at_kill = hook.report();
        if at_kill.done - at_kill.duplicates >= RECORDS {
            eprintln!("crash {} came after the run ended; not counted", i + 1);
            c = Consume::start(&args, &log);
            break;
        }
        c = Consume::start(&args, &log);
        let mut first_delivery = Duration::ZERO;
        // A restarted static member gets its partitions back at once; a member without an
        // instance id would wait until the coordinator expired the killed one.
        wait_until(
            "the restarted process's first delivery before the killed member's session timeout",
            session_timeout,
            || {
                let now = hook.report().requests;
                first_delivery = killed.elapsed();
                now > at_kill.requests
            },
        )
        .await;
        crashes.push((
            at_kill.done - done_at_start,
            killed - started,
            at_kill.duplicates,
            first_delivery,
        ));
    }
    wait_until("every record handled", Duration::from_secs(300), || {
        let r = hook.report();
        r.done - r.duplicates >= RECORDS
    })
    .await;
    wait_until("the lag committed to 0", Duration::from_secs(60), || {
        total_lag(&group) == Some(0)
    })
    .await;
    c.signal("-TERM");
    assert_eq!(c.wait_exit(Duration::from_secs(60)), 0);
    let r = hook.report();
    assert_eq!(r.violations, 0, "order per session held");
    assert_eq!(r.done - r.duplicates, RECORDS, "nothing lost");
    assert!(dlq_letters(&dlq).is_empty(), "nothing dead-lettered");
    // The duplicates a crash caused are those counted between its kill and the next kill.
    let mut figures = Vec::new();
    for (n, &(done_in_run, run, dups_at_kill, first_delivery)) in crashes.iter().enumerate() {
        let dups_next = crashes.get(n + 1).map_or(r.duplicates, |&(_, _, d, _)| d);
        figures.push(Crash {
            done_in_run,
            run,
            redone: dups_next - dups_at_kill,
            first_delivery,
        });
    }
    let mut total_redone = 0;
    for (i, f) in figures.iter().enumerate() {
        let pace = f.done_in_run as f64 / f.run.as_secs_f64();
        total_redone += f.redone;
        eprintln!(
            "crash {}: {} records done in {:.1?} before the kill ({pace:.0}/s), {} redone after the restart (= {:.2} s of work), first delivery {:.2?} after the kill",
            i + 1,
            f.done_in_run,
            f.run,
            f.redone,
            f.redone as f64 / pace,
            f.first_delivery
        );
    }
    eprintln!(
        "{} SIGKILLs, {RECORDS} records: 0 lost, 0 order violations, {total_redone} duplicate deliveries ({:.1} % of the records)",
        figures.len(),
        total_redone as f64 * 100.0 / RECORDS as f64
    );
    let _ = std::fs::remove_file(&log);
}
