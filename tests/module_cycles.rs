//! No import cycles between the modules of any crate of the workspace (core, transports, text,
//! engine-libtorch, the root package's src/).
//!
//! Read from the sources, std only: each crate's module tree from its root file's `mod x;`
//! declarations (with `#[path]`), then in each file (comments and literals removed) every path
//! that starts with `crate::`, `super::` or `self::` (in `use` trees too), resolved to the module
//! it names. For every module with submodules (the crate root, `hibari/`, `kokoro/`, ...) its
//! children are the nodes of one graph: child A has an edge to child B when code anywhere in A's
//! subtree names B or something in it, or a name the parent re-exports from B (`pub use b::x`).
//! What the parent itself defines is no node (the root and a `mod.rs` declare and re-export
//! their children: they are above them, not beside them), nor is a glob of the parent's names.
//! Test code counts: `mod tests` inside a module is part of it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module's path from its crate root (empty: the root).
type ModPath = Vec<String>;

/// Where an edge was seen first: file and line.
type Evidence = (PathBuf, usize);

/// The crates' roots, relative to the workspace.
const CRATE_ROOTS: &[&str] = &[
    "core/src/lib.rs",
    "transports/src/lib.rs",
    "text/src/lib.rs",
    "engine-libtorch/src/lib.rs",
    "src/lib.rs",
    "src/main.rs",
];

#[test]
fn no_crate_has_a_module_cycle() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut report = Vec::new();
    for root in CRATE_ROOTS {
        let tree = CrateTree::read(&workspace.join(root));
        assert!(!tree.files.is_empty(), "{root}: no files");
        for (parent, graph) in tree.graphs() {
            let at = if parent.is_empty() { "the crate root".to_string() } else { parent.join("::") };
            let edge = |a: &String, b: &String| {
                let (file, line) = &graph.evidence[&(a.clone(), b.clone())];
                let file = file.strip_prefix(workspace).unwrap_or(file);
                format!("{a} -> {b} ({}:{line})", file.display())
            };
            for component in components(&graph.edges) {
                let cycle = cycle_in(&graph.edges, &component);
                let steps: Vec<String> = cycle.windows(2).map(|w| edge(&w[0], &w[1])).collect();
                // every edge among the modules that reach each other: what there is to cut
                let inside: Vec<String> = component
                    .iter()
                    .flat_map(|a| graph.edges[a].iter().filter(|b| component.contains(*b)).map(move |b| (a, b)))
                    .map(|(a, b)| edge(a, b))
                    .collect();
                report.push(format!(
                    "{root}, modules under {at}: {}\n  all edges among {:?}: {}",
                    steps.join(", "),
                    component,
                    inside.join(", ")
                ));
            }
        }
    }
    assert!(report.is_empty(), "module cycles:\n{}", report.join("\n"));
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    // a -> b -> c -> a, and d -> a (not on it); e <-> f, a second one
    let g = graph(&[("a", "b"), ("b", "c"), ("c", "a"), ("d", "a"), ("e", "f"), ("f", "e"), ("c", "g")]);
    let found = cycles(&g);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0], ["a", "b", "c", "a"]);
    assert_eq!(found[1], ["e", "f", "e"]);
    // no cycle: a diamond
    assert!(cycles(&graph(&[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])).is_empty());
}

#[test]
fn the_reader_sees_every_kind_of_reference() {
    let src = r#"
        use crate::dsp::{Dsp, HOP};
        use crate::{noise::NoiseSource, kernels};
        use super::sibling::Thing;
        // use crate::in_a_comment;
        /* use crate::in_a_block /* nested */ comment; */
        const S: &str = "crate::in_a_string";
        const R: &str = r"crate::in_a_raw_string";
        fn f<'a>(x: &'a u8) -> char { let _ = crate::cpu::level(); '"' }
        fn g() { $crate::macros::m(); }
        mod inline {
            use super::super::up;
        }
    "#;
    let here: ModPath = vec!["hibari".into(), "int8".into()];
    let refs = references(&strip(src), &here);
    let named: Vec<String> = refs.iter().map(|(p, _)| p.join("::")).collect();
    assert_eq!(
        named,
        [
            "dsp::Dsp",
            "dsp::HOP",
            "noise::NoiseSource",
            "kernels",
            "hibari::sibling::Thing",
            "cpu::level",
            "macros::m",
            // `super::super` inside `mod inline` of hibari::int8: hibari
            "hibari::up",
        ]
    );
}

