//! Record batches (magic v2): a decoder that gets transactions, control batches, null headers,
//! truncation and offset gaps right, and a builder for produce.
//!
//! Decoding rules (Java's `CompletedFetch` is the reference):
//! - the CRC-32C of every batch is checked ([`BatchError::Crc`]);
//! - control batches (transaction markers) are never returned, and their offsets are passed;
//! - under read_committed, batches of aborted transactions are dropped using the fetch response's
//!   aborted-transaction list and the batch producer ids;
//! - header order, repeated header keys and null header values are kept;
//! - a truncated trailing batch (the broker cuts responses at `max_bytes`) is not an error;
//! - [`DecodedRecords::next_offset`] is `last batch base_offset + last_offset_delta + 1`, so the
//!   position always advances past control records and compacted gaps;
//! - records below the fetch offset (a compressed batch may start earlier) are dropped;
//! - LogAppendTime batches use the batch's max timestamp for every record;
//! - with [`DecodeOptions::copy_records`] (the default), each record is copied out of the response
//!   (or decompressed batch) into an allocation of its own that its key, value, header names and
//!   values share, so a record kept for a long time holds only its own bytes, not the whole buffer it
//!   arrived in; [`DecodeOptions::copy_chunk`] (4 KiB by default) copies consecutive small
//!   records together instead, so that a kept record holds at most one chunk, which
//!   [`FetchedRecord::shared`] names.

pub mod compression;
mod headers;

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use bytestring::ByteString;

pub use compression::Compression;
pub use headers::{WireHeader, WireHeaders};

use crate::codec::{DecodeError, Decoder, Encoder};
use crate::error::BatchError;

/// One record as the decoder hands it out of a fetched batch (the engine's `Record` is the
/// handler's view of one; [`ProduceRecord`] is the other direction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedRecord {
    /// Offset in the partition.
    pub offset: i64,
    /// Timestamp (ms since the epoch): CreateTime, or the broker's LogAppendTime.
    pub timestamp: i64,
    /// Whether `timestamp` is the broker's LogAppendTime.
    pub log_append_time: bool,
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// Headers in wire order.
    pub headers: WireHeaders,
    /// Partition leader epoch of the batch (for OffsetCommit's committed leader epoch).
    pub leader_epoch: i32,
    /// Set when the key, value, header names and values are slices of a buffer shared with
    /// neighbouring records ([`DecodeOptions::copy_chunk`]): keeping this record alive keeps that whole
    /// buffer alive, so a byte budget must charge the buffer once, not the record's own bytes.
    pub shared: Option<SharedBuffer>,
}

/// Where a buffer shared by several records lies in memory (see [`FetchedRecord::shared`]).
///
/// Two records with equal `SharedBuffer`s that are alive at the same time share one buffer; a
/// record's field lies in it if its pointer range is inside `addr..addr + len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
}

/// A record to produce.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceRecord {
    /// Key.
    pub key: Option<Bytes>,
    /// Value.
    pub value: Option<Bytes>,
    /// Headers.
    pub headers: Vec<WireHeader>,
    /// CreateTime timestamp (ms); `None` = now.
    pub timestamp: Option<i64>,
}

/// Fetch isolation level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IsolationLevel {
    /// Every non-control record, including those of aborted transactions.
    ReadUncommitted,
    /// Only committed data, up to the last stable offset.
    #[default]
    ReadCommitted,
}

impl IsolationLevel {
    /// Wire value (0 / 1).
    pub fn as_i8(self) -> i8 {
        match self {
            Self::ReadUncommitted => 0,
            Self::ReadCommitted => 1,
        }
    }
}

/// An aborted transaction from a fetch response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTransaction {
    /// Producer id.
    pub producer_id: i64,
    /// First offset of the aborted transaction.
    pub first_offset: i64,
}

/// The default of [`DecodeOptions::copy_chunk`].
pub const DEFAULT_COPY_CHUNK: usize = 4 << 10;

