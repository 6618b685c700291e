//! The admin endpoint of `orderly consume`: `/metrics` (Prometheus), `/healthz`, `/readyz`, `/parked` (parked sessions; POST `/parked/release`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use orderly_consumer::{FetchState, Unanswered};
use orderly_engine::{EngineStats, ParkedSessions, PartitionStats};
use tokio::net::TcpListener;

/// How long a partition that is being fetched (owned, not paused for backpressure) may go without
/// a fetch response before `/readyz` says the consumer is not fetching. A caught-up partition is
/// answered at least every fetch long-poll (500 ms); a failing broker is retried with a backoff of
/// at most 5 s; so 10 s without an answer means fetching is broken, not slow.
pub const FETCH_ANSWER_BOUND: Duration = Duration::from_secs(10);

/// What `/readyz` looks at.
#[derive(Clone)]
pub struct Readiness {
    /// The engine's counters (per-partition state as of the last housekeeping tick).
    pub stats: EngineStats,
    /// The fetcher's owned partitions and when each last got a fetch response.
    pub fetch: Arc<FetchState>,
    /// The stuck-gap timeout, if any.
    pub stuck: Option<Duration>,
    /// See [`FETCH_ANSWER_BOUND`].
    pub fetch_bound: Duration,
}

impl Readiness {
    /// Why the consumer is not ready, or `None` when it is (see [`not_ready`]).
    pub fn check(&self) -> Option<String> {
        not_ready(
            self.fetch.in_group(),
            self.stats.handler_available(),
            &self.stats.partitions(),
            &self.fetch.unanswered(self.fetch_bound),
            self.stuck,
            self.fetch_bound,
        )
    }
}

/// Why the consumer is not ready, or `None` when it is. Ready means: the member is in the group
/// with the assignment of its latest rebalance (`in_group`; the assignment may be empty: a
/// replica beyond the partition count is a healthy standby that takes partitions over when
/// another member leaves), it is fetching (no owned, unpaused partition went without a fetch
/// response for longer than `fetch_bound`: `unanswered`), the handler is available
/// (`handler_available`: while its endpoint is down records wait for it), and no partition's
/// oldest record has been holding the watermark back past the stuck timeout (`parts`, the
/// engine's view).
pub fn not_ready(
    in_group: bool,
    handler_available: bool,
    parts: &[PartitionStats],
    unanswered: &[Unanswered],
    stuck: Option<Duration>,
    fetch_bound: Duration,
) -> Option<String> {
    if !in_group {
        return Some("not in the group yet (waiting for an assignment)".into());
    }
    if let Some(u) = unanswered.first() {
        return Some(format!(
            "not fetching: no fetch response for {} in {:.1?} (bound {fetch_bound:?}; {} partition(s) affected)",
            u.partition,
            u.since,
            unanswered.len()
        ));
    }
    if !handler_available {
        return Some(
            "handler unavailable: records wait for the service (the stuck-gap rule is suspended)"
                .into(),
        );
    }
    if let Some(limit) = stuck {
        for p in parts {
            if let Some(o) = &p.oldest_in_flight {
                if o.age > limit {
                    return Some(format!(
                        "{} stuck at offset {} for {:?}",
                        p.partition, o.offset, o.age
                    ));
                }
            }
        }
    }
    None
}

/// Who may call the routes that change state (`POST /parked/release`). The read-only routes
/// (`/metrics`, `/healthz`, `/readyz`, `GET /parked`) are open: probes and scrapers call them.
#[derive(Clone)]
pub struct AdminAuth {
    /// With a token, a mutating request needs `Authorization: Bearer <token>`, wherever the
    /// endpoint listens.
    token: Option<Arc<str>>,
    /// Without a token, mutating requests are served only on a loopback address.
    loopback: bool,
}

impl AdminAuth {
    /// The rule for an endpoint bound to `addr` with an optional bearer `token`.
    pub fn new(addr: SocketAddr, token: Option<String>) -> Self {
        Self {
            token: token.map(Arc::from),
            loopback: addr.ip().is_loopback(),
        }
    }

    /// Whether mutating routes are served at all (false: off the loopback without a token).
    pub fn mutating_allowed(&self) -> bool {
        self.token.is_some() || self.loopback
    }

    /// `None` when `req` may change state, else the refusal.
    fn refuse<B>(&self, req: &Request<B>) -> Option<(StatusCode, String)> {
        let Some(token) = &self.token else {
            return (!self.loopback).then(|| {
                (
                    StatusCode::FORBIDDEN,
                    "mutating routes are off: the admin endpoint listens beyond the loopback \
                     without a token (set --admin-token-file or ORDERLY_ADMIN_TOKEN)\n"
                        .to_owned(),
                )
            });
        };
        let given = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if constant_time_eq(given.trim().as_bytes(), token.as_bytes()) {
            None
        } else {
            Some((
                StatusCode::UNAUTHORIZED,
                "missing or wrong token: send Authorization: Bearer <token>\n".to_owned(),
            ))
        }
    }
}

