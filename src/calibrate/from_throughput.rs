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

use super::output::{table_reference, write_profile};
use crate::cost::profile::Factors;
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::files::InputKind;
use crate::scenario::knobs;
use crate::scenario::routing::Routing;
use crate::scenario::{Algo, Proto, Scenario};
use crate::sim::{simulate_loaded, Engine, ScenarioRequest, Timeline};
use crate::whatif::acceptance::Acceptance;
use crate::whatif::draft::{Draft, Method};
use nalgebra::{DMatrix, DVector};
use statrs::distribution::{ContinuousCDF, StudentsT};
use std::path::{Path, PathBuf};

/// How a factor is fitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FactorKind {
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
    varies: Option<Axis>,
    get: fn(&Factors) -> Option<f64>,
    set: fn(&mut Factors, f64),
}

/// A quantity a factor scales the effect of, which the points must vary to identify it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Axis {
    /// The decode context (KV length): attention's growth with it.
    Context,
    /// The tokens per step (concurrency; a speculative point's verify pass multiplies it): the
    /// split of a family's price into a part that grows with the tokens and one that does not.
    Tokens,
}

impl Axis {
    /// The point's value on this axis.
    fn of(self, p: &Point) -> u64 {
        match self {
            Axis::Context => p.context,
            Axis::Tokens => {
                p.concurrency as u64 * p.spec.as_ref().map_or(1, |s| 1 + s.draft_tokens as u64)
            }
        }
    }
    fn what(self) -> &'static str {
        match self {
            Axis::Context => "context",
            Axis::Tokens => "tokens per step (concurrency)",
        }
    }
}

const fn scale(
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
/// sensitive. A new scale factor of [`Factors`] joins with one line here.
pub static FACTORS: &[FactorSpec] = &[
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

/// A factor: an index into [`FACTORS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Factor(usize);

#[allow(non_upper_case_globals)] // named like the enum variants they replace
impl Factor {
    pub const MoeEfficiency: Factor = Factor(0);
    pub const CollectiveBw: Factor = Factor(1);
    pub const CollectiveLatency: Factor = Factor(2);
    pub const RoutingAlpha: Factor = Factor(3);
    pub const StepOverhead: Factor = Factor(4);
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
    fn spec(self) -> &'static FactorSpec {
        &FACTORS[self.0]
    }
    pub fn name(self) -> &'static str {
        self.spec().name
    }
    fn kind(self) -> FactorKind {
        self.spec().kind
    }
    /// Scale factors are fitted as their logarithm.
    fn is_log(self) -> bool {
        self.kind() == FactorKind::Scale
    }
    /// A typical change of the fitted parameter, for judging whether the points depend on it
    /// and for the sensitivity the report prints.
    fn unit(self) -> f64 {
        match self.kind() {
            FactorKind::Overhead => 1000.0,
            FactorKind::Routing | FactorKind::Scale => 0.5,
        }
    }
    /// The typical change in words.
    fn unit_text(self) -> &'static str {
        match self.kind() {
            FactorKind::Overhead => "+1 ms",
            FactorKind::Routing => "+0.5",
            FactorKind::Scale => "x1.65",
        }
    }
    fn step(self) -> f64 {
        match self.kind() {
            FactorKind::Overhead => 50.0,
            FactorKind::Routing => 0.15,
            FactorKind::Scale => 0.02,
        }
    }
    /// Bounds of the fitted parameter (log for scales).
    fn bounds(self) -> (f64, f64) {
        match self.kind() {
            FactorKind::Overhead => (0.0, 1e6),
            FactorKind::Routing => (0.0, crate::scenario::routing::MAX_ALPHA),
            FactorKind::Scale => (0.01f64.ln(), 100f64.ln()),
        }
    }
    /// The fitted parameter's value in `f` (`alpha`: the routing exponent when `f` has none).
    fn get(self, f: &Factors, alpha: f64) -> f64 {
        let v = (self.spec().get)(f);
        match self.kind() {
            FactorKind::Scale => v.unwrap_or(1.0).ln(),
            FactorKind::Routing => v.unwrap_or(alpha),
            FactorKind::Overhead => v.unwrap_or(0.0),
        }
    }
    fn set(self, f: &mut Factors, v: f64) {
        (self.spec().set)(f, if self.is_log() { v.exp() } else { v })
    }
    /// Half-width of a 95% interval (fitted parameter units) that says nothing: a factor of
    /// 10 for scales, half the exponent range, ±10 ms of overhead.
    fn too_wide(self, half: f64) -> bool {
        !half.is_finite()
            || match self.kind() {
                FactorKind::Routing => half > crate::scenario::routing::MAX_ALPHA / 2.0,
                FactorKind::Overhead => half > 1e4,
                FactorKind::Scale => half > 10f64.ln() / 2.0,
            }
    }
}

/// How a point's acceptance was measured (vLLM's terms, docs/sources.md §5).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MeasuredAcceptance {
    /// Draft acceptance rate: accepted / drafted tokens.
    Rate(f64),
    /// Mean acceptance length: 1 + accepted / drafts (bonus token included).
    Length(f64),
}

/// Speculative decoding as a point ran it.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecPoint {
    method: Method,
    pub draft_tokens: u32,
    pub acceptance: MeasuredAcceptance,
}

impl SpecPoint {
    /// vLLM's acceptance rate (a mean length L at k draft tokens is a rate (L − 1) / k).
    fn acceptance(&self) -> std::result::Result<Acceptance, String> {
        let k = self.draft_tokens as f64;
        let r = match self.acceptance {
            MeasuredAcceptance::Rate(r) => r,
            MeasuredAcceptance::Length(l) => {
                if !(l.is_finite() && (1.0..=k + 1.0).contains(&l)) {
                    return Err(format!(
                        "mean acceptance length {l} is impossible at {} draft tokens: expected 1..={} (1 + accepted / drafts)",
                        self.draft_tokens,
                        self.draft_tokens + 1
                    ));
                }
                (l - 1.0) / k
            }
        };
        Acceptance::rate(r).map_err(|e| e.to_string())
    }
}

/// What the point's number is.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Measured {
    /// Output tokens/s over all sequences.
    #[default]
    TokensPerS,
    /// Time per output token, ms (tokens/s = concurrency / TPOT).
    TpotMs(f64),
}

