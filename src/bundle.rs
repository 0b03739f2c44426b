//! The data root: where models, systems, calibration profiles, AIConfigurator tables and rules
//! are read from. The bundled files are embedded in the binary (build.rs), so an installed or
//! copied binary works with no source tree.
//!
//! Resolution, first match wins:
//! 1. `--data-dir DIR` ([`set_data_dir`]) or `$DECODESIM_HOME`: files on disk (the CLI checks
//!    that either holds `models/` or `data/` before anything runs);
//! 2. the source tree the binary was built from, only while the binary runs from that tree:
//!    the executable lies below the tree's `target/` (or the target folder it was built in), or
//!    `cargo run` / `cargo test` started it from that tree. `$DECODESIM_NO_SOURCE_TREE` skips
//!    it. An installed copy (`cargo install`, a copied binary) never reads the tree;
//! 3. the embedded files, extracted to `<cache>/decodesim/<version>-<hash>`, where `<cache>` is
//!    `$XDG_CACHE_HOME` when it is an absolute path (a relative one is ignored, as the XDG
//!    specification says), else `$HOME/.cache`, else a folder of the user's own in the system
//!    temp folder (`decodesim-<uid>`). A cache folder is used only when the user owns it and
//!    no one else can write to it, nor to any folder above it (a folder writable by others
//!    counts only with the sticky bit, as `/tmp` has): a folder a stranger planted is never
//!    read. The extracted copy is held against the embedded bytes once per run (every file's
//!    size and contents, and no file more): a copy that differs is extracted again
//!    ([`repair_note`] says so). Extraction writes a temporary folder and renames it into
//!    place, so concurrent first runs never see a partial root.
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
static EXTRACTED: OnceLock<Result<Extracted, String>> = OnceLock::new();

/// The cache folder in use, and why it was extracted again, if it was.
struct Extracted {
    dir: PathBuf,
    repaired: Option<String>,
}

/// Uses `dir` as the data root for the rest of the process (the `--data-dir` flag); the first
/// call wins.
pub(crate) fn set_data_dir(dir: PathBuf) {
    let _ = DATA_DIR.set(dir);
}

/// The embedded files: (path relative to the data root, contents).
fn embedded_files() -> &'static [(&'static str, &'static [u8])] {
    embedded::FILES
}

