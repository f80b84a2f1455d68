//! The library's modules depend on each other in one direction: no file of src/ reaches itself
//! again through the items it uses (ARCHITECTURE.md, "Layers and dependencies").
//!
//! The check reads the sources; it needs no compiler help and no crate of its own. Every file
//! under src/ is one module (`lib.rs` the root, `x/mod.rs` the module `x`, `x/y.rs` the module
//! `x/y`). A file depends on another when its code names one of the other's items: through a
//! `use` (a private import always counts, since the build allows no unused ones; a re-export
//! only when the file's own code names it too), or through a path written in the code
//! (`crate::..`, `super::..`, `self::..`, `child::..`, or a module imported by name). Each path
//! is followed through re-exports, and through the imports a child reaches with `super::`, to
//! the file that defines the item: `crate::Mode` is a use of `format.rs`, not of `lib.rs` or
//! `config.rs`. Comments, strings and `#[cfg(test)]` items (unit tests may use anything) are
//! left out.
//!
//! A set of files that reach each other (a strongly connected set of the graph) fails the
//! test, listed with the lines that make each of its edges, with one exception: a folder's
//! `mod.rs` and the files it declares may use each other (the parent declares, re-exports and
//! uses its children, and children use the parent's types, as `writer/*` use `Wal`). A set made
//! only of a parent and some of its children is checked again without the parent, so siblings
//! still may not use each other both ways, and no file outside the folder may be part of it.
//!
//! `cargo test --test it modules_depend_in_one_direction:: -- --nocapture` prints the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[test]
fn modules_depend_in_one_direction() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = Crate::read(&src).graph();
    println!("{}", describe(&graph));
    let cycles = cycles(&graph);
    assert!(
        cycles.is_empty(),
        "modules of src/ depend on each other in a cycle ({} set(s)):\n{}",
        cycles.len(),
        cycles
            .iter()
            .map(|set| describe_cycle(&graph, set))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn parse(files: &[(&str, &str)]) -> Graph {
    Crate::parse(files.iter().map(|(p, s)| (p.to_string(), s.to_string()))).graph()
}

fn sets(sets: &[&[&str]]) -> Vec<Vec<String>> {
    sets.iter()
        .map(|s| s.iter().map(|m| m.to_string()).collect())
        .collect()
}

/// The check follows re-exports and `super::` paths, and sees the cycle they make.
#[test]
fn the_module_check_sees_a_cycle_through_a_re_export() {
    let mut files = vec![
        ("lib.rs", "mod a;\nmod b;\npub use b::Thing;\n"),
        ("a.rs", "use crate::Thing;\npub fn f(_: Thing) {}\n"),
        ("b/mod.rs", "mod inner;\npub use inner::Thing;\n"),
        (
            "b/inner.rs",
            "// crate::a::f in a comment is no use\npub struct Thing;\n\
             fn g() -> &'static str { \"crate::a::f\" }\n",
        ),
    ];
    let graph = parse(&files);
    assert!(graph.contains_key(&("a".to_string(), "b/inner".to_string())));
    assert!(cycles(&graph).is_empty());

    files[3].1 = "pub struct Thing;\npub fn h() { super::super::a::f(Thing) }\n";
    assert_eq!(cycles(&parse(&files)), sets(&[&["a", "b/inner"]]));
}

/// Unit tests may use anything: a `#[cfg(test)]` item makes no edge.
#[test]
fn the_module_check_leaves_unit_tests_out() {
    let files = [
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "pub fn f() { crate::b::g() }\n"),
        (
            "b.rs",
            "pub fn g() {}\n#[cfg(test)]\nmod tests { fn t() { crate::a::f() } }\n",
        ),
    ];
    assert!(cycles(&parse(&files)).is_empty());
}

