//! Errors are values: every failure a user can cause names the file, the field and what was
//! expected, and the binary turns it into a message and a non-zero exit.
//!
//! The ground floor: this module imports nothing of the crate but `units` (number formatting,
//! which imports only `bundle`). The error kinds of the trace reader and of the charts are
//! defined below it ([`trace`], [`plot`]) and re-exported by `trace` and `report::plot`, so
//! wrapping them here puts no module above the floor in an import cycle.

use std::path::{Path, PathBuf};

pub(crate) mod plot;
pub(crate) mod trace;

use plot::PlotError;
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

    // Typed scenario problems. Each prints "invalid scenario: ..." as `Scenario(String)` does;
    // [`Error::scenario_problem`] gives the text after that prefix for any of them.
    /// A scenario flag's value outside its range; `expected` says what is accepted.
    #[error("invalid scenario: {flag} {value} is out of range: {expected}")]
    ScenarioRange {
        flag: &'static str,
        value: String,
        expected: String,
    },
    /// A flag's value that does not fit the rest of the scenario (the model, the system, the
    /// other flags). `problem` follows the value as printed: ` needs 8 GPUs but ...` or
    /// `: with data parallel 1 ...`, and says what would be accepted.
    #[error("invalid scenario: {flag} {value}{problem}")]
    ScenarioSetting {
        flag: &'static str,
        value: String,
        problem: String,
    },
    /// A flag given where it does not apply, or used in a way that needs another.
    #[error("invalid scenario: {flag} {problem}")]
    FlagUse { flag: &'static str, problem: String },
    /// A list flag whose text does not parse.
    #[error("invalid scenario: {flag} '{text}': {problem} (expected {expected})")]
    FlagList {
        flag: String,
        text: String,
        problem: String,
        expected: String,
    },
    /// One rate of `--acceptance-per-position` refused (1-based position).
    #[error(
        "invalid scenario: --acceptance-per-position: position {position} rate {rate} {problem}"
    )]
    PositionRate {
        position: usize,
        rate: f64,
        problem: String,
    },
    /// A required input of a command not given; `choices` lists the ways to give it.
    #[error("invalid scenario: give the {what}: {choices}")]
    Missing {
        what: &'static str,
        choices: &'static str,
    },
    /// A problem of one part of a scenario (a draft model, a `--vary` variant), the part named.
    #[error("invalid scenario: {part}: {problem}")]
    ScenarioPart { part: String, problem: String },
    /// A request longer than the model's context window.
    #[error("invalid scenario: a request of {tokens} tokens ({described}) is longer than {model}'s max_position_embeddings = {max}; expected at most {max} tokens per request")]
    RequestTooLong {
        tokens: u64,
        described: String,
        model: String,
        max: u64,
    },
    /// Not one request fits in the KV cache a GPU has left.
    #[error("invalid scenario: memory binds: one request of {tokens} KV tokens ({described}) does not fit in the {kv_tokens} KV tokens per GPU that {model} at TP={tp} leaves (GPU KV cache size: {kv_tokens} tokens); use a larger TP, --dcp, FP8 KV, or a shorter context")]
    KvDoesNotFit {
        tokens: f64,
        described: String,
        kv_tokens: u64,
        model: String,
        tp: u32,
    },
    /// The intervals cannot be drawn for this scenario (the fast path's refusal).
    #[error("invalid scenario: {why}; pass --draws 0 for the answer without intervals")]
    NoIntervals { why: String },

    // Typed problems of inputs, fits and outputs.
    /// A folder holding none of the files a command reads.
    #[error("{}: {what} (expected {expected})", path.display())]
    NothingFound {
        path: PathBuf,
        what: &'static str,
        expected: String,
    },
    /// A flag that needs an input given none.
    #[error("{flag}: no {what} given")]
    NoInput {
        flag: &'static str,
        what: &'static str,
    },
    /// One value of a hand-written row refused: where (file and line, or the flag), the
    /// column, the value given and what is expected.
    #[error("{place}: {field} '{value}': expected {expected}")]
    BadValue {
        place: String,
        field: String,
        value: String,
        expected: String,
    },
    /// A row of the wrong shape.
    #[error("{place}: expected {expected}")]
    BadRow { place: String, expected: String },
    /// Two inputs that contradict each other (the same point measured twice, two
    /// incompatible points).
    #[error("{first} and {second}: {problem}")]
    Conflict {
        first: String,
        second: String,
        problem: String,
    },
    /// Data a fit cannot use: which data (`source`) and why.
    #[error("{source_name}: {problem}")]
    FitData {
        source_name: String,
        problem: String,
    },
    /// A calibration that would not be trustworthy, refused with the reason and the way out.
    #[error("calibration refused: {reason}")]
    CalibrationRefused { reason: String },
    /// A benchmark point whose scenario does not validate.
    #[error("{point}: the scenario of this point is invalid: {problem}")]
    PointInvalid { point: String, problem: String },
    /// One captured configuration of `validate` failed: the case named, the error kept.
    #[error("{case}: {error}")]
    Case { case: String, error: Box<Error> },
    /// One captured configuration of `validate` cannot be used.
    #[error("{case}: {problem}")]
    CaseProblem { case: String, problem: String },
    /// A command whose target no candidate meets (`capacity`), with the first reason.
    #[error("{command}: {reason}")]
    Unmet {
        command: &'static str,
        reason: String,
    },
    /// A report or profile that cannot be serialized.
    #[error("cannot serialize the {what}: {message}")]
    Serialize { what: &'static str, message: String },
    /// A report that cannot be written into its buffer (CSV writer).
    #[error("cannot write the {what}: {message}")]
    WriteReport { what: &'static str, message: String },
    /// A report's bytes that are not what they should be (not UTF-8).
    #[error("{what}: {message}")]
    Encoding { what: &'static str, message: String },
    /// The bundled data could not be extracted (`bundle::extract_problem`).
    #[error("{problem}")]
    Bundle { problem: String },
    /// An internal invariant broken (a bundled file without what the code relies on, a worker
    /// that did not finish): a bug, not the user's input.
    #[error("{0}")]
    Invariant(&'static str),
    /// A flag's use, as a whole, is wrong (a list form, a key given twice, nothing to do).
    #[error("invalid scenario: {flag}: {problem}")]
    Usage { flag: String, problem: String },
    /// A settings key (`--vary`, `--grid`, a CSV column) that no knob has.
    #[error("invalid scenario: {place}: unknown key '{key}' (allowed: {allowed})")]
    UnknownKey {
        place: String,
        key: String,
        allowed: String,
    },
    #[error("invalid scenario: the sweep grid is empty")]
    EmptyGrid,
    /// A scenario the fast path cannot stand for with one rank's recursion.
    #[error("invalid scenario: {0}")]
    FastPathRefused(&'static str),
    /// The fast path's probes found an op field that is not linear in its basis: a bug.
    #[error("fast path: the {what} of op {op} is not linear in the basis")]
    NotLinear { what: String, op: String },
    /// Weights and buffers alone exceed the memory the utilization allows.
    #[error("invalid scenario: {model} at TP={tp} does not fit on {gpu}: weights, activations, CUDA graphs and communication buffers need {need} per GPU but --gpu-memory-utilization {utilization} allows {allows}; no memory is left for the KV cache (use a larger TP, a larger utilization or another system)")]
    NoKvMemory {
        model: String,
        tp: u32,
        gpu: String,
        need: String,
        utilization: String,
        allows: String,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// For an invalid-scenario error (`Scenario(String)` or one of the typed scenario
    /// variants), its text without the "invalid scenario: " prefix; `None` for any other error.
    /// Callers that skip infeasible scenarios (capacity, sweeps) or re-label them (a draft, a
    /// `--vary` variant) match on this rather than on one variant.
    pub(crate) fn scenario_problem(&self) -> Option<String> {
        match self {
            Error::ScenarioRange { .. }
            | Error::ScenarioSetting { .. }
            | Error::FlagUse { .. }
            | Error::FlagList { .. }
            | Error::PositionRate { .. }
            | Error::Missing { .. }
            | Error::ScenarioPart { .. }
            | Error::RequestTooLong { .. }
            | Error::KvDoesNotFit { .. }
            | Error::NoIntervals { .. }
            | Error::Usage { .. }
            | Error::UnknownKey { .. }
            | Error::EmptyGrid
            | Error::FastPathRefused(_)
            | Error::NoKvMemory { .. } => {
                let text = self.to_string();
                Some(
                    text.strip_prefix("invalid scenario: ")
                        .unwrap_or(&text)
                        .to_string(),
                )
            }
            _ => None,
        }
    }

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
pub(crate) const DEFAULT_MAX_WORK: u64 = 10_000_000;

/// Work units (≈ µs of CPU, measured on the 2-core development machine, release build) of the
/// items the bounded commands count. A sweep scenario on the fast path (benches/sweep_cpu.sh:
/// under 1 µs each end to end, CSV written).
pub(crate) const WORK_FAST_SCENARIO: f64 = 1.0;
/// Loading one layout of a sweep and fitting its fast path (model, system, profile, the
/// basis probes, the collectives of every NCCL setting): 0.05–0.13 s measured for a TP or PP
/// layout.
pub(crate) const WORK_SWEEP_LAYOUT: f64 = 100_000.0;
/// A speculative row (draft tokens above 0): its draft passes, the verify pass and the
/// acceptance, about 3.5 µs measured (a plain row about 1).
pub(crate) const WORK_FAST_SPEC_ROW: f64 = 4.0;
/// With expert parallelism the fast path fits the expected slowest rank from seeded routing
/// draws over every EP rank: 0.36 s at EP 16, 0.65 s at EP 32, 2.5 s at EP 128 measured, about
/// 20 ms per rank.
pub(crate) const WORK_EP_LAYOUT_PER_RANK: f64 = 20_000.0;
/// Each distinct batch of an expert-parallel layout draws every rank's expert loads again:
/// measured 1 ms per batch at EP 16, 1.5 ms at EP 32, 11 ms at EP 128 (batches near 1 per
/// rank), growing to 24 and 52 ms at 8,192 and 16,368 sequences: about 80 µs per rank plus
/// 3 µs per sequence.
pub(crate) const WORK_EP_BATCH_PER_RANK: f64 = 80.0;
pub(crate) const WORK_EP_BATCH_PER_SEQ: f64 = 3.0;
/// `whatif --vary` loads every variant as its own scenario (model, system, profile and its
/// measured tables): about 20 ms each measured, more than its timeline (32 variants at batch
/// 32..63 took 0.66 s of CPU without intervals, at TP8 and at DP128 alike).
pub(crate) const WORK_VARIANT_LOAD: f64 = 20_000.0;
/// Each interval draw of a variant replays it: about 50 µs plus 4 µs per expert-parallel rank
/// (200 draws over 32 variants: 0.34 s more at TP8, 3.5 s more at DP128).
pub(crate) const WORK_VARIANT_DRAW: f64 = 50.0;
pub(crate) const WORK_VARIANT_DRAW_PER_RANK: f64 = 4.0;
/// One full-timeline simulation of a step, workload build and pricing included (benches
/// `simulate`: 1.7 ms for the default Kimi-K2.5 scenario; rounded up for larger systems).
pub(crate) const WORK_TIMELINE_STEP: f64 = 2_500.0;
/// One output token of a Monte Carlo user (`whatif spec-decode`'s TPOT percentiles: at most one
/// draw of an accepted length per token; 1.2e8 tokens took 0.57 s of CPU at k = 1..6, R = 0.5,
/// so ~5 ns; counted at twice that).
pub(crate) const WORK_MC_DRAW: f64 = 0.01;

/// Refuses a job of `units` work units above `limit`, before any of it runs. `what` says what
/// was counted ("4,294,967,296 scenarios"), `hint` how to make it smaller. `units` may be
/// astronomically large (it is computed in f64 from the lists' lengths, so it cannot wrap).
pub(crate) fn check_work(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_scenario_errors_print_as_invalid_scenarios_and_give_their_problem() {
        let e = Error::ScenarioSetting {
            flag: "--tp",
            value: "8".into(),
            problem: " needs 8 GPUs but system 'x' has 4".into(),
        };
        assert_eq!(
            e.to_string(),
            "invalid scenario: --tp 8 needs 8 GPUs but system 'x' has 4"
        );
        assert_eq!(
            e.scenario_problem().as_deref(),
            Some("--tp 8 needs 8 GPUs but system 'x' has 4")
        );
        let e = Error::ScenarioRange {
            flag: "--batch",
            value: "0".into(),
            expected: "expected 1 to 4096 sequences".into(),
        };
        assert_eq!(
            e.to_string(),
            "invalid scenario: --batch 0 is out of range: expected 1 to 4096 sequences"
        );
        assert_eq!(
            Error::EmptyGrid.scenario_problem().as_deref(),
            Some("the sweep grid is empty")
        );
        let other = Error::NoInput {
            flag: "--from-nccl-tests",
            what: "file",
        };
        assert_eq!(other.to_string(), "--from-nccl-tests: no file given");
        assert_eq!(other.scenario_problem(), None);
    }
}
