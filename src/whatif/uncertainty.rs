//! Intervals: what is uncertain in a price, propagated by Monte Carlo over the fast path.
//!
//! Four sources, each drawn per draw as a multiplier of the prices it reaches (lognormal), or
//! as µs of idle added to each pass:
//! - fitted factors' 95% intervals (`<factor>_ci95 = [lo, hi]`, written by `calibrate
//!   --from-throughput` into the profile's `[fit.*]` tables): each factor is drawn so that its
//!   95% interval is the stated one, and its draw scales the prices the factor scales;
//! - the AIConfigurator tables' interpolation error: per table family (moe, gemm, mla, nccl) the
//!   leave-one-out rms log error of the log-log interpolation (`AicTables::
//!   interpolation_rms_log_error`, computed once per table folder and cached);
//! - routing: under the default routing (`power-law:0.66`) the MoE price's rms log error of that
//!   law against AIConfigurator's measured rows (0.112, README "Routing"); under a fitted
//!   `routing_alpha` with an interval, the change of the experts touched across it;
//! - the model's own error ([`ModelError`], `data/calibration/model_error.toml`): per cost
//!   family, the rms of ln(measured / predicted) over the validation against the H200 traces
//!   (`decodesim validate --write-model-error`), and the idle per step the model lacks (µs).
//!
//! Where the fast path refuses a scenario (decode-context parallelism, expert parallelism inside
//! a pipeline), the same draws act on the timeline's own prices and the engine plays each
//! ([`timeline_step_ratios`]).
//!
//! A draw is applied after the fast path's memoised prices, per op family (`fast::Draw`), so a
//! warm memo prices a draw in the time of one replay of the recursion. Intervals are of the
//! drawn-to-undrawn ratio times the caller's point estimate: with nothing uncertain they
//! collapse onto the point exactly. Draws are seeded per (seed, draw, source name), so two arms
//! of a what-if see the same draw of every source they share (paired: shared uncertainty
//! cancels in the speedup).

use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::scenario::routing::Routing;
use crate::scenario::Scenario;
use crate::sim::fast::{Collectives, Draw, FastScenario, Launch};
use crate::workload::routing::DistinctExperts;
use crate::workload::CostFamily;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

/// Draws per interval unless `--draws` says otherwise: p5 and p95 then rest on 10 draws each.
pub const DEFAULT_DRAWS: usize = 200;
/// Fewest draws an interval may rest on (`--draws`): p5 and p95 then lie between the 3rd and
/// 4th draws from either end.
pub const MIN_DRAWS: usize = 50;
/// Seed of the draws unless `--seed` says otherwise.
pub const DEFAULT_SEED: u64 = 0x1D7E_57A7;

/// The standard normal's 97.5% quantile: a 95% interval is ±1.96 σ.
const Z975: f64 = 1.959_963_984_540_054;

/// The MoE price's rms log error under the default routing `power-law:0.66` against
/// AIConfigurator's `power_law_1.01` rows (16–512 tokens, moe_tp 8), as fitted in
/// `scenario::routing` (README "Routing").
const DEFAULT_ROUTING_RMS_LOG_ERROR: f64 = 0.112;

/// p5, p50, p95 of a quantity over the draws.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub p5: f64,
    pub p50: f64,
    pub p95: f64,
}

impl Interval {
    /// The point itself (no uncertainty).
    fn point(v: f64) -> Self {
        Interval {
            p5: v,
            p50: v,
            p95: v,
        }
    }

    /// Quantiles of `samples` (linear between order statistics); NaN samples are ignored.
    pub fn of(samples: &[f64]) -> Self {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return Interval::point(f64::NAN);
        }
        v.sort_by(f64::total_cmp);
        let q = |p: f64| {
            let h = p * (v.len() - 1) as f64;
            let (i, f) = (h.floor() as usize, h - h.floor());
            let j = (i + 1).min(v.len() - 1);
            v[i] + (v[j] - v[i]) * f
        };
        Interval {
            p5: q(0.05),
            p50: q(0.5),
            p95: q(0.95),
        }
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::json!({"p5": self.p5, "p50": self.p50, "p95": self.p95})
    }
}

/// Whether a what-if pays at this confidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The speedup's p5 is above 1: it helps in 95% of the draws.
    Helps,
    /// The speedup's p95 is below 1.
    Hurts,
    /// The 90% interval of the speedup contains 1.
    CannotTell,
}

impl Verdict {
    pub fn of(speedup: &Interval) -> Self {
        if speedup.p5 > 1.0 {
            Verdict::Helps
        } else if speedup.p95 < 1.0 {
            Verdict::Hurts
        } else {
            Verdict::CannotTell
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Verdict::Helps => "helps",
            Verdict::Hurts => "hurts",
            Verdict::CannotTell => "cannot tell",
        }
    }
}

/// What a source's draw multiplies.
#[derive(Debug, Clone, PartialEq)]
pub enum Target {
    /// Every op price of these families (collectives: latency and bandwidth terms alike).
    Families(Vec<CostFamily>),
    /// The bytes term of every collective.
    CollectiveBandwidth,
    /// The latency term of every collective.
    CollectiveLatency,
    /// µs added at the end of every pass (the draw of `step_overhead_us` minus its value).
    StepOverhead { value_us: f64 },
    /// µs of idle added at the end of every pass, drawn N(0, σ): the model-form error of the
    /// idle a step holds (launch stalls, host gaps) that no op prices.
    Idle,
}

/// One uncertain input: ln(multiplier) ~ N(mu, sigma) (for `StepOverhead`, the overhead in µs
/// ~ N(mu, sigma) truncated at 0, or lognormal when `log`).
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// Names the draw's random stream: arms sharing a source share its draws.
    pub(crate) name: String,
    /// Where the spread comes from, for reports.
    pub(crate) provenance: String,
    pub target: Target,
    mu: f64,
    pub sigma: f64,
    log: bool,
}

