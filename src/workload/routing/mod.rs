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

pub use crate::scenario::routing::{Routing, AIC_EQUIVALENT_ALPHA, DEFAULT_ROUTING};
pub(crate) use closed_form::DistinctExperts;
pub use closed_form::{expected_distinct_experts, histogram_fit, HistogramFit};
use draws::{weighted_layer, Law, LayerScratch};

mod closed_form;
mod draws;

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

/// Weighted draws in a step above which its layers are drawn on every core (a few hundred
/// microseconds of draws; below, the threads would cost more than they save).
const PARALLEL_DRAWS: u64 = 1 << 16;

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
    use super::draws::{below, draw_unpicked, layer_rng, unit_of, MAX_REJECTIONS};
    use super::*;
    use rand::{Rng, RngCore};

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

    /// The sampler as it would draw without blocks: one generator call and one binary search
    /// of the law's cdf per weighted draw (the guide table finds the same index, see `draws`' tests)
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
            let cdf = draws::cumulative(w);
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
