//! The webhook's HTTP/1.1 client: a pool of keep-alive connections, each request written and its
//! answer read by the attempt's own future.
//!
//! A general client (hyper-util's pooled client) runs each connection as a task of its own and
//! hands every request and answer across a channel to it: two task wake-ups per record, often on
//! the other core. Here the attempt that checked a connection out drives it: it writes the
//! request in one write (then flushes it: TLS may keep the last records buffered until then),
//! reads the answer with [`httparse`] into the connection's own buffer, and puts the connection
//! back. Requests are never pipelined; a connection carries one request at a time, so a
//! connection's bytes always belong to the attempt that holds it.
//!
//! While the request is being written, whatever the endpoint sends is read too: a final answer
//! that comes before the request is written whole (a `413` or `401` to a large body, from a
//! server that stops reading or closes) ends the writing and is the request's answer; its
//! connection is not used again.
//!
//! Framing follows RFC 9112 §6.3: no body for 1xx, 204 and 304; `transfer-encoding: chunked`;
//! `content-length` (digits only); otherwise the body runs to the end of the connection. A `101`
//! is no answer (no upgrade is ever asked for): the attempt fails and the connection is closed.
//! A connection goes back to the pool only when its answer was read to its end, nothing follows
//! it, the request was written whole, the answer did not carry both `transfer-encoding` and
//! `content-length` (RFC 9112 §6.1), and neither side asked to close it (`connection: close`,
//! or HTTP/1.0 without `keep-alive`).

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{HeaderMap, StatusCode, Uri};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::connect::{Connector, RawIo};

/// Why a request was not sent: the partition's ownership lapsed while it waited (a freeze of the
/// process past the group's session timeout, say), so the record may be another member's by now.
pub(crate) const LAPSED: &str =
    "the partition's ownership lapsed while the request waited to be sent: not sent";
/// Longest response head (status line and headers) read.
const MAX_HEAD: usize = 64 << 10;
/// Longest chunk-size or trailer line of a chunked body.
const MAX_LINE: usize = 4 << 10;
/// A request body up to this size is copied behind its head so both go in one write.
const INLINE_BODY: usize = 16 << 10;
/// A connection's read buffer grows to this size at least on each read.
const READ_CHUNK: usize = 4 << 10;

/// A request's headers.
pub(crate) enum RequestHeaders {
    Map(HeaderMap),
    /// `name: value\r\n` lines, ready for an HTTP/1.1 request head.
    Lines(Vec<u8>),
}

impl RequestHeaders {
    /// The headers as a map (for a client that takes one): the lines form is parsed back.
    pub(crate) fn into_map(self) -> HeaderMap {
        match self {
            Self::Map(h) => h,
            Self::Lines(lines) => {
                let mut h = HeaderMap::new();
                for line in lines.split(|&b| b == b'\n') {
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    let Some(colon) = line.iter().position(|&b| b == b':') else {
                        continue;
                    };
                    let value = line[colon + 1..]
                        .strip_prefix(b" ")
                        .unwrap_or(&line[colon + 1..]);
                    if let (Ok(n), Ok(v)) = (
                        HeaderName::from_bytes(&line[..colon]),
                        HeaderValue::from_bytes(value),
                    ) {
                        h.append(n, v);
                    }
                }
                h
            }
        }
    }
}

/// Why a request got no answer.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No connection could be made (refused, unreachable, connect timeout, TLS handshake).
    Connect(String),
    /// A pooled connection turned out closed before any byte of the request could be written:
    /// the endpoint closed it while it was idle, so the request never reached the service.
    Stale(String),
    /// The connection failed after the request went out, or the answer is not HTTP.
    Broken(String),
    /// The partition's ownership lapsed while the request waited for its connection: nothing
    /// was written.
    Lapsed,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connect(e) => write!(f, "cannot connect: {e}"),
            Self::Stale(e) => write!(f, "pooled connection closed by the endpoint: {e}"),
            Self::Broken(e) => f.write_str(e),
            Self::Lapsed => f.write_str(LAPSED),
        }
    }
}

/// The status and headers of an answer, with the connection it came on (its body still to read).
pub(crate) struct Head {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub rest: Rest,
}

/// A connection checked out for one request: from the pool, or just made.
pub(crate) struct Checked {
    conn: Conn,
    pooled: bool,
}

