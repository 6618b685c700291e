//! A TCP fault proxy (pure Rust on tokio) in front of one broker port: pass, drop, stall or reset connections on command.
//!
//! One proxy listens on the port a broker's `EXTERNAL` listener *advertises* (see
//! [`crate::cluster`]) and forwards to the port that listener really serves, so every
//! connection a client opens to that broker, bootstrap or learned from Metadata, crosses it.
//! Faults, each applying to the live connections and to the ones opened while it lasts:
//! - [`FaultProxy::reset`]: every live connection is aborted with a TCP RST on both sides.
//! - [`FaultProxy::drop_for`]: every live connection is closed (FIN), and new ones are accepted and
//!   closed at once until the period ends.
//! - [`FaultProxy::stall_for`]: no byte moves in either direction until the period ends (the sockets
//!   stay open, so only a client's request timeout notices); afterwards bytes flow again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::{Error, Result};

/// What the live connections must do, changed by each fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Faults {
    /// Bumped by [`FaultProxy::reset`].
    reset_epoch: u64,
    /// Bumped by [`FaultProxy::drop_for`].
    close_epoch: u64,
    /// New connections are closed at once before this.
    refuse_until: Option<Instant>,
    /// No bytes move before this.
    stall_until: Option<Instant>,
}

/// Counters of what the proxy did.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections accepted and forwarded.
    pub connections: AtomicU64,
    /// Connections aborted with RST.
    pub resets: AtomicU64,
    /// Connections closed or refused by a drop.
    pub dropped: AtomicU64,
    /// Bytes forwarded (both directions).
    pub bytes: AtomicU64,
}

/// A running proxy; dropping it stops accepting and ends every connection.
#[derive(Debug)]
pub struct FaultProxy {
    listen: SocketAddr,
    target: SocketAddr,
    faults: watch::Sender<Faults>,
    stats: Arc<ProxyStats>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `listen` and forwards each connection to `target`.
    pub async fn start(listen: SocketAddr, target: SocketAddr) -> Result<FaultProxy> {
        let listener = TcpListener::bind(listen).await.map_err(|e| Error::Failed {
            what: format!("fault proxy: binding {listen}"),
            detail: e.to_string(),
        })?;
        let (tx, rx) = watch::channel(Faults::default());
        let stats = Arc::new(ProxyStats::default());
        let task = tokio::spawn(accept_loop(listener, target, rx, stats.clone()));
        Ok(FaultProxy {
            listen,
            target,
            faults: tx,
            stats,
            task,
        })
    }

    /// Where clients connect.
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }

    /// Where the proxy forwards to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// What the proxy did so far.
    pub fn stats(&self) -> &ProxyStats {
        &self.stats
    }

    /// Aborts every live connection with a TCP RST.
    pub fn reset(&self) {
        self.faults.send_modify(|f| f.reset_epoch += 1);
    }

    /// Closes every live connection and refuses new ones (accept, then close) for `period`.
    pub fn drop_for(&self, period: Duration) {
        self.faults.send_modify(|f| {
            f.close_epoch += 1;
            f.refuse_until = Some(Instant::now() + period);
        });
    }

    /// Moves no byte on any connection, live or new, for `period`.
    pub fn stall_for(&self, period: Duration) {
        self.faults
            .send_modify(|f| f.stall_until = Some(Instant::now() + period));
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        // Ends the connection tasks too: they see the sender gone.
        self.faults.send_modify(|f| f.close_epoch += 1);
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    faults: watch::Receiver<Faults>,
    stats: Arc<ProxyStats>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let now = Instant::now();
        let refusing = faults.borrow().refuse_until.is_some_and(|t| now < t);
        if refusing {
            stats.dropped.fetch_add(1, Ordering::Relaxed);
            drop(client);
            continue;
        }
        stats.connections.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(connection(client, target, faults.clone(), stats.clone()));
    }
}

/// How a connection ended by a fault.
enum End {
    Reset,
    Close,
    Done,
}

async fn connection(
    mut client: TcpStream,
    target: SocketAddr,
    mut faults: watch::Receiver<Faults>,
    stats: Arc<ProxyStats>,
) {
    let Ok(Ok(mut server)) =
        tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(target)).await
    else {
        // The broker is down: the client sees its connection closed, as with a dead broker.
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let start = *faults.borrow_and_update();
    let end = {
        let (mut cr, mut cw) = client.split();
        let (mut sr, mut sw) = server.split();
        let up = pump(&mut cr, &mut sw, faults.clone(), &stats);
        let down = pump(&mut sr, &mut cw, faults.clone(), &stats);
        let watch_faults = async {
            loop {
                if faults.changed().await.is_err() {
                    return End::Close;
                }
                let f = *faults.borrow_and_update();
                if f.reset_epoch != start.reset_epoch {
                    return End::Reset;
                }
                if f.close_epoch != start.close_epoch {
                    return End::Close;
                }
            }
        };
        tokio::select! {
            _ = async { tokio::join!(up, down) } => End::Done,
            e = watch_faults => e,
        }
    };
    match end {
        End::Reset => {
            stats.resets.fetch_add(1, Ordering::Relaxed);
            let _ = client.set_zero_linger();
            let _ = server.set_zero_linger();
        }
        End::Close => {
            stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
        End::Done => {}
    }
    drop(client);
    drop(server);
}

/// Copies one direction until EOF or an error, holding bytes back while a stall lasts.
async fn pump<R, W>(r: &mut R, w: &mut W, mut faults: watch::Receiver<Faults>, stats: &ProxyStats)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = w.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        loop {
            let until = faults.borrow_and_update().stall_until;
            match until {
                Some(t) if Instant::now() < t => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(t) => {}
                        r = faults.changed() => if r.is_err() { return; },
                    }
                }
                _ => break,
            }
        }
        if w.write_all(&buf[..n]).await.is_err() {
            return;
        }
        stats
            .bytes
            .fetch_add(u64::try_from(n).unwrap_or(0), Ordering::Relaxed);
    }
}
