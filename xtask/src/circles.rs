//! The import-circle rule: within each crate under `crates/`, no source file imports (through a
//! chain of files) from a file that imports it back.
//!
//! An edge runs from a file to the file that defines what it names: every `use` path and every
//! `crate::` / `super::` / `self::` path in code (comments, string literals and `#[cfg(test)]`
//! items left out), followed through re-exports (`pub use`, `pub(crate) use`), so a `mod.rs` or
//! `lib.rs` that only wires and re-exports is no part of a circle, while one that holds code used
//! by the files it declares is. `mod` declarations are not imports.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// A module path inside one crate, without the leading `crate` (the crate root is empty).
type ModPath = Vec<String>;

/// Circles not broken yet, as [`import_circles`] words them. Each must still be found: once one
/// is broken, its entry goes, so it cannot come back unnoticed.
pub const NOT_YET_BROKEN: &[&str] = &[];

/// One problem per import circle not in [`NOT_YET_BROKEN`], and per entry there that no longer
/// names a circle.
pub fn import_circles(root: &Path) -> anyhow::Result<Vec<String>> {
    let found = all_circles(root)?;
    let mut problems: Vec<String> = found
        .iter()
        .filter(|c| !NOT_YET_BROKEN.contains(&c.as_str()))
        .map(|c| format!("import circle: {c}"))
        .collect();
    problems.extend(
        NOT_YET_BROKEN
            .iter()
            .filter(|c| !found.iter().any(|f| f == *c))
            .map(|c| format!("circles::NOT_YET_BROKEN lists `{c}`, no longer a circle: remove it")),
    );
    Ok(problems)
}

/// Every import circle, one line per strongly connected set of files, for each crate under
/// `crates/`.
pub fn all_circles(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("src").is_dir())
        .collect();
    crates.sort();
    for krate in crates {
        let src = krate.join("src");
        let mut files = BTreeMap::new();
        collect(&src, &src, &mut files)?;
        for circle in circles_in(&files) {
            let names: Vec<String> = circle
                .iter()
                .map(|f| {
                    krate
                        .join("src")
                        .join(f)
                        .strip_prefix(root)
                        .map(|p| p.display().to_string())
                        .unwrap_or_default()
                })
                .collect();
            problems.push(names.join(" ↔ "));
        }
    }
    Ok(problems)
}

/// Reads every `.rs` file under `dir` into `files`, keyed by its path relative to `src`.
fn collect(src: &Path, dir: &Path, files: &mut BTreeMap<PathBuf, String>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(src, &path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(src)?.to_path_buf();
            files.insert(rel, std::fs::read_to_string(&path)?);
        }
    }
    Ok(())
}

/// The module path of a file relative to `src/` (`lib.rs`, `main.rs` → root; `a/mod.rs` → `a`).
fn module_of(rel: &Path) -> ModPath {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if !(matches!(stem, "mod") || (parts.is_empty() && matches!(stem, "lib" | "main"))) {
            parts.push(stem.to_string());
        }
    }
    parts
}

/// What one file imports: each path made absolute, and which of them it re-exports by name.
struct FileUses {
    paths: Vec<ModPath>,
    reexports: HashMap<String, ModPath>,
}

/// The circles among `files` (relative path → text), each listed in path order.
pub fn circles_in(files: &BTreeMap<PathBuf, String>) -> Vec<Vec<PathBuf>> {
    let modules: HashMap<ModPath, PathBuf> = files
        .keys()
        .map(|rel| (module_of(rel), rel.clone()))
        .collect();
    let uses: HashMap<PathBuf, FileUses> = files
        .iter()
        .map(|(rel, text)| (rel.clone(), file_uses(&module_of(rel), text, &modules)))
        .collect();
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (rel, u) in &uses {
        let out = edges.entry(rel.clone()).or_default();
        for p in &u.paths {
            if let Some(target) = resolve(p, &modules, &uses, 0)
                && &target != rel
            {
                out.insert(target);
            }
        }
    }
    strongly_connected(&edges)
        .into_iter()
        .filter(|c| c.len() > 1)
        .collect()
}

