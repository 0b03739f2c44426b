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
//!   (`decodesim validate --write-model-error`), and the idle per step the model lacks (µs);
//!   on a GPU with throughput points of its own (or none validated), the whole step's error
//!   across step sizes ([`StepError`], `data/calibration/step_error/`).
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

mod draws;
mod model_error;
mod scenario;
mod serving;
mod step_error;
mod studies;

use crate::workload::CostFamily;
pub use draws::{Drawn, Intervals};
pub use model_error::{ModelError, MODEL_ERROR_FILE};
pub use scenario::{
    scenario_intervals, scenario_intervals_with, speedup_interval, timeline_step_ratios,
};
use serde::Serialize;
pub use serving::{serve_intervals, ServeIntervals};
pub use step_error::{StepError, STEP_ERROR_DIR};
pub(crate) use studies::{spec_decode_intervals, sweep_intervals, throughput_interval};
pub use studies::{vary_intervals, ArmIntervals};

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
    /// The whole step, by its tokens: the model's error across step sizes on the GPU
    /// ([`StepError`]), drawn as a walk over log2(tokens) and applied to each answer's step at its
    /// own tokens (a speculative step at its verify pass's).
    StepTokens,
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
    /// The model's error across step sizes this scenario's GPU draws, if any.
    pub step: Option<StepError>,
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

#[cfg(test)]
mod tests {
    use super::draws::normal;
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
