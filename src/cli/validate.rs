//! `decodesim validate`: every captured reference-step configuration against its simulation.

use super::print;
use crate::error::Result;
use crate::report::{self, Format};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Folder of reference-step traces (refstep_b<B>_c<CTX>_<setting>_rank<R>.*.json.gz).
    #[arg(long, value_name = "DIR", required_unless_present = "bench_serve")]
    pub traces: Option<PathBuf>,
    /// Instead of --traces: `vllm bench serve --save-result` files, each held against its
    /// serving run (`decodesim serve`) under --system, --calibration and --layers (Kimi-K2.5,
    /// the system's GPUs as TP, NCCL's own protocol choice; --metadata keys for the rest).
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["traces", "anchor", "write_model_error"])]
    bench_serve: Vec<PathBuf>,
    /// Calibration profile to validate (name or path).
    #[arg(long, default_value = "h200")]
    calibration: String,
    /// System the traces were captured on.
    #[arg(long, default_value = "h200-2x-nvlink")]
    pub system: String,
    /// Decoder layers of the reference step [default: inferred from the collectives per step;
    /// when given, it must match them unless --allow-mismatch].
    #[arg(long)]
    layers: Option<usize>,
    /// Configuration to calibrate from in the single-anchor mode [default: batch 16, context
    /// 8192, NCCL default, or the nearest captured].
    #[arg(long)]
    anchor: Option<String>,
    /// Unprofiled step times (CSV: configuration,step_us) to hold the predictions against
    /// [default: step_times.csv beside the traces, if there is one; else each trace's profiled
    /// step].
    #[arg(long, value_name = "FILE", conflicts_with = "bench_serve")]
    step_times: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Validate even when --layers or a configuration's name differs from what its trace shows.
    #[arg(long)]
    allow_mismatch: bool,
    /// Write the model-form error the residuals give (σ per cost family and of the idle per
    /// step) to FILE, the format of data/calibration/model_error.toml that every interval draws.
    #[arg(long, value_name = "FILE")]
    write_model_error: Option<PathBuf>,
    #[command(flatten)]
    intervals: super::intervals::IntervalArgs,
    #[command(flatten)]
    pub read: super::trace::TraceReadArgs,
    #[command(flatten)]
    ranks: super::trace::RankArgs,
}

pub fn run(a: ValidateArgs) -> Result<()> {
    let Some(traces) = a.traces.clone() else {
        return bench_serve(&a);
    };
    let classifier = super::trace::classifier(&a.read)?;
    let draws = if a.write_model_error.is_some() {
        a.intervals.draws_for_interval("--write-model-error")?
    } else {
        a.intervals.draws()?
    };
    let v = crate::validate::validate_with(
        &traces,
        &crate::validate::ValidateOptions {
            classifier: &classifier,
            system: a.system.clone(),
            calibration: a.calibration.clone(),
            layers: a.layers,
            anchor: a.anchor.clone(),
            draws,
            seed: a.intervals.interval_seed,
            step_times: a.step_times.clone(),
        },
        crate::validate::ValidateChecks {
            ranks: a.ranks.policy(),
            allow_mismatch: a.allow_mismatch,
        },
    )?;
    if let (Some(path), Some(iv)) = (&a.write_model_error, &v.intervals) {
        let command = format!(
            "decodesim validate --traces {} --calibration {} --write-model-error {}",
            crate::units::path(&traces),
            a.calibration,
            crate::units::path(path)
        );
        let system = crate::scenario::catalog::resolve_system(&a.system)?;
        let gpu =
            crate::scenario::SystemSpec::from_file(&system, &crate::scenario::catalog::gpus_dir())?
                .gpu
                .name;
        let text = iv.model_error.to_toml(&traces, &v.profile, &gpu, &command);
        crate::files::write_atomic_bytes(path, text.as_bytes())?;
    }
    match a.format {
        Format::Json => print(
            &(serde_json::to_string_pretty(&v).map_err(|e| crate::Error::WriteReport {
                what: "JSON report",
                message: e.to_string(),
            })? + "\n"),
        ),
        Format::Csv => print(&report::validation::to_csv(&v)?),
        Format::Table => print(&report::validation::render(&v)),
    }
}

/// `--bench-serve`: each result against its serving run, the median errors below.
fn bench_serve(a: &ValidateArgs) -> Result<()> {
    let mut paths = super::paths::Paths::new();
    for f in &a.bench_serve {
        paths.input("--bench-serve", f);
    }
    paths.check()?;
    let req = crate::sim::ScenarioRequest {
        system: a.system.clone(),
        calibration: Some(a.calibration.clone()),
        layers: a.layers,
        proto: crate::scenario::Proto::Auto,
        ..Default::default()
    };
    let base = crate::sim::serving::ServeOptions::default();
    let v = crate::validate::serving::validate_serving(
        &req,
        &base,
        &a.bench_serve,
        a.intervals.draws()?,
        a.intervals.interval_seed,
    )?;
    let (s, p) = req.load()?;
    let r = report::serving::ServeReport {
        scenario: &s,
        profile: &p,
        rows: v
            .runs
            .iter()
            .zip(&v.intervals)
            .map(|(c, iv)| report::serving::ServeRow {
                result: c.predicted.clone(),
                measured: Some((c.origin.clone(), c.measured.clone())),
                intervals: *iv,
            })
            .collect(),
    };
    match a.format {
        Format::Json => print(
            &(serde_json::to_string_pretty(&v).map_err(|e| crate::Error::WriteReport {
                what: "JSON report",
                message: e.to_string(),
            })? + "\n"),
        ),
        Format::Csv => print(&report::serving::to_csv(&r)),
        Format::Table => print(
            &(report::serving::render_table(&r)
                + &report::serving::error_lines(&v.errors, v.coverage)),
        ),
    }
}
