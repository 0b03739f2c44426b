//! Which factors to fit: the ones named or chosen, and the ones refused with the reason
//! (fixed routing, an axis the points do not vary, a setting the servers do not share).

use super::factors::{Factor, ALL_FACTORS};
use super::points::{model_id_matches, Point};
use super::solver::{choose, identifiable};
use super::{FactorChoice, ThroughputRequest};
use crate::error::{Error, Result};
use nalgebra::DMatrix;

/// The factors to fit (`--factors`, or all of them when none is named), refused when the points
/// are too few to give each an interval.
pub(super) fn factors_to_fit(req: &ThroughputRequest, src: &str) -> Result<Vec<Factor>> {
    let n = req.points.len();
    let auto = req.factors.is_empty();
    let mut which: Vec<Factor> = Vec::new();
    for f in if auto {
        &ALL_FACTORS[..]
    } else {
        &req.factors[..]
    } {
        if !which.contains(f) {
            which.push(*f);
        }
    }
    if auto && n < 2 {
        return Err(Error::FitData { source_name: src.to_string(), problem: format!("{n} point(s) cannot fit any factor with a confidence interval: give at least 2 points (a concurrency or context sweep)") });
    }
    if !auto && n < which.len() + 1 {
        return Err(Error::field(
            &req.source,
            "rows",
            format!(
                "{n} point(s) cannot fit {} factor(s) ({}) with a confidence interval: give at least {} points, or fewer factors with --factors (or leave --factors out to let the fit choose)",
                which.len(),
                which.iter().map(|f| f.name()).collect::<Vec<_>>().join(", "),
                which.len() + 1
            ),
        ));
    }
    Ok(which)
}

/// The first choice of factors: the auto choice (`choose`), or the named ones that the points
/// identify; each row says why. `which` and `refused` are narrowed to match.
pub(super) fn first_choices(
    auto: bool,
    which: &mut Vec<Factor>,
    j0: &DMatrix<f64>,
    cap: usize,
    refused: &mut Vec<(Factor, String)>,
    fixed: &[(Factor, String)],
) -> Vec<FactorChoice> {
    let mut choices = choose(which, j0, cap);
    if auto {
        *which = choices
            .iter()
            .filter(|c| c.chosen)
            .map(|c| c.factor)
            .collect();
        refused.extend(
            choices
                .iter()
                .filter(|c| !c.chosen)
                .map(|c| (c.factor, c.why.clone())),
        );
    } else {
        identifiable(which, j0, refused);
        for c in choices.iter_mut() {
            c.chosen = which.contains(&c.factor);
            c.why = match refused.iter().find(|(f, _)| *f == c.factor) {
                Some((_, why)) => why.clone(),
                None => "chosen: named by --factors".to_string(),
            };
        }
    }
    for (f, why) in fixed {
        if !choices.iter().any(|c| c.factor == *f) {
            choices.push(FactorChoice {
                factor: *f,
                sensitivity: 0.0,
                independent: 0.0,
                chosen: false,
                why: why.clone(),
            });
        }
    }
    choices
}

/// The auto choice again, among the factors not dropped yet, at most `cap` of them; the dropped
/// and the fixed refusals keep their rows.
pub(super) fn rechoose(
    all: &[Factor],
    dropped: &[FactorChoice],
    j0: &DMatrix<f64>,
    cap: usize,
    fixed_refusals: &[(Factor, String)],
) -> Vec<FactorChoice> {
    let cand: Vec<usize> = (0..all.len())
        .filter(|&i| !dropped.iter().any(|d| d.factor == all[i]))
        .collect();
    let names: Vec<Factor> = cand.iter().map(|&i| all[i]).collect();
    let mut choices = choose(&names, &j0.select_columns(cand.iter()), cap);
    choices.extend(dropped.iter().cloned());
    for (f, why) in fixed_refusals {
        choices.push(FactorChoice {
            factor: *f,
            sensitivity: 0.0,
            independent: 0.0,
            chosen: false,
            why: why.clone(),
        });
    }
    choices
}

/// The refusal when every factor has been refused, each with why.
pub(super) fn nothing_identified(n: usize, src: &str, refused: &[(Factor, String)]) -> Error {
    Error::CalibrationRefused {
        reason: format!(
            "no factor can be identified from {n} point(s) of {src}:\n  {}",
            refused
                .iter()
                .map(|(f, why)| format!("{}: {why}", f.name()))
                .collect::<Vec<_>>()
                .join("\n  ")
        ),
    }
}

