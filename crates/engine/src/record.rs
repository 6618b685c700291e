//! The Kafka-agnostic record model: topic-partition, record, header.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
pub use bytestring::ByteString;

/// A topic and a partition number; cheap to clone (the topic name is shared).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: Arc<str>,
    /// Partition number within the topic.
    pub partition: i32,
}

impl TopicPartition {
    /// Builds a topic-partition.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// One record header. Headers keep their order, duplicates and null values, as Kafka does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Header name (UTF-8). The Kafka driver makes it a slice of the record's bytes, like the
    /// value, so a decoded header costs no allocation of its own; `"name".into()` builds one from
    /// a `&str` or `String`.
    pub key: ByteString,
    /// Header value; `None` is Kafka's null header value (distinct from an empty value).
    pub value: Option<Bytes>,
}

impl Header {
    /// Builds a header with a value.
    pub fn new(key: impl Into<ByteString>, value: impl Into<Bytes>) -> Self {
        Self {
            key: key.into(),
            value: Some(value.into()),
        }
    }
}

/// A record's headers in wire order: a slice of [`Header`]s (`Deref<Target = [Header]>`) that
/// keeps up to two of them inline, in the record itself.
///
/// Why not a `Vec`: the Kafka driver decodes records on its fetch task and the engine's workers
/// drop them on theirs, so a header `Vec` per record was an allocation on one thread freed on
/// another for nearly every record (glibc's arena lock was contended on every such free). Most
/// records carry zero to two headers (an event id, a sequence number, a trace parent); more than
/// two go to a `Vec`.
#[derive(Clone, Default)]
pub struct Headers(HeadersRepr);

#[derive(Clone, Default)]
enum HeadersRepr {
    #[default]
    Empty,
    One([Header; 1]),
    Two([Header; 2]),
    Many(Vec<Header>),
}

impl Headers {
    /// No headers.
    pub const fn new() -> Self {
        Self(HeadersRepr::Empty)
    }

    /// Appends a header.
    pub fn push(&mut self, h: Header) {
        self.0 = match std::mem::take(&mut self.0) {
            HeadersRepr::Empty => HeadersRepr::One([h]),
            HeadersRepr::One([a]) => HeadersRepr::Two([a, h]),
            HeadersRepr::Two([a, b]) => HeadersRepr::Many(vec![a, b, h]),
            HeadersRepr::Many(mut v) => {
                v.push(h);
                HeadersRepr::Many(v)
            }
        };
    }

    /// Removes and returns the last header.
    pub fn pop(&mut self) -> Option<Header> {
        let mut v = Vec::from(std::mem::take(self));
        let last = v.pop();
        *self = v.into();
        last
    }

    /// Keeps the headers for which `keep` is true, in order.
    pub fn retain(&mut self, keep: impl FnMut(&Header) -> bool) {
        let mut v = Vec::from(std::mem::take(self));
        v.retain(keep);
        *self = v.into();
    }
}

impl std::ops::Deref for Headers {
    type Target = [Header];
    fn deref(&self) -> &[Header] {
        match &self.0 {
            HeadersRepr::Empty => &[],
            HeadersRepr::One(a) => a,
            HeadersRepr::Two(a) => a,
            HeadersRepr::Many(v) => v,
        }
    }
}

impl std::ops::DerefMut for Headers {
    fn deref_mut(&mut self) -> &mut [Header] {
        match &mut self.0 {
            HeadersRepr::Empty => &mut [],
            HeadersRepr::One(a) => a,
            HeadersRepr::Two(a) => a,
            HeadersRepr::Many(v) => v,
        }
    }
}

impl From<Vec<Header>> for Headers {
    fn from(mut v: Vec<Header>) -> Self {
        Self(match v.len() {
            0 => HeadersRepr::Empty,
            1 => HeadersRepr::One([v.remove(0)]),
            2 => {
                let b = v.remove(1);
                HeadersRepr::Two([v.remove(0), b])
            }
            _ => HeadersRepr::Many(v),
        })
    }
}

impl From<Headers> for Vec<Header> {
    fn from(h: Headers) -> Self {
        match h.0 {
            HeadersRepr::Empty => Vec::new(),
            HeadersRepr::One([a]) => vec![a],
            HeadersRepr::Two([a, b]) => vec![a, b],
            HeadersRepr::Many(v) => v,
        }
    }
}

impl FromIterator<Header> for Headers {
    fn from_iter<I: IntoIterator<Item = Header>>(iter: I) -> Self {
        let mut it = iter.into_iter();
        let Some(a) = it.next() else {
            return Self::new();
        };
        let Some(b) = it.next() else {
            return Self(HeadersRepr::One([a]));
        };
        let Some(c) = it.next() else {
            return Self(HeadersRepr::Two([a, b]));
        };
        let mut v = Vec::with_capacity(3 + it.size_hint().0);
        v.extend([a, b, c]);
        v.extend(it);
        Self(HeadersRepr::Many(v))
    }
}

