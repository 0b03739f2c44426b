//! `calibrate --from-throughput FILE...`: a few end-to-end benchmark numbers (tokens/s or TPOT at
//! some concurrencies, from a CSV or `vllm bench serve --save-result` JSON files) fit a set of
//! factors on top of the bottom-up profile, by non-linear least squares over the simulator itself
//! (Levenberg–Marquardt, Jacobian by finite differences), with 95% confidence intervals.
//!
//! Which factors: `--factors` names them; without it the fit chooses among every factor of
//! [`FACTORS`] the ones these points identify (greedy pivoted QR on the Jacobian: largest
//! sensitivity first, the others orthogonalised against the chosen ones), at most points − 1,
//! and says for each factor why it was or was not chosen.
//!
//! Each point is simulated with its own scenario (context, KV dtype, DCP, NCCL settings); a
//! speculative-decoding point is priced as `whatif spec-decode` prices it (draft + verify + host
//! per step, mean acceptance length tokens per sequence per step).
//!
//! CSV: `concurrency,context` and `tokens_per_s` or `tpot_ms`; optional `kv_cache_dtype`
//! (bf16|fp8), `nccl_proto` (LL|LL128|Simple|auto), `nccl_algo` (Ring|Tree|auto), `p2p` (on|off),
//! `allreduce` (nccl only, for now), `dcp`, `spec_method` (eagle3|mtp), `draft_tokens`,
//! `acceptance_rate` or `acceptance_length`; anything else comes from the scenario flags.

mod factors;
mod model;
mod points;
mod result;
mod select;
mod solver;
mod writer;

use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::sim::ScenarioRequest;
pub use factors::{Factor, FactorSpec, ALL_FACTORS, FACTORS};
pub use model::predict;
use model::{starting_point, Model};
use nalgebra::DMatrix;
pub(crate) use points::{kv_dtype_bytes, model_id_matches, spec_point};
pub use points::{read_inputs, read_points, Measured, MeasuredAcceptance, Point, SpecPoint};
use result::{fit_result, fitted_intervals, no_progress, Solved};
use select::{
    check_servers, chosen_and_refused, drop_factor, factors_to_fit, first_choices,
    nothing_identified, rechoose, refuse_fixed_routing, refuse_named, refuse_unvaried, start_of,
};
use solver::solve_robust;
use std::path::PathBuf;
pub(crate) use writer::relocate;
use writer::sources_text;

/// What to fit and where to write it.
#[derive(Debug, Clone)]
pub struct ThroughputRequest {
    /// The scenario the benchmark ran (batch, context and per-point settings come from the
    /// points).
    pub base: ScenarioRequest,
    pub points: Vec<Point>,
    /// The input named in messages for points that carry no file of their own.
    pub source: PathBuf,
    /// Factors to fit (`--factors`; refused ones are reported, not fitted). Empty: choose among
    /// every factor the ones these points identify, at most points − 1.
    pub factors: Vec<Factor>,
    pub out: PathBuf,
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FittedFactor {
    pub factor: Factor,
    pub value: f64,
    /// 95% interval [low, high] (asymmetric for scale factors, fitted as logarithms).
    pub ci95: [f64; 2],
}

#[derive(Debug, Clone)]
pub struct Residual {
    pub point: Point,
    pub predicted: f64,
    /// predicted / measured − 1.
    pub rel_err: f64,
    /// The point's weight in the robust fit (1: counted fully; below 1: down-weighted as far
    /// from the others' curve).
    pub weight: f64,
    /// predicted / measured − 1 of a fit without this point (leverage estimate); None before a
    /// fit, or where the fit rests on this point alone.
    pub loo_rel_err: Option<f64>,
    /// Why the point is far off, when its leave-one-out error is far beyond the others'.
    pub far_off: Option<String>,
}

/// One row of the "what was chosen and why" table.
#[derive(Debug, Clone, PartialEq)]
pub struct FactorChoice {
    pub factor: Factor,
    /// RMS relative change of the predicted tokens/s over the points for a typical change of
    /// the factor (×1.65 for a scale, +0.5 routing exponent, +1 ms overhead), where the fit
    /// starts.
    pub sensitivity: f64,
    /// What remains of that once the factors chosen before it are fitted (same units).
    independent: f64,
    /// True when it was chosen to fit (it may still be refused after the fit for its interval).
    pub chosen: bool,
    /// "chosen: ..." or why not.
    pub why: String,
}

#[derive(Debug, Clone)]
pub struct ThroughputFit {
    pub profile: CalibrationProfile,
    pub(crate) base: String,
    pub fitted: Vec<FittedFactor>,
    /// Factors not fitted, each with why.
    pub refused: Vec<(Factor, String)>,
    /// Every candidate factor with its sensitivity and why it was or was not chosen.
    pub choices: Vec<FactorChoice>,
    pub before: Vec<Residual>,
    pub residuals: Vec<Residual>,
    pub(crate) iterations: usize,
    /// What the report says about the fit besides the tables.
    pub notes: Vec<String>,
    pub(crate) out: PathBuf,
}

impl ThroughputFit {
    pub fn rms_rel_err(r: &[Residual]) -> f64 {
        (r.iter().map(|x| x.rel_err * x.rel_err).sum::<f64>() / r.len().max(1) as f64).sqrt()
    }
}

/// What a fit must achieve to be written (`--max-median-error`, `--allow-poor-fit`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThroughputLimits {
    /// Refuse when the median |relative error| after the fit exceeds this, percent (None: no
    /// limit).
    pub max_median_error_pct: Option<f64>,
    /// Write a fit beyond the limit anyway, marked in `[profile] poor_fit`.
    pub allow_poor_fit: bool,
}

