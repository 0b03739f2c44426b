//! `decodesim calibrate`: fit a profile to measurement CSVs, or adjust one to a measured step.

use super::{print, ScenarioArgs};
use crate::error::Result;
use crate::report;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {
    /// Folder with kernels.csv, collectives.csv, launch.csv (schema in data/README.md).
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "from_trace",
        conflicts_with = "from_trace"
    )]
    pub measurements: Option<PathBuf>,
    /// Instead: adjust the scenario's profile (--calibration) so the simulator reproduces this
    /// measured step (trace files, one per rank, or a folder), category by category.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub from_trace: Vec<PathBuf>,
    /// The scenario the trace shows (used with --from-trace).
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Where to write the fitted profile TOML.
    #[arg(long, value_name = "PROFILE.toml")]
    pub out: PathBuf,
    /// GPU the measurements were taken on (a file stem in data/systems/gpus).
    #[arg(long, default_value = "h200-sxm")]
    pub gpu: String,
    /// Name recorded in the profile [default: the output folder's name].
    #[arg(long)]
    pub name: Option<String>,
    /// Profile supplying the sections the measurements do not cover.
    #[arg(long, default_value = "h200")]
    pub fallback: String,
    /// Refuse the profile when a section's median |relative error| exceeds this (percent).
    #[arg(long, default_value_t = 15.0, value_name = "PCT")]
    pub max_median_error: f64,
    /// Refuse the profile when a section's R² is below this (0 to 1) and a point misses by
    /// more than twice --max-median-error.
    #[arg(long, default_value_t = 0.9)]
    pub min_r2: f64,
    /// With --from-trace: refuse to write the profile when the adjusted profile still misses the
    /// measured step time by more than this (percent).
    #[arg(long, default_value_t = crate::calibrate::from_trace::DEFAULT_MAX_STEP_ERROR_PCT, value_name = "PCT")]
    pub max_step_error: f64,
    /// Write the profile even when a fit breaks the rules; each such section is listed in the
    /// profile's `[profile] poor_fit`, and every report using the profile warns.
    #[arg(long)]
    pub allow_poor_fit: bool,
    /// With --from-trace: go on when the scenario's ranks, layers, batch or context differ from
    /// what the trace shows (the report says so).
    #[arg(long)]
    pub allow_mismatch: bool,
    /// Do not reference kernels.csv as a measurement table: price every kernel by the fitted
    /// roofline law alone.
    #[arg(long)]
    pub no_table: bool,
    /// Write a profile for another GPU: its kernels take the fitted efficiencies and fixed
    /// costs (fractions of the peak transfer; the measured table does not), its collectives keep
    /// the fallback's entries for the paths the target has, plus the measured host path.
    #[arg(long, value_name = "GPU")]
    pub transfer_to: Option<String>,
}

pub fn run(a: CalibrateArgs) -> Result<()> {
    let Some(dir) = a.measurements.clone() else {
        return from_trace(&a);
    };
    let result = crate::calibrate::calibrate_dir(&crate::calibrate::DirRequest {
        measurements: dir,
        gpu: a.gpu.clone(),
        fallback: a.fallback.clone(),
        out: a.out.clone(),
        name: a.name.clone(),
        no_table: a.no_table,
        transfer_to: a.transfer_to.clone(),
        max_median_error_pct: a.max_median_error,
        min_r2: a.min_r2,
        allow_poor_fit: a.allow_poor_fit,
    })?;
    print(&report::calibration::render_fit(&result, &a.out))
}

fn from_trace(a: &CalibrateArgs) -> Result<()> {
    let measured = super::trace::load(
        &a.from_trace,
        &super::trace::TraceReadArgs {
            rules: None,
            step_marker: None,
            top_unclassified: 5,
        },
    )?;
    let (scenario, profile) = a.scenario.request().load()?;
    let inferred = crate::accounting::infer::infer_scenario(&measured);
    let notes = crate::accounting::infer::check_or_allow(&scenario, &inferred, a.allow_mismatch)?;
    // The same start-up outlier rule as `validate`.
    let (step, excluded) = crate::validate::robust_breakdown(&measured);
    let name = a
        .from_trace
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" ");
    let r = crate::calibrate::from_trace::calibrate_to_step(
        &scenario,
        &profile,
        &step,
        &name,
        &a.out,
        &crate::calibrate::from_trace::TraceFitOptions {
            max_step_error_pct: a.max_step_error,
            allow_poor_fit: a.allow_poor_fit,
        },
    )?;
    print(&report::calibration::render_from_trace(
        &r, excluded, &notes,
    ))
}
