//! The workload: the live producer of the topic and the HTTP server the consumers deliver to.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Result;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use orderly_protocol::{ConnectionConfig, ConnectionPool, ProduceRecord, Producer, ProducerConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::observe::{Delivery, Shared};
use super::{ChaosOptions, TOPIC, lock};

/// The outcome a record's value asks for.
pub(super) fn kind_of(value: &[u8]) -> &str {
    let text = std::str::from_utf8(value).unwrap_or("");
    text.split('|')
        .find_map(|f| f.strip_prefix("kind="))
        .unwrap_or("ok")
}

/// Serves the consumers' HTTP deliveries, recording each.
pub(super) async fn serve_http(shared: Arc<Shared>) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| handle(shared.clone(), req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(addr)
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let start = shared.now();
    let consumer = req.uri().path().trim_start_matches('/').to_string();
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let partition: i32 = header("orderly-partition").parse().unwrap_or(-1);
    let offset: i64 = header("orderly-offset").parse().unwrap_or(-1);
    let session = header("orderly-session");
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let n = {
        let mut a = lock(&shared.attempts);
        let e = a.entry((partition, offset)).or_insert(0);
        *e += 1;
        *e
    };
    let kind = kind_of(&body);
    let status: u16 = match kind {
        "perm" => 422,
        k if k.starts_with('t') => {
            let fails: u32 = k[1..].parse().unwrap_or(0);
            if n <= fails { 503 } else { 200 }
        }
        _ => 200,
    };
    // A little work, varying by record, so deliveries overlap.
    let pause = u64::try_from(offset.rem_euclid(3)).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(pause)).await;
    let end = shared.now();
    lock(&shared.deliveries).push(Delivery {
        consumer,
        partition,
        offset,
        session,
        start,
        end,
        status,
    });
    // In exactly-once mode the 2xx body is the record's reply: its coordinates.
    let reply = if shared.reply && (200..300).contains(&status) {
        Bytes::from(format!("{partition}@{offset}"))
    } else {
        Bytes::new()
    };
    let mut resp = Response::new(Full::new(reply));
    *resp.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    Ok(resp)
}

/// The most records a partition's writer sends in one batch.
const WRITE_BATCH_MAX: usize = 500;

/// Produces the live workload until `stop_producing`, recording each acknowledgement.
pub(super) async fn produce(shared: Arc<Shared>, bootstrap: String, opts: ChaosOptions) {
    let pool = Arc::new(ConnectionPool::new(
        bootstrap.split(',').map(str::to_string).collect(),
        ConnectionConfig::default(),
    ));
    let producer = Arc::new(Producer::new(
        pool,
        ProducerConfig {
            retries: 40,
            ..ProducerConfig::default()
        },
    ));
    // One writer per partition, fed in order: a session's records stay in order (a session maps
    // to one partition), and a partition whose leader is down holds up only its own records, so
    // the live load on the surviving partitions goes on (what the recovery figures measure). A
    // writer sends what queued up while its last batch was in flight as one batch, so a slow
    // broker (a busy machine) costs latency, not a backlog the end of the run must wait out.
    let partitions = usize::try_from(opts.partitions.max(1)).unwrap_or(1);
    let mut queues = Vec::with_capacity(partitions);
    let mut writers = Vec::new();
    for p in 0..partitions {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ProduceRecord>();
        queues.push(tx);
        let shared = shared.clone();
        let producer = producer.clone();
        let partition = i32::try_from(p).unwrap_or(0);
        writers.push(tokio::spawn(async move {
            let mut batch = Vec::new();
            while let Some(rec) = rx.recv().await {
                batch.clear();
                batch.push(rec);
                while batch.len() < WRITE_BATCH_MAX {
                    match rx.try_recv() {
                        Ok(rec) => batch.push(rec),
                        Err(_) => break,
                    }
                }
                match producer.send_batch(TOPIC, partition, &batch).await {
                    Ok(o) => {
                        let at = shared.now();
                        let mut acked = lock(&shared.acked);
                        for i in 0..batch.len() {
                            let offset = if o < 0 { o } else { o + i as i64 };
                            acked.push((partition, offset, at));
                        }
                    }
                    Err(e) => {
                        let n = shared
                            .produce_errors
                            .fetch_add(batch.len() as u64, Ordering::Relaxed);
                        if n < 5 {
                            eprintln!("[chaos] produce failed (record not acknowledged): {e}");
                        }
                    }
                }
            }
        }));
    }
    let queues = Arc::new(queues);
    let tasks = 4usize;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let shared = shared.clone();
        let queues = queues.clone();
        let opts = opts.clone();
        handles.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(opts.seed ^ (0x9e37_79b9 * (t as u64 + 1)));
            let mine: Vec<usize> = (0..opts.sessions).filter(|s| s % tasks == t).collect();
            let mut seq = vec![0u64; mine.len()];
            let per_task = f64::from(opts.rate.max(1)) / tasks as f64;
            let interval = Duration::from_secs_f64(1.0 / per_task);
            let mut next = tokio::time::Instant::now();
            let mut i = 0usize;
            while !shared.stop_producing.load(Ordering::Relaxed) && !mine.is_empty() {
                let slot = rng.random_range(0..mine.len());
                let s = mine[slot];
                seq[slot] += 1;
                let roll: f64 = rng.random();
                let kind = if roll < 0.01 {
                    "perm".to_string()
                } else if roll < 0.05 {
                    format!("t{}", rng.random_range(1..=3))
                } else {
                    "ok".to_string()
                };
                let key = format!("s-{s:04}");
                let partition = orderly_protocol::partitioner::partition_for_key(
                    key.as_bytes(),
                    opts.partitions.max(1),
                );
                let rec = ProduceRecord {
                    key: Some(Bytes::from(key.clone())),
                    value: Some(Bytes::from(format!(
                        "{key}|n={}|kind={kind}|{}",
                        seq[slot],
                        "x".repeat(64)
                    ))),
                    headers: Vec::new(),
                    timestamp: None,
                };
                if let Some(q) = usize::try_from(partition).ok().and_then(|p| queues.get(p)) {
                    let _ = q.send(rec);
                }
                i += 1;
                next += interval;
                tokio::time::sleep_until(next).await;
                if i % 1000 == 0 {
                    next = next.max(tokio::time::Instant::now());
                }
            }
        }));
    }
    for h in handles {
        let _ = h.await;
    }
    // The generators are done: close the queues and let the writers finish what they hold.
    drop(queues);
    for w in writers {
        let _ = w.await;
    }
}
