//! Batches over HTTP (`EngineConfig::batch_max` with `HttpHandler::handle_batch`) through the engine and a real server: partial success, a permanent failure in the middle, batches larger than what is queued, a timeout, and a revoke while batches are in flight; order and loss checked on the server's side.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use orderly_engine::mem::{MemDeadLetters, MemSource};
use orderly_engine::{Engine, EngineConfig, Record, RetryPolicy, TopicPartition};
use orderly_handlers::{HttpConfig, HttpHandler, SessionRouter};

/// What the service saw.
#[derive(Default)]
struct Seen {
    /// Offsets answered done, per session, in answer order.
    done: HashMap<String, Vec<i64>>,
    /// Sessions with a request in flight.
    busy: HashSet<String>,
    /// Offsets seen in any request (to fail some only on their first sight).
    sighted: HashSet<i64>,
    /// Records per request.
    sizes: Vec<usize>,
    violations: Vec<String>,
}

/// What a record's value asks the server to do the first time it sees it.
fn plan(offset: i64) -> &'static str {
    match offset % 50 {
        7 => "retry", // `{"done": i}`: the records before it are done, it is retried.
        23 => "fail", // `{"done": i, "result": "fail"}`: dead-lettered.
        31 => "slow", // the whole request takes longer than the timeout.
        41 => "503",  // the whole batch is answered 503.
        _ => "ok",
    }
}

async fn answer(
    req: Request<hyper::body::Incoming>,
    seen: Arc<Mutex<Seen>>,
) -> Response<Full<Bytes>> {
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let envs: Vec<serde_json::Value> =
        match serde_json::from_slice::<serde_json::Value>(&body).unwrap() {
            serde_json::Value::Array(a) => a,
            one => vec![one],
        };
    let offsets: Vec<i64> = envs.iter().map(|e| e["offset"].as_i64().unwrap()).collect();
    let session = envs[0]["session"].as_str().unwrap().to_owned();
    // The first record that fails decides the answer (a record counts as sighted only when
    // the server got to it, so records after the failing one still fail on their first turn).
    let mut verdict = None;
    {
        let mut s = seen.lock().unwrap();
        s.sizes.push(offsets.len());
        if !s.busy.insert(session.clone()) {
            s.violations
                .push(format!("{session}: two requests at once"));
        }
        if envs.iter().any(|e| e["session"].as_str() != Some(&session)) {
            s.violations.push(format!("{offsets:?}: sessions mixed"));
        }
        for (i, o) in offsets.iter().enumerate() {
            let first = s.sighted.insert(*o);
            let p = plan(*o);
            if p == "fail" || (first && p != "ok") {
                verdict = Some((i, p));
                break;
            }
        }
    }
    if matches!(verdict, Some((_, "slow"))) {
        // Answered after the client's timeout: the client has moved on (its retry may arrive
        // meanwhile), so this request no longer counts as in flight, and its answer is lost.
        seen.lock().unwrap().busy.remove(&session);
        tokio::time::sleep(Duration::from_millis(700)).await;
        return Response::new(Full::new(Bytes::new()));
    }
    let mut s = seen.lock().unwrap();
    s.busy.remove(&session);
    let done_n = match verdict {
        Some((_, "503" | "slow")) => 0,
        Some((i, _)) => i,
        None => offsets.len(),
    };
    let list = s.done.entry(session.clone()).or_default();
    for o in &offsets[..done_n] {
        if list.contains(o) {
            continue; // a redelivery after the revoke
        }
        list.push(*o);
    }
    let mut sorted = list.clone();
    sorted.sort_unstable();
    if sorted != *list {
        let v = format!("{session}: done out of order {list:?}");
        s.violations.push(v);
    }
    drop(s);
    let mut r = Response::new(Full::new(Bytes::new()));
    match verdict {
        Some((_, "503")) => *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE,
        Some((i, "fail")) => {
            *r.body_mut() = Full::new(Bytes::from(format!(
                r#"{{"done": {i}, "result": "fail", "reason": "invalid"}}"#
            )));
        }
        Some((i, "retry")) => {
            *r.body_mut() = Full::new(Bytes::from(format!(r#"{{"done": {i}}}"#)));
        }
        _ => {}
    }
    r
}

async fn server() -> (String, Arc<Mutex<Seen>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let st = seen.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let st = st.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let st = st.clone();
                    async move { Ok::<_, Infallible>(answer(req, st).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (format!("http://{addr}/batch"), seen)
}

const RECORDS: i64 = 400;
const SESSIONS: i64 = 8;

fn records(tp: &TopicPartition) -> Vec<Record> {
    (0..RECORDS)
        .map(|i| {
            Record::new(
                tp.clone(),
                i,
                Some(Bytes::from(format!("s{}", i % SESSIONS))),
                Some(Bytes::from_static(b"{}")),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_keep_order_and_lose_nothing_through_failures_and_a_revoke() {
    let (url, seen) = server().await;
    let tp = TopicPartition::new("orders", 0);
    let (source, handle) = MemSource::new(64);
    handle.produce(&tp, records(&tp));
    handle.assign(std::slice::from_ref(&tp));
    let mut http = HttpConfig::new(url);
    http.timeout = Duration::from_millis(300);
    let dlq = Arc::new(MemDeadLetters::new());
    let cfg = EngineConfig {
        workers: 2,
        batch_max: 16,
        retry: RetryPolicy {
            base: Duration::from_millis(5),
            factor: 2.0,
            cap: Duration::from_millis(50),
            max_attempts: Some(5),
        },
        attempt_timeout: None,
        commit_interval: Duration::from_millis(50),
        ..EngineConfig::default()
    };
    let engine = Engine::from_arcs(
        cfg,
        Arc::new(HttpHandler::new(http, SessionRouter::default()).unwrap()),
        dlq.clone(),
    );
    let stats = engine.stats();
    let run = tokio::spawn(engine.run(source, std::future::pending()));
    // A revoke while batches are in flight, then the partition comes back (from our commit).
    tokio::time::sleep(Duration::from_millis(30)).await;
    tokio::time::timeout(
        Duration::from_secs(60),
        handle.revoke(std::slice::from_ref(&tp)),
    )
    .await
    .expect("the revoke is acknowledged")
    .unwrap();
    handle.assign(std::slice::from_ref(&tp));
    handle.finish_when_drained();
    tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the run ends")
        .unwrap()
        .unwrap();
    let s = seen.lock().unwrap();
    assert!(s.violations.is_empty(), "{:?}", s.violations);
    let failing: HashSet<i64> = (0..RECORDS).filter(|o| plan(*o) == "fail").collect();
    let letters: HashSet<i64> = dlq.letters().iter().map(|l| l.record.offset).collect();
    assert_eq!(
        letters, failing,
        "exactly the records answered fail are dead letters"
    );
    let done: usize = s.done.values().map(Vec::len).sum();
    assert_eq!(
        done as i64 + failing.len() as i64,
        RECORDS,
        "every record done or dead-lettered"
    );
    assert!(
        s.sizes.iter().any(|n| *n > 1),
        "records went in batches: {:?}",
        s.sizes
    );
    assert!(s.sizes.iter().all(|n| *n <= 16));
    assert_eq!(handle.committed(&tp).map(|c| c.offset), Some(RECORDS));
    assert_eq!(stats.dead_lettered(), failing.len() as u64);
}
