//! `calibrate --from-throughput FILE.csv`: a few end-to-end benchmark numbers (tokens/s at some
//! concurrencies) fit a small named set of factors on top of the bottom-up profile, by
//! non-linear least squares over the simulator itself (Levenberg–Marquardt, Jacobian by finite
//! differences), with 95% confidence intervals. Factors the points cannot tell apart are
//! refused by name before the fit, and again after it when their interval spans everything.
//!
//! CSV: `concurrency,context,tokens_per_s` and optionally `kv_cache_dtype` (bf16|fp8),
//! `nccl_proto` (LL|LL128|Simple|auto), `nccl_algo` (Ring|Tree|auto), `p2p` (on|off),
//! `allreduce` (nccl only, for now); anything else comes from the scenario flags.

use super::output::{table_reference, write_profile};
use crate::cost::profile::Factors;
use crate::cost::CalibrationProfile;
use crate::error::{Error, Result};
use crate::files::InputKind;
use crate::sim::{simulate_loaded, ScenarioRequest};
use crate::spec::routing::Routing;
use crate::spec::{Algo, Proto, Scenario};
use nalgebra::{DMatrix, DVector};
use statrs::distribution::{ContinuousCDF, StudentsT};
use std::path::{Path, PathBuf};

/// The factors a throughput curve can speak to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Factor {
    MoeEfficiency,
    CollectiveBw,
    CollectiveLatency,
    RoutingAlpha,
    StepOverhead,
    AttentionGrowth,
    AttentionFixed,
    MoeWeight,
    MoeToken,
    DenseGemm,
}

crate::names::enum_names!(Factor, "calibration factor",
    Factor::MoeEfficiency => ["moe_efficiency", "moe"],
    Factor::CollectiveBw => ["collective_bw_scale", "bw"],
    Factor::CollectiveLatency => ["collective_latency_scale", "latency"],
    Factor::RoutingAlpha => ["routing_alpha", "routing"],
    Factor::StepOverhead => ["step_overhead_us", "overhead"],
    Factor::AttentionGrowth => ["attention_growth_scale", "attention_growth"],
    Factor::AttentionFixed => ["attention_fixed_scale", "attention_fixed"],
    Factor::MoeWeight => ["moe_weight_scale", "moe_weight"],
    Factor::MoeToken => ["moe_token_scale", "moe_token"],
    Factor::DenseGemm => ["dense_gemm_scale", "dense_gemm"]);

pub const ALL_FACTORS: [Factor; 5] = [
    Factor::MoeEfficiency,
    Factor::CollectiveBw,
    Factor::CollectiveLatency,
    Factor::RoutingAlpha,
    Factor::StepOverhead,
];

/// The factors that bend the batch and context curves (`cost::profile::Factors`), fitted when
/// named with `--factors`.
pub const CURVE_FACTORS: [Factor; 5] = [
    Factor::AttentionGrowth,
    Factor::AttentionFixed,
    Factor::MoeWeight,
    Factor::MoeToken,
    Factor::DenseGemm,
];

