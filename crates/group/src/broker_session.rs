//! The session timeout the coordinator enforces for a consumer-protocol (KIP-848) group, which
//! the member's ownership lease and its in-doubt check follow.
//!
//! A KIP-848 member sends no session timeout: the broker applies the group's
//! `consumer.session.timeout.ms`, or its own `group.consumer.session.timeout.ms` where the group
//! has none, and removes a member that did not heartbeat for that long. The client's
//! `session_timeout` (45 s by default) may be longer, so a lease of that length could outlast the
//! member's place in the group. [`learn`] asks the coordinator with DescribeConfigs: the group
//! resource first (brokers that keep group configs, Kafka 4.0 and later), the coordinator's
//! broker resource next, and if both fail it keeps the client's value with one WARN line.

use std::time::Duration;

use crate::shared::Shared;
use crate::transport::{ConfigResource, Coordinator, GroupTransport};

/// The group config the coordinator enforces.
pub(crate) const GROUP_KEY: &str = "consumer.session.timeout.ms";
/// The broker's default for groups without [`GROUP_KEY`].
pub(crate) const BROKER_KEY: &str = "group.consumer.session.timeout.ms";

/// Where a session timeout came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The group resource's `consumer.session.timeout.ms`.
    Group,
    /// The coordinator's `group.consumer.session.timeout.ms`.
    Broker,
    /// Neither could be read: the client's `session_timeout`.
    Client,
}

/// The session timeout read from one coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Learned {
    /// The coordinator asked (a new coordinator is asked again).
    pub(crate) node_id: i32,
    /// The session timeout.
    pub(crate) timeout: Duration,
    /// Where it came from.
    pub(crate) source: Source,
}

fn millis(v: &str) -> Option<Duration> {
    v.trim()
        .parse::<u64>()
        .ok()
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

/// One resource's `key`, or why not (for the log).
async fn read<T: GroupTransport>(
    shared: &Shared<T>,
    coordinator: &Coordinator,
    resource: ConfigResource,
    key: &str,
) -> Result<Duration, String> {
    let described = shared
        .transport
        .describe_configs(coordinator, resource, &[key])
        .await
        .map_err(|e| e.to_string())?;
    if described.error_code != crate::codes::ErrorCode::NONE {
        return Err(format!("error {}", described.error_code));
    }
    match described.values.get(key) {
        Some(v) => millis(v).ok_or_else(|| format!("{key} = {v:?} is not a duration in ms")),
        None => Err(format!("{key} not known")),
    }
}

/// The session timeout `coordinator` enforces for the member's group. Takes at most the request
/// timeout for both reads together; never fails (falls back to the client's `session_timeout`,
/// logged once at WARN).
pub(crate) async fn learn<T: GroupTransport>(
    shared: &Shared<T>,
    coordinator: &Coordinator,
) -> Learned {
    let group = shared.group().to_owned();
    let reads = async {
        let group_said = match read(
            shared,
            coordinator,
            ConfigResource::Group(group.clone()),
            GROUP_KEY,
        )
        .await
        {
            Ok(d) => return Ok((d, Source::Group)),
            Err(why) => why,
        };
        tracing::debug!(group = %group, node = coordinator.node_id, why = %group_said,
            "group config not readable; asking for the broker's default");
        read(
            shared,
            coordinator,
            ConfigResource::Broker(coordinator.node_id),
            BROKER_KEY,
        )
        .await
        .map(|d| (d, Source::Broker))
        .map_err(|broker_said| format!("group: {group_said}; broker: {broker_said}"))
    };
    let outcome = tokio::time::timeout(shared.config.request_timeout, reads)
        .await
        .unwrap_or_else(|_| Err("DescribeConfigs timed out".to_owned()));
    let client = shared.config.session_timeout;
    match outcome {
        Ok((timeout, source)) => {
            tracing::info!(group = %group, node = coordinator.node_id, session_timeout_ms = timeout.as_millis() as u64,
                ?source, client_session_timeout_ms = client.as_millis() as u64,
                "session timeout the coordinator enforces for the group; the ownership lease follows it");
            Learned {
                node_id: coordinator.node_id,
                timeout,
                source,
            }
        }
        Err(why) => {
            tracing::warn!(group = %group, node = coordinator.node_id, why = %why,
                session_timeout_ms = client.as_millis() as u64,
                "could not read the session timeout the broker enforces for the group (DescribeConfigs): \
                 using the client's session_timeout, so the ownership lease may outlast the broker's session");
            Learned {
                node_id: coordinator.node_id,
                timeout: client,
                source: Source::Client,
            }
        }
    }
}
