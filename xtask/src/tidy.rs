//! `cargo xtask tidy`: keeps docs and the pure-Rust build honest (also run as a test).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The library and binary crates whose default dependency tree must build no C.
pub const SHIPPED_CRATES: &[&str] = &[
    "orderly-protocol",
    "orderly-group",
    "orderly-engine",
    "orderly-cli",
    "orderly-testkit",
];

/// Crates that compile C or C++ (or link a system library) when they are in the tree.
fn builds_c(name: &str) -> bool {
    // linux-raw-sys (under rustix, the engine's timer-slack call) is Rust constants and structs
    // generated from the Linux headers: no build script, nothing compiled or linked.
    (name.ends_with("-sys") && name != "linux-raw-sys")
        || matches!(
            name,
            "cc" | "cmake" | "pkg-config" | "bindgen" | "cxx-build" | "vcpkg"
        )
}

/// Runs every check; returns one line per problem (empty when tidy).
pub fn run(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    problems.extend(doc_lines(root)?);
    problems.extend(no_c_in_default_tree(root)?);
    problems.extend(readme_documents_xtask(root)?);
    problems.extend(architecture_maps_every_crate(root)?);
    Ok(problems)
}

/// Every Rust file in the workspace opens with a `//!` doc line saying what it holds.
pub fn doc_lines(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut files = Vec::new();
    for top in ["crates", "xtask", "tests", "benches"] {
        collect_rs(&root.join(top), &mut files)?;
    }
    let mut problems = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f)?;
        let first = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with("#!["));
        if !first.is_some_and(|l| l.starts_with("//!")) {
            let rel = f.strip_prefix(root).unwrap_or(&f);
            problems.push(format!(
                "{}: does not open with a `//!` line saying what it holds",
                rel.display()
            ));
        }
    }
    Ok(problems)
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            // Build output, fuzz corpora and peers written in other languages are not ours to doc.
            if matches!(name, "target" | "corpus" | "artifacts" | "peers") || name.starts_with('.')
            {
                continue;
            }
            collect_rs(&path, out)?;
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// No crate in the default (normal + build) dependency tree of the shipped crates builds C.
pub fn no_c_in_default_tree(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root).args([
        "tree",
        "-e",
        "normal,build",
        "--prefix",
        "none",
        "-f",
        "{p}",
    ]);
    for c in SHIPPED_CRATES {
        cmd.args(["-p", c]);
    }
    let out = cmd.output()?;
    if !out.status.success() {
        anyhow::bail!(
            "cargo tree failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut problems: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| builds_c(name))
        .map(|name| format!("crate `{name}` builds C and is in the default dependency tree of {SHIPPED_CRATES:?}"))
        .collect();
    problems.sort();
    problems.dedup();
    Ok(problems)
}

/// Every `cargo xtask` subcommand is documented in the README.
pub fn readme_documents_xtask(root: &Path) -> anyhow::Result<Vec<String>> {
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap_or_default();
    Ok(crate::SUBCOMMANDS
        .iter()
        .filter(|cmd| !readme.contains(&format!("cargo xtask {cmd}")))
        .map(|cmd| format!("README.md does not document `cargo xtask {cmd}`"))
        .collect())
}

/// ARCHITECTURE.md's code map has a section for every crate under `crates/`.
pub fn architecture_maps_every_crate(root: &Path) -> anyhow::Result<Vec<String>> {
    let arch = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap_or_default();
    let mut problems = Vec::new();
    for entry in std::fs::read_dir(root.join("crates"))? {
        let path = entry?.path();
        if path.join("Cargo.toml").is_file() {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if !arch.contains(&format!("### `crates/{name}`")) {
                problems.push(format!(
                    "ARCHITECTURE.md has no code-map section for crates/{name}"
                ));
            }
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_building_crates_are_recognised() {
        assert!(builds_c("zstd-sys"));
        assert!(builds_c("cc"));
        assert!(!builds_c("linux-raw-sys"));
        assert!(builds_c("cmake"));
        assert!(!builds_c("crc32c"));
        assert!(!builds_c("lz4_flex"));
    }

    #[test]
    fn a_file_without_doc_line_is_reported() {
        let dir = std::env::temp_dir().join(format!("orderly-tidy-{}", std::process::id()));
        let src = dir.join("crates").join("x").join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("good.rs"), "//! Holds good things.\nfn a() {}\n").unwrap();
        std::fs::write(src.join("bad.rs"), "fn b() {}\n").unwrap();
        let problems = doc_lines(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("bad.rs"));
    }
}