/// A folder's parent and children may use each other; siblings may not, and neither may a
/// module outside the folder take part in a cycle through the parent.
#[test]
fn the_module_check_allows_a_parent_and_its_children_only() {
    let mut files = vec![
        ("lib.rs", "mod r;\nmod t;\n"),
        ("r/mod.rs", "mod c;\nmod d;\nuse c::C;\npub struct R(C);\n"),
        ("r/c.rs", "use super::R;\npub struct C;\nfn f(_: &R) {}\n"),
        ("r/d.rs", "use super::c::C;\nfn g(_: C) {}\n"),
        ("t.rs", "pub fn t() {}\n"),
    ];
    assert!(cycles(&parse(&files)).is_empty());

    files[2].1 = "use super::R;\npub struct C;\nfn f(_: &R) { super::d::g() }\n";
    files[3].1 = "use super::c::C;\npub fn g() {}\nfn h(_: C) {}\n";
    assert_eq!(cycles(&parse(&files)), sets(&[&["r/c", "r/d"]]));

    files[2].1 = "use super::R;\npub struct C;\nfn f(_: &R) {}\n";
    files[1].1 =
        "pub(crate) mod c;\nmod d;\nuse c::C;\npub struct R(C);\nfn s() { crate::t::t() }\n";
    files[4].1 = "pub fn t() {}\nfn u(_: crate::r::c::C) {}\n";
    assert_eq!(cycles(&parse(&files)), sets(&[&["r", "r/c", "t"]]));
}

/// Edges `(from, to)` with the places that make them (`file:line path`).
type Graph = BTreeMap<(String, String), Vec<String>>;

#[derive(Clone, Debug)]
struct Tok {
    text: String,
    line: usize,
}

/// One `use` binding: the path as written and the name it binds (`None` for a glob).
#[derive(Clone, Debug)]
struct Import {
    path: Vec<String>,
    name: Option<String>,
    public: bool,
    line: usize,
}

#[derive(Default, Debug)]
struct Module {
    file: String,
    imports: Vec<Import>,
    /// Paths written in the code outside `use` items, with their lines.
    paths: Vec<(Vec<String>, usize)>,
    /// Identifiers used outside `use` items.
    idents: BTreeSet<String>,
    /// Names the file defines (fn, struct, enum, trait, type, const, static, mod, macro).
    defines: BTreeSet<String>,
}

struct Crate {
    modules: BTreeMap<String, Module>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut files = Vec::new();
        let mut dirs = vec![src.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path: PathBuf = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let rel = path
                        .strip_prefix(src)
                        .unwrap()
                        .to_string_lossy()
                        .replace('\\', "/");
                    files.push((rel, std::fs::read_to_string(&path).unwrap()));
                }
            }
        }
        Crate::parse(files.into_iter())
    }

    fn parse(files: impl Iterator<Item = (String, String)>) -> Crate {
        let mut modules = BTreeMap::new();
        for (file, text) in files {
            let name = module_name(&file);
            let toks = without_test_items(tokens(&strip(&text)));
            let mut module = scan(&toks);
            module.file = format!("src/{file}");
            modules.insert(name, module);
        }
        Crate { modules }
    }

    fn child(&self, module: &str, name: &str) -> Option<String> {
        let child = if module.is_empty() {
            name.to_string()
        } else {
            format!("{module}/{name}")
        };
        self.modules.contains_key(&child).then_some(child)
    }

    /// The module that defines the item `path` names, seen from `from`; `None` outside the crate.
    fn resolve(&self, from: &str, path: &[String], depth: usize) -> Option<String> {
        if depth > 16 || path.is_empty() {
            return None;
        }
        let (mut module, mut rest) = match path[0].as_str() {
            "crate" => (String::new(), &path[1..]),
            "self" => (from.to_string(), &path[1..]),
            "super" => (parent(from), &path[1..]),
            first => match self.child(from, first) {
                Some(child) => (child, &path[1..]),
                None => {
                    let import = self.modules.get(from)?.imports.iter().find(|i| {
                        i.name.as_deref() == Some(first)
                            && !(i.path.len() == 1 && i.path[0] == first)
                    })?;
                    let mut full = import.path.clone();
                    full.extend(path[1..].iter().cloned());
                    return self.resolve(from, &full, depth + 1);
                }
            },
        };
        while let Some(first) = rest.first() {
            match first.as_str() {
                "super" => module = parent(&module),
                "self" => {}
                name => match self.child(&module, name) {
                    Some(child) => module = child,
                    None => break,
                },
            }
            rest = &rest[1..];
        }
        let Some(name) = rest.first() else {
            return Some(module);
        };
        let m = self.modules.get(&module)?;
        if let Some(import) = m
            .imports
            .iter()
            .find(|i| i.name.as_deref() == Some(name.as_str()))
        {
            let mut full = import.path.clone();
            full.extend(rest[1..].iter().cloned());
            return self.resolve(&module, &full, depth + 1);
        }
        if !m.defines.contains(name) {
            for glob in m.imports.iter().filter(|i| i.name.is_none()) {
                let mut full = glob.path.clone();
                full.extend(rest.iter().cloned());
                if let Some(found) = self.resolve(&module, &full, depth + 1)
                    && self.modules[&found].defines.contains(name)
                {
                    return Some(found);
                }
            }
        }
        Some(module)
    }

    fn graph(&self) -> Graph {
        let mut graph = Graph::new();
        for (name, m) in &self.modules {
            let mut add = |to: Option<String>, line: usize, path: &[String]| {
                let Some(to) = to else { return };
                if &to == name {
                    return;
                }
                graph.entry((name.clone(), to)).or_default().push(format!(
                    "{}:{line} {}",
                    m.file,
                    path.join("::")
                ));
            };
            for import in &m.imports {
                // A private import is used (the build denies unused ones; a trait may be used
                // by its methods alone); a re-export only when the file's code names it.
                let used = !import.public
                    || import
                        .name
                        .as_ref()
                        .is_none_or(|n| n == "_" || m.idents.contains(n));
                if used {
                    add(
                        self.resolve(name, &import.path, 0),
                        import.line,
                        &import.path,
                    );
                }
            }
            for (path, line) in &m.paths {
                add(self.resolve(name, path, 0), *line, path);
            }
        }
        graph
    }
}

