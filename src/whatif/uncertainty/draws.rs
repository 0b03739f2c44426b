//! The draws: each source's normal deviate from (seed, draw, name), the prices it scales, and
//! the quantiles of the results.

use super::model_error::{
    factor_intervals, factor_value, fp8_transfer_source, table_errors, ModelError,
};
use super::step_error::StepError;
use super::{
    Effect, Interval, Source, Target, Uncertainty, COLLECTIVES, DEFAULT_ROUTING_RMS_LOG_ERROR,
    FACTOR_EFFECTS, GEMM, MLA, MOE, Z975,
};
use crate::cost::CalibrationProfile;
use crate::error::Result;
use crate::scenario::routing::Routing;
use crate::scenario::Scenario;
use crate::sim::fast::{Collectives, Draw, FastScenario, Launch};
use crate::workload::routing::DistinctExperts;
use serde::Serialize;

impl Uncertainty {
    /// The sources of `s`'s prices under `p`: its fitted factors' intervals, its tables'
    /// interpolation errors, its routing, and the bundled model-form error. An error names the
    /// profile's malformed interval or the model-error file's malformed field.
    pub fn from_profile(p: &CalibrationProfile, s: &Scenario) -> Result<Self> {
        Self::from_profile_with(p, s, &ModelError::bundled()?)
    }

    /// [`Uncertainty::from_profile`] with a model-form error of the caller's (the validation's
    /// leave-one-out σ).
    pub fn from_profile_with(
        p: &CalibrationProfile,
        s: &Scenario,
        model: &ModelError,
    ) -> Result<Self> {
        let mut sources = factor_sources(p, s)?;
        if let Some(src) = fp8_transfer_source(s) {
            sources.push(src);
        }
        sources.extend(default_routing_source(p, s));
        sources.extend(table_sources(p, s));
        // A GPU with its own whole-step error measured the model's error there whole: the
        // per-family error of another GPU's validation is not added on top of it.
        let step_of = model.step_for(&s.system.gpu.name);
        if !matches!(step_of, Some((_, false))) {
            sources.extend(model.sources());
        }
        let step = step_of.map(|(e, standing_in)| {
            sources.push(model_step_source(e, standing_in, s));
            e.clone()
        });
        Ok(Uncertainty { sources, step })
    }

    /// Per draw, the whole-step error's knots (empty without one): computed once per set of
    /// draws, read at each answer's tokens by [`Uncertainty::step_factor`].
    pub(super) fn step_knots(&self, n: usize, seed: u64) -> Vec<[f64; super::step_error::KNOTS]> {
        match &self.step {
            Some(e) => (0..n as u64).map(|i| e.knots(seed, i)).collect(),
            None => Vec::new(),
        }
    }

    /// The whole-step multiplier of draw `i` at `tokens` per step (1 without a step error).
    pub(super) fn step_factor(
        &self,
        knots: &[[f64; super::step_error::KNOTS]],
        i: usize,
        tokens: f64,
    ) -> f64 {
        match (&self.step, knots.get(i)) {
            (Some(e), Some(k)) => e.multiplier(k, tokens),
            _ => 1.0,
        }
    }

    /// Nothing is uncertain: every interval is the point.
    pub fn is_empty(&self) -> bool {
        self.sources.iter().all(|s| s.sigma == 0.0 && s.mu == 0.0)
    }

    /// `n` draws under `seed`. Each source's normal deviate is a function of (seed, draw index,
    /// source name) only, so another scenario's draws share it (paired draws).
    pub(super) fn draws(&self, n: usize, seed: u64) -> Vec<Draw> {
        (0..n).map(|i| self.draw(i as u64, seed)).collect()
    }

    fn draw(&self, i: u64, seed: u64) -> Draw {
        let mut d = Draw::default();
        for s in &self.sources {
            let z = normal(seed, i, &s.name);
            let x = s.mu + s.sigma * z;
            match &s.target {
                Target::Families(fams) => {
                    for &f in fams {
                        d.family[f as usize] *= x.exp();
                    }
                    // A collective family's error scales its whole price, latency term too.
                    if fams.iter().any(|f| f.is_collective()) {
                        d.collective_latency *= x.exp();
                    }
                }
                Target::CollectiveBandwidth => {
                    for &f in COLLECTIVES {
                        d.family[f as usize] *= x.exp();
                    }
                }
                Target::CollectiveLatency => d.collective_latency *= x.exp(),
                Target::StepOverhead { value_us } => {
                    let v = if s.log { x.exp() } else { x.max(0.0) };
                    d.step_overhead_us += v - value_us;
                }
                Target::Idle => d.step_overhead_us += x,
                // Applied to each answer's step at its tokens (`step_factors`), not per op.
                Target::StepTokens => {}
            }
        }
        d
    }
}

