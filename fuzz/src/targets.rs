//! One [`Target`] per decoder: seeds built with orderly's own encoders, and the run of one input.

use bytes::Bytes;
use orderly_engine::metadata;
use orderly_protocol::consumer_protocol::{Assignment, Subscription, TopicPartitions};
use orderly_protocol::messages::fetch::{
    CurrentLeader, FetchPartitionResponse, FetchRequest, FetchResponse, FetchTopicResponse,
};
use orderly_protocol::messages::{
    Request, api_versions, consumer_group_heartbeat, create_topics, decode_request,
    decode_response, describe_groups, encode_request, encode_response, find_coordinator, heartbeat,
    init_producer_id, join_group, leave_group, list_offsets, metadata as md, offset_commit,
    offset_fetch, produce, sync_group,
};
use orderly_protocol::records::compression::{compress, decompress};
use orderly_protocol::records::{
    AbortedTransaction, BatchSpec, DecodeOptions, DecodedRecords, encode_batch,
    encode_control_batch,
};
use orderly_protocol::{Compression, IsolationLevel, ProduceRecord, WireHeader};
use rand::Rng;
use rand::rngs::StdRng;

/// What one input did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The decoder returned an error (the expected answer to most mutants).
    Rejected,
    /// The decoder returned a value that keeps its invariants.
    Accepted,
    /// The decoder returned a value that breaks an invariant it documents.
    Violation(String),
}

type Seeds = Box<dyn Fn(&mut StdRng) -> Vec<Vec<u8>> + Send + Sync>;
type Run = Box<dyn Fn(&[u8]) -> Outcome + Send + Sync>;

/// A decoder under test.
pub struct Target {
    /// Short name (`cargo xtask fuzz <name>`).
    pub name: &'static str,
    /// What it decodes.
    pub what: &'static str,
    /// Valid encodings to start from.
    pub seeds: Seeds,
    /// Runs one input.
    pub run: Run,
    /// Applied to half the mutants (e.g. recompute CRCs so mutations reach past the CRC check).
    pub fixup: Option<fn(&mut Vec<u8>)>,
    /// Mutants are cut to this length.
    pub max_len: usize,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Every target, in a fixed order.
pub fn targets() -> Vec<Target> {
    vec![
        fetch_response(),
        record_batches(),
        decompression(),
        message::<api_versions::ApiVersionsRequest>("api_versions"),
        message::<consumer_group_heartbeat::ConsumerGroupHeartbeatRequest>(
            "consumer_group_heartbeat",
        ),
        message::<create_topics::CreateTopicsRequest>("create_topics"),
        message::<describe_groups::DescribeGroupsRequest>("describe_groups"),
        message::<FetchRequest>("fetch"),
        message::<find_coordinator::FindCoordinatorRequest>("find_coordinator"),
        message::<heartbeat::HeartbeatRequest>("heartbeat"),
        message::<init_producer_id::InitProducerIdRequest>("init_producer_id"),
        message::<join_group::JoinGroupRequest>("join_group"),
        message::<leave_group::LeaveGroupRequest>("leave_group"),
        message::<list_offsets::ListOffsetsRequest>("list_offsets"),
        message::<md::MetadataRequest>("metadata"),
        message::<offset_commit::OffsetCommitRequest>("offset_commit"),
        message::<offset_fetch::OffsetFetchRequest>("offset_fetch"),
        message::<produce::ProduceRequest>("produce"),
        message::<sync_group::SyncGroupRequest>("sync_group"),
        subscription(),
        assignment(),
        commit_metadata(),
    ]
}

/// A few plausible Kafka token streams (small ints, compact lengths, short strings).
fn token_streams(rng: &mut StdRng, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|_| {
            let mut v = Vec::new();
            for _ in 0..rng.random_range(4..40) {
                match rng.random_range(0..6) {
                    0 => v.extend_from_slice(&rng.random_range(-1i32..4).to_be_bytes()),
                    1 => v.extend_from_slice(&rng.random_range(-1i16..4).to_be_bytes()),
                    2 => v.push(rng.random_range(0..4)),
                    3 => v.extend_from_slice(&[3, b'a', b'b']),
                    4 => v.extend_from_slice(&[0, 2, b'x', b'y']),
                    _ => v.extend_from_slice(&rng.random_range(-1i64..4).to_be_bytes()),
                }
            }
            v
        })
        .collect()
}

