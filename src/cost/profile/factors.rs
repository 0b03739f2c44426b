//! The factors fitted to end-to-end measurements, and how they act on every price: each op's
//! two terms (`Pricing::split_us` and the rest) scaled by its family's factors.

use super::checks::Checker;
use crate::cost::Pricing;
use crate::error::Result;
use crate::workload::{CostFamily, Op, Workload};
use serde::{Deserialize, Serialize};

/// Factors fitted to end-to-end measurements, applied on top of the bottom-up prices (after
/// the table or law priced each op, whichever did): the few things a throughput curve, a context
/// sweep or a collective benchmark can tell apart. Each defaults to "no change".
///
/// Every price carries its own split into two terms (`Pricing::split_us`, recorded by the source
/// that priced it: law, kernel table, AIConfigurator table, custom all-reduce, NCCL knobs), and a
/// family's factors act on those terms:
/// - collectives: latency × `collective_latency_scale`, the rest (bytes) ÷ `collective_bw_scale`;
/// - attention (the attention category: decode kernel, split-KV reduce, KV write): the price at
///   the smallest context × `attention_fixed_scale`, the growth with KV length beyond it ×
///   `attention_growth_scale`;
/// - routed-expert GEMMs: the weight read × `moe_weight_scale`, the rest (per-token work and
///   fixed cost) × `moe_token_scale`, both ÷ `moe_efficiency`;
/// - dense GEMMs (every `gemm_*` op): × `dense_gemm_scale`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Factors {
    /// Routed-expert GEMM time is divided by this (1.2: the expert GEMMs run 20% faster).
    pub moe_efficiency: f64,
    /// The bytes term of every collective is divided by this (bus bandwidth scale).
    pub collective_bw_scale: f64,
    /// The latency term of every collective (base + steps × hop) is multiplied by this.
    pub collective_latency_scale: f64,
    /// Routing concentration: `power-law:ALPHA` for scenarios that do not pass `--routing`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing_alpha: Option<f64>,
    /// GPU idle added at the end of every step (host scheduling between graph replays, µs).
    pub step_overhead_us: f64,
    /// The part of the attention price that grows with the KV length is multiplied by this.
    #[serde(skip_serializing_if = "is_one")]
    pub attention_growth_scale: f64,
    /// The attention price at the smallest context (fixed costs, KV write) is multiplied by this.
    #[serde(skip_serializing_if = "is_one")]
    pub attention_fixed_scale: f64,
    /// The weight-read part of a routed-expert GEMM (touched experts' bytes over the bandwidth
    /// its source prices them at) is multiplied by this.
    #[serde(skip_serializing_if = "is_one")]
    pub moe_weight_scale: f64,
    /// The rest of a routed-expert GEMM's price (its per-token slope and fixed cost) is
    /// multiplied by this.
    #[serde(skip_serializing_if = "is_one")]
    pub moe_token_scale: f64,
    /// Every dense GEMM's time (projections, shared expert, router gate, lm_head, the MLA batched
    /// matmuls) is multiplied by this.
    #[serde(skip_serializing_if = "is_one")]
    pub dense_gemm_scale: f64,
    /// How the factors were obtained (command, data points).
    pub source: String,
}

fn is_one(v: &f64) -> bool {
    *v == 1.0
}

impl Default for Factors {
    fn default() -> Self {
        Factors {
            moe_efficiency: 1.0,
            collective_bw_scale: 1.0,
            collective_latency_scale: 1.0,
            routing_alpha: None,
            step_overhead_us: 0.0,
            attention_growth_scale: 1.0,
            attention_fixed_scale: 1.0,
            moe_weight_scale: 1.0,
            moe_token_scale: 1.0,
            dense_gemm_scale: 1.0,
            source: String::new(),
        }
    }
}

impl Factors {
    pub fn is_identity(&self) -> bool {
        Factors {
            source: String::new(),
            ..self.clone()
        } == Factors::default()
    }

