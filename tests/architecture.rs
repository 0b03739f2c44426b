//! The import rules of ARCHITECTURE.md, checked on the source: which top-level modules each
//! module may use, and that library code never prints.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Modules every module may use: the error type, guarded file access, enum naming, categories,
/// number formatting.
const BASE: &[&str] = &[
    "error", "Error", "Result", "files", "names", "category", "units", "bundle",
];

/// (module, the other top-level modules it may import besides BASE).
const ALLOWED: &[(&str, &[&str])] = &[
    ("error", &[]), // the ground floor: the trace and plot error kinds are defined below it
    ("files", &[]),
    ("units", &[]),
    ("bundle", &[]),
    ("names", &[]),
    ("category", &["accounting"]), // doc links only
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
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        for dep in imports(&code) {
            if dep == module || BASE.contains(&dep.as_str()) || allowed.contains(&dep.as_str()) {
                continue;
            }
            violations.push(format!("{}: '{module}' imports '{dep}'", f.display()));
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
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