/// `$DECODESIM_HOME` when set and not empty.
pub(crate) fn home_var() -> Option<PathBuf> {
    std::env::var_os("DECODESIM_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

/// The folder holding `models/` and `data/`.
pub(crate) fn data_root() -> PathBuf {
    if let Some(d) = DATA_DIR.get() {
        return d.clone();
    }
    if let Some(p) = home_var() {
        return p;
    }
    if let Some(src) = source_tree() {
        return src;
    }
    match extracted() {
        Ok(e) => e.dir.clone(),
        // Readers then report the missing file; `extract_problem` says why it is missing.
        Err(_) => PathBuf::from("/nonexistent-decodesim-cache").join(folder_name()),
    }
}

/// Why the embedded files could not be extracted, when the data root is the embedded set and
/// no cache folder was usable.
pub(crate) fn extract_problem() -> Option<String> {
    if !uses_embedded() {
        return None;
    }
    extracted().as_ref().err().cloned()
}

/// Whether the data root is the embedded set (no `--data-dir`, `$DECODESIM_HOME` or source
/// tree).
fn uses_embedded() -> bool {
    DATA_DIR.get().is_none() && home_var().is_none() && source_tree().is_none()
}

/// When this run found the extracted copy different from the embedded files (a truncated or
/// edited file, a file more) and extracted it again: what differed, for a warning.
pub fn repair_note() -> Option<String> {
    if !uses_embedded() {
        return None;
    }
    EXTRACTED
        .get()
        .and_then(|r| r.as_ref().ok())
        .and_then(|e| e.repaired.clone())
}

/// The source tree, when this binary runs from it (module doc).
fn source_tree() -> Option<PathBuf> {
    // Decided once per process: the executable and the tree do not move while it runs, and
    // every report path asks (a sweep prices thousands of collectives, each naming its table).
    static TREE: OnceLock<Option<PathBuf>> = OnceLock::new();
    TREE.get_or_init(|| {
        if std::env::var_os("DECODESIM_NO_SOURCE_TREE").is_some_and(|v| !v.is_empty()) {
            return None;
        }
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        if !(p.join("data").is_dir() && p.join("models").is_dir()) {
            return None;
        }
        runs_from_tree(&p).then_some(p)
    })
    .clone()
}

/// `p` with its links resolved, remembered once resolved: a report names the same few files
/// thousands of times, and each resolution is a system call per path component. A path that
/// does not resolve yet (an output not yet written) is tried again next time.
fn canonical(p: &Path) -> Option<PathBuf> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static SEEN: OnceLock<Mutex<HashMap<PathBuf, PathBuf>>> = OnceLock::new();
    let seen = SEEN.get_or_init(Default::default);
    if let Some(c) = seen.lock().ok().and_then(|m| m.get(p).cloned()) {
        return Some(c);
    }
    let c = p.canonicalize().ok()?;
    if let Ok(mut m) = seen.lock() {
        m.insert(p.to_path_buf(), c.clone());
    }
    Some(c)
}

/// Whether the running executable belongs to the source tree `tree`: it lies below
/// `tree/target` or the profile folder it was built in, or cargo (`cargo run`, `cargo test`)
/// started it for that very package.
fn runs_from_tree(tree: &Path) -> bool {
    let canon = |p: &Path| p.canonicalize().ok();
    if let Some(m) = std::env::var_os("CARGO_MANIFEST_DIR") {
        if canon(Path::new(&m)).is_some() && canon(Path::new(&m)) == canon(tree) {
            return true;
        }
    }
    let Some(exe) = std::env::current_exe().ok().and_then(|e| canon(&e)) else {
        return false;
    };
    // OUT_DIR is <target>/[<triple>/]<profile>/build/<package>-<hash>/out.
    let profile = Path::new(env!("OUT_DIR"))
        .ancestors()
        .nth(3)
        .and_then(canon);
    [canon(&tree.join("target")), profile]
        .into_iter()
        .flatten()
        .any(|t| exe.starts_with(t))
}

fn folder_name() -> String {
    format!("{}-{:016x}", env!("CARGO_PKG_VERSION"), embedded::HASH)
}

/// Where the cache folder may go, in order of preference, each with the variable it came from.
fn cache_bases() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        let x = PathBuf::from(x);
        // The XDG Base Directory specification: a relative path is invalid and ignored.
        if x.is_absolute() {
            out.push((x.join("decodesim"), "$XDG_CACHE_HOME".into()));
        }
    }
    if let Some(h) = std::env::var_os("HOME").filter(|x| !x.is_empty()) {
        let h = PathBuf::from(h);
        if h.is_absolute() {
            out.push((h.join(".cache").join("decodesim"), "$HOME/.cache".into()));
        }
    }
    out.push((
        std::env::temp_dir().join(format!("decodesim-{}", user_tag())),
        "the temp folder".into(),
    ));
    out
}

#[cfg(unix)]
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn user_tag() -> String {
    #[cfg(unix)]
    {
        euid().to_string()
    }
    #[cfg(not(unix))]
    {
        std::env::var("USERNAME").unwrap_or_else(|_| "user".into())
    }
}

fn extracted() -> &'static Result<Extracted, String> {
    EXTRACTED.get_or_init(|| {
        let mut problems = Vec::new();
        for (base, from) in cache_bases() {
            match extract_into(&base) {
                Ok(e) => return Ok(e),
                Err(e) => problems.push(format!("{} ({from}): {e}", base.display())),
            }
        }
        Err(format!(
            "the bundled data could not be extracted to a cache folder of the user's own ({}); use --data-dir DIR or DECODESIM_HOME",
            problems.join("; ")
        ))
    })
}

fn other(msg: String) -> std::io::Error {
    std::io::Error::other(msg)
}