impl Factor {
    /// Scale factors are fitted as their logarithm (positive, symmetric in "×2" and "÷2").
    fn is_log(self) -> bool {
        !matches!(self, Factor::RoutingAlpha | Factor::StepOverhead)
    }
    /// A typical change of the fitted parameter, for finite differences and for judging
    /// whether the points depend on it at all.
    fn unit(self) -> f64 {
        match self {
            Factor::StepOverhead => 1000.0,
            Factor::RoutingAlpha => 0.5,
            _ => 0.5,
        }
    }
    fn step(self) -> f64 {
        match self {
            Factor::StepOverhead => 50.0,
            Factor::RoutingAlpha => 0.15,
            _ => 0.02,
        }
    }
    /// Bounds of the fitted parameter (log for scales).
    fn bounds(self) -> (f64, f64) {
        match self {
            Factor::StepOverhead => (0.0, 1e6),
            Factor::RoutingAlpha => (0.0, crate::spec::routing::MAX_ALPHA),
            _ => (0.01f64.ln(), 100f64.ln()),
        }
    }
    fn get(self, f: &Factors, alpha: f64) -> f64 {
        match self {
            Factor::MoeEfficiency => f.moe_efficiency.ln(),
            Factor::CollectiveBw => f.collective_bw_scale.ln(),
            Factor::CollectiveLatency => f.collective_latency_scale.ln(),
            Factor::RoutingAlpha => alpha,
            Factor::StepOverhead => f.step_overhead_us,
            Factor::AttentionGrowth => f.attention_growth_scale.ln(),
            Factor::AttentionFixed => f.attention_fixed_scale.ln(),
            Factor::MoeWeight => f.moe_weight_scale.ln(),
            Factor::MoeToken => f.moe_token_scale.ln(),
            Factor::DenseGemm => f.dense_gemm_scale.ln(),
        }
    }
    fn set(self, f: &mut Factors, v: f64) {
        match self {
            Factor::MoeEfficiency => f.moe_efficiency = v.exp(),
            Factor::CollectiveBw => f.collective_bw_scale = v.exp(),
            Factor::CollectiveLatency => f.collective_latency_scale = v.exp(),
            Factor::RoutingAlpha => f.routing_alpha = Some(v),
            Factor::StepOverhead => f.step_overhead_us = v,
            Factor::AttentionGrowth => f.attention_growth_scale = v.exp(),
            Factor::AttentionFixed => f.attention_fixed_scale = v.exp(),
            Factor::MoeWeight => f.moe_weight_scale = v.exp(),
            Factor::MoeToken => f.moe_token_scale = v.exp(),
            Factor::DenseGemm => f.dense_gemm_scale = v.exp(),
        }
    }
}

/// One measured benchmark point.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Line in the CSV (header = 1).
    pub line: usize,
    pub concurrency: u32,
    pub context: u64,
    pub tokens_per_s: f64,
    pub kv_bytes: Option<f64>,
    pub proto: Option<Proto>,
    pub algo: Option<Algo>,
    pub p2p: Option<bool>,
}

impl Point {
    pub fn label(&self) -> String {
        let mut s = format!(
            "c={} ctx={} {:.1} tok/s",
            self.concurrency, self.context, self.tokens_per_s
        );
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
        s
    }

    /// The same settings (everything but concurrency): the points of one curve.
    fn curve(&self) -> (u64, Option<u64>, Option<Proto>, Option<Algo>, Option<bool>) {
        (
            self.context,
            self.kv_bytes.map(|b| b as u64),
            self.proto,
            self.algo,
            self.p2p,
        )
    }
}

