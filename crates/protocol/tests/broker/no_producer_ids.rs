//! A broker without InitProducerId (Kafka 2.8's KRaft preview had none): the producer writes with
//! acks=all without idempotence instead of failing. The real broker sits behind a proxy that
//! leaves InitProducerId out of its ApiVersions answer.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use bytes::Bytes;
use orderly_protocol::messages::Request;
use orderly_protocol::messages::api_versions::ApiVersionsRequest;
use orderly_protocol::messages::init_producer_id::InitProducerIdRequest;
use orderly_protocol::test_util::rewrite_response;
use orderly_protocol::{ConnectionConfig, ConnectionPool, ProduceRecord, Producer, ProducerConfig};
use orderly_testkit::broker;
use orderly_testkit::proxy::KafkaProxy;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_producer_writes_without_idempotence_when_the_broker_has_no_producer_ids() {
    let b = broker();
    let topic = b.topic("no-producer-ids", 1).await.unwrap();
    let proxy = KafkaProxy::start(b.bootstrap()).await.unwrap();
    proxy.rewrite_responses(
        18,
        Arc::new(|version, frame| {
            rewrite_response::<ApiVersionsRequest>(version, frame, |resp| {
                resp.api_keys
                    .retain(|k| k.api_key != InitProducerIdRequest::API_KEY);
                true
            })
        }),
    );
    let pool = Arc::new(ConnectionPool::new(
        vec![proxy.bootstrap().to_owned()],
        ConnectionConfig::default(),
    ));
    let producer = Producer::new(pool, ProducerConfig::default());
    assert!(producer.config().idempotent);
    for i in 0..3 {
        let (partition, offset) = producer
            .send(
                &topic.name,
                ProduceRecord {
                    key: Some(Bytes::from_static(b"k")),
                    value: Some(Bytes::from(format!("v{i}"))),
                    ..Default::default()
                },
            )
            .await
            .expect("a broker without producer ids still takes acks=all writes");
        assert_eq!((partition, offset), (0, i));
    }
    assert!(!producer.is_idempotent());
    assert_eq!(producer.producer_id().await, None);
    assert_eq!(proxy.seen(InitProducerIdRequest::API_KEY), 0);
}
