//! Errors are values: every failure a user can cause names the file, the field and what was
//! expected, and the binary turns it into a message and a non-zero exit.
//!
//! The ground floor: this module imports nothing of the crate but `units` (number formatting,
//! which imports only `bundle`). The error kinds of the trace reader and of the charts are
//! defined below it ([`trace`], [`plot`]) and re-exported by `trace` and `report::plot`, so
//! wrapping them here puts no module above the floor in an import cycle.

use std::path::{Path, PathBuf};

pub mod plot;
pub mod trace;

pub use plot::PlotError;
pub use trace::TraceError;

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
    Trace(#[from] TraceError),
    #[error(transparent)]
    Plot(#[from] PlotError),
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
    /// A job estimated above `--max-work` before any of it runs (`error::check_work`).
    #[error("{command}: {what} is about {units} work units, above --max-work {limit} (one unit is about 1 µs of CPU on a 2-core machine; {hint}); raise --max-work to at least {units_ceil} to run it anyway")]
    TooMuchWork {
        command: &'static str,
        what: String,
        units: String,
        units_ceil: u64,
        limit: u64,
        hint: String,
    },
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

/// The default `--max-work` of every command whose work grows with its lists (sweeps,
/// `whatif --vary`, `whatif spec-decode`, `capacity`): 10^7 units, about 10 s of CPU on the
/// 2-core machine the units were measured on, a few seconds of wall time.
pub const DEFAULT_MAX_WORK: u64 = 10_000_000;

/// Work units (≈ µs of CPU, measured on the 2-core development machine, release build) of the
/// items the bounded commands count. A sweep scenario on the fast path (benches/sweep_cpu.sh:
/// under 1 µs each end to end, CSV written).
pub const WORK_FAST_SCENARIO: f64 = 1.0;
/// One full-timeline simulation of a step, workload build and pricing included (benches
/// `simulate`: 1.7 ms for the default Kimi-K2.5 scenario; rounded up for larger systems).
pub const WORK_TIMELINE_STEP: f64 = 2_500.0;
/// One output token of a Monte Carlo user (`whatif spec-decode`'s TPOT percentiles: at most one
/// draw of an accepted length per token; 1.2e8 tokens took 0.57 s of CPU at k = 1..6, R = 0.5,
/// so ~5 ns; counted at twice that).
pub const WORK_MC_DRAW: f64 = 0.01;

/// Refuses a job of `units` work units above `limit`, before any of it runs. `what` says what
/// was counted ("4,294,967,296 scenarios"), `hint` how to make it smaller. `units` may be
/// astronomically large (it is computed in f64 from the lists' lengths, so it cannot wrap).
pub fn check_work(
    command: &'static str,
    what: impl Into<String>,
    units: f64,
    limit: u64,
    hint: impl Into<String>,
) -> Result<()> {
    if units <= limit as f64 {
        return Ok(());
    }
    let shown = if units < 1e15 {
        crate::units::grouped(units.ceil(), 0)
    } else {
        format!("{units:.2e}")
    };
    Err(Error::TooMuchWork {
        command,
        what: what.into(),
        units: shown,
        units_ceil: if units >= u64::MAX as f64 {
            u64::MAX
        } else {
            units.ceil() as u64
        },
        limit,
        hint: hint.into(),
    })
}
