//! An endpoint outage through the engine and a real HTTP server: a service that refuses connections, drops them, stalls the TLS handshake, answers only 503, or asks for a `Retry-After`, for longer than the stuck-gap timeout (and, on a paused clock, the attempt timeout) dead-letters nothing, loses nothing and keeps each session's order.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use orderly_engine::mem::{MemDeadLetters, MemSource};
use orderly_engine::{Engine, EngineConfig, Record, RetryPolicy, TopicPartition};
use orderly_handlers::{HttpConfig, HttpHandler, SessionRouter};
use orderly_testkit::https::{HttpsOptions, HttpsServer, cert};

const RECORDS: i64 = 200;
const SESSIONS: i64 = 20;

/// What the service saw: 200 answers per (partition, offset), order per session.
#[derive(Default)]
struct Seen {
    done: BTreeSet<(i32, i64)>,
    /// Last offset answered 200, per session.
    last: HashMap<String, i64>,
    violations: Vec<String>,
    /// Requests answered 503.
    refused: u64,
    /// The next this many requests are answered 429 with `Retry-After: <retry_after_secs>`.
    retry_after: u64,
    retry_after_secs: u64,
}

/// The service's answer to `req`: 429 with `Retry-After` while asked to, 503 while `down` is
/// set, else 200 with the order check.
fn answer(
    req: &Request<hyper::body::Incoming>,
    seen: &Mutex<Seen>,
    down: &AtomicBool,
) -> Response<Full<Bytes>> {
    let h = |n: &str| {
        req.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let mut s = seen.lock().unwrap();
    if s.retry_after > 0 {
        s.retry_after -= 1;
        let mut r = Response::new(Full::new(Bytes::from_static(b"slow down")));
        *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
        r.headers_mut().insert(
            "retry-after",
            hyper::header::HeaderValue::from_str(&s.retry_after_secs.to_string()).unwrap(),
        );
        return r;
    }
    if down.load(Ordering::SeqCst) {
        s.refused += 1;
        let mut r = Response::new(Full::new(Bytes::from_static(b"deploying")));
        *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        return r;
    }
    let part: i32 = h("orderly-partition").parse().unwrap();
    let offset: i64 = h("orderly-offset").parse().unwrap();
    let session = h("orderly-session");
    if let Some(&last) = s.last.get(&session) {
        if offset <= last {
            let v = format!("session {session}: {offset} after {last}");
            s.violations.push(v);
        }
    }
    s.last.insert(session, offset);
    s.done.insert((part, offset));
    Response::new(Full::new(Bytes::new()))
}

/// Serves [`answer`] on `listener`.
async fn serve(listener: tokio::net::TcpListener, seen: Arc<Mutex<Seen>>, down: Arc<AtomicBool>) {
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        let (seen, down) = (seen.clone(), down.clone());
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let r = answer(&req, &seen, &down);
                async move { Ok::<_, Infallible>(r) }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

fn records(tp: &TopicPartition) -> Vec<Record> {
    (0..RECORDS)
        .map(|i| {
            Record::new(
                tp.clone(),
                i,
                Some(Bytes::from(format!("{}-s{}", tp.partition, i % SESSIONS))),
                Some(Bytes::from_static(b"{}")),
            )
        })
        .collect()
}

/// Retries that would run out within the outage if its failures counted (3 attempts, 10 ms to
/// 100 ms apart), a stuck-gap timeout well inside the outage, and the default attempt timeout.
fn config() -> EngineConfig {
    EngineConfig {
        workers: 2,
        retry: RetryPolicy {
            base: Duration::from_millis(10),
            factor: 2.0,
            cap: Duration::from_millis(100),
            max_attempts: Some(3),
        },
        stuck_timeout: Some(Duration::from_secs(2)),
        drain_timeout: Duration::from_secs(3600),
        commit_interval: Duration::from_millis(100),
        ..EngineConfig::default()
    }
}

/// Runs two partitions of records through the engine into `url` while `outage` plays out beside
/// it; checks that nothing was dead-lettered or lost and that order held.
async fn run_through(url: String, seen: Arc<Mutex<Seen>>, outage: impl Future<Output = ()>) {
    run_with(HttpConfig::new(url), config(), seen, outage).await;
}

/// [`run_through`] with the handler's and the engine's settings.
async fn run_with(
    http: HttpConfig,
    config: EngineConfig,
    seen: Arc<Mutex<Seen>>,
    outage: impl Future<Output = ()>,
) {
    let tps = [
        TopicPartition::new("orders", 0),
        TopicPartition::new("orders", 1),
    ];
    let (source, handle) = MemSource::new(50);
    for tp in &tps {
        handle.produce(tp, records(tp));
    }
    handle.assign(&tps);
    handle.finish_when_drained();
    let http = HttpHandler::new(http, SessionRouter::default()).unwrap();
    let dlq = Arc::new(MemDeadLetters::new());
    let engine = Engine::from_arcs(config, Arc::new(http), dlq.clone());
    let stats = engine.stats();
    let run = tokio::spawn(engine.run(source, std::future::pending()));
    outage.await;
    tokio::time::timeout(Duration::from_secs(3600), run)
        .await
        .expect("the run ends once the endpoint is back")
        .unwrap()
        .unwrap();
    assert_eq!(
        dlq.letters().len(),
        0,
        "nothing is dead-lettered while the endpoint is down: {:?}",
        dlq.letters()
            .iter()
            .map(|l| (l.record.offset, l.reason.code()))
            .collect::<Vec<_>>()
    );
    assert_eq!(stats.dead_lettered(), 0);
    assert_eq!(stats.stuck(), 0);
    let s = seen.lock().unwrap();
    assert!(s.violations.is_empty(), "{:?}", s.violations);
    assert_eq!(
        s.done.len() as i64,
        RECORDS * 2,
        "every record reached the service"
    );
    for tp in &tps {
        assert_eq!(handle.committed(tp).map(|c| c.offset), Some(RECORDS));
    }
}

/// The service is not listening for 5 s (more than twice the stuck-gap timeout), then starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_hold_records_past_the_stuck_timeout() {
    refused_for(Duration::from_secs(5)).await;
}

/// Runs the records into a port nothing listens on for `outage`, then serves them there.
async fn refused_for(outage: Duration) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let seen2 = seen.clone();
    let outage = async move {
        tokio::time::sleep(outage).await;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        tokio::spawn(serve(listener, seen2, Arc::new(AtomicBool::new(false))));
    };
    run_through(format!("http://127.0.0.1:{port}/in"), seen, outage).await;
}

