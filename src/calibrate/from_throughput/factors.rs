//! The factors a throughput fit may fit: each one's kind, the profile field it scales, its
//! bounds and the axis of the points that identifies it.

use super::points::Point;
use crate::cost::profile::Factors;
use crate::error::{Error, Result};

/// How a factor is fitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FactorKind {
    /// A positive multiplier, fitted as its logarithm (symmetric in "×2" and "÷2").
    Scale,
    /// The routing concentration exponent (`power-law:ALPHA`).
    Routing,
    /// GPU idle per step, µs.
    Overhead,
}

/// One fittable member of [`Factors`]: its name, an alias, and how to read and write it.
pub struct FactorSpec {
    pub name: &'static str,
    alias: &'static str,
    kind: FactorKind,
    /// A finer split of a coarse factor's family (one term of its price): the automatic choice
    /// takes these only once every coarse factor is chosen or refused, so a few points pin down
    /// the coarse picture before the curve's shape.
    pub fine: bool,
    /// What the points must vary for the factor to be identified (`None`: any points).
    pub(super) varies: Option<Axis>,
    get: fn(&Factors) -> Option<f64>,
    set: fn(&mut Factors, f64),
}

/// A quantity a factor scales the effect of, which the points must vary to identify it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Axis {
    /// The decode context (KV length): attention's growth with it.
    Context,
    /// The tokens per step (concurrency; a speculative point's verify pass multiplies it): the
    /// split of a family's price into a part that grows with the tokens and one that does not.
    Tokens,
}

impl Axis {
    /// The point's value on this axis.
    pub(super) fn of(self, p: &Point) -> u64 {
        match self {
            Axis::Context => p.context,
            Axis::Tokens => {
                p.concurrency as u64 * p.spec.as_ref().map_or(1, |s| 1 + s.draft_tokens as u64)
            }
        }
    }
    pub(super) fn what(self) -> &'static str {
        match self {
            Axis::Context => "context",
            Axis::Tokens => "tokens per step (concurrency)",
        }
    }
}

pub(super) const fn scale(
    name: &'static str,
    alias: &'static str,
    get: fn(&Factors) -> Option<f64>,
    set: fn(&mut Factors, f64),
) -> FactorSpec {
    FactorSpec {
        name,
        alias,
        kind: FactorKind::Scale,
        fine: false,
        varies: None,
        get,
        set,
    }
}

/// `scale_factor!(field, "alias")`: a scale member of [`Factors`] as a fittable factor.
macro_rules! scale_factor {
    ($field:ident, $alias:literal) => {
        scale(
            stringify!($field),
            $alias,
            |f| Some(f.$field),
            |f, v| f.$field = v,
        )
    };
    ($field:ident, $alias:literal, fine) => {
        FactorSpec {
            fine: true,
            ..scale_factor!($field, $alias)
        }
    };
    ($field:ident, $alias:literal, fine, $axis:expr) => {
        FactorSpec {
            fine: true,
            varies: Some($axis),
            ..scale_factor!($field, $alias)
        }
    };
}

/// Every factor a throughput fit can speak to, in order of preference when two are equally
/// sensitive. A new scale factor of [`Factors`] joins with one line here. The order is only a
/// preference: a [`Factor`] names its row (`Factor::named`), so reordering changes no meaning.
pub const FACTORS: &[FactorSpec] = &[
    scale_factor!(moe_efficiency, "moe"),
    scale_factor!(collective_bw_scale, "bw"),
    scale_factor!(collective_latency_scale, "latency"),
    FactorSpec {
        name: "routing_alpha",
        alias: "routing",
        kind: FactorKind::Routing,
        fine: false,
        varies: None,
        get: |f| f.routing_alpha,
        set: |f, v| f.routing_alpha = Some(v),
    },
    FactorSpec {
        name: "step_overhead_us",
        alias: "overhead",
        kind: FactorKind::Overhead,
        fine: false,
        varies: None,
        get: |f| Some(f.step_overhead_us),
        set: |f, v| f.step_overhead_us = v,
    },
    // The curve factors (cost::profile::Factors): attention's growth with the KV length and its
    // fixed cost, the routed experts' weight read and per-token work, the dense GEMMs.
    // Attention's growth with the KV length needs points at two contexts at least; the
    // routed experts' split into the weight read and per-token work, two token counts.
    scale_factor!(
        attention_growth_scale,
        "attention_growth",
        fine,
        Axis::Context
    ),
    scale_factor!(attention_fixed_scale, "attention_fixed", fine),
    scale_factor!(moe_weight_scale, "moe_weight", fine, Axis::Tokens),
    scale_factor!(moe_token_scale, "moe_token", fine, Axis::Tokens),
    scale_factor!(dense_gemm_scale, "dense_gemm", fine),
];

