//! TLS (feature `tls`, default) against a dedicated real broker with an SSL listener whose keystore is made with
//! the JDK's `keytool`: a test CA signs the broker certificate, the client trusts only that CA. Every
//! built-in crypto provider this CPU supports is exercised (graviola and the portable RustCrypto one).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use orderly_protocol::tls::root_store_from_pem;
use orderly_protocol::{BrokerConnection, ConnectionConfig, Error, TlsConfig, TlsProvider};
use orderly_testkit::{BrokerOptions, DedicatedBroker, SSL_LISTENER, process::free_port};

const PASSWORD: &str = "orderly-test-pw";

/// `keytool` next to the `java` the test kit runs (or from PATH).
fn keytool() -> PathBuf {
    let java = orderly_testkit::dist::java_binary();
    match java.parent() {
        Some(bin) if bin.join("keytool").exists() => bin.join("keytool"),
        _ => PathBuf::from("keytool"),
    }
}

fn keytool_run(dir: &Path, args: &[&str]) {
    let out = Command::new(keytool())
        .current_dir(dir)
        .args(args)
        .output()
        .expect("keytool (JDK) must be installed");
    assert!(
        out.status.success(),
        "keytool {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes, in `dir`: `ca.p12` + `ca.pem` (a CA), and `broker.p12`, a keystore holding the broker key
/// with its certificate (SAN 127.0.0.1 and localhost) signed by that CA, plus the CA certificate.
fn make_keystore(dir: &Path) {
    let pw = PASSWORD;
    let common = ["-storetype", "PKCS12", "-storepass", pw, "-keypass", pw];
    let ca = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["-keystore", "ca.p12"]);
        a.extend(common);
        keytool_run(dir, &a);
    };
    let broker = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["-keystore", "broker.p12"]);
        a.extend(common);
        keytool_run(dir, &a);
    };
    let key = ["-keyalg", "EC", "-groupname", "secp256r1", "-validity", "2"];
    ca(&[
        &[
            "-genkeypair",
            "-alias",
            "ca",
            "-dname",
            "CN=orderly test CA",
            "-ext",
            "bc:c",
        ],
        &key[..],
    ]
    .concat());
    ca(&["-exportcert", "-rfc", "-alias", "ca", "-file", "ca.pem"]);
    broker(
        &[
            &["-genkeypair", "-alias", "broker", "-dname", "CN=localhost"],
            &key[..],
        ]
        .concat(),
    );
    broker(&["-certreq", "-alias", "broker", "-file", "broker.csr"]);
    ca(&[
        "-gencert",
        "-alias",
        "ca",
        "-infile",
        "broker.csr",
        "-outfile",
        "broker.pem",
        "-rfc",
        "-validity",
        "2",
        "-ext",
        "SAN=ip:127.0.0.1,dns:localhost",
        "-ext",
        "EKU=serverAuth",
    ]);
    broker(&[
        "-importcert",
        "-noprompt",
        "-alias",
        "ca",
        "-file",
        "ca.pem",
    ]);
    broker(&["-importcert", "-alias", "broker", "-file", "broker.pem"]);
}

fn config(tls: TlsConfig) -> ConnectionConfig {
    ConnectionConfig {
        tls: Some(tls),
        connect_timeout: Duration::from_secs(15),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_verifies_the_broker_certificate_and_round_trips_metadata() {
    let dir = std::env::temp_dir().join(format!(
        "orderly-tls-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let keystore = dir.join("broker.p12");
    let d = dir.clone();
    let opts = BrokerOptions {
        heap: "512m".into(),
        ..BrokerOptions::default()
    }
    .with_ssl_listener(free_port().unwrap(), &keystore, PASSWORD);
    let broker = tokio::task::spawn_blocking(move || {
        make_keystore(&d);
        DedicatedBroker::start_with(opts)
    })
    .await
    .unwrap()
    .unwrap();
    let addr = broker.listener(SSL_LISTENER).unwrap();
    let ca_pem = std::fs::read(dir.join("ca.pem")).unwrap();
    let topic = "tls-topic";
    BrokerConnection::connect(broker.bootstrap(), &ConnectionConfig::default())
        .await
        .unwrap()
        .create_topic(topic, 3, -1, &[])
        .await
        .unwrap();

    // Trusting the test CA: the handshake verifies the certificate chain and the IP SAN.
    let tls = TlsConfig::with_root_certificates_pem(&ca_pem).unwrap();
    let conn = BrokerConnection::connect(&addr, &config(tls.clone()))
        .await
        .unwrap();
    let md = conn.metadata(Some(&[topic])).await.unwrap();
    assert_eq!(md.topics.len(), 1);
    assert_eq!(md.topics[0].name.as_deref(), Some(topic));
    assert_eq!(md.topics[0].partitions.len(), 3);
    assert_eq!(
        format!("{}:{}", md.brokers[0].host, md.brokers[0].port),
        addr,
        "metadata advertises the SSL listener it was asked on"
    );

    // The default configuration runs on the provider detection picks; each provider this CPU
    // supports verifies the chain and completes a handshake and a request on its own.
    assert_eq!(tls.provider(), Some(TlsProvider::detect()));
    let mut tried = Vec::new();
    for provider in TlsProvider::ALL {
        if !provider.is_supported() {
            continue;
        }
        let only = TlsConfig::with_root_store_and_provider(
            root_store_from_pem(&ca_pem).unwrap(),
            provider,
        )
        .unwrap();
        let conn = BrokerConnection::connect(&addr, &config(only))
            .await
            .unwrap_or_else(|e| panic!("{provider}: {e}"));
        let md = conn.metadata(Some(&[topic])).await.unwrap();
        assert_eq!(md.topics[0].partitions.len(), 3, "{provider}");
        tried.push(provider);
    }
    assert!(
        tried.contains(&TlsProvider::RustCrypto),
        "the portable provider always runs"
    );

    // The DNS SAN works too when named explicitly.
    let by_name = tls.clone().server_name("localhost");
    let conn = BrokerConnection::connect(&addr, &config(by_name))
        .await
        .unwrap();
    assert_eq!(conn.metadata(None).await.unwrap().brokers.len(), 1);

    // A name the certificate does not carry, and a CA the broker's chain does not lead to, are
    // rejected with a typed, fatal TLS error.
    let wrong_name = tls.server_name("broker.example");
    let other_ca =
        TlsConfig::with_root_certificates_pem(&std::fs::read(dir.join("broker.pem")).unwrap())
            .unwrap();
    for (what, cfg) in [("wrong name", wrong_name), ("untrusted chain", other_ca)] {
        let err = BrokerConnection::connect(&addr, &config(cfg))
            .await
            .expect_err(what);
        assert!(matches!(err, Error::Tls { .. }), "{what}: {err:?}");
        assert!(!err.is_retriable(), "{what}");
    }

    // TLS to the plaintext listener fails cleanly instead of hanging.
    let tls = TlsConfig::with_root_certificates_pem(&ca_pem).unwrap();
    let err = BrokerConnection::connect(broker.bootstrap(), &config(tls))
        .await
        .expect_err("TLS to a plaintext listener");
    assert!(
        matches!(err, Error::Tls { .. } | Error::Connect { .. }),
        "{err:?}"
    );

    drop(broker);
    let _ = std::fs::remove_dir_all(&dir);
}