/// A gateway in front of the service answers 503 to everything for 5 s, then the service is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_answering_503_holds_records_past_the_stuck_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let down = Arc::new(AtomicBool::new(true));
    tokio::spawn(serve(listener, seen.clone(), down.clone()));
    let seen2 = seen.clone();
    let outage = async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        down.store(false, Ordering::SeqCst);
        let refused = seen2.lock().unwrap().refused;
        assert!(refused > 0, "the outage was seen");
    };
    run_through(format!("http://{addr}/in"), seen, outage).await;
}

/// The service asks its client to wait 4 s (`429` with `Retry-After: 4`, twice the stuck-gap
/// timeout): every request waits, and the wait is not taken for a stuck record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_longer_than_the_stuck_timeout_dead_letters_nothing() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen {
        retry_after: 1,
        retry_after_secs: 4,
        ..Seen::default()
    }));
    tokio::spawn(serve(
        listener,
        seen.clone(),
        Arc::new(AtomicBool::new(false)),
    ));
    run_through(format!("http://{addr}/in"), seen, async {}).await;
}

/// Runs `test` on tokio's paused clock, for an outage much longer than the attempt timeout
/// (30 s by default): the circuit's holds and the `Retry-After` waits are waits for the
/// endpoint, not attempts that time out.
///
/// The client and the servers share this runtime over real sockets. When no task is ready the
/// paused clock jumps to the next timer, even while a peer's answer is on its way through the
/// loopback; a jump to an attempt's 30 s deadline would end it before the answer is read. A
/// task waking every 10 ms bounds each jump, so a round trip takes a few ticks of the clock,
/// far inside every deadline, and only the waits the test sets up span minutes.
fn paused<F: Future>(test: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let ticks = tokio::spawn(async {
            let mut every = tokio::time::interval(Duration::from_millis(10));
            loop {
                every.tick().await;
            }
        });
        let out = test.await;
        ticks.abort();
        out
    })
}