/// The chosen factors, and the refused ones with why, of a choice table.
pub(super) fn chosen_and_refused(choices: &[FactorChoice]) -> (Vec<Factor>, Vec<(Factor, String)>) {
    let which = choices
        .iter()
        .filter(|c| c.chosen)
        .map(|c| c.factor)
        .collect();
    let refused = choices
        .iter()
        .filter(|c| !c.chosen)
        .map(|c| (c.factor, c.why.clone()))
        .collect();
    (which, refused)
}

/// The starting values of `which`, taken from the starting point of all the factors.
pub(super) fn start_of(which: &[Factor], all: &[Factor], theta0: &[f64]) -> Vec<f64> {
    which
        .iter()
        .map(|k| theta0[all.iter().position(|a| a == k).unwrap_or(0)])
        .collect()
}

/// With `--routing` fixing the routing, the routing exponent leaves `which` and is refused.
pub(super) fn refuse_fixed_routing(
    which: &mut Vec<Factor>,
    routing_fixed: bool,
) -> Vec<(Factor, String)> {
    let mut refused = Vec::new();
    if routing_fixed {
        if let Some(i) = which.iter().position(|f| *f == Factor::RoutingAlpha) {
            which.remove(i);
            refused.push((
                Factor::RoutingAlpha,
                "not fitted: --routing fixes the routing".to_string(),
            ));
        }
    }
    refused
}

/// The factors whose quantity the points do not vary (`FactorSpec::varies`) leave `which`,
/// each refused with why: points all at one context cannot tell attention's growth with the
/// context from anything else that grows with the batch.
pub(super) fn refuse_unvaried(which: &mut Vec<Factor>, points: &[Point]) -> Vec<(Factor, String)> {
    let mut refused = Vec::new();
    which.retain(|f| {
        let Some(axis) = f.spec().varies else {
            return true;
        };
        let mut seen: Vec<u64> = points.iter().map(|p| axis.of(p)).collect();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() >= 2 {
            return true;
        }
        refused.push((
            *f,
            format!(
                "not identifiable: every point is at {} {}; it scales what changes with the {}, so it needs points at two values of it or more",
                axis.what(),
                seen.first().copied().unwrap_or(0),
                axis.what()
            ),
        ));
        false
    });
    refused
}

/// A named factor (`--factors`) the points do not pin down: refused, with why, in the table
/// and the refusals.
pub(super) fn refuse_named(
    choices: &mut [FactorChoice],
    refused: &mut Vec<(Factor, String)>,
    which: &mut Vec<Factor>,
    c: usize,
    why: String,
) {
    if let Some(row) = choices.iter_mut().find(|r| r.factor == which[c]) {
        row.chosen = false;
        row.why = why.clone();
    }
    refused.push((which[c], why));
    which.remove(c);
}

/// Drops `factor` from the auto choice for good, its row saying why; false when it has no row.
pub(super) fn drop_factor(
    choices: &[FactorChoice],
    factor: Factor,
    why: String,
    dropped: &mut Vec<FactorChoice>,
) -> bool {
    match choices.iter().find(|r| r.factor == factor) {
        Some(row) => {
            dropped.push(FactorChoice {
                chosen: false,
                why,
                ..row.clone()
            });
            true
        }
        None => false,
    }
}

/// What each result says its server ran (`tensor_parallel_size`, `model_id`), held against the
/// scenario before anything is fitted.
pub(super) fn check_servers(req: &ThroughputRequest) -> Result<()> {
    if req
        .points
        .iter()
        .all(|p| p.tp.is_none() && p.model_id.is_none())
    {
        return Ok(());
    }
    for p in &req.points {
        let mut r = req.base.clone();
        for (k, v) in p.settings() {
            k.apply(&mut r, v);
        }
        let (s, _) = r.load().map_err(|e| Error::PointInvalid {
            point: p.origin(&req.source).to_string(),
            problem: e.to_string(),
        })?;
        // What the result says the server ran, held against the scenario.
        if let Some(tp) = p.tp.filter(|&tp| tp != s.layout.tp) {
            return Err(Error::PointInvalid {
                point: p.origin(&req.source).to_string(),
                problem: format!(
                    "the result's tensor_parallel_size is {tp}, the scenario's --tp {}: give --tp {tp} (or correct the result's metadata)",
                    s.layout.tp
                ),
            });
        }
        if let Some(id) = p.model_id.as_deref() {
            if !model_id_matches(id, &s.model.name) {
                return Err(Error::PointInvalid {
                    point: p.origin(&req.source).to_string(),
                    problem: format!(
                        "the result's model_id '{}' is not the scenario's model '{}': give --model for the served model",
                        crate::units::clip(id, 80),
                        s.model.name
                    ),
                });
            }
        }
    }
    Ok(())
}
