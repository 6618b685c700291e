//! Member configuration with documented defaults (the Java consumer's, where Java has one).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::assignor::{Assignor, CooperativeStickyAssignor, RebalanceProtocol};
use crate::error::GroupError;
use crate::types::AutoOffsetReset;

/// The broker's default `offset.metadata.max.bytes`, counted in UTF-16 code units (Java
/// `String.length()`); [`crate::GroupConfig::max_metadata_chars`] sets the limit in force.
pub const DEFAULT_MAX_METADATA_CHARS: usize = 4096;

/// Which group protocol the member speaks (Kafka's `group.protocol`).
///
/// Both members emit the same [`crate::RebalanceEvent`]s under the same listener contract and share
/// the offset handling, so the engine does not know which one runs. See the README for how to
/// choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum GroupProtocol {
    /// JoinGroup / SyncGroup / Heartbeat with client-side assignors (Kafka's `group.protocol=classic`).
    #[default]
    Classic,
    /// KIP-848's ConsumerGroupHeartbeat: the broker assigns (server assignor `uniform` or `range`),
    /// partitions move one member at a time, and a member whose partitions do not move never
    /// stops (Kafka's `group.protocol=consumer`, the 4.x default of the Java client). See
    /// [`crate::kip848`].
    Consumer,
}

impl GroupProtocol {
    /// The name Kafka uses (`classic`, `consumer`).
    pub fn name(self) -> &'static str {
        match self {
            GroupProtocol::Classic => "classic",
            GroupProtocol::Consumer => "consumer",
        }
    }
}

impl fmt::Display for GroupProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for GroupProtocol {
    type Err = GroupError;

    /// Parses `classic` or `consumer` (case-insensitive), as Kafka's `group.protocol`.
    fn from_str(s: &str) -> Result<Self, GroupError> {
        match s.to_ascii_lowercase().as_str() {
            "classic" => Ok(GroupProtocol::Classic),
            "consumer" => Ok(GroupProtocol::Consumer),
            other => Err(GroupError::Config {
                setting: "group.protocol",
                message: format!("{other:?} is neither \"classic\" nor \"consumer\""),
            }),
        }
    }
}

/// Configuration of one group member. Build it with [`GroupConfig::new`] and the `with_*` methods.
#[derive(Clone)]
pub struct GroupConfig {
    /// `group.id`.
    pub group_id: String,
    /// Topics to subscribe to.
    pub topics: Vec<String>,
    /// `group.instance.id` for static membership; `None` (default) for a dynamic member.
    pub instance_id: Option<String>,
    /// `session.timeout.ms`. Default 45 s (Java). The broker accepts
    /// `[group.min.session.timeout.ms, group.max.session.timeout.ms]`, by default 6 s to 30 min.
    pub session_timeout: Duration,
    /// Rebalance timeout sent in JoinGroup (Java's `max.poll.interval.ms`). Default 300 s: how long
    /// the broker waits for every member to rejoin, so it bounds a revoke callback's drain time.
    pub rebalance_timeout: Duration,
    /// `heartbeat.interval.ms`. Default 3 s (Java); must be below the session timeout, and should be
    /// at most a third of it.
    pub heartbeat_interval: Duration,
    /// Backoff after a retriable failure (`retry.backoff.ms`). Default 100 ms, doubling with jitter.
    pub retry_backoff: Duration,
    /// Upper bound of the retry backoff (`retry.backoff.max.ms`). Default 1 s.
    pub retry_backoff_max: Duration,
    /// Assignors in preference order. Default `[cooperative-sticky]`. The member runs the
    /// cooperative protocol only if all of them are cooperative (Java's rule).
    pub assignors: Vec<Arc<dyn Assignor>>,
    /// `auto.offset.reset`. Default [`AutoOffsetReset::Latest`] (Java).
    pub auto_offset_reset: AutoOffsetReset,
    /// `client.rack`, sent in the subscription (v3). Default none.
    pub rack: Option<String>,
    /// Group protocol. Default [`GroupProtocol::Classic`].
    pub protocol: GroupProtocol,
    /// Consumer protocol only: subscribe to every topic matching this regular expression (RE2/J
    /// syntax, evaluated by the broker; `group.protocol=consumer`'s `subscribe(SubscriptionPattern)`)
    /// instead of `topics`, which must then be empty. Default none.
    pub topic_regex: Option<String>,
    /// Consumer protocol only: the broker-side assignor by name (`group.remote.assignor`): `uniform`
    /// or `range` on a default broker (`group.consumer.assignors`). Default none: the broker's first.
    pub server_assignor: Option<String>,
    /// Deadline of one request other than JoinGroup (`request.timeout.ms`). Default 30 s. JoinGroup
    /// gets the rebalance timeout plus 5 s, like Java.
    pub request_timeout: Duration,
    /// How long one [`crate::GroupHandle::commit`] keeps retrying retriable failures
    /// (`default.api.timeout.ms`). Default 60 s.
    pub commit_timeout: Duration,
    /// How often the leader re-checks partition counts of the group's topics and rejoins when they
    /// changed (`metadata.max.age.ms`). Default 5 min.
    pub metadata_refresh: Duration,
    /// The broker's `offset.metadata.max.bytes` (counted in UTF-16 units, as the broker does):
    /// longer commit metadata is refused before sending with
    /// [`crate::CommitError::MetadataTooLarge`]. Default 4096 (the broker's default).
    pub max_metadata_chars: usize,
}

