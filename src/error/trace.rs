//! Everything that can go wrong while reading and analysing a trace, as values that name the
//! file, the place and what was expected, so the CLI can print one clear line. Defined here, on
//! the ground floor, so that [`crate::error::Error`] wraps it without importing `trace`;
//! `trace` re-exports it as `crate::trace::TraceError`.

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
    /// Two launches in the steps' windows carry one correlation id.
    #[error("{path}: correlation id {id} is carried by two kernel launches of the steps; the profiler gives each launch its own, so this trace's GPU work cannot be matched to its steps (a merged or rewritten trace?); expected one id per launch")]
    SharedCorrelation { path: PathBuf, id: u64 },
    /// Step markers found, none of which covers GPU work: taking the whole trace as one step
    /// would add several steps up.
    #[error("{path}: {count} step marker(s) found, but none covers GPU work (zero length, or nothing launched inside it), so the steps cannot be told apart; expected step annotations that enclose their launches, or pass --step-marker REGEX naming annotations that do")]
    EmptyStepMarkers { path: PathBuf, count: usize },
    /// `--step-marker` given, and no annotation of any rank both matches it and covers GPU work.
    #[error("--step-marker '{pattern}': no annotation in the traces matches it and covers GPU work ({found}); expected a regex matching the step annotations (e.g. 'execute_model', 'ProfilerStep'), or leave it out to find the steps from the usual markers")]
    StepMarkerUnmatched { pattern: String, found: String },
    /// The file itself is unusable (not a regular file, too large), refused before reading.
    #[error("{path}: {problem}")]
    Input { path: PathBuf, problem: String },
    /// A kept event's field has a value no profiler writes (negative, non-finite, wrong type).
    #[error("{path}: event #{index} '{event}': field '{field}' is {value}; {expected}")]
    Field {
        path: PathBuf,
        index: u64,
        event: String,
        field: &'static str,
        value: String,
        expected: String,
    },
    /// A GPU op lasting longer than the trace itself: a corrupt or mis-scaled duration that
    /// would otherwise become the step time.
    #[error("{path}: '{event}' has dur {} µs, {why}; refusing it rather than counting it as step time", if value.abs() < 1e15 { value.to_string() } else { format!("{value:e}") })]
    Duration {
        path: PathBuf,
        event: String,
        value: f64,
        why: String,
    },
    /// A GPU op whose timestamp lies far outside the rest of the trace: a corrupt `ts` that
    /// would otherwise stretch a step to it.
    #[error("{path}: '{event}' has ts {ts} µs, {gap} µs {side} (more than an hour: no profiled window has such a gap; a corrupt 'ts'); refusing it rather than counting it as step time")]
    Timestamp {
        path: PathBuf,
        event: String,
        ts: String,
        gap: String,
        side: &'static str,
    },
    #[error("{path}: unexpected {found} at byte {offset} after the trace's top-level JSON value ended; the file has trailing garbage (two traces concatenated?)")]
    TrailingData {
        path: PathBuf,
        offset: u64,
        found: String,
    },
    #[error("{first} and {second} are the same trace ({how}); pass each rank's file once")]
    DuplicateFile {
        first: PathBuf,
        second: PathBuf,
        how: &'static str,
    },
    #[error("{first} and {second} look like different runs: {why}; pass the rank files of one run (or --allow-mixed-runs if they are one run)")]
    MixedRuns {
        first: PathBuf,
        second: PathBuf,
        why: String,
    },
    #[error("{path}: {problem}; pass every rank's file (or --allow-partial-ranks to analyse these only)")]
    PartialRanks { path: PathBuf, problem: String },
}
