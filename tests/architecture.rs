//! The import rules of ARCHITECTURE.md, checked on the source: which top-level modules each
//! module may use, and that library code never prints.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Modules every module may use: the error type, guarded file access, enum naming, categories,
/// number formatting, the seeded generator.
const BASE: &[&str] = &[
    "error", "Error", "Result", "files", "names", "category", "units", "bundle", "rng",
];

/// (module, the other top-level modules it may import besides BASE).
const ALLOWED: &[(&str, &[&str])] = &[
    // The floor, bottom up (its modules import only the floor modules listed here): the trace
    // and plot error kinds are defined below `error`, so it wraps them without importing up.
    ("bundle", &[]),
    ("units", &["bundle"]),
    ("error", &["units", "Error", "Result"]),
    ("files", &["error", "units", "Error", "Result"]),
    ("names", &["error", "units", "Error", "Result"]),
    ("category", &[]),
    ("rng", &[]),
    ("scenario", &[]),
    ("workload", &["scenario"]),
    ("measurements", &["scenario", "workload"]),
    ("cost", &["scenario", "workload", "measurements"]),
    ("trace", &[]),
    ("accounting", &["trace", "scenario"]), // scenario: one checked against what a trace shows
    ("sim", &["scenario", "workload", "cost", "accounting"]),
    (
        "calibrate",
        &[
            "scenario",
            "workload",
            "measurements",
            "cost",
            "sim",
            "accounting",
            "trace",
            "whatif", // a speculative-decoding benchmark point is priced as `whatif spec-decode` prices it
        ],
    ),
    (
        "capacity",
        &[
            "scenario",
            "workload",
            "measurements",
            "cost",
            "sim",
            "accounting",
        ],
    ),
    (
        "whatif",
        &[
            "scenario",
            "workload",
            "measurements",
            "cost",
            "sim",
            "accounting",
        ],
    ),
    (
        "validate",
        &[
            "scenario",
            "workload",
            "measurements",
            "cost",
            "sim",
            "accounting",
            "trace",
            "calibrate",
            "whatif",
        ],
    ),
    (
        "report",
        &[
            "scenario",
            "workload",
            "measurements",
            "cost",
            "sim",
            "accounting",
            "trace",
            "calibrate",
            "validate",
            "capacity",
            "whatif",
        ],
    ),
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file under src/ belongs to.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Source text without comments, so doc links do not count as imports.
fn code_only(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn imports(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

#[test]
fn modules_import_only_what_architecture_md_allows() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 30, "src/ looks empty: {} files", files.len());
    let mut violations = Vec::new();
    for f in &files {
        let module = module_of(&src, f);
        if matches!(module.as_str(), "lib" | "main" | "cli") {
            continue;
        }
        let Some((_, allowed)) = ALLOWED.iter().find(|(m, _)| *m == module) else {
            violations.push(format!(
                "{}: module '{module}' has no import rule in tests/architecture.rs and ARCHITECTURE.md",
                f.display()
            ));
            continue;
        };
        // floor modules import only what their own rule lists; the others any floor module
        let floor = BASE.contains(&module.as_str());
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        for dep in imports(&code) {
            if dep == module
                || (!floor && BASE.contains(&dep.as_str()))
                || allowed.contains(&dep.as_str())
            {
                continue;
            }
            violations.push(format!("{}: '{module}' imports '{dep}'", f.display()));
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn the_import_rules_are_acyclic() {
    // module → what it may import (the floor for every module above it)
    let floor = [
        "bundle", "units", "error", "files", "names", "category", "rng",
    ];
    let graph: std::collections::BTreeMap<PathBuf, BTreeSet<PathBuf>> = ALLOWED
        .iter()
        .map(|(m, allowed)| {
            let mut deps: BTreeSet<PathBuf> = allowed
                .iter()
                .filter(|d| !matches!(**d, "Error" | "Result"))
                .map(PathBuf::from)
                .collect();
            if !floor.contains(m) {
                deps.extend(floor.iter().map(PathBuf::from));
            }
            (PathBuf::from(m), deps)
        })
        .collect();
    assert_eq!(cycles(&graph), Vec::<Vec<PathBuf>>::new());
}

#[test]
fn nothing_imports_the_cli_and_library_code_never_prints() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
    for f in &files {
        let module = module_of(&src, f);
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        if module != "cli" && module != "main" && imports(&code).contains("cli") {
            violations.push(format!("{}: imports the CLI", f.display()));
        }
        if module == "main" {
            continue;
        }
        for bad in ["println!", "eprintln!", "print!(", "eprint!(", "dbg!("] {
            if code.contains(bad) {
                violations.push(format!("{}: uses {bad}", f.display()));
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// File-level imports: every `crate::a::b` path (use trees with braces included), every
// `super::`/`self::` path and every `use child::` of a declared `mod child` resolved to the
// source file it names. The crate root (lib.rs) is a façade of re-exports and main.rs is the
// binary; both are left out of the graph.

/// The module path of a file: src/a/b.rs and src/a/b/mod.rs → [a, b]; src/lib.rs → [].
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

fn ident(s: &str) -> (&str, &str) {
    let n = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    (&s[..n], &s[n..])
}

/// The paths of a use tree starting at `rest` (just after `crate::`), e.g.
/// `a::{b, c::{d, e}}, f` → [a, b], [a, c, d], [a, c, e]. Stops at the end of the tree.
fn use_tree(rest: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    let mut i = 0;
    loop {
        let s = &rest[i..];
        let trimmed = s.trim_start();
        i += s.len() - trimmed.len();
        if let Some(inner) = trimmed.strip_prefix('{') {
            i += 1;
            let mut j = 0;
            loop {
                j += use_tree(&inner[j..], &path, out);
                let t = &inner[j..];
                let tt = t.trim_start();
                j += t.len() - tt.len();
                if tt.starts_with(',') {
                    j += 1;
                } else {
                    if tt.starts_with('}') {
                        j += 1;
                    }
                    break;
                }
                if inner[j..].trim_start().starts_with('}') {
                    j += inner[j..].len() - inner[j..].trim_start().len() + 1;
                    break;
                }
            }
            return i + j;
        }
        let (name, after) = ident(trimmed);
        if name.is_empty() {
            break;
        }
        i += name.len();
        if name != "self" {
            path.push(name.to_string());
        }
        if after.starts_with("::") {
            i += 2;
        } else {
            break;
        }
    }
    if path.len() > prefix.len() || !prefix.is_empty() {
        out.push(path);
    }
    i
}

/// The source file a module path names: the longest prefix that is a file.
fn resolve(src: &Path, path: &[String]) -> Option<PathBuf> {
    for k in (1..=path.len()).rev() {
        let dir: PathBuf = path[..k].iter().collect();
        let file = src.join(&dir).with_extension("rs");
        if file.is_file() {
            return Some(file);
        }
        let m = src.join(&dir).join("mod.rs");
        if m.is_file() {
            return Some(m);
        }
    }
    None
}

/// The files `file` imports (itself excluded).
fn file_imports(src: &Path, file: &Path) -> BTreeSet<PathBuf> {
    let code = code_only(&std::fs::read_to_string(file).unwrap());
    let here = module_path(src, file);
    // `mod x;` declared here: `use x::...` is relative to this module.
    let mut children = BTreeSet::new();
    for l in code.lines() {
        let l = l.trim_start();
        let l = ["pub ", "pub(crate) ", "pub(super) "]
            .iter()
            .find_map(|v| l.strip_prefix(v))
            .unwrap_or(l);
        if let Some(r) = l.strip_prefix("mod ") {
            let (name, after) = ident(r);
            if after.trim_start().starts_with(';') {
                children.insert(name.to_string());
            }
        }
    }
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if !boundary {
            i += code[i..].chars().next().map_or(1, char::len_utf8);
            continue;
        }
        let rest = &code[i..];
        let (word, after) = ident(rest);
        if word.is_empty() {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        }
        let base: Option<Vec<String>> = if !after.starts_with("::") {
            None
        } else if word == "crate" {
            Some(Vec::new())
        } else if word == "super" {
            let mut p = here.clone();
            p.pop();
            Some(p)
        } else if word == "self" {
            Some(here.clone())
        } else if children.contains(word) && !code[..i].trim_end().ends_with("::") {
            // a child module named by its bare name; file.rs's children live in file/
            let mut p = here.clone();
            p.push(word.to_string());
            Some(p)
        } else {
            None
        };
        match base {
            Some(mut base) => {
                let mut start = i + word.len() + 2;
                // super::super::
                while word == "super" && code[start..].starts_with("super::") {
                    base.pop();
                    start += "super::".len();
                }
                let used = use_tree(&code[start..], &base, &mut paths);
                if paths.last().is_some_and(|p| p.is_empty()) {
                    paths.pop();
                }
                i = start + used.max(1);
            }
            None => i += word.len(),
        }
    }
    paths
        .iter()
        .filter_map(|p| resolve(src, p))
        .filter(|f| f != file)
        .collect()
}

/// The strongly connected components of a graph with more than one node (Tarjan).
fn cycles(graph: &std::collections::BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct T<'g> {
        g: &'g std::collections::BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: std::collections::BTreeMap<&'g PathBuf, (usize, usize)>,
        stack: Vec<&'g PathBuf>,
        on: BTreeSet<&'g PathBuf>,
        next: usize,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'g>(t: &mut T<'g>, v: &'g PathBuf) {
        t.index.insert(v, (t.next, t.next));
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            let Some((w, _)) = t.g.get_key_value(w) else {
                continue;
            };
            if !t.index.contains_key(w) {
                visit(t, w);
                let low = t.index[v].1.min(t.index[w].1);
                t.index.get_mut(v).unwrap().1 = low;
            } else if t.on.contains(w) {
                let low = t.index[v].1.min(t.index[w].0);
                t.index.get_mut(v).unwrap().1 = low;
            }
        }
        if t.index[v].0 == t.index[v].1 {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.clone());
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
        g: graph,
        index: Default::default(),
        stack: Vec::new(),
        on: Default::default(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn file_graph(src: &Path) -> std::collections::BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let facade = [src.join("lib.rs"), src.join("main.rs")];
    files
        .iter()
        .filter(|f| !facade.contains(f))
        .map(|f| {
            let deps = file_imports(src, f)
                .into_iter()
                .filter(|d| !facade.contains(d))
                .collect();
            (f.clone(), deps)
        })
        .collect()
}

#[test]
fn the_import_parser_sees_use_trees_and_relative_paths() {
    let mut out = Vec::new();
    use_tree("a::{b, c::{d, e}}, f", &[], &mut out);
    assert_eq!(
        out,
        vec![
            vec!["a".to_string(), "b".into()],
            vec!["a".into(), "c".into(), "d".into()],
            vec!["a".into(), "c".into(), "e".into()],
        ]
    );
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // accounting/summary/mod.rs reads traces through the trace reader's parse module
    let deps = file_imports(&src, &src.join("accounting/summary/mod.rs"));
    assert!(deps.contains(&src.join("trace/parse/mod.rs")), "{deps:?}");
    // error.rs names its submodules by their bare names
    let deps = file_imports(&src, &src.join("error.rs"));
    assert!(deps.contains(&src.join("error/trace.rs")), "{deps:?}");
    // a three-file cycle across two modules is found
    let p = |s: &str| PathBuf::from(s);
    let g = [
        (p("a/x.rs"), [p("b/y.rs")].into_iter().collect()),
        (p("b/y.rs"), [p("b/z.rs")].into_iter().collect()),
        (p("b/z.rs"), [p("a/x.rs")].into_iter().collect()),
        (p("c.rs"), [p("a/x.rs")].into_iter().collect()),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        cycles(&g),
        vec![vec![p("a/x.rs"), p("b/y.rs"), p("b/z.rs")]]
    );
}

#[test]
fn no_import_cycle_crosses_a_module_boundary() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = file_graph(&src);
    assert!(graph.len() > 30, "src/ looks empty");
    let mut bad = Vec::new();
    for comp in cycles(&graph) {
        let modules: BTreeSet<String> = comp.iter().map(|f| module_of(&src, f)).collect();
        if modules.len() > 1 {
            let names: Vec<String> = comp
                .iter()
                .map(|f| f.strip_prefix(&src).unwrap().display().to_string())
                .collect();
            bad.push(format!(
                "files importing each other across modules: {}",
                names.join(", ")
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_module_graph_is_acyclic() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules: std::collections::BTreeMap<PathBuf, BTreeSet<PathBuf>> = Default::default();
    for (f, deps) in file_graph(&src) {
        let m = PathBuf::from(module_of(&src, &f));
        let entry = modules.entry(m.clone()).or_default();
        for d in deps {
            let dm = PathBuf::from(module_of(&src, &d));
            if dm != m {
                entry.insert(dm);
            }
        }
    }
    assert!(modules.len() > 15, "{modules:?}");
    let found = cycles(&modules);
    assert!(
        found.is_empty(),
        "top-level modules importing each other (ARCHITECTURE.md's floors must be acyclic): {found:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The map: every source file appears in ARCHITECTURE.md's module table.

/// The module table's rows: module name (without backticks or a trailing slash) → the row.
fn map_rows(doc: &str) -> Vec<(String, String)> {
    let table = doc
        .split("## Modules")
        .nth(1)
        .expect("ARCHITECTURE.md has a '## Modules' section")
        .split("\n## ")
        .next()
        .unwrap();
    table
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').collect();
            if cells.len() < 3 {
                return None;
            }
            let name = cells[1].trim();
            let name = name
                .split_whitespace()
                .next()?
                .trim_matches('`')
                .trim_end_matches('/');
            Some((name.to_string(), cells[2..].join("|")))
        })
        .collect()
}

#[test]
fn every_source_file_is_on_the_map() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let rows = map_rows(&doc);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut missing = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let shown = rel.display().to_string();
        if doc.contains(&format!("src/{shown}")) || doc.contains(&format!("`{shown}`")) {
            continue;
        }
        if matches!(shown.as_str(), "lib.rs" | "main.rs") {
            missing.push(format!("src/{shown}: not named in ARCHITECTURE.md"));
            continue;
        }
        let module = module_of(&src, f);
        let Some((_, row)) = rows.iter().find(|(m, _)| *m == module) else {
            missing.push(format!(
                "src/{shown}: module '{module}' has no row in the module table"
            ));
            continue;
        };
        // src/a/mod.rs and src/a.rs are the module itself; deeper files are named in its row:
        // src/a/b.rs as `b`, src/a/b/c.rs as `b` and `c`.
        let parts: Vec<String> = rel
            .components()
            .skip(1)
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_string()
            })
            .filter(|p| p != "mod")
            .collect();
        for p in &parts {
            let named = row.contains(&format!("`{p}`"))
                || row.contains(&format!("`{p}/`"))
                || row.contains(&format!("`{p}` "));
            if !named {
                missing.push(format!(
                    "src/{shown}: `{p}` is not named in the '{module}' row of ARCHITECTURE.md's module table"
                ));
                break;
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
