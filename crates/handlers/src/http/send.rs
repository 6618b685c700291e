//! Sending a request and reading its answer: permits, the endpoint circuit, stale pooled
//! connections, timeouts, and what an answer means for one record.

use super::*;

/// Whether `e` says the request never left the client on a pooled connection the endpoint had
/// closed (hyper cancelled it before writing a byte), so it never reached the service. Any other
/// failure after the request was handed to the connection may have reached it.
fn stale_connection(e: &hyper_util::client::legacy::Error) -> bool {
    let reused = e
        .connect_info()
        .and_then(Uses::of)
        .is_some_and(|u| u.reused());
    if !reused {
        return false;
    }
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        if s.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        src = s.source();
    }
    false
}

/// Reads `body` until its end, `deadline` or [`BODY_DRAIN`] bytes, keeping the first `keep`.
/// Returns the kept bytes and whether they are the whole body.
async fn read_body(
    mut body: hyper::body::Incoming,
    deadline: tokio::time::Instant,
    keep: usize,
) -> (Bytes, bool) {
    use hyper::body::Body as _;
    if body.is_end_stream() {
        // No body (`content-length: 0`, 204): no timer needed.
        return (Bytes::new(), true);
    }
    let mut kept = BytesMut::new();
    let mut total = 0usize;
    let read = tokio::time::timeout_at(deadline, async {
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            if let Ok(data) = frame.into_data() {
                total += data.len();
                let room = keep.saturating_sub(kept.len());
                kept.extend_from_slice(&data[..data.len().min(room)]);
                if total > BODY_DRAIN {
                    return false;
                }
            }
        }
        true
    })
    .await;
    let ended = matches!(read, Ok(true));
    (kept.freeze(), ended && total <= keep)
}

impl HttpHandler {
    /// Sends one request and reads its answer: the status and headers within the timeout (an
    /// `Err` when it runs out), the body within the same limit (cut short, `complete` is false).
    /// Over HTTP/1.1 the limit starts once the connection stands (`fresh`: a new one, not a
    /// pooled one); making it has its own limits, and running out of them is a connection
    /// failure. Over HTTP/2 hyper connects inside the request, so the limit starts with the
    /// request and the connection's limits are added to it.
    async fn exchange(
        &self,
        p: Prepared,
        fresh: bool,
    ) -> Result<Result<Answer, NoAnswer>, tokio::time::error::Elapsed> {
        let no_answer = |f: h1::Failure| NoAnswer {
            connect: matches!(f, h1::Failure::Connect(_)),
            stale: matches!(f, h1::Failure::Stale(_)),
            lapsed: matches!(f, h1::Failure::Lapsed),
            text: f.to_string(),
        };
        match &self.transport {
            Transport::H1(pool) => {
                let conn = match pool.connection(fresh).await {
                    Ok(c) => c,
                    Err(f) => return Ok(Err(no_answer(f))),
                };
                let deadline = tokio::time::Instant::now() + self.config.timeout;
                let head =
                    match tokio::time::timeout_at(deadline, pool.send(conn, &p.head, &p.body))
                        .await?
                    {
                        Ok(head) => head,
                        Err(f) => return Ok(Err(no_answer(f))),
                    };
                let h1::Head {
                    status,
                    headers,
                    rest,
                } = head;
                let keep = if self.body_matters(&headers) {
                    BODY_DRAIN
                } else {
                    BODY_KEEP
                };
                let (body, complete) = pool.body(rest, deadline, keep, BODY_DRAIN).await;
                Ok(Ok(Answer {
                    status,
                    headers,
                    body,
                    complete,
                }))
            }
            Transport::H2(client) => {
                let deadline = tokio::time::Instant::now()
                    + self.config.timeout
                    + self.config.connect_timeout
                    + self.config.tls_handshake_timeout;
                let gate = Arc::new(Gate::default());
                let mut req = Request::new(GatedBody::new(p.body, gate.clone()));
                *req.method_mut() = hyper::Method::POST;
                *req.uri_mut() = self.uri.clone();
                *req.headers_mut() = p.head.into_map();
                let mut request = std::pin::pin!(client.request(req));
                // Until hyper's connection task takes the request (see `gate`), each poll asks
                // whether the ownership still holds: the wait for a connection can span a freeze.
                let sent = std::future::poll_fn(|cx| {
                    if gate.is_fresh() && !orderly_engine::ownership_holds() && gate.withdraw() {
                        return std::task::Poll::Ready(None);
                    }
                    request.as_mut().poll(cx).map(Some)
                });
                let Some(sent) = tokio::time::timeout_at(deadline, sent).await? else {
                    return Ok(Err(NoAnswer {
                        connect: false,
                        stale: false,
                        lapsed: true,
                        text: h1::LAPSED.to_owned(),
                    }));
                };
                match sent {
                    Ok(resp) => {
                        if let Some(u) = resp.extensions().get::<Uses>() {
                            u.answered();
                        }
                        let (parts, body) = resp.into_parts();
                        let keep = if self.body_matters(&parts.headers) {
                            BODY_DRAIN
                        } else {
                            BODY_KEEP
                        };
                        let (body, complete) = read_body(body, deadline, keep).await;
                        Ok(Ok(Answer {
                            status: parts.status,
                            headers: parts.headers,
                            body,
                            complete,
                        }))
                    }
                    Err(e) => Ok(Err(NoAnswer {
                        connect: e.is_connect(),
                        stale: stale_connection(&e),
                        lapsed: false,
                        text: error_text(&e),
                    })),
                }
            }
        }
    }

