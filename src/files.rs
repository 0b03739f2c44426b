//! Where files enter and leave: every input is checked to be a regular file of a sane size for
//! its kind before a byte is read (so `/dev/zero`, a FIFO or a 4 GB CSV is refused, not read),
//! and every output is written to a temporary name in its folder and renamed into place (so
//! concurrent runs never leave a torn file, and a missing folder is created); a FIFO or a
//! character device (`/dev/null`) is written in place, never renamed over.

use crate::error::{Error, Result};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

const MIB: u64 = 1024 * 1024;

/// What a file is, which sets how large it may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InputKind {
    /// A Hugging Face `config.json`.
    ModelConfig,
    /// A GPU or system description.
    SystemToml,
    /// A calibration profile.
    Profile,
    /// Kernel-classification rules.
    Rules,
    /// A measurement CSV (kernels, collectives, launch, reference steps, tables).
    MeasurementCsv,
    /// A MANIFEST or other text that is only recorded.
    Manifest,
    /// A Kineto trace, plain or gzip.
    Trace,
    /// A `decodesim sweep --grid` file.
    SweepGrid,
}

impl InputKind {
    /// The largest file of this kind that is read. Generous for real data (the largest public
    /// trace is 62 MB of JSON; the H200 kernels.csv is 0.2 MB), small enough that a mistaken
    /// path cannot exhaust memory.
    fn max_bytes(self) -> u64 {
        match self {
            InputKind::ModelConfig
            | InputKind::SystemToml
            | InputKind::Rules
            | InputKind::SweepGrid => 4 * MIB,
            InputKind::Profile => 16 * MIB,
            InputKind::Manifest => 4 * MIB,
            InputKind::MeasurementCsv => 64 * MIB,
            InputKind::Trace => 4096 * MIB,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            InputKind::ModelConfig => "model config.json",
            InputKind::SystemToml => "system TOML",
            InputKind::Profile => "calibration profile",
            InputKind::Rules => "rules file",
            InputKind::MeasurementCsv => "measurement CSV",
            InputKind::Manifest => "manifest",
            InputKind::Trace => "trace",
            InputKind::SweepGrid => "sweep grid TOML",
        }
    }
}

/// A byte count as a person reads it: 1.5 KiB, 76.2 GiB ([`crate::units::bytes`]).
fn human_bytes(bytes: f64) -> String {
    crate::units::bytes(bytes)
}

/// Checks that `path` is a regular file no larger than its kind allows, and returns its size.
pub(crate) fn check_input(path: &Path, kind: InputKind) -> Result<u64> {
    let meta = std::fs::metadata(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_file() {
        return Err(Error::Input {
            path: path.to_path_buf(),
            problem: format!(
                "not a regular file (a {} must be a file, not a folder, device or pipe)",
                kind.describe()
            ),
        });
    }
    if meta.len() > kind.max_bytes() {
        return Err(Error::Input {
            path: path.to_path_buf(),
            problem: format!(
                "{} is larger than a {} may be ({} at most)",
                human_bytes(meta.len() as f64),
                kind.describe(),
                human_bytes(kind.max_bytes() as f64)
            ),
        });
    }
    Ok(meta.len())
}

/// Opens a checked input. Reads through the handle are capped at the kind's limit, so a file
/// that grows after the check is still bounded.
pub(crate) fn open_input(path: &Path, kind: InputKind) -> Result<std::io::Take<std::fs::File>> {
    check_input(path, kind)?;
    let file = std::fs::File::open(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(file.take(kind.max_bytes()))
}

/// Reads a checked input as UTF-8 text.
pub(crate) fn read_text(path: &Path, kind: InputKind) -> Result<String> {
    let mut text = String::new();
    open_input(path, kind)?
        .read_to_string(&mut text)
        .map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(text)
}

/// Reads and deserializes a TOML file, naming the file in the error.
pub(crate) fn read_toml<T: serde::de::DeserializeOwned>(path: &Path, kind: InputKind) -> Result<T> {
    let text = read_text(path, kind)?;
    toml::from_str(&text).map_err(|e| Error::Syntax {
        path: path.to_path_buf(),
        format: "TOML",
        message: e.to_string().trim_end().to_string(),
    })
}

/// A small CSV a person writes by hand (a routing log, a burst, a request mix): blank and `#`
/// lines skipped, fields trimmed, column names compared without case, and every row keeps its
/// line number so an error can name it. Read with the csv crate: a quoted field may hold a
/// comma (or a line break; the row keeps the line it starts on).
#[derive(Debug, Clone)]
pub(crate) struct HandCsv {
    path: PathBuf,
    /// The header as written (its fields joined by commas).
    header: String,
    /// Column names, lower-cased.
    columns: Vec<String>,
    /// (line number from 1, fields).
    pub(crate) rows: Vec<(usize, Vec<String>)>,
}

/// The records of a hand-written CSV, each with the line it starts on (from 1), its fields
/// trimmed; blank lines and, where `comments`, lines whose first non-blank is `#` are
/// skipped. Rows may differ in length (the caller names a short or long one).
pub(crate) fn csv_records(
    text: &str,
    path: &Path,
    comments: bool,
) -> Result<Vec<(usize, Vec<String>)>> {
    let text = normalise_csv(text, comments);
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut out = Vec::new();
    let mut rec = csv::StringRecord::new();
    loop {
        let line = rdr.position().line() as usize;
        match rdr.read_record(&mut rec) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                return Err(Error::field(
                    path,
                    format!("line {line}"),
                    format!("unreadable CSV: {}", crate::units::echo(&e.to_string())),
                ))
            }
        }
        let line = rec.position().map_or(line, |p| p.line() as usize);
        if rec.len() == 1 && rec[0].is_empty() {
            continue; // a line of blanks
        }
        out.push((line, rec.iter().map(str::to_string).collect()));
    }
    Ok(out)
}