/// Refuses a folder that is not the user's own: a folder (not a link) owned by the user that no
/// one else can write to.
#[cfg(unix)]
fn check_private_dir(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p)?;
    if !m.file_type().is_dir() {
        return Err(other(format!("{} is not a folder", p.display())));
    }
    if m.uid() != euid() {
        return Err(other(format!(
            "{} belongs to user id {}, not to this user ({}); a cache folder must be the user's own",
            p.display(),
            m.uid(),
            euid()
        )));
    }
    if m.mode() & 0o022 != 0 {
        return Err(other(format!(
            "{} can be written by others (mode {:o}); a cache folder must be writable by its owner alone",
            p.display(),
            m.mode() & 0o7777
        )));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private_dir(p: &Path) -> std::io::Result<()> {
    let m = std::fs::symlink_metadata(p)?;
    if m.file_type().is_dir() {
        Ok(())
    } else {
        Err(other(format!("{} is not a folder", p.display())))
    }
}

/// Refuses a cache folder below a folder another user could rename it out of: every folder
/// above must belong to the user or to root, and one writable by others must have the sticky
/// bit (as `/tmp` has).
#[cfg(unix)]
fn check_ancestors(p: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let canon = p.canonicalize()?;
    for a in canon.ancestors().skip(1) {
        let m = std::fs::metadata(a)?;
        if m.uid() != euid() && m.uid() != 0 {
            return Err(other(format!(
                "{} (above the cache folder) belongs to user id {}, neither this user ({}) nor root",
                a.display(),
                m.uid(),
                euid()
            )));
        }
        if m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
            return Err(other(format!(
                "{} (above the cache folder) can be written by others without the sticky bit (mode {:o})",
                a.display(),
                m.mode() & 0o7777
            )));
        }
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_ancestors(_: &Path) -> std::io::Result<()> {
    Ok(())
}

/// Creates `p` (and missing parents) readable and writable by the user alone.
fn create_private_dir(p: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(p)
}

/// Extracts the embedded files to `base/<version>-<hash>` unless an intact copy is there,
/// refusing a `base` that is not the user's own.
fn extract_into(base: &Path) -> std::io::Result<Extracted> {
    if std::fs::symlink_metadata(base).is_err() {
        create_private_dir(base)?;
    }
    check_private_dir(base)?;
    check_ancestors(base)?;
    let target = base.join(folder_name());
    let mut repaired = None;
    if std::fs::symlink_metadata(&target).is_ok() {
        match verify(&target) {
            Ok(()) => {
                return Ok(Extracted {
                    dir: target,
                    repaired,
                })
            }
            // A folder an older run left unfinished is replaced without a word; one that
            // differs from the embedded files is replaced and reported.
            Err(e) if target.join(COMPLETE).is_file() => repaired = Some(e),
            Err(_) => {}
        }
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tag = format!("{}-{}-{nanos}", folder_name(), std::process::id());
    let tmp = base.join(format!(".tmp-{tag}"));
    let stale = base.join(format!(".stale-{tag}"));
    let result = write_all(&tmp).and_then(|()| {
        if std::fs::symlink_metadata(&target).is_ok() {
            // Moved aside first (a rename cannot replace a folder that holds files).
            match std::fs::rename(&target, &stale) {
                Ok(()) => {}
                // Another run moved it first.
                Err(_) if std::fs::symlink_metadata(&target).is_err() => {}
                Err(e) => return Err(e),
            }
        }
        match std::fs::rename(&tmp, &target) {
            Ok(()) => Ok(()),
            // Another run put its fresh copy in first: use it if it is intact.
            Err(e) => verify(&target).map_err(|why| other(format!("{e}; {why}"))),
        }
    });
    for t in [&tmp, &stale] {
        if std::fs::symlink_metadata(t).is_ok() {
            let _ = std::fs::remove_dir_all(t);
        }
    }
    result?;
    Ok(Extracted {
        dir: target,
        repaired: repaired.map(|why| {
            format!(
                "the cached copy of the bundled data in {} did not match this binary ({why}); it was extracted again",
                base.display()
            )
        }),
    })
}

fn write_all(dir: &Path) -> std::io::Result<()> {
    create_private_dir(dir)?;
    for (rel, bytes) in embedded_files() {
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            create_private_dir(parent)?;
        }
        std::fs::write(&p, bytes)?;
    }
    std::fs::write(dir.join(COMPLETE), folder_name())
}

/// Holds an extracted copy against the embedded files: the completion marker, every file's
/// size and bytes, no other file and no link, every folder the user's own. `Err` says the
/// first difference.
fn verify(dir: &Path) -> Result<(), String> {
    check_private_dir(dir).map_err(|e| e.to_string())?;
    if std::fs::read(dir.join(COMPLETE)).ok().as_deref() != Some(folder_name().as_bytes()) {
        return Err(format!("{COMPLETE} missing or not this version's"));
    }
    for (rel, bytes) in embedded_files() {
        let p = dir.join(rel);
        let m = std::fs::symlink_metadata(&p).map_err(|e| format!("{rel}: {e}"))?;
        if !m.file_type().is_file() {
            return Err(format!("{rel}: not a plain file"));
        }
        if m.len() != bytes.len() as u64 {
            return Err(format!(
                "{rel}: {} bytes, expected {}",
                m.len(),
                bytes.len()
            ));
        }
        let on_disk = std::fs::read(&p).map_err(|e| format!("{rel}: {e}"))?;
        if on_disk != *bytes {
            return Err(format!("{rel}: contents differ"));
        }
    }
    // Nothing more: a file added to the copy (a model, a system) would be listed and used.
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        check_private_dir(&d).map_err(|e| e.to_string())?;
        let entries = std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        for e in entries {
            let e = e.map_err(|e| format!("{}: {e}", d.display()))?;
            let p = e.path();
            let rel = p
                .strip_prefix(dir)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            let t = e.file_type().map_err(|e| format!("{rel}: {e}"))?;
            if t.is_dir() {
                stack.push(p);
            } else if !(rel == COMPLETE || embedded_files().iter().any(|(r, _)| *r == rel)) {
                return Err(format!("{rel}: not a bundled file"));
            }
        }
    }
    Ok(())
}

/// `p` relative to the data root when it lies below it (`models/kimi-k2.5.json`), so reports
/// name bundled files by their place in the bundle, not by a cache or build folder.
fn relative_to_root(p: &Path) -> Option<PathBuf> {
    let root = data_root();
    let roots = [canonical(&root), Some(root)];
    let canon = canonical(p);
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
        let dir = extract_into(&base).unwrap().dir;
        for (rel, bytes) in embedded_files() {
            assert_eq!(&std::fs::read(dir.join(rel)).unwrap(), bytes, "{rel}");
        }
        // A second extraction finds the complete copy and leaves no temporary folder behind.
        let again = extract_into(&base).unwrap();
        assert_eq!(again.dir, dir);
        assert!(again.repaired.is_none());
        let entries: Vec<_> = std::fs::read_dir(&base).unwrap().flatten().collect();
        assert_eq!(entries.len(), 1, "{entries:?}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_copy_that_differs_is_extracted_again_and_a_folder_others_can_write_is_refused() {
        let base = std::env::temp_dir().join(format!(
            "decodesim-bundle-verify-test-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&base);
        let dir = extract_into(&base).unwrap().dir;
        let (rel, bytes) = embedded_files()
            .iter()
            .find(|(r, _)| r.ends_with("moe.csv"))
            .unwrap();
        let f = dir.join(rel);
        std::fs::write(&f, &bytes[..bytes.len() / 2]).unwrap();
        let why = verify(&dir).unwrap_err();
        assert!(
            why.contains("moe.csv") && why.contains("bytes, expected"),
            "{why}"
        );
        let again = extract_into(&base).unwrap();
        assert!(again.repaired.unwrap().contains("moe.csv"));
        assert_eq!(std::fs::read(&f).unwrap(), *bytes);
        // Same size, other bytes.
        let mut flipped = bytes.to_vec();
        flipped[0] ^= 1;
        std::fs::write(&f, &flipped).unwrap();
        assert!(verify(&dir).unwrap_err().contains("contents differ"));
        // A file added.
        std::fs::write(&f, bytes).unwrap();
        std::fs::write(dir.join("models/planted.json"), "{}").unwrap();
        assert!(verify(&dir).unwrap_err().contains("models/planted.json"));
        std::fs::remove_file(dir.join("models/planted.json")).unwrap();
        verify(&dir).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
            let e = extract_into(&base).err().unwrap().to_string();
            assert!(e.contains("can be written by others"), "{e}");
            std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}
