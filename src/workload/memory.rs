//! Per-GPU memory: weights as vLLM shards and replicates them, and the KV cache.

use super::stage::Stage;
use crate::scenario::{Family, ModelSpec};
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemoryFootprint {
    pub weights_bytes: f64,
    pub kv_cache_bytes: f64,
    /// What vLLM holds besides weights and KV cache: the activation peak of its profiling
    /// pass, CUDA graphs, NCCL and custom all-reduce buffers (`sim::memory`; 0 in the
    /// footprints of this module, which count weights and KV alone).
    pub other_bytes: f64,
}

impl MemoryFootprint {
    pub fn total(&self) -> f64 {
        self.weights_bytes + self.kv_cache_bytes + self.other_bytes
    }
}

/// Weight bytes one rank holds at tensor parallelism `tp`. Replicated on every rank, as vLLM
/// does: MLA's fused q_a/kv_a projection and the router gate (docs/sources.md §1.1).
pub fn weight_bytes_per_rank(m: &ModelSpec, tp: usize) -> f64 {
    weight_bytes_of(m, tp, 1, 0, &Stage::whole(m.num_layers))
}

/// Weight bytes one rank of a pipeline stage holds: the stage's layers /TP, the embedding on
/// the first stage, the final norm and lm_head on the last (`workload::stage`).
pub fn stage_weight_bytes_per_rank(m: &ModelSpec, tp: usize, stage: &Stage) -> f64 {
    weight_bytes_of(m, tp, 1, 0, stage)
}

/// Weight bytes one GPU holds with attention and dense layers at tensor parallelism `tp`
/// (replicated on every data-parallel rank) and, with expert parallelism `ep` > 1, the routed
/// experts and their `redundant` replicas spread over the `ep` ranks ((E + N)/EP whole experts
/// each, vLLM's EP placement); at `ep` 1 the routed experts are split /TP. The shared expert
/// follows the dense layers (/TP).
pub fn weight_bytes_layout(m: &ModelSpec, tp: usize, ep: usize, redundant: usize) -> f64 {
    weight_bytes_of(m, tp, ep, redundant, &Stage::whole(m.num_layers))
}

/// The weights of one GPU of `stage` under the layout of [`weight_bytes_layout`].
pub fn weight_bytes_of(
    m: &ModelSpec,
    tp: usize,
    ep: usize,
    redundant: usize,
    stage: &Stage,
) -> f64 {
    let t = tp as f64;
    let h = m.hidden as f64;
    let fmt = |name: &str| m.weight_format(name).bytes_per_weight();
    let mut total = 0.0;
    if stage.is_first() {
        total += m.vocab as f64 * h * 2.0 / t;
    }
    if stage.is_last() {
        total += m.vocab as f64 * h * fmt("lm_head") / t;
        total += h * 2.0; // final norm
    }
    for layer in stage.layers.clone() {
        let attn = |p: &str| fmt(&format!("model.layers.{layer}.self_attn.{p}"));
        let mlp = |p: &str| fmt(&format!("model.layers.{layer}.mlp.{p}"));
        total += 2.0 * h * 2.0; // input and post-attention norms
        match (&m.mla, m.family) {
            (Some(mla), Family::MlaMoe) => {
                let heads = m.num_heads as f64;
                let rope = mla.qk_rope_head_dim as f64;
                let kv_lora = mla.kv_lora_rank as f64;
                let qk = (mla.qk_nope_head_dim + mla.qk_rope_head_dim) as f64;
                match mla.q_lora_rank {
                    Some(q) => {
                        let q = q as f64;
                        total += (q + kv_lora + rope) * h * attn("q_a_proj");
                        total += q * heads * qk * attn("q_b_proj") / t + (q + kv_lora) * 2.0;
                    }
                    None => {
                        total += heads * qk * h * attn("q_proj") / t;
                        total += (kv_lora + rope) * h * attn("kv_a_proj_with_mqa") + kv_lora * 2.0;
                    }
                }
                let kv_b_out = heads * (mla.qk_nope_head_dim + mla.v_head_dim) as f64;
                total += kv_lora * kv_b_out * attn("kv_b_proj") / t;
                total += heads * mla.v_head_dim as f64 * h * attn("o_proj") / t;
            }
            _ => {
                let hd = m.head_dim as f64;
                let kv_per_rank = (m.num_kv_heads as f64 / t).ceil().max(1.0);
                let q_per_rank = m.num_heads as f64 / t;
                total += (q_per_rank + 2.0 * kv_per_rank) * hd * h * attn("q_proj");
                total += q_per_rank * hd * h * attn("o_proj");
            }
        }
        match &m.moe {
            Some(moe) if m.is_layer_moe(layer) => {
                let e = moe.n_routed_experts as f64;
                let i = moe.moe_intermediate as f64;
                let per_expert = 3.0 * h * i * mlp("experts.0.gate_proj");
                total += if ep > 1 {
                    (e + redundant as f64) / ep as f64 * per_expert
                } else {
                    e * per_expert / t
                };
                total += e * h * 2.0; // router gate, replicated
                let si = moe.shared_intermediate as f64;
                total += 3.0 * h * si * mlp("shared_experts.gate_proj") / t;
            }
            _ => {
                let i = m.dense_intermediate as f64;
                total += 3.0 * h * i * mlp("gate_proj") / t;
            }
        }
    }
    total
}

