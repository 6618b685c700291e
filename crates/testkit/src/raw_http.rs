//! Reading HTTP/1.1 requests off a raw connection, for test servers that decide byte by byte
//! what they answer (or do not).

use tokio::io::{AsyncRead, AsyncReadExt};

/// Reads a request's head, up to and including the empty line; `None` when the stream ends
/// first.
pub async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte).await {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    Some(buf)
}

/// Reads one request, its head and its `content-length` body; its bytes, or `None` when the
/// stream ends first.
pub async fn read_request<S: AsyncRead + Unpin>(s: &mut S) -> Option<Vec<u8>> {
    let mut buf = read_head(s).await?;
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.ok()?;
    buf.extend_from_slice(&body);
    Some(buf)
}