impl Source {
    /// The source's name as reports list it (`table_moe`, `routing`, a factor's).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where its spread comes from.
    pub fn provenance(&self) -> &str {
        &self.provenance
    }
}

/// How a fitted factor reaches the prices: +1 the price grows with it, −1 as its inverse.
/// New factors plug in here (name as in the profile's `[factors]`).
#[derive(Debug, Clone, Copy)]
enum Effect {
    Families(&'static [CostFamily], f64),
    CollectiveBandwidth,
    CollectiveLatency,
    StepOverhead,
    Routing,
}

const MOE: &[CostFamily] = &[
    CostFamily::MoeGemmBf16,
    CostFamily::MoeGemmInt4,
    CostFamily::MoeGemmFp8,
];
const GEMM: &[CostFamily] = &[
    CostFamily::GemmBf16,
    CostFamily::GemmInt4,
    CostFamily::GemmFp8,
];
const MLA: &[CostFamily] = &[CostFamily::AttentionMlaDecode];
const COLLECTIVES: &[CostFamily] = &[
    CostFamily::AllReduce,
    CostFamily::AllGather,
    CostFamily::AllToAll,
    CostFamily::ReduceScatter,
];

/// The fitted factors whose intervals are drawn, and what each scales.
const FACTOR_EFFECTS: &[(&str, Effect)] = &[
    // Routed-expert GEMM time is divided by moe_efficiency.
    ("moe_efficiency", Effect::Families(MOE, -1.0)),
    ("collective_bw_scale", Effect::CollectiveBandwidth),
    ("collective_latency_scale", Effect::CollectiveLatency),
    ("step_overhead_us", Effect::StepOverhead),
    ("routing_alpha", Effect::Routing),
    // The curve factors scale one term of their family's price (cost::profile::Factors); drawn
    // here on the whole family, an upper bound on their spread.
    ("moe_weight_scale", Effect::Families(MOE, 1.0)),
    ("moe_token_scale", Effect::Families(MOE, 1.0)),
    ("dense_gemm_scale", Effect::Families(GEMM, 1.0)),
    ("attention_growth_scale", Effect::Families(MLA, 1.0)),
    ("attention_fixed_scale", Effect::Families(MLA, 1.0)),
];

/// What is uncertain in one scenario's prices under one profile.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Uncertainty {
    pub sources: Vec<Source>,
}

/// The model-form error's families: the validation's categories, each with the cost families
/// whose prices its draw multiplies (a collective family's latency term too). Idle is apart: an
/// additive draw per pass ([`Target::Idle`]).
pub const MODEL_FAMILIES: &[(&str, &[CostFamily])] = &[
    (
        "moe",
        &[
            CostFamily::MoeGemmBf16,
            CostFamily::MoeGemmInt4,
            CostFamily::MoeGemmFp8,
            CostFamily::MoeAlign,
            CostFamily::MoeSum,
        ],
    ),
    (
        "gemm",
        &[
            CostFamily::GemmBf16,
            CostFamily::GemmInt4,
            CostFamily::GemmFp8,
        ],
    ),
    (
        "attention",
        &[
            CostFamily::AttentionMlaDecode,
            CostFamily::AttentionGqaDecode,
            CostFamily::KvWrite,
        ],
    ),
    ("norm", &[CostFamily::Norm]),
    (
        "elementwise",
        &[CostFamily::Elementwise, CostFamily::Embedding],
    ),
    ("router", &[CostFamily::RouterTopk]),
    ("sampling", &[CostFamily::Sampling]),
    (
        "communication",
        &[
            CostFamily::AllReduce,
            CostFamily::AllGather,
            CostFamily::AllToAll,
            CostFamily::ReduceScatter,
            CostFamily::SendRecv,
        ],
    ),
];

/// An FP8 cache's MLA attention on a GPU whose own FP8 attention is unmeasured is priced at the
/// BF16 price (`cost::kv_dtype`); what it really costs lies between the byte-halved law (at
/// most half the BF16 time: only the cache's bytes halve) and the FP8/BF16 ratio measured on the
/// H200 at this shape. Those two bound the draw's 95% interval.
fn fp8_transfer_source(s: &Scenario) -> Option<Source> {
    if s.kv_bytes != 1.0 || s.model.mla.is_none() {
        return None;
    }
    let t = crate::cost::kv_dtype::KvDtypeRatios::bundled().ok()?;
    if t.applies_to(&s.system.gpu.compute_capability) {
        return None;
    }
    let heads = (s.model.num_heads / s.tp as usize).max(1) as u64;
    let hi = t
        .fp8_over_bf16(heads, s.rank_batch() as f64, s.context as f64)
        .value
        .max(1.0);
    let lo = 0.5_f64;
    Some(Source {
        name: "fp8_kv_transfer".into(),
        provenance: format!(
            "FP8 KV attention unmeasured on {}: between the byte-halved law (x{lo}) and the H200's FP8/BF16 ratio (x{hi:.2})",
            s.system.gpu.name
        ),
        target: Target::Families(MLA.to_vec()),
        mu: (lo.ln() + hi.ln()) / 2.0,
        sigma: (hi.ln() - lo.ln()) / (2.0 * Z975),
        log: true,
    })
}

/// Where the bundled model-form error lives, under the data root.
pub const MODEL_ERROR_FILE: &str = "data/calibration/model_error.toml";

/// Largest σ of ln(measured / predicted) a model-error file may state (a factor e^2 ≈ 7.4 at
/// one σ: beyond it the family is not modelled at all).
const MAX_LOG_SIGMA: f64 = 2.0;
/// Largest idle σ a model-error file may state, µs per pass.
const MAX_IDLE_SIGMA_US: f64 = 100_000.0;