/// One measured benchmark point.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Point {
    /// The file it came from (empty: the request's `source`).
    pub file: PathBuf,
    /// Line in the file (CSV header = 1; a JSON object's first line).
    pub line: usize,
    pub concurrency: u32,
    /// Mean KV length during decode, tokens.
    pub context: u64,
    /// Measured output tokens/s (from TPOT when `measured` says so).
    pub tokens_per_s: f64,
    pub measured: Measured,
    pub kv_bytes: Option<f64>,
    pub proto: Option<Proto>,
    pub algo: Option<Algo>,
    pub p2p: Option<bool>,
    pub dcp: Option<u32>,
    pub spec: Option<SpecPoint>,
    /// The server's tensor-parallel size the result states (`tensor_parallel_size` in a
    /// `vllm bench serve` result's metadata): checked against the scenario's `--tp`.
    pub tp: Option<u32>,
    /// The served model the result names (`model_id`): checked against the scenario's model.
    pub model_id: Option<String>,
    /// A `vllm bench serve` result read in the serving mode: the run it replays
    /// (`calibrate::serving`); None: one decode step at `context`.
    pub serving: Option<super::serving::ServeShape>,
}

/// A served model's id (`moonshotai/Kimi-K2.5`) names the scenario's model (`kimi-k2.5`): the
/// last path segments, lowercased and without punctuation, one within the other. A model read
/// from a bare `config.json` has no name to hold against.
pub(crate) fn model_id_matches(id: &str, model: &str) -> bool {
    let norm = |t: &str| -> String {
        t.rsplit('/')
            .next()
            .unwrap_or(t)
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .flat_map(|c| c.to_lowercase())
            .collect()
    };
    let (a, b) = (norm(id), norm(model));
    b.is_empty() || b == "config" || a.contains(&b) || b.contains(&a)
}

impl Point {
    fn label(&self) -> String {
        let mut s = format!(
            "c={} ctx={} {:.1} tok/s",
            self.concurrency, self.context, self.tokens_per_s
        );
        if let Measured::TpotMs(t) = self.measured {
            s += &format!(" (TPOT {t} ms)");
        }
        if let Some(p) = self.proto {
            s += &format!(" proto={}", p.name());
        }
        if let Some(a) = self.algo {
            s += &format!(" algo={}", a.name());
        }
        if let Some(p) = self.p2p {
            s += if p { " p2p=on" } else { " p2p=off" };
        }
        if self.kv_bytes == Some(1.0) {
            s += " kv=fp8";
        }
        if let Some(d) = self.dcp {
            s += &format!(" dcp={d}");
        }
        if let Some(sp) = &self.spec {
            s += &format!(
                " spec={} k={} {}",
                sp.method.name(),
                sp.draft_tokens,
                match sp.acceptance {
                    MeasuredAcceptance::Rate(r) => format!("acceptance rate {r}"),
                    MeasuredAcceptance::Length(l) => format!("acceptance length {l}"),
                }
            );
        }
        s
    }

    /// Where the point is: `file line N`.
    fn origin(&self, fallback: &Path) -> String {
        let f = if self.file.as_os_str().is_empty() {
            fallback
        } else {
            &self.file
        };
        format!("{} line {}", crate::units::path(f), self.line)
    }

    /// The point's scenario settings as knobs of the table: batch (the concurrency), context,
    /// and the optional columns it gives.
    pub fn settings(&self) -> Vec<(&'static knobs::Knob, knobs::Value)> {
        use knobs::{knob, KvDtype, Value};
        let mut out = vec![
            (knob("batch"), Value::Whole(self.concurrency.into())),
            (knob("context"), Value::Whole(self.context)),
        ];
        if let Some(d) = self.kv_bytes.and_then(KvDtype::of_bytes) {
            out.push((knob("kv-cache-dtype"), Value::KvDtype(d)));
        }
        if let Some(x) = self.proto {
            out.push((knob("nccl-proto"), Value::Proto(x)));
        }
        if let Some(x) = self.algo {
            out.push((knob("nccl-algo"), Value::Algo(x)));
        }
        if let Some(x) = self.p2p {
            out.push((knob("p2p"), Value::Switch(x)));
        }
        if let Some(x) = self.dcp {
            out.push((knob("dcp"), Value::Whole(x.into())));
        }
        out
    }

    /// The same settings (everything but concurrency): the points of one curve.
    fn curve(&self) -> String {
        format!(
            "{} {:?} {:?} {:?} {:?} {:?} {:?}",
            self.context,
            self.kv_bytes.map(|b| b as u64),
            self.proto,
            self.algo,
            self.p2p,
            self.dcp.unwrap_or(1),
            self.spec
        )
    }
}

/// Reads benchmark points from every file: `vllm bench serve --save-result` JSON (`.json`,
/// `.jsonl`, or any file whose first character is `{`) or a throughput CSV. `tpot` takes the
/// JSON files' median TPOT instead of their output throughput.
pub fn read_inputs(
    paths: &[PathBuf],
    bench: &super::bench_serve::BenchOptions,
) -> Result<Vec<Point>> {
    let mut points = Vec::new();
    for p in paths {
        let text = crate::files::read_text(p, InputKind::MeasurementCsv)?;
        let is_json = p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("json") || e.eq_ignore_ascii_case("jsonl"))
            || text.trim_start().starts_with('{');
        if is_json {
            points.extend(super::bench_serve::parse_bench(&text, p, bench)?);
        } else {
            points.extend(parse_csv(&text, p)?);
        }
    }
    check_points(&points)?;
    Ok(points)
}

/// Reads and checks a throughput CSV.
pub fn read_points(path: &Path) -> Result<Vec<Point>> {
    let text = crate::files::read_text(path, InputKind::MeasurementCsv)?;
    let points = parse_csv(&text, path)?;
    check_points(&points)?;
    Ok(points)
}