pub fn footprint(
    m: &ModelSpec,
    tp: usize,
    batch: u64,
    context: u64,
    kv_bytes: f64,
) -> MemoryFootprint {
    let per_token = m.kv_bytes_per_token_per_layer(tp, kv_bytes) * m.num_layers as f64;
    MemoryFootprint {
        weights_bytes: weight_bytes_per_rank(m, tp),
        kv_cache_bytes: per_token * batch as f64 * context as f64,
        other_bytes: 0.0,
    }
}

/// The footprint of one GPU of a scenario: weights as its layout shards them
/// ([`weight_bytes_layout`]) and the KV cache of the sequences its data-parallel rank holds
/// (the largest DP rank's share of the batch; all of it at `--dp 1`), sharded over the
/// decode-context-parallel ranks (`--dcp`). Under `--pp`, use `sim::memory::rank_memory`
/// (the stage that binds), which `simulate` reports.
pub fn footprint_of(s: &crate::scenario::Scenario) -> MemoryFootprint {
    let tp = s.layout.tp as usize;
    let seqs = s.dp_batches().into_iter().max().unwrap_or(0) as u64;
    let per_token = s.model.kv_bytes_per_token_per_layer(tp, s.kv_bytes)
        * s.model.num_layers as f64
        / s.layout.dcp_size() as f64;
    MemoryFootprint {
        weights_bytes: weight_bytes_layout(
            &s.model,
            tp,
            s.layout.ep_size() as usize,
            s.layout.redundant() as usize,
        ),
        kv_cache_bytes: per_token * seqs as f64 * s.context as f64,
        other_bytes: 0.0,
    }
}

/// KV-cache bytes one rank stores per token over all layers (MLA: the latent, replicated on
/// every rank; GQA: the rank's KV heads).
pub fn kv_bytes_per_token_per_rank(m: &ModelSpec, tp: usize, kv_bytes: f64) -> f64 {
    m.kv_bytes_per_token_per_layer(tp, kv_bytes) * m.num_layers as f64
}

/// The footprint of one rank of each pipeline stage (`pp` stages, vLLM's layer split): its
/// layers' weights and KV cache for all `batch` sequences (every stage holds its layers' KV of
/// every sequence).
pub fn stage_footprints(
    m: &ModelSpec,
    tp: usize,
    pp: u32,
    batch: u64,
    context: u64,
    kv_bytes: f64,
) -> Vec<MemoryFootprint> {
    let per_layer = m.kv_bytes_per_token_per_layer(tp, kv_bytes);
    super::stage::layer_split(m.num_layers, pp)
        .into_iter()
        .enumerate()
        .map(|(i, layers)| {
            let stage = Stage {
                index: i as u32,
                count: pp.max(1),
                layers,
            };
            MemoryFootprint {
                weights_bytes: stage_weight_bytes_per_rank(m, tp, &stage),
                kv_cache_bytes: per_layer
                    * stage.layers.len() as f64
                    * batch as f64
                    * context as f64,
                other_bytes: 0.0,
            }
        })
        .collect()
}

/// The footprint of the most loaded pipeline stage's rank (the whole model when `pp` is 1):
/// the one that must fit.
pub fn footprint_pp(
    m: &ModelSpec,
    tp: usize,
    pp: u32,
    batch: u64,
    context: u64,
    kv_bytes: f64,
) -> MemoryFootprint {
    stage_footprints(m, tp, pp, batch, context, kv_bytes)
        .into_iter()
        .max_by(|a, b| a.total().total_cmp(&b.total()))
        .unwrap_or_else(|| footprint(m, tp, batch, context, kv_bytes))
}
