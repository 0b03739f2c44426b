//! `calibrate --from-trace`: adjust a profile so the simulator reproduces one measured step, and
//! refuse to write it when even the adjusted profile misses the step by more than a stated
//! limit (the scenario then does not describe the trace, and the factors would be nonsense).

use super::anchor::{fit_to_step, AnchorResult};
use super::output::{table_reference, write_profile};
use crate::accounting::{compare, Breakdown, Comparison};
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::scenario::Scenario;
use std::path::{Path, PathBuf};

/// Default `--max-step-error`: the single-anchor fit reproduces its anchor within a few percent
/// when the scenario describes the trace (data/traces/h200: +0.9%).
pub(crate) const DEFAULT_MAX_STEP_ERROR_PCT: f64 = 10.0;

#[derive(Debug, Clone)]
pub struct TraceFitOptions {
    /// Refuse above this |step-time error| after the fit, percent.
    pub max_step_error_pct: f64,
    /// Write anyway, marked in `[profile] poor_fit`.
    pub allow_poor_fit: bool,
}

impl Default for TraceFitOptions {
    fn default() -> Self {
        TraceFitOptions {
            max_step_error_pct: DEFAULT_MAX_STEP_ERROR_PCT,
            allow_poor_fit: false,
        }
    }
}

/// What `calibrate --from-trace` did, for the report.
#[derive(Debug, Clone)]
pub struct TraceCalibration {
    /// The profile adjusted from.
    pub(crate) base: String,
    pub(crate) anchor_name: String,
    pub fit: AnchorResult,
    pub measured: Breakdown,
    pub before: Comparison,
    pub after: Comparison,
    pub(crate) out: PathBuf,
    /// Set when the fit missed the limit and was written because of `--allow-poor-fit`.
    pub poor: Option<String>,
}

/// Fits `profile` to the measured step, checks the result against the limit and writes it.
pub fn calibrate_to_step(
    scenario: &Scenario,
    profile: &CalibrationProfile,
    measured: &Breakdown,
    anchor_name: &str,
    out: &Path,
    o: &TraceFitOptions,
) -> Result<TraceCalibration> {
    let limit = o.max_step_error_pct;
    if !(limit.is_finite() && limit > 0.0) {
        return Err(Error::Flag {
            flag: "--max-step-error",
            value: limit.to_string(),
            expected: "expected a percentage above 0".into(),
        });
    }
    let mut fit = fit_to_step(scenario, profile, measured, anchor_name)?;
    let before = compare(&fit.before.mean, measured);
    let after = compare(&fit.after.mean, measured);
    let miss = match after.step_error_pct() {
        Some(e) if e.is_finite() && e.abs() <= limit => None,
        Some(e) => Some(format!(
            "after the fit the step time still misses the trace by {e:+.1}% (limit ±{limit}%, --max-step-error)"
        )),
        None => Some("the measured step is empty: the error cannot be computed".to_string()),
    };
    if let Some(why) = &miss {
        if !o.allow_poor_fit {
            return Err(Error::CalibrationRefused { reason: format!("{why}; the scenario probably does not describe the trace (ranks, layers, batch, context). No profile written; --allow-poor-fit writes it anyway, marked") });
        }
        fit.profile
            .profile
            .poor_fit
            .push(format!("from-trace {anchor_name}: {why}"));
    }
    if let Some(t) = &profile.table {
        fit.profile.measurements = Some(table_reference(&t.path, out));
    }
    let header = format!(
        "# Written by `decodesim calibrate --from-trace {anchor_name}` from profile '{}'.\n# {}",
        profile.profile.name, fit.profile.profile.provenance
    );
    write_profile(out, &header, &fit.profile)?;
    Ok(TraceCalibration {
        base: profile.profile.name.clone(),
        anchor_name: anchor_name.to_string(),
        fit,
        measured: measured.clone(),
        before,
        after,
        out: out.to_path_buf(),
        poor: miss,
    })
}
