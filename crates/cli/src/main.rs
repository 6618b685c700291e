//! `orderly`: the command-line binary of the orderly Kafka consumer stack.

fn main() {}
