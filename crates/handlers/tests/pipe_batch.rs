//! Batches over a pipe (`EngineConfig::batch_max` with `PipeHandler::handle_batch`) with a real child in Python: one line carries a session's batch, the answer line names what is done; partial success, a permanent failure in the middle, an error line, a timeout and a child dying mid-batch, with order and loss checked from the child's side.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use orderly_engine::mem::{MemDeadLetters, MemSource};
use orderly_engine::{
    Attempt, BatchOutcome, Engine, EngineConfig, Handler, HandlerError, Record, Reply, RetryPolicy,
    TopicPartition,
};
use orderly_handlers::{PipeConfig, PipeHandler, SessionRouter};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("orderly-pipe-batch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The child: reads lines, each `{"id": .., "batch": [envelope, ..]}` (or one envelope with
/// its `id`), and answers by each record's plan, the first record that is not `ok` deciding.
/// A plan other than `fail` applies on a record's first sight only (sightings survive
/// restarts, in `sighted`); a record counts as sighted once the child got to it. Before each
/// answer it appends `{"pid", "offsets", "done"}` to `log` (`done`: the offsets it answers
/// done), so the log is what the child was sent and what it said. Each child appends its pid
/// to `started` as it starts (a child may die on its first line, before it answers any).
const CHILD: &str = r#"
import json, os, sys, time

dir = sys.argv[1]
sighted_path = os.path.join(dir, "sighted")
sighted = set()
if os.path.exists(sighted_path):
    sighted = {int(l) for l in open(sighted_path) if l.strip()}
sighted_file = open(sighted_path, "a")
log = open(os.path.join(dir, "log"), "a")
with open(os.path.join(dir, "started"), "a") as started:
    started.write("%d\n" % os.getpid())

def plan(offset, value):
    if value.startswith("plan:"):
        return value[5:]
    return {7: "done", 13: "results", 23: "fail", 37: "error"}.get(offset % 50, "ok")

for line in sys.stdin:
    msg = json.loads(line)
    records = msg["batch"] if "batch" in msg else [msg]
    offsets = [r["offset"] for r in records]
    verdict = None
    for i, r in enumerate(records):
        p = plan(r["offset"], r["value"])
        first = r["offset"] not in sighted
        if first:
            sighted.add(r["offset"])
            sighted_file.write("%d\n" % r["offset"])
            sighted_file.flush()
        if p == "fail" or (first and p != "ok"):
            verdict = (i, p)
            break
    i, p = verdict if verdict else (len(records), "ok")
    if p == "die":
        os._exit(1)
    if p == "hang":
        time.sleep(3600)
    done = [] if p == "error" else offsets[:i]
    log.write(json.dumps({"pid": os.getpid(), "offsets": offsets, "done": done}) + "\n")
    log.flush()
    # A batch answered all done is just its id; a single record says "ok".
    answer = {"id": msg["id"]} if "batch" in msg else {"id": msg["id"], "result": "ok"}
    if p == "done":
        answer["done"] = i
    elif p == "results":
        answer["results"] = ["ok"] * i + ["retry"]
    elif p == "fail":
        answer.update(done=i, result="fail", reason="invalid %d" % offsets[i])
    elif p == "error":
        answer.update(result="retry", reason="busy")
    elif p == "reply":
        answer["replies"] = [{"offset": o, "value": "re-%d" % o} for o in offsets]
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
"#;

/// One line of the child's log.
#[derive(Debug, serde::Deserialize)]
struct Answered {
    pid: u32,
    offsets: Vec<i64>,
    done: Vec<i64>,
}

fn log(dir: &Path) -> Vec<Answered> {
    std::fs::read_to_string(dir.join("log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The pids of the children started so far, in start order.
fn started(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("started"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

fn pipe(dir: &Path, timeout: Duration) -> PipeHandler {
    let script = dir.join("child.py");
    std::fs::write(&script, CHILD).unwrap();
    let mut c = PipeConfig::new(format!(
        "exec python3 {} {}",
        script.display(),
        dir.display()
    ));
    c.timeout = timeout;
    c.restart_backoff = Duration::from_millis(10);
    PipeHandler::spawn(c, SessionRouter::default())
}

fn rec(offset: i64, session: &str, value: &str) -> Record {
    Record::new(
        TopicPartition::new("t", 0),
        offset,
        Some(Bytes::from(session.to_owned())),
        Some(Bytes::from(value.to_owned())),
    )
}

/// A batch of offsets `from..from + n` of session `s`, the record at `at` carrying `plan`.
fn batch(from: i64, n: i64, at: i64, plan: &str) -> Vec<Record> {
    (from..from + n)
        .map(|o| {
            let v = if o == at {
                format!("plan:{plan}")
            } else {
                "plan:ok".to_owned()
            };
            rec(o, "s", &v)
        })
        .collect()
}

async fn call(h: &PipeHandler, records: &[Record]) -> orderly_engine::BatchReplies {
    let refs: Vec<&Record> = records.iter().collect();
    h.handle_batch_replying(&refs, Attempt::FIRST).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_line_carries_the_batch_and_the_answer_names_what_is_done() {
    let dir = tmp("answers");
    // A generous timeout: only the hanging child waits it out.
    let h = pipe(&dir, Duration::from_secs(5));

    // All done, in one line.
    let r = call(&h, &batch(100, 4, -1, "ok")).await;
    assert_eq!(r.outcome, BatchOutcome::all(4));
    let l = log(&dir);
    assert_eq!(l.len(), 1, "one line for the batch: {l:?}");
    assert_eq!(l[0].offsets, vec![100, 101, 102, 103]);

    // Partial success: the two before the record are done, it is retried.
    let r = call(&h, &batch(110, 4, 112, "done")).await;
    assert_eq!(r.outcome.done, 2);
    assert!(matches!(
        r.outcome.error,
        Some(HandlerError::Transient { .. })
    ));
    // The same with one result per record.
    let r = call(&h, &batch(120, 4, 121, "results")).await;
    assert_eq!(r.outcome.done, 1);
    assert!(matches!(
        r.outcome.error,
        Some(HandlerError::Transient { .. })
    ));
    // A permanent failure in the middle: dead-letter that record, with the child's reason.
    let r = call(&h, &batch(130, 4, 132, "fail")).await;
    assert_eq!(
        r.outcome,
        BatchOutcome {
            done: 2,
            error: Some(HandlerError::permanent("invalid 132"))
        }
    );
    // An error line: nothing done, the whole batch retried.
    let r = call(&h, &batch(140, 4, 141, "error")).await;
    assert_eq!(
        r.outcome,
        BatchOutcome::failed(HandlerError::transient("busy"))
    );
    // Replies name their records' offsets.
    let r = call(&h, &batch(150, 2, 150, "reply")).await;
    assert_eq!(r.outcome, BatchOutcome::all(2));
    assert_eq!(
        r.replies,
        vec![vec![Reply::new("re-150")], vec![Reply::new("re-151")]]
    );

    // The child dies mid-batch: nothing done, retried, and the next batch goes to a new child.
    let before = log(&dir).last().unwrap().pid;
    let r = call(&h, &batch(160, 4, 162, "die")).await;
    assert_eq!(r.outcome.done, 0);
    assert!(matches!(
        r.outcome.error,
        Some(HandlerError::Transient { .. })
    ));
    let r = call(&h, &batch(160, 4, 162, "die")).await;
    assert_eq!(r.outcome, BatchOutcome::all(4), "the retry is handled");
    assert_ne!(log(&dir).last().unwrap().pid, before, "a new child");

    // The child holds a batch past the timeout: nothing done, restarted before the retry.
    let before = log(&dir).last().unwrap().pid;
    let r = call(&h, &batch(170, 3, 171, "hang")).await;
    assert_eq!(r.outcome.done, 0);
    assert!(
        matches!(r.outcome.error, Some(HandlerError::Transient { message: ref t, .. }) if t.contains("no answer"))
    );
    let r = call(&h, &batch(170, 3, 171, "hang")).await;
    assert_eq!(r.outcome, BatchOutcome::all(3), "the retry is handled");
    assert_ne!(log(&dir).last().unwrap().pid, before, "a new child");
    let _ = std::fs::remove_dir_all(&dir);
}

const RECORDS: i64 = 400;
const SESSIONS: i64 = 8;
/// The record whose first sight makes the child exit, and the one it hangs on.
const DIE: i64 = 141;
const HANG: i64 = 266;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_keep_order_and_lose_nothing_through_failures_a_timeout_and_a_dead_child() {
    let dir = tmp("engine");
    let tp = TopicPartition::new("orders", 0);
    let (source, handle) = MemSource::new(64);
    let records: Vec<Record> = (0..RECORDS)
        .map(|i| {
            let value = match i {
                DIE => "plan:die".to_owned(),
                HANG => "plan:hang".to_owned(),
                _ => format!("v{i}"),
            };
            Record::new(
                tp.clone(),
                i,
                Some(Bytes::from(format!("s{}", i % SESSIONS))),
                Some(Bytes::from(value)),
            )
        })
        .collect();
    handle.produce(&tp, records);
    handle.assign(std::slice::from_ref(&tp));
    handle.finish_when_drained();
    let dlq = Arc::new(MemDeadLetters::new());
    let cfg = EngineConfig {
        workers: 2,
        batch_max: 16,
        retry: RetryPolicy {
            base: Duration::from_millis(5),
            factor: 2.0,
            cap: Duration::from_millis(50),
            max_attempts: Some(8),
        },
        attempt_timeout: None,
        commit_interval: Duration::from_millis(50),
        // The source ends once every record is admitted; the run ends when all are handled.
        drain_timeout: Duration::from_secs(120),
        ..EngineConfig::default()
    };
    let engine = Engine::from_arcs(
        cfg,
        // Generous: only the hanging child waits it out.
        Arc::new(pipe(&dir, Duration::from_secs(10))),
        dlq.clone(),
    );
    let stats = engine.stats();
    tokio::time::timeout(
        Duration::from_secs(120),
        engine.run(source, std::future::pending()),
    )
    .await
    .expect("the run ends")
    .unwrap();

    let failing: HashSet<i64> = (0..RECORDS).filter(|o| o % 50 == 23).collect();
    let letters: HashSet<i64> = dlq.letters().iter().map(|l| l.record.offset).collect();
    assert_eq!(
        letters, failing,
        "exactly the records answered fail are dead letters"
    );
    let mut violations = Vec::new();
    let mut done: HashMap<i64, Vec<i64>> = HashMap::new();
    let mut answered_done: HashSet<i64> = HashSet::new();
    let mut sizes = Vec::new();
    for a in log(&dir) {
        sizes.push(a.offsets.len());
        let session = a.offsets[0] % SESSIONS;
        if a.offsets.iter().any(|o| o % SESSIONS != session) {
            violations.push(format!("{:?}: sessions mixed", a.offsets));
        }
        if a.offsets.windows(2).any(|w| w[1] <= w[0]) {
            violations.push(format!("{:?}: not in offset order", a.offsets));
        }
        for o in &a.offsets {
            if answered_done.contains(o) {
                violations.push(format!("{o} sent again after it was answered done"));
            }
        }
        for o in &a.done {
            answered_done.insert(*o);
            done.entry(session).or_default().push(*o);
        }
    }
    for (s, list) in &done {
        let mut sorted = list.clone();
        sorted.sort_unstable();
        if sorted != *list {
            violations.push(format!("session {s}: done out of order {list:?}"));
        }
    }
    assert!(violations.is_empty(), "{violations:?}");
    let lost: Vec<i64> = (0..RECORDS)
        .filter(|o| !answered_done.contains(o) && !failing.contains(o))
        .collect();
    assert!(lost.is_empty(), "neither done nor dead-lettered: {lost:?}");
    assert!(
        sizes.iter().any(|n| *n > 1),
        "records went in batches: {sizes:?}"
    );
    assert!(sizes.iter().all(|n| *n <= 16), "{sizes:?}");
    // The first child, one after the death and one after the hang (the one that replaced a
    // hung child may die on its first line, so the answered log need not name it).
    let starts = started(&dir);
    assert!(
        starts.len() >= 3,
        "the child was replaced after dying and after hanging: {starts:?}"
    );
    assert_eq!(handle.committed(&tp).map(|c| c.offset), Some(RECORDS));
    assert_eq!(stats.dead_lettered(), failing.len() as u64);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A record the engine hands over alone (no session, or `batch_max` 1) still goes as one line
/// with its own `id`, as the per-record contract says.
#[tokio::test]
async fn a_record_without_a_session_still_goes_alone() {
    let dir = tmp("single");
    let h = pipe(&dir, Duration::from_secs(5));
    let r = Record::new(
        TopicPartition::new("t", 0),
        5,
        None,
        Some(Bytes::from_static(b"plan:ok")),
    );
    assert_eq!(h.handle(&r, Attempt::FIRST).await, Ok(()));
    assert_eq!(log(&dir)[0].offsets, vec![5]);
    let _ = std::fs::remove_dir_all(&dir);
}
