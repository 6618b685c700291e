//! End-to-end tests of orderly against a real Apache Kafka broker; the tests live in `tests/e2e/`.
