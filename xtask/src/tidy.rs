//! `cargo xtask tidy`: keeps docs, history and the pure-Rust build honest (also run as a test).

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
    problems.extend(no_history_references(root)?);
    problems.extend(commit_subjects(root)?);
    problems.extend(benchmarks_doc(root));
    problems.extend(crate::circles::import_circles(root)?);
    problems.extend(crate::reference::metrics_doc_matches_code(root)?);
    Ok(problems)
}

/// Most lines BENCHMARKS.md may have outside the section `cargo xtask bench` writes, so the whole
/// document, with a full run's tables, stays a five-minute read.
pub const BENCHMARKS_HAND_WRITTEN_MAX: usize = 200;

/// Most lines BENCHMARKS.md may have in all, a full run's generated section included.
pub const BENCHMARKS_MAX: usize = 400;

/// BENCHMARKS.md has the generated section's markers once each, in order (the harness writes
/// between them), at most [`BENCHMARKS_HAND_WRITTEN_MAX`] lines outside that section and at most
/// [`BENCHMARKS_MAX`] in all.
pub fn benchmarks_doc(root: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(root.join("BENCHMARKS.md")).unwrap_or_default();
    benchmarks_problems(&text)
}

fn benchmarks_problems(text: &str) -> Vec<String> {
    const BEGIN: &str = "<!-- bench:begin";
    const END: &str = "<!-- bench:end -->";
    let mut problems = Vec::new();
    let (begins, ends) = (text.matches(BEGIN).count(), text.matches(END).count());
    if begins != 1 || ends != 1 || text.find(BEGIN) > text.find(END) {
        problems.push(format!(
            "BENCHMARKS.md needs one `{BEGIN}` line and one `{END}` line after it (found {begins} and {ends}): `cargo xtask bench` writes between them"
        ));
        return problems;
    }
    let mut inside = false;
    let mut outside = 0;
    for line in text.lines() {
        if line.starts_with(BEGIN) {
            inside = true;
        }
        if !inside {
            outside += 1;
        }
        if line.starts_with(END) {
            inside = false;
        }
    }
    if outside > BENCHMARKS_HAND_WRITTEN_MAX {
        problems.push(format!(
            "BENCHMARKS.md has {outside} lines outside its generated section (at most {BENCHMARKS_HAND_WRITTEN_MAX}): keep it a reference, history is in git"
        ));
    }
    let total = text.lines().count();
    if total > BENCHMARKS_MAX {
        problems.push(format!(
            "BENCHMARKS.md has {total} lines (at most {BENCHMARKS_MAX}): a reference read in five minutes"
        ));
    }
    problems
}

/// Tracked files whose text tidy reads for references to work history.
const HISTORY_CHECKED: &[&str] = &[
    "rs", "md", "toml", "sh", "py", "go", "java", "yml", "yaml", "json",
];

/// This file states the rule, so it spells the patterns out.
const HISTORY_EXEMPT: &[&str] = &["xtask/src/tidy.rs"];

/// No code comment or document refers to work history: a numbered work session, a numbered stop
/// or an issue number (`Session <N>`, `stop <N>`, `issue <N>`). Comments and documents say what holds
/// now and why; how it came about lives in git.
pub fn no_history_references(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    for rel in tracked_files(root)? {
        let checked = rel
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| HISTORY_CHECKED.contains(&e));
        let name = rel.to_string_lossy().replace('\\', "/");
        if !checked || HISTORY_EXEMPT.contains(&name.as_str()) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root.join(&rel)) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let next = lines.get(i + 1).copied().unwrap_or_default();
            if let Some(found) =
                history_reference(line).or_else(|| history_reference_across(line, next))
            {
                problems.push(format!(
                    "{name}:{}: `{found}` refers to work history; say what holds now (history is in git)",
                    i + 1
                ));
            }
        }
    }
    Ok(problems)
}

/// The first history reference in `line`: `stop N`, `stops N`, `session N`, `issue N`,
/// `issues N` or `issue #N`, in any case, as words of their own (`--sessions 10` and
/// `stop_now(1)` are not), unless the number is followed by a time unit (`session <N> s`).
pub fn history_reference(line: &str) -> Option<String> {
    const WORDS: &[&str] = &["stops", "stop", "session", "issues", "issue"];
    let lower = line.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    for word in WORDS {
        let mut from = 0;
        while let Some(pos) = lower[from..].find(word) {
            let start = from + pos;
            let end = start + word.len();
            from = end;
            let before = start
                .checked_sub(1)
                .and_then(|b| bytes.get(b))
                .copied()
                .unwrap_or(b' ');
            if before.is_ascii_alphanumeric() || before == b'_' || before == b'-' {
                continue;
            }
            let rest = &lower[end..];
            let Some(after) = rest.strip_prefix(' ') else {
                continue;
            };
            let after = after.strip_prefix('#').unwrap_or(after);
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                continue;
            }
            let tail = &after[digits..];
            let next = tail.bytes().next().unwrap_or(b' ');
            if next.is_ascii_alphanumeric() || next == b'_' {
                // `stop 5ms`, `issue 1a`: a duration, or not a number of its own.
                continue;
            }
            if is_duration(tail) {
                continue;
            }
            let stop_at = lower.len() - after.len() + digits;
            return Some(line.get(start..stop_at).unwrap_or(word).to_owned());
        }
    }
    None
}

