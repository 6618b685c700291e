//! A Kafka-aware TCP proxy for tests: counts requests by API key and holds chosen ones back.
//!
//! Clients bootstrap through the proxy. Broker addresses in responses (Metadata, FindCoordinator)
//! are rewritten to the proxy's port, so every later connection goes through it too. A held API's
//! requests are parked until [`KafkaProxy::release`]; the requests behind them on the same
//! connection pass (the client matches responses by correlation id), so one slow request type can
//! be simulated without stalling the rest of the connection. [`KafkaProxy::lose_responses`]
//! forwards requests but swallows their responses and closes the connection: a request the broker
//! carried out whose answer the client never sees.
//!
//! A rewritten API's responses pass through a test-supplied function first
//! ([`KafkaProxy::rewrite_responses`]): a fake broker that answers like the real one except where
//! the test says otherwise (a corrupt batch, an unknown codec).
//!
//! Limits: plaintext listeners only, one upstream broker whose advertised host is the host of the
//! address given to [`KafkaProxy::start`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::{Error, Result};

/// Rewrites one response: gets the request's API version and the response frame after the
/// correlation id (response header tags, if any, then the body); returns the replacement.
pub type Rewrite = Arc<dyn Fn(i16, &[u8]) -> Option<Vec<u8>> + Send + Sync>;

#[derive(Default)]
struct State {
    /// Response rewrites by API key.
    rewrites: HashMap<i16, Rewrite>,
    /// Requests received per API key.
    seen: HashMap<i16, usize>,
    /// API keys whose requests are held.
    held_keys: Vec<i16>,
    /// Parked requests: the connection's writer and the frame.
    parked: Vec<(i16, mpsc::UnboundedSender<Vec<u8>>, Vec<u8>)>,
    /// Responses still to lose, per API key.
    lose: HashMap<i16, usize>,
    /// Responses lost so far, per API key.
    lost: HashMap<i16, usize>,
    /// New client connections still to close at once (before any byte is read).
    refuse: usize,
}

/// A running proxy; it stops when dropped.
pub struct KafkaProxy {
    addr: String,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for KafkaProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaProxy")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl KafkaProxy {
    /// Listens on the loopback interface in front of `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> Result<KafkaProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| kafka_err("proxy bind", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| kafka_err("proxy address", e))?
            .port();
        let (host, up_port) = upstream.rsplit_once(':').ok_or_else(|| Error::Failed {
            what: format!("proxy upstream {upstream:?}"),
            detail: "expected host:port".into(),
        })?;
        let up_port: i32 = up_port.parse().map_err(|_| Error::Failed {
            what: format!("proxy upstream {upstream:?}"),
            detail: "bad port".into(),
        })?;
        // The broker's own address as it appears in responses: the host string, then the port
        // as a big-endian int32. Only the port changes, so frame lengths stay as they are.
        let mut pattern = host.as_bytes().to_vec();
        pattern.extend_from_slice(&up_port.to_be_bytes());
        let rewrite = Arc::new((pattern, i32::from(port).to_be_bytes()));
        let state = Arc::new(Mutex::new(State::default()));
        let upstream = upstream.to_string();
        let st = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let refused = {
                    let mut st = st.lock().unwrap_or_else(PoisonError::into_inner);
                    let r = st.refuse > 0;
                    st.refuse = st.refuse.saturating_sub(1);
                    r
                };
                if refused {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(serve(client, server, st.clone(), rewrite.clone()));
            }
        });
        Ok(KafkaProxy {
            addr: format!("127.0.0.1:{port}"),
            state,
            task,
        })
    }

    /// The address to bootstrap from.
    pub fn bootstrap(&self) -> &str {
        &self.addr
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// From now on, requests with `api_key` are parked until [`KafkaProxy::release`].
    pub fn hold(&self, api_key: i16) {
        self.lock().held_keys.push(api_key);
    }

    /// Stops holding `api_key` and forwards the parked requests.
    pub fn release(&self, api_key: i16) {
        let mut st = self.lock();
        st.held_keys.retain(|k| *k != api_key);
        Self::forward(&mut st, api_key);
    }

    /// Forwards the requests with `api_key` parked now, and keeps holding the later ones.
    pub fn let_through(&self, api_key: i16) {
        Self::forward(&mut self.lock(), api_key);
    }

    fn forward(st: &mut State, api_key: i16) {
        let parked = std::mem::take(&mut st.parked);
        for (key, to, frame) in parked {
            if key == api_key {
                let _ = to.send(frame);
            } else {
                st.parked.push((key, to, frame));
            }
        }
    }

    /// The next `n` requests with `api_key` reach the broker, but their responses are dropped and
    /// the client's connection is closed instead (a lost response: the client cannot know whether
    /// the broker carried the request out).
    pub fn lose_responses(&self, api_key: i16, n: usize) {
        *self.lock().lose.entry(api_key).or_insert(0) += n;
    }

    /// Lets every later response to `api_key` requests through again (undoes
    /// [`KafkaProxy::lose_responses`]).
    pub fn stop_losing(&self, api_key: i16) {
        self.lock().lose.remove(&api_key);
    }

    /// The next `n` client connections are accepted and closed at once, like a proxy whose
    /// upstream is gone: the client's connect succeeds, its first request (ApiVersions) fails.
    pub fn close_new_connections(&self, n: usize) {
        self.lock().refuse += n;
    }

    /// Responses to `api_key` requests dropped so far by [`KafkaProxy::lose_responses`].
    pub fn lost(&self, api_key: i16) -> usize {
        self.lock().lost.get(&api_key).copied().unwrap_or(0)
    }

    /// From now on, responses to `api_key` requests pass through `f` (which returns the new
    /// frame after the correlation id, or `None` to leave it alone).
    pub fn rewrite_responses(&self, api_key: i16, f: Rewrite) {
        self.lock().rewrites.insert(api_key, f);
    }

    /// Stops rewriting responses to `api_key`.
    pub fn stop_rewriting(&self, api_key: i16) {
        self.lock().rewrites.remove(&api_key);
    }

    /// Requests with `api_key` received so far (held or not).
    pub fn seen(&self, api_key: i16) -> usize {
        self.lock().seen.get(&api_key).copied().unwrap_or(0)
    }

    /// Requests with `api_key` parked right now.
    pub fn held_now(&self, api_key: i16) -> usize {
        self.lock()
            .parked
            .iter()
            .filter(|(k, _, _)| *k == api_key)
            .count()
    }
}