/// Compares without stopping at the first difference, so the answer time does not tell how much
/// of a guessed token was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Installs the Prometheus recorder (the process's only one) and describes every metric to it.
pub fn install_metrics() -> Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .context("installing the Prometheus recorder")?;
    crate::reference::describe_metrics();
    let h = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            h.run_upkeep();
        }
    });
    Ok(handle)
}

/// Binds `addr` (failing at once if it cannot) and serves the endpoints on a spawned task.
pub async fn serve(
    addr: SocketAddr,
    metrics: PrometheusHandle,
    ready: Readiness,
    parked: ParkedSessions,
    auth: AdminAuth,
) -> Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on --admin-addr {addr}"))?;
    tracing::info!(%addr, "admin endpoint: /metrics /healthz /readyz /parked");
    if !auth.mutating_allowed() {
        tracing::warn!(%addr, "POST /parked/release is refused: the admin endpoint listens beyond the loopback without a token (--admin-token-file or ORDERLY_ADMIN_TOKEN)");
    }
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (metrics, ready, parked, auth) =
                (metrics.clone(), ready.clone(), parked.clone(), auth.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let body = route(&req, &metrics, &ready, &parked, &auth);
                    async move { Ok::<_, Infallible>(body) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(())
}

/// The parked sessions as JSON lines-friendly objects.
fn parked_json(parked: &ParkedSessions) -> String {
    let list: Vec<serde_json::Value> = parked
        .list()
        .into_iter()
        .map(|p| {
            serde_json::json!({
                "topic": p.partition.topic.as_ref(),
                "partition": p.partition.partition,
                "session": String::from_utf8_lossy(&p.session),
                "since_offset": p.since_offset,
                "parked_records": p.parked_records,
            })
        })
        .collect();
    serde_json::Value::Array(list).to_string() + "\n"
}

/// Releases a session in the parked-session store (so the next owner of its partition does not
/// park it again), then here.
fn release_durably(parked: &ParkedSessions, tp: orderly_engine::TopicPartition, session: Bytes) {
    let parked = parked.clone();
    tokio::spawn(async move {
        if let Err(e) = parked.release_durably(&tp, &session).await {
            tracing::error!(partition = %tp, error = %e, "releasing a parked session failed");
        }
    });
}

/// `topic=T&partition=N&session=S`, or `all=true` (no percent-decoding: ids with `&` or `=` need
/// release-all). Anything else, an empty query too, releases nothing.
fn release(parked: &ParkedSessions, query: &str) -> (StatusCode, String) {
    if query == "all=true" {
        let list = parked.list();
        for p in &list {
            release_durably(parked, p.partition.clone(), p.session.clone());
        }
        return (StatusCode::OK, format!("released {}\n", list.len()));
    }
    let mut topic = None;
    let mut partition = None;
    let mut session = None;
    for kv in query.split('&') {
        match kv.split_once('=') {
            Some(("topic", v)) => topic = Some(v),
            Some(("partition", v)) => partition = v.parse::<i32>().ok(),
            Some(("session", v)) => session = Some(v),
            _ => {}
        }
    }
    match (topic, partition, session) {
        (Some(t), Some(p), Some(s)) => {
            let tp = orderly_engine::TopicPartition::new(t, p);
            if parked
                .list()
                .iter()
                .any(|p| p.partition == tp && p.session == s.as_bytes())
            {
                release_durably(parked, tp, Bytes::copy_from_slice(s.as_bytes()));
                (StatusCode::OK, "released 1\n".into())
            } else {
                (StatusCode::NOT_FOUND, "no such parked session\n".into())
            }
        }
        _ => (
            StatusCode::BAD_REQUEST,
            "POST /parked/release?topic=T&partition=N&session=S, or /parked/release?all=true\n"
                .into(),
        ),
    }
}

fn route<B>(
    req: &Request<B>,
    metrics: &PrometheusHandle,
    ready: &Readiness,
    parked: &ParkedSessions,
    auth: &AdminAuth,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let (status, text) = match path {
        "/parked" => (StatusCode::OK, parked_json(parked)),
        "/parked/release" if req.method() == hyper::Method::POST => auth
            .refuse(req)
            .unwrap_or_else(|| release(parked, req.uri().query().unwrap_or(""))),
        "/parked/release" => (
            StatusCode::METHOD_NOT_ALLOWED,
            "use POST /parked/release\n".to_owned(),
        ),
        "/metrics" => (StatusCode::OK, metrics.render()),
        "/healthz" => (StatusCode::OK, "ok\n".to_owned()),
        "/readyz" => match ready.check() {
            None if !ready.fetch.owns_any() => (
                StatusCode::OK,
                "ready (standby: in the group, no partitions assigned)\n".to_owned(),
            ),
            None => (StatusCode::OK, "ready\n".to_owned()),
            Some(why) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
            ),
        },
        _ => (
            StatusCode::NOT_FOUND,
            "not found (try /metrics, /healthz, /readyz, /parked)\n".to_owned(),
        ),
    };
    let mut r = Response::new(Full::new(Bytes::from(text)));
    *r.status_mut() = status;
    r
}

#[cfg(test)]
mod tests {
    use orderly_engine::TopicPartition;
    use orderly_engine::tracker::OldestInFlight;