/// A crate's module files.
struct CrateTree {
    /// Each module file and its module path.
    files: Vec<(PathBuf, ModPath)>,
    /// Each module's child modules.
    children: BTreeMap<ModPath, BTreeSet<String>>,
    /// Names a module re-exports (`pub use child::...::name`), with the child they come from.
    reexports: BTreeMap<ModPath, BTreeMap<String, String>>,
}

/// The graph among one module's children.
#[derive(Default)]
struct Graph {
    edges: BTreeMap<String, BTreeSet<String>>,
    evidence: BTreeMap<(String, String), Evidence>,
}

impl CrateTree {
    fn read(root: &Path) -> CrateTree {
        let mut tree = CrateTree { files: Vec::new(), children: BTreeMap::new(), reexports: BTreeMap::new() };
        tree.visit(root, Vec::new(), true);
        tree
    }

    /// Reads module `path` from `file`; `owns_dir`: a crate root or `mod.rs`, whose children's
    /// files are beside it (otherwise in a directory named after it).
    fn visit(&mut self, file: &Path, path: ModPath, owns_dir: bool) {
        let source = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let code = strip(&source);
        let dir = file.parent().expect("a file's directory");
        let child_dir = if owns_dir { dir.to_path_buf() } else { dir.join(file.file_stem().expect("a file name")) };
        self.children.entry(path.clone()).or_default();
        let mut exports = BTreeMap::new();
        for decl in declarations(&source, &code) {
            match decl {
                Declaration::Mod { name, path_attr } => {
                    let (child_file, owns) = match path_attr {
                        // (relative to this file's directory, whatever kind of file it is)
                        Some(p) => (dir.join(&p), p.ends_with("mod.rs")),
                        None => {
                            let flat = child_dir.join(format!("{name}.rs"));
                            if flat.exists() {
                                (flat, false)
                            } else {
                                (child_dir.join(&name).join("mod.rs"), true)
                            }
                        }
                    };
                    let mut child = path.clone();
                    child.push(name.clone());
                    self.children.entry(path.clone()).or_default().insert(name);
                    self.visit(&child_file, child, owns);
                }
                Declaration::PubUse { first, leaves } => {
                    for leaf in leaves {
                        exports.insert(leaf, first.clone());
                    }
                }
            }
        }
        // (only re-exports from a child count: `pub use tch::Tensor` names no module of ours)
        let kids = &self.children[&path];
        exports.retain(|_, first| kids.contains(first));
        self.reexports.insert(path.clone(), exports);
        self.files.push((file.to_path_buf(), path));
    }

    /// The graph among the children of every module that has any.
    fn graphs(&self) -> BTreeMap<ModPath, Graph> {
        let mut graphs: BTreeMap<ModPath, Graph> = BTreeMap::new();
        for (parent, kids) in &self.children {
            if kids.is_empty() {
                continue;
            }
            let graph = graphs.entry(parent.clone()).or_default();
            for kid in kids {
                graph.edges.entry(kid.clone()).or_default();
            }
        }
        for (file, module) in &self.files {
            let source = fs::read_to_string(file).expect("read before");
            let code = strip(&source);
            for (target, offset) in references(&code, module) {
                let line = code[..offset].matches('\n').count() + 1;
                // every ancestor of `module` that is also an ancestor of `target` (below it, the two
                // are in different children)
                for depth in 0..module.len() {
                    let parent = &module[..depth];
                    if target.len() <= depth || target[..depth] != *parent {
                        break;
                    }
                    let from = &module[depth];
                    let kids = &self.children[parent];
                    let to = if kids.contains(&target[depth]) {
                        target[depth].clone()
                    } else if let Some(child) = self.reexports[parent].get(&target[depth]) {
                        child.clone()
                    } else {
                        // something the parent defines itself, or a glob of its names
                        break;
                    };
                    if to == *from {
                        continue;
                    }
                    let graph = graphs.get_mut(parent).expect("a parent with children");
                    graph.edges.entry(from.clone()).or_default().insert(to.clone());
                    graph.evidence.entry((from.clone(), to)).or_insert((file.clone(), line));
                    break;
                }
            }
        }
        graphs
    }
}

