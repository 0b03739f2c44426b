//! The trace files a summary reads: folders expanded, the same file given twice refused.

use crate::trace::error::{Result, TraceError};
use std::collections::HashMap;
use std::path::PathBuf;

/// Expands directories into their `*.json` / `*.json.gz` files (sorted) and checks the rest:
/// each must be a regular file of a sane size ([`crate::files::check_input`]), and no trace may
/// be given twice (the same file after canonicalisation, or the same bytes under two names).
pub(super) fn expand_inputs(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let files = expand_paths(paths)?;
    refuse_duplicates(&files)?;
    Ok(files)
}

pub(super) fn refuse_duplicates(files: &[PathBuf]) -> Result<()> {
    let mut seen_path: HashMap<PathBuf, usize> = HashMap::new();
    let mut seen_print: HashMap<(u64, u64), usize> = HashMap::new();
    for (i, f) in files.iter().enumerate() {
        let canon = f.canonicalize().unwrap_or_else(|_| f.clone());
        if let Some(&j) = seen_path.get(&canon) {
            return Err(TraceError::DuplicateFile {
                first: files[j].clone(),
                second: f.clone(),
                how: "one file, passed twice",
            });
        }
        seen_path.insert(canon, i);
        let print = fingerprint(f)?;
        if let Some(&j) = seen_print.get(&print) {
            return Err(TraceError::DuplicateFile {
                first: files[j].clone(),
                second: f.clone(),
                how: "identical contents",
            });
        }
        seen_print.insert(print, i);
    }
    Ok(())
}

/// (length, hash of the first MiB and the last 64 KiB): equal for copies of one file, and
/// different for two ranks' files, which differ in their first bytes (distributedInfo, trace
/// id, timestamps). Costs two small reads whatever the file's size.
pub(super) fn fingerprint(path: &std::path::Path) -> Result<(u64, u64)> {
    use std::hash::Hasher;
    use std::io::{Read, Seek, SeekFrom};
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let mut buf = vec![0u8; 1 << 20];
    let n = read_up_to(&mut f, &mut buf).map_err(io)?;
    h.write(&buf[..n]);
    if len > buf.len() as u64 {
        f.seek(SeekFrom::Start(len.saturating_sub(1 << 16)))
            .map_err(io)?;
        let n = read_up_to(&mut f, &mut buf[..1 << 16]).map_err(io)?;
        h.write(&buf[..n]);
    }
    fn read_up_to(f: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            match f.read(&mut buf[n..])? {
                0 => break,
                k => n += k,
            }
        }
        Ok(n)
    }
    Ok((len, h.finish()))
}

pub(super) fn expand_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let rd = std::fs::read_dir(p).map_err(|source| TraceError::Io {
                path: p.clone(),
                source,
            })?;
            let mut files: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    f.is_file()
                        && f.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(crate::trace::format::is_trace_name)
                })
                .collect();
            if files.is_empty() {
                return Err(TraceError::EmptyDirectory { path: p.clone() });
            }
            files.sort();
            out.extend(files);
        } else if p.symlink_metadata().is_err() {
            return Err(TraceError::NotATrace { path: p.clone() });
        } else {
            // A FIFO, a device or an oversized file is refused here, before a byte is read.
            crate::files::check_input(p, crate::files::InputKind::Trace)
                .map_err(|e| crate::trace::parse::input_error(p, e))?;
            out.push(p.clone());
        }
    }
    Ok(out)
}
