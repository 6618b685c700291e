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
use orderly_consumer::fetcher::{FetchState, Unanswered};
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
        if !self.fetch.owns_any() {
            return Some("no partitions assigned (yet)".into());
        }
        not_ready(
            &self.stats.partitions(),
            &self.fetch.unanswered(self.fetch_bound),
            self.stuck,
            self.fetch_bound,
        )
    }
}

/// Why the consumer is not ready, or `None` when it is: it is in the group with an assignment
/// (`parts`, the engine's view), it is fetching (no owned, unpaused partition went without a
/// fetch response for longer than `fetch_bound`: `unanswered`), and no partition's oldest
/// record has been holding the watermark back past the stuck timeout.
pub fn not_ready(
    parts: &[PartitionStats],
    unanswered: &[Unanswered],
    stuck: Option<Duration>,
    fetch_bound: Duration,
) -> Option<String> {
    if parts.is_empty() {
        return Some("no partitions assigned (yet)".into());
    }
    if let Some(u) = unanswered.first() {
        return Some(format!(
            "not fetching: no fetch response for {} in {:.1?} (bound {fetch_bound:?}; {} partition(s) affected)",
            u.partition,
            u.since,
            unanswered.len()
        ));
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

/// Installs the Prometheus recorder (the process's only one).
pub fn install_metrics() -> Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .context("installing the Prometheus recorder")?;
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
) -> Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on --admin-addr {addr}"))?;
    tracing::info!(%addr, "admin endpoint: /metrics /healthz /readyz");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (metrics, ready, parked) = (metrics.clone(), ready.clone(), parked.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let body = route(&req, &metrics, &ready, &parked);
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

/// `topic=T&partition=N&session=S` (no percent-decoding: ids with `&` or `=` need release-all).
fn release(parked: &ParkedSessions, query: &str) -> (StatusCode, String) {
    if query == "all" || query.is_empty() {
        return (
            StatusCode::OK,
            format!("released {}\n", parked.release_all()),
        );
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
            if parked.release(&tp, s.as_bytes()) {
                (StatusCode::OK, "released 1\n".into())
            } else {
                (StatusCode::NOT_FOUND, "no such parked session\n".into())
            }
        }
        _ => (
            StatusCode::BAD_REQUEST,
            "POST /parked/release?topic=T&partition=N&session=S, or /parked/release?all\n".into(),
        ),
    }
}

fn route<B>(
    req: &Request<B>,
    metrics: &PrometheusHandle,
    ready: &Readiness,
    parked: &ParkedSessions,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let (status, text) = match path {
        "/parked" => (StatusCode::OK, parked_json(parked)),
        "/parked/release" if req.method() == hyper::Method::POST => {
            release(parked, req.uri().query().unwrap_or(""))
        }
        "/metrics" => (StatusCode::OK, metrics.render()),
        "/healthz" => (StatusCode::OK, "ok\n".to_owned()),
        "/readyz" => match ready.check() {
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
        assert_eq!(not_ready(&ok, &[], stuck, BOUND), None);

        let why = not_ready(&[], &[], stuck, BOUND).unwrap();
        assert!(why.contains("no partitions assigned"), "{why}");

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
        let why = not_ready(&ok, &silent, stuck, BOUND).unwrap();
        assert!(
            why.starts_with("not fetching: no fetch response for t-1 in 12.0s")
                && why.contains("2 partition(s)"),
            "{why}"
        );

        let held = [part(0, Some(Duration::from_secs(61))), part(1, None)];
        let why = not_ready(&held, &[], stuck, BOUND).unwrap();
        assert!(why.contains("stuck at offset 10"), "{why}");
        // Without a stuck timeout an old record is not a readiness problem.
        assert_eq!(not_ready(&held, &[], None, BOUND), None);
    }
}
