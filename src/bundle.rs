//! The data root: where models, systems, calibration profiles, AIConfigurator tables and rules
//! are read from. The bundled files are embedded in the binary (build.rs), so an installed or
//! copied binary works with no source tree.
//!
//! Resolution, first match wins:
//! 1. `--data-dir DIR` ([`set_data_dir`]) or `$DECODESIM_HOME`: files on disk;
//! 2. the source tree the binary was built from, while it still exists (so `cargo run` and
//!    `cargo test` read the working tree); `$DECODESIM_NO_SOURCE_TREE` skips it, as if the
//!    binary were installed elsewhere;
//! 3. the embedded files, extracted once to `$XDG_CACHE_HOME/decodesim/<version>-<hash>`
//!    (else `$HOME/.cache/...`, else the system temp folder). Extraction writes a temporary
//!    folder and renames it into place, so concurrent first runs never see a partial root.
//!
//! Every reader then works on plain files, unchanged.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/bundle.rs"));
}

/// Marks a completely extracted cache folder.
const COMPLETE: &str = ".decodesim-complete";

static DATA_DIR: OnceLock<PathBuf> = OnceLock::new();
static EXTRACTED: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// Uses `dir` as the data root for the rest of the process (the `--data-dir` flag); the first
/// call wins.
pub(crate) fn set_data_dir(dir: PathBuf) {
    let _ = DATA_DIR.set(dir);
}

/// The embedded files: (path relative to the data root, contents).
#[cfg(test)]
fn embedded_files() -> &'static [(&'static str, &'static [u8])] {
    embedded::FILES
}

/// The folder holding `models/` and `data/`.
pub(crate) fn data_root() -> PathBuf {
    if let Some(d) = DATA_DIR.get() {
        return d.clone();
    }
    match std::env::var_os("DECODESIM_HOME") {
        Some(p) if !p.is_empty() => return PathBuf::from(p),
        _ => {}
    }
    if let Some(src) = source_tree() {
        return src;
    }
    match extracted() {
        Ok(p) => p.clone(),
        // Readers then report the missing file; `extract_problem` says why it is missing.
        Err(_) => cache_bases()
            .into_iter()
            .next()
            .unwrap_or_else(std::env::temp_dir)
            .join(folder_name()),
    }
}

/// Why the embedded files could not be extracted, when the data root is the embedded set and
/// no cache folder was writable.
pub(crate) fn extract_problem() -> Option<String> {
    if DATA_DIR.get().is_some()
        || std::env::var_os("DECODESIM_HOME").is_some_and(|p| !p.is_empty())
        || source_tree().is_some()
    {
        return None;
    }
    extracted().as_ref().err().cloned()
}

fn source_tree() -> Option<PathBuf> {
    if std::env::var_os("DECODESIM_NO_SOURCE_TREE").is_some_and(|v| !v.is_empty()) {
        return None;
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    (p.join("data").is_dir() && p.join("models").is_dir()).then_some(p)
}

fn folder_name() -> String {
    format!("{}-{:016x}", env!("CARGO_PKG_VERSION"), embedded::HASH)
}

/// Where the cache folder may go, in order of preference.
fn cache_bases() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        out.push(PathBuf::from(x).join("decodesim"));
    }
    if let Some(h) = std::env::var_os("HOME").filter(|x| !x.is_empty()) {
        out.push(PathBuf::from(h).join(".cache").join("decodesim"));
    }
    out.push(std::env::temp_dir().join("decodesim"));
    out
}

fn extracted() -> &'static Result<PathBuf, String> {
    EXTRACTED.get_or_init(|| {
        let mut problems = Vec::new();
        for base in cache_bases() {
            match extract_into(&base) {
                Ok(p) => return Ok(p),
                Err(e) => problems.push(format!("{}: {e}", base.display())),
            }
        }
        Err(format!(
            "the bundled data could not be extracted to a cache folder ({}); use --data-dir DIR or DECODESIM_HOME",
            problems.join("; ")
        ))
    })
}

