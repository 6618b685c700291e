//! Tests for the record-batch decoder: round trips, transactions, control batches, truncation, CRC.

use super::*;
use proptest::prelude::*;

fn rec(k: &str, v: Option<&str>) -> ProduceRecord {
    ProduceRecord {
        key: Some(Bytes::copy_from_slice(k.as_bytes())),
        value: v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
        headers: vec![],
        timestamp: Some(1000),
    }
}

fn batch(spec: BatchSpec, recs: &[ProduceRecord]) -> Vec<u8> {
    encode_batch(&spec, recs, 1000, None).unwrap_or_default()
}

fn decode(
    data: Vec<u8>,
    from: i64,
    iso: IsolationLevel,
    aborted: &[AbortedTransaction],
) -> DecodedRecords {
    decode_records(
        Bytes::from(data),
        from,
        iso,
        aborted,
        &DecodeOptions::default(),
    )
}

fn header() -> impl Strategy<Value = WireHeader> {
    (
        "[a-z]{0,4}",
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
    )
        .prop_map(|(key, value)| WireHeader {
            key: key.into(),
            value: value.map(Bytes::from),
        })
}

fn produce_record() -> impl Strategy<Value = ProduceRecord> {
    (
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..16)),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
        proptest::collection::vec(header(), 0..4),
        0i64..1_000_000,
    )
        .prop_map(|(k, v, headers, ts)| ProduceRecord {
            key: k.map(Bytes::from),
            value: v.map(Bytes::from),
            headers,
            timestamp: Some(ts),
        })
}

proptest! {
    #[test]
    fn batches_round_trip(recs in proptest::collection::vec(produce_record(), 1..20), c in 0usize..5, base in 0i64..1_000_000, copy_records: bool, copy_chunk in prop_oneof![Just(0usize), 1usize..400, Just(16 * 1024)]) {
        let compression = [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd][c];
        let data = batch(BatchSpec { base_offset: base, compression, ..Default::default() }, &recs);
        let opts = DecodeOptions { copy_records, copy_chunk, ..Default::default() };
        let out = decode_records(Bytes::from(data), 0, IsolationLevel::ReadCommitted, &[], &opts);
        prop_assert_eq!(&out.error, &None);
        prop_assert_eq!(out.next_offset, Some(base + recs.len() as i64));
        prop_assert_eq!(out.records.len(), recs.len());
        for (i, (got, want)) in out.records.iter().zip(&recs).enumerate() {
            prop_assert_eq!(got.offset, base + i as i64);
            prop_assert_eq!(&got.key, &want.key);
            prop_assert_eq!(&got.value, &want.value);
            prop_assert_eq!(&got.headers, &want.headers);
            prop_assert_eq!(Some(got.timestamp), want.timestamp);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512), crc: bool) {
        let _ = decode_records(Bytes::from(data), 0, IsolationLevel::ReadCommitted,
            &[AbortedTransaction { producer_id: 1, first_offset: 0 }], &DecodeOptions { check_crc: crc, max_decompressed: 1 << 16, copy_records: crc, copy_chunk: 32 });
    }

    #[test]
    fn mutated_batches_never_panic(recs in proptest::collection::vec(produce_record(), 1..4), pos in 0usize..400, byte: u8, copy: bool) {
        let mut data = batch(BatchSpec::default(), &recs);
        if pos < data.len() { data[pos] = byte; }
        let _ = decode_records(Bytes::from(data), 0, IsolationLevel::ReadUncommitted, &[], &DecodeOptions { check_crc: false, max_decompressed: 1 << 16, copy_records: copy, copy_chunk: 64 });
    }

    #[test]
    fn any_truncation_is_not_an_error(recs in proptest::collection::vec(produce_record(), 1..5), cut in 1usize..400) {
        let mut data = batch(BatchSpec::default(), &recs);
        let second = batch(BatchSpec { base_offset: recs.len() as i64, ..Default::default() }, &recs);
        let full = data.len();
        data.extend_from_slice(&second);
        let cut = full + 1 + (cut % (second.len() - 1));
        data.truncate(cut);
        let out = decode(data, 0, IsolationLevel::ReadCommitted, &[]);
        prop_assert_eq!(out.error, None);
        prop_assert!(out.truncated);
        prop_assert_eq!(out.records.len(), recs.len());
        prop_assert_eq!(out.next_offset, Some(recs.len() as i64));
    }
}

