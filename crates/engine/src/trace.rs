//! W3C `traceparent` parsing, so a record's trace becomes the parent of the handler's span.

/// The parts of a W3C trace context `traceparent` header that a span needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// 16-byte trace id (never all zero).
    pub trace_id: u128,
    /// 8-byte id of the producer's span (never all zero).
    pub parent_id: u64,
    /// Trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceParent {
    /// Parses `version-traceid-parentid-flags` (lowercase hex). Version `ff` and all-zero ids
    /// are invalid; future versions are accepted by reading the first four fields, as the
    /// specification asks.
    pub fn parse(value: &[u8]) -> Option<Self> {
        let s = std::str::from_utf8(value).ok()?;
        let mut parts = s.split('-');
        let (ver, tid, pid, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |p: &str, n: usize| {
            p.len() == n
                && p.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if !hex(ver, 2) || ver == "ff" || !hex(tid, 32) || !hex(pid, 16) || !hex(flags, 2) {
            return None;
        }
        if ver == "00" && parts.next().is_some() {
            return None;
        }
        let trace_id = u128::from_str_radix(tid, 16).ok()?;
        let parent_id = u64::from_str_radix(pid, 16).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        (trace_id != 0 && parent_id != 0).then_some(Self {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// The trace id as 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }

    /// The parent span id as 16 lowercase hex digits.
    pub fn parent_id_hex(&self) -> String {
        format!("{:016x}", self.parent_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_spec_example_and_rejects_bad_ones() {
        let tp = TraceParent::parse(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let tp = tp.map(|t| (t.trace_id_hex(), t.parent_id_hex(), t.flags));
        assert_eq!(
            tp,
            Some((
                "4bf92f3577b34da6a3ce929d0e0e4736".into(),
                "00f067aa0ba902b7".into(),
                1
            ))
        );
        assert!(
            TraceParent::parse(b"00-00000000000000000000000000000000-00f067aa0ba902b7-01")
                .is_none()
        );
        assert!(
            TraceParent::parse(b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
                .is_none()
        );
        assert!(
            TraceParent::parse(b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01")
                .is_none()
        );
        assert!(
            TraceParent::parse(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
                .is_none()
        );
        assert!(
            TraceParent::parse(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
                .is_some()
        );
        assert!(TraceParent::parse(b"garbage").is_none());
    }
}
