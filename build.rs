//! Embeds the bundled data (models/ and data/, except the validation traces in data/traces) in
//! the binary, so an installed or copied binary needs no source tree (src/bundle.rs extracts it
//! once to a cache folder). Writes `$OUT_DIR/bundle.rs`: the files as `(relative path, bytes)`
//! and a hash of them that names the cache folder.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Folders embedded, relative to the package root.
const ROOTS: &[&str] = &["models", "data"];
/// Not needed at run time: profiler traces for the tests and `validate` (2.2 MB), read from
/// the source tree or a path the user gives.
const SKIP: &[&str] = &["data/traces"];

fn walk(root: &Path, rel: &str, out: &mut Vec<String>) {
    if SKIP.contains(&rel) {
        return;
    }
    let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .collect();
    names.sort();
    for name in names {
        let child = format!("{rel}/{name}");
        let p = root.join(&child);
        if p.is_dir() {
            walk(root, &child, out);
        } else if p.is_file() {
            out.push(child);
        }
    }
}

fn main() {
    let root =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for r in ROOTS {
        // A folder is scanned whole for changes (cargo), so new files are embedded too.
        println!("cargo:rerun-if-changed={r}");
        walk(&root, r, &mut files);
    }
    // FNV-1a over names and contents: a new data set gets a new cache folder.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    let mut src = String::from("pub(crate) static FILES: &[(&str, &[u8])] = &[\n");
    for f in &files {
        let bytes = std::fs::read(root.join(f)).expect("bundled file readable");
        mix(f.as_bytes());
        mix(&[0]);
        mix(&bytes);
        let abs = root.join(f);
        writeln!(
            src,
            "    ({f:?}, include_bytes!({:?})),",
            abs.display().to_string()
        )
        .unwrap();
    }
    src.push_str("];\n");
    writeln!(src, "pub(crate) const HASH: u64 = {hash:#018x};").unwrap();
    let out =
        PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("bundle.rs");
    std::fs::write(out, src).expect("OUT_DIR writable");
}
