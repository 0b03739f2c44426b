//! Where the bundled data lives and how names resolve to files.
//!
//! The data root (`--data-dir`, `$DECODESIM_HOME`, the source tree, else the files embedded
//! in the binary) is chosen by [`crate::bundle::data_root`].

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

pub(crate) fn data_root() -> PathBuf {
    crate::bundle::data_root()
}

/// An unknown NAME; when the bundled data could not be extracted, that is the error instead
/// (the choices would be empty).
fn unknown(kind: &'static str, name: &str, choices: Vec<String>) -> Error {
    match crate::bundle::extract_problem() {
        Some(problem) if choices.is_empty() => Error::Bundle { problem },
        _ => Error::Unknown {
            kind,
            name: name.to_string(),
            choices,
        },
    }
}

pub(crate) fn models_dir() -> PathBuf {
    data_root().join("models")
}
pub(crate) fn systems_dir() -> PathBuf {
    data_root().join("data").join("systems")
}
pub(crate) fn gpus_dir() -> PathBuf {
    systems_dir().join("gpus")
}
pub(crate) fn calibration_dir() -> PathBuf {
    data_root().join("data").join("calibration")
}

/// File stems with the given extension in `dir`, sorted.
pub(crate) fn stems(dir: &Path, ext: &str) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == ext))
        .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(String::from))
        .collect();
    out.sort();
    out
}

/// Calibration profiles: sub-folders of `data/calibration` holding a `profile.toml`.
pub(crate) fn profile_names() -> Vec<String> {
    let dir = calibration_dir();
    let mut out: Vec<String> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("profile.toml").is_file())
        .filter_map(|e| e.file_name().to_str().map(String::from))
        .collect();
    out.sort();
    out
}

/// Resolves NAME (a file stem in `dir`) or PATH (anything that exists or contains a separator).
fn resolve(kind: &'static str, arg: &str, dir: &Path, ext: &str) -> Result<PathBuf> {
    let as_path = Path::new(arg);
    if as_path.exists() || arg.contains('/') || arg.ends_with(&format!(".{ext}")) {
        if !as_path.exists() {
            return Err(Error::Read {
                path: as_path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            });
        }
        return Ok(as_path.to_path_buf());
    }
    let p = dir.join(format!("{arg}.{ext}"));
    if p.is_file() {
        Ok(p)
    } else {
        Err(unknown(kind, arg, stems(dir, ext)))
    }
}

pub(crate) fn resolve_model(arg: &str) -> Result<PathBuf> {
    resolve("model", arg, &models_dir(), "json")
}

pub(crate) fn resolve_system(arg: &str) -> Result<PathBuf> {
    resolve("system", arg, &systems_dir(), "toml")
}

/// A profile NAME (folder under data/calibration) or a PATH to a profile TOML file.
pub(crate) fn resolve_profile(arg: &str) -> Result<PathBuf> {
    let as_path = Path::new(arg);
    if as_path.is_file() {
        return Ok(as_path.to_path_buf());
    }
    if as_path.is_dir() && as_path.join("profile.toml").is_file() {
        return Ok(as_path.join("profile.toml"));
    }
    if arg.contains('/') || arg.ends_with(".toml") {
        let why = if as_path.exists() {
            "not a regular file or a folder holding profile.toml"
        } else {
            "no such file"
        };
        return Err(Error::Read {
            path: as_path.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, why),
        });
    }
    let p = calibration_dir().join(arg).join("profile.toml");
    if p.is_file() {
        Ok(p)
    } else {
        Err(unknown("calibration profile", arg, profile_names()))
    }
}