    /// Sends the request `build` makes (again for each try): waits for a permit, holds the
    /// attempt while the endpoint as a whole is down (the circuit, when configured; a wait the
    /// engine's attempt timeout does not count, [`orderly_engine::waiting_for_endpoint`]), sends
    /// again once, at once and on a fresh connection, when a pooled connection turns out closed
    /// before the request could leave, and reads the answer within the timeout. An `Err` is the
    /// transient failure of the attempt (timeout, connection error, or the partition's ownership
    /// lapsed before the request was written: each transport asks right before it hands the
    /// request to the connection, after every wait).
    pub(super) async fn send(
        &self,
        mut build: impl FnMut() -> Prepared,
    ) -> Result<Answer, HandlerError> {
        let mut resends = 0;
        loop {
            let pass = match &self.circuit {
                Some(c) => orderly_engine::waiting_for_endpoint(c.admit()).await,
                None => Pass::Normal,
            };
            let mut guard = ProbeGuard {
                circuit: self.circuit.as_ref().filter(|_| pass == Pass::Probe),
            };
            let req = build();
            // A queue for a request slot is a wait for the endpoint's capacity, not work on the
            // record.
            let mut permit = orderly_engine::waiting_for_endpoint(self.permits.acquire())
                .await
                .map_err(|_| HandlerError::transient("handler closed"))?;
            let t0 = Instant::now();
            let answer = self.exchange(req, resends > 0).await;
            // The waits for the circuit, a permit and a connection can span a freeze of the
            // process past the group's session timeout: the record may be another member's by
            // now, and nothing was sent. That says nothing about the endpoint: neither the limit
            // nor the circuit learns of it.
            if matches!(&answer, Ok(Err(e)) if e.lapsed) {
                return Err(HandlerError::transient(h1::LAPSED));
            }
            let rtt = t0.elapsed();
            // The limit learns from answers and timeouts (load shedding, 429 and 503, lowers
            // it); a connection error says nothing about the endpoint's queue.
            match &answer {
                Ok(Ok(a)) if matches!(a.status.as_u16(), 429 | 503) => permit.overloaded(),
                Ok(Ok(_)) => permit.sample(rtt),
                Err(_) => permit.sample(self.config.timeout),
                Ok(Err(_)) => {}
            }
            drop(permit);
            self.request_seconds
                .get_or_init(|| metrics::histogram!("orderly_http_request_seconds"))
                .record(rtt.as_secs_f64());
            match answer {
                Ok(Ok(a)) => {
                    guard.answered();
                    self.responses(a.status).increment(1);
                    if let Some(c) = &self.circuit {
                        let retried = self.config.classes.retries(a.status);
                        if retried {
                            if let Some(w) = retry_after(&a.headers, SystemTime::now()) {
                                // The service asked its client to slow down: every request waits.
                                c.hold(
                                    tokio::time::Instant::now()
                                        + w.min(self.config.max_retry_after),
                                );
                            }
                        }
                        if retried && matches!(a.status.as_u16(), 502..=504) {
                            if c.on_endpoint_failure(false, pass) {
                                // The endpoint is down: this attempt is held, not failed.
                                continue;
                            }
                        } else {
                            c.on_answer();
                        }
                    }
                    return Ok(a);
                }
                Err(_) => {
                    return Err(HandlerError::transient(format!(
                        "HTTP request timed out after {:?}",
                        self.config.timeout
                    )));
                }
                Ok(Err(e)) if e.stale && resends < STALE_RESENDS => {
                    // The request never reached the service: send it again now, on a fresh
                    // connection.
                    resends += 1;
                    tracing::debug!(error = %e.text, "pooled connection closed by the endpoint; request sent again");
                }
                Ok(Err(e)) if e.connect && self.circuit.is_some() => {
                    guard.answered();
                    if let Some(c) = &self.circuit {
                        c.on_endpoint_failure(true, pass);
                    }
                    self.warn_unreachable(&e.text);
                }
                Ok(Err(e)) => {
                    return Err(HandlerError::transient(format!(
                        "HTTP request failed: {}",
                        e.text
                    )));
                }
            }
        }
    }

