//! The request for a record or a batch: body, `orderly-*` headers, extra headers, signature.

use super::*;

impl HttpHandler {
    /// The request for one attempt of one record. Over HTTP/1.1 without CloudEvents (whose
    /// record headers may replace attributes), the header lines are written straight into the
    /// request's bytes; otherwise into a header map.
    pub(super) fn request(&self, record: &Record, meta: &Meta<'_>) -> Prepared {
        let (body, content_type) = match self.config.body {
            HttpBody::Raw => (
                record.value.clone().unwrap_or_default(),
                "application/octet-stream",
            ),
            HttpBody::Json => (Envelope::new(record, meta).to_bytes(), "application/json"),
        };
        let kafka_headers = self.config.body == HttpBody::Raw && !record.headers.is_empty();
        match (&self.transport, &self.config.format) {
            (Transport::H1(_), HttpFormat::Plain) => {
                let mut w = Wire {
                    out: Vec::with_capacity(320 + 48 * record.headers.len()),
                    replaced: &self.config.headers,
                };
                w.put("content-type", content_type.as_bytes());
                meta_headers(&mut w, meta);
                if kafka_headers {
                    headers::kafka_headers(&mut w, record);
                }
                self.finish_wire(w.out, body)
            }
            (_, format) => {
                let mut h =
                    HeaderMap::with_capacity(12 + record.headers.len() + self.config.headers.len());
                h.insert(
                    hyper::header::CONTENT_TYPE,
                    HeaderValue::from_static(content_type),
                );
                meta_headers(&mut h, meta);
                if kafka_headers {
                    headers::kafka_headers(&mut h, record);
                }
                if let HttpFormat::CloudEvents(ce) = format {
                    ce.headers(&mut h, record, meta);
                }
                self.finish(h, body)
            }
        }
    }

    /// [`finish`](Self::finish) for header lines already written: the URL's credentials, the
    /// configured extra headers (orderly's headers of those names were left out) and the
    /// signature.
    fn finish_wire(&self, mut out: Vec<u8>, body: Bytes) -> Prepared {
        let line = |out: &mut Vec<u8>, name: &[u8], value: &[u8]| {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        };
        let signed = self.config.signing_key.is_some();
        if let Some(a) = &self.authorization {
            if !self
                .config
                .headers
                .iter()
                .any(|x| x.name == hyper::header::AUTHORIZATION)
            {
                line(&mut out, b"authorization", a.as_bytes());
            }
        }
        for x in &self.config.headers {
            if !(signed && x.name.as_str() == "orderly-signature") {
                line(&mut out, x.name.as_str().as_bytes(), x.value.as_bytes());
            }
        }
        if let Some(k) = &self.config.signing_key {
            let sig = k.signature_now(&body, |n| headers::line_value(&out, n));
            line(&mut out, b"orderly-signature", sig.as_bytes());
        }
        Prepared {
            head: RequestHeaders::Lines(out),
            body,
        }
    }

    /// A POST of `body` to the URL with the headers `h` plus the configured extra headers and
    /// the signature: the part of a request that does not depend on what it carries.
    fn finish(&self, mut h: HeaderMap, body: Bytes) -> Prepared {
        if let Some(a) = &self.authorization {
            h.insert(hyper::header::AUTHORIZATION, a.clone());
        }
        let mut replaced: Vec<&HeaderName> = Vec::new();
        for x in &self.config.headers {
            // The first value for a name replaces orderly's; later ones are added.
            if replaced.contains(&&x.name) {
                h.append(x.name.clone(), x.value.clone());
            } else {
                h.insert(x.name.clone(), x.value.clone());
                replaced.push(&x.name);
            }
        }
        if let Some(k) = &self.config.signing_key {
            k.sign(&mut h, &body);
        }
        Prepared {
            head: RequestHeaders::Map(h),
            body,
        }
    }
}

/// `orderly-topic`, or `invalid-topic-name` for a name HTTP cannot carry as a header value.
fn put_topic(h: &mut impl HeaderOut, topic: &str) {
    let t = topic.as_bytes();
    h.put(
        "orderly-topic",
        if headers::visible(t) {
            t
        } else {
            b"invalid-topic-name"
        },
    );
}

