//! Command-line definitions and glue; each subcommand is a thin function over the library.

pub mod calibrate;
pub mod capacity;
pub mod compare;
mod intervals;
mod list;
mod output;
mod paths;
mod scenario_args;
pub mod serve;
pub mod simulate;
pub mod sweep;
pub mod trace;
pub mod validate;
mod whatif;

use scenario_args::ScenarioArgs;

use crate::error::Result;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "decodesim",
    version,
    about = "Decode-step simulator and cost model for LLM inference, held against real profiler traces"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Read models, systems and profiles from DIR (holding models/ and data/) instead of the
    /// bundled copy; the DECODESIM_HOME variable does the same.
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<std::path::PathBuf>,
}

// The enum is built once per run from the command line; boxing the large argument structs
// would only add noise to clap's derive.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Simulate one decode step on every rank and show where the time goes.
    Simulate(simulate::SimulateArgs),
    /// List the bundled models, systems and calibration profiles.
    List,
    /// Fit a calibration profile to the harness's measurement CSVs.
    Calibrate(calibrate::CalibrateArgs),
    /// Read torch.profiler (Kineto) traces: steps, time per category, idle, communication.
    Trace(trace::TraceArgs),
    /// Simulate a scenario and hold it against measured traces, category by category.
    Compare(compare::CompareArgs),
    /// KV-cache capacity as vLLM accounts GPU memory, throughput and TPOT by concurrency up to
    /// it, and the cheapest deployment for a target.
    Capacity(capacity::CapacityArgs),
    /// Simulate every captured reference-step configuration and report the prediction error,
    /// then calibrate from one trace and predict the rest.
    Validate(validate::ValidateArgs),
    /// What a change would buy: variants of the scenario flags (`whatif --vary KEY=V1,V2,...`)
    /// or speculative decoding (`whatif spec-decode`).
    Whatif(whatif::WhatifArgs),
    /// A grid of scenarios (lists and ranges of knobs) priced by the aggregate fast path.
    Sweep(sweep::SweepArgs),
    /// A `vllm bench serve` run played step by step, chunked prefill mixed into the decode
    /// steps: TTFT, TPOT, ITL and throughput as the benchmark reports them.
    Serve(serve::ServeArgs),
}

/// The width every line of `--help` fits in.
const HELP_WIDTH: usize = 100;

/// Columns a flag's help is indented by when it sits below the flag (clap's layout).
const HELP_INDENT: usize = 10;

/// The command line, its help wrapped to [`HELP_WIDTH`] columns (clap prints help as written
/// unless built with its `wrap_help` feature), each flag's help on the line below the flag.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    wrap_help(Cli::command())
}

/// Parses the process's arguments through [`command`] (clap's own errors and help exit).
pub fn parse() -> Cli {
    use clap::FromArgMatches;
    let m = command().get_matches();
    Cli::from_arg_matches(&m).unwrap_or_else(|e| e.exit())
}

fn wrap_help(cmd: clap::Command) -> clap::Command {
    let width = HELP_WIDTH - HELP_INDENT;
    let about = cmd.get_about().map(|a| wrap(&a.to_string(), width));
    let long_about = cmd.get_long_about().map(|a| wrap(&a.to_string(), width));
    let mut cmd = cmd
        .next_line_help(true)
        .mut_args(|a| wrap_arg(a, width))
        .mut_subcommands(wrap_help);
    if let Some(a) = about {
        cmd = cmd.about(a);
    }
    if let Some(a) = long_about {
        cmd = cmd.long_about(a);
    }
    cmd
}

/// An argument's help wrapped to `width`, with its default and choices written into it before
/// (clap would append them after, unwrapped).
fn wrap_arg(a: clap::Arg, width: usize) -> clap::Arg {
    let mut extra = String::new();
    let takes_values = a.get_action().takes_values();
    if takes_values && !a.is_hide_default_value_set() && !a.get_default_values().is_empty() {
        let d: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        extra += &format!(" [default: {}]", d.join(","));
    }
    let choices: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|p| !p.is_hide_set())
        .map(|p| p.get_name().to_string())
        .collect();
    if takes_values && !a.is_hide_possible_values_set() && !choices.is_empty() {
        extra += &format!(" [possible values: {}]", choices.join(", "));
    }
    let help = a.get_help().map(|h| wrap(&format!("{h}{extra}"), width));
    let long = a
        .get_long_help()
        .map(|h| wrap(&format!("{h}{extra}"), width));
    let mut a = a;
    if takes_values {
        a = a.hide_default_value(true).hide_possible_values(true);
    }
    if let Some(h) = help {
        a = a.help(h);
    }
    if let Some(h) = long {
        a = a.long_help(h);
    }
    a
}

/// Greedy word wrap of each line of `text` to `width` characters.
fn wrap(text: &str, width: usize) -> String {
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        let mut cur = String::new();
        for word in line.split(' ').filter(|w| !w.is_empty()) {
            let n = cur.chars().count();
            if n > 0 && n + 1 + word.chars().count() > width {
                out.push(std::mem::take(&mut cur));
            }
            if !cur.is_empty() {
                cur.push(' ');
            }
            cur.push_str(word);
        }
        out.push(cur);
    }
    out.join("\n")
}

/// Runs a command; standard output is flushed and its errors mapped by [`output::finish`].
pub fn run(cli: Cli) -> Result<()> {
    let r = dispatch(cli);
    if let Some(note) = crate::bundle::repair_note() {
        output::warn(&note);
    }
    output::finish(r)
}

/// Refuses a data folder (`--data-dir`, `$DECODESIM_HOME`) holding neither `models/` nor
/// `data/`: every name would then be unknown, with no choices to list.
fn check_data_dir(dir: &std::path::Path, what: &str) -> Result<()> {
    if !dir.join("models").is_dir() && !dir.join("data").is_dir() {
        let why = if dir.is_dir() {
            "holds neither models/ nor data/"
        } else if dir.exists() {
            "is not a folder"
        } else {
            "does not exist"
        };
        return Err(crate::error::Error::Read {
            path: dir.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{what} {why}; expected a folder holding models/ and data/"),
            ),
        });
    }
    Ok(())
}

fn dispatch(cli: Cli) -> Result<()> {
    if let Some(dir) = cli.data_dir {
        check_data_dir(&dir, "--data-dir")?;
        crate::bundle::set_data_dir(dir);
    } else if let Some(dir) = crate::bundle::home_var() {
        check_data_dir(&dir, "DECODESIM_HOME")?;
    }
    match cli.command {
        Command::Simulate(a) => simulate::run(a),
        Command::List => list::run(),
        Command::Calibrate(a) => calibrate::run(a),
        Command::Trace(a) => trace::run(&a, &mut output::Stdout),
        Command::Compare(a) => compare::run(a),
        Command::Validate(a) => validate::run(a),
        Command::Whatif(a) => whatif::run(a),
        Command::Sweep(a) => sweep::run(a),
        Command::Capacity(a) => capacity::run(a),
        Command::Serve(a) => serve::run(a),
    }
}

/// Writes report text to stdout; a closed pipe ends the command quietly ([`output::finish`]).
fn print(text: &str) -> Result<()> {
    output::print(text)
}
