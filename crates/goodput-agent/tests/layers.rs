//! The agent crate's shape, checked from its source: the HTTP layer calls
//! into the state, the state never names the HTTP layer, the leaf
//! modules name neither, and no two modules of one parent name each other
//! in a circle. The module graph is read from the `crate::`, `super::`
//! and `use` paths of every file under `src/` (comments and string
//! literals left out), so a new arrow the wrong way fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The leaf modules: named by both layers, they name only each other.
const LEAVES: &[&str] = &["answer", "clock", "limits", "log", "secrets", "tls"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Layer {
    Leaf,
    State,
    Http,
    Root,
}

/// A module's layer, from its first segment (`[]` is the crate root).
fn layer_of(module: &[String]) -> Option<Layer> {
    match module.first().map(String::as_str) {
        None => Some(Layer::Root),
        Some("state") => Some(Layer::State),
        Some("http") => Some(Layer::Http),
        Some(m) if LEAVES.contains(&m) => Some(Layer::Leaf),
        Some(_) => None,
    }
}

/// Whether a module of layer `from` may name one of layer `to`.
fn may_name(from: Layer, to: Layer) -> bool {
    match from {
        Layer::Root => true,
        Layer::Http => matches!(to, Layer::Http | Layer::State | Layer::Leaf),
        Layer::State => matches!(to, Layer::State | Layer::Leaf),
        Layer::Leaf => to == Layer::Leaf,
    }
}

/// Every `.rs` file under `dir`, with the module path it defines.
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("src/ is readable") {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(src).unwrap().with_extension("");
            let mut path: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into_owned()).collect();
            if matches!(path.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                path.pop();
            }
            (path, f)
        })
        .collect()
}

