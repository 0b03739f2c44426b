//! From a solved fit to the answer: confidence intervals, the residual table, the notes on a
//! poor fit.

use super::factors::{Factor, FactorKind};
use super::model::{residual_rows, Model};
use super::solver::{far_off, leave_one_out, median_abs};
use super::writer::{sources_text, write_fitted};
use super::{FactorChoice, FittedFactor, ThroughputFit, ThroughputLimits, ThroughputRequest};
use crate::error::{Error, Result};
use nalgebra::DMatrix;
use statrs::distribution::{ContinuousCDF, StudentsT};

/// The fitted factors with their intervals, and the first factor that ran to its bound and the
/// first whose interval spans everything, each with why.
pub(super) struct Intervals {
    pub(super) fitted: Vec<FittedFactor>,
    pub(super) bound: Option<(usize, String)>,
    pub(super) wide: Option<(usize, String)>,
}

/// Each fitted factor's value and 95% interval (Student's t on the residual scatter), and the
/// first factor whose interval says the points do not pin it down, with why.
pub(super) fn fitted_intervals(
    which: &[Factor],
    theta: &[f64],
    j: &DMatrix<f64>,
    final_r: &[f64],
    src: &str,
) -> Result<Intervals> {
    let n = final_r.len();
    let p = which.len();
    let dof = n - p;
    let s2 = final_r.iter().map(|x| x * x).sum::<f64>() / dof as f64;
    let t = StudentsT::new(0.0, 1.0, dof as f64)
        .map(|d| d.inverse_cdf(0.975))
        .unwrap_or(f64::NAN);
    let inv = (j.transpose() * j).try_inverse();
    let mut fitted = Vec::new();
    let mut wide = None;
    let mut bound = None;
    for (c, k) in which.iter().enumerate() {
        let se = inv
            .as_ref()
            .map(|m| (s2 * m[(c, c)]).max(0.0).sqrt())
            .unwrap_or(f64::INFINITY);
        let half = t * se;
        let v = theta[c];
        let (value, ci95) = if k.is_log() {
            (v.exp(), [(v - half).exp(), (v + half).exp()])
        } else {
            // Within what the parameter can be (no negative overhead or exponent).
            let (lo, hi) = k.bounds();
            (v, [(v - half).max(lo), (v + half).min(hi)])
        };
        // An interval spanning a factor of 10 (scales), the whole exponent range, or
        // more than ±10 ms of overhead says the points do not pin the factor down.
        let too_wide = k.too_wide(half);
        if half.is_finite() && half <= 1e-12 * v.abs().max(1.0) {
            return Err(Error::CalibrationRefused { reason: format!("{} = {value:.4} with a zero-width 95% interval: the {n} point(s) of {src} are fitted exactly ({n} point(s) for {p} factor(s) leave no scatter to measure), so the interval would claim a certainty the data does not have; add a distinct point (another concurrency or context), or repeat a measurement with its own run-to-run scatter", k.name()) });
        }
        // A factor at its bound (x0.01 or x100 for a scale, the largest routing exponent) is
        // not a measurement of it: the points ask for more than it can mean.
        let (lo, hi) = k.bounds();
        let at_bound = k.kind() != FactorKind::Overhead
            && (v - lo < 1e-3 * k.unit() || hi - v < 1e-3 * k.unit());
        if at_bound && bound.is_none() {
            bound = Some((
                c,
                format!(
                    "not fitted: it ran to its bound ({value:.4}, the most the fit allows): the points ask for more than this factor can mean, so the model misses them for another reason (another factor, or a setting the scenario lacks)"
                ),
            ));
        }
        if too_wide && wide.is_none() {
            wide = Some((
                c,
                format!(
                    "not identifiable: fitted {value:.4} but its 95% interval [{:.4}, {:.4}] spans everything",
                    ci95[0], ci95[1]
                ),
            ));
        }
        fitted.push(FittedFactor {
            factor: *k,
            value,
            ci95,
        });
    }
    Ok(Intervals {
        fitted,
        bound,
        wide,
    })
}

