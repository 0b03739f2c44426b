//! Expected distinct experts per layer in closed form (inclusion probabilities of successive
//! weighted draws), and a logged histogram's power law fitted through it.

use super::{resolve, Resolved, Routing};
use crate::scenario::routing::MAX_ALPHA;

/// Probability that expert e is among one token's `top_k` successive weighted draws:
/// π_e ≈ 1 − exp(−λ p_e) with λ such that Σ π_e = top_k (the standard approximation of
/// successive sampling's inclusion probabilities; exact for equal weights).
fn inclusion(p: &[f64], top_k: usize) -> Vec<f64> {
    let k = top_k as f64;
    if top_k >= p.len() {
        return vec![1.0; p.len()];
    }
    let sum = |lam: f64| p.iter().map(|&x| 1.0 - (-lam * x).exp()).sum::<f64>();
    // Doubling brackets λ within a factor 2 (bounded: 1,100 doublings pass f64::MAX, and a
    // non-finite sum stops it), then bisection narrows the bracket.
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..1_100 {
        let v = sum(hi);
        if !(v < k) || !hi.is_finite() {
            break;
        }
        lo = hi;
        hi *= 2.0;
    }
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if sum(mid) < k {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let lam = 0.5 * (lo + hi);
    p.iter().map(|&x| 1.0 - (-lam * x).exp()).collect()
}

fn expected_distinct_weights(p: &[f64], tokens: u64, top_k: usize) -> f64 {
    if p.is_empty() || tokens == 0 {
        return 0.0;
    }
    if top_k >= p.len() {
        return p.len() as f64;
    }
    let t = tokens as f64;
    inclusion(p, top_k)
        .iter()
        .map(|&pi| 1.0 - (1.0 - pi).powf(t))
        .sum()
}

/// Expected distinct experts one MoE layer reads when `tokens` tokens each pick `top_k` of
/// `experts`, in closed form (uniform: exact; weighted: the inclusion-probability
/// approximation, within about 1% of the sampler's mean, see the tests). For a per-layer
/// popularity file this is the mean over layers of the file's default vector.
pub fn expected_distinct_experts(
    routing: &Routing,
    tokens: u64,
    experts: usize,
    top_k: usize,
) -> f64 {
    if experts == 0 || tokens == 0 {
        return 0.0;
    }
    let k = top_k.min(experts);
    match resolve(routing, experts, k, 1) {
        Resolved::Uniform => {
            let n = experts as f64;
            n * (1.0 - (1.0 - k as f64 / n).powf(tokens as f64))
        }
        Resolved::Weights {
            per_layer, default, ..
        } => expected_distinct_weights(per_layer[0].as_ref().unwrap_or(&default), tokens, k),
    }
}

/// `expected_distinct_experts` with the routing resolved once (the inclusion probabilities are
/// the expensive part and do not depend on the token count), for callers that evaluate it at
/// many token counts (the sweep's fast path). `at` returns the same value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DistinctExperts {
    experts: usize,
    top_k: usize,
    /// Inclusion probability per expert; None: uniform routing.
    inclusion: Option<Vec<f64>>,
}

impl DistinctExperts {
    pub(crate) fn new(routing: &Routing, experts: usize, top_k: usize) -> Self {
        let k = top_k.min(experts);
        let inclusion = match resolve(routing, experts, k, 1) {
            Resolved::Uniform => None,
            Resolved::Weights {
                per_layer, default, ..
            } => {
                let p = per_layer[0].as_ref().unwrap_or(&default);
                Some(if k >= p.len() {
                    vec![1.0; p.len()]
                } else {
                    inclusion(p, k)
                })
            }
        };
        DistinctExperts {
            experts,
            top_k: k,
            inclusion,
        }
    }

    pub fn at(&self, tokens: u64) -> f64 {
        if self.experts == 0 || tokens == 0 {
            return 0.0;
        }
        match &self.inclusion {
            None => {
                let n = self.experts as f64;
                n * (1.0 - (1.0 - self.top_k as f64 / n).powf(tokens as f64))
            }
            Some(pi) if self.top_k >= pi.len() => pi.len() as f64,
            Some(pi) => {
                let t = tokens as f64;
                pi.iter().map(|&p| 1.0 - (1.0 - p).powf(t)).sum()
            }
        }
    }
}

/// Weighted squared error of a power law against a histogram's rows (one inclusion vector per
/// exponent, evaluated at every row's token count).
fn histogram_sse(rows: &[(u64, f64, f64)], experts: usize, top_k: usize, alpha: f64) -> f64 {
    let r = if alpha == 0.0 {
        Routing::Uniform
    } else {
        Routing::PowerLaw { alpha }
    };
    let d = DistinctExperts::new(&r, experts, top_k);
    rows.iter()
        .map(|&(t, touched, w)| {
            let e = d.at(t) - touched;
            w * e * e
        })
        .sum()
}