/// The file that defines what `path` names: the deepest file module on the path, followed
/// through that file's re-exports.
fn resolve(
    path: &ModPath,
    modules: &HashMap<ModPath, PathBuf>,
    uses: &HashMap<PathBuf, FileUses>,
    depth: usize,
) -> Option<PathBuf> {
    let (len, file) = (0..=path.len())
        .rev()
        .find_map(|n| modules.get(&path[..n]).map(|f| (n, f.clone())))?;
    if depth < 16
        && let Some(next) = path.get(len)
        && let Some(target) = uses.get(&file).and_then(|u| u.reexports.get(next))
    {
        let mut followed = target.clone();
        followed.extend_from_slice(&path[len + 1..]);
        if &followed != path {
            return resolve(&followed, modules, uses, depth + 1);
        }
    }
    Some(file)
}

/// Tarjan's algorithm; each component sorted, the components in order of their first file.
fn strongly_connected(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: HashMap<&'a PathBuf, usize>,
        low: HashMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a PathBuf) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        let edges = s.edges;
        for w in edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                if let Some(l) = s.low.get_mut(v) {
                    *l = (*l).min(lw);
                }
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                if let Some(l) = s.low.get_mut(v) {
                    *l = (*l).min(iw);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            comp.sort();
            s.out.push(comp);
        }
    }
    let mut s = State {
        edges,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}

/// A token of Rust source, as far as this rule needs: identifiers, `::`, and single characters.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Punct(char),
}

/// The paths a file imports, made absolute, and its re-exports.
fn file_uses(module: &ModPath, text: &str, modules: &HashMap<ModPath, PathBuf>) -> FileUses {
    let toks = drop_cfg_test(tokenize(text));
    let mut paths = Vec::new();
    let mut reexports = HashMap::new();
    // A re-export is an import only if the file's own code names it too.
    let mut reexported = Vec::new();
    let mut used_names = BTreeSet::new();
    let mut i = 0;
    while i < toks.len() {
        if toks[i] == Tok::Ident("use".into()) && toks.get(i + 1) != Some(&Tok::Punct('<')) {
            let public = is_pub_before(&toks, i);
            let end = toks[i..]
                .iter()
                .position(|t| *t == Tok::Punct(';'))
                .map_or(toks.len(), |p| i + p);
            let mut leaves = Vec::new();
            use_tree(&toks[i + 1..end], Vec::new(), &mut leaves);
            for (path, alias) in leaves {
                if let Some(abs) = absolute(module, &path, modules, true) {
                    match alias {
                        Some(name) if public => {
                            reexports.insert(name.clone(), abs.clone());
                            reexported.push((name, abs));
                        }
                        // A glob re-export only wires.
                        None if public => {}
                        _ => paths.push(abs),
                    }
                }
            }
            i = end + 1;
            continue;
        }
        if let Tok::Ident(id) = &toks[i] {
            used_names.insert(id.clone());
        }
        if let Tok::Ident(id) = &toks[i]
            && matches!(id.as_str(), "crate" | "super" | "self")
            && toks.get(i + 1) == Some(&Tok::PathSep)
            && !(i > 0 && toks[i - 1] == Tok::PathSep)
        {
            let mut path = vec![id.clone()];
            let mut j = i + 1;
            while toks.get(j) == Some(&Tok::PathSep) {
                match toks.get(j + 1) {
                    Some(Tok::Ident(next)) => {
                        path.push(next.clone());
                        j += 2;
                    }
                    _ => break,
                }
            }
            if let Some(abs) = absolute(module, &path, modules, false) {
                paths.push(abs);
            }
            i = j;
            continue;
        }
        i += 1;
    }
    paths.extend(
        reexported
            .into_iter()
            .filter(|(name, _)| used_names.contains(name))
            .map(|(_, abs)| abs),
    );
    FileUses { paths, reexports }
}

/// Whether the `use` at `at` is preceded by a visibility (`pub`, `pub(crate)`, `pub(super)`).
fn is_pub_before(toks: &[Tok], at: usize) -> bool {
    let ident = |k: usize| matches!(toks.get(k), Some(Tok::Ident(s)) if s == "pub");
    if at >= 1 && ident(at - 1) {
        return true;
    }
    if at >= 1 && toks[at - 1] == Tok::Punct(')') {
        let open = toks[..at - 1].iter().rposition(|t| *t == Tok::Punct('('));
        return open.is_some_and(|o| o >= 1 && ident(o - 1));
    }
    false
}

