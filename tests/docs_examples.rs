//! Every example with output in README.md and docs/*.md is run, so no figure in the guide can go
//! stale. The convention (docs/examples.md):
//!
//! ````text
//! ```console
//! $ decodesim simulate --batch 8
//! expected output, line by line
//! ...
//! ```
//! ````
//!
//! In a ```` ```console ```` block every line starting with `$ ` is a command, run by bash in a
//! scratch folder per page (commands of one page share it, so a file written by one example is
//! read by the next) where `data/`, `models/`, `tests/`, `docs/`, `notebooks/` and `harness/` of
//! the source tree are linked, with the binary under test first on `PATH`. The lines up to the
//! next command are its expected standard output followed by its standard error, then
//! `[exit N]` when it exits with N ≠ 0. In expected lines `[..]` matches any text within the
//! line and a line `...` any number of lines, for what is volatile (timings, dates) or too long
//! to show. Commands that need a GPU or data outside the tree go in ```` ```sh ```` blocks,
//! without output.
//!
//! `DECODESIM_BLESS=1 cargo test --test docs_examples` rewrites the expected outputs that no
//! longer match, keeping the expected lines that still match (their `[..]` included) and the
//! `...` elisions around them.

#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Folders of the source tree an example may name by a relative path.
const LINKED: [&str; 6] = ["data", "models", "tests", "docs", "notebooks", "harness"];

/// One `$ command` and the output lines that follow it in its block.
#[derive(Debug)]
struct Example {
    /// 1-based line of the `$ ` line in the page.
    line: usize,
    command: String,
    /// Index range of the expected lines in the page's lines.
    expected: std::ops::Range<usize>,
}

fn pages() -> Vec<PathBuf> {
    let mut pages = vec![Path::new(ROOT).join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .expect("docs/ folder")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    // DECODESIM_DOCS=calibrate checks only the pages whose name contains it.
    if let Some(only) = std::env::var_os("DECODESIM_DOCS") {
        let only = only.to_string_lossy().to_string();
        pages.retain(|p| p.file_name().unwrap().to_string_lossy().contains(&only));
    }
    pages
}

/// The examples of a page, or a message naming the line where the convention is broken.
fn parse(page: &str, lines: &[&str]) -> Result<Vec<Example>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_end() != "```console" {
            i += 1;
            continue;
        }
        let open = i;
        i += 1;
        let mut current: Option<Example> = None;
        loop {
            let Some(l) = lines.get(i) else {
                return Err(format!(
                    "{page}:{}: ```console block never closed",
                    open + 1
                ));
            };
            if l.trim_end() == "```" {
                break;
            }
            if let Some(cmd) = l.strip_prefix("$ ") {
                out.extend(current.take());
                current = Some(Example {
                    line: i + 1,
                    command: cmd.to_string(),
                    expected: i + 1..i + 1,
                });
            } else {
                match current.as_mut() {
                    Some(e) => e.expected.end = i + 1,
                    None => {
                        return Err(format!(
                            "{page}:{}: a ```console block must start with a `$ ` command line",
                            i + 1
                        ))
                    }
                }
            }
            i += 1;
        }
        out.extend(current.take());
        i += 1;
    }
    Ok(out)
}

/// Whether one expected line matches one actual line: `[..]` matches any text.
fn line_matches(expected: &str, actual: &str) -> bool {
    let parts: Vec<&str> = expected.split("[..]").collect();
    if parts.len() == 1 {
        return expected == actual;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !actual.starts_with(first) || actual.len() < first.len() + last.len() {
        return false;
    }
    if !actual.ends_with(last) {
        return false;
    }
    let mut rest = &actual[first.len()..actual.len() - last.len()];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(k) => rest = &rest[k + p.len()..],
            None => return false,
        }
    }
    true
}

fn is_elision(l: &str) -> bool {
    l == "..."
}

/// Whether the expected lines (with `...` elisions) match the actual lines.
fn matches(expected: &[String], actual: &[String]) -> bool {
    let (n, m) = (expected.len(), actual.len());
    // ok[i][j]: expected[i..] matches actual[j..].
    let mut ok = vec![vec![false; m + 1]; n + 1];
    ok[n][m] = true;
    for i in (0..n).rev() {
        for j in (0..=m).rev() {
            ok[i][j] = if is_elision(&expected[i]) {
                ok[i + 1][j] || (j < m && ok[i][j + 1])
            } else {
                j < m && line_matches(&expected[i], &actual[j]) && ok[i + 1][j + 1]
            };
        }
    }
    ok[0][0]
}