/// Limits and options for [`decode_records`].
#[derive(Debug, Clone, Copy)]
pub struct DecodeOptions {
    /// Check each batch's CRC-32C (Java `check.crcs`, default on).
    pub check_crc: bool,
    /// Largest decompressed record set per batch. Default 64 MiB.
    pub max_decompressed: usize,
    /// Copy each record into an allocation of its own, shared by its key, value and header
    /// values. Default `true`.
    ///
    /// Without it the record's bytes are zero-copy slices of the whole fetch response (or of the
    /// batch's decompressed buffer), and one record that a consumer keeps (a slow handler, a
    /// retry, a held watermark) keeps that whole buffer alive: up to the fetch's `max_bytes` for a
    /// record of a few bytes, which no byte budget that counts record sizes can see. The copy
    /// costs a memcpy and an allocation per chunk (see [`Self::copy_chunk`]); turn it off only when records are dropped soon after decoding.
    pub copy_records: bool,
    /// With [`Self::copy_records`]: when above 0, consecutive records of a batch are copied
    /// together into one allocation of at most this many bytes (a record larger than this gets
    /// one of its own), and each record's fields are slices of it; such records name the buffer
    /// in [`FetchedRecord::shared`]. `0`: every record gets an allocation of its own. Default
    /// [`DEFAULT_COPY_CHUNK`] (4 KiB).
    ///
    /// One allocation and one free then serve ~25 records of ~150 bytes instead of one each; the
    /// per-record free happens on another thread than the allocation (decoded by the fetch loop,
    /// dropped by an engine worker), glibc malloc's slowest path. The price: a record kept alive keeps its whole chunk (its
    /// neighbours' bytes too). `orderly_engine` charges each shared buffer against its byte
    /// budget once, while any of its records is in flight, so the budget sees that price; a
    /// consumer with a budget of its own that counts each record's own bytes should set `0`.
    pub copy_chunk: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            check_crc: true,
            max_decompressed: 64 * 1024 * 1024,
            copy_records: true,
            copy_chunk: DEFAULT_COPY_CHUNK,
        }
    }
}

/// The outcome of decoding one partition's record set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecodedRecords {
    /// Records to deliver, in offset order.
    pub records: Vec<FetchedRecord>,
    /// Where the next fetch starts: past the last complete batch (`None` = no complete batch).
    pub next_offset: Option<i64>,
    /// A trailing incomplete batch was ignored.
    pub truncated: bool,
    /// The batch at this base offset could not be used; decoding stopped there and
    /// `next_offset` points at it (so a retry or a skip is the caller's explicit choice).
    pub error: Option<(i64, BatchError)>,
}

const BATCH_OVERHEAD: usize = 61;
const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// The fixed batch header.
#[derive(Debug, Clone, Copy)]
struct BatchHeader {
    base_offset: i64,
    leader_epoch: i32,
    attributes: i16,
    last_offset_delta: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    producer_id: i64,
    count: i32,
}