/// The connection an answer came on, with how its body ends.
pub(crate) struct Rest {
    conn: Conn,
    framing: Framing,
    reusable: bool,
}

#[derive(Clone, Copy)]
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

/// One keep-alive connection and the bytes read from it but not yet used.
struct Conn {
    io: RawIo,
    buf: BytesMut,
    /// The request being written (kept to be reused).
    out: Vec<u8>,
    /// Answers it carried.
    answers: u64,
    /// When it went back to the pool.
    idle_since: Instant,
}

impl Conn {
    /// Whether the idle connection is still open and silent: the endpoint has neither closed
    /// it nor sent anything unasked (some servers send a `408` before closing an idle
    /// connection). Costs no system call unless the connection became readable while idle.
    fn usable(&mut self) -> bool {
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        matches!(
            Pin::new(&mut self.io).poll_read(&mut cx, &mut buf),
            Poll::Pending
        )
    }

    /// Reads more bytes into the buffer; `Ok(0)` at the end of the stream.
    async fn fill(&mut self) -> io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK {
            self.buf.reserve(READ_CHUNK);
        }
        self.io.read_buf(&mut self.buf).await
    }
}

/// The keep-alive connections to one endpoint.
pub(crate) struct Pool {
    connector: Connector,
    uri: Uri,
    /// `host` header value: the URL's authority without its userinfo.
    host: HeaderValue,
    /// The request target: the URL's path and query.
    target: String,
    idle: Mutex<VecDeque<Conn>>,
    max_idle: usize,
    idle_timeout: Duration,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("max_idle", &self.max_idle)
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

impl Pool {
    pub(crate) fn new(
        connector: Connector,
        uri: Uri,
        max_idle: usize,
        idle_timeout: Duration,
    ) -> Self {
        let host = uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
            .unwrap_or_else(|| HeaderValue::from_static("localhost"));
        let target = uri
            .path_and_query()
            .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
        Self {
            connector,
            uri,
            host,
            target,
            idle: Mutex::new(VecDeque::new()),
            max_idle: max_idle.max(1),
            idle_timeout,
        }
    }

    /// The most recently used idle connection that has not been idle too long; those that have
    /// are closed.
    fn checkout(&self) -> Option<Conn> {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while idle
            .front()
            .is_some_and(|c| now.duration_since(c.idle_since) >= self.idle_timeout)
        {
            idle.pop_front();
        }
        while let Some(mut c) = idle.pop_back() {
            if c.usable() {
                return Some(c);
            }
        }
        None
    }

    fn checkin(&self, mut conn: Conn) {
        conn.idle_since = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() >= self.max_idle {
            idle.pop_front();
        }
        idle.push_back(conn);
    }

    async fn connect(&self) -> Result<Conn, Failure> {
        let io = self
            .connector
            .connect_io(self.uri.clone())
            .await
            .map_err(|e| Failure::Connect(super::connect::error_text(&*e)))?;
        Ok(Conn {
            io,
            buf: BytesMut::with_capacity(READ_CHUNK),
            out: Vec::with_capacity(1024),
            answers: 0,
            idle_since: Instant::now(),
        })
    }

