//! SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) against a dedicated real broker with a SASL_PLAINTEXT
//! listener: a metadata round trip per mechanism, and a typed `Error::Sasl` for bad credentials.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use orderly_protocol::{BrokerConnection, ConnectionConfig, Error, Sasl};
use orderly_testkit::{BrokerOptions, DedicatedBroker, SASL_LISTENER, process::free_port};

fn mechanisms(user: &str, password: &str) -> Vec<Sasl> {
    let (username, password) = (user.to_string(), password.to_string());
    vec![
        Sasl::Plain {
            username: username.clone(),
            password: password.clone(),
        },
        Sasl::ScramSha256 {
            username: username.clone(),
            password: password.clone(),
        },
        Sasl::ScramSha512 { username, password },
    ]
}

fn config(sasl: Sasl) -> ConnectionConfig {
    ConnectionConfig {
        sasl: Some(sasl),
        connect_timeout: Duration::from_secs(15),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_plain_and_scram_metadata_round_trip_and_wrong_password_is_typed() {
    let opts = BrokerOptions {
        heap: "512m".into(),
        ..BrokerOptions::default()
    }
    .with_sasl_listener(
        free_port().unwrap(),
        &[("alice", "alice-secret"), ("bob", "bob-secret")],
    );
    let broker = tokio::task::spawn_blocking(move || DedicatedBroker::start_with(opts))
        .await
        .unwrap()
        .unwrap();
    let addr = broker.listener(SASL_LISTENER).unwrap();
    let topic = "sasl-topic";
    BrokerConnection::connect(broker.bootstrap(), &ConnectionConfig::default())
        .await
        .unwrap()
        .create_topic(topic, 2, -1, &[])
        .await
        .unwrap();

    for user in ["alice", "bob"] {
        for sasl in mechanisms(user, &format!("{user}-secret")) {
            let what = format!("{sasl:?}");
            let conn = BrokerConnection::connect(&addr, &config(sasl))
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let md = conn.metadata(Some(&[topic])).await.unwrap();
            assert_eq!(md.topics.len(), 1, "{what}");
            assert_eq!(md.topics[0].name.as_deref(), Some(topic), "{what}");
            assert_eq!(md.topics[0].partitions.len(), 2, "{what}");
            // The broker answers with the addresses of the listener the request came in on.
            assert_eq!(md.brokers.len(), 1, "{what}");
            assert_eq!(
                format!("{}:{}", md.brokers[0].host, md.brokers[0].port),
                addr,
                "{what}"
            );
        }
    }

    // A wrong password and an unknown user fail fast with a typed, fatal error that names the
    // broker, well inside the connect timeout.
    for sasl in mechanisms("alice", "wrong")
        .into_iter()
        .chain(mechanisms("mallory", "alice-secret"))
    {
        let what = format!("{sasl:?}");
        let started = std::time::Instant::now();
        let err = BrokerConnection::connect(&addr, &config(sasl))
            .await
            .expect_err(&what);
        assert!(matches!(err, Error::Sasl { .. }), "{what}: {err:?}");
        assert!(!err.is_retriable(), "{what}");
        assert!(err.to_string().contains(&addr), "{what}: {err}");
        assert!(started.elapsed() < Duration::from_secs(10), "{what}: slow");
        assert!(
            err.to_string().contains("SaslAuthenticationFailed"),
            "{what}: {err}"
        );
    }
}