impl fmt::Debug for GroupConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.assignors.iter().map(|a| a.name()).collect();
        f.debug_struct("GroupConfig")
            .field("group_id", &self.group_id)
            .field("topics", &self.topics)
            .field("instance_id", &self.instance_id)
            .field("session_timeout", &self.session_timeout)
            .field("rebalance_timeout", &self.rebalance_timeout)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("assignors", &names)
            .field("auto_offset_reset", &self.auto_offset_reset)
            .field("protocol", &self.protocol)
            .field("topic_regex", &self.topic_regex)
            .field("server_assignor", &self.server_assignor)
            .finish_non_exhaustive()
    }
}

impl GroupConfig {
    /// A dynamic member of `group_id` subscribing to `topics`, with all defaults.
    pub fn new(
        group_id: impl Into<String>,
        topics: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self {
            group_id: group_id.into(),
            topics: topics.into_iter().map(Into::into).collect(),
            instance_id: None,
            session_timeout: Duration::from_secs(45),
            rebalance_timeout: Duration::from_secs(300),
            heartbeat_interval: Duration::from_secs(3),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            assignors: vec![Arc::new(CooperativeStickyAssignor)],
            auto_offset_reset: AutoOffsetReset::Latest,
            rack: None,
            protocol: GroupProtocol::Classic,
            topic_regex: None,
            server_assignor: None,
            request_timeout: Duration::from_secs(30),
            commit_timeout: Duration::from_secs(60),
            metadata_refresh: Duration::from_secs(300),
            max_metadata_chars: DEFAULT_MAX_METADATA_CHARS,
        }
    }

    /// Sets `group.instance.id` (static membership).
    pub fn with_instance_id(mut self, id: impl Into<String>) -> Self {
        self.instance_id = Some(id.into());
        self
    }

    /// Sets the session timeout.
    pub fn with_session_timeout(mut self, d: Duration) -> Self {
        self.session_timeout = d;
        self
    }

    /// Sets the rebalance timeout.
    pub fn with_rebalance_timeout(mut self, d: Duration) -> Self {
        self.rebalance_timeout = d;
        self
    }

    /// Sets the heartbeat interval.
    pub fn with_heartbeat_interval(mut self, d: Duration) -> Self {
        self.heartbeat_interval = d;
        self
    }

    /// Replaces the assignor list (preference order).
    pub fn with_assignors(mut self, assignors: Vec<Arc<dyn Assignor>>) -> Self {
        self.assignors = assignors;
        self
    }

    /// Sets `auto.offset.reset`.
    pub fn with_auto_offset_reset(mut self, r: AutoOffsetReset) -> Self {
        self.auto_offset_reset = r;
        self
    }

    /// Sets `client.rack`.
    pub fn with_rack(mut self, rack: impl Into<String>) -> Self {
        self.rack = Some(rack.into());
        self
    }