/// `text` as the csv crate should see it: without the blanks a person puts between a field's
/// start and its opening quote (`a, "b, c"`; the crate opens a quoted field only at its first
/// byte) and, where `comments`, with every line whose first non-blank is `#` blanked. An empty
/// line gets a blank: the csv crate skips empty lines without counting them in the next
/// record's line, but reads a blank one as a record (skipped by the caller) and counts it.
/// Everything else, inside quotes too, stays.
pub(crate) fn normalise_csv(text: &str, comments: bool) -> String {
    #[derive(Clone, Copy, PartialEq)]
    enum At {
        RecordStart,
        FieldStart,
        Unquoted,
        Quoted,
        QuoteInQuoted,
        Comment,
    }
    let mut out = String::with_capacity(text.len());
    let mut blanks = String::new();
    let mut at = At::RecordStart;
    for c in text.chars() {
        let start = matches!(at, At::RecordStart | At::FieldStart);
        if start && (c == ' ' || c == '\t') {
            blanks.push(c);
            continue;
        }
        if at == At::RecordStart && c == '#' && comments {
            at = At::Comment;
        }
        if at == At::Comment {
            blanks.clear();
            if c == '\n' {
                out.push_str(" \n");
                at = At::RecordStart;
            }
            continue;
        }
        if at == At::RecordStart && (c == '\n' || c == '\r') {
            out.push(' ');
        }
        if !(start && c == '"') {
            out.push_str(&blanks);
        }
        blanks.clear();
        out.push(c);
        at = match (at, c) {
            (At::Quoted, '"') => At::QuoteInQuoted,
            (At::Quoted, _) => At::Quoted,
            (At::QuoteInQuoted, '"') => At::Quoted,
            (At::RecordStart | At::FieldStart, '"') => At::Quoted,
            (_, '\n') => At::RecordStart,
            (_, ',') => At::FieldStart,
            _ => At::Unquoted,
        };
    }
    out.push_str(&blanks);
    out
}

impl HandCsv {
    /// Reads a checked measurement-sized file; `expected` describes the header for the error
    /// an empty file gets.
    pub fn read(path: &Path, expected: &str) -> Result<Self> {
        let text = read_text(path, InputKind::MeasurementCsv)?;
        Self::parse(&text, path, expected)
    }

    pub(crate) fn parse(text: &str, path: &Path, expected: &str) -> Result<Self> {
        let mut records = csv_records(text, path, true)?.into_iter();
        let Some((_, header)) = records.next() else {
            return Err(Error::field(
                path,
                "header",
                format!("empty file; expected {expected}"),
            ));
        };
        Ok(HandCsv {
            path: path.to_path_buf(),
            header: header.join(","),
            columns: header.iter().map(|c| c.to_ascii_lowercase()).collect(),
            rows: records.collect(),
        })
    }