fn parse_csv(text: &str, path: &Path) -> Result<Vec<Point>> {
    let mut rdr = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .from_reader(text.as_bytes());
    let headers = rdr
        .headers()
        .map_err(|e| Error::field(path, "header", format!("unreadable: {e}")))?
        .clone();
    let col = |name: &str| headers.iter().position(|h| h.eq_ignore_ascii_case(name));
    let mut missing: Vec<&str> = ["concurrency", "context"]
        .iter()
        .copied()
        .filter(|c| col(c).is_none())
        .collect();
    if col("tokens_per_s").is_none() && col("tpot_ms").is_none() {
        missing.push("tokens_per_s (or tpot_ms)");
    }
    if !missing.is_empty() {
        return Err(Error::field(
            path,
            "header",
            format!(
                "missing column(s) {}; expected concurrency,context,tokens_per_s or tpot_ms (optional kv_cache_dtype, nccl_proto, nccl_algo, p2p, allreduce, dcp, spec_method, draft_tokens, acceptance_rate, acceptance_length); found '{}'",
                missing.join(", "),
                crate::units::clip(&headers.iter().collect::<Vec<_>>().join(","), 40)
            ),
        ));
    }
    let mut points = Vec::new();
    for (i, rec) in rdr.records().enumerate() {
        let rec = rec.map_err(|e| Error::field(path, format!("line {}", i + 2), e.to_string()))?;
        // The record's own line (comments and blank lines skipped by the reader count).
        let line = rec.position().map_or(i + 2, |p| p.line() as usize);
        let field = |name: &str| -> Option<String> {
            col(name)
                .and_then(|c| rec.get(c))
                .map(str::to_string)
                .filter(|v| !v.is_empty())
        };
        let fail = |name: &str, v: &str, allowed: &str| {
            Error::field(
                path,
                format!("line {line}, column {name}"),
                format!("found '{}', expected {allowed}", crate::units::clip(v, 40)),
            )
        };
        let raw = |name: &str| field(name).unwrap_or_default();
        let concurrency: u32 = raw("concurrency")
            .parse()
            .ok()
            .filter(|&c| (1..=crate::scenario::deployment::MAX_BATCH).contains(&c))
            .ok_or_else(|| {
                fail(
                    "concurrency",
                    &raw("concurrency"),
                    &format!(
                        "a whole number 1..{}",
                        crate::scenario::deployment::MAX_BATCH
                    ),
                )
            })?;
        let context: u64 = raw("context")
            .parse()
            .ok()
            .filter(|&c| c >= 1)
            .ok_or_else(|| {
                fail(
                    "context",
                    &raw("context"),
                    "a whole number of tokens, at least 1",
                )
            })?;
        let rate = |name: &str, v: &str| {
            v.parse::<f64>()
                .ok()
                .filter(|t| t.is_finite() && *t > 0.0 && *t < 1e9)
                .ok_or_else(|| fail(name, v, "a positive number below 1e9"))
        };
        let (tokens_per_s, measured) = match (field("tokens_per_s"), field("tpot_ms")) {
            (Some(t), _) => (rate("tokens_per_s", &t)?, Measured::TokensPerS),
            (None, Some(t)) => {
                let ms = rate("tpot_ms", &t)?;
                (concurrency as f64 * 1e3 / ms, Measured::TpotMs(ms))
            }
            (None, None) => {
                return Err(fail(
                    "tokens_per_s",
                    "",
                    "a positive rate (or a tpot_ms value)",
                ))
            }
        };
        // The scenario columns: each a knob of the table (`nccl_proto` or `nccl-proto`), read by
        // the knob's parser and applied to a scratch request, from which the point takes it.
        let mut r = ScenarioRequest::default();
        let mut setting = |name: &str| -> Result<bool> {
            let k = knobs::knob(name);
            let Some(v) = field(&k.column()).or_else(|| field(k.name())) else {
                return Ok(false);
            };
            let value = k
                .parse_value(&v)
                .map_err(|_| fail(&k.column(), &v, k.expected))?;
            k.apply(&mut r, value);
            Ok(true)
        };
        let kv = setting("kv-cache-dtype")?;
        let proto = setting("nccl-proto")?;
        let algo = setting("nccl-algo")?;
        let p2p = setting("p2p")?;
        let (kv_bytes, proto, algo, p2p) = (
            kv.then_some(r.kv_bytes),
            proto.then_some(r.proto),
            algo.then_some(r.algo),
            p2p.then_some(r.p2p),
        );
        if let Some(v) = field("allreduce") {
            if !v.eq_ignore_ascii_case("nccl") {
                return Err(fail(
                    "allreduce",
                    &v,
                    "nccl (per-point allreduce implementations are not fitted yet: split the file by implementation and pass --allreduce)",
                ));
            }
        }
        let dcp = match field("dcp") {
            None => None,
            Some(v) => Some(
                v.parse::<u32>()
                    .ok()
                    .filter(|d| (1..=1024).contains(d))
                    .ok_or_else(|| {
                        fail(
                            "dcp",
                            &v,
                            "a whole number 1..1024 (the decode-context-parallel size)",
                        )
                    })?,
            ),
        };
        let spec = spec_point(
            field("spec_method"),
            field("draft_tokens"),
            field("acceptance_rate"),
            field("acceptance_length"),
        )
        .map_err(|(name, v, allowed)| fail(name, &v, &allowed))?;
        points.push(Point {
            file: path.to_path_buf(),
            line,
            concurrency,
            context,
            tokens_per_s,
            measured,
            kv_bytes,
            proto,
            algo,
            p2p,
            dcp,
            spec,
            tp: None,
            model_id: None,
            serving: None,
        });
    }
    if points.is_empty() {
        return Err(Error::field(path, "rows", "no data rows"));
    }
    Ok(points)
}

/// KV element size of a vLLM `--kv-cache-dtype` value (the knob's parser).
pub(crate) fn kv_dtype_bytes(v: &str) -> Option<f64> {
    crate::scenario::knobs::KvDtype::parse(v).map(|d| d.bytes())
}

