//! The generated references, `docs/reference/configuration.md` and `docs/reference/metrics.md`:
//! written from what `orderly reference` prints, compared with it, and the metric names the code
//! emits compared with the metrics reference.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Each reference file and the `orderly reference` subcommand that prints it.
pub const FILES: &[(&str, &str)] = &[
    ("docs/reference/configuration.md", "configuration"),
    ("docs/reference/metrics.md", "metrics"),
];

/// The metrics reference, which the metric names in the code are checked against.
pub const METRICS_DOC: &str = "docs/reference/metrics.md";

/// What `orderly reference <which>` prints.
pub fn render(orderly: &Path, which: &str) -> Result<String> {
    let out = Command::new(orderly)
        .args(["reference", which])
        .output()
        .with_context(|| format!("running {} reference {which}", orderly.display()))?;
    if !out.status.success() {
        bail!(
            "{} reference {which} failed ({}): {}",
            orderly.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).context("the reference is not UTF-8")
}

/// Writes every reference file from `orderly`; returns their paths.
pub fn write(root: &Path, orderly: &Path) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for (file, which) in FILES {
        let path = root.join(file);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&path, render(orderly, which)?)
            .with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// One line per reference file that differs from what `orderly` prints (or is missing).
pub fn stale(root: &Path, orderly: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    for (file, which) in FILES {
        let committed = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        if committed != render(orderly, which)? {
            problems.push(format!(
                "{file} differs from what the `orderly` binary prints: run `cargo xtask reference`"
            ));
        }
    }
    Ok(problems)
}

/// One `metrics::counter!`, `gauge!` or `histogram!` call in the code.
#[derive(Debug, PartialEq, Eq)]
pub struct MetricUse {
    /// `path:line`.
    pub place: String,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// The metric's name, `None` when it is not a string literal.
    pub name: Option<String>,
}

/// The metric macro calls in `text` (a Rust file), each with its line.
pub fn metric_uses_in(file: &str, text: &str) -> Vec<MetricUse> {
    let mut uses = Vec::new();
    for kind in ["counter", "gauge", "histogram"] {
        let call = format!("{kind}!(");
        for (i, _) in text.match_indices(&call) {
            // `describe_counter!(` and the like describe, they do not emit.
            let word_before = text[..i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            if word_before {
                continue;
            }
            let args = text[i + call.len()..].trim_start();
            let name = args
                .strip_prefix('"')
                .and_then(|s| s.find('"').map(|end| s[..end].to_owned()));
            let line = text[..i].matches('\n').count() + 1;
            uses.push(MetricUse {
                place: format!("{file}:{line}"),
                kind,
                name,
            });
        }
    }
    uses
}

/// `(name, kind)` of every metric the metrics reference lists.
pub fn listed_metrics(doc: &str) -> Vec<(String, String)> {
    doc.lines()
        .filter_map(|l| l.strip_prefix("| `orderly_"))
        .filter_map(|l| {
            let mut cells = l.split('|');
            let name = format!("orderly_{}", cells.next()?.trim().trim_end_matches('`'));
            Some((name, cells.next()?.trim().to_owned()))
        })
        .collect()
}

/// Every metric the library crates' code emits is in the metrics reference with its kind, and
/// every metric listed there is emitted: a metric added without its description (in its crate's
/// `metric_specs.rs`) or removed without it fails here.
pub fn metrics_doc_matches_code(root: &Path) -> Result<Vec<String>> {
    let doc = std::fs::read_to_string(root.join(METRICS_DOC)).unwrap_or_default();
    let listed = listed_metrics(&doc);
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).context("reading crates/")? {
        let src = entry?.path().join("src");
        if src.is_dir() {
            crate::tidy::collect_rs(&src, &mut files)?;
        }
    }
    files.sort();
    let mut problems = Vec::new();
    let mut emitted = std::collections::BTreeSet::new();
    for path in files {
        let text = std::fs::read_to_string(&path)?;
        let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy();
        for u in metric_uses_in(&rel, &text) {
            let Some(name) = u.name else {
                problems.push(format!(
                    "{}: a metric named by an expression: name it with a string literal so tidy can find it in {METRICS_DOC}",
                    u.place
                ));
                continue;
            };
            match listed.iter().find(|(n, _)| *n == name) {
                None => problems.push(format!(
                    "{}: metric {name} is not in {METRICS_DOC}: describe it in its crate's metric_specs.rs, then run `cargo xtask reference`",
                    u.place
                )),
                Some((_, kind)) if kind != u.kind => problems.push(format!(
                    "{}: metric {name} is a {} here but a {kind} in {METRICS_DOC}",
                    u.place, u.kind
                )),
                Some(_) => {}
            }
            emitted.insert(name);
        }
    }
    for (name, _) in &listed {
        if !emitted.contains(name) {
            problems.push(format!(
                "{METRICS_DOC}: metric {name} is emitted nowhere in crates/*/src: remove it from its crate's metric_specs.rs, then run `cargo xtask reference`"
            ));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_calls_are_found_with_their_kind_and_line() {
        let text = "let c = metrics::counter!(\"orderly_a_total\", \"k\" => v);\n\
                    metrics::describe_gauge!(\"orderly_b\", \"help\");\n\
                    x.get_or_init(|| histogram!(\n    \"orderly_c_seconds\"));\n\
                    metrics::gauge!(NAME).set(1.0);\n";
        let uses = metric_uses_in("f.rs", text);
        assert_eq!(
            uses,
            vec![
                MetricUse {
                    place: "f.rs:1".into(),
                    kind: "counter",
                    name: Some("orderly_a_total".into())
                },
                MetricUse {
                    place: "f.rs:5".into(),
                    kind: "gauge",
                    name: None
                },
                MetricUse {
                    place: "f.rs:3".into(),
                    kind: "histogram",
                    name: Some("orderly_c_seconds".into())
                },
            ]
        );
    }

    #[test]
    fn listed_metrics_are_read_from_the_tables() {
        let doc = "| Metric | Type |\n|---|---|\n| `orderly_a_total` | counter | | Things. |\n";
        assert_eq!(
            listed_metrics(doc),
            vec![("orderly_a_total".to_owned(), "counter".to_owned())]
        );
    }
}