    /// The index of a column, if the header has it.
    pub(crate) fn col(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }

    /// The indices of `names`, or an error naming the header found and `expected`.
    pub(crate) fn require(&self, names: &[&str], expected: &str) -> Result<Vec<usize>> {
        names
            .iter()
            .map(|n| self.col(n))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                Error::field(
                    &self.path,
                    "header",
                    format!(
                        "found '{}', expected {expected}",
                        crate::units::echo(&self.header)
                    ),
                )
            })
    }
}

/// A row's field, empty when the row is short.
pub fn field(row: &[String], i: usize) -> &str {
    row.get(i).map(String::as_str).unwrap_or("")
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The temporary files of atomic writes in progress, so that a signal ending the process can
/// remove them ([`remove_temp_files`]). A file is created and registered under the lock, so
/// none is created unregistered or after the removal.
static TEMP_FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn temp_files() -> MutexGuard<'static, Vec<PathBuf>> {
    // A panic elsewhere while holding the lock leaves the list intact: keep using it.
    TEMP_FILES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Creates (never opens an existing) temporary file and registers it.
fn create_temp(tmp: &Path) -> std::io::Result<std::fs::File> {
    let mut temps = temp_files();
    let file = std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(tmp)?;
    temps.push(tmp.to_path_buf());
    Ok(file)
}

fn forget_temp(tmp: &Path) {
    temp_files().retain(|p| p != tmp);
}

/// Holds the temporary-file registry locked: while it lives no atomic write starts a new file.
pub struct TempFilesRemoved(#[allow(dead_code)] MutexGuard<'static, Vec<PathBuf>>);

/// Removes the temporary file of every atomic write in progress, leaving the files at their
/// final names as they were, and keeps the registry locked so no new one appears. For a signal
/// handler about to end the process.
pub fn remove_temp_files() -> TempFilesRemoved {
    let temps = temp_files();
    for p in temps.iter() {
        // A staged folder ([`StagedFolder`]) is registered as well as temporary files.
        let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir_all(p));
    }
    TempFilesRemoved(temps)
}

/// How an output path is written.
enum OutputTarget {
    /// A new or regular file (a symbolic link is followed to it): temporary file + rename.
    Atomic(PathBuf),
    /// A FIFO or a character device (`/dev/null`, `/dev/stdout`, a terminal): opened and written
    /// in place; renaming over it would replace the device node or pipe with a plain file.
    InPlace,
}

#[cfg(unix)]
fn special_kind(t: &std::fs::FileType) -> Option<std::result::Result<&'static str, &'static str>> {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        Some(Ok("FIFO"))
    } else if t.is_char_device() {
        Some(Ok("character device"))
    } else if t.is_block_device() {
        Some(Err("a block device (a disk)"))
    } else if t.is_socket() {
        Some(Err("a socket"))
    } else {
        None
    }
}

#[cfg(not(unix))]
fn special_kind(_: &std::fs::FileType) -> Option<std::result::Result<&'static str, &'static str>> {
    None
}

/// Why `path` cannot be written as an output, if it cannot: a folder, a block device or a
/// socket. Missing paths, regular files, FIFOs and character devices can.
pub(crate) fn output_problem(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_dir() {
        return Some("is a folder; expected a file to write".into());
    }
    match special_kind(&meta.file_type()) {
        Some(Err(what)) => Some(format!(
            "is {what}; expected a file, a FIFO or a character device such as /dev/null"
        )),
        _ => None,
    }
}

fn output_target(path: &Path) -> Result<OutputTarget> {
    if let Some(problem) = output_problem(path) {
        return Err(Error::Input {
            path: path.to_path_buf(),
            problem,
        });
    }
    match std::fs::metadata(path) {
        Ok(meta) if special_kind(&meta.file_type()).is_some() => Ok(OutputTarget::InPlace),
        Ok(_) => {
            // A symbolic link to a file: replace the file it points to, not the link.
            let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
            match is_link.then(|| std::fs::canonicalize(path)) {
                Some(Ok(target)) => Ok(OutputTarget::Atomic(target)),
                _ => Ok(OutputTarget::Atomic(path.to_path_buf())),
            }
        }
        Err(_) => Ok(OutputTarget::Atomic(path.to_path_buf())),
    }
}