/// Decodes the record set of one partition of a fetch response.
///
/// `fetch_offset` drops records below it; `aborted` and `isolation` drive transaction filtering.
pub fn decode_records(
    data: Bytes,
    fetch_offset: i64,
    isolation: IsolationLevel,
    aborted: &[AbortedTransaction],
    opts: &DecodeOptions,
) -> DecodedRecords {
    let mut out = DecodedRecords::default();
    // Aborted transactions by first offset, moved into `aborted_pids` as batches reach them.
    let mut pending: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    if isolation == IsolationLevel::ReadCommitted {
        for a in aborted {
            pending
                .entry(a.first_offset)
                .or_default()
                .push(a.producer_id);
        }
    }
    let mut aborted_pids: HashSet<i64> = HashSet::new();
    let mut rest = data;

    while rest.len() >= 12 {
        let base_offset = i64::from_be_bytes(array8(&rest[0..8]));
        let batch_len = i32::from_be_bytes(array4(&rest[8..12]));
        let Ok(batch_len) = usize::try_from(batch_len) else {
            out.error = Some((
                base_offset,
                DecodeError::invalid("batch length", batch_len.to_string()).into(),
            ));
            break;
        };
        // The magic byte sits at the same place in every format (after offset, length and the
        // v2 leader epoch or the v0/v1 CRC); a v0/v1 message is shorter than a v2 header, so it
        // is named by its format before the length is held against the v2 layout.
        if let Some(&magic @ (0 | 1)) = rest.get(16) {
            out.error = Some((base_offset, BatchError::Magic(magic as i8)));
            break;
        }
        if batch_len + 12 < BATCH_OVERHEAD {
            out.error = Some((
                base_offset,
                DecodeError::invalid("batch length", batch_len.to_string()).into(),
            ));
            break;
        }
        if rest.len() < 12 + batch_len {
            // The broker cuts the response at max_bytes; the rest of this batch comes next fetch.
            out.truncated = true;
            break;
        }
        // Batches of one partition follow each other; one that starts inside (or before) the
        // previous one comes from a corrupt response, and its records would go backwards.
        if let Some(prev_next) = out.next_offset.filter(|n| base_offset < *n) {
            out.error = Some((
                base_offset,
                DecodeError::invalid(
                    "batch base offset",
                    format!("{base_offset} is below the previous batch's end {prev_next}"),
                )
                .into(),
            ));
            break;
        }
        let batch = rest.split_to(12 + batch_len);
        let before = out.records.len();
        match decode_batch(
            &batch,
            fetch_offset,
            &mut pending,
            &mut aborted_pids,
            opts,
            &mut out.records,
        ) {
            Ok(next) => out.next_offset = Some(next),
            Err(e) => {
                // A batch is used whole or not at all: the records read before its fault are not
                // handed out (the next fetch starts at this batch again).
                out.records.truncate(before);
                out.error = Some((base_offset, e));
                break;
            }
        }
    }
    if !rest.is_empty() && rest.len() < 12 && out.error.is_none() {
        out.truncated = true;
    }
    out
}

fn array8(b: &[u8]) -> [u8; 8] {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    a
}

fn array4(b: &[u8]) -> [u8; 4] {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    a
}