/// A factor: its row of [`FACTORS`], found by name (ordered as the rows, by preference).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Factor(usize);

#[allow(non_upper_case_globals)] // named like the enum variants they replace
impl Factor {
    pub const MoeEfficiency: Factor = Factor::named("moe_efficiency");
    pub const CollectiveBw: Factor = Factor::named("collective_bw_scale");
    pub const CollectiveLatency: Factor = Factor::named("collective_latency_scale");
    pub const RoutingAlpha: Factor = Factor::named("routing_alpha");
    pub const StepOverhead: Factor = Factor::named("step_overhead_us");

    /// The factor of [`FACTORS`] called `name`, looked up when the program is compiled: a name
    /// no row has fails the build.
    const fn named(name: &str) -> Factor {
        let mut i = 0;
        while i < FACTORS.len() {
            if same(FACTORS[i].name, name) {
                return Factor(i);
            }
            i += 1;
        }
        panic!("no factor of that name in FACTORS")
    }
}

/// `a == b`, in a constant.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Every factor of [`FACTORS`], in order.
pub static ALL_FACTORS: std::sync::LazyLock<Vec<Factor>> =
    std::sync::LazyLock::new(|| (0..FACTORS.len()).map(Factor).collect());

impl std::str::FromStr for Factor {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let l = s.trim();
        FACTORS
            .iter()
            .position(|f| f.name.eq_ignore_ascii_case(l) || f.alias.eq_ignore_ascii_case(l))
            .map(Factor)
            .ok_or_else(|| Error::Unknown {
                kind: "calibration factor",
                name: crate::units::echo(s),
                choices: FACTORS.iter().map(|f| f.name.to_string()).collect(),
            })
    }
}

impl std::fmt::Display for Factor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Factor {
    pub(super) fn spec(self) -> &'static FactorSpec {
        &FACTORS[self.0]
    }
    pub fn name(self) -> &'static str {
        self.spec().name
    }
    pub(super) fn kind(self) -> FactorKind {
        self.spec().kind
    }
    /// Scale factors are fitted as their logarithm.
    pub(super) fn is_log(self) -> bool {
        self.kind() == FactorKind::Scale
    }
    /// A typical change of the fitted parameter, for judging whether the points depend on it
    /// and for the sensitivity the report prints.
    pub(super) fn unit(self) -> f64 {
        match self.kind() {
            FactorKind::Overhead => 1000.0,
            FactorKind::Routing | FactorKind::Scale => 0.5,
        }
    }
    /// The typical change in words.
    pub(super) fn unit_text(self) -> &'static str {
        match self.kind() {
            FactorKind::Overhead => "+1 ms",
            FactorKind::Routing => "+0.5",
            FactorKind::Scale => "x1.65",
        }
    }
    pub(super) fn step(self) -> f64 {
        match self.kind() {
            FactorKind::Overhead => 50.0,
            FactorKind::Routing => 0.15,
            FactorKind::Scale => 0.02,
        }
    }
    /// Bounds of the fitted parameter (log for scales).
    pub(super) fn bounds(self) -> (f64, f64) {
        match self.kind() {
            FactorKind::Overhead => (0.0, 1e6),
            FactorKind::Routing => (0.0, crate::scenario::routing::MAX_ALPHA),
            FactorKind::Scale => (0.01f64.ln(), 100f64.ln()),
        }
    }
    /// The fitted parameter's value in `f` (`alpha`: the routing exponent when `f` has none).
    pub(super) fn get(self, f: &Factors, alpha: f64) -> f64 {
        let v = (self.spec().get)(f);
        match self.kind() {
            FactorKind::Scale => v.unwrap_or(1.0).ln(),
            FactorKind::Routing => v.unwrap_or(alpha),
            FactorKind::Overhead => v.unwrap_or(0.0),
        }
    }
    pub(super) fn set(self, f: &mut Factors, v: f64) {
        (self.spec().set)(f, if self.is_log() { v.exp() } else { v })
    }
    /// Half-width of a 95% interval (fitted parameter units) that says nothing: a factor of
    /// 10 for scales, half the exponent range, ±10 ms of overhead.
    pub(super) fn too_wide(self, half: f64) -> bool {
        !half.is_finite()
            || match self.kind() {
                FactorKind::Routing => half > crate::scenario::routing::MAX_ALPHA / 2.0,
                FactorKind::Overhead => half > 1e4,
                FactorKind::Scale => half > 10f64.ln() / 2.0,
            }
    }
}