/// A history reference that a line break splits, the word ending `line` and its number starting
/// `next` (`... until stop` / `// 23) ...`), as [`history_reference`] finds it on one line: the
/// last word of `line` joined with the first words of `next`, after the comment marker that
/// continues a comment there (`//`, `///`, `//!`, `#`, `*`). A reference wholly on `next` is left
/// to that line's own check.
pub fn history_reference_across(line: &str, next: &str) -> Option<String> {
    let last = line.split_whitespace().next_back()?;
    let mut words = next.split_whitespace().peekable();
    if words
        .peek()
        .is_some_and(|w| w.chars().all(|c| matches!(c, '/' | '!' | '#' | '*')))
    {
        words.next();
    }
    // The number and what follows it, for `history_reference`'s unit check (`session` / `10 s`).
    let head = words.take(2).collect::<Vec<_>>().join(" ");
    if head.is_empty() || history_reference(&head).is_some() {
        return None;
    }
    history_reference(&format!("{last} {head}"))
}

/// Whether `tail` (what follows a number) starts with a unit of time: `10 s`, `5 ms`, `2 min`.
fn is_duration(tail: &str) -> bool {
    let t = tail.strip_prefix(' ').unwrap_or(tail);
    [
        "s", "ms", "µs", "us", "min", "seconds", "second", "minutes", "h",
    ]
    .iter()
    .any(|unit| {
        t.strip_prefix(unit).is_some_and(|r| {
            r.chars()
                .next()
                .is_none_or(|c| !c.is_alphanumeric() && c != '_')
        })
    })
}

/// Files under version control (paths relative to `root`); without git, every file under the
/// checked top-level directories and the root's own files.
fn tracked_files(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("git")
        .current_dir(root)
        .args(["ls-files", "-z"])
        .output();
    if let Some(out) = out.ok().filter(|o| o.status.success()) {
        return Ok(out
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
            .collect());
    }
    let mut files = Vec::new();
    for top in [
        "crates", "xtask", "tests", "benches", "examples", "fuzz", "docker",
    ] {
        collect_rs(&root.join(top), &mut files)?;
    }
    for entry in std::fs::read_dir(root)? {
        let path = entry?.path();
        if path.is_file() {
            files.push(path);
        }
    }
    Ok(files
        .into_iter()
        .map(|f| f.strip_prefix(root).map(Path::to_path_buf).unwrap_or(f))
        .collect())
}

/// The commit after which every commit subject must fit [`SUBJECT_MAX`]; older subjects are
/// history and stay as they are.
pub const SUBJECT_BASE: &str = "d7a70943ad6ad09c1d6551d726c57cfcce9fe852";
/// Longest commit subject, in characters, so `git log --oneline` stays readable; details go in
/// the body.
pub const SUBJECT_MAX: usize = 72;