    /// The bytes of a POST with `headers` and `body`: request line, `host`, `content-length`,
    /// the headers, and the body when it is small.
    fn encode(&self, head: &RequestHeaders, body: &Bytes, out: &mut Vec<u8>) {
        out.extend_from_slice(b"POST ");
        out.extend_from_slice(self.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
        out.extend_from_slice(self.host.as_bytes());
        out.extend_from_slice(b"\r\ncontent-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        match head {
            RequestHeaders::Lines(lines) => out.extend_from_slice(lines),
            RequestHeaders::Map(headers) => {
                for (name, value) in headers {
                    if name == hyper::header::HOST
                        || name == hyper::header::CONTENT_LENGTH
                        || name == hyper::header::TRANSFER_ENCODING
                    {
                        continue;
                    }
                    out.extend_from_slice(name.as_str().as_bytes());
                    out.extend_from_slice(b": ");
                    out.extend_from_slice(value.as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
            }
        }
        out.extend_from_slice(b"\r\n");
        if body.len() <= INLINE_BODY {
            out.extend_from_slice(body);
        }
    }

    /// A connection for one request: the most recent idle one (unless `fresh`), else a new one
    /// (made within the connector's connect and TLS handshake timeouts; failing, or running out
    /// of them, is [`Failure::Connect`]).
    pub(crate) async fn connection(&self, fresh: bool) -> Result<Checked, Failure> {
        if !fresh {
            if let Some(conn) = self.checkout() {
                return Ok(Checked { conn, pooled: true });
            }
        }
        Ok(Checked {
            conn: self.connect().await?,
            pooled: false,
        })
    }

    /// Sends a POST on `checked` and reads the answer's status and headers. A pooled connection
    /// that turns out closed before any byte of the request could be written gives
    /// [`Failure::Stale`]: the caller may send again, on a fresh connection (a closed one never
    /// returns to the pool); once a byte went out the request may have reached the service, and
    /// a connection that ends without an answer is [`Failure::Broken`]. Right before the request
    /// is written, after any wait for the connection, the call's ownership of its partition is
    /// asked ([`orderly_engine::ownership_holds`]): once it lapsed nothing is written
    /// ([`Failure::Lapsed`]) and the connection goes back to the pool.
    pub(crate) async fn send(
        &self,
        checked: Checked,
        head: &RequestHeaders,
        body: &Bytes,
    ) -> Result<Head, Failure> {
        let Checked { mut conn, pooled } = checked;
        if !orderly_engine::ownership_holds() {
            self.checkin(conn);
            return Err(Failure::Lapsed);
        }
        let mut out = std::mem::take(&mut conn.out);
        out.clear();
        self.encode(head, body, &mut out);
        let tail: &[u8] = if body.len() > INLINE_BODY { body } else { &[] };
        conn.buf.clear();
        let sent = write_request(&mut conn, &out, tail).await;
        conn.out = out;
        let whole = match sent {
            Ok(Sent::Whole) => true,
            Ok(Sent::Early) => false,
            Err(f) if pooled && f.written == 0 && closed(&f.error) => {
                return Err(Failure::Stale(f.error.to_string()));
            }
            Err(f) => return Err(Failure::Broken(format!("HTTP request failed: {}", f.error))),
        };
        loop {
            let head = read_head(&mut conn).await.map_err(|e| match e {
                HeadError::Io(e) if conn.buf.is_empty() => Failure::Broken(format!(
                    "the connection ended before an answer (the request may have reached the service): {e}"
                )),
                HeadError::Io(e) => Failure::Broken(format!("HTTP answer cut short: {e}")),
                HeadError::Invalid(e) => Failure::Broken(format!("invalid HTTP answer: {e}")),
            })?;
            if head.status == StatusCode::SWITCHING_PROTOCOLS {
                return Err(Failure::Broken(
                    "invalid HTTP answer: 101 Switching Protocols, but no upgrade was asked for"
                        .into(),
                ));
            }
            if head.status.is_informational() {
                // 100 Continue, 103 Early Hints: the final answer follows.
                continue;
            }
            let (framing, close) = framing(head.status, &head.headers)
                .map_err(|e| Failure::Broken(format!("invalid HTTP answer: {e}")))?;
            return Ok(Head {
                rest: Rest {
                    framing,
                    reusable: head.keep_alive && whole && !close,
                    conn,
                },
                status: head.status,
                headers: head.headers,
            });
        }
    }

    /// Reads the body of an answer until its end or `deadline`, keeping its first `keep` bytes and
    /// reading at most `drain`; returns them and whether they are the whole body. The connection
    /// goes back to the pool when the body was read to its end and the connection may be kept.
    pub(crate) async fn body(
        &self,
        rest: Rest,
        deadline: Instant,
        keep: usize,
        drain: usize,
    ) -> (Bytes, bool) {
        let Rest {
            mut conn,
            framing,
            reusable,
        } = rest;
        let mut body = Body {
            kept: BytesMut::new(),
            keep,
            total: 0,
            drain,
        };
        let read = match framing {
            Framing::None => Ok(true),
            _ => tokio::time::timeout_at(deadline, body.read(&mut conn, framing))
                .await
                .unwrap_or(Ok(false)),
        };
        let ended = matches!(read, Ok(true));
        conn.answers += 1;
        if ended && reusable && conn.buf.is_empty() && !matches!(framing, Framing::UntilClose) {
            self.checkin(conn);
        }
        let complete = ended && body.total <= keep;
        (body.kept.freeze(), complete)
    }
}

/// How writing a request ended.
#[derive(Debug, PartialEq, Eq)]
enum Sent {
    /// Written whole and flushed.
    Whole,
    /// A final answer's head (or bytes that are no HTTP answer) came before the request was
    /// written whole: it is in the connection's buffer, and the rest of the request is not sent.
    Early,
}

/// Why a request could not be written, and how many of its bytes were.
#[derive(Debug)]
struct WriteFailure {
    error: io::Error,
    written: usize,
}

/// Writes `a` then `b` on `conn`, gathered into as few writes as the socket takes, then flushes
/// them. Whenever the endpoint takes no more for now, what it sent is read into the connection's
/// buffer: a final answer there ends the writing ([`Sent::Early`]). After a write error, the
/// answer the endpoint may have sent before it closed is read too.
async fn write_request(conn: &mut Conn, mut a: &[u8], mut b: &[u8]) -> Result<Sent, WriteFailure> {
    let mut written = 0;
    let mut reading = true;
    let wrote = std::future::poll_fn(|cx| {
        loop {
            let io = Pin::new(&mut conn.io);
            let step = if a.is_empty() && b.is_empty() {
                match io.poll_flush(cx) {
                    Poll::Ready(r) => return Poll::Ready(r.map(|()| Sent::Whole)),
                    Poll::Pending => Poll::Pending,
                }
            } else if a.is_empty() {
                io.poll_write(cx, b)
            } else if b.is_empty() {
                io.poll_write(cx, a)
            } else {
                io.poll_write_vectored(cx, &[io::IoSlice::new(a), io::IoSlice::new(b)])
            };
            match step {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    written += n;
                    let from_a = n.min(a.len());
                    a = &a[from_a..];
                    b = &b[n - from_a..];
                    continue;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
            // The endpoint takes no more for now: it may have answered already.
            if !reading {
                return Poll::Pending;
            }
            let mut chunk = [0u8; READ_CHUNK];
            let mut got = ReadBuf::new(&mut chunk);
            match Pin::new(&mut conn.io).poll_read(cx, &mut got) {
                Poll::Ready(Ok(())) if !got.filled().is_empty() => {
                    conn.buf.extend_from_slice(got.filled());
                    if final_head_buffered(&conn.buf) {
                        return Poll::Ready(Ok(Sent::Early));
                    }
                }
                // The end of its answers, or an error the write meets too.
                Poll::Ready(_) => {
                    reading = false;
                    return Poll::Pending;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    })
    .await;
    match wrote {
        Ok(sent) => Ok(sent),
        Err(error) => {
            // A server that answers early and closes makes the write fail; its answer may be
            // in the socket before the close.
            while !final_head_buffered(&conn.buf) {
                if !matches!(conn.fill().await, Ok(n) if n > 0) {
                    return Err(WriteFailure { error, written });
                }
            }
            Ok(Sent::Early)
        }
    }
}

/// Whether `buf` starts with a final answer's complete head after any interim (1xx) heads, or
/// with bytes that are no HTTP answer: either way the request need not be written further.
fn final_head_buffered(buf: &[u8]) -> bool {
    let mut at = 0;
    loop {
        match parse_head(&buf[at..]) {
            Ok(Some((n, head)))
                if head.status.is_informational()
                    && head.status != StatusCode::SWITCHING_PROTOCOLS =>
            {
                at += n;
            }
            Ok(Some(_)) | Err(_) => return true,
            Ok(None) => return false,
        }
    }
}

/// Whether `e` says the peer closed the connection.
fn closed(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}

struct ParsedHead {
    status: StatusCode,
    headers: HeaderMap,
    keep_alive: bool,
}

enum HeadError {
    Io(io::Error),
    Invalid(String),
}

/// Reads one response head from `conn`, leaving what follows it in the buffer.
async fn read_head(conn: &mut Conn) -> Result<ParsedHead, HeadError> {
    loop {
        if !conn.buf.is_empty() {
            if let Some((n, head)) = parse_head(&conn.buf)? {
                conn.buf.advance(n);
                return Ok(head);
            }
            if conn.buf.len() > MAX_HEAD {
                return Err(HeadError::Invalid(format!(
                    "the response head is longer than {MAX_HEAD} bytes"
                )));
            }
        }
        match conn.fill().await {
            Ok(0) => {
                return Err(HeadError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before the answer's head ended",
                )));
            }
            Ok(_) => {}
            Err(e) => return Err(HeadError::Io(e)),
        }
    }
}

/// Parses a complete head at the start of `buf`: its length and contents, or `None` when more
/// bytes are needed.
fn parse_head(buf: &[u8]) -> Result<Option<(usize, ParsedHead)>, HeadError> {
    let mut small = [httparse::EMPTY_HEADER; 32];
    let mut large;
    let mut resp = httparse::Response::new(&mut small);
    let parsed = match resp.parse(buf) {
        Err(httparse::Error::TooManyHeaders) => {
            large = vec![httparse::EMPTY_HEADER; 512];
            resp = httparse::Response::new(&mut large);
            resp.parse(buf)
        }
        other => other,
    };
    let n = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(HeadError::Invalid(e.to_string())),
    };
    let status = resp
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or_else(|| HeadError::Invalid("no status code".into()))?;
    let mut headers = HeaderMap::with_capacity(resp.headers.len());
    let mut close = false;
    let mut keep_alive = false;
    for h in resp.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| HeadError::Invalid(format!("invalid header name {:?}", h.name)))?;
        let value = HeaderValue::from_bytes(h.value)
            .map_err(|_| HeadError::Invalid(format!("invalid value of header {}", h.name)))?;
        if name == hyper::header::CONNECTION {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
        headers.append(name, value);
    }
    let keep_alive = match resp.version {
        Some(1) => !close,
        _ => keep_alive && !close,
    };
    Ok(Some((
        n,
        ParsedHead {
            status,
            headers,
            keep_alive,
        },
    )))
}

/// How the body of an answer with `status` and `headers` ends (RFC 9112 §6.3), and whether its
/// connection must be closed after it: an answer with both `transfer-encoding` and
/// `content-length` is read by the former, and its connection is not used again (§6.1).
fn framing(status: StatusCode, headers: &HeaderMap) -> Result<(Framing, bool), String> {
    if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok((Framing::None, false));
    }
    if let Some(te) = headers
        .get_all(hyper::header::TRANSFER_ENCODING)
        .iter()
        .next_back()
    {
        let last = te.as_bytes().rsplit(|&b| b == b',').next().unwrap_or(b"");
        let close = headers.contains_key(hyper::header::CONTENT_LENGTH);
        return Ok(if last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
            (Framing::Chunked, close)
        } else {
            (Framing::UntilClose, true)
        });
    }
    let mut length = None;
    for v in headers.get_all(hyper::header::CONTENT_LENGTH) {
        for part in v.as_bytes().split(|&b| b == b',') {
            let digits = part.trim_ascii();
            let n = std::str::from_utf8(digits)
                .ok()
                .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|d| d.parse::<u64>().ok())
                .ok_or_else(|| format!("invalid content-length {v:?}"))?;
            if length.is_some_and(|l| l != n) {
                return Err("conflicting content-length values".into());
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(0) => (Framing::None, false),
        Some(n) => (Framing::Length(n), false),
        None => (Framing::UntilClose, true),
    })
}

/// A body being read: the first `keep` bytes are kept, reading stops after `drain`.
struct Body {
    kept: BytesMut,
    keep: usize,
    total: usize,
    drain: usize,
}

impl Body {
    /// Takes `data`; `false` once more than `drain` bytes came.
    fn take(&mut self, data: &[u8]) -> bool {
        self.total += data.len();
        let room = self.keep.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&data[..data.len().min(room)]);
        self.total <= self.drain
    }

