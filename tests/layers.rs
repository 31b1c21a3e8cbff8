//! Reads src/ and checks the crate's file-level import graph: no cycles
//! between files, and the layers point one way (docs/ARCHITECTURE.md).
//!
//! rustc accepts cycles between modules, so nothing else would stop one from
//! coming back; a cycle means two files can only be understood, moved or
//! tested together. The graph is built from the source text, not from rustc:
//! every `use crate::…`, `use super::…`, `use self::…` (groups expanded) and
//! every `crate::…`/`super::…` path written inline in code is resolved to the
//! file that defines the item. A `pub use` is followed to the item's origin,
//! so going through a facade (`probe::ProbeError` re-exported from a
//! `mod.rs`) is an edge to the defining file, and a facade's own re-exports
//! are not edges (they only name things). Comments and string literals are
//! skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One source file: its module path (`["probe", "tcp"]`) and text with
/// comments and strings blanked out.
struct File {
    module: Vec<String>,
    text: String,
    /// A module file with children (`mod.rs`, `lib.rs`, `a.rs` beside
    /// `a/`): its `pub use` lines are a facade, not edges.
    facade: bool,
}

type Graph = BTreeMap<String, BTreeMap<String, String>>;

/// Blanks comments, string and char literals so that a path in a doc comment
/// or an error message is not read as an import. Byte offsets are kept.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                out[i] = b' ';
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    out[i] = b' ';
                    out[i + 1] = b' ';
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    out[i] = b' ';
                    out[i + 1] = b' ';
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] != b'\n' {
                        out[i] = b' ';
                    }
                    i += 1;
                }
            }
        } else if b[i] == b'r'
            && i + 1 < b.len()
            && (b[i + 1] == b'"' || b[i + 1] == b'#')
            && (i == 0 || !is_ident(b[i - 1]))
        {
            // Raw string r"…" or r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while j < b.len() && b[j] == b'#' {
                hashes += 1;
                j += 1;
            }
            if j < b.len() && b[j] == b'"' {
                let mut close = vec![b'"'];
                close.extend(std::iter::repeat_n(b'#', hashes));
                j += 1;
                while j < b.len() && !b[j..].starts_with(&close) {
                    j += 1;
                }
                let end = (j + close.len()).min(b.len());
                for c in &mut out[i..end] {
                    if *c != b'\n' {
                        *c = b' ';
                    }
                }
                i = end;
            } else {
                i += 1;
            }
        } else if b[i] == b'"' {
            out[i] = b' ';
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    out[i] = b' ';
                    i += 1;
                }
                if i < b.len() && b[i] != b'\n' {
                    out[i] = b' ';
                }
                i += 1;
            }
            if i < b.len() {
                out[i] = b' ';
                i += 1;
            }
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{1F}'), not a lifetime ('a).
            let lit = if i + 2 < b.len() && b[i + 1] == b'\\' {
                b[i + 2..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map(|p| i + 2 + p)
            } else if i + 2 < b.len() && b[i + 2] == b'\'' {
                Some(i + 2)
            } else {
                None
            };
            match lit {
                Some(end) => {
                    for c in &mut out[i..=end] {
                        *c = b' ';
                    }
                    i = end + 1;
                }
                None => i += 1,
            }
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8 boundaries only for ASCII")
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The inline `mod name { … }` blocks of a file, as (start, end, name), so
/// that `super::` inside `mod tests` means the file's own module.
fn inline_mods(text: &str) -> Vec<(usize, usize, String)> {
    let b = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(p) = text[i..].find("mod ") {
        let at = i + p;
        i = at + 4;
        if at > 0 && is_ident(b[at - 1]) {
            continue;
        }
        let mut j = at + 4;
        while j < b.len() && b[j] == b' ' {
            j += 1;
        }
        let name_start = j;
        while j < b.len() && is_ident(b[j]) {
            j += 1;
        }
        let name = &text[name_start..j];
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        if name.is_empty() || j >= b.len() || b[j] != b'{' {
            continue;
        }
        found.push((j, closing_brace(b, j), name.to_string()));
    }
    found
}

/// The `}` closing the `{` at `open` (the text's end if none does).
fn closing_brace(b: &[u8], open: usize) -> usize {
    let mut depth = 0;
    let mut k = open;
    while k < b.len() {
        match b[k] {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            _ => {}
        }
        k += 1;
    }
    k
}

/// Expands a use tree (`super::{a, b::{self, C}}`) into paths.
fn expand(tree: &str) -> Vec<Vec<String>> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = Vec::new();
    expand_into(&[], &tree, &mut out);
    out
}