/// Decodes one complete batch (`batch` spans base offset to end); returns the next offset.
fn decode_batch(
    batch: &Bytes,
    fetch_offset: i64,
    pending: &mut BTreeMap<i64, Vec<i64>>,
    aborted_pids: &mut HashSet<i64>,
    opts: &DecodeOptions,
    records: &mut Vec<FetchedRecord>,
) -> Result<i64, BatchError> {
    let mut d = Decoder::new(batch.clone(), false);
    let base_offset = d.i64()?;
    let _len = d.i32()?;
    let leader_epoch = d.i32()?;
    let magic = d.i8()?;
    if magic != 2 {
        return Err(BatchError::Magic(magic));
    }
    let stored = d.u32()?;
    if opts.check_crc {
        let computed = crc32c::crc32c(&batch[21..]);
        if computed != stored {
            return Err(BatchError::Crc { stored, computed });
        }
    }
    let h = BatchHeader {
        base_offset,
        leader_epoch,
        attributes: d.i16()?,
        last_offset_delta: d.i32()?,
        base_timestamp: d.i64()?,
        max_timestamp: d.i64()?,
        producer_id: d.i64()?,
        count: {
            let _epoch = d.i16()?;
            let _seq = d.i32()?;
            d.i32()?
        },
    };
    // A negative base offset or last offset delta would move the next fetch backwards.
    if h.base_offset < 0 || h.last_offset_delta < 0 {
        return Err(DecodeError::invalid(
            "batch offsets",
            format!(
                "base offset {}, last offset delta {}",
                h.base_offset, h.last_offset_delta
            ),
        )
        .into());
    }
    let next = h
        .base_offset
        .saturating_add(i64::from(h.last_offset_delta))
        .saturating_add(1);
    let last_offset = next - 1;

    // Transactions that started at or before this batch's last offset are now "open aborted".
    if !pending.is_empty() && h.producer_id >= 0 {
        let reached: Vec<i64> = pending.range(..=last_offset).map(|(k, _)| *k).collect();
        for k in reached {
            if let Some(pids) = pending.remove(&k) {
                aborted_pids.extend(pids);
            }
        }
    }

    let codec = Compression::from_attributes(h.attributes)?;
    let body = d.rest();
    let body = if codec == Compression::None {
        body
    } else {
        Bytes::from(compression::decompress(
            codec,
            &body,
            opts.max_decompressed,
        )?)
    };
    let mut rd = Decoder::new(body, false);

    if h.attributes & ATTR_CONTROL != 0 {
        // One control record; key = (int16 version, int16 type): 0 = ABORT, 1 = COMMIT.
        if h.count >= 1 {
            let rec = read_record(&mut rd, &h, false)?;
            if let Some(key) = rec.key.filter(|k| k.len() >= 4) {
                let kind = i16::from_be_bytes([key[2], key[3]]);
                if kind == 0 {
                    aborted_pids.remove(&h.producer_id);
                }
            }
        }
        return Ok(next);
    }
    if h.attributes & ATTR_TRANSACTIONAL != 0 && aborted_pids.contains(&h.producer_id) {
        return Ok(next);
    }

    let count = usize::try_from(h.count)
        .map_err(|_| DecodeError::invalid("record count", h.count.to_string()))?;
    if count > rd.remaining() {
        return Err(DecodeError::invalid(
            "record count",
            format!("{count} records in {} bytes", rd.remaining()),
        )
        .into());
    }
    records.reserve(count);
    // Offsets ascend inside the batch (compaction leaves gaps, never reorders) and end at its
    // last offset; anything else is a corrupt batch, not records to hand out in that order.
    let mut prev = h.base_offset.saturating_sub(1);
    let chunked = opts.copy_records && opts.copy_chunk > 0;
    let mut chunk = Decoder::new(Bytes::new(), false);
    let mut in_chunk = 0usize;
    let mut shared = None;
    for i in 0..count {
        let rec = if chunked {
            if in_chunk == 0 {
                let buf;
                (buf, in_chunk) = next_chunk(&mut rd, opts.copy_chunk, count - i)?;
                // A chunk of one record is that record's own copy: nothing is shared.
                shared = (in_chunk > 1).then(|| SharedBuffer::of(&buf));
                chunk = Decoder::new(buf, false);
            }
            in_chunk -= 1;
            let mut rec = read_record(&mut chunk, &h, false)?;
            rec.shared = shared;
            rec
        } else {
            read_record(&mut rd, &h, opts.copy_records)?
        };
        if rec.offset <= prev || rec.offset > last_offset {
            return Err(DecodeError::invalid(
                "record offset delta",
                format!(
                    "offset {} after {prev} in a batch of offsets {}..={last_offset}",
                    rec.offset, h.base_offset
                ),
            )
            .into());
        }
        prev = rec.offset;
        if rec.offset >= fetch_offset {
            records.push(rec);
        }
    }
    Ok(next)
}

fn len_or_null(d: &mut Decoder, what: &'static str) -> Result<Option<usize>, DecodeError> {
    match d.varint()? {
        -1 => Ok(None),
        n if n < -1 => Err(DecodeError::invalid(what, format!("length {n}"))),
        n => Ok(Some(n as usize)),
    }
}

/// Copies the next records of a batch, as many whole ones as fit `max` bytes (at least one, at
/// most `left`), into one allocation; returns the copy and how many records it holds. Only the
/// records' length prefixes are read here; `read_record` checks the rest.
fn next_chunk(d: &mut Decoder, max: usize, left: usize) -> Result<(Bytes, usize), DecodeError> {
    let mut probe = d.clone();
    let start = probe.remaining();
    let mut n = 0usize;
    let mut size = 0usize;
    while n < left {
        let before = probe.remaining();
        let len = len_or_null(&mut probe, "record length")?
            .ok_or_else(|| DecodeError::invalid("record length", "-1"))?;
        let ext = (before - probe.remaining()).saturating_add(len);
        if n > 0 && size.saturating_add(ext) > max {
            break;
        }
        probe.skip("record", len)?;
        size = start - probe.remaining();
        n += 1;
    }
    Ok((d.raw_copied("records", size)?, n))
}