    /// Multipliers of an op's two price terms (`Pricing::split_us`, then the rest): which they
    /// are depends on the op's family (see the type's doc).
    pub fn terms(&self, op: &Op) -> (f64, f64) {
        match op.family {
            f if f.is_collective() => (
                self.collective_latency_scale,
                1.0 / self.collective_bw_scale,
            ),
            CostFamily::MoeGemmBf16 | CostFamily::MoeGemmInt4 | CostFamily::MoeGemmFp8 => (
                self.moe_weight_scale / self.moe_efficiency,
                self.moe_token_scale / self.moe_efficiency,
            ),
            CostFamily::GemmBf16 | CostFamily::GemmInt4 | CostFamily::GemmFp8 => {
                (self.dense_gemm_scale, self.dense_gemm_scale)
            }
            _ if op.category == crate::category::Category::Attention => {
                (self.attention_fixed_scale, self.attention_growth_scale)
            }
            _ => (1.0, 1.0),
        }
    }

    /// The scale factors with their profile field names.
    pub fn scales(&self) -> [(&'static str, f64); 8] {
        [
            ("factors.moe_efficiency", self.moe_efficiency),
            ("factors.collective_bw_scale", self.collective_bw_scale),
            (
                "factors.collective_latency_scale",
                self.collective_latency_scale,
            ),
            (
                "factors.attention_growth_scale",
                self.attention_growth_scale,
            ),
            ("factors.attention_fixed_scale", self.attention_fixed_scale),
            ("factors.moe_weight_scale", self.moe_weight_scale),
            ("factors.moe_token_scale", self.moe_token_scale),
            ("factors.dense_gemm_scale", self.dense_gemm_scale),
        ]
    }

    /// Scales within which a fitted factor stays physical enough to price anything.
    pub(super) fn check(&self, c: &Checker) -> Result<()> {
        for (field, v) in self.scales() {
            if !(v.is_finite() && (0.01..=100.0).contains(&v)) {
                return Err(c.fail(field, v, "a scale in [0.01, 100] (1 = no change)"));
            }
        }
        if let Some(a) = self.routing_alpha {
            if !(a.is_finite() && (0.0..=3.0).contains(&a)) {
                return Err(c.fail("factors.routing_alpha", a, "a power-law exponent in [0, 3]"));
            }
        }
        c.latency("factors.step_overhead_us", self.step_overhead_us)
    }
}

/// Applies a profile's factors to a workload's prices: each op's price is its split term
/// (`Pricing::split_us`) plus the rest, and the factors of its family multiply each (see
/// `Factors`), whatever source priced it. The collective choices the report lists scale alike.
/// Runs before a hypothetical link (`cost::link`): a factor corrects the machine's measured
/// behaviour, a `--link-gbps` / `--link-latency-us` what-if then swaps the link under it.
pub fn apply_factors(f: &Factors, w: &Workload, pricing: &mut Pricing) {
    if f.is_identity() {
        return;
    }
    let ops = w.ops.iter();
    for ((op, us), split) in ops.zip(&mut pricing.base_us).zip(&mut pricing.split_us) {
        apply_terms(f.terms(op), us, split);
    }
    let (a, b) = (f.collective_latency_scale, 1.0 / f.collective_bw_scale);
    for c in &mut pricing.collectives {
        let lo = c.latency_us.clamp(0.0, c.time_us.max(0.0));
        c.time_us = lo * a + (c.time_us - lo) * b;
        c.latency_us = lo * a;
    }
}

/// One op's price under its factor terms ([`Factors::terms`]): the split part times the first,
/// the rest times the second.
pub(crate) fn apply_terms((a, b): (f64, f64), us: &mut f64, split: &mut f64) {
    let lo = split.clamp(0.0, us.max(0.0));
    let rest = *us - lo;
    *split = lo * a;
    *us = lo * a + rest * b;
}
