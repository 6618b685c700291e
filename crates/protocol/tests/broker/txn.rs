//! Transactions written by Apache Kafka's own transactional Java producer (`tests/java/TxProducer.java`),
//! read back with `BrokerConnection::fetch` under read_committed and read_uncommitted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::time::Duration;

use orderly_protocol::{
    BrokerConnection, ConnectionConfig, FetchOptions, FetchSpec, IsolationLevel, PartitionFetch,
};

/// The log of partition 0 after `TxProducer` ran (see the comment at the top of the Java file):
/// `(offset, key, from a transaction that was aborted)`. Offsets 3, 7 and 10 are control markers.
const LOG: &[(i64, &str, bool)] = &[
    (0, "p0", false),
    (1, "c1-0", false),
    (2, "c1-1", false),
    (4, "a-0", true),
    (5, "p1", false),
    (6, "a-1", true),
    (8, "c3-0", false),
    (9, "c3-1", false),
];
/// One past the final COMMIT marker at offset 10.
const END: i64 = 11;

/// Runs `TxProducer.java` (single-file source mode) against `bootstrap`, writing to `topic`.
async fn run_java_tx_producer(bootstrap: &str, topic: &str) {
    let dist = orderly_testkit::KafkaDist::ensure().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/java/TxProducer.java");
    let mut cmd = dist.java("tools-log4j2.properties", "256m");
    cmd.arg(&src).arg(bootstrap).arg(topic);
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::from(cmd).output(),
    )
    .await
    .expect("TxProducer.java did not finish within 120 s")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("done"),
        "TxProducer.java failed ({})\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The Java side reports where each record landed; the layout the test relies on must hold.
    for (offset, key, _) in LOG {
        assert!(
            stdout.lines().any(|l| l == format!("{key}@{offset}")),
            "{key} not at offset {offset}:\n{stdout}"
        );
    }
}

async fn fetch_once(
    conn: &BrokerConnection,
    topic: &str,
    offset: i64,
    iso: IsolationLevel,
) -> PartitionFetch {
    let mut res = conn
        .fetch(
            &[FetchSpec {
                topic: topic.to_string(),
                topic_id: [0; 16],
                partition: 0,
                offset,
                leader_epoch: -1,
                max_bytes: 1 << 20,
            }],
            &FetchOptions {
                max_wait: Duration::from_millis(100),
                isolation: iso,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(res.len(), 1);
    let pf = res.pop().unwrap();
    assert!(pf.error.is_none(), "{:?}", pf.error);
    assert!(pf.next_offset >= offset, "next_offset went backwards");
    pf
}

/// Fetches from `from` until `next_offset` reaches [`END`], asserting progress on every round that
/// is not at the end, and returns `(offset, key, value, src header)` of every record seen.
async fn read_to_end(
    conn: &BrokerConnection,
    topic: &str,
    from: i64,
    iso: IsolationLevel,
) -> Vec<(i64, String, String, String)> {
    let mut offset = from;
    let mut out = Vec::new();
    for _ in 0..20 {
        if offset == END {
            break;
        }
        let pf = fetch_once(conn, topic, offset, iso).await;
        assert_eq!(pf.high_watermark, END);
        assert_eq!(pf.last_stable_offset, END);
        assert!(pf.next_offset > offset, "no progress at offset {offset}");
        for r in pf.records {
            let text = |b: Option<bytes::Bytes>| String::from_utf8(b.unwrap().to_vec()).unwrap();
            assert_eq!(r.headers.len(), 1, "{r:?}");
            assert_eq!(r.headers[0].key, "src");
            let src = text(r.headers[0].value.clone());
            out.push((r.offset, text(r.key), text(r.value), src));
        }
        offset = pf.next_offset;
    }
    assert_eq!(offset, END, "never reached the end of the partition");
    out
}

fn expected(from: i64, include_aborted: bool) -> Vec<(i64, String, String, String)> {
    LOG.iter()
        .filter(|(o, _, aborted)| *o >= from && (include_aborted || !aborted))
        .map(|(o, k, _)| {
            let src = if k.starts_with('p') { "plain" } else { "txn" };
            (*o, k.to_string(), format!("value-{k}"), src.to_string())
        })
        .collect()
}

#[tokio::test]
async fn java_transactional_producer_committed_and_aborted_read_back_exactly() {
    let broker = orderly_testkit::broker();
    let topic = broker.topic("java-txn", 1).await.unwrap();
    run_java_tx_producer(broker.bootstrap(), &topic.name).await;
    let conn = BrokerConnection::connect(broker.bootstrap(), &ConnectionConfig::default())
        .await
        .unwrap();

    // The coordinator writes the final COMMIT marker after the producer's commit returns; wait
    // until it is in the log and stable, so every assertion below sees the whole log.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let pf = fetch_once(&conn, &topic.name, END, IsolationLevel::ReadCommitted).await;
        if pf.high_watermark == END && pf.last_stable_offset == END {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "log did not settle at {END}: hw {} lso {}",
            pf.high_watermark,
            pf.last_stable_offset
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // read_committed: the aborted records (4, 6) are absent, the interleaved plain record (5) of
    // another producer is kept, and no control marker surfaces.
    let committed = read_to_end(&conn, &topic.name, 0, IsolationLevel::ReadCommitted).await;
    assert_eq!(committed, expected(0, false));

    // read_uncommitted: the aborted records are present too; markers are still skipped.
    let uncommitted = read_to_end(&conn, &topic.name, 0, IsolationLevel::ReadUncommitted).await;
    assert_eq!(uncommitted, expected(0, true));

    // Starting inside the log, including exactly on a control marker, works the same way.
    for from in [3, 4, 7, 8, 10] {
        for (iso, aborted) in [
            (IsolationLevel::ReadCommitted, false),
            (IsolationLevel::ReadUncommitted, true),
        ] {
            let got = read_to_end(&conn, &topic.name, from, iso).await;
            assert_eq!(got, expected(from, aborted), "from {from} {iso:?}");
        }
    }

    // A fetch at the end returns nothing and stays there: the final COMMIT marker is behind us.
    for iso in [
        IsolationLevel::ReadCommitted,
        IsolationLevel::ReadUncommitted,
    ] {
        let pf = fetch_once(&conn, &topic.name, END, iso).await;
        assert!(pf.records.is_empty(), "{:?}", pf.records);
        assert_eq!(pf.next_offset, END);
    }

    // A fetch starting at the final marker returns no record but moves past it.
    let pf = fetch_once(&conn, &topic.name, 10, IsolationLevel::ReadCommitted).await;
    assert!(pf.records.is_empty());
    assert_eq!(pf.next_offset, END);
}