/// Reads one record of a batch. With `copy`, the key, value, header names and values get their
/// own allocations instead of being slices of the batch's buffer (see [`DecodeOptions::copy_records`]).
fn read_record(d: &mut Decoder, h: &BatchHeader, copy: bool) -> Result<FetchedRecord, DecodeError> {
    let len = len_or_null(d, "record length")?
        .ok_or_else(|| DecodeError::invalid("record length", "-1"))?;
    // Copied: the record's bytes get one allocation of their own, and its key, value and header
    // values are slices of it (one copy and two allocations per record, not one per field).
    let body = if copy {
        d.raw_copied("record", len)?
    } else {
        d.raw("record", len)?
    };
    let mut r = Decoder::new(body, false);
    let take = |r: &mut Decoder, what: &'static str, n: usize| r.raw(what, n);
    let _attributes = r.i8()?;
    let ts_delta = r.varlong()?;
    let offset_delta = r.varint()?;
    let key = match len_or_null(&mut r, "key length")? {
        None => None,
        Some(n) => Some(take(&mut r, "key", n)?),
    };
    let value = match len_or_null(&mut r, "value length")? {
        None => None,
        Some(n) => Some(take(&mut r, "value", n)?),
    };
    let n_headers = r.varint()?;
    let n_headers = usize::try_from(n_headers)
        .map_err(|_| DecodeError::invalid("header count", n_headers.to_string()))?;
    if n_headers > r.remaining() {
        return Err(DecodeError::invalid("header count", n_headers.to_string()));
    }
    let mut headers = WireHeaders::new();
    for _ in 0..n_headers {
        let klen = len_or_null(&mut r, "header key length")?
            .ok_or_else(|| DecodeError::invalid("header key", "null"))?;
        let key = ByteString::try_from(r.raw("header key", klen)?)
            .map_err(|e| DecodeError::invalid("header key", e.to_string()))?;
        let value = match len_or_null(&mut r, "header value length")? {
            None => None,
            Some(n) => Some(take(&mut r, "header value", n)?),
        };
        headers.push(WireHeader { key, value });
    }
    let log_append_time = h.attributes & ATTR_TIMESTAMP_TYPE != 0;
    Ok(FetchedRecord {
        offset: h.base_offset.saturating_add(i64::from(offset_delta)),
        timestamp: if log_append_time {
            h.max_timestamp
        } else {
            h.base_timestamp.saturating_add(ts_delta)
        },
        log_append_time,
        key,
        value,
        headers,
        leader_epoch: h.leader_epoch,
        shared: None,
    })
}

/// Fields of a batch to build; `Default` is a plain (non-transactional) producer batch.
#[derive(Debug, Clone, Copy)]
pub struct BatchSpec {
    /// Base offset (0 for produce; the broker assigns offsets).
    pub base_offset: i64,
    /// Codec.
    pub compression: Compression,
    /// Producer id (-1 = none).
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// Base sequence.
    pub base_sequence: i32,
    /// Transactional flag.
    pub transactional: bool,
    /// Control flag (transaction markers; for tests).
    pub control: bool,
    /// LogAppendTime flag (set by brokers; for tests).
    pub log_append_time: bool,
    /// Partition leader epoch.
    pub leader_epoch: i32,
}

impl Default for BatchSpec {
    fn default() -> Self {
        Self {
            base_offset: 0,
            compression: Compression::None,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
            control: false,
            log_append_time: false,
            leader_epoch: -1,
        }
    }
}