fn expand_into(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim_matches(',');
    if tree.is_empty() {
        return;
    }
    // Split on top-level commas.
    let mut depth = 0;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in tree.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&tree[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&tree[start..]);
    if parts.len() > 1 {
        for p in parts {
            expand_into(prefix, p, out);
        }
        return;
    }
    let tree = parts[0];
    if let Some(brace) = tree.find('{') {
        let head = tree[..brace].trim_end_matches("::");
        let mut p = prefix.to_vec();
        p.extend(head.split("::").filter(|s| !s.is_empty()).map(String::from));
        let inner = &tree[brace + 1..tree.rfind('}').unwrap_or(tree.len())];
        expand_into(&p, inner, out);
        return;
    }
    let mut p = prefix.to_vec();
    for seg in tree.split("::").filter(|s| !s.is_empty()) {
        if seg == "self" {
            continue;
        }
        p.push(seg.to_string());
    }
    out.push(p);
}

/// The use statements of a text: (offset, is `pub use`, tree text).
fn uses(text: &str) -> Vec<(usize, bool, String)> {
    let b = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(p) = text[i..].find("use ") {
        let at = i + p;
        i = at + 4;
        if at > 0 && is_ident(b[at - 1]) {
            continue;
        }
        let Some(end) = text[at..].find(';') else {
            break;
        };
        let tree = &text[at + 4..at + end];
        let before = text[..at].trim_end();
        let public = before.ends_with("pub") || before.ends_with(')') && before.contains("pub(");
        // Keep `as` aliases from gluing onto names once whitespace goes.
        let tree = strip_aliases(tree);
        found.push((at, public, tree));
        i = at + end;
    }
    found
}

/// `a::B as C` → `a::B`, inside groups too.
fn strip_aliases(tree: &str) -> String {
    let mut out = String::new();
    let mut rest = tree;
    while let Some(p) = rest.find(" as ") {
        out.push_str(&rest[..p]);
        let after = &rest[p + 4..];
        let skip = after.trim_start();
        let n = skip
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(skip.len());
        rest = &skip[n..];
    }
    out.push_str(rest);
    out
}

/// Inline `crate::a::b` and `super::a::b` paths outside use statements.
fn inline_paths(text: &str, skip: &[(usize, usize)]) -> Vec<(usize, Vec<String>)> {
    let b = text.as_bytes();
    let mut found = Vec::new();
    for root in ["crate::", "super::"] {
        let mut i = 0;
        while let Some(p) = text[i..].find(root) {
            let at = i + p;
            i = at + root.len();
            if at > 0 && (is_ident(b[at - 1]) || b[at - 1] == b'$' || b[at - 1] == b':') {
                continue;
            }
            if skip.iter().any(|&(s, e)| at >= s && at < e) {
                continue;
            }
            let mut j = at;
            while j < b.len() && (is_ident(b[j]) || b[j] == b':') {
                j += 1;
            }
            let segs: Vec<String> = text[at..j]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            found.push((at, segs));
        }
    }
    found
}

struct Crate {
    files: BTreeMap<String, File>,
    by_module: BTreeMap<Vec<String>, String>,
}

impl Crate {
    fn new(sources: BTreeMap<String, String>) -> Crate {
        let mut files = BTreeMap::new();
        let mut by_module = BTreeMap::new();
        for (path, src) in sources {
            let rel = path.trim_end_matches(".rs");
            let mut module: Vec<String> = rel.split('/').map(String::from).collect();
            let facade = matches!(module.last().map(String::as_str), Some("mod" | "lib"));
            if facade {
                module.pop();
            }
            if module == ["main"] {
                continue;
            }
            by_module.insert(module.clone(), path.clone());
            files.insert(
                path,
                File {
                    module,
                    text: strip(&src),
                    facade,
                },
            );
        }
        // `mesh.rs` beside `mesh/` is a module file as much as a `mod.rs`.
        let parents: BTreeSet<Vec<String>> = by_module
            .keys()
            .filter(|m| !m.is_empty())
            .map(|m| m[..m.len() - 1].to_vec())
            .collect();
        for f in files.values_mut() {
            f.facade |= parents.contains(&f.module);
        }
        Crate { files, by_module }
    }