    use super::*;

    fn part(n: i32, oldest_age: Option<Duration>) -> PartitionStats {
        PartitionStats {
            partition: TopicPartition::new("t", n),
            commit_offset: 10,
            high_watermark: Some(20),
            lag: Some(10),
            in_flight: 3,
            buffered_bytes: 300,
            paused: false,
            oldest_in_flight: oldest_age.map(|age| OldestInFlight {
                offset: 10,
                age,
                session_hash: 1,
            }),
        }
    }

    const BOUND: Duration = Duration::from_secs(10);

    #[test]
    fn ready_needs_an_assignment_fetch_answers_and_no_stuck_partition() {
        let stuck = Some(Duration::from_secs(60));
        let ok = [part(0, Some(Duration::from_secs(1))), part(1, None)];
        assert_eq!(not_ready(true, true, &ok, &[], stuck, BOUND), None);

        let why = not_ready(false, true, &[], &[], stuck, BOUND).unwrap();
        assert!(why.contains("not in the group"), "{why}");

        // A member in the group without partitions (one replica more than partitions) is a
        // healthy standby: ready.
        assert_eq!(not_ready(true, true, &[], &[], stuck, BOUND), None);

        let silent = [
            Unanswered {
                partition: TopicPartition::new("t", 1),
                since: Duration::from_secs(12),
            },
            Unanswered {
                partition: TopicPartition::new("t", 0),
                since: Duration::from_secs(11),
            },
        ];
        let why = not_ready(true, true, &ok, &silent, stuck, BOUND).unwrap();
        assert!(
            why.starts_with("not fetching: no fetch response for t-1 in 12.0s")
                && why.contains("2 partition(s)"),
            "{why}"
        );

        let held = [part(0, Some(Duration::from_secs(61))), part(1, None)];
        let why = not_ready(true, true, &held, &[], stuck, BOUND).unwrap();
        assert!(why.contains("stuck at offset 10"), "{why}");
        // While the handler's endpoint is down, records wait for it: that is the reason given,
        // not a stuck record.
        let why = not_ready(true, false, &held, &[], stuck, BOUND).unwrap();
        assert!(why.starts_with("handler unavailable"), "{why}");
        // Without a stuck timeout an old record is not a readiness problem.
        assert_eq!(not_ready(true, true, &held, &[], None, BOUND), None);
    }
}

#[cfg(test)]
mod release_tests {
    use super::*;

    #[test]
    fn an_empty_release_query_releases_nothing() {
        let parked = ParkedSessions::default();
        let (status, text) = release(&parked, "");
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        let (status, text) = release(&parked, "all=true");
        assert_eq!((status, text.as_str()), (StatusCode::OK, "released 0\n"));
    }

    fn call(auth: &AdminAuth, method: &str, path: &str, bearer: Option<&str>) -> StatusCode {
        let mut b = Request::builder().method(method).uri(path);
        if let Some(t) = bearer {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        let req = b.body(()).unwrap();
        let metrics = PrometheusBuilder::new().build_recorder().handle();
        let ready = Readiness {
            stats: EngineStats::default(),
            fetch: Arc::new(FetchState::default()),
            stuck: None,
            fetch_bound: FETCH_ANSWER_BOUND,
        };
        route(&req, &metrics, &ready, &ParkedSessions::default(), auth).status()
    }

    #[test]
    fn mutating_routes_need_the_token_or_the_loopback() {
        let release = "/parked/release?all=true";
        let loopback: SocketAddr = "127.0.0.1:9898".parse().unwrap();
        let open: SocketAddr = "0.0.0.0:9898".parse().unwrap();
        // Loopback without a token: served.
        let a = AdminAuth::new(loopback, None);
        assert_eq!(call(&a, "POST", release, None), StatusCode::OK);
        // Beyond the loopback without a token: refused; reading stays open.
        let a = AdminAuth::new(open, None);
        assert!(!a.mutating_allowed());
        assert_eq!(call(&a, "POST", release, None), StatusCode::FORBIDDEN);
        assert_eq!(call(&a, "POST", release, Some("x")), StatusCode::FORBIDDEN);
        assert_eq!(call(&a, "GET", "/parked", None), StatusCode::OK);
        assert_eq!(call(&a, "GET", "/healthz", None), StatusCode::OK);
        // With a token, anywhere: only the right bearer token is served.
        for addr in [open, loopback] {
            let a = AdminAuth::new(addr, Some("s3cret".into()));
            assert_eq!(call(&a, "POST", release, None), StatusCode::UNAUTHORIZED);
            assert_eq!(
                call(&a, "POST", release, Some("s3cre")),
                StatusCode::UNAUTHORIZED
            );
            assert_eq!(call(&a, "POST", release, Some("s3cret")), StatusCode::OK);
            assert_eq!(
                call(&a, "POST", "/parked/release", Some("s3cret")),
                StatusCode::BAD_REQUEST
            );
            assert_eq!(call(&a, "GET", "/parked", None), StatusCode::OK);
        }
        assert_eq!(
            call(&AdminAuth::new(loopback, None), "GET", release, None),
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
}
