//! Apache Kafka's own command-line tools (topics, console clients, consumer groups, perf tools), run from the same jars.

use std::process::Command;

use crate::dist::KafkaDist;

/// The tools, by the short name used in `cargo xtask kafka tool <name>`, with their main classes
/// (the classes behind `bin/kafka-*.sh` in the Kafka tarball).
pub const TOOLS: &[(&str, &str, &str)] = &[
    (
        "topics",
        "org.apache.kafka.tools.TopicCommand",
        "kafka-topics.sh",
    ),
    (
        "console-producer",
        "org.apache.kafka.tools.ConsoleProducer",
        "kafka-console-producer.sh",
    ),
    (
        "console-consumer",
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        "kafka-console-consumer.sh",
    ),
    (
        "consumer-groups",
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "kafka-consumer-groups.sh",
    ),
    (
        "producer-perf",
        "org.apache.kafka.tools.ProducerPerformance",
        "kafka-producer-perf-test.sh",
    ),
    (
        "consumer-perf",
        "org.apache.kafka.tools.ConsumerPerformance",
        "kafka-consumer-perf-test.sh",
    ),
    (
        "get-offsets",
        "org.apache.kafka.tools.GetOffsetShell",
        "kafka-get-offsets.sh",
    ),
    (
        "features",
        "org.apache.kafka.tools.FeatureCommand",
        "kafka-features.sh",
    ),
    (
        "metadata-quorum",
        "org.apache.kafka.tools.MetadataQuorumCommand",
        "kafka-metadata-quorum.sh",
    ),
    (
        "groups",
        "org.apache.kafka.tools.GroupsCommand",
        "kafka-groups.sh",
    ),
    (
        "api-versions",
        "org.apache.kafka.tools.BrokerApiVersionsCommand",
        "kafka-broker-api-versions.sh",
    ),
    ("storage", "kafka.tools.StorageTool", "kafka-storage.sh"),
];

/// The main class of a tool by its short name (or its `kafka-*.sh` script name).
pub fn main_class(name: &str) -> Option<&'static str> {
    TOOLS
        .iter()
        .find(|(short, _, script)| {
            *short == name || *script == name || script.trim_end_matches(".sh") == name
        })
        .map(|(_, class, _)| *class)
}

/// A `java` command that runs tool `name`; the caller adds the tool's arguments.
///
/// Returns `None` for an unknown tool name.
pub fn command(dist: &KafkaDist, name: &str) -> Option<Command> {
    let class = main_class(name)?;
    let mut cmd = dist.java("tools-log4j2.properties", "512m");
    cmd.arg(class);
    Some(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_resolve_by_short_and_script_name() {
        assert_eq!(
            main_class("topics"),
            Some("org.apache.kafka.tools.TopicCommand")
        );
        assert_eq!(
            main_class("kafka-topics.sh"),
            Some("org.apache.kafka.tools.TopicCommand")
        );
        assert_eq!(
            main_class("kafka-console-consumer"),
            Some("org.apache.kafka.tools.consumer.ConsoleConsumer")
        );
        assert_eq!(main_class("no-such-tool"), None);
    }
}