/// A standard normal deviate determined by (seed, draw, source name): the first
/// `StandardNormal` deviate of the stable generator seeded by the three.
pub(super) fn normal(seed: u64, draw: u64, name: &str) -> f64 {
    // FNV-1a of the name: stable across runs and platforms.
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    let mut rng =
        crate::rng::seeded(seed ^ h.rotate_left(17) ^ draw.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    crate::rng::standard_normal(&mut rng)
}

/// A scenario ready for drawing: its fast path, launch and collective settings, the draws, and
/// the undrawn fast-path step the drawn ones are taken relative to.
pub struct Drawn {
    pub fast: FastScenario,
    launch: Launch,
    coll: Collectives,
    pub(super) draws: Vec<Draw>,
    /// Per draw, the whole-step error's knots (`Uncertainty::step_knots`).
    pub(super) step_knots: Vec<[f64; super::step_error::KNOTS]>,
    pub(super) uncertainty: Uncertainty,
}

impl Drawn {
    /// Fits `s`'s fast path (with `draft`, its speculative passes too) and draws `n` draws.
    pub fn new(
        s: &Scenario,
        p: &CalibrationProfile,
        draft: Option<&crate::whatif::draft::Draft>,
        n: usize,
        seed: u64,
    ) -> Result<Self> {
        Self::with_uncertainty(s, p, draft, Uncertainty::from_profile(p, s)?, n, seed)
    }

    /// [`Drawn::new`] drawing `uncertainty`'s sources.
    pub fn with_uncertainty(
        s: &Scenario,
        p: &CalibrationProfile,
        draft: Option<&crate::whatif::draft::Draft>,
        uncertainty: Uncertainty,
        n: usize,
        seed: u64,
    ) -> Result<Self> {
        let fast = FastScenario::new(s, p, draft.map(|d| &d.drafter))?;
        Ok(Drawn {
            launch: Launch::new(p, s.cuda_graphs),
            coll: Collectives::new(s, p)?,
            draws: uncertainty.draws(n, seed),
            step_knots: uncertainty.step_knots(n, seed),
            fast,
            uncertainty,
        })
    }

    /// Per draw, the plain step's drawn time over its undrawn time at (batch, context).
    pub fn step_ratios(&self, batch: u32, context: u64) -> Vec<f64> {
        let base = self.fast.step_us(batch, context, &self.launch, &self.coll);
        self.draws
            .iter()
            .enumerate()
            .map(|(i, d)| {
                self.fast
                    .step_us_drawn(batch, context, &self.launch, &self.coll, d)
                    / base
                    * self.step_factor(i, batch as f64)
            })
            .collect()
    }

    /// [`Drawn::step_ratios`] for a scenario that differs from the fitted one only in what the
    /// fast path takes per call (batch, context, NCCL protocol and algorithm, CUDA graphs), as
    /// a sweep prices its grid: no second fit.
    pub(super) fn step_ratios_of(&self, s: &Scenario, p: &CalibrationProfile) -> Result<Vec<f64>> {
        let launch = Launch::new(p, s.cuda_graphs);
        let coll = Collectives::new(s, p)?;
        let base = self.fast.step_us(s.batch, s.context, &launch, &coll);
        Ok(self
            .draws
            .iter()
            .enumerate()
            .map(|(i, d)| {
                self.fast
                    .step_us_drawn(s.batch, s.context, &launch, &coll, d)
                    / base
                    * self.step_factor(i, s.batch as f64)
            })
            .collect())
    }

    /// Per draw, the speculative step's drawn time over its undrawn time (k draft tokens);
    /// None without a drafter.
    pub fn spec_step_ratios(&self, batch: u32, context: u64, k: u32) -> Option<Vec<f64>> {
        let base = self
            .fast
            .spec_step_us(batch, context, k, &self.launch, &self.coll)?
            .2;
        // The speculative step's error is its verify pass's, at batch × (k + 1) tokens.
        let tokens = batch as f64 * (k + 1) as f64;
        self.draws
            .iter()
            .enumerate()
            .map(|(i, d)| {
                self.fast
                    .spec_step_us_drawn(batch, context, k, &self.launch, &self.coll, d)
                    .map(|x| x.2 / base * self.step_factor(i, tokens))
            })
            .collect()
    }

    /// Draw `i`'s whole-step multiplier at `tokens` per step (1 without a step error).
    pub(super) fn step_factor(&self, i: usize, tokens: f64) -> f64 {
        self.uncertainty.step_factor(&self.step_knots, i, tokens)
    }
}

/// Intervals of one answer: the step time and tokens/s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Intervals {
    pub step_time_us: Interval,
    pub tokens_per_s: Interval,
}

