//! How a step's tokens spread over the routed experts: uniform (every token's top-k drawn
//! uniformly), a power law over the experts (a few hot experts, as trained routers show), or
//! what a user logged from a real server (a per-expert popularity vector, or a histogram of the
//! experts touched per step). The sampler decides how many distinct experts each MoE layer
//! reads (its weight bytes) and how many tokens each expert gets (the per-rank load under expert
//! parallelism); `expected_distinct_experts` is the same model in closed form, for fast paths.
//!
//! `power-law:ALPHA` means expert popularity p_i ∝ i^-ALPHA over the experts in popularity
//! order (a Zipf law; ALPHA = 0 is uniform), a fixed popularity per layer whose hot experts are
//! placed at seeded positions. Each token picks its top-k distinct experts by successive
//! weighted draws (Plackett–Luce), which is what a softmax/sigmoid top-k over noisy logits with
//! these mean shares does.

use crate::rng::Generator;
use crate::scenario::routing::MAX_ALPHA;
pub use crate::scenario::routing::{Routing, AIC_EQUIVALENT_ALPHA, DEFAULT_ROUTING};
use rand::RngCore;

/// How a routing model turns into draws once the model's expert count and top-k are known.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    Uniform,
    /// Per-layer popularity (normalised, one vector per layer index; `None` = all layers).
    Weights {
        per_layer: Vec<Option<Vec<f64>>>,
        default: Vec<f64>,
        /// A law in popularity order, placed at seeded expert positions per layer (a file
        /// names its experts and is used as given).
        place: bool,
    },
}

/// The draws for a model with `experts` routed experts, `top_k` per token and `num_layers`
/// layers. Call after `Routing::check` (the scenario's validation does).
pub fn resolve(r: &Routing, experts: usize, top_k: usize, num_layers: usize) -> Resolved {
    match r {
        Routing::Uniform => Resolved::Uniform,
        Routing::PowerLaw { alpha } => Resolved::Weights {
            per_layer: vec![None; num_layers],
            default: zipf(experts, *alpha),
            place: true,
        },
        Routing::Histogram { .. } => {
            match histogram_fit(r, experts, top_k).map_or(0.0, |f| f.alpha) {
                a if a > 0.0 => {
                    resolve(&Routing::PowerLaw { alpha: a }, experts, top_k, num_layers)
                }
                _ => Resolved::Uniform,
            }
        }
        Routing::Popularity { layers, .. } => {
            let mut per_layer = vec![None; num_layers];
            let mut mean = vec![0.0; experts];
            for (layer, v) in layers {
                let w = normalise(v, experts);
                for (m, x) in mean.iter_mut().zip(&w) {
                    *m += x / layers.len() as f64;
                }
                if let Some(slot) = layer.and_then(|l| per_layer.get_mut(l)) {
                    *slot = Some(w);
                }
            }
            Resolved::Weights {
                per_layer,
                default: mean,
                place: false,
            }
        }
    }
}

/// The power-law exponent of a histogram's routing (0: uniform), for reports.
pub fn histogram_alpha(r: &Routing, experts: usize, top_k: usize) -> Option<f64> {
    match r {
        Routing::Histogram { .. } => histogram_fit(r, experts, top_k).map(|f| f.alpha),
        _ => None,
    }
}

/// A logged count vector as shares; experts never seen get half a token, so every expert stays
/// possible (a log of finite length cannot show an expert is never used).
fn normalise(v: &[f64], experts: usize) -> Vec<f64> {
    let mut w: Vec<f64> = (0..experts)
        .map(|e| v.get(e).copied().unwrap_or(0.0))
        .collect();
    let total: f64 = w.iter().sum::<f64>().max(f64::MIN_POSITIVE);
    let floor = 0.5_f64.min(total / experts as f64);
    for x in w.iter_mut() {
        *x = x.max(floor);
    }
    let total: f64 = w.iter().sum();
    w.iter_mut().for_each(|x| *x /= total);
    w
}

/// p_i ∝ (i+1)^-alpha, in popularity order.
fn zipf(experts: usize, alpha: f64) -> Vec<f64> {
    let mut w: Vec<f64> = (0..experts)
        .map(|i| ((i + 1) as f64).powf(-alpha))
        .collect();
    let s: f64 = w.iter().sum();
    w.iter_mut().for_each(|x| *x /= s);
    w
}

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

/// Rejected draws of one token's top-k before the exact draw takes over (see `sample_padded`).
/// With a popularity law of at most MAX_ALPHA over 8+ experts a rejection takes well under 1
/// in 2 draws, so 64 in a row almost never happen and the seeded draws are as before.
const MAX_REJECTIONS: u32 = 64;

