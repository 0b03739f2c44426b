//! A scenario's routing model as the user states it (`--routing uniform|power-law:ALPHA|FILE`):
//! parsed and checked against the model here; sampled and counted in `workload::routing`.
//!
//! Routing CSV formats (`#` lines are comments, header names in any order, extra columns
//! ignored):
//! - popularity: `expert,tokens` (one vector for every MoE layer) or `layer,expert,tokens`
//!   (per layer; layers not listed take the mean of those listed). `tokens` = tokens routed to
//!   that expert over the logged window (vLLM's per-expert load counts); experts not listed
//!   count 0 and are given half a token, so every expert stays possible.
//! - histogram: `tokens,experts_touched,steps`: how many steps of `tokens` tokens touched that
//!   many distinct experts in a layer; the routing is the power law whose expected count fits it.

use super::check::FloatRange;
use super::limits;
use crate::error::{Error, Result};
use crate::files::{field, HandCsv, InputKind};
use std::path::{Path, PathBuf};

/// The default routing model (see `DEFAULT_POWER_LAW_ALPHA` for why it is not uniform).
pub const DEFAULT_ROUTING: &str = "power-law:0.66";

/// Largest power-law exponent accepted: at 3 the hottest expert already takes 83% of the
/// popularity mass of 384 experts; beyond it a typo is likelier than intent.
pub(crate) const MAX_ALPHA: f64 = 3.0;

/// The decodesim power-law exponents whose experts-touched curves reproduce the latency ratios
/// of AIConfigurator's `power_law_1.01` and `power_law_1.2` MoE tables against `balanced` at
/// moe_tp = 8 (data/calibration/aiconfigurator/rtx_pro_6000_server/moe.csv; fitted by
/// tests/routing.rs `aic_equivalents_reproduce_the_table_ratios`, which states the method).
/// AIConfigurator's ALPHA is the exponent of a per-step draw of tokens per expert, not of a
/// popularity law: the same word, a different number.
pub const AIC_EQUIVALENT_ALPHA: [(&str, f64); 3] = [
    ("balanced", 0.0),
    ("power_law_1.01", 0.66),
    ("power_law_1.2", 0.75),
];

/// The routing model of a scenario.
#[derive(Debug, Clone, PartialEq)]
pub enum Routing {
    /// Every token's top-k drawn uniformly (distinct experts).
    Uniform,
    /// Expert popularity p_i ∝ i^-alpha, hot experts at seeded positions per layer.
    PowerLaw { alpha: f64 },
    /// Per-expert popularity read from a file: one vector for every layer (`layer` = None) or
    /// per layer; layers the file does not list take the mean of those it does.
    Popularity {
        source: PathBuf,
        layers: Vec<(Option<usize>, Vec<f64>)>,
    },
    /// A histogram of experts touched per step as logged from a server; the routing is the
    /// power law whose expected count matches it (fitted when the model is known).
    Histogram {
        source: PathBuf,
        /// (tokens in the step, distinct experts touched, steps seen)
        rows: Vec<(u64, f64, f64)>,
    },
}

impl Default for Routing {
    fn default() -> Self {
        Routing::parse(DEFAULT_ROUTING).expect("the default routing parses")
    }
}

impl std::fmt::Display for Routing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Routing::Uniform => write!(f, "uniform"),
            Routing::PowerLaw { alpha } => write!(f, "power-law:{alpha}"),
            Routing::Popularity { source, .. } | Routing::Histogram { source, .. } => {
                write!(f, "{}", source.display())
            }
        }
    }
}

/// Indices a routing file may name: experts 0..4,095 and layers 0..511 (the ceilings of
/// `scenario::model::limits::EXPERTS` and `LAYERS`); the model's own counts are checked later.
const EXPERT_INDEX: FloatRange = FloatRange::non_negative(4_095.0, "");
const LAYER_INDEX: FloatRange = FloatRange::non_negative(511.0, "");
/// Distinct experts touched in one step: at most the largest expert count accepted.
const TOUCHED: FloatRange = FloatRange::non_negative(4_096.0, "experts");

/// Refuses a column whose sum is not finite (each value is bounded, so this holds by
/// construction; checked anyway, since an infinite total turns every share into NaN).
fn finite_sum(path: &Path, column: &str, v: impl Iterator<Item = f64>) -> Result<()> {
    let total: f64 = v.sum();
    if total.is_finite() {
        Ok(())
    } else {
        Err(Error::field(
            path,
            format!("column {column}"),
            format!("the counts sum to {total}, expected a finite total"),
        ))
    }
}