impl Intervals {
    /// From per-draw step-time ratios around the point step time (tokens/s ∝ 1 / step time).
    pub(super) fn from_ratios(ratios: &[f64], step_us: f64, tokens_per_s: f64) -> Self {
        let steps: Vec<f64> = ratios.iter().map(|r| r * step_us).collect();
        let tps: Vec<f64> = ratios.iter().map(|r| tokens_per_s / r).collect();
        if ratios.is_empty() {
            return Intervals {
                step_time_us: Interval::point(step_us),
                tokens_per_s: Interval::point(tokens_per_s),
            };
        }
        Intervals {
            step_time_us: Interval::of(&steps),
            tokens_per_s: Interval::of(&tps),
        }
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "step_time_us": self.step_time_us.json(),
            "tokens_per_s": self.tokens_per_s.json(),
        })
    }
}

/// The fitted factors' intervals as sources, in `FACTOR_EFFECTS`' order.
fn factor_sources(p: &CalibrationProfile, s: &Scenario) -> Result<Vec<Source>> {
    let cis = factor_intervals(p)?;
    let mut sources = Vec::new();
    for (name, effect) in FACTOR_EFFECTS {
        let Some(&[lo, hi]) = cis.get(*name) else {
            continue;
        };
        let what = format!("{}: {name} 95% interval [{lo}, {hi}]", p.path.display());
        let value = factor_value(p, name);
        sources.extend(factor_source(name, effect, [lo, hi], value, what, s));
    }
    Ok(sources)
}

/// One factor's source from its 95% interval `[lo, hi]` and fitted `value`, as its `effect`
/// acts on the prices (none for a routing factor the scenario does not run).
fn factor_source(
    name: &str,
    effect: &Effect,
    [lo, hi]: [f64; 2],
    value: Option<f64>,
    what: String,
    s: &Scenario,
) -> Option<Source> {
    let log_source = |target: Target, sign: f64, v: f64| {
        // ln X ~ N(m, σ) with [lo, hi] its 95% interval; the price multiplier is
        // (X / v)^sign, lognormal too.
        let (m, sd) = (
            (lo.ln() + hi.ln()) / 2.0,
            (hi.ln() - lo.ln()) / (2.0 * Z975),
        );
        Source {
            name: name.to_string(),
            provenance: what.clone(),
            target,
            mu: sign * (m - v.ln()),
            sigma: sd,
            log: true,
        }
    };
    match *effect {
        Effect::Families(fams, sign) => Some(log_source(
            Target::Families(fams.to_vec()),
            sign,
            value.unwrap_or(1.0),
        )),
        Effect::CollectiveBandwidth => Some(log_source(
            Target::CollectiveBandwidth,
            -1.0,
            value.unwrap_or(1.0),
        )),
        Effect::CollectiveLatency => Some(log_source(
            Target::CollectiveLatency,
            1.0,
            value.unwrap_or(1.0),
        )),
        Effect::StepOverhead => {
            let log = lo > 0.0;
            let (mu, sigma) = if log {
                (
                    (lo.ln() + hi.ln()) / 2.0,
                    (hi.ln() - lo.ln()) / (2.0 * Z975),
                )
            } else {
                ((lo + hi) / 2.0, (hi - lo) / (2.0 * Z975))
            };
            Some(Source {
                name: name.to_string(),
                provenance: what,
                target: Target::StepOverhead {
                    value_us: value.unwrap_or(0.0),
                },
                mu,
                sigma,
                log,
            })
        }
        Effect::Routing => routing_factor_source(name, [lo, hi], value?, &what, s),
    }
}