/// The model's own error: how far its prices are from measured ones, per family, beyond what the
/// tables and fitted factors say. Read from `data/calibration/model_error.toml`, which
/// `decodesim validate --write-model-error` writes from the validation's residuals.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelError {
    /// σ of ln(measured / predicted) per family of [`MODEL_FAMILIES`] (absent: not drawn).
    pub sigma: BTreeMap<String, f64>,
    /// σ of the idle per pass the model lacks, µs.
    pub idle_sigma_us: f64,
    /// The file it came from, for reports.
    pub path: PathBuf,
}

impl ModelError {
    /// Reads and checks a model-error file; an error names the file and field.
    pub fn from_file(path: &std::path::Path) -> Result<Self> {
        let v: toml::Value = crate::files::read_toml(path, crate::files::InputKind::Profile)?;
        let mut out = ModelError {
            path: path.to_path_buf(),
            ..Default::default()
        };
        let num = |x: &toml::Value| x.as_float().or_else(|| x.as_integer().map(|i| i as f64));
        let sigma = v.get("sigma").and_then(|t| t.as_table()).ok_or_else(|| {
            Error::field(
                path,
                "sigma",
                "a table [sigma] of family = σ of ln(measured / predicted)",
            )
        })?;
        for (name, x) in sigma {
            if !MODEL_FAMILIES.iter().any(|f| f.0 == name) {
                return Err(Error::field(
                    path,
                    format!("sigma.{name}"),
                    format!(
                        "a family of the model-form error: {}",
                        MODEL_FAMILIES
                            .iter()
                            .map(|f| f.0)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            match num(x) {
                Some(sd) if sd.is_finite() && (0.0..=MAX_LOG_SIGMA).contains(&sd) => {
                    out.sigma.insert(name.clone(), sd);
                }
                _ => {
                    return Err(Error::field(
                        path,
                        format!("sigma.{name}"),
                        format!("found {x}, expected a σ of ln(measured / predicted) in [0, {MAX_LOG_SIGMA}]"),
                    ))
                }
            }
        }
        if let Some(x) = v.get("idle").and_then(|t| t.get("sigma_us")) {
            match num(x) {
                Some(sd) if sd.is_finite() && (0.0..=MAX_IDLE_SIGMA_US).contains(&sd) => {
                    out.idle_sigma_us = sd;
                }
                _ => {
                    return Err(Error::field(
                        path,
                        "idle.sigma_us",
                        format!("found {x}, expected µs in [0, {MAX_IDLE_SIGMA_US}]"),
                    ))
                }
            }
        }
        Ok(out)
    }

    /// The bundled file (`data/calibration/model_error.toml` under the data root), read once
    /// per process.
    pub fn bundled() -> Result<Self> {
        static CACHE: OnceLock<Mutex<BTreeMap<PathBuf, ModelError>>> = OnceLock::new();
        let path = crate::bundle::data_root().join(MODEL_ERROR_FILE);
        let cache = CACHE.get_or_init(Default::default);
        if let Some(v) = cache.lock().ok().and_then(|c| c.get(&path).cloned()) {
            return Ok(v);
        }
        if !path.is_file() {
            return Err(Error::field(
                &path,
                "model_error",
                "missing: every interval draws the model's own error from this file (`decodesim validate --write-model-error FILE` writes it; the bundled data holds one); pass --draws 0 for points",
            ));
        }
        let v = Self::from_file(&path)?;
        if let Ok(mut c) = cache.lock() {
            c.insert(path, v.clone());
        }
        Ok(v)
    }

    /// Its sources: one lognormal multiplier per family with a σ, and the idle per pass.
    fn sources(&self) -> Vec<Source> {
        let file = crate::units::path(&self.path);
        let mut out = Vec::new();
        for (name, fams) in MODEL_FAMILIES {
            let Some(&sigma) = self.sigma.get(*name) else {
                continue;
            };
            if sigma > 0.0 {
                out.push(Source {
                    name: format!("model_{name}"),
                    provenance: format!(
                        "{file}: the model's own error on {name} prices, rms of ln(measured/predicted) over the validation {sigma:.4}"
                    ),
                    target: Target::Families(fams.to_vec()),
                    mu: 0.0,
                    sigma,
                    log: true,
                });
            }
        }
        if self.idle_sigma_us > 0.0 {
            out.push(Source {
                name: "model_idle".into(),
                provenance: format!(
                    "{file}: the idle per step no op prices (launch stalls, host gaps), rms of measured minus predicted {:.1} µs",
                    self.idle_sigma_us
                ),
                target: Target::Idle,
                mu: 0.0,
                sigma: self.idle_sigma_us,
                log: false,
            });
        }
        out
    }
}

/// Interpolation errors per AIConfigurator table folder, computed once per process.
fn table_errors(p: &CalibrationProfile) -> BTreeMap<&'static str, f64> {
    static CACHE: OnceLock<Mutex<BTreeMap<PathBuf, BTreeMap<&'static str, f64>>>> = OnceLock::new();
    let Some(t) = &p.aic else {
        return BTreeMap::new();
    };
    let cache = CACHE.get_or_init(Default::default);
    if let Some(v) = cache.lock().ok().and_then(|c| c.get(&t.dir).cloned()) {
        return v;
    }
    let v = t.interpolation_rms_log_error();
    if let Ok(mut c) = cache.lock() {
        c.insert(t.dir.clone(), v.clone());
    }
    v
}

/// The factor intervals a profile states: `<factor>_ci95 = [lo, hi]` in any `[fit.*]` table.
fn factor_intervals(p: &CalibrationProfile) -> Result<BTreeMap<String, [f64; 2]>> {
    let mut out = BTreeMap::new();
    for (section, t) in &p.fit {
        let Some(t) = t.as_table() else { continue };
        for (name, _) in FACTOR_EFFECTS {
            let key = format!("{name}_ci95");
            let Some(v) = t.get(&key) else { continue };
            let field = format!("fit.{section}.{key}");
            let bad = |found: String| {
                Error::field(
                    &p.path,
                    &field,
                    format!("found {found}, expected [low, high]: two finite numbers, low <= high"),
                )
            };
            let arr = v.as_array().ok_or_else(|| bad(v.to_string()))?;
            let num = |x: &toml::Value| x.as_float().or_else(|| x.as_integer().map(|i| i as f64));
            let (lo, hi) = match arr.as_slice() {
                [a, b] => match (num(a), num(b)) {
                    (Some(lo), Some(hi)) => (lo, hi),
                    _ => return Err(bad(v.to_string())),
                },
                _ => return Err(bad(v.to_string())),
            };
            if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
                return Err(bad(format!("[{lo}, {hi}]")));
            }
            let scale = !matches!(
                FACTOR_EFFECTS.iter().find(|f| f.0 == *name).map(|f| f.1),
                Some(Effect::StepOverhead | Effect::Routing)
            );
            if scale && lo <= 0.0 {
                return Err(Error::field(
                    &p.path,
                    &field,
                    format!("found [{lo}, {hi}], expected a scale's interval: 0 < low <= high"),
                ));
            }
            out.insert(name.to_string(), [lo, hi]);
        }
    }
    Ok(out)
}

/// A factor's value in the profile, by name (0 or 1 for an absent one: no change).
fn factor_value(p: &CalibrationProfile, name: &str) -> Option<f64> {
    let v = toml::Value::try_from(&p.factors).ok()?;
    let x = v.get(name)?;
    x.as_float().or_else(|| x.as_integer().map(|i| i as f64))
}

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
        let mut sources = Vec::new();
        let cis = factor_intervals(p)?;
        let src = |what: &str| format!("{}: {what}", p.path.display());
        for (name, effect) in FACTOR_EFFECTS {
            let Some(&[lo, hi]) = cis.get(*name) else {
                continue;
            };
            let value = factor_value(p, name);
            let what = src(&format!("{name} 95% interval [{lo}, {hi}]"));
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
                Effect::Families(fams, sign) => {
                    let v = value.unwrap_or(1.0);
                    sources.push(log_source(Target::Families(fams.to_vec()), sign, v));
                }
                Effect::CollectiveBandwidth => {
                    let v = value.unwrap_or(1.0);
                    sources.push(log_source(Target::CollectiveBandwidth, -1.0, v));
                }
                Effect::CollectiveLatency => {
                    let v = value.unwrap_or(1.0);
                    sources.push(log_source(Target::CollectiveLatency, 1.0, v));
                }
                Effect::StepOverhead => {
                    let v = value.unwrap_or(0.0);
                    let log = lo > 0.0;
                    let (mu, sigma) = if log {
                        (
                            (lo.ln() + hi.ln()) / 2.0,
                            (hi.ln() - lo.ln()) / (2.0 * Z975),
                        )
                    } else {
                        ((lo + hi) / 2.0, (hi - lo) / (2.0 * Z975))
                    };
                    sources.push(Source {
                        name: name.to_string(),
                        provenance: what,
                        target: Target::StepOverhead { value_us: v },
                        mu,
                        sigma,
                        log,
                    });
                }
                Effect::Routing => {
                    // Only where the scenario runs the fitted alpha (not a `--routing` of its own).
                    let (Some(v), Some(moe)) = (value, s.model.moe.as_ref()) else {
                        continue;
                    };
                    if Routing::power_law(v).ok().as_ref() != Some(&s.routing) {
                        continue;
                    }
                    // The MoE price follows the experts touched (the weights read): its log
                    // changes by e per unit of alpha at this step's tokens.
                    let tokens = (s.batch as u64).max(1);
                    let at = |a: f64| {
                        Routing::power_law(a.clamp(0.0, crate::scenario::routing::MAX_ALPHA))
                            .map(|r| {
                                DistinctExperts::new(&r, moe.n_routed_experts, moe.top_k).at(tokens)
                            })
                            .unwrap_or(f64::NAN)
                    };
                    let (a, b) = (at(lo), at(hi));
                    if !(a > 0.0 && b > 0.0) {
                        continue;
                    }
                    sources.push(Source {
                        name: name.to_string(),
                        provenance: format!(
                            "{what}: experts touched at {tokens} tokens {a:.1} to {b:.1}"
                        ),
                        target: Target::Families(MOE.to_vec()),
                        mu: 0.0,
                        sigma: (b / a).ln().abs() / (2.0 * Z975),
                        log: true,
                    });
                }
            }
        }
        if let Some(src) = fp8_transfer_source(s) {
            sources.push(src);
        }
        if s.model.moe.is_some()
            && p.factors.routing_alpha.is_none()
            && s.routing == Routing::default()
        {
            sources.push(Source {
                name: "routing".into(),
                provenance: format!(
                    "default routing {}: the MoE price's rms log error {DEFAULT_ROUTING_RMS_LOG_ERROR} against AIConfigurator's power_law_1.01 rows",
                    Routing::default()
                ),
                target: Target::Families(MOE.to_vec()),
                mu: 0.0,
                sigma: DEFAULT_ROUTING_RMS_LOG_ERROR,
                log: true,
            });
        }
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
        sources.extend(model.sources());
        Ok(Uncertainty { sources })
    }

    /// Nothing is uncertain: every interval is the point.
    pub fn is_empty(&self) -> bool {
        self.sources.iter().all(|s| s.sigma == 0.0 && s.mu == 0.0)
    }

    /// `n` draws under `seed`. Each source's normal deviate is a function of (seed, draw index,
    /// source name) only, so another scenario's draws share it (paired draws).
    fn draws(&self, n: usize, seed: u64) -> Vec<Draw> {
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
            }
        }
        d
    }
}