fn module_name(file: &str) -> String {
    let file = file.strip_suffix(".rs").unwrap_or(file);
    let file = file.strip_suffix("/mod").unwrap_or(file);
    if file == "lib" {
        String::new()
    } else {
        file.to_string()
    }
}

fn parent(module: &str) -> String {
    module
        .rsplit_once('/')
        .map(|(p, _)| p.to_string())
        .unwrap_or_default()
}

fn shown(module: &str) -> &str {
    if module.is_empty() { "lib" } else { module }
}

/// The source with comments, strings and character literals blanked (newlines kept).
fn strip(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let prev_ident = i > 0 && ident(c[i - 1]);
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if (c[i] == 'r' || (c[i] == 'b' && c.get(i + 1) == Some(&'r'))) && !prev_ident && {
            let mut j = i + if c[i] == 'b' { 2 } else { 1 };
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            c.get(j) == Some(&'"')
        } {
            let mut j = i + if c[i] == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while c[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &ch in &c[i..j.min(c.len())] {
                blank(&mut out, ch);
            }
            i = j;
        } else if c[i] == '"' {
            blank(&mut out, c[i]);
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            if i < c.len() {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else if c[i] == '\'' && (c.get(i + 1) == Some(&'\\') || c.get(i + 2) == Some(&'\'')) {
            blank(&mut out, c[i]);
            i += 1;
            if c[i] == '\\' {
                blank(&mut out, c[i]);
                i += 1;
            }
            blank(&mut out, c[i]);
            i += 1;
            while i < c.len() && c[i] != '\'' {
                blank(&mut out, c[i]);
                i += 1;
            }
            if i < c.len() {
                blank(&mut out, c[i]);
                i += 1;
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// Identifiers, `::` and single punctuation characters, with their lines.
fn tokens(code: &str) -> Vec<Tok> {
    let c: Vec<char> = code.chars().collect();
    let mut toks = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < c.len() {
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch.is_alphanumeric() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            let mut text: String = c[start..i].iter().collect();
            if text == "r" && c.get(i) == Some(&'#') {
                i += 1;
                let s = i;
                while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                    i += 1;
                }
                text = c[s..i].iter().collect();
            }
            toks.push(Tok { text, line });
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            toks.push(Tok {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            toks.push(Tok {
                text: ch.to_string(),
                line,
            });
            i += 1;
        }
    }
    toks
}

/// The tokens without the items marked `#[cfg(test)]`.
fn without_test_items(toks: Vec<Tok>) -> Vec<Tok> {
    let is = |i: usize, s: &str| toks.get(i).is_some_and(|t| t.text == s);
    let mut out = Vec::with_capacity(toks.len());
    let mut i = 0;
    while i < toks.len() {
        let test_attr = ["#", "[", "cfg", "(", "test", ")", "]"]
            .iter()
            .enumerate()
            .all(|(k, s)| is(i + k, s));
        if !test_attr {
            out.push(toks[i].clone());
            i += 1;
            continue;
        }
        i += 7;
        let mut depth = 0i32;
        while i < toks.len() {
            match toks[i].text.as_str() {
                "(" | "[" => depth += 1,
                ")" | "]" => depth -= 1,
                ";" if depth == 0 => {
                    i += 1;
                    break;
                }
                "{" if depth == 0 => {
                    let mut braces = 0;
                    while i < toks.len() {
                        match toks[i].text.as_str() {
                            "{" => braces += 1,
                            "}" => braces -= 1,
                            _ => {}
                        }
                        i += 1;
                        if braces == 0 {
                            break;
                        }
                    }
                    break;
                }
                _ => {}
            }
            i += 1;
        }
    }
    out
}

const DEFINING: [&str; 9] = [
    "fn", "struct", "enum", "trait", "type", "const", "static", "union", "mod",
];

fn scan(toks: &[Tok]) -> Module {
    let mut m = Module::default();
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i].text.as_str();
        if t == "use" && toks.get(i + 1).is_some_and(|n| n.text != "<") {
            let line = toks[i].line;
            let public = i > 0 && toks[i - 1].text == "pub"
                || i > 0
                    && toks[i - 1].text == ")"
                    && (0..i - 1)
                        .rev()
                        .find(|&j| toks[j].text == "(")
                        .is_some_and(|j| j > 0 && toks[j - 1].text == "pub");
            let end = (i..toks.len())
                .find(|&j| toks[j].text == ";")
                .unwrap_or(toks.len());
            let mut pos = i + 1;
            let first = m.imports.len();
            use_tree(&toks[..end], &mut pos, Vec::new(), line, &mut m.imports);
            for import in &mut m.imports[first..] {
                import.public = public;
            }
            i = end + 1;
            continue;
        }
        if DEFINING.contains(&t)
            && let Some(name) = toks.get(i + 1)
            && !DEFINING.contains(&name.text.as_str())
        {
            m.defines.insert(name.text.clone());
        }
        if t == "macro_rules"
            && toks.get(i + 1).is_some_and(|n| n.text == "!")
            && let Some(name) = toks.get(i + 2)
        {
            m.defines.insert(name.text.clone());
        }
        let starts_path = toks.get(i + 1).is_some_and(|n| n.text == "::")
            && is_ident(t)
            && (i == 0 || toks[i - 1].text != "::");
        if starts_path {
            let line = toks[i].line;
            let mut path = vec![t.to_string()];
            let mut j = i + 1;
            while toks.get(j).is_some_and(|n| n.text == "::")
                && toks.get(j + 1).is_some_and(|n| is_ident(&n.text))
            {
                path.push(toks[j + 1].text.clone());
                j += 2;
            }
            m.idents.insert(t.to_string());
            m.paths.push((path, line));
            i = j;
            continue;
        }
        if is_ident(t) {
            m.idents.insert(t.to_string());
        }
        i += 1;
    }
    m
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Expands one use tree (`a::{b, c::d as e, f::*}`) into its bindings.
fn use_tree(
    toks: &[Tok],
    pos: &mut usize,
    mut prefix: Vec<String>,
    line: usize,
    out: &mut Vec<Import>,
) {
    if toks.get(*pos).is_some_and(|t| t.text == "::") {
        *pos += 1;
    }
    loop {
        let Some(t) = toks.get(*pos) else { return };
        match t.text.as_str() {
            "{" => {
                *pos += 1;
                loop {
                    match toks.get(*pos).map(|t| t.text.as_str()) {
                        None => return,
                        Some("}") => {
                            *pos += 1;
                            return;
                        }
                        Some(",") => *pos += 1,
                        Some(_) => use_tree(toks, pos, prefix.clone(), line, out),
                    }
                }
            }
            "*" => {
                *pos += 1;
                out.push(Import {
                    path: prefix,
                    name: None,
                    public: false,
                    line,
                });
                return;
            }
            name if is_ident(name) => {
                *pos += 1;
                if toks.get(*pos).is_some_and(|t| t.text == "::") {
                    prefix.push(name.to_string());
                    *pos += 1;
                    continue;
                }
                let (path, mut bound) = if name == "self" {
                    let last = prefix.last().cloned().unwrap_or_default();
                    (prefix, last)
                } else {
                    prefix.push(name.to_string());
                    (prefix, name.to_string())
                };
                if toks.get(*pos).is_some_and(|t| t.text == "as") {
                    bound = toks
                        .get(*pos + 1)
                        .map(|t| t.text.clone())
                        .unwrap_or_default();
                    *pos += 2;
                }
                out.push(Import {
                    path,
                    name: Some(bound),
                    public: false,
                    line,
                });
                return;
            }
            _ => {
                *pos += 1;
            }
        }
    }
}

/// The sets of modules that depend on each other in a cycle the folder rule does not allow.
///
/// A strongly connected set made of one module and some of its own children (a folder's
/// `mod.rs` with files it declares) is allowed when the children, without their parent, are
/// free of cycles: a parent and its children may use each other, siblings may not, and no
/// module outside the folder may take part.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    let all: BTreeSet<String> = graph
        .keys()
        .flat_map(|(a, b)| [a.clone(), b.clone()])
        .collect();
    let mut found = Vec::new();
    cycles_among(graph, &all, &mut found);
    found.sort();
    found
}

fn cycles_among(graph: &Graph, nodes: &BTreeSet<String>, found: &mut Vec<Vec<String>>) {
    for set in strongly_connected(graph, nodes) {
        let folder = set
            .iter()
            .find(|p| set.iter().all(|m| m == *p || parent(m) == **p));
        match folder {
            Some(p) => {
                let children = set.iter().filter(|m| *m != p).cloned().collect();
                cycles_among(graph, &children, found);
            }
            None => found.push(set),
        }
    }
}

/// The strongly connected sets of two or more of `nodes` (Tarjan), each sorted, in order.
fn strongly_connected(graph: &Graph, nodes: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in graph.keys() {
        if nodes.contains(from) && nodes.contains(to) {
            next.entry(from).or_default().push(to);
            next.entry(to).or_default();
        }
    }
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        sets: Vec<Vec<String>>,
    }
    fn visit<'a>(v: &'a str, next: &BTreeMap<&'a str, Vec<&'a str>>, s: &mut State<'a>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for &w in &next[v] {
            if !s.index.contains_key(w) {
                visit(w, next, s);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                set.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                s.sets.push(set);
            }
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        sets: Vec::new(),
    };
    for &v in next.keys() {
        if !s.index.contains_key(v) {
            visit(v, &next, &mut s);
        }
    }
    s.sets.sort();
    s.sets
}

fn describe_cycle(graph: &Graph, set: &[String]) -> String {
    let mut text = format!(
        "  {{{}}}\n",
        set.iter().map(|m| shown(m)).collect::<Vec<_>>().join(", ")
    );
    for ((from, to), places) in graph {
        if set.contains(from) && set.contains(to) {
            text.push_str(&format!(
                "    {} -> {}: {}\n",
                shown(from),
                shown(to),
                places.join(", ")
            ));
        }
    }
    text
}

/// Every module with the modules it uses.
fn describe(graph: &Graph) -> String {
    let mut uses: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in graph.keys() {
        uses.entry(from).or_default().push(shown(to));
    }
    uses.iter()
        .map(|(m, to)| format!("{} -> {}\n", shown(m), to.join(", ")))
        .collect()
}