/// One cycle (first node repeated at the end) per strongly connected component of more than one
/// node, in the order of their smallest nodes; empty when the graph has none.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    components(graph).iter().map(|c| cycle_in(graph, c)).collect()
}

/// The strongly connected components of more than one node (modules that each reach the
/// others), in the order of their smallest nodes.
fn components(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    // Tarjan's algorithm
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        components: Vec<BTreeSet<&'g str>>,
    }
    fn connect<'g>(s: &mut State<'g>, v: &'g str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                connect(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.insert(w);
                if w == v {
                    break;
                }
            }
            s.components.push(component);
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            connect(&mut s, v);
        }
    }
    let mut components: Vec<BTreeSet<String>> =
        s.components.into_iter().filter(|c| c.len() > 1).map(|c| c.into_iter().map(str::to_string).collect()).collect();
    components.sort();
    components
}

/// A shortest cycle through the smallest node of `component` (a strongly connected component),
/// that node repeated at the end.
fn cycle_in(graph: &BTreeMap<String, BTreeSet<String>>, component: &BTreeSet<String>) -> Vec<String> {
    // breadth-first search inside the component, back to its smallest node
    let start = component.iter().next().expect("not empty").as_str();
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    'search: while let Some(v) = queue.pop_front() {
        for w in graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !component.contains(w) {
                continue;
            }
            if w == start {
                came_from.insert(start, v);
                break 'search;
            }
            if let std::collections::btree_map::Entry::Vacant(e) = came_from.entry(w) {
                e.insert(v);
                queue.push_back(w);
            }
        }
    }
    let mut cycle = vec![start.to_string()];
    let mut v = came_from[start];
    while v != start {
        cycle.push(v.to_string());
        v = came_from[v];
    }
    cycle.push(start.to_string());
    let n = cycle.len();
    cycle[1..n - 1].reverse();
    cycle
}