/// Expands a use tree into its leaves: (path, the name it binds, if any).
fn use_tree(toks: &[Tok], prefix: Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
    let mut path = prefix;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::PathSep => i += 1,
            Tok::Ident(id) if id == "as" => {
                if let Some(Tok::Ident(alias)) = toks.get(i + 1) {
                    let alias = (alias != "_").then(|| alias.clone());
                    out.push((path.clone(), alias));
                }
                return;
            }
            Tok::Ident(id) => {
                path.push(id.clone());
                i += 1;
            }
            Tok::Punct('*') => {
                out.push((path.clone(), None));
                return;
            }
            Tok::Punct('{') => {
                let mut depth = 0;
                let mut start = i + 1;
                for (k, t) in toks.iter().enumerate().skip(i) {
                    match t {
                        Tok::Punct('{') => depth += 1,
                        Tok::Punct('}') => {
                            depth -= 1;
                            if depth == 0 {
                                if start < k {
                                    use_tree(&toks[start..k], path.clone(), out);
                                }
                                return;
                            }
                        }
                        Tok::Punct(',') if depth == 1 => {
                            if start < k {
                                use_tree(&toks[start..k], path.clone(), out);
                            }
                            start = k + 1;
                        }
                        _ => {}
                    }
                }
                return;
            }
            _ => i += 1,
        }
    }
    if path.last().is_some_and(|l| l == "self") {
        path.pop();
    }
    let name = path.last().cloned();
    if !path.is_empty() {
        out.push((path, name));
    }
}

/// An in-crate path made absolute from `module`; `None` for a path into another crate. A `use`
/// path may start with a child module's name (`relative_names`).
fn absolute(
    module: &ModPath,
    path: &[String],
    modules: &HashMap<ModPath, PathBuf>,
    relative_names: bool,
) -> Option<ModPath> {
    let mut base = module.clone();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            if rest.first().is_some_and(|s| s == "self") {
                rest = &rest[1..];
            }
        }
        Some(first) if relative_names => {
            let mut child = module.clone();
            child.push(first.to_string());
            if !modules.contains_key(&child) {
                return None;
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Removes each item marked `#[cfg(test)]` (up to its `;` or its closing brace).
fn drop_cfg_test(toks: Vec<Tok>) -> Vec<Tok> {
    let is_cfg_test = |t: &[Tok]| {
        t.len() >= 7
            && t[0] == Tok::Punct('#')
            && t[1] == Tok::Punct('[')
            && t[2] == Tok::Ident("cfg".into())
            && t[3] == Tok::Punct('(')
            && t[4] == Tok::Ident("test".into())
            && t[5] == Tok::Punct(')')
            && t[6] == Tok::Punct(']')
    };
    let mut out = Vec::with_capacity(toks.len());
    let mut i = 0;
    while i < toks.len() {
        if is_cfg_test(&toks[i..]) {
            let mut depth = 0usize;
            let mut j = i + 7;
            // Further attributes, then the item.
            while j < toks.len() {
                match toks[j] {
                    Tok::Punct('[') | Tok::Punct('(') => depth += 1,
                    Tok::Punct(']') | Tok::Punct(')') => depth = depth.saturating_sub(1),
                    Tok::Punct('{') => {
                        let mut d = 1;
                        j += 1;
                        while j < toks.len() && d > 0 {
                            match toks[j] {
                                Tok::Punct('{') => d += 1,
                                Tok::Punct('}') => d -= 1,
                                _ => {}
                            }
                            j += 1;
                        }
                        break;
                    }
                    Tok::Punct(';') if depth == 0 => {
                        j += 1;
                        break;
                    }
                    _ => {}
                }
                j += 1;
            }
            i = j;
            continue;
        }
        out.push(toks[i].clone());
        i += 1;
    }
    out
}

/// Splits source into tokens, leaving out comments, string, byte-string and char literals.
fn tokenize(text: &str) -> Vec<Tok> {
    let c: Vec<char> = text.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if ch == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if (ch == 'r' || (ch == 'b' && c.get(i + 1) == Some(&'r')))
            && raw_string_start(&c, if ch == 'b' { i + 1 } else { i }).is_some()
        {
            let at = if ch == 'b' { i + 1 } else { i };
            let hashes = raw_string_start(&c, at).unwrap_or(0);
            i = at + 2 + hashes;
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while i < c.len() && !c[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{1F600}'), else a lifetime or label.
            if c.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
            }
        } else if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            if word == "b" && c.get(i) == Some(&'\'') {
                // A byte literal: the quote is taken as a char literal next.
                continue;
            }
            if word == "r" && c.get(i) == Some(&'#') {
                // A raw identifier.
                i += 1;
                continue;
            }
            toks.push(Tok::Ident(word));
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            toks.push(Tok::PathSep);
            i += 2;
        } else if ch.is_whitespace() || ch.is_ascii_digit() {
            i += 1;
        } else {
            toks.push(Tok::Punct(ch));
            i += 1;
        }
    }
    toks
}