fn bad(flag_value: &str, expected: &str) -> Error {
    Error::Flag {
        flag: "--routing",
        value: crate::units::clip(flag_value, 80),
        expected: expected.into(),
    }
}

const ROUTING_EXPECTED: &str = "uniform, power-law:ALPHA (0 <= ALPHA <= 3), or a CSV file: \
    `expert,tokens` / `layer,expert,tokens` (popularity) or `tokens,experts_touched,steps` \
    (histogram of experts touched per step)";

impl Routing {
    /// The routing a scenario runs with: the one asked for; else the power law a calibration
    /// fitted (profile factor `routing_alpha`); else the runtime's default (the project's
    /// reference step routes random tokens through random router weights: uniform).
    pub(crate) fn for_request(
        asked: Option<&Routing>,
        fitted_alpha: Option<f64>,
        runtime: super::Runtime,
    ) -> Routing {
        if let Some(r) = asked {
            return r.clone();
        }
        if let Some(r) = fitted_alpha.and_then(|a| Routing::power_law(a).ok()) {
            return r;
        }
        match runtime {
            super::Runtime::Reference => Routing::Uniform,
            super::Runtime::Vllm => Routing::default(),
        }
    }

    /// Parses `uniform`, `power-law:ALPHA` or a file path.
    pub fn parse(s: &str) -> Result<Self> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("uniform") {
            return Ok(Routing::Uniform);
        }
        if let Some(a) = t
            .strip_prefix("power-law:")
            .or_else(|| t.strip_prefix("power_law:"))
        {
            let alpha: f64 = a.trim().parse().map_err(|_| bad(s, ROUTING_EXPECTED))?;
            return Routing::power_law(alpha).map_err(|_| bad(s, ROUTING_EXPECTED));
        }
        let path = Path::new(t);
        if t.is_empty() || !path.exists() {
            return Err(bad(s, ROUTING_EXPECTED));
        }
        Routing::from_file(path)
    }

    pub fn power_law(alpha: f64) -> Result<Self> {
        if !(alpha.is_finite() && (0.0..=MAX_ALPHA).contains(&alpha)) {
            return Err(bad(&alpha.to_string(), ROUTING_EXPECTED));
        }
        Ok(if alpha == 0.0 {
            Routing::Uniform
        } else {
            Routing::PowerLaw { alpha }
        })
    }

    /// Reads a routing CSV (formats in [`ROUTING_EXPECTED`]; `#` lines are comments).
    fn from_file(path: &Path) -> Result<Self> {
        let t = HandCsv::parse(
            &crate::files::read_text(path, InputKind::MeasurementCsv)?,
            path,
            ROUTING_EXPECTED,
        )?;
        if let (Some(ti), Some(ei), Some(si)) =
            (t.col("tokens"), t.col("experts_touched"), t.col("steps"))
        {
            return histogram(path, &t, [ti, ei, si]);
        }
        popularity(path, &t)
    }

    /// Checks a file's routing against the model: expert and layer indices in range, counts
    /// that are possible for top-k of that many experts.
    pub(crate) fn check(&self, experts: usize, top_k: usize, num_layers: usize) -> Result<()> {
        match self {
            Routing::Uniform | Routing::PowerLaw { .. } => Ok(()),
            Routing::Histogram { source, rows } => {
                let k = top_k.min(experts);
                for &(t, touched, _) in rows {
                    let most = (t as f64 * k as f64).min(experts as f64);
                    if touched > most + 1e-9 || touched < k as f64 {
                        return Err(Error::field(
                            source,
                            "experts_touched",
                            format!(
                                "{touched} experts touched by {t} tokens is impossible for top-{k} of {experts} experts (expected {k} to {most})"
                            ),
                        ));
                    }
                }
                Ok(())
            }
            Routing::Popularity { source, layers } => {
                for (layer, v) in layers {
                    if v.len() > experts {
                        return Err(Error::field(
                            source,
                            "expert",
                            format!(
                                "index {} is beyond the model's {experts} routed experts (0..{})",
                                v.len() - 1,
                                experts.saturating_sub(1)
                            ),
                        ));
                    }
                    if let Some(l) = layer {
                        if *l >= num_layers {
                            return Err(Error::field(
                                source,
                                "layer",
                                format!(
                                    "found {l}, expected a layer index 0..{}",
                                    num_layers.saturating_sub(1)
                                ),
                            ));
                        }
                    }
                    if !(v.iter().sum::<f64>() > 0.0) {
                        return Err(Error::field(
                            source,
                            "tokens",
                            format!(
                                "every count {} is 0: no token was routed",
                                match layer {
                                    Some(l) => format!("of layer {l}"),
                                    None => "of the table (no layer column)".to_string(),
                                }
                            ),
                        ));
                    }
                }
                Ok(())
            }
        }
    }
}

