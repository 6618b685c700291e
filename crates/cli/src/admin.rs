//! The admin endpoint of `orderly consume`: `/metrics` (Prometheus), `/healthz`, `/readyz`, `/parked` (parked sessions; POST `/parked/release`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use orderly_engine::{EngineStats, ParkedSessions};
use tokio::net::TcpListener;

/// Why the consumer is not ready, or `None` when it is: it holds an assignment and no partition's
/// oldest record has been holding the watermark back past the stuck timeout.
pub fn not_ready(stats: &EngineStats, stuck: Option<Duration>) -> Option<String> {
    let parts = stats.partitions();
    if parts.is_empty() {
        return Some("no partitions assigned (yet)".into());
    }
    if let Some(limit) = stuck {
        for p in &parts {
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
    stats: EngineStats,
    parked: ParkedSessions,
    stuck: Option<Duration>,
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
            let (metrics, stats, parked) = (metrics.clone(), stats.clone(), parked.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                    let body = route(&req, &metrics, &stats, &parked, stuck);
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
    stats: &EngineStats,
    parked: &ParkedSessions,
    stuck: Option<Duration>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let (status, text) = match path {
        "/parked" => (StatusCode::OK, parked_json(parked)),
        "/parked/release" if req.method() == hyper::Method::POST => {
            release(parked, req.uri().query().unwrap_or(""))
        }
        "/metrics" => (StatusCode::OK, metrics.render()),
        "/healthz" => (StatusCode::OK, "ok\n".to_owned()),
        "/readyz" => match not_ready(stats, stuck) {
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