/// `source` with comments, string literals and char literals blanked out (newlines kept, and a
/// space per byte, so that offsets and lines stay those of the file).
fn strip(source: &str) -> String {
    let s: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let blank = |out: &mut String, c: char| {
        if c == '\n' {
            out.push('\n');
        } else {
            out.extend(std::iter::repeat_n(' ', c.len_utf8()));
        }
    };
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                blank(&mut out, s[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, s[i]);
                    i += 1;
                }
            }
        } else if (c == 'r' || c == 'b') && !prev_is_ident(&s, i) && raw_string_start(&s, i).is_some() {
            let (open_len, hashes) = raw_string_start(&s, i).expect("checked");
            for &c in &s[i..i + open_len] {
                blank(&mut out, c);
            }
            i += open_len;
            // up to the closing quote and as many #
            while i < s.len() {
                if s[i] == '"' && s[i + 1..].iter().take(hashes).filter(|&&c| c == '#').count() == hashes {
                    for _ in 0..=hashes {
                        out.push(' ');
                    }
                    i += 1 + hashes;
                    break;
                }
                blank(&mut out, s[i]);
                i += 1;
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < s.len() && s[i] != '"' {
                if s[i] == '\\' {
                    blank(&mut out, s[i]);
                    i += 1;
                }
                if i < s.len() {
                    blank(&mut out, s[i]);
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // a char literal ('x', '\n', '\u{..}'), or a lifetime (left as it is)
            let end = if next == Some('\\') {
                s.get(i + 3..).and_then(|rest| rest.iter().position(|&c| c == '\'')).map(|p| i + 3 + p)
            } else if s.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    for &c in &s[i..=end] {
                        blank(&mut out, c);
                    }
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_is_ident(s: &[char], i: usize) -> bool {
    i > 0 && (s[i - 1].is_alphanumeric() || s[i - 1] == '_')
}

/// At `r"`, `r#"`, `br"`...: the opening's length and the number of `#`.
fn raw_string_start(s: &[char], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if s[j] == 'b' {
        j += 1;
    }
    if s.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = s[j..].iter().take_while(|&&c| c == '#').count();
    j += hashes;
    (s.get(j) == Some(&'"')).then_some((j + 1 - i, hashes))
}

/// Identifier-ish tokens of stripped code with their byte offsets: words (with a leading `$`
/// kept), `::`, and single punctuation characters.
fn tokens(code: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80 {
            let start = i;
            i += 1;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] >= 0x80) {
                i += 1;
            }
            out.push((start, &code[start..i]));
        } else if c == b':' && bytes.get(i + 1) == Some(&b':') {
            out.push((i, "::"));
            i += 2;
        } else {
            out.push((i, &code[i..i + 1]));
            i += 1;
        }
    }
    out
}

/// Every path in `code` (of module `here`) that starts with `crate`, `$crate`, `super` or
/// `self` and names something below that, resolved from the crate root, with its offset; `use`
/// trees give one path per leaf. Inline `mod x { ... }` blocks move `super` and `self` with them.
fn references(code: &str, here: &ModPath) -> Vec<(ModPath, usize)> {
    let toks = tokens(code);
    let mut out = Vec::new();
    // inline modules: (name, brace depth inside them)
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i].1;
        match t {
            "{" => {
                depth += 1;
                i += 1;
                continue;
            }
            "}" => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
                continue;
            }
            "mod" if toks.get(i + 2).is_some_and(|t| t.1 == "{") => {
                inline.push((toks[i + 1].1.trim_start_matches('$').to_string(), depth + 1));
                i += 1;
                continue;
            }
            _ => {}
        }
        let starts_path = matches!(t, "crate" | "$crate" | "super" | "self")
            && toks.get(i + 1).is_some_and(|t| t.1 == "::")
            && (i == 0 || toks[i - 1].1 != "::");
        if !starts_path {
            i += 1;
            continue;
        }
        let mut module: ModPath = here.clone();
        module.extend(inline.iter().map(|(n, _)| n.clone()));
        let (mut base, mut j) = (Vec::new(), i);
        // the prefix: crate | (self|super)(::super)*
        loop {
            match toks[j].1 {
                "crate" | "$crate" => base.clear(),
                "self" if j == i => base = module.clone(),
                "super" => {
                    if j == i {
                        base = module.clone();
                    }
                    base.pop();
                }
                _ => break,
            }
            if toks.get(j + 1).is_some_and(|t| t.1 == "::") {
                j += 2;
            } else {
                break;
            }
        }
        let offset = toks[i].0;
        let mut leaves = Vec::new();
        j = use_tree(&toks, j, base, &mut leaves);
        out.extend(leaves.into_iter().map(|p| (p, offset)));
        i = j.max(i + 1);
    }
    out
}

