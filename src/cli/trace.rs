//! `decodesim trace summarize`, and the trace half of `decodesim compare` (flags the compare
//! command flattens in, and the function that compares a simulated step with a trace).

use crate::accounting::compare::{compare, Comparison};
use crate::accounting::infer::{check_or_allow, infer_scenario, Inferred};
use crate::accounting::Breakdown;
use crate::accounting::{summarize, SummaryOptions, TraceSummary};
use crate::error::{Error, Result};
use crate::report::plot::plot_comparison;
pub use crate::report::Format;
use crate::report::{comparison as cmp_report, trace_summary};
use crate::scenario::Scenario;
use crate::trace::classify::Classifier;
use crate::trace::rank::RankPolicy;
use crate::trace::TraceError;
use clap::{Args, Subcommand};
use regex::Regex;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    command: TraceCommand,
}

#[derive(Debug, Subcommand)]
enum TraceCommand {
    /// Steps, step time, time per category, idle, communication wait/transfer and unclassified
    /// kernels of torch.profiler traces (one file per rank, or a directory of them).
    Summarize(SummarizeArgs),
}

/// Options for reading traces, shared by `trace summarize` and `compare`.
#[derive(Debug, Clone, Args)]
pub struct TraceReadArgs {
    /// Kernel classification rules (TOML) replacing the built-in data/rules/kernels.toml.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Regex matching the names of annotations that mark steps, replacing the known markers
    /// (vLLM execute_*, SGLang step[...], ProfilerStep#N).
    #[arg(long, value_name = "REGEX")]
    pub step_marker: Option<String>,
    /// How many unclassified kernel names to list.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top_unclassified: usize,
}

/// Overrides of the checks that the rank files are one complete run.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct RankArgs {
    /// Analyse fewer rank files than distributedInfo.world_size says the run had.
    #[arg(long)]
    allow_partial_ranks: bool,
    /// Analyse files that look like different runs (different world size, backend, GPUs,
    /// profiler start more than 10 minutes apart, or different vLLM file-name stems).
    #[arg(long)]
    allow_mixed_runs: bool,
}

impl RankArgs {
    pub(crate) fn policy(self) -> RankPolicy {
        RankPolicy {
            allow_partial: self.allow_partial_ranks,
            allow_mixed_runs: self.allow_mixed_runs,
        }
    }
}

/// `--fail-above`: a finite, non-negative percentage (NaN would switch the check off).
fn parse_pct(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!(
            "'{s}' is not allowed: a percentage must be finite and at least 0"
        ))
    }
}

#[derive(Debug, Args)]
struct SummarizeArgs {
    /// Trace files (.json or .json.gz, one per rank) or directories of them.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    #[command(flatten)]
    pub read: TraceReadArgs,
    #[command(flatten)]
    ranks: RankArgs,
}

/// The flags `decodesim compare` takes for its measured side.
#[derive(Debug, Clone, Args)]
pub struct CompareTraceArgs {
    /// Measured traces (files or directories, one file per rank).
    #[arg(long = "trace", required = true, value_name = "PATH", num_args = 1..)]
    pub traces: Vec<PathBuf>,
    /// Draw predicted beside measured as stacked bars (.svg or .png).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,
    /// Exit with failure when |step-time error| exceeds this many percent.
    #[arg(long, value_name = "PCT", value_parser = parse_pct)]
    pub fail_above: Option<f64>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Compare even when the scenario's ranks, layers, batch or context differ from what the
    /// trace shows (the report then says so).
    #[arg(long)]
    pub allow_mismatch: bool,
    /// The same step timed without the profiler (µs, e.g. the median of timed CUDA-graph
    /// replays): the trace is brought to it before the comparison (what the profiler added
    /// comes out of its idle, then its waiting), since the profiler's graph-launch stall
    /// lengthens a short traced step.
    #[arg(long, value_name = "US")]
    pub unprofiled_step_us: Option<f64>,
    #[command(flatten)]
    pub read: TraceReadArgs,
    #[command(flatten)]
    pub ranks: RankArgs,
}

/// `--unprofiled-step-us` is a positive step time.
pub(crate) fn check_unprofiled(us: Option<f64>) -> Result<()> {
    match us {
        Some(v) if !(v.is_finite() && v > 0.0) => Err(Error::Flag {
            flag: "--unprofiled-step-us",
            value: v.to_string(),
            expected: "a positive step time in µs".into(),
        }),
        _ => Ok(()),
    }
}

/// The traced step brought to `--unprofiled-step-us` (unchanged without it), with a line that
/// says what was taken out, or why nothing was.
pub(crate) fn to_unprofiled(traced: &Breakdown, us: Option<f64>) -> (Breakdown, Option<String>) {
    use crate::category::Category;
    let Some(us) = us else {
        return (traced.clone(), None);
    };
    let step = traced.less_profiler(us);
    let t = traced.step_time_us;
    if us >= t {
        let line = format!(
            "--unprofiled-step-us {us:.1}: the traced step ({t:.1} µs) is no longer; the trace is used as it is"
        );
        return (step, Some(line));
    }
    let mut line = format!(
        "traced step {t:.1} µs brought to the unprofiled {us:.1} µs: {:.1} µs of idle and {:.1} µs of waiting taken out",
        traced.time(Category::Idle) - step.time(Category::Idle),
        traced.comm_wait_us - step.comm_wait_us
    );
    if step.step_time_us > us + 0.05 {
        line.push_str(&format!(
            "; {:.1} µs more is in kernels and stays",
            step.step_time_us - us
        ));
    }
    (step, Some(line))
}