/// One weighted draw among the experts not in `picked`, the weights being the steps of `cdf`.
/// `unit` gives the next uniform draw in [0, 1) of the sampler's stream; it is called only
/// when there is a mass left to draw from.
fn draw_unpicked(cdf: &[f64], picked: &[usize], unit: impl FnOnce() -> f64) -> usize {
    let weight = |e: usize| cdf[e] - if e == 0 { 0.0 } else { cdf[e - 1] };
    let free = |e: &usize| !picked.contains(e);
    let total: f64 = (0..cdf.len()).filter(free).map(weight).sum();
    let first_free = (0..cdf.len()).find(free).unwrap_or(0);
    if !(total > 0.0 && total.is_finite()) {
        return first_free;
    }
    let u = unit() * total;
    let mut acc = 0.0;
    let mut last = first_free;
    for e in (0..cdf.len()).filter(free) {
        acc += weight(e);
        last = e;
        if u < acc {
            return e;
        }
    }
    last
}

/// The index `cdf.partition_point(|&c| c <= u).min(len - 1)` of a weighted draw, found through
/// a guide table instead of a binary search (the sampler's hot spot: a 144-rank step draws
/// 9,217 tokens × 8 experts × 58 layers). The result is the binary search's exactly, so seeded
/// draws do not change: bucket `b` of `u` is ⌊u·scale⌋ and `start[b]` counts the entries with
/// fl(c·scale) < b; rounded multiplication by a positive number is monotone, so each of those
/// has fl(c·scale) < fl(u·scale), hence c < u, and the search can start there and step forward.
struct GuideTable {
    start: Vec<u32>,
    scale: f64,
    /// The bucket count when `scale` > 0, else 0 (every draw in bucket 0): see `find_draw`.
    draw_buckets: u64,
    /// The cdf and PAD × +∞ after it, so the first steps of the scan need no bounds test.
    cdf: Vec<f64>,
    /// The answer of every draw whose output's top bits fall in bucket b, when no entry of the
    /// cdf lies within the draws' range of that bucket (most buckets); `NOT_DIRECT` otherwise.
    direct: Vec<u32>,
}

impl GuideTable {
    /// Buckets per entry of the cdf: enough that the forward scan mostly stops at once (a
    /// scan of varying length costs a mispredicted branch per draw), few enough that the
    /// tables stay near the core (16 × 384 experts × 4 B = 24 KiB each, `start` and `direct`).
    const BUCKETS_PER_ENTRY: usize = 16;
    /// +∞ entries after the cdf.
    const PAD: usize = 3;
    /// A bucket whose draws need the search.
    const NOT_DIRECT: u32 = u32::MAX;

    fn new() -> Self {
        GuideTable {
            start: Vec::new(),
            scale: 0.0,
            draw_buckets: 0,
            cdf: Vec::new(),
            direct: Vec::new(),
        }
    }

    /// Rebuilds the table for a non-decreasing `cdf` of non-negative partial sums.
    fn build(&mut self, cdf: &[f64]) {
        let buckets = (cdf.len() * Self::BUCKETS_PER_ENTRY).max(1);
        let total = cdf.last().copied().unwrap_or(0.0);
        // scale 0 (a degenerate cdf) puts every draw in bucket 0: a plain forward scan.
        self.scale = match buckets as f64 / total {
            x if total > 0.0 && x.is_finite() => x,
            _ => 0.0,
        };
        self.draw_buckets = if self.scale > 0.0 { buckets as u64 } else { 0 };
        self.start.clear();
        self.start.resize(buckets, 0);
        // start[b] = #{i : fl(cdf[i]·scale) < b}; the set is a prefix (cdf is non-decreasing).
        let mut i = 0usize;
        for (b, s) in self.start.iter_mut().enumerate() {
            while i < cdf.len() && cdf[i] * self.scale < b as f64 {
                i += 1;
            }
            *s = i as u32;
        }
        self.cdf.clear();
        self.cdf.extend_from_slice(cdf);
        self.cdf.extend([f64::INFINITY; Self::PAD]);
        // An output x whose top 32 bits t fall in bucket b = ⌊t·B / 2³²⌋ draws u = unit·total
        // with t·2⁻³² ≤ unit < (t+1)·2⁻³², so b/B·total ≤ u < ((b+1)/B + 2⁻³²)·total, up to an
        // ulp of rounding: the margin (1e-9 of the total, above 2⁻³²) covers both. A bucket
        // with no entry but the last (never passed: the answer is capped at it) in that range
        // draws one answer, the count of entries below it.
        self.direct.clear();
        self.direct.resize(buckets, Self::NOT_DIRECT);
        if self.draw_buckets > 0 {
            let last = cdf.len() - 1;
            let margin = 1e-9 * total;
            let mut below = 0usize;
            for (b, d) in self.direct.iter_mut().enumerate() {
                let lo = b as f64 / buckets as f64 * total - margin;
                let hi = (b + 1) as f64 / buckets as f64 * total + margin;
                while below < last && cdf[below] < lo {
                    below += 1;
                }
                if below >= last || cdf[below] > hi {
                    *d = below as u32;
                }
            }
        }
    }