/// A standard normal deviate determined by (seed, draw, source name) (Box–Muller).
fn normal(seed: u64, draw: u64, name: &str) -> f64 {
    // FNV-1a of the name: stable across runs and platforms.
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    let mut rng = SmallRng::seed_from_u64(
        seed ^ h.rotate_left(17) ^ draw.wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A scenario ready for drawing: its fast path, launch and collective settings, the draws, and
/// the undrawn fast-path step the drawn ones are taken relative to.
pub struct Drawn {
    pub fast: FastScenario,
    launch: Launch,
    coll: Collectives,
    draws: Vec<Draw>,
    uncertainty: Uncertainty,
}

impl Drawn {
    /// Fits `s`'s fast path (with `draft`, its speculative passes too) and draws `n` draws.
    pub fn new(
        s: &Scenario,
        p: &CalibrationProfile,
        draft: Option<&super::draft::Draft>,
        n: usize,
        seed: u64,
    ) -> Result<Self> {
        Self::with_uncertainty(s, p, draft, Uncertainty::from_profile(p, s)?, n, seed)
    }

    /// [`Drawn::new`] drawing `uncertainty`'s sources.
    pub fn with_uncertainty(
        s: &Scenario,
        p: &CalibrationProfile,
        draft: Option<&super::draft::Draft>,
        uncertainty: Uncertainty,
        n: usize,
        seed: u64,
    ) -> Result<Self> {
        let fast = FastScenario::new(s, p, draft.map(|d| &d.drafter))?;
        Ok(Drawn {
            launch: Launch::new(p, s.cuda_graphs),
            coll: Collectives::new(s, p)?,
            draws: uncertainty.draws(n, seed),
            fast,
            uncertainty,
        })
    }

    /// Per draw, the plain step's drawn time over its undrawn time at (batch, context).
    pub fn step_ratios(&self, batch: u32, context: u64) -> Vec<f64> {
        let base = self.fast.step_us(batch, context, &self.launch, &self.coll);
        self.draws
            .iter()
            .map(|d| {
                self.fast
                    .step_us_drawn(batch, context, &self.launch, &self.coll, d)
                    / base
            })
            .collect()
    }

    /// [`Drawn::step_ratios`] for a scenario that differs from the fitted one only in what the
    /// fast path takes per call (batch, context, NCCL protocol and algorithm, CUDA graphs), as
    /// a sweep prices its grid: no second fit.
    fn step_ratios_of(&self, s: &Scenario, p: &CalibrationProfile) -> Result<Vec<f64>> {
        let launch = Launch::new(p, s.cuda_graphs);
        let coll = Collectives::new(s, p)?;
        let base = self.fast.step_us(s.batch, s.context, &launch, &coll);
        Ok(self
            .draws
            .iter()
            .map(|d| {
                self.fast
                    .step_us_drawn(s.batch, s.context, &launch, &coll, d)
                    / base
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
        self.draws
            .iter()
            .map(|d| {
                self.fast
                    .spec_step_us_drawn(batch, context, k, &self.launch, &self.coll, d)
                    .map(|x| x.2 / base)
            })
            .collect()
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
    fn from_ratios(ratios: &[f64], step_us: f64, tokens_per_s: f64) -> Self {
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

/// The speedup's interval from paired draws: draw i of the base and of the variant share every
/// source, so `speedup_i = point × base_ratio_i / variant_ratio_i`.
pub fn speedup_interval(point: f64, base_ratios: &[f64], variant_ratios: &[f64]) -> Interval {
    if base_ratios.is_empty() {
        return Interval::point(point);
    }
    let v: Vec<f64> = base_ratios
        .iter()
        .zip(variant_ratios)
        .map(|(b, v)| point * b / v)
        .collect();
    Interval::of(&v)
}

/// The step-time and tokens/s intervals of one scenario at its own batch and context around
/// a point estimate (from the timeline), with `n` draws (0: the point), and what was drawn.
/// The inner error says why the fast path cannot draw this scenario (expert parallelism): the
/// caller reports the point without an interval, and why.
pub fn scenario_intervals(
    s: &Scenario,
    p: &CalibrationProfile,
    step_us: f64,
    tokens_per_s: f64,
    n: usize,
    seed: u64,
) -> Result<(std::result::Result<Intervals, String>, Uncertainty)> {
    if n == 0 {
        let point = Intervals::from_ratios(&[], step_us, tokens_per_s);
        return Ok((Ok(point), Uncertainty::default()));
    }
    scenario_intervals_with(
        s,
        p,
        step_us,
        tokens_per_s,
        n,
        seed,
        &ModelError::bundled()?,
    )
}

/// [`scenario_intervals`] with a model-form error of the caller's (none: `ModelError::default()`).
#[allow(clippy::too_many_arguments)]
pub fn scenario_intervals_with(
    s: &Scenario,
    p: &CalibrationProfile,
    step_us: f64,
    tokens_per_s: f64,
    n: usize,
    seed: u64,
    model: &ModelError,
) -> Result<(std::result::Result<Intervals, String>, Uncertainty)> {
    let point = Intervals::from_ratios(&[], step_us, tokens_per_s);
    if n == 0 {
        return Ok((Ok(point), Uncertainty::default()));
    }
    let u = Uncertainty::from_profile_with(p, s, model)?;
    if u.is_empty() {
        return Ok((Ok(point), u));
    }
    match Drawn::with_uncertainty(s, p, None, u.clone(), n, seed) {
        Ok(d) => {
            let iv =
                Intervals::from_ratios(&d.step_ratios(s.batch, s.context), step_us, tokens_per_s);
            Ok((Ok(iv), d.uncertainty))
        }
        // The fast path refuses: draw through the timeline.
        Err(e) => match timeline_step_ratios(s, p, &u, n, seed) {
            Ok(r) => Ok((Ok(Intervals::from_ratios(&r, step_us, tokens_per_s)), u)),
            Err(Error::NoIntervals { why }) => Ok((Err(format!("{why}; {}", unavailable(&e))), u)),
            Err(e2) => Err(e2),
        },
    }
}

/// Per draw of `u`, the timeline's drawn step over its undrawn step at `s`'s own batch and
/// context: each draw scales the op prices the timeline plays (a collective's latency term by the
/// latency draw, its bytes term by its family's), the engine plays the step, and a draw's idle is
/// added to it. Where the fast path refuses a scenario (decode-context parallelism, expert
/// parallelism inside a pipeline), intervals come from here; a pipeline (`--pp`) is composed of
/// stage plays this does not draw, and is refused.
pub fn timeline_step_ratios(
    s: &Scenario,
    p: &CalibrationProfile,
    u: &Uncertainty,
    n: usize,
    seed: u64,
) -> Result<Vec<f64>> {
    if s.comm.pp_size() > 1 {
        return Err(Error::NoIntervals {
            why: "no interval: neither the fast path nor the timeline's draws price this pipeline (--pp) scenario".into(),
        });
    }
    let w = crate::workload::build(s);
    let pricing = crate::cost::price_quiet(&w, s, p)?;
    let cfg = crate::sim::simulate::engine_config(s, p);
    let mut engine = crate::sim::Engine::new();
    let mut tl = crate::sim::Timeline::default();
    engine.run(&w, &pricing.base_us, &cfg, &mut tl);
    let point = tl.step_time_us();
    if !(point > 0.0) {
        return Ok(Vec::new());
    }
    let mut prices = vec![0.0; w.ops.len()];
    Ok(u.draws(n, seed)
        .iter()
        .map(|d| {
            drawn_prices(&w, &pricing, d, &mut prices);
            engine.run(&w, &prices, &cfg, &mut tl);
            ((tl.step_time_us() + d.step_overhead_us) / point).max(0.0)
        })
        .collect())
}

/// `w`'s timeline prices under draw `d`: each op's price times its family's multiplier, a
/// collective's latency term (the pricing's split) times the latency multiplier.
fn drawn_prices(
    w: &crate::workload::Workload,
    pricing: &crate::cost::Pricing,
    d: &Draw,
    out: &mut Vec<f64>,
) {
    out.clear();
    out.extend(w.ops.iter().enumerate().map(|(i, op)| {
        let b = pricing.base_us[i];
        let m = d.family[op.family as usize];
        if op.family.is_collective() {
            let lat = pricing.split_us[i].clamp(0.0, b.max(0.0));
            lat * d.collective_latency + (b - lat) * m
        } else {
            b * m
        }
    }));
}

/// [`timeline_step_ratios`] of the speculative step at `k` with `draft`: each window of the
/// step played under the draw as `whatif spec-decode` plays it (pass gaps and the exposed host
/// time undrawn, a draw's idle added per window, as the fast path adds it per pass window).
fn timeline_spec_ratios(
    s: &Scenario,
    p: &CalibrationProfile,
    draft: &super::draft::Draft,
    u: &Uncertainty,
    k: u32,
    n: usize,
    seed: u64,
) -> Result<Vec<f64>> {
    let (windows, host_us) = super::spec_decode::step_windows(s, draft, p, k)?;
    let priced = windows
        .into_iter()
        .map(|(w, gap, _)| Ok((crate::cost::price_quiet(&w, s, p)?, w, gap)))
        .collect::<Result<Vec<_>>>()?;
    let cfg = crate::sim::simulate::engine_config(s, p);
    let mut engine = crate::sim::Engine::new();
    let mut tl = crate::sim::Timeline::default();
    let mut point = host_us;
    for (pricing, w, gap) in &priced {
        engine.run(w, &pricing.base_us, &cfg, &mut tl);
        point += tl.step_time_us() + gap;
    }
    if !(point > 0.0) {
        return Ok(Vec::new());
    }
    let mut prices = Vec::new();
    Ok(u.draws(n, seed)
        .iter()
        .map(|d| {
            let mut step = host_us;
            for (pricing, w, gap) in &priced {
                drawn_prices(w, pricing, d, &mut prices);
                engine.run(w, &prices, &cfg, &mut tl);
                step += tl.step_time_us() + gap + d.step_overhead_us;
            }
            (step / point).max(0.0)
        })
        .collect())
}

/// Why a scenario has no interval: the fast path's refusal.
fn unavailable(e: &Error) -> String {
    format!("no interval: the fast path the draws run on cannot price this scenario ({e})")
}

/// [`Drawn::new`] for a what-if, whose intervals are refused with the way out.
fn drawn_or_hint(
    s: &Scenario,
    p: &CalibrationProfile,
    draft: Option<&super::draft::Draft>,
    n: usize,
    seed: u64,
) -> Result<Drawn> {
    // A malformed interval in the profile is its own error, by file and field.
    Uncertainty::from_profile(p, s)?;
    Drawn::new(s, p, draft, n, seed).map_err(|e| Error::NoIntervals {
        why: unavailable(&e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_verdicts() {
        let v: Vec<f64> = (0..=100).map(|i| i as f64).collect();
        let q = Interval::of(&v);
        assert_eq!((q.p5, q.p50, q.p95), (5.0, 50.0, 95.0));
        assert_eq!(Verdict::of(&Interval::point(1.0)), Verdict::CannotTell);
        let helps = Interval {
            p5: 1.01,
            p50: 1.1,
            p95: 1.2,
        };
        assert_eq!(Verdict::of(&helps).name(), "helps");
        let hurts = Interval {
            p5: 0.8,
            p50: 0.9,
            p95: 0.99,
        };
        assert_eq!(Verdict::of(&hurts).name(), "hurts");
    }

    #[test]
    fn normal_deviates_are_standard_and_reproducible() {
        let z: Vec<f64> = (0..20_000).map(|i| normal(7, i, "x")).collect();
        let mean = z.iter().sum::<f64>() / z.len() as f64;
        let var = z.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / z.len() as f64;
        assert!(
            mean.abs() < 0.03 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
        assert_eq!(normal(7, 3, "x"), normal(7, 3, "x"));
        assert_ne!(normal(7, 3, "x"), normal(7, 3, "y"));
        assert_ne!(normal(7, 3, "x"), normal(8, 3, "x"));
    }
}

/// One what-if arm's intervals and its speedup against the base from paired draws.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArmIntervals {
    pub(crate) intervals: Intervals,
    pub speedup: Interval,
}

impl ArmIntervals {
    pub fn verdict(&self) -> Verdict {
        Verdict::of(&self.speedup)
    }

    /// `{"step_time_us": {p5,p50,p95}, "tokens_per_s": {..}, "speedup": {..}, "verdict": ..}`.
    pub(crate) fn json(&self) -> serde_json::Value {
        let mut v = self.intervals.json();
        v["speedup"] = self.speedup.json();
        v["verdict"] = serde_json::json!(self.verdict().name());
        v
    }
}

/// Intervals of `whatif --vary`: the base's, then each variant's (in `study.variants` order)
/// with its speedup over the base, paired draws.
pub fn vary_intervals(
    req: &super::vary::VaryRequest,
    study: &super::vary::VaryStudy,
    n: usize,
    seed: u64,
) -> Result<(Intervals, Vec<ArmIntervals>)> {
    let b = &study.base;
    let (bs, bt) = (b.step_time_us(), b.tokens_per_s());
    if n == 0 {
        let base = Intervals::from_ratios(&[], bs, bt);
        let arms = study
            .variants
            .iter()
            .map(|v| ArmIntervals {
                intervals: Intervals::from_ratios(&[], v.step_time_us, v.tokens_per_s),
                speedup: Interval::point(v.tokens_per_s / bt),
            })
            .collect();
        return Ok((base, arms));
    }
    // One fast path per distinct scenario up to the knobs it takes per call (batch, context,
    // NCCL protocol and algorithm, CUDA graphs): `--vary batch=...` fits once.
    let fit_key = |r: &crate::sim::ScenarioRequest| {
        let mut k = r.clone();
        k.batch = req.base.batch;
        k.context = req.base.context;
        k.proto = req.base.proto;
        k.algo = req.base.algo;
        k.cuda_graphs = req.base.cuda_graphs;
        k
    };
    let mut arms_in = Vec::with_capacity(study.variants.len());
    let mut keys = vec![fit_key(&req.base)];
    let mut loaded = vec![(b.scenario.clone(), b.profile.clone())];
    for v in &study.variants {
        let mut r = req.base.clone();
        for (k, x) in &v.settings {
            super::vary::set(&mut r, k, x)?;
        }
        let (s, p) = r.load()?;
        let key = fit_key(&r);
        let i = match keys.iter().position(|k| *k == key) {
            Some(i) => i,
            None => {
                keys.push(key);
                loaded.push((s.clone(), p.clone()));
                keys.len() - 1
            }
        };
        arms_in.push((i, s, p, v.step_time_us, v.tokens_per_s));
    }
    // The fits are independent: one per core. A scenario the fast path refuses is drawn
    // through the timeline instead, arm by arm (the same seeded draws: still paired).
    use rayon::prelude::*;
    let fits = loaded
        .par_iter()
        .map(|(s, p)| match Drawn::new(s, p, None, n, seed) {
            Ok(d) => Ok(Some(d)),
            Err(_) => {
                // A malformed interval in the profile is its own error, by file and field;
                // else the fast path refused the scenario.
                Uncertainty::from_profile(p, s)?;
                Ok(None)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let ratios_of = |i: usize, s: &Scenario, p: &CalibrationProfile| -> Result<Vec<f64>> {
        match &fits[i] {
            Some(d) => d.step_ratios_of(s, p),
            None => {
                let u = Uncertainty::from_profile(p, s)?;
                timeline_step_ratios(s, p, &u, n, seed)
            }
        }
    };
    let base_ratios = ratios_of(0, &b.scenario, &b.profile)?;
    let mut arms = Vec::with_capacity(arms_in.len());
    for (i, s, p, vs, vt) in arms_in {
        let ratios = ratios_of(i, &s, &p)?;
        // tokens/s per draw ∝ tokens per step / step time: speedup_i = point × base_i / var_i.
        arms.push(ArmIntervals {
            intervals: Intervals::from_ratios(&ratios, vs, vt),
            speedup: speedup_interval(vt / bt, &base_ratios, &ratios),
        });
    }
    Ok((Intervals::from_ratios(&base_ratios, bs, bt), arms))
}

/// Intervals of `whatif spec-decode` per k (in `study.variants` order) at the scenario's batch:
/// the speculative step's, and its speedup over the plain step under the same draws.
pub(crate) fn spec_decode_intervals(
    req: &super::spec_decode::SpecDecodeRequest,
    study: &super::spec_decode::SpecDecodeStudy,
    n: usize,
    seed: u64,
) -> Result<Vec<ArmIntervals>> {
    let point = |v: &super::spec_decode::Variant| ArmIntervals {
        intervals: Intervals::from_ratios(&[], v.step_time_us, v.tokens_per_s),
        speedup: Interval::point(v.speedup),
    };
    if n == 0 {
        return Ok(study.variants.iter().map(point).collect());
    }
    let s = &study.baseline.scenario;
    let p = &study.baseline.profile;
    let draft = super::draft::Draft::load(req.method, req.draft.as_deref(), &s.model)?;
    let d = match Drawn::new(s, p, Some(&draft), n, seed) {
        Ok(d) => d,
        Err(_) => {
            // The fast path refuses (decode-context parallelism): every window on the timeline,
            // under the same seeded draws (paired with the plain step's).
            let u = Uncertainty::from_profile(p, s)?;
            let base = timeline_step_ratios(s, p, &u, n, seed)?;
            return study
                .variants
                .iter()
                .map(|v| {
                    let ratios = timeline_spec_ratios(s, p, &draft, &u, v.draft_tokens, n, seed)?;
                    Ok(ArmIntervals {
                        intervals: Intervals::from_ratios(&ratios, v.step_time_us, v.tokens_per_s),
                        speedup: speedup_interval(v.speedup, &base, &ratios),
                    })
                })
                .collect();
        }
    };
    let base = d.step_ratios(s.batch, s.context);
    let mut out = Vec::with_capacity(study.variants.len());
    for v in &study.variants {
        let Some(ratios) = d.spec_step_ratios(s.batch, s.context, v.draft_tokens) else {
            out.push(point(v));
            continue;
        };
        out.push(ArmIntervals {
            intervals: Intervals::from_ratios(&ratios, v.step_time_us, v.tokens_per_s),
            speedup: speedup_interval(v.speedup, &base, &ratios),
        });
    }
    Ok(out)
}

/// Tokens/s intervals of every sweep row (in `rows` order), one fast path fitted for the grid
/// as the sweep fits it (one per pipeline size), each row's draws replayed on its memo
/// (`sweep --intervals`).
pub(crate) fn sweep_intervals(
    req: &super::sweep::SweepRequest,
    rows: &[super::sweep::Row],
    n: usize,
    seed: u64,
) -> Result<Vec<Interval>> {
    if n == 0 {
        return Ok(rows
            .iter()
            .map(|r| Interval::point(r.tokens_per_s))
            .collect());
    }
    let mut out = vec![Interval::point(f64::NAN); rows.len()];
    let mut pps: Vec<(u32, u32)> = rows.iter().map(|r| (r.pp, r.dp)).collect();
    pps.sort_unstable();
    pps.dedup();
    for (pp, dp) in pps {
        let (idx, sub): (Vec<usize>, Vec<super::sweep::Row>) = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| (r.pp, r.dp) == (pp, dp))
            .map(|(i, r)| (i, *r))
            .unzip();
        let mut base = req.base.clone();
        base.comm.pp = Some(pp);
        base.comm.dp = Some(dp);
        for (i, v) in idx
            .into_iter()
            .zip(sweep_intervals_at(req, &base, &sub, n, seed)?)
        {
            out[i] = v;
        }
    }
    Ok(out)
}

/// [`sweep_intervals`] of rows of one pipeline size, `base` the grid's base at that size.
fn sweep_intervals_at(
    req: &super::sweep::SweepRequest,
    base: &crate::sim::ScenarioRequest,
    rows: &[super::sweep::Row],
    n: usize,
    seed: u64,
) -> Result<Vec<Interval>> {
    use rayon::prelude::*;
    let (scenario, profile) = base.load()?;
    let draft = if rows.iter().any(|r| r.draft_tokens > 0) {
        Some(super::draft::Draft::load(
            req.method,
            req.draft.as_deref(),
            &scenario.model,
        )?)
    } else {
        None
    };
    let d = drawn_or_hint(&scenario, &profile, draft.as_ref(), n, seed)?;
    let mut settings: Vec<(
        crate::scenario::Proto,
        crate::scenario::Algo,
        bool,
        Launch,
        Collectives,
    )> = Vec::new();
    for r in rows {
        if !settings
            .iter()
            .any(|x| (x.0, x.1, x.2) == (r.proto, r.algo, r.cuda_graphs))
        {
            let mut s = scenario.clone();
            s.nccl.proto = r.proto;
            s.nccl.algo = r.algo;
            s.cuda_graphs = r.cuda_graphs;
            let c = Collectives::new(&s, &profile)?;
            let l = Launch::new(&profile, r.cuda_graphs);
            settings.push((r.proto, r.algo, r.cuda_graphs, l, c));
        }
    }
    Ok(rows
        .par_iter()
        .map(|r| {
            let Some((_, _, _, l, c)) = settings
                .iter()
                .find(|x| (x.0, x.1, x.2) == (r.proto, r.algo, r.cuda_graphs))
            else {
                return Interval::point(f64::NAN);
            };
            let f = &d.fast;
            let tps: Vec<f64> = if r.draft_tokens == 0 {
                let base = f.step_us(r.batch, r.context, l, c);
                d.draws
                    .iter()
                    .map(|dr| r.tokens_per_s * base / f.step_us_drawn(r.batch, r.context, l, c, dr))
                    .collect()
            } else {
                let k = r.draft_tokens;
                let Some(base) = f.spec_step_us(r.batch, r.context, k, l, c) else {
                    return Interval::point(r.tokens_per_s);
                };
                d.draws
                    .iter()
                    .filter_map(|dr| f.spec_step_us_drawn(r.batch, r.context, k, l, c, dr))
                    .map(|x| r.tokens_per_s * base.2 / x.2)
                    .collect()
            };
            Interval::of(&tps)
        })
        .collect())
}

/// Tokens/s interval of `concurrency` users at `context` whose time per output token is the
/// decode step (`step_us`, drawn) plus `extra_us` not drawn (e.g. prefill's share): the
/// throughput at the point `capacity` chooses. Inner error as in [`scenario_intervals`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn throughput_interval(
    s: &Scenario,
    p: &CalibrationProfile,
    concurrency: u32,
    context: u64,
    step_us: f64,
    extra_us: f64,
    n: usize,
    seed: u64,
) -> Result<std::result::Result<Interval, String>> {
    let mut s = s.clone();
    s.batch = concurrency;
    s.context = context;
    let tps = concurrency as f64 / (step_us + extra_us) * 1e6;
    let (iv, _) = scenario_intervals(&s, p, step_us, tps, n, seed)?;
    let iv = match iv {
        Ok(iv) => iv,
        Err(why) => return Ok(Err(why)),
    };
    if extra_us == 0.0 {
        return Ok(Ok(iv.tokens_per_s));
    }
    // tokens/s = users / (step + extra): from the step's quantiles (monotone in the step).
    let t = |step: f64| concurrency as f64 / (step + extra_us) * 1e6;
    Ok(Ok(Interval {
        p5: t(iv.step_time_us.p95),
        p50: t(iv.step_time_us.p50),
        p95: t(iv.step_time_us.p5),
    }))
}