/// The number of `#` of a raw string starting at `at` (`r"`, `r#"`, ...), if one starts there.
fn raw_string_start(c: &[char], at: usize) -> Option<usize> {
    if c.get(at) != Some(&'r') {
        return None;
    }
    if at > 0 && (c[at - 1].is_alphanumeric() || c[at - 1] == '_') && c[at - 1] != 'b' {
        return None;
    }
    let mut n = 0;
    while c.get(at + 1 + n) == Some(&'#') {
        n += 1;
    }
    (c.get(at + 1 + n) == Some(&'"')).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_of(files: &[(&str, &str)]) -> BTreeMap<PathBuf, String> {
        files
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.to_string()))
            .collect()
    }

    #[test]
    fn a_file_importing_one_that_imports_it_back_is_a_circle() {
        let files = crate_of(&[
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "use crate::b::B; pub struct A;"),
            ("b.rs", "use crate::c::{self, C}; pub struct B;"),
            ("c.rs", "pub struct C(crate::a::A);"),
        ]);
        assert_eq!(
            circles_in(&files),
            vec![vec![
                PathBuf::from("a.rs"),
                PathBuf::from("b.rs"),
                PathBuf::from("c.rs")
            ]]
        );
    }

    #[test]
    fn wiring_re_exports_and_tests_make_no_circle() {
        let files = crate_of(&[
            (
                "lib.rs",
                "mod a; mod b; pub use a::A; pub use b::{B as Bee};",
            ),
            ("a.rs", "pub struct A(crate::Bee); // crate::b::x\n"),
            (
                "b.rs",
                "pub struct B; const S: &str = \"crate::a::A\";\n\
                 #[cfg(test)]\nmod tests { use crate::A; }\n#[cfg(test)] use crate::a::A;",
            ),
            (
                "m/mod.rs",
                "mod x; mod y; pub(crate) use x::X; pub use y::*;",
            ),
            ("m/x.rs", "use super::y::Y; pub struct X(Y);"),
            ("m/y.rs", "pub struct Y(super::super::A, char);"),
        ]);
        assert_eq!(circles_in(&files), Vec::<Vec<PathBuf>>::new());
    }

    #[test]
    fn a_mod_rs_with_code_its_children_use_is_in_a_circle() {
        let files = crate_of(&[
            ("lib.rs", "mod m;"),
            ("m/mod.rs", "mod x; use x::X; pub struct Core(X);"),
            ("m/x.rs", "pub struct X(Box<super::Core>);"),
        ]);
        assert_eq!(
            circles_in(&files),
            vec![vec![PathBuf::from("m/mod.rs"), PathBuf::from("m/x.rs")]]
        );
    }

    #[test]
    fn a_re_export_the_file_uses_itself_is_an_import() {
        let files = crate_of(&[
            (
                "lib.rs",
                "mod d; pub use d::Dist; pub struct Error; fn f() -> Dist { todo!() }",
            ),
            ("d.rs", "pub struct Dist(crate::Error);"),
        ]);
        assert_eq!(
            circles_in(&files),
            vec![vec![PathBuf::from("d.rs"), PathBuf::from("lib.rs")]]
        );
    }

    #[test]
    fn lifetimes_chars_and_raw_strings_are_not_paths() {
        let toks = tokenize("fn f<'a>(x: &'a u8) -> char { let _ = r#\"crate::x\"#; '}' }");
        assert!(!toks.contains(&Tok::Ident("crate".into())));
        assert_eq!(
            toks.iter().filter(|t| **t == Tok::Punct('}')).count(),
            1,
            "{toks:?}"
        );
    }
}