/// A cell within a physical range (`scenario::limits`), so no sum overflows to infinity and no
/// index saturates: the error names the file, line and column.
fn cell_in_range(path: &Path, line: usize, field: &str, v: &str, r: &FloatRange) -> Result<f64> {
    match v.parse::<f64>() {
        Ok(x) if r.contains(x) => Ok(x),
        _ => Err(Error::field(
            path,
            format!("line {line}, column {field}"),
            format!(
                "found '{}', expected {}",
                crate::units::clip(v, 40),
                r.describe()
            ),
        )),
    }
}

/// A whole-number index cell within `r`.
fn index_cell(path: &Path, line: usize, field: &str, v: &str, r: &FloatRange) -> Result<usize> {
    let x = cell_in_range(path, line, field, v, r)?;
    if x.fract() != 0.0 {
        return Err(Error::field(
            path,
            format!("line {line}, column {field}"),
            format!("found {x}, expected a whole-number index"),
        ));
    }
    Ok(x as usize)
}

/// The histogram form: (tokens, experts touched, steps) rows at the columns `cols`; rows of
/// no steps are left out.
fn histogram(path: &Path, t: &HandCsv, cols: [usize; 3]) -> Result<Routing> {
    let [ti, ei, si] = cols;
    let mut rows = Vec::new();
    for (line, f) in &t.rows {
        let line = *line;
        let tokens = cell_in_range(path, line, "tokens", field(f, ti), &limits::STEP_TOKENS)?;
        let touched = cell_in_range(path, line, "experts_touched", field(f, ei), &TOUCHED)?;
        let steps = cell_in_range(path, line, "steps", field(f, si), &limits::LOG_COUNT)?;
        if tokens < 1.0 || tokens.fract() != 0.0 {
            return Err(Error::field(
                path,
                format!("line {line}, column tokens"),
                format!("found {tokens}, expected a whole number of tokens, at least 1"),
            ));
        }
        if steps > 0.0 {
            rows.push((tokens as u64, touched, steps));
        }
    }
    if rows.is_empty() {
        return Err(Error::field(path, "rows", "no row with steps > 0"));
    }
    finite_sum(path, "steps", rows.iter().map(|r| r.2))?;
    Ok(Routing::Histogram {
        source: path.to_path_buf(),
        rows,
    })
}

/// The popularity form: tokens per expert, per layer where a `layer` column gives it.
fn popularity(path: &Path, t: &HandCsv) -> Result<Routing> {
    let ei_ci = t.require(
        &["expert", "tokens"],
        &format!("columns {ROUTING_EXPECTED}"),
    )?;
    let (ei, ci) = (ei_ci[0], ei_ci[1]);
    let li = t.col("layer");
    let mut layers: Vec<(Option<usize>, Vec<f64>)> = Vec::new();
    for (line, f) in &t.rows {
        let line = *line;
        let layer = match li {
            Some(i) => Some(index_cell(path, line, "layer", field(f, i), &LAYER_INDEX)?),
            None => None,
        };
        let e = index_cell(path, line, "expert", field(f, ei), &EXPERT_INDEX)?;
        let count = cell_in_range(path, line, "tokens", field(f, ci), &limits::LOG_COUNT)?;
        let pos = match layers.iter().position(|(l, _)| *l == layer) {
            Some(p) => p,
            None => {
                layers.push((layer, Vec::new()));
                layers.len() - 1
            }
        };
        let v = &mut layers[pos].1;
        if v.len() <= e {
            v.resize(e + 1, 0.0);
        }
        v[e] += count;
    }
    if layers.is_empty() {
        return Err(Error::field(path, "rows", "no expert rows"));
    }
    for (_, v) in &layers {
        finite_sum(path, "tokens", v.iter().copied())?;
    }
    Ok(Routing::Popularity {
        source: path.to_path_buf(),
        layers,
    })
}