/// Why the last factor is not identifiable when a fit leaves the error where it was (a factor
/// whose effect is steps, e.g. the seeded routing draw, or one the solver cannot move); None
/// when the fit reduced it.
pub(super) fn no_progress(
    final_r: &[f64],
    before_pred: &[f64],
    meas: &[f64],
    w: &[f64],
) -> Option<String> {
    let n = meas.len();
    let sumsq = |v: &[f64]| v.iter().zip(w).map(|(x, w)| w * x * x).sum::<f64>();
    let r_before: Vec<f64> = before_pred
        .iter()
        .zip(meas)
        .map(|(p, m)| (p / m).ln())
        .collect();
    (sumsq(final_r) >= sumsq(&r_before) * (1.0 - 1e-6)).then(|| {
        format!(
            "not identifiable: fitting it does not reduce the error ({:.2}% rms)",
            100.0 * (sumsq(&r_before) / n as f64).sqrt()
        )
    })
}

/// Where the fit loop ends: the factors kept and their values, the refusals and the choice
/// table, the last residuals and the solver's iterations.
pub(super) struct Solved {
    pub(super) which: Vec<Factor>,
    pub(super) fitted: Vec<FittedFactor>,
    pub(super) refused: Vec<(Factor, String)>,
    pub(super) choices: Vec<FactorChoice>,
    pub(super) final_r: Vec<f64>,
    pub(super) iterations: usize,
    /// The robust fit's weights and its weighted Jacobian, for the leave-one-out residuals.
    pub(super) weights: Vec<f64>,
    pub(super) jacobian: DMatrix<f64>,
    /// What the report says about the fit (a named factor kept with a wide interval).
    pub(super) notes: Vec<String>,
}

/// The fit's result: the profile written with the fitted factors, and the residuals before
/// and after.
pub(super) fn fit_result(
    req: &ThroughputRequest,
    model: &Model,
    meas: &[f64],
    before_pred: &[f64],
    s: Solved,
    limits: &ThroughputLimits,
) -> Result<ThroughputFit> {
    let theta: Vec<f64> = s
        .fitted
        .iter()
        .map(|f| {
            if f.factor.is_log() {
                f.value.ln()
            } else {
                f.value
            }
        })
        .collect();
    let factors = model.factors_at(&s.which, &theta);
    let pred: Vec<f64> = s
        .final_r
        .iter()
        .zip(meas)
        .map(|(r, m)| m * r.exp())
        .collect();
    let mut residuals = residual_rows(&req.points, &pred);
    let loo = leave_one_out(&s.final_r, &s.jacobian);
    for (i, r) in residuals.iter_mut().enumerate() {
        r.weight = s.weights.get(i).copied().unwrap_or(1.0);
        r.loo_rel_err = loo[i].map(f64::exp_m1);
        r.far_off = far_off(i, &loo);
    }
    let before = residual_rows(&req.points, before_pred);
    let errs: Vec<f64> = residuals.iter().map(|r| r.rel_err).collect();
    let median = 100.0 * median_abs(&errs);
    let mut poor = None;
    if let Some(limit) = limits.max_median_error_pct.filter(|&l| median > l) {
        let why = format!(
            "median |error| after the fit {median:.1}% over {} point(s) of {} (limit {limit}%, --max-median-error)",
            residuals.len(),
            sources_text(req)
        );
        if !limits.allow_poor_fit {
            return Err(Error::CalibrationRefused {
                reason: format!("{why}: the fitted factors do not explain these points (the model misses them for another reason, or the points measure another setting than the scenario's). No profile written; --allow-poor-fit writes it anyway, marked"),
            });
        }
        poor = Some(format!("from-throughput: {why}"));
    }
    let profile = write_fitted(
        req,
        &model.profile,
        factors,
        &s.fitted,
        &s.refused,
        &residuals,
        poor,
    )?;
    Ok(ThroughputFit {
        profile,
        base: model.profile.profile.name.clone(),
        fitted: s.fitted,
        refused: s.refused,
        choices: s.choices,
        before,
        residuals,
        iterations: s.iterations,
        notes: s.notes,
        out: req.out.clone(),
    })
}