/// The power-law exponent whose expected distinct experts best match a logged histogram
/// (least squares over its rows, weighted by steps).
fn fit_histogram(rows: &[(u64, f64, f64)], experts: usize, top_k: usize) -> f64 {
    let sse = |alpha: f64| histogram_sse(rows, experts, top_k, alpha);
    // Golden-section search over [0, MAX_ALPHA]: the expected count falls monotonically with
    // alpha, so the squared error has one minimum.
    let (mut a, mut b) = (0.0, MAX_ALPHA);
    let g = 0.618_033_988_749_894_9;
    let (mut c, mut d) = (b - g * (b - a), a + g * (b - a));
    for _ in 0..60 {
        if sse(c) < sse(d) {
            b = d;
        } else {
            a = c;
        }
        c = b - g * (b - a);
        d = a + g * (b - a);
    }
    let alpha = 0.5 * (a + b);
    if alpha < 1e-3 {
        0.0
    } else {
        alpha
    }
}

/// A histogram's fitted concentration and how well the log determines it.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramFit {
    source: std::path::PathBuf,
    /// The exponent used (least squares).
    pub alpha: f64,
    /// The exponents that fit as well: weighted RMS error within half an expert of the best
    /// one's (counts of experts are whole numbers, so a law within half an expert of the best
    /// cannot be told from it), on a grid of 0.05 over [0, MAX_ALPHA].
    pub interval: [f64; 2],
    /// Every row touched every expert it could (min(tokens × top-k, experts)): such a log shows
    /// no concentration at all.
    pub saturated: bool,
}

impl HistogramFit {
    /// Whether the log cannot tell the concentration: every expert touched, or the exponent at
    /// an edge of [0, MAX_ALPHA] with a wide interval (half a unit or more) against it.
    pub fn undetermined(&self) -> bool {
        let [lo, hi] = self.interval;
        let at_edge = self.alpha <= 1e-3 || self.alpha >= MAX_ALPHA - 1e-3;
        self.saturated || (at_edge && hi - lo >= 0.5)
    }

    /// The warning a report gives when [`undetermined`](Self::undetermined).
    pub fn warning(&self) -> Option<String> {
        if !self.undetermined() {
            return None;
        }
        let [lo, hi] = self.interval;
        let why = if self.saturated {
            "every expert touched in every row, so the concentration cannot be told".to_string()
        } else if self.alpha <= 1e-3 {
            "the fit sits at the lower edge of its range (uniform)".to_string()
        } else {
            format!("the fit sits at the upper edge of its range ({MAX_ALPHA})")
        };
        let using = if self.alpha == 0.0 {
            "uniform".to_string()
        } else {
            format!("power-law:{:.2}", self.alpha)
        };
        Some(format!(
            "routing file {}: {why}; concentration alpha in [{lo:.2}, {hi:.2}] fits it as well, using {using} (log steps with fewer tokens, or give --routing power-law:ALPHA)",
            crate::units::path(&self.source)
        ))
    }
}

/// The fit of a histogram routing for a model of `experts` routed experts and `top_k` (None for
/// other routings).
pub fn histogram_fit(r: &Routing, experts: usize, top_k: usize) -> Option<HistogramFit> {
    let Routing::Histogram { source, rows } = r else {
        return None;
    };
    let k = top_k.min(experts);
    // Every workload build resolves the routing, and a capacity curve or a sweep builds many:
    // the fit (about 180 evaluations of the closed form) is done once per histogram and model.
    type Key = (std::path::PathBuf, Vec<[u64; 3]>, usize, usize);
    static MEMO: std::sync::Mutex<Vec<(Key, HistogramFit)>> = std::sync::Mutex::new(Vec::new());
    let key: Key = (
        source.clone(),
        rows.iter()
            .map(|&(t, touched, w)| [t, touched.to_bits(), w.to_bits()])
            .collect(),
        experts,
        k,
    );
    if let Ok(memo) = MEMO.lock() {
        if let Some((_, f)) = memo.iter().find(|(k, _)| *k == key) {
            return Some(f.clone());
        }
    }
    let fit = fit_histogram_interval(source, rows, experts, k);
    if let Ok(mut memo) = MEMO.lock() {
        if memo.len() >= 16 {
            memo.remove(0);
        }
        memo.push((key, fit.clone()));
    }
    Some(fit)
}

fn fit_histogram_interval(
    source: &std::path::Path,
    rows: &[(u64, f64, f64)],
    experts: usize,
    k: usize,
) -> HistogramFit {
    let alpha = fit_histogram(rows, experts, k);
    let steps: f64 = rows.iter().map(|r| r.2).sum::<f64>().max(f64::MIN_POSITIVE);
    let rms = |a: f64| (histogram_sse(rows, experts, k, a) / steps).sqrt();
    let best = rms(alpha);
    let grid = (0..=(MAX_ALPHA / 0.05).round() as usize).map(|i| i as f64 * 0.05);
    let fits: Vec<f64> = grid
        .chain([alpha])
        .filter(|&a| rms(a) <= best + 0.5)
        .collect();
    let lo = fits.iter().copied().fold(alpha, f64::min);
    let hi = fits.iter().copied().fold(alpha, f64::max);
    let saturated = rows
        .iter()
        .all(|&(t, touched, _)| touched >= (t as f64 * k as f64).min(experts as f64) - 0.5);
    HistogramFit {
        source: source.to_path_buf(),
        alpha,
        interval: [lo, hi],
        saturated,
    }
}
