//! Errors are values: every failure a user can cause names the file, the field and what was
//! expected, and the binary turns it into a message and a non-zero exit.

use crate::files::InputKind;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not valid {format}: {message}", path.display())]
    Syntax {
        path: PathBuf,
        format: &'static str,
        message: String,
    },
    #[error("{}: field '{field}': {expected}", path.display())]
    Field {
        path: PathBuf,
        field: String,
        expected: String,
    },
    /// The file itself is unusable (not a regular file, too large), refused before reading.
    #[error("{}: {problem}", path.display())]
    Input { path: PathBuf, problem: String },
    #[error("unknown {kind} '{name}'; choices: {}", choices.join(", "))]
    Unknown {
        kind: &'static str,
        name: String,
        choices: Vec<String>,
    },
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceError),
    #[error(transparent)]
    Plot(#[from] crate::report::plot::PlotError),
    #[error("writing the output: {0}")]
    Output(#[source] std::io::Error),
    #[error("step-time error {error:+.1}% is above --fail-above {limit}%")]
    AboveTolerance { error: f64, limit: f64 },
    #[error("step-time error cannot be computed: the measured step is empty")]
    NoMeasuredStep,
    /// The scenario is not what the trace shows (`accounting::infer::check_against`).
    #[error("the scenario does not match the trace:\n{}\n(check the scenario flags, or pass --allow-mismatch to compare anyway)", problems.iter().map(|p| format!("  {p}")).collect::<Vec<_>>().join("\n"))]
    Mismatch { problems: Vec<String> },
    /// A flag's value is outside what it allows (NaN, negative, ...).
    #[error("{flag} {value}: {expected}")]
    Flag {
        flag: &'static str,
        value: String,
        expected: String,
    },
    #[error("invalid scenario: {0}")]
    Scenario(String),
    #[error("{0}")]
    Other(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn field(path: &Path, field: impl Into<String>, expected: impl Into<String>) -> Self {
        Error::Field {
            path: path.to_path_buf(),
            field: field.into(),
            expected: expected.into(),
        }
    }
}

/// Reads a whole text file after checking it is a regular file of a sane size for its kind.
pub fn read_to_string(path: &Path, kind: InputKind) -> Result<String> {
    crate::files::read_text(path, kind)
}

/// Reads and deserializes a TOML file, naming the file in the error.
pub fn read_toml<T: serde::de::DeserializeOwned>(path: &Path, kind: InputKind) -> Result<T> {
    let text = read_to_string(path, kind)?;
    toml::from_str(&text).map_err(|e| Error::Syntax {
        path: path.to_path_buf(),
        format: "TOML",
        message: e.to_string().trim_end().to_string(),
    })
}
