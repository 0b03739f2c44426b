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
    pub calibration: String,
    /// System the traces were captured on.
    #[arg(long, default_value = "h200-2x-nvlink")]
    pub system: String,
    /// Decoder layers of the reference step [default: inferred from the collectives per step].
    #[arg(long)]
    pub layers: Option<usize>,
    /// Configuration to calibrate from in the single-anchor mode [default: batch 16, context
    /// 8192, NCCL default, or the nearest captured].
    #[arg(long)]
    pub anchor: Option<String>,
    /// Output format (table or json).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    #[command(flatten)]
    pub read: super::trace::TraceReadArgs,
}

pub fn run(a: ValidateArgs) -> Result<()> {
    let classifier = match &a.read.rules {
        Some(p) => crate::trace::classify::Classifier::from_file(p),
        None => Ok(crate::trace::classify::Classifier::builtin()),
    }?;
    let v = crate::validate::validate(
        &a.traces,
        &crate::validate::ValidateOptions {
            classifier: &classifier,
            system: a.system.clone(),
            calibration: a.calibration.clone(),
            layers: a.layers,
            anchor: a.anchor.clone(),
        },
    )?;
    match a.format {
        Format::Json => print(&(serde_json::to_string_pretty(&v).expect("JSON value") + "\n")),
        _ => print(&report::validation::render(&v)),
    }
}