/// The speculative settings of a point from its four fields (all absent: none). On error:
/// (field, value, what was expected).
pub(crate) fn spec_point(
    method: Option<String>,
    k: Option<String>,
    rate: Option<String>,
    length: Option<String>,
) -> std::result::Result<Option<SpecPoint>, (&'static str, String, String)> {
    let Some(m) = method else {
        for (name, v) in [
            ("draft_tokens", &k),
            ("acceptance_rate", &rate),
            ("acceptance_length", &length),
        ] {
            if let Some(v) = v {
                return Err((
                    name,
                    v.clone(),
                    "no value without spec_method (eagle3 or mtp)".into(),
                ));
            }
        }
        return Ok(None);
    };
    if ["none", "off", "no", ""].contains(&m.to_ascii_lowercase().as_str()) {
        return Ok(None);
    }
    let method: Method = m.parse().map_err(|_| {
        (
            "spec_method",
            m.clone(),
            "eagle3, mtp or draft-model".to_string(),
        )
    })?;
    let kv = k.ok_or_else(|| {
        (
            "draft_tokens",
            String::new(),
            "the number of draft tokens (vLLM's num_speculative_tokens), 1..16".to_string(),
        )
    })?;
    let draft_tokens = kv
        .parse::<u32>()
        .ok()
        .filter(|k| (1..=16).contains(k))
        .ok_or_else(|| {
            (
                "draft_tokens",
                kv.clone(),
                "a whole number 1..16".to_string(),
            )
        })?;
    let num = |name: &'static str, v: &str| {
        v.parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| (name, v.to_string(), "a number".to_string()))
    };
    let acceptance = match (rate, length) {
        (Some(r), None) => MeasuredAcceptance::Rate(num("acceptance_rate", &r)?),
        (None, Some(l)) => MeasuredAcceptance::Length(num("acceptance_length", &l)?),
        (Some(r), Some(_)) => {
            return Err(("acceptance_rate", r, "either acceptance_rate or acceptance_length, not both".into()))
        }
        (None, None) => {
            return Err(("acceptance_rate", String::new(), "the measured acceptance: acceptance_rate (accepted / drafted tokens) or acceptance_length (1 + accepted / drafts)".into()))
        }
    };
    let sp = SpecPoint {
        method,
        draft_tokens,
        acceptance,
    };
    if let Err(why) = sp.acceptance() {
        let (name, v) = match acceptance {
            MeasuredAcceptance::Rate(r) => ("acceptance_rate", r.to_string()),
            MeasuredAcceptance::Length(l) => ("acceptance_length", l.to_string()),
        };
        return Err((name, v, why));
    }
    Ok(Some(sp))
}

/// Refuses what no set of decode benchmarks produces: the same point twice with different
/// rates (more than 25% apart: beyond run-to-run noise and scheduler effects), the very same
/// measurement repeated (it would count as independent evidence and make the interval falsely
/// narrow, down to zero width), total throughput collapsing as concurrency grows, or each
/// sequence getting faster with more company.
fn check_points(points: &[Point]) -> Result<()> {
    const SLACK: f64 = 1.25;
    let pair_err = |a: &Point, b: &Point, why: String| {
        if a.file == b.file {
            Error::field(
                &a.file,
                format!("lines {} and {}", a.line.min(b.line), a.line.max(b.line)),
                why,
            )
        } else {
            Error::Conflict {
                first: a.origin(Path::new("")).to_string(),
                second: b.origin(Path::new("")).to_string(),
                problem: why,
            }
        }
    };
    for (i, a) in points.iter().enumerate() {
        for b in &points[i + 1..] {
            if a.curve() != b.curve() {
                continue;
            }
            let (lo, hi) = if a.concurrency <= b.concurrency {
                (a, b)
            } else {
                (b, a)
            };
            let why = if lo.concurrency == hi.concurrency {
                let r = hi.tokens_per_s / lo.tokens_per_s;
                if r == 1.0 {
                    Some("the same measurement repeated (same settings, same rate): a copy adds no information and would shrink the confidence interval to nothing; keep one".to_string())
                } else if r > SLACK || r < 1.0 / SLACK {
                    Some(format!(
                        "contradictory: the same settings measured twice with rates {:.1} and {:.1} tok/s, more than 25% apart",
                        lo.tokens_per_s, hi.tokens_per_s
                    ))
                } else {
                    None
                }
            } else if hi.tokens_per_s * SLACK < lo.tokens_per_s {
                Some(format!(
                    "not a decode throughput curve: total tokens/s falls from {:.1} to {:.1} as concurrency grows from {} to {} (a decode step with more sequences is never that much slower per step's work)",
                    lo.tokens_per_s, hi.tokens_per_s, lo.concurrency, hi.concurrency
                ))
            } else if hi.tokens_per_s / hi.concurrency as f64
                > SLACK * lo.tokens_per_s / lo.concurrency as f64
            {
                Some(format!(
                    "not a decode throughput curve: tokens/s per sequence rises from {:.2} to {:.2} as concurrency grows from {} to {} (sequences sharing a step cannot each run faster)",
                    lo.tokens_per_s / lo.concurrency as f64,
                    hi.tokens_per_s / hi.concurrency as f64,
                    lo.concurrency,
                    hi.concurrency
                ))
            } else {
                None
            };
            if let Some(why) = why {
                return Err(pair_err(lo, hi, why));
            }
        }
    }
    Ok(())
}

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

/// A point ready to price: its scenario and, for a speculative point, the drafter, k and the
/// acceptance.
struct Priced {
    scenario: Scenario,
    spec: Option<(Draft, u32, Acceptance)>,
    serving: Option<super::serving::ServeShape>,
}

/// The loaded scenarios of the points, priced under trial factors.
struct Model {
    points: Vec<Priced>,
    profile: CalibrationProfile,
    /// The user passed --routing: the routing factor cannot apply.
    routing_fixed: bool,
    start_alpha: f64,
}