/// Reads a path (or use tree) from token `j` on, appending it to `prefix`; pushes each leaf's
/// full path (a `*` or `self` leaf: the path before it); returns the index after it.
fn use_tree(toks: &[(usize, &str)], mut j: usize, mut prefix: ModPath, leaves: &mut Vec<ModPath>) -> usize {
    loop {
        match toks.get(j).map(|t| t.1) {
            Some("{") => {
                j += 1;
                loop {
                    match toks.get(j).map(|t| t.1) {
                        Some("}") => return j + 1,
                        Some(",") => j += 1,
                        None => return j,
                        _ => j = use_tree(toks, j, prefix.clone(), leaves),
                    }
                }
            }
            Some("*") | Some("self") => {
                leaves.push(prefix);
                return j + 1;
            }
            Some(w) if is_ident(w) => {
                prefix.push(w.to_string());
                if toks.get(j + 1).is_some_and(|t| t.1 == "::") {
                    j += 2;
                } else {
                    // (`as alias` is left to the caller's scan: it names nothing of ours)
                    leaves.push(prefix);
                    return j + 1;
                }
            }
            _ => {
                if !prefix.is_empty() {
                    leaves.push(prefix);
                }
                return j;
            }
        }
    }
}

fn is_ident(w: &str) -> bool {
    w.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
}

enum Declaration {
    /// `mod name;`, with its `#[path = "..."]`.
    Mod { name: String, path_attr: Option<String> },
    /// `pub use first::...::{leaves}` (or `pub(crate) use`, `pub use self::first::...`): the
    /// names it re-exports (aliases where given).
    PubUse { first: String, leaves: Vec<String> },
}

/// The file-level `mod x;` declarations and `pub use` re-exports of a module's file (`code`
/// stripped; `source` for the `#[path]` strings, which stripping blanks).
fn declarations(source: &str, code: &str) -> Vec<Declaration> {
    let toks = tokens(code);
    let mut out = Vec::new();
    let mut depth = 0usize;
    for (i, &(offset, t)) in toks.iter().enumerate() {
        match t {
            "{" => depth += 1,
            "}" => depth = depth.saturating_sub(1),
            "mod" if depth == 0 && toks.get(i + 2).is_some_and(|t| t.1 == ";") => {
                let name = toks[i + 1].1.to_string();
                // `#[path = "x"]` just before (among the attributes since the last item)
                let before = &source[..offset];
                let item_start = before.rfind([';', '}']).map_or(0, |p| p + 1);
                let path_attr = before[item_start..].find("#[path").map(|p| {
                    let attr = &before[item_start + p..];
                    let q = attr.find('"').expect("#[path = \"...\"]") + 1;
                    attr[q..q + attr[q..].find('"').expect("closing quote")].to_string()
                });
                out.push(Declaration::Mod { name, path_attr });
            }
            "use" if depth == 0 && i > 0 && is_pub(&toks, i) => {
                let mut leaves = Vec::new();
                let mut j = i + 1;
                let relative = toks[j].1 == "self" && toks.get(j + 1).is_some_and(|t| t.1 == "::");
                if relative || toks[j].1 == "crate" {
                    j += 2;
                }
                use_tree(&toks, j, Vec::new(), &mut leaves);
                // aliases: `x as y` re-exports y
                let mut k = j;
                let mut aliases = Vec::new();
                while k < toks.len() && toks[k].1 != ";" {
                    if toks[k].1 == "as" {
                        aliases.push((toks[k - 1].1.to_string(), toks[k + 1].1.to_string()));
                    }
                    k += 1;
                }
                for leaf in leaves {
                    let Some(first) = leaf.first().cloned() else { continue };
                    let mut name = leaf.last().cloned().expect("not empty");
                    if let Some((_, alias)) = aliases.iter().find(|(orig, _)| *orig == name) {
                        name = alias.clone();
                    }
                    out.push(Declaration::PubUse { first, leaves: vec![name] });
                }
            }
            _ => {}
        }
    }
    out
}

/// Whether the `use` at `i` is `pub use` or `pub(...) use`.
fn is_pub(toks: &[(usize, &str)], i: usize) -> bool {
    toks[i - 1].1 == "pub" || (toks[i - 1].1 == ")" && i >= 4 && toks[i - 3].1 == "(" && toks[i - 4].1 == "pub")
}