/// The source with comments removed and string and character literals
/// emptied, so only code is searched.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if text[i..].starts_with("/*") {
                    depth += 1;
                    i += 2;
                } else if text[i..].starts_with("*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            i += body
                + rest[body..]
                    .find(&close)
                    .map_or(rest.len() - body, |n| n + close.len());
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime.
            let len = if rest[1..].starts_with('\\') {
                rest[2..].find('\'').map(|n| n + 3)
            } else {
                rest[1..]
                    .chars()
                    .next()
                    .filter(|c| rest[1 + c.len_utf8()..].starts_with('\''))
                    .map(|c| c.len_utf8() + 2)
            };
            match len {
                Some(n) => {
                    i += n;
                    out.push_str("' '");
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `r"`, `r#"`, `br##"` …: how many `#`s a raw string at the start of
/// `s` has.
fn raw_string_start(s: &str) -> Option<usize> {
    let s = s.strip_prefix('b').unwrap_or(s);
    let s = s.strip_prefix('r')?;
    let hashes = s.len() - s.trim_start_matches('#').len();
    s[hashes..].starts_with('"').then_some(hashes)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Path,
    Open,
    Close,
    Comma,
    Star,
    Other(char),
}

fn tokens(code: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = code.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if d.is_alphanumeric() || d == '_' {
                    end = j + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(Token::Ident(code[i..end].to_owned()));
        } else if c == ':' && chars.peek().is_some_and(|&(_, d)| d == ':') {
            chars.next();
            out.push(Token::Path);
        } else if c == '{' {
            out.push(Token::Open);
        } else if c == '}' {
            out.push(Token::Close);
        } else if c == ',' {
            out.push(Token::Comma);
        } else if c == '*' {
            out.push(Token::Star);
        } else if !c.is_whitespace() {
            out.push(Token::Other(c));
        }
    }
    out
}

/// Reads a path or use tree after `prefix::` at `t[i]`, adding every full
/// path it names to `out`; returns the index after it.
fn path_tree(t: &[Token], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        match t.get(i) {
            Some(Token::Ident(s)) => {
                path.push(s.clone());
                i += 1;
                if t.get(i) == Some(&Token::Path) {
                    i += 1;
                    continue;
                }
                out.push(path);
                return i;
            }
            Some(Token::Open) => {
                i += 1;
                while i < t.len() && t[i] != Token::Close {
                    if t[i] == Token::Comma {
                        i += 1;
                        continue;
                    }
                    i = path_tree(t, i, path.clone(), out);
                    // `as NAME` and the like up to the next item.
                    while i < t.len() && !matches!(t[i], Token::Comma | Token::Close) {
                        i += 1;
                    }
                }
                return i + 1;
            }
            _ => {
                // `crate::*` or a path ending in `::*`.
                out.push(path);
                return i + 1;
            }
        }
    }
}

/// The module paths every `crate::`/`super::` path in a file names, as
/// absolute paths from the crate root (inline `mod x { … }` blocks, such
/// as unit tests, resolve `super` from where they are).
fn named_paths(module: &[String], code: &str) -> Vec<Vec<String>> {
    let t = tokens(code);
    let mut out = Vec::new();
    // Inline modules open at a brace depth.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < t.len() {
        match &t[i] {
            Token::Open => depth += 1,
            Token::Close => {
                depth -= 1;
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            Token::Ident(m)
                if m == "mod"
                    && matches!(t.get(i + 1), Some(Token::Ident(_)))
                    && t.get(i + 2) == Some(&Token::Open) =>
            {
                if let Some(Token::Ident(name)) = t.get(i + 1) {
                    inline.push((name.clone(), depth));
                }
            }
            Token::Ident(k)
                if (k == "crate" || k == "super")
                    && t.get(i + 1) == Some(&Token::Path)
                    && !matches!(i.checked_sub(1).map(|p| &t[p]), Some(Token::Path)) =>
            {
                let mut here: Vec<String> = module.to_vec();
                here.extend(inline.iter().map(|(n, _)| n.clone()));
                let mut j = i;
                let base = if k == "crate" {
                    j += 2;
                    Vec::new()
                } else {
                    while matches!(&t[j], Token::Ident(s) if s == "super")
                        && t.get(j + 1) == Some(&Token::Path)
                    {
                        here.pop();
                        j += 2;
                    }
                    here
                };
                let mut found = Vec::new();
                i = path_tree(&t, j, base, &mut found);
                out.extend(found);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The longest known module a path names (`[]`: the crate root, for an
/// item declared in `lib.rs`).
fn module_named(known: &BTreeSet<Vec<String>>, path: &[String]) -> Vec<String> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| known.contains(p))
        .unwrap_or_default()
}

/// The module graph: for each module, the other modules it names.
fn graph(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files = modules(src);
    let known: BTreeSet<Vec<String>> = files.keys().cloned().collect();
    files
        .iter()
        .map(|(m, f)| {
            let text = std::fs::read_to_string(f).expect("a source file is readable");
            let named = named_paths(m, &code_only(&text))
                .iter()
                .map(|p| module_named(&known, p))
                .filter(|n| n != m)
                .collect();
            (m.clone(), named)
        })
        .collect()
}

fn show(m: &[String]) -> String {
    if m.is_empty() {
        "the crate root".into()
    } else {
        m.join("::")
    }
}

/// Every arrow that goes against the layers.
fn wrong_way(g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<String> {
    let mut out = Vec::new();
    for (from, named) in g {
        let Some(lf) = layer_of(from) else {
            out.push(format!("{} is in no layer (state, http or a leaf)", show(from)));
            continue;
        };
        for to in named {
            // A module in no layer is reported as the one naming.
            let Some(lt) = layer_of(to) else { continue };
            if to.is_empty() && !from.is_empty() {
                out.push(format!("{} names the crate root's items", show(from)));
            } else if !may_name(lf, lt) {
                out.push(format!("{} ({lf:?}) names {} ({lt:?})", show(from), show(to)));
            }
        }
    }
    out
}

/// A circle among the children of one module: each child stands for
/// everything under it, and an arrow between two children is any path
/// from inside one to inside the other.
fn circles(g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<String> {
    let parents: BTreeSet<Vec<String>> = g
        .keys()
        .filter(|m| !m.is_empty())
        .map(|m| m[..m.len() - 1].to_vec())
        .collect();
    let mut out = Vec::new();
    for parent in parents {
        let child_of = |m: &[String]| -> Option<String> {
            (m.len() > parent.len() && m.starts_with(&parent)).then(|| m[parent.len()].clone())
        };
        let mut arrows: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, named) in g {
            let Some(a) = child_of(from) else { continue };
            for to in named {
                if let Some(b) = child_of(to).filter(|b| *b != a) {
                    arrows.entry(a.clone()).or_default().insert(b);
                }
            }
        }
        for c in knots(&arrows) {
            let names: Vec<String> = c
                .iter()
                .map(|n| {
                    let mut p = parent.clone();
                    p.push(n.clone());
                    show(&p)
                })
                .collect();
            out.push(format!("a circle among {}", names.join(", ")));
        }
    }
    out
}

/// The graph's knots: each set of two or more nodes every one of which
/// reaches every other (Tarjan's strongly connected components).
fn knots(arrows: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        arrows: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, n: &'a str) {
            let i = self.index.len();
            self.index.insert(n, i);
            self.low.insert(n, i);
            self.stack.push(n);
            for m in self.arrows.get(n).into_iter().flatten() {
                let m = m.as_str();
                if !self.index.contains_key(m) {
                    self.visit(m);
                    let l = self.low[m].min(self.low[n]);
                    self.low.insert(n, l);
                } else if self.stack.contains(&m) {
                    let l = self.index[m].min(self.low[n]);
                    self.low.insert(n, l);
                }
            }
            if self.low[n] == self.index[n] {
                let at = self
                    .stack
                    .iter()
                    .rposition(|s| *s == n)
                    .expect("n is on the stack");
                let knot: Vec<String> = self.stack.split_off(at).into_iter().map(str::to_owned).collect();
                if knot.len() > 1 {
                    self.out.push(knot);
                }
            }
        }
    }
    let mut w = Walk {
        arrows,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for n in arrows.keys() {
        if !w.index.contains_key(n.as_str()) {
            w.visit(n);
        }
    }
    for k in &mut w.out {
        k.sort();
    }
    w.out.sort();
    w.out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn the_state_never_names_the_http_layer() {
    let g = graph(&src());
    let wrong = wrong_way(&g);
    assert!(
        wrong.is_empty(),
        "arrows against the layers:\n{}",
        wrong.join("\n")
    );
    for layer in ["state", "http"] {
        assert!(
            g.keys().any(|m| m.first().is_some_and(|f| f == layer)),
            "the crate has its {layer} layer"
        );
    }
}

#[test]
fn no_modules_of_one_parent_name_each_other_in_a_circle() {
    let c = circles(&graph(&src()));
    assert!(c.is_empty(), "import circles:\n{}", c.join("\n"));
}

#[test]
fn the_reader_sees_paths_in_use_trees_and_code_but_not_in_text() {
    let code = code_only(
        r#"
        use crate::{a::B, b::{self, c::D}};
        use super::e;
        // crate::f::G in a comment
        let s = "crate::g::H in a string";
        let c = '"';
        fn x() { crate::h::i(); }
        mod tests { use super::*; fn t() { super::super::j::K; } }
        "#,
    );
    let named = named_paths(&["m".into(), "n".into()], &code);
    let shown: Vec<String> = named.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        shown,
        ["a::B", "b::self", "b::c::D", "m::e", "h::i", "m::n", "m::j::K"],
        "paths read from {code}"
    );
}

#[test]
fn every_circle_is_found() {
    let arrows: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a", "d"]),
        ("d", vec!["e"]),
        ("e", vec!["d"]),
        ("f", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(knots(&arrows), vec![vec!["a", "b", "c"], vec!["d", "e"]]);
    let mut straight = arrows.clone();
    straight.insert("c".into(), ["d".to_owned()].into());
    straight.remove("e");
    assert!(knots(&straight).is_empty());
}