/// Request and response decoders of `R` at every version it speaks. Input: a selector byte
/// (bit 7: response, else request; the rest picks the version) and the body.
fn message<R>(name: &'static str) -> Target
where
    R: Request + Default,
    R::Response: Default,
{
    let versions = u8::try_from(R::MAX_VERSION - R::MIN_VERSION + 1).unwrap_or(1);
    Target {
        name,
        what: R::NAME,
        seeds: Box::new(move |rng| {
            let mut out = Vec::new();
            for i in 0..versions {
                let v = R::MIN_VERSION + i16::from(i);
                if let Ok(b) = encode_response::<R>(&R::Response::default(), v) {
                    out.push([&[0x80 | i][..], &b].concat());
                }
                if let Ok(b) = encode_request(&R::default(), v) {
                    out.push([&[i][..], &b].concat());
                }
            }
            for (k, s) in token_streams(rng, 16).into_iter().enumerate() {
                let sel = (u8::try_from(k).unwrap_or(0) % versions)
                    | if k.is_multiple_of(2) { 0x80 } else { 0 };
                out.push([&[sel][..], &s].concat());
            }
            out
        }),
        run: Box::new(move |data| {
            let Some((&sel, body)) = data.split_first() else {
                return Outcome::Rejected;
            };
            let v = R::MIN_VERSION + i16::from((sel & 0x7f) % versions);
            let body = Bytes::copy_from_slice(body);
            let ok = if sel & 0x80 != 0 {
                decode_response::<R>(body, v).is_ok()
            } else {
                decode_request::<R>(body, v).is_ok()
            };
            if ok {
                Outcome::Accepted
            } else {
                Outcome::Rejected
            }
        }),
        fixup: None,
        max_len: 4096,
    }
}

fn record(rng: &mut StdRng, i: usize) -> ProduceRecord {
    let value_len = rng.random_range(0..64);
    ProduceRecord {
        key: (!i.is_multiple_of(3)).then(|| Bytes::from(format!("s-{}", i % 7))),
        value: (i % 5 != 4).then(|| Bytes::from(vec![b'v'; value_len])),
        headers: if i.is_multiple_of(2) {
            vec![WireHeader {
                key: "h".into(),
                value: Some(Bytes::from_static(b"1")),
            }]
        } else {
            Vec::new()
        },
        timestamp: Some(1_700_000_000_000 + i64::try_from(i).unwrap_or(0)),
    }
}

/// Batches of every codec (and a transactional one and a control marker), laid end to end from
/// offset `base`.
fn batches(rng: &mut StdRng, base: i64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = base;
    let codecs = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    for (k, codec) in codecs.into_iter().enumerate() {
        let n = rng.random_range(1..4);
        let recs: Vec<ProduceRecord> = (0..n).map(|i| record(rng, i + k)).collect();
        let spec = BatchSpec {
            base_offset: offset,
            compression: codec,
            producer_id: if k == 4 { 7 } else { -1 },
            producer_epoch: if k == 4 { 0 } else { -1 },
            base_sequence: if k == 4 { 0 } else { -1 },
            transactional: k == 4,
            ..BatchSpec::default()
        };
        if let Ok(b) = encode_batch(&spec, &recs, 1_700_000_000_000, None) {
            out.extend_from_slice(&b);
        }
        offset += i64::try_from(n).unwrap_or(1);
    }
    if let Ok(b) = encode_control_batch(offset, 7, false) {
        out.extend_from_slice(&b);
    }
    out
}

/// Recomputes the CRC-32C of every whole batch in a record set, so a mutation inside a batch is
/// judged by the decoder rather than stopped by the checksum.
fn fix_crcs(buf: &mut [u8], start: usize) {
    let mut at = start;
    while at + 21 <= buf.len() {
        let len = i32::from_be_bytes([buf[at + 8], buf[at + 9], buf[at + 10], buf[at + 11]]);
        let Ok(len) = usize::try_from(len) else {
            return;
        };
        let end = at + 12 + len;
        if len < 9 || end > buf.len() {
            return;
        }
        let crc = crc32c::crc32c(&buf[at + 21..end]);
        buf[at + 17..at + 21].copy_from_slice(&crc.to_be_bytes());
        at = end;
    }
}

/// The invariants a decoded record set documents: records ascend from the fetch offset, and the
/// next fetch starts past the last record. (A next offset below the fetch offset is possible when
/// every batch lies below it; the fetch path takes the larger of the two.)
fn check_records(d: &DecodedRecords, fetch_offset: i64) -> Outcome {
    let mut last = fetch_offset - 1;
    for r in &d.records {
        if r.offset <= last {
            return Outcome::Violation(format!(
                "record offsets not ascending from the fetch offset {fetch_offset}: {} after {last}",
                r.offset
            ));
        }
        last = r.offset;
    }
    if d.records.is_empty() {
        return Outcome::Rejected;
    }
    match d.next_offset {
        Some(n) if n <= last => Outcome::Violation(format!(
            "next offset {n} not past the last record {last} (fetch offset {fetch_offset})"
        )),
        None => Outcome::Violation("records decoded but no next offset".into()),
        _ if d.error.is_none() => Outcome::Accepted,
        _ => Outcome::Rejected,
    }
}

fn decode_opts(sel: u8) -> (IsolationLevel, DecodeOptions) {
    let iso = if sel & 1 == 0 {
        IsolationLevel::ReadCommitted
    } else {
        IsolationLevel::ReadUncommitted
    };
    (
        iso,
        DecodeOptions {
            check_crc: sel & 2 == 0,
            max_decompressed: 1 << 20,
            copy_records: sel & 4 == 0,
            copy_chunk: if sel & 8 == 0 { 0 } else { 256 },
        },
    )
}

/// The record-batch v2 decoder on a whole record set. Input: a selector byte (isolation, CRC
/// check, copy, copy chunks), the fetch offset's low byte, then the batches.
fn record_batches() -> Target {
    Target {
        name: "record_batches",
        what: "record-batch v2 decoding (all codecs, control and transactional batches)",
        seeds: Box::new(|rng| {
            (0..24u8)
                .map(|k| {
                    let base = i64::from(k % 4) * 10;
                    [&[k % 8, k % 3][..], &batches(rng, base)].concat()
                })
                .collect()
        }),
        run: Box::new(|data| {
            let [sel, fo, body @ ..] = data else {
                return Outcome::Rejected;
            };
            let (iso, opts) = decode_opts(*sel);
            let fetch_offset = i64::from(*fo);
            let aborted = [AbortedTransaction {
                producer_id: 7,
                first_offset: 0,
            }];
            let d = decode_records(
                Bytes::copy_from_slice(body),
                fetch_offset,
                iso,
                &aborted,
                &opts,
            );
            check_records(&d, fetch_offset)
        }),
        fixup: Some(|b| fix_crcs(b, 2)),
        max_len: 16 * 1024,
    }
}

use orderly_protocol::records::decode_records;

/// A whole Fetch response at every version we speak, then every partition's records decoded as the consumer
/// does. Input: a selector byte (version, decode options) and the response body.
fn fetch_response() -> Target {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    const VERSIONS: u8 = (FetchRequest::MAX_VERSION - FetchRequest::MIN_VERSION + 1) as u8;
    Target {
        name: "fetch_response",
        what: "Fetch response and the record batches inside it",
        seeds: Box::new(|rng| {
            let mut out = Vec::new();
            for k in 0..2 * VERSIONS {
                let v = FetchRequest::MIN_VERSION + i16::from(k % VERSIONS);
                let resp = FetchResponse {
                    throttle_time_ms: i32::from(k),
                    error_code: Default::default(),
                    session_id: 0,
                    responses: vec![FetchTopicResponse {
                        topic: "t".into(),
                        topic_id: [k; 16],
                        partitions: vec![
                            FetchPartitionResponse {
                                partition_index: 0,
                                high_watermark: 40,
                                last_stable_offset: 40,
                                log_start_offset: 0,
                                current_leader: (k % 2 == 0).then_some(CurrentLeader {
                                    leader_id: 1,
                                    leader_epoch: 3,
                                }),
                                aborted_transactions: Some(vec![AbortedTransaction {
                                    producer_id: 7,
                                    first_offset: 0,
                                }]),
                                preferred_read_replica: -1,
                                records: Some(Bytes::from(batches(rng, 0))),
                                ..Default::default()
                            },
                            FetchPartitionResponse {
                                partition_index: 1,
                                records: (k % 3 == 0).then(Bytes::new),
                                ..Default::default()
                            },
                        ],
                    }],
                };
                if let Ok(b) = encode_response::<FetchRequest>(&resp, v) {
                    out.push([&[k][..], &b].concat());
                }
            }
            out
        }),
        run: Box::new(|data| {
            let Some((&sel, body)) = data.split_first() else {
                return Outcome::Rejected;
            };
            let v = FetchRequest::MIN_VERSION + i16::from(sel % VERSIONS);
            let Ok(resp) = decode_response::<FetchRequest>(Bytes::copy_from_slice(body), v) else {
                return Outcome::Rejected;
            };
            let (iso, opts) = decode_opts(sel >> 3);
            let mut outcome = Outcome::Rejected;
            for t in resp.responses {
                for p in t.partitions {
                    let Some(records) = p.records else { continue };
                    let aborted = p.aborted_transactions.unwrap_or_default();
                    let fetch_offset = p.log_start_offset.clamp(0, 1 << 40);
                    let d = decode_records(records, fetch_offset, iso, &aborted, &opts);
                    match check_records(&d, fetch_offset) {
                        Outcome::Violation(v) => return Outcome::Violation(v),
                        Outcome::Accepted => outcome = Outcome::Accepted,
                        Outcome::Rejected => {}
                    }
                }
            }
            outcome
        }),
        fixup: None,
        max_len: 16 * 1024,
    }
}

/// Every codec's decompression with a 1 MiB limit. Input: a codec byte, then the compressed bytes.
fn decompression() -> Target {
    const CODECS: [Compression; 4] = [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];
    Target {
        name: "decompression",
        what: "gzip, snappy (raw and xerial), lz4 frame, zstd",
        seeds: Box::new(|rng| {
            let mut out = Vec::new();
            for (k, c) in CODECS.into_iter().enumerate() {
                for n in [0usize, 10, 300, 5000] {
                    let data: Vec<u8> = (0..n)
                        .map(|i| {
                            if rng.random_bool(0.7) {
                                b'a' + (i % 7) as u8
                            } else {
                                rng.random()
                            }
                        })
                        .collect();
                    if let Ok(z) = compress(c, &data) {
                        out.push([&[u8::try_from(k).unwrap_or(0)][..], &z].concat());
                    }
                }
            }
            out
        }),
        run: Box::new(|data| {
            let Some((&sel, body)) = data.split_first() else {
                return Outcome::Rejected;
            };
            let codec = CODECS[usize::from(sel) % CODECS.len()];
            match decompress(codec, body, 1 << 20) {
                Ok(out) if out.len() > 1 << 20 => Outcome::Violation(format!(
                    "{} decompressed {} bytes past the 1 MiB limit",
                    codec.name(),
                    out.len()
                )),
                Ok(_) => Outcome::Accepted,
                Err(_) => Outcome::Rejected,
            }
        }),
        fixup: None,
        max_len: 16 * 1024,
    }
}

fn tps(k: i32) -> Vec<TopicPartitions> {
    (0..k)
        .map(|t| TopicPartitions {
            topic: format!("topic-{t}"),
            partitions: (0..=t).collect(),
        })
        .collect()
}

/// The classic consumer protocol's Subscription (JoinGroup member metadata), versions 0–3 and
/// newer.
fn subscription() -> Target {
    Target {
        name: "subscription",
        what: "consumer-protocol Subscription (JoinGroup metadata)",
        seeds: Box::new(|_| {
            (0..4i16)
                .filter_map(|v| {
                    Subscription {
                        version: v,
                        topics: vec!["a".into(), "bb".into()],
                        user_data: (v % 2 == 0).then(|| Bytes::from_static(b"ud")),
                        owned_partitions: tps(i32::from(v)),
                        generation_id: i32::from(v) - 1,
                        rack_id: (v == 3).then(|| "r1".into()),
                    }
                    .encode()
                    .ok()
                    .map(|b| b.to_vec())
                })
                .collect()
        }),
        run: Box::new(
            |data| match Subscription::decode(Bytes::copy_from_slice(data)) {
                Ok(_) => Outcome::Accepted,
                Err(_) => Outcome::Rejected,
            },
        ),
        fixup: None,
        max_len: 4096,
    }
}

/// The classic consumer protocol's Assignment (SyncGroup assignment).
fn assignment() -> Target {
    Target {
        name: "assignment",
        what: "consumer-protocol Assignment (SyncGroup assignment)",
        seeds: Box::new(|_| {
            (0..4i16)
                .filter_map(|v| {
                    Assignment {
                        version: v,
                        assigned_partitions: tps(i32::from(v) + 1),
                        user_data: (v % 2 == 1).then(|| Bytes::from_static(b"ud")),
                    }
                    .encode()
                    .ok()
                    .map(|b| b.to_vec())
                })
                .collect()
        }),
        run: Box::new(
            |data| match Assignment::decode(Bytes::copy_from_slice(data)) {
                Ok(_) => Outcome::Accepted,
                Err(_) => Outcome::Rejected,
            },
        ),
        fixup: None,
        max_len: 4096,
    }
}

/// orderly's commit metadata (completed offsets above the commit point), as a new owner reads
/// it from OffsetFetch. Input: the commit offset (8 bytes) and the text (lossy UTF-8, as any
/// string the broker hands back). Decoded runs must lie above the commit offset, ascending and
/// apart: anything else would skip records that were never handled.
fn commit_metadata() -> Target {
    Target {
        name: "commit_metadata",
        what: "commit metadata (completed offsets above the commit point)",
        seeds: Box::new(|rng| {
            let mut out = Vec::new();
            for commit in [0i64, 100, 1 << 40, i64::MAX - 1000] {
                let mut runs = Vec::new();
                let mut at = commit;
                for _ in 0..rng.random_range(1..12) {
                    let start = at.saturating_add(rng.random_range(1..50));
                    let end = start.saturating_add(rng.random_range(1..20));
                    runs.push(start..end);
                    at = end;
                }
                let text = metadata::encode(commit, runs, metadata::DEFAULT_LIMIT).text;
                out.push([&commit.to_be_bytes()[..], text.as_bytes()].concat());
            }
            out
        }),
        run: Box::new(|data| {
            let Some((head, text)) = data.split_first_chunk::<8>() else {
                return Outcome::Rejected;
            };
            let commit = i64::from_be_bytes(*head);
            let text = String::from_utf8_lossy(text);
            let Ok(runs) = metadata::decode(commit, &text) else {
                return Outcome::Rejected;
            };
            let mut floor = commit;
            for r in &runs {
                if r.start <= floor || r.end <= r.start {
                    return Outcome::Violation(format!(
                        "run {r:?} not above {floor} (commit offset {commit}): decoded {runs:?} from {text:?}"
                    ));
                }
                floor = r.end - 1;
            }
            Outcome::Accepted
        }),
        fixup: None,
        max_len: 4096,
    }
}
