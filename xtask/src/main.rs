//! `cargo xtask`: project tasks beyond build and test.
fn main() {}
