//! `decodesim simulate`: one decode step on every rank, where the time goes.

use super::{print, ScenarioArgs};
use crate::error::{Error, Result};
use crate::report::{self, Format};
use crate::scenario::deployment::DEFAULT_GPU_MEMORY_UTILIZATION;
use crate::sim;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Share of each GPU's memory vLLM may use (vLLM's --gpu-memory-utilization); the memory
    /// check holds weights + KV cache against it. Above 0, at most 1.
    #[arg(long, default_value_t = DEFAULT_GPU_MEMORY_UTILIZATION, value_name = "SHARE")]
    gpu_memory_utilization: f64,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Also write the simulated step as a Chrome trace (opens in Perfetto). Written to a
    /// temporary file and renamed, so concurrent runs never leave a torn file.
    #[arg(long, value_name = "FILE.json")]
    pub timeline: Option<PathBuf>,
    /// Ranks the --timeline file shows: numbers and ranges, e.g. 0-7,64. Default: every rank
    /// up to 64; beyond, node 0's ranks and the first rank of each other node (with a note).
    #[arg(long, value_name = "LIST")]
    pub timeline_ranks: Option<String>,
    #[command(flatten)]
    pub(crate) intervals: super::intervals::IntervalArgs,
    /// Print the calibration profile's full provenance (every table and fallback section),
    /// not its one-line summary.
    #[arg(long)]
    verbose: bool,
}

pub fn run(a: SimulateArgs) -> Result<()> {
    super::output::check_output_flag("--timeline", a.timeline.as_deref())?;
    super::paths::Paths::new()
        .scenario(&a.scenario.request())
        .output("--timeline", a.timeline.as_deref())
        .check()?;
    a.scenario.warn_noop_flags();
    let draws = a.intervals.draws()?;
    let sim =
        sim::simulate_with_memory_utilization(&a.scenario.request(), a.gpu_memory_utilization)?;
    let (iv, unc) = crate::whatif::uncertainty::scenario_intervals(
        &sim.scenario,
        &sim.profile,
        sim.step_time_us(),
        sim.tokens_per_s(),
        draws,
        a.intervals.interval_seed,
    )?;
    if a.timeline_ranks.is_some() && a.timeline.is_none() {
        return Err(Error::FlagUse {
            flag: "--timeline-ranks",
            problem: "chooses the ranks of the --timeline file: give --timeline FILE.json too"
                .into(),
        });
    }
    let mut note = None;
    if let Some(path) = &a.timeline {
        let ranks = match &a.timeline_ranks {
            Some(text) => parse_ranks(text, sim.timeline.ranks)?,
            None => {
                let (r, n) = report::chrome::default_ranks(&sim);
                note = n;
                r
            }
        };
        crate::files::write_atomic(path, |w| {
            report::chrome::write_chrome_trace_ranks(&sim, &ranks, w)
        })?;
    }
    if let Some(n) = &note {
        super::output::warn(n);
    }
    let text = match a.format {
        Format::Table if draws > 0 => {
            report::simulation::render_table(&sim, a.verbose)
                + &match &iv {
                    Ok(iv) => report::intervals::simulate_lines(iv, draws, &unc),
                    Err(why) => format!("interval: {why}\n"),
                }
        }
        Format::Table => report::simulation::render_table(&sim, a.verbose),
        Format::Json => {
            let mut v = report::simulation::to_json(&sim);
            if let (true, Err(why)) = (draws > 0, &iv) {
                v["intervals"] = serde_json::json!({ "unavailable": why });
            }
            if let (true, Ok(iv)) = (draws > 0, &iv) {
                v["intervals"] = intervals_json(iv, &unc, draws, a.intervals.interval_seed);
            }
            serde_json::to_string_pretty(&v).map_err(|e| Error::Serialize {
                what: "report",
                message: e.to_string(),
            })? + "\n"
        }
        Format::Csv => report::simulation::to_csv(&sim),
    };
    print(&text)?;
    if let Some(path) = &a.timeline {
        super::output::wrote("timeline", path);
    }
    Ok(())
}

/// The JSON report's intervals: p5/p50/p95, the draws and seed, and each source's σ.
fn intervals_json(
    iv: &crate::whatif::uncertainty::Intervals,
    unc: &crate::whatif::uncertainty::Uncertainty,
    draws: usize,
    seed: u64,
) -> serde_json::Value {
    let mut j = iv.json();
    j["draws"] = draws.into();
    j["seed"] = seed.into();
    j["sources"] = unc
        .sources
        .iter()
        .map(|s| {
            serde_json::json!({
                "name": s.name, "sigma": s.sigma, "provenance": s.provenance,
            })
        })
        .collect::<Vec<_>>()
        .into();
    j
}

/// `--timeline-ranks`: rank numbers and inclusive ranges (`0-7,64`), each below `ranks`.
fn parse_ranks(text: &str, ranks: usize) -> Result<Vec<usize>> {
    let bad = || {
        Error::Flag {
        flag: "--timeline-ranks",
        value: crate::units::echo(text).to_string(),
        expected: format!(
            "expected rank numbers and ranges like 0-7,64, each from 0 to {} (the step has {ranks} ranks)",
            ranks.saturating_sub(1)
        ),
    }
    };
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<usize>(), b.trim().parse::<usize>()),
            None => (part.parse::<usize>(), part.parse::<usize>()),
        };
        let (Ok(lo), Ok(hi)) = (lo, hi) else {
            return Err(bad());
        };
        if lo > hi || hi >= ranks {
            return Err(bad());
        }
        out.extend(lo..=hi);
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}
