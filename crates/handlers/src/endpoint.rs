//! The [`HttpHandler`](crate::HttpHandler)'s URL: its validation, the credentials of its userinfo
//! (sent as `Authorization: Basic`, as curl does), and the masked form every log line, error and
//! printed configuration shows.

use hyper::Uri;
use hyper::header::HeaderValue;

/// `url` with its secrets masked: the password of the userinfo (or the whole userinfo when it has
/// no `:`) and every query value become `***`. Scheme, user name, host, port, path, query keys
/// and fragment stay readable. Meant for text that anyone reading logs may see.
///
/// The userinfo ends at the last `@` of the URL: a password with an unencoded `/`, `?`, `#` or
/// `@` is masked whole (a URL with `@` in its path or query shows masked up to that `@`).
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let (userinfo, rest) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at..]),
        None => (None, rest),
    };
    let (rest, fragment) = match rest.find('#') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (before_query, query) = match rest.find('?') {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(scheme);
    match userinfo.map(|u| u.split_once(':')) {
        Some(Some((user, _))) => {
            out.push_str(user);
            out.push_str(":***");
        }
        Some(None) => out.push_str("***"),
        None => {}
    }
    // After a userinfo, `before_query` starts at its `@`.
    out.push_str(before_query);
    if let Some(q) = query {
        out.push('?');
        for (i, part) in q.split('&').enumerate() {
            if i > 0 {
                out.push('&');
            }
            match part.split_once('=') {
                Some((k, _)) => {
                    out.push_str(k);
                    out.push_str("=***");
                }
                None => out.push_str("***"),
            }
        }
    }
    out.push_str(fragment);
    out
}

/// A parsed handler URL: the request URI without userinfo, the `Authorization` value its
/// userinfo asks for, and the masked form to show.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub(crate) uri: Uri,
    pub(crate) authorization: Option<HeaderValue>,
    pub(crate) shown: String,
}

impl Endpoint {
    /// Parses and checks `url`: `http(s)://[user[:password]@]host[:port][/path][?query]`.
    pub(crate) fn parse(url: &str) -> Result<Self, HttpSetupError> {
        let shown = redact_url(url);
        let bad = |reason: &str| HttpSetupError::Url {
            url: shown.clone(),
            reason: reason.to_owned(),
        };
        let after_scheme = url.split_once("://").map_or(url, |(_, r)| r);
        if let Some(at) = after_scheme.rfind('@') {
            if after_scheme[..at].contains(['/', '?', '#']) {
                // Most likely a password with an unencoded `/`, `?` or `#`: the host would be
                // the text before it, and the rest of the password would travel in the path.
                return Err(bad(
                    "an `@` after the host: percent-encode `/`, `?`, `#` and `@` in the user \
                     name or password (%2F, %3F, %23, %40), and write an `@` of the path or \
                     query as %40",
                ));
            }
        }
        let uri: Uri = url.parse().map_err(|e| bad(&format!("{e}")))?;
        match uri.scheme_str() {
            Some("http" | "https") => {}
            _ => return Err(bad("expected http(s)://host[:port]/path")),
        }
        let Some(authority) = uri.authority() else {
            return Err(bad("no host"));
        };
        if uri.host().is_none_or(str::is_empty) {
            return Err(bad("no host"));
        }
        let Some((userinfo, host_port)) = authority
            .as_str()
            .rsplit_once('@')
            .map(|(u, h)| (u.to_owned(), h.to_owned()))
        else {
            return Ok(Self {
                uri,
                authorization: None,
                shown,
            });
        };
        let (user, password) = userinfo.split_once(':').unwrap_or((&userinfo, ""));
        let user = percent_decode(user).ok_or_else(|| bad("the user name is not valid UTF-8"))?;
        let password =
            percent_decode(password).ok_or_else(|| bad("the password is not valid UTF-8"))?;
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let mut authorization = HeaderValue::from_str(&format!("Basic {token}"))
            .map_err(|_| bad("the credentials do not fit an Authorization header"))?;
        authorization.set_sensitive(true);
        let mut parts = uri.into_parts();
        parts.authority = Some(host_port.parse().map_err(|e| bad(&format!("{e}")))?);
        let uri = Uri::from_parts(parts).map_err(|e| bad(&format!("{e}")))?;
        Ok(Self {
            uri,
            authorization: Some(authorization),
            shown,
        })
    }
}

/// `%XX` escapes decoded; `None` when the result is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).copied(), b.get(i + 2).copied()) {
            (b'%', Some(h), Some(l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push(((hex(h)? << 4) | hex(l)?) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Why an [`HttpHandler`](crate::HttpHandler) could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpSetupError {
    /// The URL does not parse or is not `http(s)://host[:port]/...`.
    #[error("invalid handler URL {url:?}: {reason}")]
    Url {
        /// The URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// An extra header that may not be set (see
    /// [`RESERVED_HEADERS`](crate::http::RESERVED_HEADERS)).
    #[error("{0}")]
    Header(String),
    /// The TLS settings (CA file, client certificate) cannot be used.
    #[error("HTTPS handler settings: {0}")]
    Tls(String),
}