/// Every commit after [`SUBJECT_BASE`] on the checked-out branch has a subject of at most
/// [`SUBJECT_MAX`] characters (merge commits too). Skipped when the checkout has no git history
/// that contains the base (a source archive, a shallow clone).
pub fn commit_subjects(root: &Path) -> anyhow::Result<Vec<String>> {
    let git = |args: &[&str]| {
        Command::new("git")
            .current_dir(root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
    };
    if git(&["merge-base", "--is-ancestor", SUBJECT_BASE, "HEAD"]).is_none() {
        return Ok(Vec::new());
    }
    let range = format!("{SUBJECT_BASE}..HEAD");
    let Some(log) = git(&["log", "--format=%h %s", &range]) else {
        anyhow::bail!("git log {range} failed");
    };
    Ok(long_subjects(&String::from_utf8_lossy(&log.stdout)))
}

/// The lines of `git log --format='%h %s'` output whose subject is longer than [`SUBJECT_MAX`].
pub fn long_subjects(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| {
            let (hash, subject) = l.split_once(' ').unwrap_or((l, ""));
            let n = subject.chars().count();
            (n > SUBJECT_MAX).then(|| {
                format!(
                    "commit {hash}: subject is {n} characters (at most {SUBJECT_MAX}; details go in the body): {subject}"
                )
            })
        })
        .collect()
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

/// Every `.rs` file under `dir` (build output, fuzz corpora and other languages' peers left out).
pub(crate) fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
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

    #[test]
    fn history_references_are_found() {
        // The examples are put together here: this file, too, must not read as a history.
        let n = |template: &str| template.replace('#', "2");
        for template in [
            "// measured at stop #, item 1",
            "/// Stop #: a resumed partition",
            "### Where the time goes (session #)",
            "| `48c38a3` (the final tree of Session #) |",
            "/// Issue #, item 1: paused partitions",
            "the goal of issue #",
            "see issues # and 1",
            "(BENCHMARKS.md, stop #)",
        ] {
            let line = n(template);
            assert!(history_reference(&line).is_some(), "not found in {line:?}");
        }
        assert_eq!(
            history_reference(&n("x (BENCHMARKS.md, Stop #), y")).as_deref(),
            Some(n("Stop #").as_str())
        );
        let hashed = format!("fixed in issue {}{}.", '#', 2);
        assert_eq!(
            history_reference(&hashed).as_deref(),
            Some(format!("issue {}{}", '#', 2).as_str())
        );
    }

    #[test]
    fn domain_words_are_not_history() {
        for line in [
            "orderly produce --sessions 10 --records 50000",
            "a session with 3 records",
            "\"in doubt after {noticed:?} (session timeout 10 s)\"",
            "// Session timeout 10 s, counted from the last answered heartbeat",
            "a 5 ms stop delay",
            "stop_now(1); session_2 = 3; issue_12",
            "--no-session 1",
            "session id 3 and session `s-000007`",
            "a session timeout of 10 s; sessions 1 to 5",
            "stopped 3 times, reissued 4",
        ] {
            assert_eq!(history_reference(line), None, "{line:?}");
        }
    }

    #[test]
    fn a_reference_split_over_a_line_break_is_found() {
        let n = |template: &str| template.replace('#', "2");
        for (line, next, found) in [
            (
                "    // timeout after its last heartbeat (this program's setting until stop",
                "    // #) put that expiry",
                "stop #",
            ),
            (
                "/// as measured in Session",
                "/// #, with 3 peers",
                "Session #",
            ),
            (
                "//! the goal of issue",
                "//! #: paused partitions",
                "issue #",
            ),
            ("the figures of stop", "#, item 1.", "stop #"),
            ("# kept as in stops", "# # and 3", "stops #"),
            (" * see issue", " * ## for the figures", "issue ##"),
        ] {
            let (line, next) = (n(line), n(next));
            assert_eq!(
                history_reference_across(&line, &next).as_deref(),
                Some(n(found).as_str()),
                "{line:?} / {next:?}"
            );
        }
        for (line, next) in [
            // Durations and counts after a line break, as on one line.
            (
                "// a dead member expires one session",
                "// 10 s after its last heartbeat",
            ),
            ("orderly produce --sessions", "10 --records 50000"),
            ("// each session", "// holds 3 records"),
            ("// until stop", ""),
            ("// until stop", "//"),
            ("stop_now(", "1);"),
            // Both on the next line: that line's own check reports it.
            ("// measured at", "// stop #, item 1"),
        ] {
            let (line, next) = (n(line), n(next));
            assert_eq!(
                history_reference_across(&line, &next),
                None,
                "{line:?} / {next:?}"
            );
        }
    }

    #[test]
    fn benchmarks_doc_needs_its_markers_and_a_short_hand_written_part() {
        let gen_section = "<!-- bench:begin (x) -->\n## tables\n<!-- bench:end -->\n";
        assert!(benchmarks_problems(&format!("# B\n{gen_section}## Limits\n")).is_empty());
        assert_eq!(benchmarks_problems("# B\nno markers\n").len(), 1);
        assert_eq!(
            benchmarks_problems("<!-- bench:end -->\n<!-- bench:begin -->\n").len(),
            1
        );
        let long = "line\n".repeat(BENCHMARKS_HAND_WRITTEN_MAX);
        assert_eq!(
            benchmarks_problems(&format!("# B\n{gen_section}{long}")).len(),
            1
        );
        assert!(benchmarks_problems(&format!("{gen_section}{long}")).is_empty());
        let tables = "| row |\n".repeat(BENCHMARKS_MAX);
        let full = format!("# B\n<!-- bench:begin (x) -->\n{tables}<!-- bench:end -->\n");
        assert_eq!(benchmarks_problems(&full).len(), 1, "too long in all");
    }

    #[test]
    fn long_commit_subjects_are_reported() {
        let ok = "x".repeat(SUBJECT_MAX);
        let long = "y".repeat(SUBJECT_MAX + 1);
        let log = format!("abc1234 {ok}\ndef5678 {long}\n0123abc Merge branch 'h/docs'\n");
        let problems = long_subjects(&log);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("commit def5678: subject is 73 characters"));
        // Characters, not bytes: 72 of `é` fit.
        assert!(long_subjects(&format!("abc {}", "é".repeat(SUBJECT_MAX))).is_empty());
    }
}