    /// `cdf.partition_point(|&c| c <= u).min(cdf.len() - 1)` for the (non-empty) `cdf` the
    /// table was built from.
    #[cfg(test)]
    fn find(&self, u: f64) -> usize {
        // A float-to-int cast saturates (NaN gives 0): bucket ≤ u·scale holds in every case.
        let b = ((u * self.scale) as usize).min(self.start.len() - 1);
        let (cdf, len) = (&self.cdf, self.cdf.len() - Self::PAD);
        let mut i = self.start[b] as usize;
        // One step without a branch (the start is nearly always the answer or one short of
        // it; i ≤ len, and cdf[len] = +∞), then a loop that rarely runs.
        i += usize::from(cdf[i] <= u);
        while i < len && cdf[i] <= u {
            i += 1;
        }
        i.min(len - 1)
    }

    /// `find(u)` for the draw `u = unit_of(x) · total` of a generator output `x` (`total` the
    /// cdf's last entry): the bucket's direct answer when it has one (`build`), else the
    /// search, without the float-to-int conversion of `find`: the bucket comes from
    /// x's top 32 bits in integers, b = ⌊⌊x / 2³²⌋ · B / 2³²⌋ − 1 (saturating), which is at
    /// most ⌊unit·B⌋ − 1 < fl(u·scale) (u·scale is unit·B within a few ulps, far less than
    /// 1 for any bucket count B < 2³²), so b ≤ fl(u·scale) and the argument of `find` holds:
    /// every entry start[b] counts is below u. The bucket is at most one early; the answer is
    /// nearly always among the three entries from start[b] on.
    #[inline(always)]
    fn find_draw(&self, x: u64, total: f64) -> usize {
        let b = ((x >> 32) * self.draw_buckets) >> 32;
        let d = self.direct[(b as usize).min(self.direct.len() - 1)];
        if d != Self::NOT_DIRECT {
            return d as usize;
        }
        self.search_draw(x, unit_of(x) * total)
    }

    /// `find_draw` in a bucket that holds an entry of the cdf (out of line: rare).
    #[inline(never)]
    fn search_draw(&self, x: u64, u: f64) -> usize {
        let b = (((x >> 32) * self.draw_buckets) >> 32).saturating_sub(1) as usize;
        let (cdf, len) = (&self.cdf, self.cdf.len() - Self::PAD);
        let s = self.start[b.min(self.start.len() - 1)] as usize;
        // s ≤ len and cdf[len..] = +∞ > u, so the three entries exist; they are loaded at
        // once (the cdf rises, so the ones ≤ u are a prefix of them) rather than one step
        // after another.
        let c = &cdf[s..s + 3];
        let mut i = s + usize::from(c[0] <= u) + usize::from(c[1] <= u);
        if c[2] <= u {
            i = s + 2;
            while i < len && cdf[i] <= u {
                i += 1;
            }
        }
        i.min(len - 1)
    }
}