/// Reads and summarizes the traces as the flags say, refusing rank files that are not one
/// complete run.
pub(crate) fn load(paths: &[PathBuf], read: &TraceReadArgs) -> Result<TraceSummary> {
    load_with(paths, read, RankPolicy::default())
}

/// Reads the rules of `--rules` (refused before reading when not a regular file), or the
/// built-in ones.
pub fn classifier(read: &TraceReadArgs) -> Result<Classifier> {
    Ok(match &read.rules {
        Some(p) => Classifier::from_file(p)?,
        None => Classifier::builtin(),
    })
}

/// [`load`] with the rank checks the user relaxed.
fn load_with(paths: &[PathBuf], read: &TraceReadArgs, ranks: RankPolicy) -> Result<TraceSummary> {
    let classifier = classifier(read)?;
    let marker = read
        .step_marker
        .as_deref()
        .map(|p| {
            Regex::new(p).map_err(|e| TraceError::StepMarker {
                pattern: p.to_string(),
                message: e.to_string(),
            })
        })
        .transpose()?;
    let opts = SummaryOptions {
        classifier: &classifier,
        step_marker: marker.as_ref(),
        top_unclassified: read.top_unclassified,
        ranks,
    };
    Ok(summarize(paths, &opts)?)
}

pub fn run(args: &TraceArgs, out: &mut dyn Write) -> Result<()> {
    match &args.command {
        TraceCommand::Summarize(a) => {
            let s = load_with(&a.paths, &a.read, a.ranks.policy())?;
            let text = match a.format {
                Format::Table => trace_summary::to_table(&s),
                Format::Json => format!("{:#}\n", trace_summary::to_json(&s)),
                Format::Csv => trace_summary::to_csv(&s),
            };
            out.write_all(text.as_bytes()).map_err(Error::Output)?;
            Ok(())
        }
    }
}

/// Checks `--fail-above` again for callers that did not come through clap.
fn check_fail_above(v: Option<f64>) -> Result<()> {
    match v {
        Some(x) if !(x.is_finite() && x >= 0.0) => Err(Error::Flag {
            flag: "--fail-above",
            value: x.to_string(),
            expected: "a percentage must be finite and at least 0".into(),
        }),
        _ => Ok(()),
    }
}

/// The measured half of `decodesim compare`: summarizes the traces, checks that `scenario`
/// (when given) is what the trace shows, compares the simulator's `predicted` step with them,
/// writes the report (and the plot), and returns the comparison; `Err(Mismatch)` before any
/// report when the scenario differs from the trace (unless `--allow-mismatch`), and
/// `Err(AboveTolerance)` when `--fail-above` is given and exceeded, after the report is written.
pub fn run_compare(
    predicted: &Breakdown,
    scenario: Option<&Scenario>,
    args: &CompareTraceArgs,
    title: &str,
    out: &mut dyn Write,
) -> Result<Comparison> {
    check_fail_above(args.fail_above)?;
    let measured = load_measured(args)?;
    compare_loaded(predicted, scenario, args, &measured, &[], title, out)
}

/// The traces of `compare`, read as its flags say (a bad `--unprofiled-step-us` is refused
/// before any is read).
pub(crate) fn load_measured(args: &CompareTraceArgs) -> Result<TraceSummary> {
    check_unprofiled(args.unprofiled_step_us)?;
    load_with(&args.traces, &args.read, args.ranks.policy())
}

/// [`run_compare`] of traces already read; `defaults` are notes on the scenario settings
/// taken from the trace (flags not given), printed first.
pub(crate) fn compare_loaded(
    predicted: &Breakdown,
    scenario: Option<&Scenario>,
    args: &CompareTraceArgs,
    measured: &TraceSummary,
    defaults: &[String],
    title: &str,
    out: &mut dyn Write,
) -> Result<Comparison> {
    check_fail_above(args.fail_above)?;
    let inferred = infer_scenario(measured);
    let mut notes: Vec<String> = defaults.to_vec();
    notes.extend(match scenario {
        Some(sc) => check_or_allow(sc, &inferred, args.allow_mismatch)?,
        None => inferred.lines(),
    });
    let (step, note) = to_unprofiled(&measured.breakdown, args.unprofiled_step_us);
    notes.extend(note);
    let c = compare(predicted, &step);
    let text = render_comparison(&c, &inferred, &notes, args.format);
    out.write_all(text.as_bytes()).map_err(Error::Output)?;
    if let Some(p) = &args.plot {
        plot_comparison(&c, p, title)?;
        super::output::wrote("plot", p);
    }
    // `args.fail_above` is finite here (checked above), so the comparison cannot be skipped.
    if let Some(limit) = args.fail_above {
        match c.step_error_pct() {
            None => return Err(Error::NoMeasuredStep),
            Some(e) if e.abs() > limit => return Err(Error::AboveTolerance { error: e, limit }),
            Some(_) => {}
        }
    }
    Ok(c)
}

fn render_comparison(c: &Comparison, inferred: &Inferred, notes: &[String], f: Format) -> String {
    match f {
        Format::Table => {
            let mut t = String::from("the trace shows:\n");
            for n in notes {
                t.push_str(&format!("  {n}\n"));
            }
            t.push('\n');
            t.push_str(&cmp_report::to_table(c));
            t
        }
        Format::Json => {
            let mut v = cmp_report::to_json(c);
            v["inferred"] = serde_json::json!(inferred);
            v["checks"] = serde_json::json!(notes);
            format!("{v:#}\n")
        }
        Format::Csv => cmp_report::to_csv(c),
    }
}
