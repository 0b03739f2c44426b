//! Command-line definitions and glue; each subcommand is a thin function over the library.

pub mod calibrate;
pub mod capacity;
pub mod compare;
pub mod intervals;
pub mod list;
pub mod output;
mod scenario_args;
pub mod simulate;
pub mod sweep;
pub mod trace;
pub mod validate;
pub mod whatif;

pub use scenario_args::ScenarioArgs;

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
    pub data_dir: Option<std::path::PathBuf>,
}

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
    /// What a change would buy: speculative decoding (`whatif spec-decode`).
    Whatif(whatif::WhatifArgs),
    /// A grid of scenarios (lists and ranges of knobs) priced by the aggregate fast path.
    Sweep(sweep::SweepArgs),
}

/// Runs a command; standard output is flushed and its errors mapped by [`output::finish`].
pub fn run(cli: Cli) -> Result<()> {
    output::finish(dispatch(cli))
}

fn dispatch(cli: Cli) -> Result<()> {
    if let Some(dir) = cli.data_dir {
        if !dir.join("models").is_dir() && !dir.join("data").is_dir() {
            return Err(crate::error::Error::Read {
                path: dir,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "--data-dir expects a folder holding models/ and data/",
                ),
            });
        }
        crate::bundle::set_data_dir(dir);
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
    }
}

/// Writes report text to stdout; a closed pipe ends the command quietly ([`output::finish`]).
fn print(text: &str) -> Result<()> {
    output::print(text)
}