    /// Absolute module path of a written path, from a file's module plus the
    /// inline modules around the use.
    fn absolute(&self, base: &[String], segs: &[String]) -> Option<Vec<String>> {
        let mut cur = base.to_vec();
        let mut it = segs.iter().peekable();
        match it.peek().map(|s| s.as_str()) {
            Some("crate") => {
                cur.clear();
                it.next();
            }
            Some("super") => {
                while it.peek().map(|s| s.as_str()) == Some("super") {
                    cur.pop()?;
                    it.next();
                }
            }
            Some("self") => {
                it.next();
            }
            Some(first) => {
                // A 2018 relative path names a child module (`pub use
                // client::Target` in a mod.rs); anything else is another crate.
                let mut child = base.to_vec();
                child.push(first.to_string());
                if !self.by_module.contains_key(&child) {
                    return None;
                }
            }
            None => return None,
        }
        cur.extend(it.cloned());
        Some(cur)
    }

    /// The file that defines what an absolute path names, following
    /// `pub use` re-exports.
    fn resolve(&self, abs: &[String], depth: usize) -> Option<String> {
        if depth > 16 {
            return None;
        }
        let (k, file) = (0..=abs.len())
            .rev()
            .find_map(|k| self.by_module.get(&abs[..k]).map(|f| (k, f)))?;
        let rest = &abs[k..];
        let Some(item) = rest.first() else {
            return Some(file.clone());
        };
        if item == "*" {
            return Some(file.clone());
        }
        let f = &self.files[file];
        for (_, public, tree) in uses(&f.text) {
            if !public {
                continue;
            }
            for p in expand(&tree) {
                if p.last() == Some(item) {
                    if let Some(target) = self.absolute(&f.module, &p) {
                        let mut target = target;
                        target.extend(rest[1..].iter().cloned());
                        if let Some(r) = self.resolve(&target, depth + 1) {
                            return Some(r);
                        }
                    }
                }
            }
        }
        Some(file.clone())
    }

    /// Every file-level edge: importing file → defining file, with the path
    /// as written, for the message.
    fn graph(&self) -> Graph {
        let mut g: Graph = BTreeMap::new();
        for (path, f) in &self.files {
            let mods = inline_mods(&f.text);
            let base_at = |at: usize| {
                let mut m = f.module.clone();
                for (s, e, name) in &mods {
                    if at > *s && at < *e {
                        m.push(name.clone());
                    }
                }
                m
            };
            let edges = g.entry(path.clone()).or_default();
            let mut spans = Vec::new();
            for (at, public, tree) in uses(&f.text) {
                spans.push((at, at + tree.len() + 8));
                if public && f.facade {
                    continue;
                }
                for p in expand(&tree) {
                    self.add_edge(edges, path, &base_at(at), &p);
                }
            }
            for (at, p) in inline_paths(&f.text, &spans) {
                self.add_edge(edges, path, &base_at(at), &p);
            }
        }
        g
    }

    fn add_edge(
        &self,
        edges: &mut BTreeMap<String, String>,
        from: &str,
        base: &[String],
        p: &[String],
    ) {
        let Some(abs) = self.absolute(base, p) else {
            return;
        };
        if let Some(to) = self.resolve(&abs, 0) {
            if to != from {
                edges.entry(to).or_insert_with(|| p.join("::"));
            }
        }
    }
}