    /// The outcome of an answer to one record: its status class, and for a transient one the
    /// `Retry-After` waited out here (a wait for the endpoint, which the engine's attempt timeout
    /// does not count).
    pub(super) async fn outcome(&self, answer: &Answer) -> Result<(), HandlerError> {
        let location = answer
            .headers
            .get(hyper::header::LOCATION)
            .map(HeaderValue::as_bytes);
        let outcome = self
            .config
            .classes
            .classify(answer.status, location, &answer.body);
        if matches!(outcome, Err(HandlerError::Transient { .. })) {
            if let Some(wait) = retry_after(&answer.headers, SystemTime::now()) {
                let wait = tokio::time::sleep(wait.min(self.config.max_retry_after));
                orderly_engine::waiting_for_endpoint(wait).await;
            }
        }
        outcome
    }

    /// Whether a response's body is read whole (up to [`BODY_DRAIN`]): it may be a reply or a
    /// batch answer (JSON).
    fn body_matters(&self, h: &HeaderMap) -> bool {
        self.config.reply_with_body
            || h.contains_key(replies::TOPIC_HEADER)
            || h.get(hyper::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.contains("json"))
    }

    /// The replies a 2xx answer to one record carries (see [`HttpHandler`]). A body that
    /// cannot be read whole or parsed is a permanent error: the record is dead-lettered rather
    /// than its replies dropped.
    pub(super) fn replies(&self, answer: &Answer) -> Result<Vec<Reply>, HandlerError> {
        let h = &answer.headers;
        let text = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let json = h
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with(replies::CONTENT_TYPE));
        let topic = text(replies::TOPIC_HEADER);
        let body_reply =
            topic.is_some() || (self.config.reply_with_body && !answer.body.is_empty());
        if !json && !body_reply {
            return Ok(Vec::new());
        }
        if !answer.complete {
            return Err(HandlerError::permanent(format!(
                "HTTP {}: the reply body is larger than {BODY_DRAIN} bytes or was not read to its end",
                answer.status
            )));
        }
        if json {
            return replies::parse(&answer.body)
                .map_err(|e| HandlerError::permanent(format!("HTTP {}: {e}", answer.status)));
        }
        let mut reply = Reply::new(answer.body.clone());
        reply.topic = topic.filter(|t| !t.is_empty());
        reply.key = text(replies::KEY_HEADER).map(Bytes::from);
        Ok(vec![reply])
    }

    /// The response counter for `status`, resolved once per status code (a label lookup per
    /// request would cost a hash and an allocation in the recorder).
    fn responses(&self, status: StatusCode) -> &metrics::Counter {
        let code = status.as_u16();
        let slot = usize::from(code.saturating_sub(100)).min(self.responses.len() - 1);
        self.responses[slot].get_or_init(|| {
            metrics::counter!("orderly_http_responses_total", "status" => status.as_str().to_owned())
        })
    }

    fn warn_unreachable(&self, e: &dyn std::fmt::Display) {
        // At most one warning every 10 s, however many records are waiting.
        let now = self.started.elapsed().as_secs() + 10;
        let last = self.last_unreachable_warn.load(Ordering::Relaxed);
        if now >= last + 10
            && self
                .last_unreachable_warn
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(url = %self.shown_url, error = %e, "handler endpoint unreachable; records wait and are retried");
        }
    }
}

/// Gives a probe back to the circuit if its attempt ends without an answer (timed out,
/// cancelled), so another request may probe.
struct ProbeGuard<'a> {
    circuit: Option<&'a Circuit>,
}

impl ProbeGuard<'_> {
    /// The probe got its answer; the circuit was told.
    fn answered(&mut self) {
        self.circuit = None;
    }
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.circuit {
            c.probe_abandoned();
        }
    }
}