    /// Reads the body from `conn`: `Ok(true)` at its end, `Ok(false)` when it was longer than
    /// `drain` (the rest is left unread).
    async fn read(&mut self, conn: &mut Conn, framing: Framing) -> io::Result<bool> {
        match framing {
            Framing::None => Ok(true),
            Framing::Length(n) => self.fixed(conn, n).await,
            Framing::UntilClose => loop {
                let data = conn.buf.split();
                if !self.take(&data) {
                    return Ok(false);
                }
                if conn.fill().await? == 0 {
                    return Ok(true);
                }
            },
            Framing::Chunked => loop {
                let line = read_line(conn).await?;
                let size = chunk_size(&line)?;
                if size == 0 {
                    // Trailers, up to the empty line.
                    while !read_line(conn).await?.is_empty() {}
                    return Ok(true);
                }
                if !self.fixed(conn, size).await? {
                    return Ok(false);
                }
                if !read_line(conn).await?.is_empty() {
                    return Err(invalid("a chunk is longer than its size"));
                }
            },
        }
    }

    /// Reads exactly `n` bytes of body.
    async fn fixed(&mut self, conn: &mut Conn, mut n: u64) -> io::Result<bool> {
        loop {
            let have = usize::try_from(n).map_or(conn.buf.len(), |n| n.min(conn.buf.len()));
            if have > 0 {
                let data = conn.buf.split_to(have);
                n -= have as u64;
                if !self.take(&data) {
                    return Ok(false);
                }
            }
            if n == 0 {
                return Ok(true);
            }
            if conn.fill().await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed inside the body",
                ));
            }
        }
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_owned())
}