    /// Sets `group.protocol`.
    pub fn with_protocol(mut self, protocol: GroupProtocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// Consumer protocol: subscribe by regular expression (RE2/J, evaluated by the broker).
    pub fn with_topic_regex(mut self, regex: impl Into<String>) -> Self {
        self.topic_regex = Some(regex.into());
        self
    }

    /// Consumer protocol: the server-side assignor (`uniform`, `range`).
    pub fn with_server_assignor(mut self, name: impl Into<String>) -> Self {
        self.server_assignor = Some(name.into());
        self
    }

    /// The rebalance protocol this member runs: cooperative only if every assignor is.
    pub fn rebalance_protocol(&self) -> RebalanceProtocol {
        self.assignors
            .iter()
            .map(|a| a.protocol())
            .min()
            .unwrap_or(RebalanceProtocol::Eager)
    }

    /// Checks the configuration; every failure names the offending setting.
    pub fn validate(&self) -> Result<(), GroupError> {
        let bad = |setting: &'static str, message: String| GroupError::Config { setting, message };
        if self.group_id.is_empty() {
            return Err(bad("group.id", "must not be empty".into()));
        }
        let consumer = self.protocol == GroupProtocol::Consumer;
        if self.topics.is_empty() && !(consumer && self.topic_regex.is_some()) {
            return Err(bad("topics", "subscribe to at least one topic".into()));
        }
        if self.topic_regex.is_some() && !self.topics.is_empty() {
            return Err(bad(
                "topics",
                "subscribe either to topic names or to a regex, not both".into(),
            ));
        }
        if !consumer && self.topic_regex.is_some() {
            return Err(bad(
                "topic regex",
                "a regex subscription needs group.protocol=consumer (the broker evaluates it)"
                    .into(),
            ));
        }
        if !consumer && self.server_assignor.is_some() {
            return Err(bad(
                "group.remote.assignor",
                "a server-side assignor needs group.protocol=consumer".into(),
            ));
        }
        if self.topic_regex.as_deref() == Some("") || self.server_assignor.as_deref() == Some("") {
            return Err(bad(
                "group.remote.assignor",
                "the regex and the server assignor must not be empty when set".into(),
            ));
        }
        if self.rack.as_deref() == Some("") {
            return Err(bad("client.rack", "must not be empty when set".into()));
        }
        if self.assignors.is_empty() {
            return Err(bad(
                "partition.assignment.strategy",
                "list at least one assignor".into(),
            ));
        }
        if self.instance_id.as_deref() == Some("") {
            return Err(bad(
                "group.instance.id",
                "must not be empty when set".into(),
            ));
        }
        if self.heartbeat_interval >= self.session_timeout {
            return Err(bad(
                "heartbeat.interval.ms",
                format!(
                    "{:?} must be below session.timeout.ms {:?}",
                    self.heartbeat_interval, self.session_timeout
                ),
            ));
        }
        for (name, d) in [
            ("session.timeout.ms", self.session_timeout),
            ("rebalance.timeout.ms", self.rebalance_timeout),
        ] {
            if d.as_millis() > i32::MAX as u128 || d.is_zero() {
                return Err(bad(name, format!("{d:?} is out of range")));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assignor::RangeAssignor;

    #[test]
    fn defaults_match_java() {
        let c = GroupConfig::new("g", ["t"]);
        assert_eq!(c.session_timeout, Duration::from_secs(45));
        assert_eq!(c.rebalance_timeout, Duration::from_secs(300));
        assert_eq!(c.heartbeat_interval, Duration::from_secs(3));
        assert_eq!(c.auto_offset_reset, AutoOffsetReset::Latest);
        assert_eq!(c.rebalance_protocol(), RebalanceProtocol::Cooperative);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn mixed_assignors_run_eager() {
        let c = GroupConfig::new("g", ["t"]).with_assignors(vec![
            Arc::new(CooperativeStickyAssignor),
            Arc::new(RangeAssignor),
        ]);
        assert_eq!(c.rebalance_protocol(), RebalanceProtocol::Eager);
    }

    #[test]
    fn group_protocol_parses_and_gates_consumer_only_settings() {
        assert_eq!(
            "classic".parse::<GroupProtocol>().ok(),
            Some(GroupProtocol::Classic)
        );
        assert_eq!(
            "Consumer".parse::<GroupProtocol>().ok(),
            Some(GroupProtocol::Consumer)
        );
        assert!("cooperative".parse::<GroupProtocol>().is_err());
        let regex_only = GroupConfig::new("g", Vec::<String>::new()).with_topic_regex("orders-.*");
        assert!(
            regex_only.validate().is_err(),
            "a regex needs the consumer protocol"
        );
        assert!(
            regex_only
                .clone()
                .with_protocol(GroupProtocol::Consumer)
                .validate()
                .is_ok()
        );
        assert!(
            GroupConfig::new("g", ["t"])
                .with_protocol(GroupProtocol::Consumer)
                .with_topic_regex("t.*")
                .validate()
                .is_err(),
            "names or a regex, not both"
        );
        assert!(
            GroupConfig::new("g", ["t"])
                .with_server_assignor("range")
                .validate()
                .is_err()
        );
    }

    #[test]
    fn heartbeat_must_be_below_session() {
        let c = GroupConfig::new("g", ["t"]).with_heartbeat_interval(Duration::from_secs(50));
        assert!(matches!(
            c.validate(),
            Err(GroupError::Config {
                setting: "heartbeat.interval.ms",
                ..
            })
        ));
    }
}