/// Writes a file atomically: the parent folder is created, the bytes go to a unique temporary
/// name beside the target, and the temporary file is renamed over the target. Readers see the
/// old file or the new one, never a mix; a signal ending the process meanwhile removes the
/// temporary file ([`remove_temp_files`]). A FIFO or character device at `path` (`/dev/null`)
/// is written in place instead, never replaced; a folder, block device or socket is refused.
pub fn write_atomic(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let werr = |source| Error::Write {
        path: path.to_path_buf(),
        source,
    };
    let target = match output_target(path)? {
        OutputTarget::InPlace => {
            let result = (|| {
                let file = std::fs::File::options().write(true).open(path)?;
                let mut w = std::io::BufWriter::new(file);
                fill(&mut w)?;
                w.flush()
            })();
            return result.map_err(werr);
        }
        OutputTarget::Atomic(target) => target,
    };
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(werr)?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".to_string());
    let tmp = dir.join(format!(
        ".{name}.tmp.{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let file = create_temp(&tmp)?;
        let mut w = std::io::BufWriter::new(file);
        fill(&mut w)?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        // The target may have become a folder or device while we wrote: never rename over it.
        if let Ok(meta) = std::fs::metadata(&target) {
            if !meta.is_file() {
                return Err(std::io::Error::other(
                    "it stopped being a regular file while being written; not replaced",
                ));
            }
        }
        std::fs::rename(&tmp, &target)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    forget_temp(&tmp);
    result.map_err(werr)
}

/// A folder built under a temporary name beside `target` and put in its place whole by
/// [`StagedFolder::commit`], so that what readers find at `target` is the old folder or the
/// complete new one. Dropped without a commit (an error on the way), it is removed and the
/// target stays as it was.
pub(crate) struct StagedFolder {
    target: PathBuf,
    stage: PathBuf,
    committed: bool,
}

impl StagedFolder {
    /// Creates the temporary folder beside `target` (its parent is created if missing).
    pub(crate) fn new(target: &Path) -> Result<Self> {
        let werr = |source| Error::Write {
            path: target.to_path_buf(),
            source,
        };
        let stage = sibling(target, "tmp");
        if let Some(dir) = stage.parent() {
            std::fs::create_dir_all(dir).map_err(werr)?;
        }
        let mut temps = temp_files();
        std::fs::create_dir(&stage).map_err(werr)?;
        temps.push(stage.clone());
        Ok(StagedFolder {
            target: target.to_path_buf(),
            stage,
            committed: false,
        })
    }

    /// Where to build the folder's contents.
    pub(crate) fn path(&self) -> &Path {
        &self.stage
    }

    /// Puts the folder in place, then runs `then` (writing the file that refers to it). If
    /// `then` fails, the previous folder is put back: the pair changes together or not at all.
    pub(crate) fn commit(mut self, then: impl FnOnce() -> Result<()>) -> Result<()> {
        let werr = |source| Error::Write {
            path: self.target.clone(),
            source,
        };
        let old = sibling(&self.target, "old");
        let had = std::fs::symlink_metadata(&self.target).is_ok();
        if had {
            if !std::fs::metadata(&self.target).is_ok_and(|m| m.is_dir()) {
                return Err(werr(std::io::Error::other("is not a folder; not replaced")));
            }
            std::fs::rename(&self.target, &old).map_err(werr)?;
        }
        if let Err(e) = std::fs::rename(&self.stage, &self.target) {
            if had {
                let _ = std::fs::rename(&old, &self.target);
            }
            return Err(werr(e));
        }
        self.committed = true;
        forget_temp(&self.stage);
        match then() {
            Ok(()) => {
                if had {
                    let _ = std::fs::remove_dir_all(&old);
                }
                Ok(())
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&self.target);
                if had {
                    let _ = std::fs::rename(&old, &self.target);
                }
                Err(e)
            }
        }
    }
}

impl Drop for StagedFolder {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.stage);
            forget_temp(&self.stage);
        }
    }
}