impl Model {
    fn new(req: &ThroughputRequest) -> Result<Self> {
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
        let profile = profile.ok_or_else(|| Error::Invariant("no points"))?;
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

    fn factors_at(&self, which: &[Factor], theta: &[f64]) -> Factors {
        let mut f = self.profile.factors.clone();
        for (k, v) in which.iter().zip(theta) {
            k.set(&mut f, *v);
        }
        f
    }

    /// Predicted tokens/s of every point under these factors.
    fn predict(&self, f: &Factors) -> Result<Vec<f64>> {
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
                (None, Some(run)) => super::serving::tokens_per_s(&s, &profile, run)?,
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

    fn residuals(&self, which: &[Factor], theta: &[f64], meas: &[f64]) -> Result<Vec<f64>> {
        let pred = self.predict(&self.factors_at(which, theta))?;
        Ok(pred.iter().zip(meas).map(|(p, m)| (p / m).ln()).collect())
    }

    /// Forward-difference Jacobian of the log residuals (steps away from the upper bound).
    fn jacobian(
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

/// Below this rms change of the predictions for a typical change of the factor (0.1%), no
/// point depends on it.
const MIN_SENSITIVITY: f64 = 1e-3;
/// A factor whose effect, once the chosen ones are fitted, keeps less than this share of its
/// own size is collinear with them (|cosine| above 0.995: a variance inflation of 100).
const MIN_INDEPENDENT_SHARE: f64 = 0.1;
/// ... or less than this share of the strongest factor's effect: too weak to pin down beside it.
const MIN_SHARE_OF_FIRST: f64 = 0.01;

/// Greedy pivoted QR on the Jacobian's columns (each scaled to a typical change of its
/// factor): take the most sensitive column, orthogonalise the others against it, take the
/// largest remainder, and so on, while what remains is independent enough and at most `max`
/// factors. Returns every candidate's row; `chosen` rows in the order picked.
fn choose(which: &[Factor], j: &DMatrix<f64>, max: usize) -> Vec<FactorChoice> {
    let n = j.nrows();
    let rms = |v: &DVector<f64>| v.norm() / (n as f64).sqrt();
    let scaled: Vec<DVector<f64>> = which
        .iter()
        .enumerate()
        .map(|(c, k)| j.column(c).into_owned() * k.unit())
        .collect();
    let sens: Vec<f64> = scaled.iter().map(rms).collect();
    let mut rows: Vec<FactorChoice> = which
        .iter()
        .zip(&sens)
        .map(|(k, s)| FactorChoice {
            factor: *k,
            sensitivity: *s,
            independent: *s,
            chosen: false,
            why: String::new(),
        })
        .collect();
    let mut rest: Vec<DVector<f64>> = scaled.clone();
    let mut picked: Vec<usize> = Vec::new();
    let mut first = 0.0;
    for (c, r) in rows.iter_mut().enumerate() {
        if sens[c] < MIN_SENSITIVITY {
            r.why = format!(
                "not identifiable: no point depends on it ({} moves the predictions by {:.3}% rms)",
                which[c].unit_text(),
                100.0 * sens[c]
            );
        }
    }
    loop {
        let open_all: Vec<usize> = (0..which.len())
            .filter(|&c| rows[c].why.is_empty())
            .collect();
        // Coarse factors first; the fine splits once no coarse one is open.
        let coarse_open = open_all.iter().any(|&c| !which[c].spec().fine);
        let open: Vec<usize> = open_all
            .iter()
            .copied()
            .filter(|&c| !coarse_open || !which[c].spec().fine)
            .collect();
        // The largest remainder; ties go to the factor listed first.
        let Some(&best) = open
            .iter()
            .max_by(|&&a, &&b| rms(&rest[a]).total_cmp(&rms(&rest[b])).then(b.cmp(&a)))
        else {
            break;
        };
        let left = rms(&rest[best]);
        if picked.is_empty() {
            first = left;
        }
        // The chosen factor this one looks most like (largest |cosine| of the scaled columns).
        let twin = |c: usize| {
            picked
                .iter()
                .map(|&p| {
                    let cos = scaled[c].dot(&scaled[p]) / (scaled[c].norm() * scaled[p].norm());
                    (p, cos.abs())
                })
                .max_by(|a, b| a.1.total_cmp(&b.1))
        };
        if !picked.is_empty()
            && (left < MIN_INDEPENDENT_SHARE * sens[best] || left < MIN_SHARE_OF_FIRST * first)
        {
            // Nothing left is independent enough: say so for every open factor.
            for &c in &open {
                let l = rms(&rest[c]);
                rows[c].independent = l;
                rows[c].why = match twin(c) {
                    Some((p, cos)) if l < MIN_INDEPENDENT_SHARE * sens[c] => format!(
                        "not identifiable: collinear with {} (|cosine| {cos:.4}; only {:.1}% of its effect is its own)",
                        which[p],
                        100.0 * l / sens[c]
                    ),
                    _ => format!(
                        "not identifiable: once {} {} fitted, what is left of its effect ({:.3}% rms) is below 1% of the strongest factor's",
                        picked.iter().map(|&p| which[p].name()).collect::<Vec<_>>().join(", "),
                        if picked.len() == 1 { "is" } else { "are" },
                        100.0 * l
                    ),
                };
            }
            if coarse_open {
                continue;
            }
            break;
        }
        if picked.len() >= max {
            for &c in &open_all {
                rows[c].independent = rms(&rest[c]);
                rows[c].why = format!(
                    "not fitted: {n} point(s) identify at most {max} factor(s) with an interval; ranked below {} (give more points, or name the factors with --factors)",
                    picked.iter().map(|&p| which[p].name()).collect::<Vec<_>>().join(", ")
                );
            }
            break;
        }
        rows[best].independent = left;
        rows[best].chosen = true;
        rows[best].why = if picked.is_empty() {
            "chosen: the most sensitive".to_string()
        } else {
            format!(
                "chosen: {:.0}% of its effect is independent of {}",
                100.0 * left / sens[best],
                picked
                    .iter()
                    .map(|&p| which[p].name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let q = &rest[best] / rest[best].norm();
        picked.push(best);
        for r in rest.iter_mut() {
            let d = r.dot(&q);
            *r -= &q * d;
        }
    }
    let mut out: Vec<FactorChoice> = picked.iter().map(|&c| rows[c].clone()).collect();
    out.extend(rows.into_iter().filter(|r| !r.chosen));
    out
}
/// Drops the factors the points do not depend on, then, while the columns are nearly
/// collinear, the one most explained by the others (largest variance inflation).
fn identifiable(which: &mut Vec<Factor>, j: &DMatrix<f64>, refused: &mut Vec<(Factor, String)>) {
    let mut cols: Vec<usize> = (0..which.len()).collect();
    let norm = |c: usize| j.column(c).norm() * which[c].unit();
    let max = cols.iter().map(|&c| norm(c)).fold(0.0, f64::max);
    cols.retain(|&c| {
        let n = norm(c);
        // Changing the factor by a typical amount moves no prediction by 0.1%.
        if n < 1e-3 || n < 1e-4 * max {
            refused.push((
                which[c],
                format!(
                    "not identifiable: no point depends on it (a change of {} moves the predictions by {:.2}% rms)",
                    which[c].unit(),
                    100.0 * n / (j.nrows() as f64).sqrt()
                ),
            ));
            false
        } else {
            true
        }
    });
    loop {
        if cols.len() < 2 {
            break;
        }
        let m = DMatrix::from_fn(j.nrows(), cols.len(), |i, k| {
            let c = cols[k];
            j[(i, c)] / j.column(c).norm()
        });
        let gram = m.transpose() * &m;
        let vif: Vec<f64> = match gram.clone().try_inverse() {
            Some(inv) => (0..cols.len()).map(|k| inv[(k, k)]).collect(),
            None => vec![f64::INFINITY; cols.len()],
        };
        // Among the nearly collinear factors, refuse the one listed last (the caller lists
        // factors in order of preference).
        let (worst, v) = match vif.iter().rposition(|v| !(*v < 100.0)) {
            Some(i) => (i, vif[i]),
            None => break,
        };
        if v.is_finite() && v < 100.0 {
            break;
        }
        // Name the factor whose effect on these points looks most like this one's (the
        // largest |cosine| between their columns).
        let twin = (0..cols.len())
            .filter(|&k| k != worst)
            .max_by(|&x, &y| {
                let c = |k: usize| gram[(worst, k)].abs();
                c(x).total_cmp(&c(y))
            })
            .map(|k| {
                format!(
                    "{} (|cosine| {:.4})",
                    which[cols[k]].name(),
                    gram[(worst, k)].abs()
                )
            })
            .unwrap_or_default();
        let others = [twin];
        refused.push((
            which[cols[worst]],
            format!(
                "not identifiable: these points cannot tell its effect apart from {} (variance inflation {}); measure another setting (context, protocol) that moves one and not the other, or drop one with --factors",
                others.join(", "),
                if v.is_finite() {
                    format!("{v:.0}")
                } else {
                    "infinite".into()
                }
            ),
        ));
        cols.remove(worst);
    }
    *which = cols.iter().map(|&c| which[c]).collect();
}

/// Levenberg–Marquardt on the log residuals, point i weighted by `w[i]` (the robust fit's
/// weights, [`huber_weights`]); returns θ, the unweighted residuals, the weighted Jacobian there
/// and the iterations.
fn solve(
    model: &Model,
    which: &[Factor],
    mut theta: Vec<f64>,
    meas: &[f64],
    w: &[f64],
) -> Result<(Vec<f64>, Vec<f64>, DMatrix<f64>, usize)> {
    let sw: Vec<f64> = w.iter().map(|x| x.sqrt()).collect();
    let weigh = |r: &[f64]| -> Vec<f64> { r.iter().zip(&sw).map(|(a, b)| a * b).collect() };
    let weigh_j = |mut j: DMatrix<f64>| {
        for i in 0..j.nrows() {
            for c in 0..j.ncols() {
                j[(i, c)] *= sw[i];
            }
        }
        j
    };
    let mut ru = model.residuals(which, &theta, meas)?;
    let mut r = weigh(&ru);
    let mut cost: f64 = r.iter().map(|x| x * x).sum();
    let mut lambda = 1e-3;
    let mut it = 0;
    let mut j = weigh_j(model.jacobian(which, &theta, &ru, meas)?);
    while it < 30 {
        it += 1;
        let jt = j.transpose();
        let g = &jt * DVector::from_vec(r.clone());
        let a = &jt * &j;
        let mut improved = false;
        for _ in 0..8 {
            let mut damped = a.clone();
            for d in 0..which.len() {
                damped[(d, d)] += lambda * a[(d, d)].max(1e-12);
            }
            let Some(step) = damped.lu().solve(&(-&g)) else {
                lambda *= 10.0;
                continue;
            };
            let trial: Vec<f64> = theta
                .iter()
                .zip(which)
                .zip(step.iter())
                .map(|((t, k), s)| (t + s).clamp(k.bounds().0, k.bounds().1))
                .collect();
            let rtu = model.residuals(which, &trial, meas)?;
            let rt = weigh(&rtu);
            let ct: f64 = rt.iter().map(|x| x * x).sum();
            if ct < cost {
                let moved = trial
                    .iter()
                    .zip(&theta)
                    .zip(which)
                    .map(|((a, b), k)| ((a - b) / k.unit()).abs())
                    .fold(0.0, f64::max);
                let gain = cost - ct;
                theta = trial;
                ru = rtu;
                r = rt;
                cost = ct;
                lambda = (lambda / 10.0).max(1e-9);
                improved = true;
                if moved < 1e-4 || gain < 1e-10 {
                    let j = weigh_j(model.jacobian(which, &theta, &ru, meas)?);
                    return Ok((theta, ru, j, it));
                }
                break;
            }
            lambda *= 10.0;
        }
        if !improved {
            break;
        }
        j = weigh_j(model.jacobian(which, &theta, &ru, meas)?);
    }
    Ok((theta, ru, j, it))
}

/// Huber's tuning constant: residuals within this many robust standard deviations count fully
/// (95% efficiency when the errors are normal), larger ones with weight c / |r|.
const HUBER_K: f64 = 1.345;
/// The smallest scatter the robust scale assumes, as a relative error: a throughput benchmark
/// repeats to about 1%, so residuals within a few percent are never down-weighted.
const NOISE_FLOOR: f64 = 0.01;
/// Iterations of reweighting at most (each refits from the last values, so the later are short).
const MAX_REWEIGHT: usize = 8;
/// A point whose leave-one-out error is more than this many times the others' typical one
/// (robust standard deviations) is flagged as far off.
const FAR_OFF: f64 = 3.0;

/// The median of |v| (0 when empty).
fn median_abs(v: &[f64]) -> f64 {
    let mut a: Vec<f64> = v.iter().map(|x| x.abs()).collect();
    a.sort_by(f64::total_cmp);
    match a.len() {
        0 => 0.0,
        n if n % 2 == 1 => a[n / 2],
        n => (a[n / 2 - 1] + a[n / 2]) / 2.0,
    }
}

/// Huber weights of log residuals: 1 within `HUBER_K` robust standard deviations (1.4826 x the
/// median |r|, at least `NOISE_FLOOR`), c / |r| beyond, so one point far off weighs as if it
/// were at c and cannot pull every other point off to meet it.
fn huber_weights(r: &[f64]) -> Vec<f64> {
    let c = HUBER_K * (1.4826 * median_abs(r)).max(NOISE_FLOOR);
    r.iter()
        .map(|x| if x.abs() <= c { 1.0 } else { c / x.abs() })
        .collect()
}

/// The robust fit: least squares reweighted by [`huber_weights`] until the weights settle.
/// Returns θ, the unweighted residuals, the weighted Jacobian, the iterations and the weights.
#[allow(clippy::type_complexity)]
fn solve_robust(
    model: &Model,
    which: &[Factor],
    theta: Vec<f64>,
    meas: &[f64],
) -> Result<(Vec<f64>, Vec<f64>, DMatrix<f64>, usize, Vec<f64>)> {
    let mut w = vec![1.0; meas.len()];
    let (mut theta, mut r, mut j, mut it) = solve(model, which, theta, meas, &w)?;
    for _ in 0..MAX_REWEIGHT {
        let next = huber_weights(&r);
        if next.iter().zip(&w).all(|(a, b)| (a - b).abs() < 1e-3) {
            break;
        }
        w = next;
        let (t, rr, jj, i) = solve(model, which, theta, meas, &w)?;
        (theta, r, j, it) = (t, rr, jj, it + i);
    }
    Ok((theta, r, j, it, w))
}

/// Each point's leave-one-out log residual, r / (1 − h) with h its leverage in the weighted
/// Jacobian (exact for a linear least-squares fit, a close estimate here); None where the fit
/// rests on the point alone (h ≈ 1).
fn leave_one_out(r: &[f64], j: &DMatrix<f64>) -> Vec<Option<f64>> {
    let Some(inv) = (j.transpose() * j).try_inverse() else {
        return vec![None; r.len()];
    };
    (0..r.len())
        .map(|i| {
            let row = j.row(i);
            let h = (row * &inv * row.transpose())[(0, 0)];
            (h < 0.999).then(|| r[i] / (1.0 - h))
        })
        .collect()
}

/// Why a point is far off (`FAR_OFF`): its leave-one-out error against the others' (None: not).
fn far_off(i: usize, loo: &[Option<f64>]) -> Option<String> {
    let mine = loo[i]?;
    let others: Vec<f64> = loo
        .iter()
        .enumerate()
        .filter(|(k, _)| *k != i)
        .filter_map(|(_, v)| *v)
        .collect();
    if others.is_empty() {
        return None;
    }
    let sigma = (1.4826 * median_abs(&others)).max(NOISE_FLOOR);
    (mine.abs() > FAR_OFF * sigma).then(|| {
        format!(
            "fitted without it, the model misses it by {:+.1}%, {:.1}x the others' typical error ({:.1}%): check this measurement (a warm-up, another setting or run), or what the model lacks at this point",
            100.0 * mine.exp_m1(),
            mine.abs() / sigma,
            100.0 * sigma
        )
    })
}

/// Points a copy of `base` written to `out` at the files `base` references relative to itself
/// (its measurement table, its AIConfigurator tables), so the copy loads from anywhere.
pub(crate) fn relocate(p: &mut CalibrationProfile, base: &CalibrationProfile, out: &Path) {
    if let Some(tab) = &base.table {
        p.measurements = Some(table_reference(&tab.path, out));
    }
    let dir = base.path.parent().unwrap_or(Path::new("."));
    if let (Some(a), Some(b)) = (p.aiconfigurator.as_mut(), base.aiconfigurator.as_ref()) {
        let abs = dir.join(&b.tables);
        a.tables = abs.canonicalize().unwrap_or(abs).display().to_string();
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

fn residual_rows(points: &[Point], pred: &[f64]) -> Vec<Residual> {
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

/// The inputs named in messages and provenance: the points' files, else the request's source.
fn sources_text(req: &ThroughputRequest) -> String {
    let mut files: Vec<&Path> = Vec::new();
    for p in &req.points {
        let f: &Path = if p.file.as_os_str().is_empty() {
            &req.source
        } else {
            &p.file
        };
        if !files.contains(&f) {
            files.push(f);
        }
    }
    if files.is_empty() {
        files.push(&req.source);
    }
    files
        .iter()
        .map(|f| crate::units::path(f))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The factors to fit (`--factors`, or all of them when none is named), refused when the points
/// are too few to give each an interval.
fn factors_to_fit(req: &ThroughputRequest, src: &str) -> Result<Vec<Factor>> {
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

/// Where the fit starts: the base profile's values, a little away from the bounds (where
/// identifiability is judged).
fn starting_point(model: &Model, which: &[Factor]) -> Vec<f64> {
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

/// The fitted factors with their intervals, and the first factor that ran to its bound and the
/// first whose interval spans everything, each with why.
struct Intervals {
    fitted: Vec<FittedFactor>,
    bound: Option<(usize, String)>,
    wide: Option<(usize, String)>,
}

/// Each fitted factor's value and 95% interval (Student's t on the residual scatter), and the
/// first factor whose interval says the points do not pin it down, with why.
fn fitted_intervals(
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

/// The first choice of factors: the auto choice (`choose`), or the named ones that the points
/// identify; each row says why. `which` and `refused` are narrowed to match.
fn first_choices(
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
fn rechoose(
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
fn nothing_identified(n: usize, src: &str, refused: &[(Factor, String)]) -> Error {
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

/// Why the last factor is not identifiable when a fit leaves the error where it was (a factor
/// whose effect is steps, e.g. the seeded routing draw, or one the solver cannot move); None
/// when the fit reduced it.
fn no_progress(final_r: &[f64], before_pred: &[f64], meas: &[f64], w: &[f64]) -> Option<String> {
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

/// The chosen factors, and the refused ones with why, of a choice table.
fn chosen_and_refused(choices: &[FactorChoice]) -> (Vec<Factor>, Vec<(Factor, String)>) {
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
fn start_of(which: &[Factor], all: &[Factor], theta0: &[f64]) -> Vec<f64> {
    which
        .iter()
        .map(|k| theta0[all.iter().position(|a| a == k).unwrap_or(0)])
        .collect()
}

/// Where the fit loop ends: the factors kept and their values, the refusals and the choice
/// table, the last residuals and the solver's iterations.
struct Solved {
    which: Vec<Factor>,
    fitted: Vec<FittedFactor>,
    refused: Vec<(Factor, String)>,
    choices: Vec<FactorChoice>,
    final_r: Vec<f64>,
    iterations: usize,
    /// The robust fit's weights and its weighted Jacobian, for the leave-one-out residuals.
    weights: Vec<f64>,
    jacobian: DMatrix<f64>,
    /// What the report says about the fit (a named factor kept with a wide interval).
    notes: Vec<String>,
}

/// The fit's result: the profile written with the fitted factors, and the residuals before
/// and after.
fn fit_result(
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

/// With `--routing` fixing the routing, the routing exponent leaves `which` and is refused.
fn refuse_fixed_routing(which: &mut Vec<Factor>, routing_fixed: bool) -> Vec<(Factor, String)> {
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
fn refuse_unvaried(which: &mut Vec<Factor>, points: &[Point]) -> Vec<(Factor, String)> {
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
fn refuse_named(
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
fn drop_factor(
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
fn check_servers(req: &ThroughputRequest) -> Result<()> {
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
        if let Some(tp) = p.tp.filter(|&tp| tp != s.tp) {
            return Err(Error::PointInvalid {
                point: p.origin(&req.source).to_string(),
                problem: format!(
                    "the result's tensor_parallel_size is {tp}, the scenario's --tp {}: give --tp {tp} (or correct the result's metadata)",
                    s.tp
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
    if let Some(l) = limits.max_median_error_pct {
        if !(l.is_finite() && l > 0.0) {
            return Err(Error::Flag {
                flag: "--max-median-error",
                value: l.to_string(),
                expected: "expected a percentage above 0".into(),
            });
        }
    }
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
    let theta0 = starting_point(&model, &which);
    let r0 = model.residuals(&which, &theta0, &meas)?;
    let j0 = model.jacobian(&which, &theta0, &r0, &meas)?;
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
        fitted = iv.fitted;
        weights = w;
        jacobian = j;
        // Named factors are kept with a wide interval (the points pin them down loosely; the
        // report says so); the automatic choice drops them for a factor the points pin down.
        let mut wide = if auto {
            iv.bound.clone().or(iv.wide.clone())
        } else {
            iv.bound.clone()
        };
        // Auto, with every interval narrow: a fit that did not reduce the error drops a factor.
        let stuck_why =
            no_progress(&final_r, &before_pred, &meas, &weights).filter(|_| auto && wide.is_none());
        let stuck = stuck_why.is_some();
        wide = wide.or(stuck_why.map(|why| (which.len() - 1, why)));
        notes = match (&wide, &iv.wide) {
            (None, Some((c, _))) => vec![format!(
                "{}: its 95% interval [{:.4}, {:.4}] is wide: these points pin it down loosely (rms error after the fit {:.1}%); more points, or points that vary what it scales, narrow it",
                which[*c],
                fitted[*c].ci95[0],
                fitted[*c].ci95[1],
                100.0 * (final_r.iter().map(|x| x * x).sum::<f64>() / n as f64).sqrt()
            )],
            _ => Vec::new(),
        };
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
                keep_theta = theta
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != c)
                    .map(|(_, v)| *v)
                    .collect();
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

fn write_fitted(
    req: &ThroughputRequest,
    base: &CalibrationProfile,
    mut factors: Factors,
    fitted: &[FittedFactor],
    refused: &[(Factor, String)],
    residuals: &[Residual],
    poor: Option<String>,
) -> Result<CalibrationProfile> {
    let src = sources_text(req);
    let points: Vec<String> = req
        .points
        .iter()
        .map(|p| format!("{} ({})", p.label(), p.origin(&req.source)))
        .collect();
    let fitted_text: Vec<String> = fitted
        .iter()
        .map(|f| {
            format!(
                "{} = {:.4} [95% {:.4}, {:.4}]",
                f.factor.name(),
                f.value,
                f.ci95[0],
                f.ci95[1]
            )
        })
        .collect();
    factors.source = format!(
        "calibrate --from-throughput {src} on profile '{}': {}; fitted on {} point(s): {}",
        base.profile.name,
        fitted_text.join(", "),
        points.len(),
        points.join("; ")
    );
    let mut p = base.clone();
    p.factors = factors;
    p.profile.poor_fit.extend(poor);
    p.profile.name = req.name.clone().unwrap_or_else(|| {
        req.out
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "from-throughput".into())
    });
    p.profile.description = format!(
        "profile '{}' with end-to-end factors fitted to {src}",
        base.profile.name
    );
    p.profile.method = format!(
        "Levenberg-Marquardt least squares on ln(predicted/measured tokens/s) over the simulator (forward-difference Jacobian), reweighted to Huber's loss (c = 1.345 robust standard deviations), 95% CIs from Student's t (statrs) with {} dof; {}",
        req.points.len() - fitted.len(),
        base.profile.method
    );
    p.profile.provenance = format!(
        "{}; factors fitted by calibrate --from-throughput on {} point(s) of {src}: {}{}",
        base.profile.provenance,
        points.len(),
        points.join("; "),
        if refused.is_empty() {
            String::new()
        } else {
            format!(
                "; not fitted: {}",
                refused
                    .iter()
                    .map(|(f, why)| format!("{} ({why})", f.name()))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        }
    );
    let mut t = toml::map::Map::new();
    t.insert(
        "points".into(),
        toml::Value::Integer(residuals.len() as i64),
    );
    for f in fitted {
        t.insert(f.factor.name().into(), toml::Value::Float(f.value));
        t.insert(
            format!("{}_ci95", f.factor.name()),
            toml::Value::Array(vec![
                toml::Value::Float(f.ci95[0]),
                toml::Value::Float(f.ci95[1]),
            ]),
        );
    }
    t.insert(
        "rel_err".into(),
        toml::Value::Array(
            residuals
                .iter()
                .map(|r| toml::Value::Float(r.rel_err))
                .collect(),
        ),
    );
    t.insert(
        "weight".into(),
        toml::Value::Array(
            residuals
                .iter()
                .map(|r| toml::Value::Float(r.weight))
                .collect(),
        ),
    );
    t.insert(
        "rms_rel_err".into(),
        toml::Value::Float(ThroughputFit::rms_rel_err(residuals)),
    );
    p.fit
        .insert("from_throughput".into(), toml::Value::Table(t));
    relocate(&mut p, base, &req.out);
    let header = format!(
        "# Written by `decodesim calibrate --from-throughput {src}` from profile '{}'.\n# {}",
        base.profile.name, p.factors.source
    );
    write_profile(&req.out, &header, &p)?;
    Ok(p)
}