/// The service refuses connections for 6 minutes.
#[test]
fn a_refusal_longer_than_the_attempt_timeout_dead_letters_nothing() {
    paused(refused_for(Duration::from_secs(360)));
}

/// The service asks for 4 minutes of quiet (`429` with `Retry-After: 240`).
#[test]
fn a_retry_after_longer_than_the_attempt_timeout_dead_letters_nothing() {
    paused(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen {
            retry_after: 1,
            retry_after_secs: 240,
            ..Seen::default()
        }));
        tokio::spawn(serve(
            listener,
            seen.clone(),
            Arc::new(AtomicBool::new(false)),
        ));
        run_through(format!("http://{addr}/in"), seen, async {}).await;
    });
}

/// [`config`] with a stuck-gap timeout above the connect and TLS handshake timeouts (10 s each
/// by default): until the first of them runs out, nothing says the endpoint is down.
fn unanswered_config() -> EngineConfig {
    EngineConfig {
        stuck_timeout: Some(Duration::from_secs(60)),
        ..config()
    }
}

/// A listener whose accept queue is full and that accepts nothing: the kernel drops every SYN,
/// as a firewall's DROP does. [`serve`] on it ends the black hole.
async fn black_hole() -> tokio::net::TcpListener {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    // The first connections fill the queue (a backlog of 0 holds one); the rest wait in SYN-SENT.
    for _ in 0..4 {
        tokio::spawn(async move {
            let _stream = tokio::net::TcpStream::connect(addr).await;
            std::future::pending::<()>().await;
        });
    }
    tokio::task::yield_now().await;
    listener
}

/// The endpoint drops every connection attempt for 6 minutes: the connect timeout, not the
/// request's, ends each try, and records are held as while it refuses.
#[test]
fn a_black_holed_endpoint_holds_records_and_dead_letters_nothing() {
    paused(async {
        let listener = black_hole().await;
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let seen2 = seen.clone();
        let outage = async move {
            tokio::time::sleep(Duration::from_secs(360)).await;
            tokio::spawn(serve(listener, seen2, Arc::new(AtomicBool::new(false))));
        };
        let http = HttpConfig::new(format!("http://{addr}/in"));
        run_with(http, unanswered_config(), seen, outage).await;
    });
}

/// Over `https://` the endpoint accepts connections but answers no TLS handshake for 6
/// minutes: the handshake timeout ends each try, and records are held.
#[test]
fn a_stalled_tls_handshake_holds_records_and_dead_letters_nothing() {
    paused(async {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let handshakes = Arc::new(tokio::sync::Semaphore::new(0));
        let (seen2, down) = (seen.clone(), Arc::new(AtomicBool::new(false)));
        let server = HttpsServer::start(
            HttpsOptions {
                handshake_permits: Some(handshakes.clone()),
                ..HttpsOptions::default()
            },
            move |req| {
                let r = answer(&req, &seen2, &down);
                async move { r }
            },
        )
        .await
        .unwrap();
        let outage = async move {
            tokio::time::sleep(Duration::from_secs(360)).await;
            handshakes.add_permits(1 << 20);
        };
        let mut http = HttpConfig::new(format!("https://127.0.0.1:{}/in", server.port()));
        http.ca_file = Some(cert("ca.pem"));
        run_with(http, unanswered_config(), seen, outage).await;
    });
}
