//! The simulator as a function of the factors: each point priced with its own scenario, the
//! predicted rates and the residuals.

use super::factors::Factor;
use super::points::Point;
use super::{Residual, ThroughputRequest};
use crate::cost::profile::Factors;
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::scenario::routing::Routing;
use crate::scenario::Scenario;
use crate::sim::{simulate_loaded, Engine, ScenarioRequest, Timeline};
use crate::whatif::acceptance::Acceptance;
use crate::whatif::draft::Draft;
use nalgebra::DMatrix;
use std::path::{Path, PathBuf};

/// A point ready to price: its scenario and, for a speculative point, the drafter, k and the
/// acceptance.
pub(super) struct Priced {
    scenario: Scenario,
    spec: Option<(Draft, u32, Acceptance)>,
    serving: Option<crate::calibrate::serving::ServeShape>,
}

/// The loaded scenarios of the points, priced under trial factors.
pub(super) struct Model {
    points: Vec<Priced>,
    pub(super) profile: CalibrationProfile,
    /// The user passed --routing: the routing factor cannot apply.
    pub(super) routing_fixed: bool,
    start_alpha: f64,
}

impl Model {
    pub(super) fn new(req: &ThroughputRequest) -> Result<Self> {
        let mut points = Vec::new();
        let mut profile = None;
        for p in &req.points {
            let mut r = req.base.clone();
            for (k, v) in p.settings() {
                k.apply(&mut r, v);
            }
            let invalid = |e: Error| Error::PointInvalid {
                point: p.origin(&req.source).to_string(),
                problem: e.to_string(),
            };
            let (s, prof) = r.load().map_err(invalid)?;
            let spec = match &p.spec {
                None => None,
                Some(sp) => {
                    let draft = Draft::load(sp.method, None, &s.model).map_err(invalid)?;
                    draft.check_k(sp.draft_tokens).map_err(invalid)?;
                    draft.scenario(&s).map_err(invalid)?;
                    let acc = sp.acceptance().map_err(|problem| Error::PointInvalid {
                        point: p.origin(&req.source).to_string(),
                        problem,
                    })?;
                    if prof.spec_decode.is_none() {
                        return Err(invalid(Error::field(
                            &prof.path,
                            "spec_decode",
                            "missing: a speculative-decoding point needs the profile's [spec_decode] exposed_host_us and pass_gap_us",
                        )));
                    }
                    Some((draft, sp.draft_tokens, acc))
                }
            };
            points.push(Priced {
                scenario: s,
                spec,
                serving: p.serving.clone(),
            });
            profile = Some(prof);
        }
        let profile = profile.ok_or(Error::Invariant("no points"))?;
        let start_alpha = match &points[0].scenario.routing {
            Routing::PowerLaw { alpha } => *alpha,
            _ => 0.0,
        };
        Ok(Model {
            points,
            routing_fixed: req.base.routing.is_some(),
            start_alpha,
            profile,
        })
    }

    pub(super) fn factors_at(&self, which: &[Factor], theta: &[f64]) -> Factors {
        let mut f = self.profile.factors.clone();
        for (k, v) in which.iter().zip(theta) {
            k.set(&mut f, *v);
        }
        f
    }

    /// Predicted tokens/s of every point under these factors.
    pub(super) fn predict(&self, f: &Factors) -> Result<Vec<f64>> {
        let mut profile = self.profile.clone();
        profile.factors = f.clone();
        let mut out = Vec::with_capacity(self.points.len());
        let mut engine = Engine::new();
        let mut tl = Timeline::default();
        for p in &self.points {
            let mut s = p.scenario.clone();
            if let (Some(a), false) = (f.routing_alpha, self.routing_fixed) {
                s.routing = Routing::power_law(a)?;
            }
            let tps = match (&p.spec, &p.serving) {
                (None, Some(run)) => crate::calibrate::serving::tokens_per_s(&s, &profile, run)?,
                (None, None) => simulate_loaded(s, profile.clone())?.tokens_per_s(),
                (Some((draft, k, acc)), _) => {
                    // As `whatif spec-decode` prices it: draft + verify + host per step, the
                    // mean acceptance length tokens per sequence per step.
                    let c = crate::whatif::spec_decode::step_cost(
                        &s,
                        draft,
                        &profile,
                        *k,
                        &mut engine,
                        &mut tl,
                    )?;
                    let step = c.draft_us + c.verify_us + c.host_us;
                    s.batch as f64 * acc.mean_acceptance_length(*k) / step * 1e6
                }
            };
            out.push(tps);
        }
        Ok(out)
    }

    pub(super) fn residuals(
        &self,
        which: &[Factor],
        theta: &[f64],
        meas: &[f64],
    ) -> Result<Vec<f64>> {
        let pred = self.predict(&self.factors_at(which, theta))?;
        Ok(pred.iter().zip(meas).map(|(p, m)| (p / m).ln()).collect())
    }

    /// Forward-difference Jacobian of the log residuals (steps away from the upper bound).
    pub(super) fn jacobian(
        &self,
        which: &[Factor],
        theta: &[f64],
        r0: &[f64],
        meas: &[f64],
    ) -> Result<DMatrix<f64>> {
        let mut j = DMatrix::zeros(r0.len(), which.len());
        for (c, k) in which.iter().enumerate() {
            let mut t = theta.to_vec();
            let h = if t[c] + k.step() > k.bounds().1 {
                -k.step()
            } else {
                k.step()
            };
            t[c] += h;
            let r = self.residuals(which, &t, meas)?;
            for i in 0..r0.len() {
                j[(i, c)] = (r[i] - r0[i]) / h;
            }
        }
        Ok(j)
    }
}

/// Predicted tokens/s of benchmark points under `base` (its `calibration` is the profile to
/// test, factors included), with the error against each measurement.
pub fn predict(base: &ScenarioRequest, points: &[Point], source: &Path) -> Result<Vec<Residual>> {
    let req = ThroughputRequest {
        base: base.clone(),
        points: points.to_vec(),
        source: source.to_path_buf(),
        factors: Vec::new(),
        out: PathBuf::new(),
        name: None,
    };
    let model = Model::new(&req)?;
    let pred = model.predict(&model.profile.factors)?;
    Ok(residual_rows(points, &pred))
}

pub(super) fn residual_rows(points: &[Point], pred: &[f64]) -> Vec<Residual> {
    points
        .iter()
        .zip(pred)
        .map(|(p, &x)| Residual {
            point: p.clone(),
            predicted: x,
            rel_err: x / p.tokens_per_s - 1.0,
            weight: 1.0,
            loo_rel_err: None,
            far_off: None,
        })
        .collect()
}

/// Where the fit starts: the base profile's values, a little away from the bounds (where
/// identifiability is judged).
pub(super) fn starting_point(model: &Model, which: &[Factor]) -> Vec<f64> {
    let mut theta0: Vec<f64> = which
        .iter()
        .map(|k| k.get(&model.profile.factors, model.start_alpha))
        .map(|v| if v.is_finite() { v } else { 0.0 })
        .collect();
    for (t, k) in theta0.iter_mut().zip(which) {
        if *k == Factor::StepOverhead && *t < 100.0 {
            *t = 100.0;
        }
        if *k == Factor::RoutingAlpha && *t < 0.1 {
            *t = 0.1;
        }
    }
    theta0
}
