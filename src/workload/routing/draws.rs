//! The sampler's draws: Plackett–Luce top-k picks by rejection from a popularity law's cdf,
//! looked up through a guide table in blocks of generator outputs, each layer from its own
//! seeded streams and placement.

use crate::rng::Generator;
use rand::RngCore;

/// Rejected draws of one token's top-k before the exact draw takes over (see `sample_padded`).
/// With a popularity law of at most MAX_ALPHA over 8+ experts a rejection takes well under 1
/// in 2 draws, so 64 in a row almost never happen and the seeded draws are as before.
pub(super) const MAX_REJECTIONS: u32 = 64;

/// One weighted draw among the experts not in `picked`, the weights being the steps of `cdf`.
/// `unit` gives the next uniform draw in [0, 1) of the sampler's stream; it is called only
/// when there is a mass left to draw from.
pub(super) fn draw_unpicked(cdf: &[f64], picked: &[usize], unit: impl FnOnce() -> f64) -> usize {
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

/// The running sum of a law's weights: the CDF its draws search.
pub(super) fn cumulative(w: &[f64]) -> Vec<f64> {
    let mut acc = 0.0;
    w.iter()
        .map(|x| {
            acc += x;
            acc
        })
        .collect()
}

/// rand's `StandardUniform` f64 of one 64-bit output, `rng.random::<f64>()` exactly: the top
/// 53 bits scaled to [0, 1).
#[inline]
pub(super) fn unit_of(x: u64) -> f64 {
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
pub(super) fn layer_rng(seed: u64, salt: u64, layer: usize) -> Generator {
    crate::rng::seeded(seed ^ salt ^ (layer as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// A popularity law ready to draw from by inversion of its cdf, in the law's own order (the
/// guide table, and the cdf for the exact fallback). Built once per law, not per layer.
/// Inversion keeps draws monotone in the law: with the same seed, a slightly different law (a
/// fitted `routing_alpha`, a `--vary` of the routing) moves few draws, so fits and paired
/// comparisons over the law see a smooth response, not one jump per draw.
pub(super) struct Law {
    guide: GuideTable,
    cdf: Vec<f64>,
    total: f64,
}

impl Law {
    pub(super) fn new(w: &[f64]) -> Self {
        let cdf = cumulative(w);
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
pub(super) fn below(rng: &mut Generator, n: u64) -> u64 {
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
pub(super) struct LayerScratch {
    at: Placement,
    stream: DrawStream,
    mark: Vec<u64>,
    stamp: u64,
}

impl LayerScratch {
    pub(super) fn new() -> Self {
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
pub(super) fn weighted_layer(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::routing::zipf;
    use rand::Rng;

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
            let cdf = cumulative(w);
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
}