/// Reads and checks a throughput CSV.
pub fn read_points(path: &Path) -> Result<Vec<Point>> {
    let text = crate::files::read_text(path, InputKind::MeasurementCsv)?;
    let mut rdr = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .comment(Some(b'#'))
        .from_reader(text.as_bytes());
    let headers = rdr
        .headers()
        .map_err(|e| Error::field(path, "header", format!("unreadable: {e}")))?
        .clone();
    let col = |name: &str| headers.iter().position(|h| h.eq_ignore_ascii_case(name));
    let required = ["concurrency", "context", "tokens_per_s"];
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|c| col(c).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(Error::field(
            path,
            "header",
            format!(
                "missing column(s) {}; expected concurrency,context,tokens_per_s (optional kv_cache_dtype, nccl_proto, nccl_algo, p2p, allreduce); found '{}'",
                missing.join(", "),
                crate::units::clip(&headers.iter().collect::<Vec<_>>().join(","), 40)
            ),
        ));
    }
    let (ci, xi, ti) = (
        col("concurrency").unwrap_or(0),
        col("context").unwrap_or(0),
        col("tokens_per_s").unwrap_or(0),
    );
    let mut points = Vec::new();
    for (i, rec) in rdr.records().enumerate() {
        let line = i + 2;
        let rec = rec.map_err(|e| Error::field(path, format!("line {line}"), e.to_string()))?;
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
        let get = |c: usize| rec.get(c).unwrap_or("");
        let concurrency: u32 = get(ci)
            .parse()
            .ok()
            .filter(|&c| (1..=crate::spec::scenario::MAX_BATCH).contains(&c))
            .ok_or_else(|| {
                fail(
                    "concurrency",
                    get(ci),
                    &format!("a whole number 1..{}", crate::spec::scenario::MAX_BATCH),
                )
            })?;
        let context: u64 = get(xi)
            .parse()
            .ok()
            .filter(|&c| c >= 1)
            .ok_or_else(|| fail("context", get(xi), "a whole number of tokens, at least 1"))?;
        let tokens_per_s: f64 = get(ti)
            .parse()
            .ok()
            .filter(|t: &f64| t.is_finite() && *t > 0.0 && *t < 1e9)
            .ok_or_else(|| fail("tokens_per_s", get(ti), "a positive rate below 1e9"))?;
        let kv_bytes = match field("kv_cache_dtype").as_deref() {
            None => None,
            Some(v) if v.eq_ignore_ascii_case("bf16") || v.eq_ignore_ascii_case("auto") => {
                Some(2.0)
            }
            Some(v) if v.to_ascii_lowercase().starts_with("fp8") => Some(1.0),
            Some(v) => return Err(fail("kv_cache_dtype", v, "bf16 or fp8")),
        };
        let proto = match field("nccl_proto") {
            None => None,
            Some(v) => Some(
                v.parse::<Proto>()
                    .map_err(|_| fail("nccl_proto", &v, "LL, LL128, Simple or auto"))?,
            ),
        };
        let algo = match field("nccl_algo") {
            None => None,
            Some(v) => Some(
                v.parse::<Algo>()
                    .map_err(|_| fail("nccl_algo", &v, "Ring, Tree or auto"))?,
            ),
        };
        let p2p = match field("p2p").map(|v| v.to_ascii_lowercase()).as_deref() {
            None => None,
            Some("on") | Some("1") | Some("true") => Some(true),
            Some("off") | Some("0") | Some("false") => Some(false),
            Some(v) => return Err(fail("p2p", v, "on or off")),
        };
        if let Some(v) = field("allreduce") {
            if !v.eq_ignore_ascii_case("nccl") {
                return Err(fail(
                    "allreduce",
                    &v,
                    "nccl (per-point allreduce implementations are not fitted yet: split the file by implementation and pass --allreduce)",
                ));
            }
        }
        points.push(Point {
            line,
            concurrency,
            context,
            tokens_per_s,
            kv_bytes,
            proto,
            algo,
            p2p,
        });
    }
    if points.is_empty() {
        return Err(Error::field(path, "rows", "no data rows"));
    }
    check_curves(path, &points)?;
    Ok(points)
}

/// Refuses what no decode benchmark produces: the same point twice with different rates, total
/// throughput collapsing as concurrency grows, or each sequence getting faster with more
/// company. 25% of slack covers run-to-run noise and scheduler effects.
fn check_curves(path: &Path, points: &[Point]) -> Result<()> {
    const SLACK: f64 = 1.25;
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
                (r > SLACK || r < 1.0 / SLACK).then(|| {
                    "the same settings measured twice with rates more than 25% apart".to_string()
                })
            } else if hi.tokens_per_s * SLACK < lo.tokens_per_s {
                Some(format!(
                    "total tokens/s falls from {:.1} to {:.1} as concurrency grows from {} to {} (a decode step with more sequences is never that much slower per step's work)",
                    lo.tokens_per_s, hi.tokens_per_s, lo.concurrency, hi.concurrency
                ))
            } else if hi.tokens_per_s / hi.concurrency as f64
                > SLACK * lo.tokens_per_s / lo.concurrency as f64
            {
                Some(format!(
                    "tokens/s per sequence rises from {:.2} to {:.2} as concurrency grows from {} to {} (sequences sharing a step cannot each run faster)",
                    lo.tokens_per_s / lo.concurrency as f64,
                    hi.tokens_per_s / hi.concurrency as f64,
                    lo.concurrency,
                    hi.concurrency
                ))
            } else {
                None
            };
            if let Some(why) = why {
                return Err(Error::field(
                    path,
                    format!("lines {} and {}", lo.line, hi.line),
                    format!("not a decode throughput curve: {why}"),
                ));
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
    pub source: PathBuf,
    /// Factors to try (refused ones are reported, not fitted).
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
}

#[derive(Debug, Clone)]
pub struct ThroughputFit {
    pub profile: CalibrationProfile,
    pub base: String,
    pub fitted: Vec<FittedFactor>,
    /// Factors not fitted, each with why.
    pub refused: Vec<(Factor, String)>,
    pub before: Vec<Residual>,
    pub residuals: Vec<Residual>,
    pub iterations: usize,
    pub out: PathBuf,
}

impl ThroughputFit {
    pub fn rms_rel_err(r: &[Residual]) -> f64 {
        (r.iter().map(|x| x.rel_err * x.rel_err).sum::<f64>() / r.len().max(1) as f64).sqrt()
    }
}

