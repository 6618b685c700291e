//! Record headers: one as the record format carries it, and a fetched record's, up to two of
//! them inline.

use bytes::Bytes;
use bytestring::ByteString;

/// A record header as the record format carries it, in fetched and produced records alike (the
/// engine's `Header` is the handler's view of one). Keys may repeat; order is kept; the value may
/// be null.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireHeader {
    /// Header key: UTF-8 (Kafka's header keys are strings). A decoded record's key is a slice of
    /// the record's bytes, like its value; `"name".into()` builds one from a `&str` or `String`.
    pub key: ByteString,
    /// Header value (`None` = null).
    pub value: Option<Bytes>,
}

/// A fetched record's headers in wire order: a slice of [`WireHeader`]s
/// (`Deref<Target = [WireHeader]>`) that keeps up to two of them inline, in the record itself.
///
/// Most records carry zero to two headers (an event id, a sequence number, a trace parent), so
/// decoding them needs no allocation of its own, and handing them on ([`IntoIterator`]) moves
/// them out without one either; more than two go to a `Vec`.
#[derive(Debug, Clone, Default)]
pub struct WireHeaders(Repr);

#[derive(Debug, Clone, Default)]
enum Repr {
    #[default]
    Empty,
    One([WireHeader; 1]),
    Two([WireHeader; 2]),
    Many(Vec<WireHeader>),
}

impl WireHeaders {
    /// No headers.
    pub const fn new() -> Self {
        Self(Repr::Empty)
    }

    /// Appends a header.
    pub fn push(&mut self, h: WireHeader) {
        self.0 = match std::mem::take(&mut self.0) {
            Repr::Empty => Repr::One([h]),
            Repr::One([a]) => Repr::Two([a, h]),
            Repr::Two([a, b]) => Repr::Many(vec![a, b, h]),
            Repr::Many(mut v) => {
                v.push(h);
                Repr::Many(v)
            }
        };
    }
}

impl std::ops::Deref for WireHeaders {
    type Target = [WireHeader];
    fn deref(&self) -> &[WireHeader] {
        match &self.0 {
            Repr::Empty => &[],
            Repr::One(a) => a,
            Repr::Two(a) => a,
            Repr::Many(v) => v,
        }
    }
}

impl std::ops::DerefMut for WireHeaders {
    fn deref_mut(&mut self) -> &mut [WireHeader] {
        match &mut self.0 {
            Repr::Empty => &mut [],
            Repr::One(a) => a,
            Repr::Two(a) => a,
            Repr::Many(v) => v,
        }
    }
}

impl PartialEq for WireHeaders {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for WireHeaders {}

impl PartialEq<Vec<WireHeader>> for WireHeaders {
    fn eq(&self, other: &Vec<WireHeader>) -> bool {
        **self == other[..]
    }
}

impl From<Vec<WireHeader>> for WireHeaders {
    fn from(v: Vec<WireHeader>) -> Self {
        if v.len() > 2 {
            return Self(Repr::Many(v));
        }
        v.into_iter().collect()
    }
}

impl FromIterator<WireHeader> for WireHeaders {
    fn from_iter<I: IntoIterator<Item = WireHeader>>(iter: I) -> Self {
        let mut hs = Self::new();
        iter.into_iter().for_each(|h| hs.push(h));
        hs
    }
}

/// The headers of [`WireHeaders`] by value, in order.
pub struct IntoIter(IterRepr);

enum IterRepr {
    One(std::array::IntoIter<WireHeader, 1>),
    Two(std::array::IntoIter<WireHeader, 2>),
    Many(std::vec::IntoIter<WireHeader>),
}

impl Iterator for IntoIter {
    type Item = WireHeader;
    fn next(&mut self) -> Option<WireHeader> {
        match &mut self.0 {
            IterRepr::One(i) => i.next(),
            IterRepr::Two(i) => i.next(),
            IterRepr::Many(i) => i.next(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.0 {
            IterRepr::One(i) => i.size_hint(),
            IterRepr::Two(i) => i.size_hint(),
            IterRepr::Many(i) => i.size_hint(),
        }
    }
}

impl ExactSizeIterator for IntoIter {}

impl IntoIterator for WireHeaders {
    type Item = WireHeader;
    type IntoIter = IntoIter;
    fn into_iter(self) -> IntoIter {
        IntoIter(match self.0 {
            Repr::Empty => IterRepr::Many(Vec::new().into_iter()),
            Repr::One(a) => IterRepr::One(a.into_iter()),
            Repr::Two(a) => IterRepr::Two(a.into_iter()),
            Repr::Many(v) => IterRepr::Many(v.into_iter()),
        })
    }
}

impl<'a> IntoIterator for &'a WireHeaders {
    type Item = &'a WireHeader;
    type IntoIter = std::slice::Iter<'a, WireHeader>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: usize) -> WireHeader {
        WireHeader {
            key: format!("k{i}").into(),
            value: i
                .is_multiple_of(2)
                .then(|| bytes::Bytes::from(format!("v{i}"))),
        }
    }

    #[test]
    fn every_count_keeps_its_headers_in_order_by_push_collect_and_vec() {
        for n in 0..6 {
            let want: Vec<WireHeader> = (0..n).map(h).collect();
            let mut pushed = WireHeaders::new();
            want.iter().cloned().for_each(|x| pushed.push(x));
            let collected: WireHeaders = want.iter().cloned().collect();
            let from_vec = WireHeaders::from(want.clone());
            for hs in [&pushed, &collected, &from_vec] {
                assert_eq!(&hs[..], &want[..], "n {n}");
            }
            assert_eq!(pushed, from_vec);
            let moved: Vec<WireHeader> = pushed.into_iter().collect();
            assert_eq!(moved, want, "n {n}");
            let borrowed: Vec<&WireHeader> = (&collected).into_iter().collect();
            assert_eq!(borrowed.len(), n);
            assert_eq!(collected.into_iter().len(), n);
        }
    }

    #[test]
    fn up_to_two_headers_stay_inline() {
        for n in 0..3 {
            let hs: WireHeaders = (0..n).map(h).collect();
            assert!(!matches!(hs.0, Repr::Many(_)), "n {n}");
        }
        let hs: WireHeaders = (0..3).map(h).collect();
        assert!(matches!(hs.0, Repr::Many(_)));
    }
}
