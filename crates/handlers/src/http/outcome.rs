//! From an HTTP answer to the engine's outcome: the status classes (`--http-retry-on`,
//! `--http-dead-letter-on`), redirects, `Retry-After`.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use hyper::StatusCode;
use orderly_engine::HandlerError;

use crate::meta::snippet;

/// A set of HTTP status codes written as a list of codes and ranges: `408,425,429,500-599`;
/// `none` (or an empty text) is the empty set.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct StatusSet {
    ranges: Vec<(u16, u16)>,
}

impl StatusSet {
    /// The empty set.
    pub fn none() -> Self {
        Self::default()
    }

    /// Whether `code` is in the set.
    pub fn contains(&self, code: u16) -> bool {
        self.ranges.iter().any(|&(lo, hi)| lo <= code && code <= hi)
    }

    /// The statuses retried by default: `408,425,429,500-599`.
    pub fn default_retry() -> Self {
        Self {
            ranges: vec![(408, 408), (425, 425), (429, 429), (500, 599)],
        }
    }
}

impl FromStr for StatusSet {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if t.is_empty() || t.eq_ignore_ascii_case("none") {
            return Ok(Self::none());
        }
        let code = |c: &str| -> Result<u16, String> {
            c.trim()
                .parse::<u16>()
                .ok()
                .filter(|n| (100..=999).contains(n))
                .ok_or_else(|| {
                    format!("invalid status {c:?} in {s:?}: expected a code 100-999 or a range such as 500-599")
                })
        };
        let mut ranges = Vec::new();
        for part in t.split(',') {
            let r = match part.split_once('-') {
                Some((lo, hi)) => (code(lo)?, code(hi)?),
                None => {
                    let c = code(part)?;
                    (c, c)
                }
            };
            if r.0 > r.1 {
                return Err(format!("invalid status range {part:?} in {s:?}: empty"));
            }
            ranges.push(r);
        }
        Ok(Self { ranges })
    }
}

impl fmt::Display for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ranges.is_empty() {
            return f.write_str("none");
        }
        for (i, (lo, hi)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

/// Which statuses mean what. A status in `dead_letter_on` is permanent; else one in `retry_on`
/// is transient; else 2xx is done; anything else is permanent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusClasses {
    /// Statuses retried. Default `408,425,429,500-599`.
    pub retry_on: StatusSet,
    /// Statuses dead-lettered even when `retry_on` or 2xx holds them. Default none.
    pub dead_letter_on: StatusSet,
}

impl Default for StatusClasses {
    fn default() -> Self {
        Self {
            retry_on: StatusSet::default_retry(),
            dead_letter_on: StatusSet::none(),
        }
    }
}

impl StatusClasses {
    /// Whether `status` is retried (in `retry_on` and not in `dead_letter_on`).
    pub fn retries(&self, status: StatusCode) -> bool {
        let code = status.as_u16();
        !self.dead_letter_on.contains(code) && self.retry_on.contains(code)
    }

    /// The outcome of `status`; the reason text holds the status and the first 1 KiB of `body`,
    /// for a redirect the `location` it points to (redirects are not followed).
    pub fn classify(
        &self,
        status: StatusCode,
        location: Option<&[u8]>,
        body: &[u8],
    ) -> Result<(), HandlerError> {
        let code = status.as_u16();
        let permanent = self.dead_letter_on.contains(code);
        if !permanent && !self.retry_on.contains(code) && status.is_success() {
            return Ok(());
        }
        let reason = if status.is_redirection() {
            format!(
                "HTTP {code}: redirect to {} not followed (point the handler URL at the final address)",
                location.map_or_else(|| "an unnamed location".to_owned(), |l| snippet(l, 1024))
            )
        } else {
            format!("HTTP {code}: {}", snippet(body, 1024))
        };
        if !permanent && self.retry_on.contains(code) {
            Err(HandlerError::transient(reason))
        } else {
            Err(HandlerError::permanent(reason))
        }
    }
}