/// rand's `StandardUniform` f64 of one 64-bit output, `rng.random::<f64>()` exactly: the top
/// 53 bits scaled to [0, 1).
#[inline]
fn unit_of(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// One layer's stream of weighted draws, generated and mapped to experts in blocks: every
/// weighted draw takes exactly one 64-bit output of the generator, in order, whatever it is
/// used for, so the outputs can be produced ahead in a tight loop and looked up in the guide
/// table in bulk, leaving the token loop only the rejections. Which output lands on which draw,
/// and so every seeded draw, is as when each draw called the generator itself.
struct DrawStream {
    rng: Generator,
    /// Generator outputs, `raw[pos..]` not yet used.
    raw: Vec<u64>,
    /// The expert each output draws.
    expert: Vec<u32>,
    pos: usize,
}

impl DrawStream {
    /// Outputs generated at a time at most (4 KiB of outputs and 2 KiB of experts: they stay
    /// in L1); fewer when the layer needs fewer.
    const BLOCK: usize = 512;

    fn new() -> Self {
        DrawStream {
            rng: crate::rng::seeded(0),
            raw: Vec::new(),
            expert: Vec::new(),
            pos: 0,
        }
    }

    /// Starts the stream of a layer of about `needed` draws from `rng`.
    fn reset(&mut self, rng: Generator, needed: u64) {
        let block = (needed.max(8) as usize).min(Self::BLOCK);
        self.rng = rng;
        self.raw.resize(block, 0);
        self.expert.resize(block, 0);
        self.pos = block;
    }

    /// The next block of outputs, mapped (out of line: the token loop keeps its registers).
    #[inline(never)]
    fn refill(&mut self, law: &Law, at: &Placement) {
        // A local copy of the generator's state stays in registers through the loop.
        let mut rng = self.rng.clone();
        for x in self.raw.iter_mut() {
            *x = rng.next_u64();
        }
        self.rng = rng;
        let (guide, total) = (&law.guide, law.total);
        if at.placed {
            for (e, &x) in self.expert.iter_mut().zip(&self.raw) {
                *e = at.expert_of[guide.find_draw(x, total)];
            }
        } else {
            for (e, &x) in self.expert.iter_mut().zip(&self.raw) {
                *e = guide.find_draw(x, total) as u32;
            }
        }
        self.pos = 0;
    }

    /// The index in `raw`/`expert` of the next output.
    #[inline(always)]
    fn advance(&mut self, law: &Law, at: &Placement) -> usize {
        if self.pos == self.raw.len() {
            self.refill(law, at);
        }
        self.pos += 1;
        self.pos - 1
    }

    /// One layer's draws: `draws` tokens each pick `k` distinct experts, counted with
    /// `rows_of(token)` rows in the returned counts.
    #[allow(clippy::too_many_arguments)]
    fn draw_layer(
        &mut self,
        law: &Law,
        at: &Placement,
        draws: u64,
        k: usize,
        mark: &mut [u64],
        stamp: &mut u64,
        rows_of: impl Fn(u64) -> u32,
    ) -> Vec<u32> {
        let experts = law.cdf.len();
        let mut counts = vec![0u32; experts];
        // The stream's position kept in a register through the loop (written back around a
        // refill or the exact fallback, which read it from `self`).
        let mut pos = self.pos;
        for token in 0..draws {
            let rows = rows_of(token);
            // An expert is among this token's picks when its mark is the token's stamp (one
            // more per token, on from layer to layer: the marks are never reset).
            *stamp += 1;
            let this = *stamp;
            // Successive weighted draws by rejection: a repeat is drawn again. When a few
            // experts hold nearly all the mass, rejection could take ~1/(mass left) draws (a
            // logged count of 1e15 against 0.5: forever), so after MAX_REJECTIONS the next
            // expert is drawn exactly from those not yet picked (the same law).
            let (mut n, mut rejected) = (0usize, 0u32);
            while n < k {
                let e = if rejected >= MAX_REJECTIONS {
                    // In the law's own order (its cdf's), then back to the expert placed there;
                    // the token's experts so far are the ones marked with its stamp.
                    self.pos = pos;
                    let taken: Vec<usize> = (0..experts)
                        .filter(|&e| mark[e] == this)
                        .map(|e| at.rank_of(e))
                        .collect();
                    let j = draw_unpicked(&law.cdf, &taken, || {
                        let i = self.advance(law, at);
                        unit_of(self.raw[i])
                    });
                    pos = self.pos;
                    at.expert(j)
                } else {
                    if pos == self.expert.len() {
                        self.refill(law, at);
                        pos = 0;
                    }
                    pos += 1;
                    self.expert[pos - 1] as usize
                };
                // Without a branch on the outcome (a repeat is rare and unpredictable): a
                // repeat adds 0.
                let fresh = mark[e] != this;
                mark[e] = this;
                counts[e] += rows * u32::from(fresh);
                n += usize::from(fresh);
                rejected += u32::from(!fresh);
            }
        }
        self.pos = pos;
        counts
    }
}

/// The generator of one layer's stream (`salt` tells the draws from the placement), seeded by
/// the step's seed and the layer: layers draw independently, in any order, on any thread.
fn layer_rng(seed: u64, salt: u64, layer: usize) -> Generator {
    crate::rng::seeded(seed ^ salt ^ (layer as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Weighted draws in a step above which its layers are drawn on every core (a few hundred
/// microseconds of draws; below, the threads would cost more than they save).
const PARALLEL_DRAWS: u64 = 1 << 16;

/// A popularity law ready to draw from by inversion of its cdf, in the law's own order (the
/// guide table, and the cdf for the exact fallback). Built once per law, not per layer.
/// Inversion keeps draws monotone in the law: with the same seed, a slightly different law (a
/// fitted `routing_alpha`, a `--vary` of the routing) moves few draws, so fits and paired
/// comparisons over the law see a smooth response, not one jump per draw.
struct Law {
    guide: GuideTable,
    cdf: Vec<f64>,
    total: f64,
}

impl Law {
    fn new(w: &[f64]) -> Self {
        let mut acc = 0.0;
        let cdf: Vec<f64> = w
            .iter()
            .map(|x| {
                acc += x;
                acc
            })
            .collect();
        let mut guide = GuideTable::new();
        guide.build(&cdf);
        Law {
            guide,
            total: cdf.last().copied().unwrap_or(0.0),
            cdf,
        }
    }
}

/// Where a layer places a law's entries: entry j (the j-th in the law's order) is expert
/// `expert_of[j]`; `rank_of` is the inverse. Unplaced (a file's vector, uniform): entry j is
/// expert j.
struct Placement {
    placed: bool,
    expert_of: Vec<u32>,
    rank_of: Vec<u32>,
}

impl Placement {
    #[inline]
    fn expert(&self, j: usize) -> usize {
        if self.placed {
            self.expert_of[j] as usize
        } else {
            j
        }
    }

    #[inline]
    fn rank_of(&self, e: usize) -> usize {
        if self.placed {
            self.rank_of[e] as usize
        } else {
            e
        }
    }

    /// A seeded uniform permutation of `n` positions (Fisher–Yates): the hot entries of a
    /// law land on random experts, differently in every layer.
    fn shuffle(&mut self, n: usize, rng: &mut Generator) {
        self.placed = true;
        let perm = &mut self.rank_of;
        perm.clear();
        perm.extend(0..n as u32);
        for i in (1..n).rev() {
            perm.swap(i, below(rng, i as u64 + 1) as usize);
        }
        // rank_of[e] is the law's entry placed at expert e; expert_of inverts it.
        self.expert_of.resize(n, 0);
        for (e, &j) in perm.iter().enumerate() {
            self.expert_of[j as usize] = e as u32;
        }
    }
}

/// A uniform integer in 0..n (n > 0), exactly: Lemire's multiply-and-reject.
#[inline]
fn below(rng: &mut Generator, n: u64) -> u64 {
    let mut m = rng.next_u64() as u128 * n as u128;
    if (m as u64) < n {
        let floor = n.wrapping_neg() % n;
        while (m as u64) < floor {
            m = rng.next_u64() as u128 * n as u128;
        }
    }
    (m >> 64) as u64
}

/// What drawing a layer needs besides its law, kept from layer to layer on a thread.
struct LayerScratch {
    at: Placement,
    stream: DrawStream,
    mark: Vec<u64>,
    stamp: u64,
}

impl LayerScratch {
    fn new() -> Self {
        LayerScratch {
            at: Placement {
                placed: false,
                expert_of: Vec::new(),
                rank_of: Vec::new(),
            },
            stream: DrawStream::new(),
            mark: Vec::new(),
            stamp: 0,
        }
    }
}

/// One MoE layer's weighted routing: the law placed at the layer's seeded positions (a file's
/// vector as given), then `draws` tokens' top-k drawn from the layer's own stream.
#[allow(clippy::too_many_arguments)]
fn weighted_layer(
    sc: &mut LayerScratch,
    law: &Law,
    place: bool,
    layer: usize,
    seed: u64,
    k: usize,
    draws: u64,
    rows_of: impl Fn(u64) -> u32,
) -> Vec<u32> {
    let experts = law.cdf.len();
    if place {
        sc.at
            .shuffle(experts, &mut layer_rng(seed, 0x0e1a_ce5e, layer));
    } else {
        sc.at.placed = false;
    }
    sc.stream
        .reset(layer_rng(seed, 0x5eed_0fe4, layer), draws * k as u64);
    sc.mark.resize(experts, 0);
    sc.stream
        .draw_layer(law, &sc.at, draws, k, &mut sc.mark, &mut sc.stamp, rows_of)
}

/// One step's routing as sampled, per layer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoutingSample {
    /// Distinct routed experts that receive at least one token, per layer (0 for dense layers).
    pub experts_touched: Vec<u32>,
    /// Tokens routed to each expert, per layer (empty for dense layers).
    pub expert_tokens: Vec<Vec<u32>>,
}

impl RoutingSample {
    /// Tokens each of `ranks` expert-parallel ranks receives in `layer`, experts placed in
    /// contiguous blocks as vLLM's expert parallelism places them (rank r holds experts
    /// r·E/ranks .. (r+1)·E/ranks − 1). The maximum over ranks sets an EP layer's time.
    pub fn rank_loads(&self, layer: usize, ranks: usize) -> Vec<u64> {
        let counts = match self.expert_tokens.get(layer) {
            Some(c) if !c.is_empty() && ranks > 0 => c,
            _ => return vec![0; ranks],
        };
        let per = counts.len().div_ceil(ranks);
        let mut out = vec![0u64; ranks];
        for (e, &c) in counts.iter().enumerate() {
            out[(e / per).min(ranks - 1)] += c as u64;
        }
        out
    }
}

/// Samples one step's routing: `moe_layers[l]` says whether layer l is MoE (a layer marked
/// false is not drawn and stays empty). Each MoE layer draws from its own seeded streams, so a
/// layer's draws do not depend on which other layers are drawn, nor on the thread.
pub fn sample(
    resolved: &Resolved,
    moe_layers: &[bool],
    experts: usize,
    top_k: usize,
    tokens: u64,
    seed: u64,
) -> RoutingSample {
    sample_padded(resolved, moe_layers, experts, top_k, tokens, 0, seed)
}

/// [`sample`] plus `dummy_rows` CUDA-graph padding rows: their hidden states are identical
/// (zero input), so per layer they all route to ONE top-k set, drawn like one more token after
/// the real ones (no draw at all when there is no padding).
pub(crate) fn sample_padded(
    resolved: &Resolved,
    moe_layers: &[bool],
    experts: usize,
    top_k: usize,
    tokens: u64,
    dummy_rows: u64,
    seed: u64,
) -> RoutingSample {
    let layers = moe_layers.len();
    let mut out = RoutingSample {
        experts_touched: vec![0; layers],
        expert_tokens: vec![Vec::new(); layers],
    };
    if experts == 0 {
        return out;
    }
    let k = top_k.min(experts);
    let draws = tokens + u64::from(dummy_rows > 0);
    let rows_of = |token: u64| if token < tokens { 1 } else { dummy_rows as u32 };
    // Uniform routing is the law of equal weights.
    let equal = vec![1.0; experts];
    let no_file = Vec::new();
    let (per_layer, default, from_law) = match resolved {
        Resolved::Uniform => (&no_file, &equal, false),
        Resolved::Weights {
            per_layer,
            default,
            place,
        } => (per_layer, default, *place),
    };
    // Each layer from its own streams: large steps draw their layers on every core.
    let moe: Vec<usize> = (0..layers).filter(|&l| moe_layers[l]).collect();
    // The shared law's table built once; a layer with a vector of its own builds its own.
    let shared = Law::new(default);
    let one = |sc: &mut LayerScratch, &layer: &usize| match per_layer.get(layer) {
        Some(Some(w)) => {
            let own = Law::new(w);
            weighted_layer(sc, &own, from_law, layer, seed, k, draws, rows_of)
        }
        _ => weighted_layer(sc, &shared, from_law, layer, seed, k, draws, rows_of),
    };
    let counts: Vec<Vec<u32>> = if draws * (k * moe.len()) as u64 >= PARALLEL_DRAWS {
        use rayon::prelude::*;
        moe.par_iter().map_init(LayerScratch::new, one).collect()
    } else {
        let mut sc = LayerScratch::new();
        moe.iter().map(|l| one(&mut sc, l)).collect()
    };
    for (&layer, c) in moe.iter().zip(counts) {
        out.experts_touched[layer] = c.iter().filter(|&&x| x > 0).count() as u32;
        out.expert_tokens[layer] = c;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    fn mean_sampled(r: &Routing, tokens: u64, layers: usize) -> f64 {
        let res = resolve(r, 384, 8, layers);
        let s = sample(&res, &vec![true; layers], 384, 8, tokens, 7);
        s.experts_touched.iter().map(|&x| x as f64).sum::<f64>() / layers as f64
    }

    #[test]
    fn closed_form_matches_the_sampler_mean() {
        for r in [
            Routing::Uniform,
            Routing::PowerLaw { alpha: 0.6 },
            Routing::PowerLaw { alpha: 1.2 },
        ] {
            for t in [1u64, 8, 32, 128, 512] {
                let exact = expected_distinct_experts(&r, t, 384, 8);
                let sampled = mean_sampled(&r, t, 200);
                let rel = (exact - sampled).abs() / sampled;
                assert!(
                    rel < 0.02,
                    "{r} t={t}: closed form {exact:.1} vs sampled {sampled:.1}"
                );
            }
        }
        // Uniform: 384 (1 − (1 − 8/384)^32) = 188.23 (the README's "about 188 of 384").
        let u = expected_distinct_experts(&Routing::Uniform, 32, 384, 8);
        assert!((u - 188.23).abs() < 0.01, "{u}");
    }

    #[test]
    fn prepared_closed_form_equals_the_one_shot_one() {
        for r in [Routing::Uniform, Routing::PowerLaw { alpha: 0.66 }] {
            let d = DistinctExperts::new(&r, 384, 8);
            for t in [0u64, 1, 7, 64, 1000] {
                assert_eq!(
                    d.at(t),
                    expected_distinct_experts(&r, t, 384, 8),
                    "{r} t={t}"
                );
            }
        }
    }

    #[test]
    fn concentration_lowers_the_count_and_one_token_touches_top_k() {
        let mut last = f64::MAX;
        for a in [0.0, 0.5, 1.0, 2.0] {
            let d = expected_distinct_experts(&Routing::power_law(a).unwrap(), 64, 384, 8);
            assert!(d < last, "alpha {a}: {d}");
            last = d;
            let one = expected_distinct_experts(&Routing::power_law(a).unwrap(), 1, 384, 8);
            assert!((one - 8.0).abs() < 1e-6, "{one}");
        }
    }

    #[test]
    fn parse_accepts_the_documented_forms_and_refuses_the_rest() {
        assert_eq!(Routing::parse("uniform").unwrap(), Routing::Uniform);
        assert_eq!(Routing::parse("power-law:0").unwrap(), Routing::Uniform);
        assert_eq!(
            Routing::parse("power-law:1.2").unwrap(),
            Routing::PowerLaw { alpha: 1.2 }
        );
        for bad in [
            "power-law:-1",
            "power-law:nan",
            "power-law:9",
            "zipf",
            "",
            "/nonexistent.csv",
        ] {
            let e = Routing::parse(bad).unwrap_err().to_string();
            assert!(
                e.contains("--routing") && e.contains("power-law:ALPHA"),
                "{e}"
            );
        }
    }

    #[test]
    fn uniform_draws_give_each_token_k_experts() {
        let s = sample(&Resolved::Uniform, &[false, true, true], 384, 8, 32, 0);
        assert_eq!(s.experts_touched[0], 0);
        let total: u32 = s.expert_tokens[1].iter().sum();
        assert_eq!(total, 32 * 8);
        assert_eq!(
            s.experts_touched[1],
            s.expert_tokens[1].iter().filter(|&&c| c > 0).count() as u32
        );
    }

    #[test]
    fn guide_table_finds_what_the_binary_search_finds() {
        // Laws of every shape the sampler builds (uniform, steep, with zero weights and ties,
        // one expert holding nearly all), at random points and at every step of the cdf.
        let mut rng = crate::rng::seeded(11);
        let mut laws: Vec<Vec<f64>> = vec![
            zipf(256, 0.66),
            zipf(384, 3.0),
            vec![1.0 / 8.0; 8],
            vec![0.0, 0.5, 0.0, 0.0, 0.5, 0.0],
            vec![1e15, 0.5, 0.5, 0.5],
            vec![1.0],
        ];
        laws.push((0..300).map(|_| rng.random::<f64>().powi(4)).collect());
        let mut guide = GuideTable::new();
        for w in &laws {
            let mut acc = 0.0;
            let cdf: Vec<f64> = w
                .iter()
                .map(|x| {
                    acc += x;
                    acc
                })
                .collect();
            guide.build(&cdf);
            let total = cdf[cdf.len() - 1];
            let points = (0..20_000)
                .map(|_| rng.random::<f64>() * total)
                .chain(cdf.iter().copied())
                .chain([0.0, f64::MIN_POSITIVE, total, f64::NAN]);
            for u in points {
                let want = cdf.partition_point(|&c| c <= u).min(cdf.len() - 1);
                assert_eq!(guide.find(u), want, "u={u} over {} entries", cdf.len());
            }
            // Generator outputs, random and at the edges of the buckets' top bits.
            let edges = (0..cdf.len() as u64 * 16).flat_map(|b| {
                let top = ((b << 32) / (cdf.len() as u64 * 16)) << 32;
                [top, top.wrapping_sub(1), top | 0xffff_ffff]
            });
            for x in (0..20_000)
                .map(|_| rng.next_u64())
                .chain(edges)
                .chain([0, u64::MAX])
            {
                let u = unit_of(x) * total;
                let want = cdf.partition_point(|&c| c <= u).min(cdf.len() - 1);
                assert_eq!(
                    guide.find_draw(x, total),
                    want,
                    "x={x} over {} entries",
                    cdf.len()
                );
            }
        }
    }

    /// The sampler as it would draw without blocks: one generator call and one binary search
    /// of the law's cdf per weighted draw (the guide table finds the same index, see above)
    /// from each layer's own streams, mapped through the layer's placement, the same rejections
    /// and the same exact fallback.
    fn sample_per_draw(
        resolved: &Resolved,
        moe_layers: &[bool],
        experts: usize,
        k: usize,
        tokens: u64,
        dummy_rows: u64,
        seed: u64,
    ) -> Vec<Vec<u32>> {
        let equal = vec![1.0; experts];
        let (per_layer, default, place) = match resolved {
            Resolved::Uniform => (&vec![None; moe_layers.len()], &equal, &false),
            Resolved::Weights {
                per_layer,
                default,
                place,
            } => (per_layer, default, place),
        };
        let mut out = vec![Vec::new(); moe_layers.len()];
        for (layer, _) in moe_layers.iter().enumerate().filter(|(_, &m)| m) {
            let mut rng = layer_rng(seed, 0x5eed_0fe4, layer);
            let mut place_rng = layer_rng(seed, 0x0e1a_ce5e, layer);
            let w = per_layer
                .get(layer)
                .and_then(|w| w.as_ref())
                .unwrap_or(default);
            // The law's entries in its own order; entry j lands on expert at[j].
            let mut perm: Vec<usize> = (0..experts).collect();
            if *place {
                for i in (1..experts).rev() {
                    perm.swap(i, below(&mut place_rng, i as u64 + 1) as usize);
                }
            }
            let mut at = vec![0usize; experts];
            for (e, &j) in perm.iter().enumerate() {
                at[j] = e;
            }
            let mut acc = 0.0;
            let cdf: Vec<f64> = w
                .iter()
                .map(|x| {
                    acc += x;
                    acc
                })
                .collect();
            let mut counts = vec![0u32; experts];
            for token in 0..tokens + u64::from(dummy_rows > 0) {
                let mut picked: Vec<usize> = Vec::new();
                let mut rejected = 0;
                while picked.len() < k {
                    let e = if rejected >= MAX_REJECTIONS {
                        let taken: Vec<usize> = picked.iter().map(|&e| perm[e]).collect();
                        at[draw_unpicked(&cdf, &taken, || rng.random::<f64>())]
                    } else {
                        let u = rng.random::<f64>() * cdf[experts - 1];
                        at[cdf.partition_point(|&c| c <= u).min(experts - 1)]
                    };
                    if picked.contains(&e) {
                        rejected += 1;
                    } else {
                        picked.push(e);
                    }
                }
                for e in picked {
                    counts[e] += if token < tokens { 1 } else { dummy_rows as u32 };
                }
            }
            out[layer] = counts;
        }
        out
    }

    #[test]
    fn block_draws_are_the_per_draw_ones() {
        let mut rng = crate::rng::seeded(5);
        assert!((0..1000).all(|_| {
            let mut twin = rng.clone();
            unit_of(rng.next_u64()) == twin.random::<f64>()
        }));
        // Power laws (placed), a file's per-layer vectors with a near-degenerate layer (the
        // exact fallback runs), padding rows, more draws than one block, dense layers between,
        // and a step large enough that its layers are drawn on every core.
        let mut heavy = vec![0.5; 16];
        heavy[3] = 1e15;
        let file = Resolved::Weights {
            per_layer: vec![None, Some(normalise(&heavy, 16)), None, None],
            default: zipf(16, 1.0),
            place: false,
        };
        // The same near-degenerate vector as a placed law: the fallback maps through the
        // layer's placement.
        let placed_heavy = Resolved::Weights {
            per_layer: Vec::new(),
            default: normalise(&heavy, 16),
            place: true,
        };
        let cases = [
            (Resolved::Uniform, 384, 8),
            (placed_heavy, 16, 4),
            (
                resolve(&Routing::PowerLaw { alpha: 0.66 }, 256, 8, 4),
                256,
                8,
            ),
            (resolve(&Routing::PowerLaw { alpha: 3.0 }, 64, 6, 4), 64, 6),
            (file, 16, 4),
        ];
        let moe = [true, true, false, true];
        for (res, experts, k) in &cases {
            for (tokens, dummy, seed) in [(1u64, 0u64, 0u64), (300, 7, 1), (3_000, 0, 42)] {
                let s = sample_padded(res, &moe, *experts, *k, tokens, dummy, seed);
                let want = sample_per_draw(res, &moe, *experts, *k, tokens, dummy, seed);
                assert_eq!(s.expert_tokens, want, "{experts} experts, {tokens} tokens");
            }
        }
    }

    /// A pipeline stage draws only its own layers: each gets the draws it gets in the whole
    /// step, at any size (both sides of the parallel threshold).
    #[test]
    fn a_layer_draws_the_same_whatever_else_is_drawn() {
        let r = resolve(&Routing::PowerLaw { alpha: 0.66 }, 256, 8, 8);
        for tokens in [5u64, 4_000] {
            let all = sample(&r, &[true; 8], 256, 8, tokens, 9);
            let mut part = [false; 8];
            part[3..5].fill(true);
            let some = sample(&r, &part, 256, 8, tokens, 9);
            for (l, &kept) in part.iter().enumerate() {
                if kept {
                    assert_eq!(some.expert_tokens[l], all.expert_tokens[l], "layer {l}");
                } else {
                    assert!(some.expert_tokens[l].is_empty());
                }
            }
        }
    }

    #[test]
    fn rank_loads_sum_to_the_routed_tokens() {
        let r = resolve(&Routing::PowerLaw { alpha: 1.0 }, 384, 8, 2);
        let s = sample(&r, &[true, true], 384, 8, 64, 3);
        let loads = s.rank_loads(1, 8);
        assert_eq!(loads.len(), 8);
        assert_eq!(loads.iter().sum::<u64>(), 64 * 8);
        // A power law loads some rank above the mean.
        assert!(*loads.iter().max().unwrap() > 64);
    }
}
