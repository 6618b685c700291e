//! The shipped aarch64 binary, run under qemu-user against the real broker: static, `--version` and
//! `--help`, `seed`, an `orderly run` whose order is checked and whose commits cover every record,
//! `config check`, and `orderly consume --http` into the test kit's order-checking webhook.
//!
//! The binary is the one `cargo xtask dist` ships (profile `dist`, target
//! `aarch64-unknown-linux-musl`, linked by rust-lld); this test builds it if it is not built yet
//! (`cargo xtask ci` builds it once before the tests). qemu-user comes from Debian's `qemu-user`
//! package: `.ci/run` installs it, and so does this test when it runs as root with apt-get.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use orderly_protocol::messages::offset_fetch::{
    OffsetFetchGroup, OffsetFetchRequest, OffsetFetchTopic,
};
use orderly_protocol::{BrokerConnection, ConnectionConfig, ErrorCode, IsolationLevel};
use orderly_testkit::broker;
use orderly_testkit::webhook::{Rules, Webhook};

const TARGET: &str = "aarch64-unknown-linux-musl";
const RECORDS: usize = 3_000;
const SESSIONS: usize = 30;
const PARTITIONS: i32 = 3;

/// `qemu-aarch64` from PATH, installing Debian's `qemu-user` when missing and possible.
fn qemu() -> PathBuf {
    let found = || {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("qemu-aarch64"))
                .find(|p| p.is_file())
        })
    };
    if let Some(q) = found() {
        return q;
    }
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    assert!(
        is_root,
        "qemu-aarch64 is missing: install Debian's qemu-user package (`.ci/run` does)"
    );
    for args in [
        &["update", "-qq"][..],
        &["install", "-y", "-qq", "qemu-user"][..],
    ] {
        let status = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .expect("apt-get (to install qemu-user)");
        assert!(status.success(), "apt-get {args:?} failed");
    }
    found().expect("qemu-aarch64 after installing qemu-user")
}

/// The dist binary for aarch64, built (or found up to date) by the same code `cargo xtask dist` runs.
fn aarch64_binary() -> PathBuf {
    let root = orderly_testkit::dist::repo_root();
    xtask::dist::ensure_targets(&[TARGET.to_string()]).unwrap();
    let bin = xtask::dist::build(&root, TARGET).unwrap();
    xtask::dist::check_static(&bin).unwrap();
    let bytes = std::fs::read(&bin).unwrap();
    // e_machine 183 = EM_AARCH64: the binary really is an ARM one (not run natively by accident).
    assert_eq!(u16::from_le_bytes([bytes[0x12], bytes[0x13]]), 183);
    bin
}