/// Fits the factors and writes the profile, with no limit on the error left.
pub fn fit_throughput(req: &ThroughputRequest) -> Result<ThroughputFit> {
    fit_throughput_with(
        req,
        &ThroughputLimits {
            max_median_error_pct: None,
            allow_poor_fit: false,
        },
    )
}

/// Fits the factors and writes the profile when the median error left is within `limits`.
pub fn fit_throughput_with(
    req: &ThroughputRequest,
    limits: &ThroughputLimits,
) -> Result<ThroughputFit> {
    check_limits(limits)?;
    check_servers(req)?;
    let n = req.points.len();
    let auto = req.factors.is_empty();
    let src = sources_text(req);
    let mut which = factors_to_fit(req, &src)?;
    let model = Model::new(req)?;
    let meas: Vec<f64> = req.points.iter().map(|p| p.tokens_per_s).collect();
    let mut refused = refuse_fixed_routing(&mut which, model.routing_fixed);
    refused.extend(refuse_unvaried(&mut which, &req.points));
    if which.is_empty() {
        return Err(nothing_identified(n, &src, &refused));
    }
    let before_pred = model.predict(&model.profile.factors)?;
    let (theta0, j0) = start(&model, &which, &meas)?;
    let all = which.clone();
    let fixed_refusals = refused.clone();
    let mut cap = if auto { n - 1 } else { which.len() };
    let mut choices = first_choices(auto, &mut which, &j0, cap, &mut refused, &fixed_refusals);
    // Auto: factors refused after a fit for their interval, with the row that says why.
    let mut dropped: Vec<FactorChoice> = Vec::new();
    let mut keep_theta = start_of(&which, &all, &theta0);
    let (mut fitted, mut iterations, mut final_r, mut weights, mut jacobian, mut notes);
    loop {
        if which.is_empty() {
            return Err(nothing_identified(n, &src, &refused));
        }
        let (theta, r, j, it, w) = solve_robust(&model, &which, keep_theta.clone(), &meas)?;
        iterations = it;
        final_r = r;
        let rw: Vec<f64> = final_r.iter().zip(&w).map(|(r, w)| r * w.sqrt()).collect();
        let iv = fitted_intervals(&which, &theta, &j, &rw, &src)?;
        weights = w;
        jacobian = j;
        let progress = no_progress(&final_r, &before_pred, &meas, &weights);
        let (wide, stuck) = to_drop(auto, &iv, which.len(), progress);
        fitted = iv.fitted;
        notes = wide_notes(&wide, &iv.wide, &which, &fitted, &final_r, n);
        match wide {
            Some((c, why)) if auto => {
                // Fewer factors first (each one fewer leaves a degree of freedom to the
                // interval); a factor still too loose alone is dropped, and another may take
                // its place.
                // A factor the fit cannot move is dropped at once, and the others get back
                // the room it took.
                if which.len() > 1 && !stuck {
                    cap = which.len() - 1;
                } else if drop_factor(&choices, which[c], why, &mut dropped) && stuck {
                    cap = n - 1;
                }
                choices = rechoose(&all, &dropped, &j0, cap, &fixed_refusals);
                (which, refused) = chosen_and_refused(&choices);
                keep_theta = start_of(&which, &all, &theta0);
            }
            Some((c, why)) => {
                refuse_named(&mut choices, &mut refused, &mut which, c, why);
                keep_theta = without(&theta, c);
            }
            None => break,
        }
    }
    let solved = Solved {
        which,
        fitted,
        refused,
        choices,
        final_r,
        iterations,
        weights,
        jacobian,
        notes,
    };
    fit_result(req, &model, &meas, &before_pred, solved, limits)
}

