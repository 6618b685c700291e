//! Test support: a real Apache Kafka broker from Maven Central jars.