fn run(qemu: &Path, bin: &Path, args: &[&str]) -> Output {
    let out = Command::new(qemu)
        .arg(bin)
        .args(args)
        // Keep the binary's log quiet except for problems; the report goes to stdout.
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "orderly {args:?} under qemu failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aarch64_binary_under_qemu_seeds_and_consumes_in_order() {
    let bin = tokio::task::spawn_blocking(aarch64_binary).await.unwrap();
    let qemu = qemu();

    let version = run(&qemu, &bin, &["--version"]);
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.starts_with(&format!("orderly {}", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    // qemu's default CPU model has the crypto extensions, so detection picks graviola.
    assert!(version.contains("auto picks graviola"), "{version}");
    let help = run(&qemu, &bin, &["--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    for cmd in ["seed", "run"] {
        assert!(help.contains(cmd), "--help lists {cmd}:\n{help}");
    }

    let b = broker();
    let topic = b.topic("qemu", PARTITIONS).await.unwrap();
    let dlq = format!("{}.dlq", topic.name);
    b.create_topic(&dlq, 1).await.unwrap();
    let group = format!("{}-group", topic.name);
    let bs = b.bootstrap().to_string();

    let (q, bn, t) = (qemu.clone(), bin.clone(), topic.name.clone());
    let bs2 = bs.clone();
    tokio::task::spawn_blocking(move || {
        let records = RECORDS.to_string();
        let sessions = SESSIONS.to_string();
        run(
            &q,
            &bn,
            &[
                "seed",
                "--bootstrap",
                &bs2,
                "--topic",
                &t,
                "--records",
                &records,
                "--sessions",
                &sessions,
            ],
        )
    })
    .await
    .unwrap();

    let (q, bn, t, g, d) = (
        qemu.clone(),
        bin.clone(),
        topic.name.clone(),
        group.clone(),
        dlq,
    );
    let bs2 = bs.clone();
    let out = tokio::task::spawn_blocking(move || {
        let records = RECORDS.to_string();
        run(
            &q,
            &bn,
            &[
                "run",
                "--bootstrap",
                &bs2,
                "--group",
                &g,
                "--topic",
                &t,
                "--dlq-topic",
                &d,
                "--records",
                &records,
                "--transient-pct",
                "10",
                "--permanent",
                "--workers",
                "2",
            ],
        )
    })
    .await
    .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("ordering violations  0 (handler check) / 0 (engine seq checker)"),
        "{report}"
    );
    assert!(
        report.contains(&format!("records terminal     {RECORDS} (")),
        "{report}"
    );
    assert!(
        report.contains(&format!("sessions             {SESSIONS}")),
        "{report}"
    );

    // Nothing lost: the group's committed offsets reach every partition's end.
    let conn = BrokerConnection::connect(&bs, &ConnectionConfig::default())
        .await
        .unwrap();
    let coord = conn.find_coordinator(&group).await.unwrap();
    let coord = BrokerConnection::connect(&coord.addr(), &ConnectionConfig::default())
        .await
        .unwrap();
    let fetched = coord
        .offset_fetch(&OffsetFetchRequest {
            groups: vec![OffsetFetchGroup {
                group_id: group.clone(),
                member_id: None,
                member_epoch: -1,
                topics: Some(vec![OffsetFetchTopic {
                    name: topic.name.clone(),
                    partition_indexes: (0..PARTITIONS).collect(),
                }]),
            }],
            require_stable: true,
        })
        .await
        .unwrap();
    let g = &fetched.groups[0];
    assert_eq!(g.error_code, ErrorCode::NONE);
    let mut total = 0;
    for p in &g.topics[0].partitions {
        let (end, _) = conn
            .list_offset(
                &topic.name,
                p.partition_index,
                -1,
                IsolationLevel::ReadCommitted,
            )
            .await
            .unwrap();
        assert_eq!(
            p.committed_offset, end,
            "partition {} committed up to its end",
            p.partition_index
        );
        total += end;
    }
    assert_eq!(total, i64::try_from(RECORDS).unwrap());

    // `config check` prints the effective configuration of `consume`.
    let hook = Webhook::start(Rules {
        transient_pct: 10,
        permanent: false,
        work: std::time::Duration::ZERO,
    })
    .await
    .unwrap();
    let group2 = format!("{}-consume", topic.name);
    let consume_args = [
        "--bootstrap".to_string(),
        bs.clone(),
        "--group".into(),
        group2.clone(),
        "--topic".into(),
        topic.name.clone(),
        "--dlq-topic".into(),
        format!("{}.dlq", topic.name),
        "--http".into(),
        hook.url(),
        "--offset-reset".into(),
        "earliest".into(),
        "--retry-base".into(),
        "1ms".into(),
        "--retry-cap".into(),
        "50ms".into(),
        "--admin-addr".into(),
        "off".into(),
    ];
    let mut check_args = vec!["config", "check"];
    check_args.extend(consume_args.iter().map(String::as_str));
    let checked = run(&qemu, &bin, &check_args);
    let checked = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.contains(&group2), "{checked}");

    // `consume` hands every record to the webhook, which checks order per session on its side.
    let mut child = Command::new(&qemu)
        .arg(&bin)
        .arg("consume")
        .args(&consume_args)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while hook.terminal() < RECORDS as u64 {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("orderly consume under qemu exited early ({status})");
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(300),
            "consume under qemu answered {} of {RECORDS} records",
            hook.terminal()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // SIGTERM (qemu-user delivers it to the guest): drain, commit, leave, exit 0.
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "consume exit: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let r = hook.report();
    assert_eq!(r.violations, 0, "order violations seen by the webhook");
    assert_eq!(r.done, RECORDS as u64, "{r:?}");
    assert!(r.transient > 0, "transient failures were retried");
}