/// `--max-median-error` is a percentage above 0.
fn check_limits(limits: &ThroughputLimits) -> Result<()> {
    if let Some(l) = limits.max_median_error_pct {
        if !(l.is_finite() && l > 0.0) {
            return Err(Error::Flag {
                flag: "--max-median-error",
                value: l.to_string(),
                expected: "expected a percentage above 0".into(),
            });
        }
    }
    Ok(())
}

/// The starting point of the factors `which` and the Jacobian there.
fn start(model: &Model, which: &[Factor], meas: &[f64]) -> Result<(Vec<f64>, DMatrix<f64>)> {
    let theta0 = starting_point(model, which);
    let r0 = model.residuals(which, &theta0, meas)?;
    let j0 = model.jacobian(which, &theta0, &r0, meas)?;
    Ok((theta0, j0))
}

/// The factor a fit of `fitted` factors (`iv`) gives up, with why, and whether because the fit
/// did not reduce the error (`stuck`: `no_progress`'s reason, taken when every interval is
/// narrow).
fn to_drop(
    auto: bool,
    iv: &result::Intervals,
    fitted: usize,
    no_progress: Option<String>,
) -> (Option<(usize, String)>, bool) {
    // Named factors are kept with a wide interval (the points pin them down loosely; the
    // report says so); the automatic choice drops them for a factor the points pin down.
    let wide = if auto {
        iv.bound.clone().or(iv.wide.clone())
    } else {
        iv.bound.clone()
    };
    // Auto, with every interval narrow: a fit that did not reduce the error drops a factor.
    let stuck_why = no_progress.filter(|_| auto && wide.is_none());
    let stuck = stuck_why.is_some();
    (wide.or(stuck_why.map(|why| (fitted - 1, why))), stuck)
}

/// The note on a named factor kept with a wide interval (`loose`) when no factor is dropped
/// (`drop`), over `n` points.
fn wide_notes(
    drop: &Option<(usize, String)>,
    loose: &Option<(usize, String)>,
    which: &[Factor],
    fitted: &[FittedFactor],
    final_r: &[f64],
    n: usize,
) -> Vec<String> {
    match (drop, loose) {
        (None, Some((c, _))) => vec![wide_note(which[*c], &fitted[*c], final_r, n)],
        _ => Vec::new(),
    }
}

/// The note on a named factor kept with a wide interval (`n` points).
fn wide_note(factor: Factor, f: &FittedFactor, final_r: &[f64], n: usize) -> String {
    format!(
        "{}: its 95% interval [{:.4}, {:.4}] is wide: these points pin it down loosely (rms error after the fit {:.1}%); more points, or points that vary what it scales, narrow it",
        factor,
        f.ci95[0],
        f.ci95[1],
        100.0 * (final_r.iter().map(|x| x * x).sum::<f64>() / n as f64).sqrt()
    )
}

/// `theta` without its entry `c`.
fn without(theta: &[f64], c: usize) -> Vec<f64> {
    theta
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != c)
        .map(|(_, v)| *v)
        .collect()
}
