//! Runs `cargo xtask tidy` as a test, so `cargo test` alone keeps docs and the pure-Rust build honest.

#[test]
fn the_workspace_is_tidy() {
    let problems = xtask::tidy::run(&xtask::root()).expect("tidy ran");
    assert!(
        problems.is_empty(),
        "tidy problems:\n{}",
        problems.join("\n")
    );
}