/// The longest common subsequence of the expected (non-elision) lines and the actual lines,
/// equality being [`line_matches`]: pairs (expected index, actual index), in order.
fn align(expected: &[String], actual: &[String]) -> Vec<(usize, usize)> {
    let (n, m) = (expected.len(), actual.len());
    let mut l = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            l[i][j] = if !is_elision(&expected[i]) && line_matches(&expected[i], &actual[j]) {
                l[i + 1][j + 1] + 1
            } else {
                l[i + 1][j].max(l[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut pairs) = (0, 0, Vec::new());
    while i < n && j < m {
        if !is_elision(&expected[i])
            && line_matches(&expected[i], &actual[j])
            && l[i][j] == l[i + 1][j + 1] + 1
        {
            pairs.push((i, j));
            i += 1;
            j += 1;
        } else if l[i + 1][j] >= l[i][j + 1] {
            i += 1;
        } else {
            j += 1;
        }
    }
    pairs
}

/// The expected text rewritten to the actual output: matched lines keep their expected form
/// (wildcards), actual lines where the expected text had an elision stay elided, the rest is
/// the actual output.
fn bless(expected: &[String], actual: &[String]) -> Vec<String> {
    let pairs = align(expected, actual);
    let mut out = Vec::new();
    let (mut ei, mut aj) = (0, 0);
    let gap = |e0: usize, e1: usize, a0: usize, a1: usize, out: &mut Vec<String>| {
        let gap = &expected[e0..e1];
        if let (Some(first), Some(last)) = (
            gap.iter().position(|l| is_elision(l)),
            gap.iter().rposition(|l| is_elision(l)),
        ) {
            // Lines shown before and after the elision stay shown, with their new text.
            let n = a1 - a0;
            let before = first.min(n);
            let after = (gap.len() - 1 - last).min(n - before);
            out.extend(actual[a0..a0 + before].iter().cloned());
            out.push("...".to_string());
            out.extend(actual[a1 - after..a1].iter().cloned());
        } else {
            out.extend(actual[a0..a1].iter().cloned());
        }
    };
    for &(e, a) in &pairs {
        gap(ei, e, aj, a, &mut out);
        out.push(expected[e].clone());
        ei = e + 1;
        aj = a + 1;
    }
    gap(ei, expected.len(), aj, actual.len(), &mut out);
    out
}

/// A readable diff: `-` expected, `+` actual, two lines of context around each change.
fn diff(expected: &[String], actual: &[String]) -> String {
    let pairs = align(expected, actual);
    let mut rows: Vec<(char, &str)> = Vec::new();
    let (mut ei, mut aj) = (0, 0);
    for &(e, a) in pairs
        .iter()
        .chain(std::iter::once(&(expected.len(), actual.len())))
    {
        for l in &expected[ei..e] {
            rows.push((if is_elision(l) { ' ' } else { '-' }, l));
        }
        for l in &actual[aj..a] {
            rows.push(('+', l));
        }
        if e < expected.len() {
            rows.push((' ', &expected[e]));
        }
        ei = e + 1;
        aj = a + 1;
    }
    let keep: Vec<bool> = (0..rows.len())
        .map(|i| {
            let lo = i.saturating_sub(2);
            let hi = (i + 3).min(rows.len());
            rows[lo..hi].iter().any(|r| r.0 != ' ')
        })
        .collect();
    let mut s = String::new();
    let mut skipped = false;
    for (i, (mark, l)) in rows.iter().enumerate() {
        if keep[i] {
            s.push_str(&format!("  {mark} {l}\n"));
            skipped = false;
        } else if !skipped {
            s.push_str("  ~\n");
            skipped = true;
        }
    }
    s
}

fn scratch(page: &Path) -> PathBuf {
    let name = page.file_stem().unwrap().to_string_lossy().to_string();
    let dir = std::env::temp_dir().join(format!("decodesim-docs-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for l in LINKED {
        std::os::unix::fs::symlink(Path::new(ROOT).join(l), dir.join(l)).unwrap();
    }
    dir
}

/// Runs one command as a reader would, in `dir`; standard output, then standard error, then
/// `[exit N]`, as lines with trailing blanks and trailing empty lines removed.
fn run(command: &str, dir: &Path) -> Vec<String> {
    let bin = Path::new(env!("CARGO_BIN_EXE_decodesim"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("PATH", path)
        .env("DECODESIM_HOME", ROOT)
        .env_remove("DECODESIM_NO_SOURCE_TREE")
        .env("NO_COLOR", "1")
        .output()
        .expect("bash runs");
    let mut text = String::from_utf8_lossy(&out.stdout).to_string();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    let text = text
        .replace(&dir.display().to_string(), "[CWD]")
        .replace(ROOT, "[ROOT]");
    let mut lines: Vec<String> = text.lines().map(|l| l.trim_end().to_string()).collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    match out.status.code() {
        Some(0) => {}
        Some(c) => lines.push(format!("[exit {c}]")),
        None => lines.push("[killed by a signal]".to_string()),
    }
    lines
}

/// Runs a page's examples; the failures as messages, and the page rewritten when blessing.
fn check_page(page: &Path, bless_mode: bool) -> (usize, Vec<String>) {
    let rel = page.strip_prefix(ROOT).unwrap().display().to_string();
    let text = std::fs::read_to_string(page).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let examples = match parse(&rel, &lines) {
        Ok(e) => e,
        Err(msg) => return (0, vec![msg]),
    };
    if examples.is_empty() {
        return (0, Vec::new());
    }
    let dir = scratch(page);
    let mut failures = Vec::new();
    let mut replacements: Vec<(std::ops::Range<usize>, Vec<String>)> = Vec::new();
    for ex in &examples {
        let expected: Vec<String> = lines[ex.expected.clone()]
            .iter()
            .map(|l| l.trim_end().to_string())
            .collect();
        let actual = run(&ex.command, &dir);
        if matches(&expected, &actual) {
            continue;
        }
        if bless_mode {
            replacements.push((ex.expected.clone(), bless(&expected, &actual)));
        } else {
            failures.push(format!(
                "{rel}:{}: `$ {}` printed something else (- expected, + actual; bless with DECODESIM_BLESS=1 cargo test --test docs_examples):\n{}",
                ex.line,
                ex.command,
                diff(&expected, &actual)
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if !replacements.is_empty() {
        let mut new: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        for (range, repl) in replacements.into_iter().rev() {
            new.splice(range, repl);
        }
        let mut s = new.join("\n");
        if text.ends_with('\n') {
            s.push('\n');
        }
        std::fs::write(page, s).unwrap();
    }
    (examples.len(), failures)
}

#[test]
fn every_example_in_the_guide_prints_what_the_guide_shows() {
    let bless_mode = std::env::var_os("DECODESIM_BLESS").is_some_and(|v| v == "1");
    let pages = pages();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.min(pages.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(page) = pages.get(i) else { break };
                let r = check_page(page, bless_mode);
                results.lock().unwrap().push(r);
            });
        }
    });
    let results = results.into_inner().unwrap();
    let total: usize = results.iter().map(|r| r.0).sum();
    let failures: Vec<String> = results.into_iter().flat_map(|r| r.1).collect();
    assert!(
        total >= 10 || std::env::var_os("DECODESIM_DOCS").is_some(),
        "only {total} executed examples found in README.md and docs/*.md"
    );
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    eprintln!("{total} examples checked");
}

/// Every image in docs/img is shown by a page, and its caption names the command that made it.
#[test]
fn every_image_is_referenced_with_the_command_that_made_it() {
    let texts: Vec<(PathBuf, String)> = pages()
        .into_iter()
        .map(|p| {
            let t = std::fs::read_to_string(&p).unwrap();
            (p, t)
        })
        .collect();
    let mut missing = Vec::new();
    for e in std::fs::read_dir(Path::new(ROOT).join("docs/img")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().to_string();
        // The image's line and the caption line after it.
        let shown = texts.iter().any(|(_, t)| {
            let lines: Vec<&str> = t.lines().collect();
            lines.iter().enumerate().any(|(i, l)| {
                l.starts_with("![")
                    && l.contains(&format!("img/{name})"))
                    && lines
                        .get(i + 1)
                        .into_iter()
                        .chain(lines.get(i + 2))
                        .any(|c| c.contains("decodesim "))
            })
        });
        if !shown {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "images in docs/img not shown by a page with a caption naming the `decodesim ...` command that made them: {missing:?}"
    );
}

/// Every Markdown page: the guide's, `ARCHITECTURE.md` and `docs/internals/`.
fn all_pages() -> Vec<PathBuf> {
    let mut all = pages();
    if std::env::var_os("DECODESIM_DOCS").is_some() {
        return all;
    }
    all.push(Path::new(ROOT).join("ARCHITECTURE.md"));
    let internals = Path::new(ROOT).join("docs/internals");
    let mut more: Vec<PathBuf> = std::fs::read_dir(&internals)
        .map(|d| {
            d.map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "md"))
                .collect()
        })
        .unwrap_or_default();
    more.sort();
    all.extend(more);
    all
}

/// A heading's anchor as GitHub writes it: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (outside code blocks), repeated ones numbered as GitHub does.
fn anchors(text: &str) -> Vec<String> {
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let (mut out, mut code) = (Vec::new(), false);
    for l in text.lines() {
        if l.starts_with("```") {
            code = !code;
            continue;
        }
        if code || !l.starts_with('#') {
            continue;
        }
        let a = slug(l.trim_start_matches('#'));
        let n = seen.entry(a.clone()).or_insert(0);
        out.push(if *n == 0 { a } else { format!("{a}-{n}") });
        *n += 1;
    }
    out
}

/// Every relative link of every page names a file that exists, and a heading of it when it
/// names an anchor.
#[test]
fn every_link_between_pages_resolves() {
    let mut broken = Vec::new();
    for page in all_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        let mut code = false;
        for (n, l) in text.lines().enumerate() {
            if l.starts_with("```") {
                code = !code;
                continue;
            }
            if code {
                continue;
            }
            for (i, _) in l.match_indices("](") {
                let rest = &l[i + 2..];
                let Some(end) = rest.find(')') else { continue };
                let target = &rest[..end];
                if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                    continue;
                }
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let file = if path.is_empty() {
                    page.clone()
                } else {
                    dir.join(path)
                };
                let at = format!(
                    "{}:{}: ({target})",
                    page.strip_prefix(ROOT).unwrap().display(),
                    n + 1
                );
                if !file.exists() {
                    broken.push(format!("{at}: no such file"));
                } else if !anchor.is_empty() && file.extension().is_some_and(|e| e == "md") {
                    let text = std::fs::read_to_string(&file).unwrap();
                    if !anchors(&text).iter().any(|a| a == anchor) {
                        broken.push(format!("{at}: no such heading"));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The guide speaks of the tool, not of how its development is organised.
#[test]
fn the_guide_speaks_of_the_tool_only() {
    let words = [
        "issue ",
        "issues",
        "session",
        "helper",
        "lent ",
        "the project's machine",
        "development machine",
        "bars ",
    ];
    let mut found = Vec::new();
    for p in pages() {
        let t = std::fs::read_to_string(&p).unwrap().to_lowercase();
        for (n, line) in t.lines().enumerate() {
            for w in words {
                if line.contains(w) && !line.contains("stacked bars") {
                    found.push(format!("{}:{}: '{w}'", p.display(), n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_matcher_reads_the_convention() {
    let v = |s: &[&str]| s.iter().map(|l| l.to_string()).collect::<Vec<_>>();
    assert!(line_matches("took [..] s", "took 0.42 s"));
    assert!(!line_matches("took [..] s", "took 0.42 ms"));
    assert!(line_matches("[..]", ""));
    assert!(line_matches("a [..] b [..] c", "a x b y c"));
    assert!(!line_matches("a [..] b [..] c", "a x c"));
    assert!(matches(&v(&["a", "...", "d"]), &v(&["a", "b", "c", "d"])));
    assert!(matches(&v(&["a", "...", "d"]), &v(&["a", "d"])));
    assert!(!matches(&v(&["a", "...", "d"]), &v(&["a", "b"])));
    assert!(!matches(&v(&["a", "b"]), &v(&["a", "b", "c"])));
    // Blessing keeps wildcards and elisions that still apply, and takes the new lines.
    assert_eq!(
        bless(
            &v(&["head [..]", "...", "tail 1", "end"]),
            &v(&["head 2", "x", "y", "tail 2", "end"])
        ),
        v(&["head [..]", "...", "tail 2", "end"])
    );
    assert_eq!(
        bless(&v(&["old"]), &v(&["new", "lines"])),
        v(&["new", "lines"])
    );
    let lines = [
        "```console",
        "$ decodesim list",
        "out",
        "```",
        "```console",
        "no",
    ];
    let p = parse("x.md", &lines[..4]).unwrap();
    assert_eq!((p.len(), p[0].line, p[0].expected.clone()), (1, 2, 2..3));
    assert!(parse("x.md", &lines).unwrap_err().contains("x.md:6"));
}