impl IntoIterator for Headers {
    type Item = Header;
    type IntoIter = std::vec::IntoIter<Header>;
    fn into_iter(self) -> Self::IntoIter {
        Vec::from(self).into_iter()
    }
}

impl<'a> IntoIterator for &'a Headers {
    type Item = &'a Header;
    type IntoIter = std::slice::Iter<'a, Header>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PartialEq for Headers {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Headers {}

impl PartialEq<Vec<Header>> for Headers {
    fn eq(&self, other: &Vec<Header>) -> bool {
        **self == **other
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A record as the engine sees it: no wire types, only what ordering and handling need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Where the record came from.
    pub partition: TopicPartition,
    /// The record's offset in its partition.
    pub offset: i64,
    /// The record key; by default the session id.
    pub key: Option<Bytes>,
    /// The record value.
    pub value: Option<Bytes>,
    /// Headers in wire order (up to two kept inline, see [`Headers`]).
    pub headers: Headers,
    /// The record timestamp in milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// Set when some of the record's byte fields are slices of a buffer shared with other
    /// records (the Kafka driver decodes consecutive small records into one buffer): keeping
    /// this record alive keeps that whole buffer alive. The engine's byte budget then charges
    /// the buffer once, while any record in it is in flight, and each record only for what lies
    /// outside it (see [`Record::charged_bytes`]). `None`: every field is charged on its own.
    pub shared: Option<SharedBuffer>,
}

/// A buffer several records' fields are slices of (see [`Record::shared`]).
///
/// Records with equal `SharedBuffer`s that are alive at the same time share one buffer. A field
/// lies in it if its pointer range is inside `addr..addr + len`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SharedBuffer {
    /// The address of its first byte.
    pub addr: usize,
    /// Its length in bytes.
    pub len: usize,
}

impl SharedBuffer {
    /// The buffer `b` occupies.
    pub fn of(b: &Bytes) -> Self {
        Self {
            addr: b.as_ptr() as usize,
            len: b.len(),
        }
    }

    /// Whether `b` is a slice of this buffer.
    pub fn contains(&self, b: &Bytes) -> bool {
        let start = b.as_ptr() as usize;
        start >= self.addr
            && start
                .checked_add(b.len())
                .is_some_and(|end| end <= self.addr.saturating_add(self.len))
    }

    /// What the buffer is charged against the byte budget: its length and its allocation's
    /// header and rounding.
    pub fn charged_bytes(&self) -> usize {
        self.len.saturating_add(PER_ALLOC)
    }
}

/// What a record's struct is charged: `size_of::<Record>()` on 64-bit targets (two inline
/// headers included), rounded up.
const RECORD_OVERHEAD: usize = 288;

/// An allocation's header and rounding (glibc: 8 bytes of header, 16-byte granules).
const PER_ALLOC: usize = 16;

impl Record {
    /// A record with a key and a value and no headers (handy in tests and benches).
    pub fn new(
        partition: TopicPartition,
        offset: i64,
        key: Option<Bytes>,
        value: Option<Bytes>,
    ) -> Self {
        Self {
            partition,
            offset,
            key,
            value,
            headers: Headers::new(),
            timestamp_ms: 0,
            shared: None,
        }
    }

    /// The value of the first header named `name` (`None` if absent or null).
    pub fn header(&self, name: &str) -> Option<&Bytes> {
        self.headers
            .iter()
            .find(|h| h.key == name)
            .and_then(|h| h.value.as_ref())
    }

    /// Forgets [`Record::shared`] if none of the record's fields lies in that buffer any more
    /// (a hook replaced them all): the record then no longer keeps the buffer alive, and the
    /// budget must not charge it for it.
    pub fn unshare_if_unused(&mut self) {
        let Some(s) = self.shared else { return };
        let inside = |b: &Option<Bytes>| b.as_ref().is_some_and(|b| s.contains(b));
        let used = inside(&self.key)
            || inside(&self.value)
            || self
                .headers
                .iter()
                .any(|h| inside(&h.value) || s.contains(h.key.as_bytes()));
        if !used {
            self.shared = None;
        }
    }