/// Encodes one record batch (magic 2) with CRC-32C. `offset_deltas`, when given, sets each record's
/// offset delta (to model compaction gaps); otherwise records are numbered 0, 1, 2...
pub fn encode_batch(
    spec: &BatchSpec,
    records: &[ProduceRecord],
    now_ms: i64,
    offset_deltas: Option<&[i32]>,
) -> Result<Vec<u8>, crate::error::EncodeError> {
    use crate::error::EncodeError;
    let count = i32::try_from(records.len()).map_err(|_| EncodeError::TooLong {
        what: "records",
        len: records.len(),
    })?;
    let delta = |i: usize| match offset_deltas {
        Some(d) => d.get(i).copied().unwrap_or(i as i32),
        // `count` fits an i32, so every index does.
        None => i as i32,
    };
    let last_delta = (0..records.len()).map(delta).fold(0, i32::max);
    let (base_ts, max_ts) = batch_timestamps(records, now_ms);

    let mut attributes = spec.compression.attribute_bits();
    if spec.log_append_time {
        attributes |= ATTR_TIMESTAMP_TYPE;
    }
    if spec.transactional {
        attributes |= ATTR_TRANSACTIONAL;
    }
    if spec.control {
        attributes |= ATTR_CONTROL;
    }
    // Uncompressed, the records go straight after the header: the batch is built in place, its
    // length and CRC filled in at the end.
    let capacity = if spec.compression == Compression::None {
        uncompressed_batch_len(records, now_ms)
    } else {
        BATCH_OVERHEAD
    };
    let mut out = Vec::with_capacity(capacity);
    let mut e = Encoder::new(&mut out, false);
    e.i64(spec.base_offset);
    e.i32(0); // batch length, below
    e.i32(spec.leader_epoch);
    e.i8(2);
    e.i32(0); // CRC, below
    e.i16(attributes);
    e.i32(last_delta);
    e.i64(base_ts);
    e.i64(max_ts);
    e.i64(spec.producer_id);
    e.i16(spec.producer_epoch);
    e.i32(spec.base_sequence);
    e.i32(count);
    e.finish()?;
    if spec.compression == Compression::None {
        encode_records(&mut out, records, base_ts, now_ms, delta)?;
    } else {
        let mut body = Vec::new();
        encode_records(&mut body, records, base_ts, now_ms, delta)?;
        let body = compression::compress(spec.compression, &body)
            .map_err(|e| EncodeError::Unsupported(e.to_string()))?;
        out.extend_from_slice(&body);
    }

    // Offsets of the length and CRC fields, and where the CRC's coverage starts (attributes).
    const LENGTH_AT: usize = 8;
    const CRC_AT: usize = 17;
    const CRC_FROM: usize = 21;
    let batch_len = i32::try_from(out.len() - 12).map_err(|_| EncodeError::TooLong {
        what: "batch",
        len: out.len() - 12,
    })?;
    out[LENGTH_AT..LENGTH_AT + 4].copy_from_slice(&batch_len.to_be_bytes());
    let crc = crc32c::crc32c(&out[CRC_FROM..]);
    out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Appends `records` to `buf` in the batch's record format, each framed by its length (counted
/// first, so nothing is encoded twice).
fn encode_records(
    buf: &mut Vec<u8>,
    records: &[ProduceRecord],
    base_ts: i64,
    now_ms: i64,
    delta: impl Fn(usize) -> i32,
) -> Result<(), crate::error::EncodeError> {
    use crate::codec::{varint_len, varlong_len};
    use crate::error::EncodeError;
    let len_i32 = |what: &'static str, n: usize| {
        i32::try_from(n).map_err(|_| EncodeError::TooLong { what, len: n })
    };
    let bytes_len = |b: Option<&[u8]>| -> Result<usize, EncodeError> {
        Ok(match b {
            None => varint_len(-1),
            Some(b) => varint_len(len_i32("bytes", b.len())?) + b.len(),
        })
    };
    let mut e = Encoder::new(buf, false);
    let var_bytes = |e: &mut Encoder<'_>, b: Option<&[u8]>| match b {
        None => e.varint(-1),
        Some(b) => {
            // Its length was checked by `bytes_len` before.
            e.varint(b.len() as i32);
            e.raw(b);
        }
    };
    for (i, rec) in records.iter().enumerate() {
        let ts_delta = rec.timestamp.unwrap_or(now_ms) - base_ts;
        let offset_delta = delta(i);
        let mut len = 1 // attributes
            + varlong_len(ts_delta)
            + varint_len(offset_delta)
            + bytes_len(rec.key.as_deref())?
            + bytes_len(rec.value.as_deref())?
            + varint_len(len_i32("headers", rec.headers.len())?);
        for h in &rec.headers {
            len += bytes_len(Some(h.key.as_bytes()))? + bytes_len(h.value.as_deref())?;
        }
        e.varint(len_i32("record", len)?);
        e.i8(0);
        e.varlong(ts_delta);
        e.varint(offset_delta);
        var_bytes(&mut e, rec.key.as_deref());
        var_bytes(&mut e, rec.value.as_deref());
        e.varint(rec.headers.len() as i32);
        for h in &rec.headers {
            var_bytes(&mut e, Some(h.key.as_bytes()));
            var_bytes(&mut e, h.value.as_deref());
        }
    }
    e.finish()
}