/// A length around each boundary where a varint takes one more byte (64, 8 KiB, 1 MiB), the last
/// one the size of the largest reply a produce request may carry.
fn len_across_varint_steps() -> impl Strategy<Value = usize> {
    prop_oneof![
        8 => 0usize..200,
        2 => 8_100usize..8_300,
        1 => (1usize << 20) - 80..(1 << 20) + 80,
    ]
}

/// A record with or without key, value, headers and timestamp, its key and value of any size up
/// to a little over 1 MiB.
fn sized_record() -> impl Strategy<Value = ProduceRecord> {
    (
        proptest::option::of(len_across_varint_steps()),
        proptest::option::of(len_across_varint_steps()),
        proptest::collection::vec(header(), 0..4),
        proptest::option::of(0i64..2_000_000_000_000),
    )
        .prop_map(|(k, v, headers, timestamp)| ProduceRecord {
            key: k.map(|n| Bytes::from(vec![b'k'; n])),
            value: v.map(|n| Bytes::from(vec![b'v'; n])),
            headers,
            timestamp,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// What `uncompressed_batch_len` counts is what `encode_batch` writes, for one record (the
    /// size a reply is held to) and for several with timestamps far apart or missing.
    #[test]
    fn the_counted_batch_length_is_the_encoded_one(recs in proptest::collection::vec(sized_record(), 1..4), now in 0i64..2_000_000_000_000) {
        let one = &recs[..1];
        let encoded = encode_batch(&BatchSpec::default(), one, now, None).unwrap_or_default();
        prop_assert_eq!(uncompressed_batch_len(one, now), encoded.len());
        prop_assert_eq!(uncompressed_batch_len(one, 0), encoded.len(), "a record alone: the time does not count");
        let encoded = encode_batch(&BatchSpec::default(), &recs, now, None).unwrap_or_default();
        prop_assert_eq!(uncompressed_batch_len(&recs, now), encoded.len());
    }
}

#[test]
fn crc_mismatch_is_a_typed_error_and_keeps_earlier_batches() {
    let mut data = batch(BatchSpec::default(), &[rec("a", Some("1"))]);
    let mut bad = batch(
        BatchSpec {
            base_offset: 1,
            ..Default::default()
        },
        &[rec("b", Some("2"))],
    );
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    data.extend_from_slice(&bad);
    let out = decode(data, 0, IsolationLevel::ReadCommitted, &[]);
    assert_eq!(out.records.len(), 1);
    assert_eq!(out.next_offset, Some(1));
    assert!(
        matches!(out.error, Some((1, BatchError::Crc { .. }))),
        "{:?}",
        out.error
    );
}

#[test]
fn control_batches_are_skipped_and_advance_the_offset() {
    let mut data = batch(
        BatchSpec {
            producer_id: 7,
            producer_epoch: 0,
            transactional: true,
            ..Default::default()
        },
        &[rec("a", Some("1"))],
    );
    data.extend(encode_control_batch(1, 7, true).unwrap_or_default());
    let out = decode(data, 0, IsolationLevel::ReadCommitted, &[]);
    assert_eq!(out.error, None);
    assert_eq!(
        out.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![0]
    );
    assert_eq!(out.next_offset, Some(2));

    // A response holding only a marker still moves the position.
    let out = decode(
        encode_control_batch(5, 7, false).unwrap_or_default(),
        5,
        IsolationLevel::ReadCommitted,
        &[],
    );
    assert!(out.records.is_empty());
    assert_eq!(out.next_offset, Some(6));
}

#[test]
fn aborted_transactions_filtered_only_under_read_committed() {
    let txn = |base, pid| BatchSpec {
        base_offset: base,
        producer_id: pid,
        producer_epoch: 0,
        transactional: true,
        ..Default::default()
    };
    // pid 1 aborts offsets 0-1 (marker at 2); pid 2 commits offset 3 (marker at 4); plain record at 5.
    let mut data = batch(
        txn(0, 1),
        &[rec("x", Some("aborted1")), rec("y", Some("aborted2"))],
    );
    data.extend(encode_control_batch(2, 1, false).unwrap_or_default());
    data.extend(batch(txn(3, 2), &[rec("z", Some("committed"))]));
    data.extend(encode_control_batch(4, 2, true).unwrap_or_default());
    data.extend(batch(
        BatchSpec {
            base_offset: 5,
            ..Default::default()
        },
        &[rec("p", Some("plain"))],
    ));
    let aborted = [AbortedTransaction {
        producer_id: 1,
        first_offset: 0,
    }];

    let rc = decode(data.clone(), 0, IsolationLevel::ReadCommitted, &aborted);
    assert_eq!(
        rc.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![3, 5]
    );
    assert_eq!(rc.next_offset, Some(6));
    let ru = decode(data, 0, IsolationLevel::ReadUncommitted, &aborted);
    assert_eq!(
        ru.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![0, 1, 3, 5]
    );
}

#[test]
fn same_producer_commits_after_an_abort() {
    let txn = |base| BatchSpec {
        base_offset: base,
        producer_id: 9,
        producer_epoch: 0,
        transactional: true,
        ..Default::default()
    };
    let mut data = batch(txn(0), &[rec("a", None)]);
    data.extend(encode_control_batch(1, 9, false).unwrap_or_default());
    data.extend(batch(txn(2), &[rec("b", None)]));
    data.extend(encode_control_batch(3, 9, true).unwrap_or_default());
    let out = decode(
        data,
        0,
        IsolationLevel::ReadCommitted,
        &[AbortedTransaction {
            producer_id: 9,
            first_offset: 0,
        }],
    );
    assert_eq!(
        out.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![2]
    );
    assert_eq!(out.next_offset, Some(4));
}

#[test]
fn null_header_values_and_repeated_keys_keep_order() {
    let r = ProduceRecord {
        key: None,
        value: None,
        headers: vec![
            WireHeader {
                key: "k".into(),
                value: Some(Bytes::from_static(b"1")),
            },
            WireHeader {
                key: "k".into(),
                value: None,
            },
            WireHeader {
                key: "a".into(),
                value: Some(Bytes::new()),
            },
            WireHeader {
                key: "k".into(),
                value: Some(Bytes::from_static(b"3")),
            },
        ],
        timestamp: Some(5),
    };
    let out = decode(
        batch(BatchSpec::default(), std::slice::from_ref(&r)),
        0,
        IsolationLevel::ReadCommitted,
        &[],
    );
    assert_eq!(out.records[0].headers, r.headers);
    assert_eq!(
        (out.records[0].key.clone(), out.records[0].value.clone()),
        (None, None)
    );
}

#[test]
fn compacted_gap_advances_past_last_offset_delta() {
    // Records at deltas 0 and 2 survived compaction, but the batch's last offset delta is 4.
    let data = encode_batch(
        &BatchSpec {
            base_offset: 10,
            ..Default::default()
        },
        &[rec("a", None), rec("b", None)],
        0,
        Some(&[0, 4]),
    )
    .unwrap_or_default();
    let out = decode(data, 0, IsolationLevel::ReadCommitted, &[]);
    assert_eq!(
        out.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![10, 14]
    );
    assert_eq!(out.next_offset, Some(15));
}

#[test]
fn records_below_fetch_offset_are_dropped() {
    let data = batch(
        BatchSpec {
            base_offset: 100,
            compression: Compression::Gzip,
            ..Default::default()
        },
        &[rec("a", None), rec("b", None), rec("c", None)],
    );
    let out = decode(data, 102, IsolationLevel::ReadCommitted, &[]);
    assert_eq!(
        out.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![102]
    );
    assert_eq!(out.next_offset, Some(103));
}

#[test]
fn log_append_time_uses_max_timestamp() {
    let recs = [
        ProduceRecord {
            timestamp: Some(10),
            ..rec("a", None)
        },
        ProduceRecord {
            timestamp: Some(50),
            ..rec("b", None)
        },
    ];
    let data = batch(
        BatchSpec {
            log_append_time: true,
            ..Default::default()
        },
        &recs,
    );
    let out = decode(data, 0, IsolationLevel::ReadCommitted, &[]);
    assert!(
        out.records
            .iter()
            .all(|r| r.timestamp == 50 && r.log_append_time)
    );
}

#[test]
fn legacy_magic_is_rejected() {
    let mut data = batch(BatchSpec::default(), &[rec("a", None)]);
    data[16] = 1;
    let out = decode(data, 0, IsolationLevel::ReadCommitted, &[]);
    assert!(matches!(out.error, Some((0, BatchError::Magic(1)))));
}

/// A legacy message set (`offset, size, crc, magic, attributes, [timestamp], key, value`) of one
/// message, as a broker stores it on a topic pinned to an old `message.format.version`: shorter
/// than any v2 batch header.
fn legacy_message_set(magic: u8, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut body = vec![magic, 0];
    if magic == 1 {
        body.extend_from_slice(&1000i64.to_be_bytes());
    }
    for field in [key, value] {
        body.extend_from_slice(&(field.len() as i32).to_be_bytes());
        body.extend_from_slice(field);
    }
    let mut out = 0i64.to_be_bytes().to_vec();
    out.extend_from_slice(&(4 + body.len() as i32).to_be_bytes());
    out.extend_from_slice(&crc32fast_ieee(&body).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// The IEEE CRC-32 of the legacy formats (the decoder never checks it: it stops at the magic).
fn crc32fast_ieee(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn legacy_message_sets_are_named_by_their_format() {
    for magic in [0u8, 1] {
        let data = legacy_message_set(magic, b"s-0", b"v1 message set");
        let out = decode(data, 0, IsolationLevel::ReadCommitted, &[]);
        assert!(out.records.is_empty());
        assert!(
            matches!(out.error, Some((0, BatchError::Magic(m))) if m == magic as i8),
            "magic {magic}: {:?}",
            out.error
        );
    }
}

/// Where the bytes of a decoded record live, relative to the buffer it was decoded from.
fn fields_inside(r: &FetchedRecord, buf: &[u8]) -> Vec<bool> {
    let range = buf.as_ptr_range();
    let inside = |b: &Bytes| range.contains(&b.as_ptr());
    let mut out: Vec<bool> = [&r.key, &r.value]
        .into_iter()
        .flatten()
        .map(inside)
        .collect();
    for h in &r.headers {
        out.push(inside(h.key.as_bytes()));
        out.extend(h.value.as_ref().map(inside));
    }
    out
}

/// A record kept after decoding must not keep the response alive: with
/// `copy_records` (the default) records are copied out in chunks; without it, uncompressed
/// fields are slices of the response.
#[test]
fn copied_records_do_not_point_into_the_response() {
    let mut r = rec("session-1", Some("a value of some length"));
    r.headers = vec![WireHeader {
        key: "h".into(),
        value: Some(Bytes::from_static(b"header value")),
    }];
    let recs = vec![r.clone(), r.clone(), r];
    for compression in [Compression::None, Compression::Lz4] {
        let data = Bytes::from(batch(
            BatchSpec {
                compression,
                ..Default::default()
            },
            &recs,
        ));
        for copy_records in [true, false] {
            let opts = DecodeOptions {
                copy_records,
                ..Default::default()
            };
            let out = decode_records(data.clone(), 0, IsolationLevel::ReadCommitted, &[], &opts);
            assert_eq!(out.records.len(), 3);
            for got in &out.records {
                let inside = fields_inside(got, &data);
                assert_eq!(inside.len(), 4);
                let expect_inside = !copy_records && compression == Compression::None;
                assert!(
                    inside.iter().all(|i| *i == expect_inside),
                    "{compression:?} copy_records={copy_records}: fields inside the response: {inside:?}"
                );
            }
        }
    }
}

/// Copied records share chunks of at most `copy_chunk` bytes: consecutive records that fit one
/// chunk are in one allocation (their fields are close together, in order), a record that would
/// overflow it starts the next one, and a record larger than a chunk gets one of its own.
#[test]
fn copied_records_share_chunks_of_bounded_size() {
    let small: Vec<ProduceRecord> = (0..10)
        .map(|i| {
            let mut r = rec(&format!("k{i}"), Some("v".repeat(30).as_str()));
            r.headers = vec![WireHeader {
                key: "seq".into(),
                value: Some(Bytes::from(i.to_string())),
            }];
            r
        })
        .collect();
    let mut recs = small.clone();
    recs.push(rec("big", Some("x".repeat(500).as_str())));
    recs.extend(small);
    let data = Bytes::from(batch(BatchSpec::default(), &recs));
    let chunk = 200;
    let opts = DecodeOptions {
        copy_chunk: chunk,
        ..Default::default()
    };
    let out = decode_records(data.clone(), 0, IsolationLevel::ReadCommitted, &[], &opts);
    assert_eq!(out.error, None);
    assert_eq!(out.records.len(), 21);
    let at = |i: usize| out.records[i].key.as_ref().expect("key").as_ptr() as usize;
    // Inside a chunk the records lie back to back, so consecutive small records (all the same
    // size on the wire) are exactly one record's length apart; across chunks they are not.
    let step = at(1) - at(0);
    assert!(
        (40..100).contains(&step),
        "records 0 and 1 not in one chunk: {step}"
    );
    let mut chunks = vec![vec![0usize]];
    for i in 1..21 {
        let same = at(i).wrapping_sub(at(i - 1)) == step;
        if same {
            chunks.last_mut().expect("chunk").push(i);
        } else {
            chunks.push(vec![i]);
        }
    }
    let per_chunk = chunk / step;
    assert_eq!(chunks.len(), 7, "{chunks:?}");
    assert_eq!(chunks[0].len(), per_chunk, "{chunks:?}");
    assert!(
        chunks.iter().all(|c| c.len() <= per_chunk),
        "a chunk over 200 bytes: {chunks:?}"
    );
    assert!(
        chunks.contains(&vec![10]),
        "the 500-byte record shares: {chunks:?}"
    );
    for r in &out.records {
        assert!(fields_inside(r, &data).iter().all(|i| !i));
    }
    // Records of a chunk of several name it, and their fields lie in it; a record alone in its
    // allocation names none (nothing is shared).
    let contains = |s: &SharedBuffer, b: &Bytes| {
        let a = b.as_ptr() as usize;
        a >= s.addr && a + b.len() <= s.addr + s.len
    };
    for c in &chunks {
        let first = out.records[c[0]].shared;
        if c.len() == 1 {
            assert_eq!(first, None, "record {} alone in its chunk", c[0]);
            continue;
        }
        let s = first.expect("a chunk of several records is named");
        assert!(s.len <= chunk, "{s:?}");
        for &i in c {
            let r = &out.records[i];
            assert_eq!(r.shared, Some(s), "record {i}");
            assert!(contains(&s, r.key.as_ref().expect("key")));
            assert!(contains(&s, r.value.as_ref().expect("value")));
            // Header names too: a decoded header allocates nothing of its own.
            assert!(contains(&s, r.headers[0].key.as_bytes()), "record {i}");
            assert!(contains(
                &s,
                r.headers[0].value.as_ref().expect("header value")
            ));
        }
    }
    let named: std::collections::HashSet<_> = out.records.iter().filter_map(|r| r.shared).collect();
    assert_eq!(named.len(), chunks.iter().filter(|c| c.len() > 1).count());
    // The default copies in chunks too.
    let dflt = decode_records(
        data,
        0,
        IsolationLevel::ReadCommitted,
        &[],
        &DecodeOptions::default(),
    );
    assert!(dflt.records[0].shared.is_some());
    assert_eq!(dflt.records[0].shared, dflt.records[1].shared);
}

/// Found by `cargo xtask fuzz` (fetch_response): a batch starting below the previous batch's end
/// handed out records whose offsets went backwards (the engine's tracker would have taken them).
#[test]
fn a_batch_going_backwards_is_an_error_and_keeps_earlier_batches() {
    let mut data = batch(
        BatchSpec {
            base_offset: 10,
            ..Default::default()
        },
        &[rec("a", Some("1")), rec("a", Some("2"))],
    );
    data.extend_from_slice(&batch(
        BatchSpec {
            base_offset: 3,
            ..Default::default()
        },
        &[rec("b", Some("3"))],
    ));
    let out = decode(data, 0, IsolationLevel::ReadCommitted, &[]);
    let offsets: Vec<i64> = out.records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [10, 11]);
    assert_eq!(out.next_offset, Some(12));
    assert!(
        matches!(out.error, Some((3, BatchError::Decode(_)))),
        "{:?}",
        out.error
    );
}

/// Record offsets inside a batch must ascend and stay within its last offset delta.
#[test]
fn record_offsets_out_of_order_or_past_the_batch_are_an_error() {
    for deltas in [[1, 0], [0, 0], [0, 5]] {
        // `encode_batch` takes the last delta as the batch's last offset delta, so [0, 5] with a
        // patched header says 0..=1 while a record claims 5.
        let mut data = encode_batch(
            &BatchSpec::default(),
            &[rec("a", Some("1")), rec("a", Some("2"))],
            1000,
            Some(&deltas),
        )
        .unwrap_or_default();
        if deltas == [0, 5] {
            // last_offset_delta sits at bytes 23..27; set it to 1 and fix the CRC.
            data[23..27].copy_from_slice(&1i32.to_be_bytes());
            let crc = crc32c::crc32c(&data[21..]);
            data[17..21].copy_from_slice(&crc.to_be_bytes());
        }
        let out = decode(data, 0, IsolationLevel::ReadCommitted, &[]);
        assert!(out.records.is_empty(), "{deltas:?}: {:?}", out.records);
        assert!(
            matches!(out.error, Some((0, BatchError::Decode(_)))),
            "{deltas:?}: {:?}",
            out.error
        );
    }
}

/// Found by `cargo xtask fuzz` (record_batches): a batch failing at its third record used to
/// hand out its first two while `next_offset` still pointed at the batch, so the next fetch
/// delivered them again.
#[test]
fn a_batch_failing_midway_hands_out_none_of_its_records() {
    let mut data = batch(BatchSpec::default(), &[rec("a", Some("1"))]);
    let mut bad = batch(
        BatchSpec {
            base_offset: 1,
            ..Default::default()
        },
        &[rec("b", Some("2")), rec("b", Some("3"))],
    );
    // The record count (bytes 57..61) claims a third record the body does not hold.
    bad[57..61].copy_from_slice(&3i32.to_be_bytes());
    let crc = crc32c::crc32c(&bad[21..]);
    bad[17..21].copy_from_slice(&crc.to_be_bytes());
    data.extend_from_slice(&bad);
    let out = decode(data, 0, IsolationLevel::ReadCommitted, &[]);
    let offsets: Vec<i64> = out.records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0]);
    assert_eq!(out.next_offset, Some(1));
    assert!(
        matches!(out.error, Some((1, BatchError::Decode(_)))),
        "{:?}",
        out.error
    );
}

/// Found by `cargo xtask fuzz` (record_batches): a control batch with a negative last offset
/// delta set `next_offset` far below its base offset.
#[test]
fn a_negative_last_offset_delta_is_an_error() {
    let mut data = encode_control_batch(5, 7, true).unwrap_or_default();
    data[23..27].copy_from_slice(&(-100i32).to_be_bytes());
    let crc = crc32c::crc32c(&data[21..]);
    data[17..21].copy_from_slice(&crc.to_be_bytes());
    let out = decode(data, 0, IsolationLevel::ReadCommitted, &[]);
    assert_eq!(out.next_offset, None);
    assert!(
        matches!(out.error, Some((5, BatchError::Decode(_)))),
        "{:?}",
        out.error
    );
}

/// The bytes of a batch, field by field: a transactional batch of three records (a header with
/// a null value, a null key, a null value, timestamps before and after the base, offset deltas
/// with a gap), uncompressed. The CRC covers everything from the attributes on.
#[test]
fn an_encoded_batch_has_the_wire_layout() {
    let records = [
        ProduceRecord {
            key: Some(Bytes::from_static(b"k1")),
            value: Some(Bytes::from_static(b"value")),
            headers: vec![
                WireHeader {
                    key: "h".into(),
                    value: Some(Bytes::from_static(b"x")),
                },
                WireHeader {
                    key: "n".into(),
                    value: None,
                },
            ],
            timestamp: Some(5_000),
        },
        ProduceRecord {
            key: None,
            value: Some(Bytes::from_static(b"v")),
            headers: vec![],
            timestamp: None,
        },
        ProduceRecord {
            key: Some(Bytes::from_static(b"k3")),
            value: None,
            headers: vec![],
            timestamp: Some(4_000),
        },
    ];
    let spec = BatchSpec {
        base_offset: 7,
        producer_id: 42,
        producer_epoch: 3,
        base_sequence: 9,
        transactional: true,
        leader_epoch: 5,
        ..BatchSpec::default()
    };
    let got = encode_batch(&spec, &records, 6_000, Some(&[0, 1, 3])).unwrap_or_default();
    let hex: String = got.iter().map(|b| format!("{b:02x}")).collect();
    let want = [
        "0000000000000007", // base offset
        "00000059",         // batch length
        "00000005",         // partition leader epoch
        "02",               // magic
        "9572efd3",         // CRC-32C
        "0010",             // attributes: transactional
        "00000003",         // last offset delta
        "0000000000000fa0", // base timestamp: the earliest record's (4,000)
        "0000000000001770", // max timestamp: "now" (6,000) for the record without one
        "000000000000002a", // producer id
        "0003",             // producer epoch
        "00000009",         // base sequence
        "00000003",         // records
        // length 21, attributes, timestamp delta 1,000, offset delta 0, key "k1", value
        // "value", two headers: "h" = "x", "n" = null
        "2a00d00f00046b310a76616c75650402680278026e01",
        // length 8, timestamp delta 2,000, offset delta 1, null key, value "v", no headers
        "1000a01f0201027600",
        // length 8, timestamp delta 0, offset delta 3, key "k3", null value, no headers
        "10000006046b330100",
    ]
    .concat();
    assert_eq!(hex, want);
}