/// Strongly connected components with more than one file (Tarjan).
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(es) = t.g.get(v) {
            for w in es.keys() {
                let w = w.as_str();
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn describe(g: &Graph, comps: &[Vec<String>]) -> String {
    let mut s = String::new();
    for c in comps {
        s.push_str(&format!("cycle over {} files:\n", c.len()));
        for f in c {
            for (to, via) in &g[f] {
                if c.contains(to) {
                    s.push_str(&format!("  {f} -> {to}   (via {via})\n"));
                }
            }
        }
    }
    s
}

fn read_src() -> BTreeMap<String, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).expect("read src/") {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.insert(rel, std::fs::read_to_string(&p).expect("read source"));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    walk(&root, &root, &mut out);
    out
}

#[test]
fn src_has_no_file_level_import_cycle() {
    let krate = Crate::new(read_src());
    let g = krate.graph();
    let edges: usize = g.values().map(BTreeMap::len).sum();
    // The reader must see the crate, or an empty graph would pass.
    assert!(
        krate.files.len() > 80,
        "read only {} files",
        krate.files.len()
    );
    assert!(
        edges > 300,
        "found only {edges} edges: the parser lost the imports"
    );
    let comps = cycles(&g);
    assert!(
        comps.is_empty(),
        "file-level import cycles in src/:\n{}",
        describe(&g, &comps)
    );
}

fn synthetic(files: &[(&str, &str)]) -> Graph {
    Crate::new(
        files
            .iter()
            .map(|(p, s)| (p.to_string(), s.to_string()))
            .collect(),
    )
    .graph()
}

#[test]
fn the_checker_finds_a_cycle_through_a_facade_and_a_group() {
    let g = synthetic(&[
        ("lib.rs", "pub mod a;"),
        ("a/mod.rs", "pub mod x; pub mod y; pub use x::Thing;"),
        ("a/x.rs", "use super::{y::{self, Other}};\npub struct Thing;"),
        ("a/y.rs", "// use super::x::Nothing;\nfn f() { let _ = \"crate::a::x\"; crate::a::Thing; }\npub struct Other;"),
    ]);
    assert_eq!(g["a/x.rs"].keys().collect::<Vec<_>>(), ["a/y.rs"]);
    // Through the facade to the defining file; the comment and string are not edges.
    assert_eq!(g["a/y.rs"].keys().collect::<Vec<_>>(), ["a/x.rs"]);
    assert!(
        g["a/mod.rs"].is_empty(),
        "a facade's re-export is not an edge"
    );
    let comps = cycles(&g);
    assert_eq!(
        comps,
        vec![vec!["a/x.rs".to_string(), "a/y.rs".to_string()]]
    );
    assert!(describe(&g, &comps).contains("a/x.rs -> a/y.rs"));
}

#[test]
fn test_modules_resolve_super_to_their_file() {
    let g = synthetic(&[
        ("lib.rs", "pub mod a; pub mod b;"),
        (
            "a.rs",
            "pub fn f() {}\n#[cfg(test)]\nmod tests {\n use super::*;\n use crate::b::G;\n}",
        ),
        ("b.rs", "use crate::a::f; pub struct G;"),
    ]);
    assert_eq!(g["a.rs"].keys().collect::<Vec<_>>(), ["b.rs"]);
    assert_eq!(cycles(&g).len(), 1);
}

/// Where a kind may still be named outside src/kinds/ and src/protocol/,
/// and why: not a per-kind fact the registry could declare.
const KIND_NAMED_ALLOWED: &[(&str, &str, &str)] = &[(
    "probe/spec.rs",
    "Kind::Tcp",
    "ProbeSpec::default()'s kind: a default value, as iperf3's, not a fact of the kind",
)];

/// Blanks every item under `#[cfg(test)]` (a test module, impl or fn):
/// from the attribute to its closing brace, or to its `;` for `mod x;`.
fn without_test_items(text: &str) -> String {
    let mut out = text.as_bytes().to_vec();
    let b = text.as_bytes();
    let mut from = 0;
    while let Some(p) = text[from..].find("#[cfg(test)]") {
        let at = from + p;
        let mut k = at + "#[cfg(test)]".len();
        while k < b.len() && b[k] != b'{' && b[k] != b';' {
            k += 1;
        }
        if k < b.len() && b[k] == b'{' {
            k = closing_brace(b, k);
        }
        let end = k.min(b.len().saturating_sub(1));
        for c in &mut out[at..=end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        from = end + 1;
    }
    String::from_utf8(out).expect("ASCII blanks keep UTF-8")
}

/// The files a `#[cfg(test)] mod name;` makes test-only, as paths under
/// src/ (`config/tests.rs`, `units_proptests.rs`).
fn test_only_files(files: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (path, src) in files {
        let text = strip(src);
        let dir = match path.rsplit_once('/') {
            _ if path == "lib.rs" || path == "main.rs" => String::new(),
            Some((d, "mod.rs")) => format!("{d}/"),
            _ => format!("{}/", path.trim_end_matches(".rs")),
        };
        let mut rest = text.as_str();
        while let Some(p) = rest.find("#[cfg(test)]") {
            rest = &rest[p + "#[cfg(test)]".len()..];
            let item = rest.trim_start();
            let item = item.strip_prefix("pub ").unwrap_or(item);
            if let Some(decl) = item.strip_prefix("mod ") {
                let name: String = decl
                    .bytes()
                    .take_while(|&c| is_ident(c))
                    .map(char::from)
                    .collect();
                if decl[name.len()..].trim_start().starts_with(';') {
                    out.insert(format!("{dir}{name}.rs"));
                    out.insert(format!("{dir}{name}/mod.rs"));
                }
            }
        }
    }
    out
}

/// Every `Kind::X` and `ModuleKind::X` in a file's production code, as
/// (line, name).
fn kinds_named(src: &str) -> Vec<(usize, String)> {
    let text = without_test_items(&strip(src));
    let b = text.as_bytes();
    let mut found = Vec::new();
    for (at, _) in text.match_indices("Kind::") {
        let mut start = at;
        if text[..at].ends_with("Module") {
            start = at - "Module".len();
        }
        if start > 0 && is_ident(b[start - 1]) {
            continue;
        }
        let tail = &text[at + "Kind::".len()..];
        let variant: String = tail
            .bytes()
            .take_while(|&c| is_ident(c))
            .map(char::from)
            .collect();
        if !variant.starts_with(|c: char| c.is_ascii_uppercase()) {
            continue;
        }
        let line = text[..at].matches('\n').count() + 1;
        found.push((
            line,
            format!("{}{variant}", &text[start..at + "Kind::".len()]),
        ));
    }
    found
}

/// Issue 21: the registry (src/kinds/) is the one place that matches on a
/// kind; the wire (src/protocol/) defines `Kind` and its names. Anywhere
/// else a kind is asked through `kinds::of(kind)`, so that adding a kind
/// edits its folder and the registry, not every module that shows it.
#[test]
fn no_kind_is_named_outside_the_registry() {
    let files = read_src();
    let tests = test_only_files(&files);
    // The reader must see the test modules, or every test would be read
    // as production code (and the other way round).
    assert!(tests.contains("config/tests.rs"), "{tests:?}");
    let mut named = Vec::new();
    for (path, src) in &files {
        if path.starts_with("kinds/") || path.starts_with("protocol/") || tests.contains(path) {
            continue;
        }
        for (line, name) in kinds_named(src) {
            let allowed = KIND_NAMED_ALLOWED
                .iter()
                .any(|(p, n, _)| p == path && *n == name);
            if !allowed {
                named.push(format!("src/{path}:{line}: {name}"));
            }
        }
    }
    assert!(
        named.is_empty(),
        "a kind is named outside src/kinds/ and src/protocol/ (ask kinds::of(kind) instead, \
         or allow it in KIND_NAMED_ALLOWED with the reason):\n{}",
        named.join("\n")
    );
}

#[test]
fn the_kind_check_sees_production_code_only() {
    let src = "fn f(k: Kind) -> bool { k == Kind::Udp || m == ModuleKind::LoopbackTcp }\n\
               // Kind::Tcp in a comment\n\
               const S: &str = \"Kind::Tcp\";\n\
               #[cfg(test)]\nmod tests { fn g() { let _ = Kind::TcpRr; } }\n\
               fn h() -> Kind { kinds::of(k).kind() }";
    let names: Vec<String> = kinds_named(src).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["Kind::Udp", "ModuleKind::LoopbackTcp"]);
}