/// The first and the last timestamp of a batch of `records`, `now_ms` standing for a record
/// without one: the base the records' timestamp deltas count from, and the batch's max.
fn batch_timestamps(records: &[ProduceRecord], now_ms: i64) -> (i64, i64) {
    let base = records
        .iter()
        .filter_map(|r| r.timestamp)
        .min()
        .unwrap_or(now_ms);
    let max = records
        .iter()
        .map(|r| r.timestamp.unwrap_or(now_ms))
        .max()
        .unwrap_or(now_ms);
    (base, max)
}

/// The bytes [`encode_batch`] writes for `records` without compression, numbered 0, 1, 2...
/// (no `offset_deltas`), `now_ms` standing for a record without a timestamp: the batch header
/// and each record with the varints that frame it. Counted, not encoded. A record alone in its
/// batch takes `uncompressed_batch_len(std::slice::from_ref(record), 0)` whatever its timestamp (its
/// timestamp and offset deltas are 0).
pub fn uncompressed_batch_len(records: &[ProduceRecord], now_ms: i64) -> usize {
    use crate::codec::{varint_len, varlong_len};
    let len_i32 = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let var_bytes = |b: Option<usize>| match b {
        None => varint_len(-1),
        Some(n) => varint_len(len_i32(n)) + n,
    };
    let (base_ts, _) = batch_timestamps(records, now_ms);
    let records_len: usize = records
        .iter()
        .enumerate()
        .map(|(i, rec)| {
            let body = 1 // attributes
                + varlong_len(rec.timestamp.unwrap_or(now_ms) - base_ts)
                + varint_len(len_i32(i))
                + var_bytes(rec.key.as_ref().map(Bytes::len))
                + var_bytes(rec.value.as_ref().map(Bytes::len))
                + varint_len(len_i32(rec.headers.len()))
                + rec
                    .headers
                    .iter()
                    .map(|h| {
                        var_bytes(Some(h.key.len())) + var_bytes(h.value.as_ref().map(Bytes::len))
                    })
                    .sum::<usize>();
            varint_len(len_i32(body)) + body
        })
        .sum();
    BATCH_OVERHEAD + records_len
}

/// A control batch (transaction marker) as a transaction coordinator writes it: `commit` or abort.
pub fn encode_control_batch(
    base_offset: i64,
    producer_id: i64,
    commit: bool,
) -> Result<Vec<u8>, crate::error::EncodeError> {
    let key = [0u8, 0, 0, u8::from(commit)];
    let value = [0u8, 0, 0, 0, 0, 0];
    encode_batch(
        &BatchSpec {
            base_offset,
            producer_id,
            producer_epoch: 0,
            transactional: true,
            control: true,
            ..Default::default()
        },
        &[ProduceRecord {
            key: Some(Bytes::copy_from_slice(&key)),
            value: Some(Bytes::copy_from_slice(&value)),
            headers: vec![],
            timestamp: Some(0),
        }],
        0,
        None,
    )
}

#[cfg(test)]
mod tests;