/// A hidden name beside `target` that no other run uses: `.NAME.KIND.PID.N`.
fn sibling(target: &Path, kind: &str) -> PathBuf {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".to_string());
    dir.join(format!(
        ".{name}.{kind}.{}.{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// [`write_atomic`] for bytes already in memory.
pub(crate) fn write_atomic_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, |w| w.write_all(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_reads_well() {
        assert_eq!(human_bytes(512.0), "512 B");
        assert_eq!(human_bytes(1536.0), "1.5 KiB");
        assert_eq!(human_bytes(76.18e9), "70.9 GiB");
    }

    #[test]
    fn hand_csv_reads_quoted_fields_comments_and_blank_lines() {
        let text = "# a log\n\n Count , BYTES,total_us\n  # indented comment\n\"1,000\", \"a \"\"b\"\"\",3\n\"two\nlines\",5,6\n \n7\n";
        let t = HandCsv::parse(text, Path::new("x.csv"), "a header").unwrap();
        assert_eq!(t.require(&["count", "bytes"], "").unwrap(), [0, 1]);
        assert_eq!(t.header, "Count,BYTES,total_us");
        let rows: Vec<(usize, Vec<&str>)> = t
            .rows
            .iter()
            .map(|(n, f)| (*n, f.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            rows,
            [
                (5, vec!["1,000", "a \"b\"", "3"]),
                (6, vec!["two\nlines", "5", "6"]),
                (9, vec!["7"]),
            ]
        );
        let e = HandCsv::parse("# only\n\n", Path::new("x.csv"), "a header").unwrap_err();
        assert!(
            e.to_string().contains("empty file; expected a header"),
            "{e}"
        );
    }

    #[test]
    fn devices_and_folders_are_refused_before_reading() {
        let e = read_text(Path::new("/dev/zero"), InputKind::ModelConfig).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = read_text(Path::new("/tmp"), InputKind::Rules).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    #[test]
    fn oversized_inputs_are_refused() {
        let dir = std::env::temp_dir().join(format!("decodesim-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("big.json");
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(InputKind::ModelConfig.max_bytes() + 1).unwrap();
        let e = read_text(&p, InputKind::ModelConfig).unwrap_err();
        assert!(
            e.to_string()
                .contains("larger than a model config.json may be"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_staged_folder_replaces_the_old_one_whole_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("decodesim-staged-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let target = dir.join("tables");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join("a.csv"), "old").unwrap();
        let listing = || {
            let mut v: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        // Dropped without a commit: the stage is removed, the old folder untouched.
        let s = StagedFolder::new(&target).unwrap();
        std::fs::write(s.path().join("a.csv"), "new").unwrap();
        drop(s);
        assert_eq!(listing(), vec!["tables"]);
        assert_eq!(
            std::fs::read_to_string(target.join("a.csv")).unwrap(),
            "old"
        );
        // The file written with it fails: the old folder is put back.
        let s = StagedFolder::new(&target).unwrap();
        std::fs::write(s.path().join("a.csv"), "new").unwrap();
        let e = s.commit(|| {
            Err(Error::NoInput {
                flag: "--x",
                what: "file",
            })
        });
        assert!(e.is_err());
        assert_eq!(listing(), vec!["tables"]);
        assert_eq!(
            std::fs::read_to_string(target.join("a.csv")).unwrap(),
            "old"
        );
        // It succeeds: the new folder is in place and nothing else is left.
        let s = StagedFolder::new(&target).unwrap();
        std::fs::write(s.path().join("b.csv"), "new").unwrap();
        s.commit(|| Ok(())).unwrap();
        assert_eq!(listing(), vec!["tables"]);
        assert!(!target.join("a.csv").exists());
        assert_eq!(
            std::fs::read_to_string(target.join("b.csv")).unwrap(),
            "new"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn atomic_write_creates_folders_and_leaves_no_temp_files() {
        let dir = std::env::temp_dir().join(format!("decodesim-atomic-{}", std::process::id()));
        let p = dir.join("a/b/out.txt");
        write_atomic_bytes(&p, b"one").unwrap();
        write_atomic_bytes(&p, b"two").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        let left: Vec<_> = std::fs::read_dir(p.parent().unwrap()).unwrap().collect();
        assert_eq!(left.len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
