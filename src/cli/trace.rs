//! `decodesim trace summarize`, and the trace half of `decodesim compare` (flags the compare
//! command flattens in, and the function that compares a simulated step with a trace).

use crate::accounting::compare::{compare_with_trace, Comparison};
use crate::accounting::Breakdown;
use crate::accounting::{summarize, SummaryOptions, TraceSummary};
use crate::error::{Error, Result};
use crate::report::plot::plot_comparison;
pub use crate::report::Format;
use crate::report::{comparison as cmp_report, trace_summary};
use crate::trace::classify::Classifier;
use crate::trace::TraceError;
use clap::{Args, Subcommand};
use regex::Regex;
use std::io::Write;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub command: TraceCommand,
}

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
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

#[derive(Debug, Args)]
pub struct SummarizeArgs {
    /// Trace files (.json or .json.gz, one per rank) or directories of them.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub read: TraceReadArgs,
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
    #[arg(long, value_name = "PCT")]
    pub fail_above: Option<f64>,
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub read: TraceReadArgs,
}

/// Reads and summarizes the traces as the flags say.
pub fn load(paths: &[PathBuf], read: &TraceReadArgs) -> Result<TraceSummary> {
    let classifier = match &read.rules {
        Some(p) => Classifier::from_file(p)?,
        None => Classifier::builtin(),
    };
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
    };
    Ok(summarize(paths, &opts)?)
}

pub fn run(args: &TraceArgs, out: &mut dyn Write) -> Result<()> {
    match &args.command {
        TraceCommand::Summarize(a) => {
            let s = load(&a.paths, &a.read)?;
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

/// The measured half of `decodesim compare`: summarizes the traces, compares them with the
/// simulator's `predicted` step, writes the report (and the plot), and returns the comparison;
/// `Err(AboveTolerance)` when `--fail-above` is given and exceeded, after the report is written.
pub fn run_compare(
    predicted: &Breakdown,
    args: &CompareTraceArgs,
    title: &str,
    out: &mut dyn Write,
) -> Result<Comparison> {
    let measured = load(&args.traces, &args.read)?;
    let c = compare_with_trace(predicted, &measured);
    let text = match args.format {
        Format::Table => cmp_report::to_table(&c),
        Format::Json => format!("{:#}\n", cmp_report::to_json(&c)),
        Format::Csv => cmp_report::to_csv(&c),
    };
    out.write_all(text.as_bytes()).map_err(Error::Output)?;
    if let Some(p) = &args.plot {
        plot_comparison(&c, p, title)?;
    }
    if let Some(limit) = args.fail_above {
        match c.step_error_pct() {
            None => return Err(Error::NoMeasuredStep),
            Some(e) if e.abs() > limit => return Err(Error::AboveTolerance { error: e, limit }),
            Some(_) => {}
        }
    }
    Ok(c)
}
