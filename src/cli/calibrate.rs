//! `decodesim calibrate`: fit a profile to measurement CSVs, or adjust one to a measured step.

use super::{print, ScenarioArgs};
use crate::error::{Error, Result};
use crate::report;
use crate::spec::catalog;
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
    #[arg(long, default_value_t = 15.0)]
    pub max_median_error: f64,
    /// Refuse the profile when a section's R² is below this.
    #[arg(long, default_value_t = 0.9)]
    pub min_r2: f64,
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

/// How a profile written to `out` refers to a measurement table: by file name when both sit in
/// one folder (profile and data move together), else by absolute path.
fn table_reference(table: &std::path::Path, out: &std::path::Path) -> String {
    let table = table.canonicalize().unwrap_or(table.to_path_buf());
    let out_dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let out_dir = out_dir.canonicalize().unwrap_or(out_dir.to_path_buf());
    match (table.parent(), table.file_name()) {
        (Some(dir), Some(name)) if dir == out_dir => name.to_string_lossy().into_owned(),
        _ => table.display().to_string(),
    }
}

fn write_profile(
    path: &std::path::Path,
    header: &str,
    p: &crate::cost::CalibrationProfile,
) -> Result<()> {
    let body = toml::to_string_pretty(p)
        .map_err(|e| Error::Other(format!("cannot serialize the profile: {e}")))?;
    std::fs::write(path, format!("{header}\n{body}")).map_err(|source| Error::Write {
        path: path.to_path_buf(),
        source,
    })
}

fn calibrate_from_trace(a: &CalibrateArgs) -> Result<()> {
    let measured = super::trace::load(
        &a.from_trace,
        &super::trace::TraceReadArgs {
            rules: None,
            step_marker: None,
            top_unclassified: 5,
        },
    )?;
    let (scenario, profile) = a.scenario.request().load()?;
    let name = a
        .from_trace
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(" ");
    // The same start-up outlier rule as `validate`.
    let (measured_step, excluded) = crate::validate::robust_breakdown(&measured);
    let mut r = crate::calibrate::anchor::fit_to_step(&scenario, &profile, &measured_step, &name)?;
    if let Some(t) = &profile.table {
        r.profile.measurements = Some(table_reference(&t.path, &a.out));
    }
    let header = format!(
        "# Written by `decodesim calibrate --from-trace {name}` from profile '{}'.\n# {}",
        profile.profile.name, r.profile.profile.provenance
    );
    write_profile(&a.out, &header, &r.profile)?;
    let before = crate::accounting::compare::compare(&r.before.mean, &measured_step);
    let after = crate::accounting::compare::compare(&r.after.mean, &measured_step);
    let mut text = format!(
        "single-anchor calibration of '{}' to {name}\n{}step time: measured {:.1} us, predicted before {:.1} us ({:+.1}%), after {:.1} us ({:+.1}%)\nfactors applied (time multipliers, or values set):\n",
        profile.profile.name,
        if excluded > 0 {
            format!("{excluded} start-up step(s) longer than twice the median step left out\n")
        } else {
            String::new()
        },
        measured_step.step_time_us,
        r.before.step_time_us(),
        before.step_error_pct().unwrap_or(f64::NAN),
        r.after.step_time_us(),
        after.step_error_pct().unwrap_or(f64::NAN),
    );
    for (k, f) in &r.factors {
        if k.ends_with("_us") {
            text.push_str(&format!("  {k:<26} = {f:.1} us\n"));
        } else {
            text.push_str(&format!("  {k:<26} x{f:.3}\n"));
        }
    }
    text.push_str(&crate::report::comparison::to_table(&after));
    text.push_str(&format!("\nprofile written to {}\n", a.out.display()));
    print(&text)
}

pub fn run(a: CalibrateArgs) -> Result<()> {
    let Some(dir) = a.measurements.clone() else {
        return calibrate_from_trace(&a);
    };
    let m = crate::measurements::Measurements::read_dir(&dir)?;
    let gpu_path = catalog::gpus_dir().join(format!("{}.toml", a.gpu));
    if !gpu_path.is_file() {
        return Err(Error::Unknown {
            kind: "GPU",
            name: a.gpu.clone(),
            choices: catalog::stems(&catalog::gpus_dir(), "toml"),
        });
    }
    let gpu = crate::spec::GpuSpec::from_file(&gpu_path)?;
    let fallback =
        crate::cost::CalibrationProfile::from_file(&catalog::resolve_profile(&a.fallback)?)?;
    let name = a.name.clone().unwrap_or_else(|| {
        a.out
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .unwrap_or("fitted")
            .to_string()
    });
    // The table path is stored relative to the profile, so profile and data move together.
    let table = if a.no_table || a.transfer_to.is_some() || m.kernels.is_empty() {
        None
    } else {
        let out_dir = a
            .out
            .parent()
            .map(|p| p.canonicalize().unwrap_or(p.to_path_buf()));
        let data_dir = dir.canonicalize().unwrap_or(dir.clone());
        if out_dir.as_deref() == Some(data_dir.as_path()) {
            Some("kernels.csv".to_string())
        } else {
            Some(data_dir.join("kernels.csv").display().to_string())
        }
    };
    let opts = crate::calibrate::FitOptions {
        max_median_err: a.max_median_error / 100.0,
        min_r2: a.min_r2,
        table,
        keep_fallback_for_poor: a.transfer_to.is_some(),
    };
    let result = crate::calibrate::calibrate(&m, &gpu, &name, &fallback, &opts)?;
    let mut result = result;
    if let Some(target) = &a.transfer_to {
        let target_path = catalog::gpus_dir().join(format!("{target}.toml"));
        let target_gpu =
            crate::spec::GpuSpec::from_file(&target_path).map_err(|_| Error::Unknown {
                kind: "GPU",
                name: target.clone(),
                choices: catalog::stems(&catalog::gpus_dir(), "toml"),
            })?;
        crate::calibrate::transfer(&mut result.profile, &fallback, &gpu, &target_gpu);
    }
    let header = format!(
        "# Written by `decodesim calibrate --measurements {} --gpu {} --fallback {}{}`.\n# {}\n# {}\n",
        dir.display(),
        a.gpu,
        a.fallback,
        a.transfer_to.as_ref().map(|t| format!(" --transfer-to {t}")).unwrap_or_default(),
        result.profile.profile.method,
        result.profile.profile.provenance
    );
    write_profile(&a.out, &header, &result.profile)?;
    print(&report::calibration::render_fit(&result))?;
    print(&format!("\nprofile written to {}\n", a.out.display()))
}