/// Extracts the embedded files to `base/<version>-<hash>` unless a complete copy is there.
fn extract_into(base: &Path) -> std::io::Result<PathBuf> {
    let target = base.join(folder_name());
    if target.join(COMPLETE).is_file() {
        return Ok(target);
    }
    std::fs::create_dir_all(base)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = base.join(format!(
        ".tmp-{}-{}-{nanos}",
        folder_name(),
        std::process::id()
    ));
    let result = write_all(&tmp).and_then(|()| match std::fs::rename(&tmp, &target) {
        Ok(()) => Ok(()),
        // Another run finished first (the target exists and is not empty): use its copy.
        Err(_) if target.join(COMPLETE).is_file() => Ok(()),
        Err(e) => {
            // A stale, incomplete folder (a run killed before this scheme): replace it.
            if target.is_dir() && !target.join(COMPLETE).exists() {
                std::fs::remove_dir_all(&target)?;
                std::fs::rename(&tmp, &target)
            } else {
                Err(e)
            }
        }
    });
    if tmp.exists() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result.map(|()| target)
}

fn write_all(dir: &Path) -> std::io::Result<()> {
    for (rel, bytes) in embedded::FILES {
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, bytes)?;
    }
    std::fs::write(dir.join(COMPLETE), folder_name())
}

/// `p` relative to the data root when it lies below it (`models/kimi-k2.5.json`), so reports
/// name bundled files by their place in the bundle, not by a cache or build folder.
fn relative_to_root(p: &Path) -> Option<PathBuf> {
    let root = data_root();
    let roots = [root.canonicalize().ok(), Some(root)];
    let canon = p.canonicalize().ok();
    for r in roots.iter().flatten() {
        for q in [Some(p.to_path_buf()), canon.clone()].iter().flatten() {
            if let Ok(rel) = q.strip_prefix(r) {
                if !rel.as_os_str().is_empty() {
                    return Some(rel.to_path_buf());
                }
            }
        }
    }
    None
}

/// A path for a report: relative to the data root for bundled files, else relative to the
/// working folder when below it, else as given.
pub(crate) fn display(p: &Path) -> String {
    if let Some(rel) = relative_to_root(p) {
        return rel.display().to_string();
    }
    let rel = std::env::current_dir().ok().and_then(|cwd| {
        let abs = if p.is_absolute() {
            p.to_path_buf()
        } else {
            cwd.join(p)
        };
        abs.strip_prefix(&cwd).ok().map(|r| r.to_path_buf())
    });
    match rel {
        Some(r) if !r.as_os_str().is_empty() => r.display().to_string(),
        _ => p.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bundle_holds_the_models_systems_and_profiles_but_not_the_traces() {
        let names: Vec<&str> = embedded_files().iter().map(|(n, _)| *n).collect();
        for want in [
            "models/kimi-k2.5.json",
            "data/systems/rtx-pro-6000-8x-pcie.toml",
            "data/calibration/rtx-pro-6000/profile.toml",
            "data/calibration/aiconfigurator/rtx_pro_6000_server/moe.csv",
            "data/rules/kernels.toml",
        ] {
            assert!(names.contains(&want), "{want} not embedded: {names:?}");
        }
        assert!(!names.iter().any(|n| n.starts_with("data/traces")));
        let total: usize = embedded_files().iter().map(|(_, b)| b.len()).sum();
        assert!(total < 4 * 1024 * 1024, "bundle is {total} bytes");
    }

    #[test]
    fn extraction_writes_every_file_and_reuses_a_complete_copy() {
        let base =
            std::env::temp_dir().join(format!("decodesim-bundle-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = extract_into(&base).unwrap();
        for (rel, bytes) in embedded_files() {
            assert_eq!(&std::fs::read(dir.join(rel)).unwrap(), bytes, "{rel}");
        }
        // A second extraction finds the complete copy and leaves no temporary folder behind.
        assert_eq!(extract_into(&base).unwrap(), dir);
        let entries: Vec<_> = std::fs::read_dir(&base).unwrap().flatten().collect();
        assert_eq!(entries.len(), 1, "{entries:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