/// Reads one CRLF-terminated line (without its end) from `conn`.
async fn read_line(conn: &mut Conn) -> io::Result<BytesMut> {
    let mut searched = 0;
    loop {
        if let Some(i) = conn.buf[searched..].windows(2).position(|w| w == b"\r\n") {
            let mut line = conn.buf.split_to(searched + i + 2);
            line.truncate(searched + i);
            return Ok(line);
        }
        searched = conn.buf.len().saturating_sub(1);
        if conn.buf.len() > MAX_LINE {
            return Err(invalid("a chunk line is too long"));
        }
        if conn.fill().await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed inside a chunked body",
            ));
        }
    }
}

/// The size of a chunk from its size line (`1a;name=value`): hex digits from the line's start,
/// then only whitespace before the extensions.
fn chunk_size(line: &[u8]) -> io::Result<u64> {
    let hex = line
        .split(|&b| b == b';')
        .next()
        .unwrap_or(b"")
        .trim_ascii_end();
    if hex.is_empty() || hex.len() > 15 {
        return Err(invalid("invalid chunk size"));
    }
    let mut n = 0u64;
    for &c in hex {
        let d = char::from(c)
            .to_digit(16)
            .ok_or_else(|| invalid("invalid chunk size"))?;
        n = n * 16 + u64::from(d);
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(raw: &[u8]) -> (usize, ParsedHead) {
        match parse_head(raw) {
            Ok(Some(h)) => h,
            _ => panic!("no complete head in {:?}", String::from_utf8_lossy(raw)),
        }
    }

    #[test]
    fn heads_parse_with_their_keep_alive() {
        let (n, h) = parsed(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 2\r\n\r\nrest");
        assert_eq!(n, 52);
        assert_eq!(h.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(h.headers["retry-after"], "2");
        assert!(h.keep_alive);
        assert!(
            !parsed(b"HTTP/1.1 200 OK\r\nConnection: Close\r\n\r\n")
                .1
                .keep_alive
        );
        assert!(!parsed(b"HTTP/1.0 200 OK\r\n\r\n").1.keep_alive);
        assert!(
            parsed(b"HTTP/1.0 200 OK\r\nconnection: keep-alive\r\n\r\n")
                .1
                .keep_alive
        );
        assert!(matches!(parse_head(b"HTTP/1.1 200 OK\r\nfoo"), Ok(None)));
        assert!(matches!(
            parse_head(b"SMTP ready\r\n\r\n"),
            Err(HeadError::Invalid(_))
        ));
    }

    #[test]
    fn a_head_with_many_headers_parses() {
        let mut raw = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..100 {
            raw.extend_from_slice(format!("x-h{i}: {i}\r\n").as_bytes());
        }
        raw.extend_from_slice(b"\r\n");
        assert_eq!(parsed(&raw).1.headers.len(), 100);
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (n, v) in pairs {
                m.append(
                    HeaderName::from_bytes(n.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
            m
        };
        let f =
            |s: u16, pairs: &[(&str, &str)]| framing(StatusCode::from_u16(s).unwrap(), &h(pairs));
        assert!(matches!(
            f(204, &[("content-length", "5")]),
            Ok((Framing::None, false))
        ));
        assert!(matches!(f(304, &[]), Ok((Framing::None, false))));
        assert!(matches!(
            f(200, &[("content-length", "0")]),
            Ok((Framing::None, false))
        ));
        assert!(matches!(
            f(200, &[("content-length", "7")]),
            Ok((Framing::Length(7), false))
        ));
        assert!(matches!(
            f(200, &[("content-length", "7, 7")]),
            Ok((Framing::Length(7), false))
        ));
        assert!(f(200, &[("content-length", "7"), ("content-length", "8")]).is_err());
        assert!(f(200, &[("content-length", "-1")]).is_err());
        assert!(matches!(
            f(
                200,
                &[
                    ("transfer-encoding", "gzip, chunked"),
                    ("content-length", "3")
                ]
            ),
            Ok((Framing::Chunked, true))
        ));
        assert!(matches!(
            f(200, &[("transfer-encoding", "gzip")]),
            Ok((Framing::UntilClose, true))
        ));
        assert!(matches!(f(200, &[]), Ok((Framing::UntilClose, true))));
        assert!(matches!(
            f(200, &[("transfer-encoding", "chunked")]),
            Ok((Framing::Chunked, false))
        ));
        for invalid in ["+5", "-0", "0x5", "", "5 5"] {
            assert!(
                f(200, &[("content-length", invalid)]).is_err(),
                "{invalid:?}"
            );
        }
    }

    #[test]
    fn header_lines_parse_back_into_a_map() {
        let lines =
            b"content-type: application/json\r\nkafka-h-x: a: b\r\nkafka-h-x: \r\nx-t: 1\r\n";
        let h = RequestHeaders::Lines(lines.to_vec()).into_map();
        assert_eq!(h.len(), 4);
        assert_eq!(h["content-type"], "application/json");
        let x: Vec<_> = h.get_all("kafka-h-x").iter().collect();
        assert_eq!(x, ["a: b", ""]);
        assert_eq!(h["x-t"], "1");
    }

    #[test]
    fn chunk_sizes() {
        assert_eq!(chunk_size(b"1a").unwrap(), 26);
        assert_eq!(chunk_size(b"FF;ext=1").unwrap(), 255);
        assert_eq!(chunk_size(b"0").unwrap(), 0);
        assert!(chunk_size(b"").is_err());
        assert!(chunk_size(b"xyz").is_err());
        assert!(chunk_size(b"1000000000000000").is_err());
        assert_eq!(chunk_size(b"1a \t;ext").unwrap(), 26);
        assert!(chunk_size(b" 1a").is_err());
        assert!(chunk_size(b"\t1a").is_err());
        assert!(chunk_size(b"+1a").is_err());
    }

    /// A TLS peer that reads slowly behind small socket buffers: the request's last TLS records
    /// are still in the client's buffer when its last write returns, and reach the server only
    /// when the request is flushed.
    #[tokio::test]
    async fn an_https_request_reaches_a_slow_reader_whole() {
        use orderly_protocol::tls::rustls::ServerConfig;
        use orderly_protocol::tls::rustls::pki_types::pem::PemObject;
        use orderly_protocol::tls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
        use orderly_testkit::https::cert;
        use std::sync::Arc;

        const BODY: usize = 2 << 20;
        let provider = orderly_protocol::tls::TlsProvider::detect()
            .crypto_provider()
            .unwrap();
        let chain = CertificateDer::pem_file_iter(cert("server.pem"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(cert("server.key")).unwrap();
        let server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(8).unwrap();
        let addr = listener.local_addr().unwrap();
        let head = b"POST /in HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 2097152\r\n\r\n";
        let expected = head.len() + BODY;
        let reader = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut tls = acceptor.accept(tcp).await.unwrap();
            let mut total = 0;
            let mut buf = vec![0u8; 4096];
            while total < expected {
                match tls.read(&mut buf).await.unwrap() {
                    0 => break,
                    n => total += n,
                }
                // Reads at a pace far below the client's writes.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            (total, tls)
        });

        let ca = cert("ca.pem");
        let files = super::super::connect::TlsFiles {
            ca_file: Some(&ca),
            client_cert: None,
            client_key: None,
            h2: false,
        };
        let client = super::super::connect::tls_client(&files).unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_send_buffer_size(4096).unwrap();
        let tcp = socket.connect(addr).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(client))
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .unwrap();
        let mut conn = Conn {
            io: RawIo::Tls(Box::new(tls)),
            buf: BytesMut::new(),
            out: Vec::new(),
            answers: 0,
            idle_since: Instant::now(),
        };
        let body = vec![b'x'; BODY];
        assert_eq!(
            write_request(&mut conn, head, &body).await.unwrap(),
            Sent::Whole
        );
        let (total, _tls) = tokio::time::timeout(Duration::from_secs(120), reader)
            .await
            .expect("the server read the whole request")
            .unwrap();
        assert_eq!(total, expected);
        drop(conn);
    }
}