/// The loaded scenarios of the points, priced under trial factors.
struct Model {
    scenarios: Vec<Scenario>,
    profile: CalibrationProfile,
    /// The user passed --routing: the routing factor cannot apply.
    routing_fixed: bool,
    start_alpha: f64,
}

impl Model {
    fn new(req: &ThroughputRequest) -> Result<Self> {
        let mut scenarios = Vec::new();
        let mut profile = None;
        for p in &req.points {
            let mut r = req.base.clone();
            r.batch = p.concurrency;
            r.context = p.context;
            if let Some(b) = p.kv_bytes {
                r.kv_bytes = b;
            }
            if let Some(x) = p.proto {
                r.proto = x;
            }
            if let Some(x) = p.algo {
                r.algo = x;
            }
            if let Some(x) = p.p2p {
                r.p2p = x;
            }
            let (s, prof) = r.load().map_err(|e| {
                Error::Other(format!(
                    "{} line {}: the scenario of this point is invalid: {e}",
                    crate::units::path(&req.source),
                    p.line
                ))
            })?;
            scenarios.push(s);
            profile = Some(prof);
        }
        let profile = profile.ok_or_else(|| Error::Other("no points".into()))?;
        let start_alpha = match &scenarios[0].routing {
            Routing::PowerLaw { alpha } => *alpha,
            _ => 0.0,
        };
        Ok(Model {
            scenarios,
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
        let mut out = Vec::with_capacity(self.scenarios.len());
        for s in &self.scenarios {
            let mut s = s.clone();
            if let (Some(a), false) = (f.routing_alpha, self.routing_fixed) {
                s.routing = Routing::power_law(a)?;
            }
            out.push(simulate_loaded(s, profile.clone())?.tokens_per_s());
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

/// Levenberg–Marquardt on the log residuals; returns θ, the residuals and the Jacobian there.
fn solve(
    model: &Model,
    which: &[Factor],
    mut theta: Vec<f64>,
    meas: &[f64],
) -> Result<(Vec<f64>, Vec<f64>, DMatrix<f64>, usize)> {
    let mut r = model.residuals(which, &theta, meas)?;
    let mut cost: f64 = r.iter().map(|x| x * x).sum();
    let mut lambda = 1e-3;
    let mut it = 0;
    let mut j = model.jacobian(which, &theta, &r, meas)?;
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
            let rt = model.residuals(which, &trial, meas)?;
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
                r = rt;
                cost = ct;
                lambda = (lambda / 10.0).max(1e-9);
                improved = true;
                if moved < 1e-4 || gain < 1e-10 {
                    let j = model.jacobian(which, &theta, &r, meas)?;
                    return Ok((theta, r, j, it));
                }
                break;
            }
            lambda *= 10.0;
        }
        if !improved {
            break;
        }
        j = model.jacobian(which, &theta, &r, meas)?;
    }
    Ok((theta, r, j, it))
}

/// Points a copy of `base` written to `out` at the files `base` references relative to itself
/// (its measurement table, its AIConfigurator tables), so the copy loads from anywhere.
pub fn relocate(p: &mut CalibrationProfile, base: &CalibrationProfile, out: &Path) {
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
        })
        .collect()
}