/// `Retry-After` as a delay from `now`: delay-seconds, or an HTTP-date (RFC 9110 section 10.2.3:
/// IMF-fixdate, or the obsolete RFC 850 and asctime forms), which counts from this host's clock; a
/// date in the past means no wait. `None` when the header is absent or neither form.
pub(crate) fn retry_after(h: &hyper::HeaderMap, now: SystemTime) -> Option<Duration> {
    let v = h.get(hyper::header::RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;

    use super::*;

    fn classify(status: u16, body: &[u8]) -> Result<(), HandlerError> {
        StatusClasses::default().classify(StatusCode::from_u16(status).unwrap(), None, body)
    }

    #[test]
    fn default_status_mapping() {
        assert!(classify(200, b"").is_ok());
        assert!(classify(204, b"").is_ok());
        for t in [408, 425, 429, 500, 503, 599] {
            assert!(
                matches!(classify(t, b"busy"), Err(HandlerError::Transient { .. })),
                "{t}"
            );
        }
        for p in [400, 404, 409, 422, 301, 600] {
            assert!(
                matches!(classify(p, b"bad"), Err(HandlerError::Permanent { .. })),
                "{p}"
            );
        }
        let long = vec![b'x'; 5000];
        let Err(HandlerError::Permanent { message: t, .. }) = classify(400, &long) else {
            panic!("permanent expected");
        };
        assert_eq!(t.len(), "HTTP 400: ".len() + 1024);
    }

    #[test]
    fn configured_classes_and_redirects() {
        let c = StatusClasses {
            retry_on: "409,500-599".parse().unwrap(),
            dead_letter_on: "501".parse().unwrap(),
        };
        let s = |n| StatusCode::from_u16(n).unwrap();
        assert!(matches!(
            c.classify(s(409), None, b""),
            Err(HandlerError::Transient { .. })
        ));
        assert!(matches!(
            c.classify(s(503), None, b""),
            Err(HandlerError::Transient { .. })
        ));
        assert!(matches!(
            c.classify(s(501), None, b""),
            Err(HandlerError::Permanent { .. })
        ));
        assert!(matches!(
            c.classify(s(429), None, b""),
            Err(HandlerError::Permanent { .. })
        ));
        assert!(c.classify(s(202), None, b"").is_ok());
        let Err(HandlerError::Permanent { message: t, .. }) =
            StatusClasses::default().classify(s(302), Some(b"https://elsewhere/x"), b"")
        else {
            panic!("a redirect is permanent");
        };
        assert!(
            t.contains("302") && t.contains("https://elsewhere/x") && t.contains("not followed"),
            "{t}"
        );
    }

    #[test]
    fn status_sets_parse_and_print() {
        let s: StatusSet = " 408, 425,429 ,500-599".parse().unwrap();
        assert_eq!(s, StatusSet::default_retry());
        assert_eq!(s.to_string(), "408,425,429,500-599");
        assert_eq!("none".parse::<StatusSet>().unwrap(), StatusSet::none());
        assert_eq!(StatusSet::none().to_string(), "none");
        for bad in ["5xx", "99", "1000", "599-500", "500-", ","] {
            assert!(bad.parse::<StatusSet>().is_err(), "{bad}");
        }
    }

    #[test]
    fn retry_after_takes_seconds_and_http_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // 2015-10-21 07:28:00 GMT
        let with = |v: &str| {
            let mut h = hyper::HeaderMap::new();
            h.insert(
                hyper::header::RETRY_AFTER,
                HeaderValue::from_str(v).unwrap(),
            );
            retry_after(&h, now)
        };
        assert_eq!(with("120"), Some(Duration::from_secs(120)));
        assert_eq!(with(" 3 "), Some(Duration::from_secs(3)));
        // The three date forms of RFC 9110, 90 s after `now`.
        assert_eq!(
            with("Wed, 21 Oct 2015 07:29:30 GMT"),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            with("Wednesday, 21-Oct-15 07:29:30 GMT"),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            with("Wed Oct 21 07:29:30 2015"),
            Some(Duration::from_secs(90))
        );
        // A date already past: retry without waiting.
        assert_eq!(with("Wed, 21 Oct 2015 07:27:00 GMT"), Some(Duration::ZERO));
        assert_eq!(with("soon"), None);
        assert_eq!(with("-5"), None);
        assert_eq!(retry_after(&hyper::HeaderMap::new(), now), None);
    }
}
