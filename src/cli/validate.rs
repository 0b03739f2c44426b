//! `decodesim validate`: every captured reference-step configuration against its simulation.

use super::print;
use crate::error::Result;
use crate::report::{self, Format};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// Folder of reference-step traces (refstep_b<B>_c<CTX>_<setting>_rank<R>.*.json.gz).
    #[arg(long, value_name = "DIR")]
    pub traces: PathBuf,
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
    let classifier = super::trace::classifier(&a.read)?;
    let draws = if a.write_model_error.is_some() {
        a.intervals.draws_for_interval("--write-model-error")?
    } else {
        a.intervals.draws()?
    };
    let v = crate::validate::validate_with(
        &a.traces,
        &crate::validate::ValidateOptions {
            classifier: &classifier,
            system: a.system.clone(),
            calibration: a.calibration.clone(),
            layers: a.layers,
            anchor: a.anchor.clone(),
            draws,
            seed: a.intervals.interval_seed,
        },
        crate::validate::ValidateChecks {
            ranks: a.ranks.policy(),
            allow_mismatch: a.allow_mismatch,
        },
    )?;
    if let (Some(path), Some(iv)) = (&a.write_model_error, &v.intervals) {
        let command = format!(
            "decodesim validate --traces {} --calibration {} --write-model-error {}",
            crate::units::path(&a.traces),
            a.calibration,
            crate::units::path(path)
        );
        let text = iv.model_error.to_toml(&a.traces, &v.profile, &command);
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