/// Fits the factors and writes the profile.
pub fn fit_throughput(req: &ThroughputRequest) -> Result<ThroughputFit> {
    let n = req.points.len();
    let mut which: Vec<Factor> = Vec::new();
    for f in &req.factors {
        if !which.contains(f) {
            which.push(*f);
        }
    }
    if which.is_empty() {
        return Err(Error::Other("--factors: no factor to fit".into()));
    }
    if n < which.len() + 1 {
        return Err(Error::field(
            &req.source,
            "rows",
            format!(
                "{n} point(s) cannot fit {} factor(s) ({}) with a confidence interval: give at least {} points, or fewer factors with --factors",
                which.len(),
                which.iter().map(|f| f.name()).collect::<Vec<_>>().join(", "),
                which.len() + 1
            ),
        ));
    }
    let model = Model::new(req)?;
    let meas: Vec<f64> = req.points.iter().map(|p| p.tokens_per_s).collect();
    let mut refused = Vec::new();
    if model.routing_fixed {
        if let Some(i) = which.iter().position(|f| *f == Factor::RoutingAlpha) {
            which.remove(i);
            refused.push((
                Factor::RoutingAlpha,
                "not fitted: --routing fixes the routing".to_string(),
            ));
        }
    }
    let before_pred = model.predict(&model.profile.factors)?;
    let start = |w: &[Factor]| -> Vec<f64> {
        w.iter()
            .map(|k| k.get(&model.profile.factors, model.start_alpha))
            .map(|v| if v.is_finite() { v } else { 0.0 })
            .collect()
    };
    // Judge identifiability where the fit starts, a little away from the bounds.
    let mut theta0 = start(&which);
    for (t, k) in theta0.iter_mut().zip(&which) {
        if *k == Factor::StepOverhead && *t < 100.0 {
            *t = 100.0;
        }
        if *k == Factor::RoutingAlpha && *t < 0.1 {
            *t = 0.1;
        }
    }
    let r0 = model.residuals(&which, &theta0, &meas)?;
    let j0 = model.jacobian(&which, &theta0, &r0, &meas)?;
    let all = which.clone();
    identifiable(&mut which, &j0, &mut refused);
    let mut keep_theta: Vec<f64> = which
        .iter()
        .map(|k| theta0[all.iter().position(|a| a == k).unwrap_or(0)])
        .collect();
    let mut fitted;
    let mut iterations;
    let mut final_r;
    loop {
        if which.is_empty() {
            return Err(Error::Other(format!(
                "calibration refused: no factor can be identified from {n} point(s) of {}:\n  {}",
                crate::units::path(&req.source),
                refused
                    .iter()
                    .map(|(f, why)| format!("{}: {why}", f.name()))
                    .collect::<Vec<_>>()
                    .join("\n  ")
            )));
        }
        let (theta, r, j, it) = solve(&model, &which, keep_theta.clone(), &meas)?;
        iterations = it;
        final_r = r;
        let p = which.len();
        let dof = n - p;
        let s2 = final_r.iter().map(|x| x * x).sum::<f64>() / dof as f64;
        let t = StudentsT::new(0.0, 1.0, dof as f64)
            .map(|d| d.inverse_cdf(0.975))
            .unwrap_or(f64::NAN);
        let inv = (j.transpose() * &j).try_inverse();
        fitted = Vec::new();
        let mut wide = None;
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
                (v, [v - half, v + half])
            };
            // An interval spanning a factor of 10 (scales), the whole exponent range, or
            // more than ±10 ms of overhead says the points do not pin the factor down.
            let too_wide = !half.is_finite()
                || match k {
                    Factor::RoutingAlpha => half > crate::spec::routing::MAX_ALPHA / 2.0,
                    Factor::StepOverhead => half > 1e4,
                    _ => half > 10f64.ln() / 2.0,
                };
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
        match wide {
            Some((c, why)) => {
                refused.push((which[c], why));
                which.remove(c);
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
    let theta: Vec<f64> = fitted
        .iter()
        .map(|f| {
            if f.factor.is_log() {
                f.value.ln()
            } else {
                f.value
            }
        })
        .collect();
    let factors = model.factors_at(&which, &theta);
    let pred: Vec<f64> = final_r
        .iter()
        .zip(&meas)
        .map(|(r, m)| m * r.exp())
        .collect();
    let residuals = residual_rows(&req.points, &pred);
    let before = residual_rows(&req.points, &before_pred);
    let profile = write_fitted(req, &model.profile, factors, &fitted, &refused, &residuals)?;
    Ok(ThroughputFit {
        profile,
        base: model.profile.profile.name.clone(),
        fitted,
        refused,
        before,
        residuals,
        iterations,
        out: req.out.clone(),
    })
}

fn write_fitted(
    req: &ThroughputRequest,
    base: &CalibrationProfile,
    mut factors: Factors,
    fitted: &[FittedFactor],
    refused: &[(Factor, String)],
    residuals: &[Residual],
) -> Result<CalibrationProfile> {
    let src = crate::units::path(&req.source);
    let points: Vec<String> = req
        .points
        .iter()
        .map(|p| format!("{} (line {})", p.label(), p.line))
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
        "Levenberg-Marquardt least squares on ln(predicted/measured tokens/s) over the simulator (forward-difference Jacobian), 95% CIs from Student's t (statrs) with {} dof; {}",
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