/// The fitted routing alpha's interval as a spread of the MoE price, only where the scenario
/// runs the fitted alpha (not a `--routing` of its own).
fn routing_factor_source(
    name: &str,
    [lo, hi]: [f64; 2],
    value: f64,
    what: &str,
    s: &Scenario,
) -> Option<Source> {
    let moe = s.model.moe.as_ref()?;
    if Routing::power_law(value).ok().as_ref() != Some(&s.routing) {
        return None;
    }
    // The MoE price follows the experts touched (the weights read): its log changes by e per
    // unit of alpha at this step's tokens.
    let tokens = (s.batch as u64).max(1);
    let at = |a: f64| {
        Routing::power_law(a.clamp(0.0, crate::scenario::routing::MAX_ALPHA))
            .map(|r| DistinctExperts::new(&r, moe.n_routed_experts, moe.top_k).at(tokens))
            .unwrap_or(f64::NAN)
    };
    let (a, b) = (at(lo), at(hi));
    if !(a > 0.0 && b > 0.0) {
        return None;
    }
    Some(Source {
        name: name.to_string(),
        provenance: format!("{what}: experts touched at {tokens} tokens {a:.1} to {b:.1}"),
        target: Target::Families(MOE.to_vec()),
        mu: 0.0,
        sigma: (b / a).ln().abs() / (2.0 * Z975),
        log: true,
    })
}

/// The default routing's error against AIConfigurator's rows, for a MoE scenario that runs it
/// without a fitted alpha.
fn default_routing_source(p: &CalibrationProfile, s: &Scenario) -> Option<Source> {
    if !(s.model.moe.is_some()
        && p.factors.routing_alpha.is_none()
        && s.routing == Routing::default())
    {
        return None;
    }
    Some(Source {
        name: "routing".into(),
        provenance: format!(
            "default routing {}: the MoE price's rms log error {DEFAULT_ROUTING_RMS_LOG_ERROR} against AIConfigurator's power_law_1.01 rows",
            Routing::default()
        ),
        target: Target::Families(MOE.to_vec()),
        mu: 0.0,
        sigma: DEFAULT_ROUTING_RMS_LOG_ERROR,
        log: true,
    })
}

/// The AIConfigurator tables' interpolation errors, one source per family with an error.
fn table_sources(p: &CalibrationProfile, s: &Scenario) -> Vec<Source> {
    let mut sources = Vec::new();
    for (family, pooled) in table_errors(p) {
        // The MoE rows of the scenario's own expert shape, where the table prices them; a
        // shape the table lacks is priced by the law, which the table's error is not of.
        let (sigma, of) = if family == "moe" {
            let own = crate::cost::aic::moe_shape(s).and_then(|sh| {
                let t = p.aic.as_ref()?;
                let sigma = t.moe_rms_log_error_for(&sh)?;
                Some((sigma, sh))
            });
            match own {
                Some((sigma, sh)) => (
                    sigma,
                    format!(
                        ", the rows of this model's shape ({} {} experts, hidden {}, inter {}, top-{})",
                        sh.0, sh.1, sh.2, sh.3, sh.4
                    ),
                ),
                None => continue,
            }
        } else {
            (pooled, String::new())
        };
        let fams = match family {
            "moe" => MOE,
            "gemm" => GEMM,
            "mla" => MLA,
            _ => COLLECTIVES,
        };
        if sigma > 0.0 {
            sources.push(Source {
                name: format!("table_{family}"),
                provenance: format!(
                    "AIConfigurator {family} table ({}{of}): leave-one-out rms log error of its interpolation {sigma:.4}",
                    p.aic.as_ref().map_or(String::new(), |t| crate::units::path(&t.dir))
                ),
                target: Target::Families(fams.to_vec()),
                mu: 0.0,
                sigma,
                log: true,
            });
        }
    }
    sources
}

/// The whole-step error `e` as a source, measured on the scenario's GPU or `standing_in` for it.
fn model_step_source(e: &StepError, standing_in: bool, s: &Scenario) -> Source {
    Source {
        name: "model_step".into(),
        provenance: format!(
            "{}: the model's error across step sizes{}, rms of ln(measured/predicted) {:.4} over {} point(s) of {:.0}-{:.0} tokens per step, correlation {:.2} between steps a factor 2 apart",
            crate::units::path(&e.path),
            if standing_in {
                format!(" measured on {}, standing in for {} (no validation of its own)", e.gpu, s.system.gpu.name)
            } else {
                format!(" on {} (in place of the per-family error of another GPU's validation)", e.gpu)
            },
            e.sigma,
            e.points,
            e.tokens[0],
            e.tokens[1],
            e.rho
        ),
        target: Target::StepTokens,
        mu: 0.0,
        sigma: e.sigma,
        log: true,
    }
}
