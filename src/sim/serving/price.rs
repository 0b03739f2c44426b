//! Step prices for the serving run: each distinct step shape is built (`workload::mixed`),
//! priced (`cost::price`) and played on the timeline engine once, under the CUDA-graph mode
//! vLLM gives it; shapes are bucketed first so that a run of thousands of steps prices a few
//! hundred.
//!
//! **Bucketing.** The decode count is kept exact. The decode sequences' mean KV length and
//! each chunk's tokens and prefix are rounded to the nearest multiple of 2^(⌊log2 x⌋ − 4)
//! (exact below 32): 16 buckets per octave, so every bucketed quantity is within 1/32 (3.1%)
//! of its value. A step's price grows at most in proportion to each of them (attention with
//! the KV length, GEMMs and attention with the tokens, prefix attention with the prefix), so a
//! step is priced within 3.1% of its own shape's price, and the errors of the many steps of a
//! run, rounded both ways, mostly cancel in the means (`tests/serving.rs` holds a run against
//! one priced at 256 buckets per octave).

use super::super::{engine_config, Engine, Timeline};
use crate::cost::{self, CalibrationProfile};
use crate::error::Result;
use crate::scenario::Scenario;
use crate::workload::mixed::{self, GraphMode, MixedStep, PrefillChunk};
use std::collections::{BTreeSet, HashMap};

/// log2 of the buckets per octave (module doc).
pub const BUCKET_BITS: u32 = 4;

/// `x` rounded to its bucket: the nearest multiple of 2^(⌊log2 x⌋ − bits), exact below
/// 2^(bits + 1).
pub fn bucket(x: u64, bits: u32) -> u64 {
    if x < (2u64 << bits) {
        return x;
    }
    let e = 63 - x.leading_zeros();
    let step = 1u64 << (e - bits);
    (x + step / 2) / step * step
}

/// What one distinct step cost, and how it was launched.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct StepPrice {
    pub(super) us: f64,
    pub(super) mode: GraphMode,
    /// The bucketed shape's index in [`StepPricer::priced`] (the order shapes were first met).
    pub(super) shape: u32,
}

/// Prices steps of one scenario, each bucketed shape once.
pub(super) struct StepPricer<'a> {
    s: &'a Scenario,
    p: &'a CalibrationProfile,
    bits: u32,
    cache: HashMap<MixedStep, StepPrice>,
    /// Each distinct bucketed shape with its price (µs), in the order first met.
    pub(super) priced: Vec<(MixedStep, f64)>,
    engine: Engine,
    timeline: Timeline,
    /// The report's notes: those of the first step of each graph mode priced (the rest are
    /// priced quietly: the same notes at other shapes).
    pub(super) warnings: BTreeSet<String>,
    noted: Vec<GraphMode>,
}

impl<'a> StepPricer<'a> {
    pub(super) fn new(s: &'a Scenario, p: &'a CalibrationProfile, bits: u32) -> Self {
        StepPricer {
            s,
            p,
            bits,
            cache: HashMap::new(),
            priced: Vec::new(),
            engine: Engine::new(),
            timeline: Timeline::default(),
            warnings: BTreeSet::new(),
            noted: Vec::new(),
        }
    }

    /// Distinct shapes priced so far.
    pub(super) fn shapes(&self) -> usize {
        self.cache.len()
    }

    /// The bucketed shape that prices `step`.
    pub(super) fn representative(&self, step: &MixedStep) -> MixedStep {
        let b = |x| bucket(x, self.bits);
        let mut chunks: Vec<PrefillChunk> = step
            .chunks
            .iter()
            .map(|c| PrefillChunk {
                tokens: b(c.tokens).max(1),
                prefix: b(c.prefix),
            })
            .collect();
        chunks.sort_unstable();
        MixedStep {
            decode: step.decode,
            context: if step.decode > 0 { b(step.context) } else { 0 },
            chunks,
        }
    }

    pub(super) fn price(&mut self, step: &MixedStep) -> Result<StepPrice> {
        let key = self.representative(step);
        if let Some(p) = self.cache.get(&key) {
            return Ok(*p);
        }
        let mut price = self.play(&key)?;
        price.shape = self.priced.len() as u32;
        self.priced.push((key.clone(), price.us));
        self.cache.insert(key, price);
        Ok(price)
    }

    /// Builds, prices and plays one step shape.
    fn play(&mut self, step: &MixedStep) -> Result<StepPrice> {
        let mut s = self.s.clone();
        s.batch = step.decode.max(1);
        s.context = step.context.max(1);
        let w = mixed::build(&s, step);
        let mode = mixed::graph_mode(&s, step);
        let loud = !self.noted.contains(&mode);
        let pricing = if loud {
            self.noted.push(mode);
            let p = cost::price(&w, &s, self.p)?;
            self.warnings.extend(p.warnings.iter().cloned());
            p
        } else {
            cost::price_quiet(&w, &s, self.p)?
        };
        let mut cfg = engine_config(&s, self.p);
        match mode {
            GraphMode::Full => {}
            GraphMode::Piecewise => {
                cfg.eager_ops = Some(w.ops.iter().map(mixed::runs_eager).collect());
            }
            GraphMode::None => cfg.cuda_graphs = false,
        }
        self.engine
            .run(&w, &pricing.base_us, &cfg, &mut self.timeline);
        Ok(StepPrice {
            us: self.timeline.step_time_us(),
            mode,
            shape: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_within_one_in_32() {
        assert_eq!(bucket(31, 4), 31);
        assert_eq!(bucket(32, 4), 32);
        assert_eq!(bucket(33, 4), 34);
        assert_eq!(bucket(8192, 4), 8192);
        assert_eq!(bucket(8200, 4), 8192);
        // 8,450 is 258 past 8,192: more than half a step of 512.
        assert_eq!(bucket(8450, 4), 8704);
        for x in 1..70_000u64 {
            let b = bucket(x, 4) as f64;
            assert!((b - x as f64).abs() <= x as f64 / 32.0, "{x} -> {b}");
        }
    }
}