    /// The bytes this record is charged against the memory budget: what keeping it alive costs,
    /// apart from a [shared buffer](Record::shared), which the engine charges once per buffer.
    ///
    /// That is the struct itself (so that empty records still cost something, and up to two
    /// headers are inside it), the header array if there are more, and each key, value, header name and header value as a heap allocation of its own: its length plus the
    /// allocator's per-allocation header and rounding, unless it is a slice of the record's
    /// shared buffer. It is exact only if those fields do not share some other, larger buffer;
    /// the Kafka driver copies them out of the fetch response for that reason (a zero-copy slice
    /// would keep the whole response alive, uncharged).
    pub fn charged_bytes(&self) -> usize {
        const OVERHEAD: usize = RECORD_OVERHEAD;
        let field = |b: &Option<Bytes>| match b {
            Some(b) if !self.shared.is_some_and(|s| s.contains(b)) => b.len() + PER_ALLOC,
            _ => 0,
        };
        let name = |k: &ByteString| match k.as_bytes() {
            b if self.shared.is_some_and(|s| s.contains(b)) => 0,
            b => b.len() + PER_ALLOC,
        };
        let kv = field(&self.key) + field(&self.value);
        let hdrs: usize = self
            .headers
            .iter()
            .map(|h| name(&h.key) + field(&h.value))
            .sum();
        // Up to two headers live in the struct; more in a `Vec` of their own.
        let spilled = match &self.headers.0 {
            HeadersRepr::Many(v) => v.capacity() * std::mem::size_of::<Header>() + PER_ALLOC,
            _ => 0,
        };
        OVERHEAD + kv + hdrs + spilled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Headers` behaves like a `Vec<Header>` whatever it keeps inline: order, duplicates,
    /// push past the inline two, pop and retain back below them.
    #[test]
    fn headers_keep_order_across_inline_and_spilled_forms() {
        let h = |k: &str, v: &str| Header::new(k.to_owned(), v.to_owned());
        let all: Vec<Header> = (0..5).map(|i| h("k", &i.to_string())).collect();
        for n in 0..=5 {
            let mut hs = Headers::new();
            for x in &all[..n] {
                hs.push(x.clone());
            }
            assert_eq!(hs, all[..n].to_vec());
            assert_eq!(Headers::from(all[..n].to_vec()), hs);
            assert_eq!(hs.iter().cloned().collect::<Headers>(), hs);
            assert_eq!(Vec::from(hs.clone()), all[..n].to_vec());
            let mut popped = hs.clone();
            assert_eq!(popped.pop(), all[..n].last().cloned());
            assert_eq!(popped, all[..n.saturating_sub(1)].to_vec());
            hs.retain(|x| x.value.as_deref() != Some(b"1".as_slice()));
            let kept: Vec<Header> = all[..n]
                .iter()
                .filter(|x| x.value.as_deref() != Some(b"1".as_slice()))
                .cloned()
                .collect();
            assert_eq!(hs, kept);
        }
    }

    #[test]
    fn the_struct_charge_covers_the_struct() {
        assert!(std::mem::size_of::<Record>() <= RECORD_OVERHEAD);
    }

    /// Fields that are slices of the record's shared buffer are not charged to the record (the
    /// engine charges the buffer once); fields outside it, such as a value a hook replaced, are.
    #[test]
    fn fields_in_the_shared_buffer_are_charged_with_the_buffer_not_the_record() {
        let buf = Bytes::from(vec![1u8; 4096]);
        let mut r = Record::new(
            TopicPartition::new("t", 0),
            0,
            Some(buf.slice(0..10)),
            Some(buf.slice(10..110)),
        );
        r.headers.push(Header {
            key: "h".into(),
            value: Some(buf.slice(110..120)),
        });
        // Up to two headers are inside the struct: only their fields are charged.
        let hdr = 1 + PER_ALLOC;
        let own = RECORD_OVERHEAD + (10 + PER_ALLOC) + (100 + PER_ALLOC) + hdr + (10 + PER_ALLOC);
        assert_eq!(r.charged_bytes(), own);
        // A header whose name and value are both slices of the buffer (as decoded records' are).
        let inside = Header {
            key: ByteString::try_from(buf.slice(120..124)).expect("utf-8"),
            value: Some(buf.slice(124..130)),
        };
        r.headers.push(inside.clone());
        let inside_own = (4 + PER_ALLOC) + (6 + PER_ALLOC);
        assert_eq!(r.charged_bytes(), own + inside_own);
        r.shared = Some(SharedBuffer::of(&buf));
        assert_eq!(r.charged_bytes(), RECORD_OVERHEAD + hdr);
        // A third header spills all three into an array of their own, which is charged.
        r.headers.push(Header::new("x", Bytes::new()));
        let array = 3 * std::mem::size_of::<Header>() + PER_ALLOC;
        assert!(
            r.charged_bytes() >= RECORD_OVERHEAD + hdr + (1 + PER_ALLOC) + array,
            "{}",
            r.charged_bytes()
        );
        r.headers.pop();
        r.headers.pop();
        // Every field replaced but one header name: the record still holds the buffer.
        r.key = None;
        r.value = None;
        r.headers[0].value = None;
        r.headers.push(inside);
        r.headers[1].value = None;
        r.unshare_if_unused();
        assert!(r.shared.is_some());
        r.headers.pop();
        r.unshare_if_unused();
        assert_eq!(r.shared, None);
        assert_eq!(SharedBuffer::of(&buf).charged_bytes(), 4096 + PER_ALLOC);
        r.value = Some(Bytes::from(vec![2u8; 50]));
        assert_eq!(r.charged_bytes(), RECORD_OVERHEAD + hdr + 50 + PER_ALLOC);
        // A slice reaching past the buffer's end is not inside it.
        let other = SharedBuffer::of(&buf.slice(0..100));
        assert!(other.contains(&buf.slice(0..100)));
        assert!(!other.contains(&buf.slice(50..101)));
    }
}