impl Drop for KafkaProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn kafka_err(what: &str, e: std::io::Error) -> Error {
    Error::Kafka {
        what: what.to_string(),
        detail: e.to_string(),
    }
}

/// Reads one size-prefixed Kafka frame (size included).
async fn read_frame(r: &mut (impl AsyncReadExt + Unpin)) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await.ok()?;
    let n = usize::try_from(i32::from_be_bytes(len)).ok()?;
    let mut frame = vec![0u8; 4 + n];
    frame[..4].copy_from_slice(&len);
    r.read_exact(&mut frame[4..]).await.ok()?;
    Some(frame)
}

async fn serve(
    client: TcpStream,
    server: TcpStream,
    state: Arc<Mutex<State>>,
    rewrite: Arc<(Vec<u8>, [u8; 4])>,
) {
    let (mut client_r, mut client_w) = client.into_split();
    let (mut server_r, mut server_w) = server.into_split();
    // Client to broker: one writer fed by a channel, so parked frames can be sent later.
    let (to_server, mut frames) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(async move {
        while let Some(f) = frames.recv().await {
            if server_w.write_all(&f).await.is_err() {
                return;
            }
        }
    });
    // Correlation ids of this connection's requests whose responses are to be lost, with their key.
    let doomed: Arc<Mutex<HashMap<i32, i16>>> = Arc::default();
    let doomed_w = doomed.clone();
    // Correlation id -> (API key, version) of the requests in flight, for response rewrites.
    let inflight: Arc<Mutex<HashMap<i32, (i16, i16)>>> = Arc::default();
    let requests = inflight.clone();
    let st_r = state.clone();
    let reader = tokio::spawn(async move {
        let state = st_r;
        while let Some(frame) = read_frame(&mut client_r).await {
            let key = frame
                .get(4..6)
                .map_or(-1, |b| i16::from_be_bytes([b[0], b[1]]));
            if let (Some(v), Some(c)) = (frame.get(6..8), frame.get(8..12)) {
                requests
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(
                        i32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                        (key, i16::from_be_bytes([v[0], v[1]])),
                    );
            }
            let mut st = state.lock().unwrap_or_else(PoisonError::into_inner);
            *st.seen.entry(key).or_insert(0) += 1;
            if let Some(n) = st.lose.get_mut(&key).filter(|n| **n > 0) {
                *n -= 1;
                if let Some(c) = frame.get(8..12) {
                    doomed_w
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(i32::from_be_bytes([c[0], c[1], c[2], c[3]]), key);
                }
            }
            if st.held_keys.contains(&key) {
                st.parked.push((key, to_server.clone(), frame));
            } else if to_server.send(frame).is_err() {
                return;
            }
        }
    });
    // Broker to client: responses, with the broker's address rewritten to the proxy's.
    let (pattern, port) = (&rewrite.0, rewrite.1);
    while let Some(mut frame) = read_frame(&mut server_r).await {
        let correlation = frame
            .get(4..8)
            .map_or(-1, |c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        let lost = doomed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&correlation);
        if let Some(key) = lost {
            // Lose it: close the connection without a word.
            *state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .lost
                .entry(key)
                .or_insert(0) += 1;
            break;
        }
        let mut i = 0;
        while i + pattern.len() <= frame.len() {
            if frame[i..i + pattern.len()] == pattern[..] {
                let at = i + pattern.len() - 4;
                frame[at..at + 4].copy_from_slice(&port);
                i += pattern.len();
            } else {
                i += 1;
            }
        }
        let api = inflight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&correlation);
        let f = api.and_then(|(key, version)| {
            let st = state.lock().unwrap_or_else(PoisonError::into_inner);
            st.rewrites.get(&key).map(|f| (f.clone(), version))
        });
        if let Some(new) = f.and_then(|(f, version)| f(version, frame.get(8..).unwrap_or_default()))
        {
            let len = i32::try_from(4 + new.len()).unwrap_or(i32::MAX);
            let mut out = Vec::with_capacity(8 + new.len());
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&correlation.to_be_bytes());
            out.extend_from_slice(&new);
            frame = out;
        }
        if client_w.write_all(&frame).await.is_err() {
            break;
        }
    }
    reader.abort();
    writer.abort();
}
