//! Everything that can go wrong while reading and analysing a trace, as values that name the
//! file, the place and what was expected, so the CLI can print one clear line.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}: gzip stream is corrupt or truncated (after {offset} bytes of JSON): {source}"
    )]
    Gzip {
        path: PathBuf,
        offset: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: the file is empty; expected a Kineto/Chrome trace (JSON object with \"traceEvents\")")]
    Empty { path: PathBuf },
    #[error("{path}: invalid JSON at byte {offset}: {message}")]
    Json {
        path: PathBuf,
        offset: u64,
        message: String,
    },
    #[error("{path}: the JSON ends at byte {offset} inside {context}; the trace looks truncated")]
    Truncated {
        path: PathBuf,
        offset: u64,
        context: &'static str,
    },
    #[error("{path}: no \"traceEvents\" array; expected a Kineto/Chrome trace (an object with \"traceEvents\" or a top-level array of events)")]
    NoTraceEvents { path: PathBuf },
    #[error("{path}: not a trace file or directory of traces")]
    NotATrace { path: PathBuf },
    #[error("{path}: no trace files (*.json, *.json.gz) in this directory")]
    EmptyDirectory { path: PathBuf },
    #[error("ranks: {first} and {second} both claim rank {rank}; pass the traces of one run only")]
    DuplicateRank {
        rank: u32,
        first: PathBuf,
        second: PathBuf,
    },
    #[error("{path}: rules: {message}")]
    Rules { path: PathBuf, message: String },
    #[error("--step-marker: invalid regex '{pattern}': {message}")]
    StepMarker { pattern: String, message: String },
    #[error("no GPU activity in any of the given traces; nothing to summarize")]
    NoGpuActivity,
}

pub type Result<T> = std::result::Result<T, TraceError>;
