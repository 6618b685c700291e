//! A group member whose coordinator serves no version of a group API that orderly speaks stops
//! with a fatal error instead of retrying: the real broker behind a proxy that advertises Kafka
//! 2.0's OffsetFetch (v0-v4) on every connection.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use orderly_group::wire::WireTransport;
use orderly_group::{AutoOffsetReset, GroupConfig, GroupError, GroupMember};
use orderly_protocol::ConnectionConfig;
use orderly_protocol::messages::Request;
use orderly_protocol::messages::api_versions::ApiVersionsRequest;
use orderly_protocol::messages::offset_fetch::OffsetFetchRequest;
use orderly_protocol::test_util::rewrite_response;
use orderly_testkit::broker;
use orderly_testkit::proxy::KafkaProxy;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_stops_on_an_api_the_broker_does_not_serve() {
    let b = broker();
    let topic = b.topic("group-too-old", 2).await.unwrap();
    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    proxy.rewrite_responses(
        ApiVersionsRequest::API_KEY,
        Arc::new(|version, frame| {
            rewrite_response::<ApiVersionsRequest>(version, frame, |resp| {
                for k in &mut resp.api_keys {
                    if k.api_key == OffsetFetchRequest::API_KEY {
                        k.max_version = 4;
                    }
                }
                true
            })
        }),
    );
    let cfg = GroupConfig::new(format!("{}-g", topic.name), [topic.name.as_str()])
        .with_session_timeout(Duration::from_secs(6))
        .with_heartbeat_interval(Duration::from_millis(500))
        .with_auto_offset_reset(AutoOffsetReset::Earliest);
    let transport = WireTransport::connect(
        vec![proxy.bootstrap().to_owned()],
        ConnectionConfig::default(),
    );
    let GroupMember { task, .. } =
        GroupMember::spawn(cfg, Arc::new(transport), std::future::pending()).unwrap();
    // The member must end by itself; the generous bound only keeps a regression from hanging.
    let result = tokio::time::timeout(Duration::from_secs(120), task.wait())
        .await
        .expect("the member kept retrying against a broker it cannot talk to");
    let err = result.expect_err("the member must stop with an error");
    assert!(matches!(err, GroupError::Unsupported { .. }), "{err}");
    let text = err.to_string();
    for want in ["OffsetFetch", "-v4,", "v5-v9", "Apache Kafka 2.1"] {
        assert!(text.contains(want), "{want:?} missing in {text}");
    }
}