/// The `orderly-*` metadata headers and `traceparent` of one record.
fn meta_headers(h: &mut impl HeaderOut, meta: &Meta<'_>) {
    put_topic(h, meta.topic);
    h.put_num("orderly-partition", meta.partition);
    h.put_num("orderly-offset", meta.offset);
    h.put_num("orderly-attempt", meta.attempt);
    h.put_num("orderly-timestamp", meta.timestamp_ms);
    if let Some(s) = &meta.session {
        put_text(h, "orderly-session", "orderly-session-encoding", s);
    }
    if let Some(k) = &meta.key {
        put_text(h, "orderly-key", "orderly-key-encoding", k);
    }
    if headers::visible(meta.traceparent.as_bytes()) {
        h.put("traceparent", meta.traceparent.as_bytes());
    }
}

/// A metadata value: printable ASCII text as is, anything else (or text with a space at either
/// end, which HTTP parsers trim) base64 with `<name>-encoding: base64`.
fn put_text(h: &mut impl HeaderOut, name: &str, encoding: &str, t: &Text<'_>) {
    let b = t.text.as_bytes();
    let plain = b.iter().all(|c| (b' '..=b'~').contains(c))
        && b.first() != Some(&b' ')
        && b.last() != Some(&b' ');
    if t.base64 || !plain {
        // Binary, or text HTTP cannot carry unchanged as a header value: send it base64.
        use base64::Engine as _;
        if t.base64 {
            h.put(name, t.text.as_bytes());
        } else {
            let enc = base64::engine::general_purpose::STANDARD.encode(t.text.as_bytes());
            h.put(name, enc.as_bytes());
        }
        h.put(encoding, b"base64");
    } else {
        h.put(name, t.text.as_bytes());
    }
}

impl HttpHandler {
    /// The request for a batch: a JSON array of the records' envelopes (as `--http-body json`
    /// sends one), with headers naming the session, the batch size and its first and last
    /// offsets (plus the configured extra headers and the signature, as for one record).
    pub(super) fn batch_request(&self, records: &[&Record], metas: &[Meta<'_>]) -> Prepared {
        let mut body = Vec::with_capacity(
            records
                .iter()
                .zip(metas)
                .map(|(r, m)| Envelope::size_hint_of(r, m))
                .sum::<usize>()
                + 2,
        );
        body.push(b'[');
        for (i, (r, m)) in records.iter().zip(metas).enumerate() {
            if i > 0 {
                body.push(b',');
            }
            // Serializing plain strings and numbers cannot fail.
            if serde_json::to_writer(&mut body, &Envelope::new(r, m)).is_err() {
                body.truncate(1);
                break;
            }
        }
        body.push(b']');
        let body = Bytes::from(body);
        let (first, last) = (&metas[0], &metas[metas.len() - 1]);
        match &self.transport {
            Transport::H1(_) => {
                let mut w = Wire {
                    out: Vec::with_capacity(384),
                    replaced: &self.config.headers,
                };
                batch_headers(&mut w, records.len(), first, last);
                self.finish_wire(w.out, body)
            }
            Transport::H2(_) => {
                let mut h = HeaderMap::with_capacity(10 + self.config.headers.len());
                batch_headers(&mut h, records.len(), first, last);
                self.finish(h, body)
            }
        }
    }
}

/// The headers of a batch request: its content type, where it comes from, its size and offsets,
/// the first record's attempt, session and `traceparent`.
fn batch_headers(h: &mut impl HeaderOut, n: usize, first: &Meta<'_>, last: &Meta<'_>) {
    h.put("content-type", b"application/json");
    put_topic(h, first.topic);
    h.put_num("orderly-partition", first.partition);
    h.put_num("orderly-batch-size", n);
    h.put_num("orderly-first-offset", first.offset);
    h.put_num("orderly-last-offset", last.offset);
    h.put_num("orderly-attempt", first.attempt);
    if let Some(s) = &first.session {
        put_text(h, "orderly-session", "orderly-session-encoding", s);
    }
    if headers::visible(first.traceparent.as_bytes()) {
        h.put("traceparent", first.traceparent.as_bytes());
    }
}
