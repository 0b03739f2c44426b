//! A step that carries prefill: `B` decode sequences (one query token each, at their mean KV
//! length) and chunks of prompt tokens, as vLLM V1's chunked prefill puts both in one forward
//! pass (docs/sources.md §11.1).
//!
//! - Every per-token op (norms, projections, the router, MoE, the all-reduces, the embedding)
//!   runs at the step's B + T tokens, padded to a captured size when the pass runs under a
//!   piecewise CUDA graph (at most the largest capture size), unpadded otherwise.
//! - The KV-cache write covers all B + T new tokens.
//! - The decode sequences take the absorbed MLA path as in a decode step (`W_UK_T`, the
//!   decode kernel over the 576-wide latent, `W_UV`) at B rows.
//! - The prefill tokens take vLLM's MLA prefill path (`forward_mha`, docs/sources.md §8.1):
//!   `kv_b_proj` up-projects the new tokens' latent to per-head K (nope) and V, a causal
//!   attention runs over each chunk's own tokens, and for a chunk with a cached prefix the
//!   prefix's latent is gathered from the cache (`gather_and_maybe_dequant_cache`),
//!   up-projected by `kv_b_proj`, attended without a mask, and merged with the causal part
//!   (`merge_attn_states`), one round per workspace of [`CONTEXT_WORKSPACE_TOKENS`].
//! - The head computes logits for one row per scheduled request (its last scheduled token).
//!
//! The attention kernels of the prefill path are priced by the profile's `gemm_bf16` law (they
//! are batched matrix products over the heads, FLOPs and bytes from the model's shape) with
//! the physics floor over it; nothing measured prices them (no table holds prefill attention).

use super::builder::{Builder, ACT_BYTES};
use super::op::{CostFamily, Op, Shape};
use super::role::OpRole;
use super::SHARED_EXPERT_STREAM_TOKEN_THRESHOLD;
use super::{decoder_layers, frame, parallel, sample_routing, StepShape, Workload};
use crate::category::Category;
use crate::scenario::cudagraph::PadRule;
use crate::scenario::model::MlaDims;
use crate::scenario::Scenario;
use crate::scenario::WeightFormat;
use serde::Serialize;

/// vLLM's MLA prefill workspace for the cached prefix at its defaults: min(max(8 ×
/// max_model_len, 4 × max_num_seqs × block_size), 64Ki) tokens with max_num_seqs 1024 and
/// block size 16 is 64Ki whatever the model length (docs/sources.md §8.1).
pub const CONTEXT_WORKSPACE_TOKENS: u64 = 65_536;

/// Prompt tokens of one request scheduled in a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PrefillChunk {
    /// Tokens of the prompt this step computes.
    pub tokens: u64,
    /// Tokens of the same prompt already in the KV cache (earlier chunks).
    pub prefix: u64,
}

/// One step of a serving run: decode sequences and prefill chunks.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct MixedStep {
    /// Sequences that decode one token each.
    pub decode: u32,
    /// Their mean KV length, tokens.
    pub context: u64,
    pub chunks: Vec<PrefillChunk>,
}

impl MixedStep {
    pub fn prefill_tokens(&self) -> u64 {
        self.chunks.iter().map(|c| c.tokens).sum()
    }
    pub fn tokens(&self) -> u64 {
        self.decode as u64 + self.prefill_tokens()
    }
}

/// How vLLM launches a step under its default `FULL_AND_PIECEWISE` CUDA-graph mode
/// (docs/sources.md §3.4): a uniform decode batch replays a full graph; a batch with prefill
/// replays piecewise graphs with attention run eagerly between the pieces; a batch above the
/// largest capture size runs without graphs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GraphMode {
    Full,
    Piecewise,
    None,
}

/// The graph mode of `step` under `s` (`--cuda-graphs off`: none).
pub fn graph_mode(s: &Scenario, step: &MixedStep) -> GraphMode {
    let pad = s
        .cuda_graph_sizes
        .padding(step.tokens(), PadRule::Decode, s.cuda_graphs);
    match (pad.captured, step.chunks.is_empty()) {
        (false, _) => GraphMode::None,
        (true, true) => GraphMode::Full,
        (true, false) => GraphMode::Piecewise,
    }
}

/// Whether `op` runs inside vLLM's attention custom op, the split point of a piecewise graph:
/// the KV-cache write, the prefill path and the decode path (absorbed bmms included). Under
/// a piecewise graph these launch eagerly; the rest replays in graph pieces.
pub fn runs_eager(op: &Op) -> bool {
    op.category == Category::Attention
        || matches!(op.role, OpRole::AbsorbedBmm | OpRole::PrefillKvUp)
}

/// One rank's mixed step (module doc). `s` gives the model, system and parallel layout; its
/// batch and context are ignored for `step`'s. A step without prefill is the decode step of
/// `workload::build` at its batch and context.
pub fn build(s: &Scenario, step: &MixedStep) -> Workload {
    if step.chunks.is_empty() {
        let mut d = s.clone();
        d.batch = step.decode.max(1);
        d.context = step.context.max(1);
        return super::build(&d);
    }
    let decode = step.decode as u64;
    let real = step.tokens();
    let pad = s
        .cuda_graph_sizes
        .padding(real, PadRule::Decode, s.cuda_graphs);
    let n = s.model.num_layers;
    let routing = sample_routing(s, 0..n, real, pad.padded - real);
    let shape = StepShape {
        model: &s.model,
        tp: s.layout.tp as usize,
        batch: step.decode,
        context: step.context,
        tokens: pad.padded,
        real_tokens: real,
        decode_tokens: decode,
        logit_rows: decode + step.chunks.len() as u64,
        prefill: &step.chunks,
        queries: 1,
        verify_layout: s.mla_backend.verify,
        kv_bytes: s.kv_bytes,
        sms: s.system.gpu.sms,
        shared_expert_stream_threshold: SHARED_EXPERT_STREAM_TOKEN_THRESHOLD,
        runtime: s.runtime,
        experts_touched: routing.experts_touched.clone(),
    };
    let mut b = Builder::new();
    frame::embedding(&mut b, &shape);
    decoder_layers(&mut b, s, &shape, 0..n);
    b.layer = -1;
    frame::head(&mut b, &shape);
    let mut w = Workload {
        ops: b.ops,
        experts_touched: routing.experts_touched.clone(),
        routing,
    };
    if s.comm.fuse_allreduce_rms {
        super::fusion::apply(&mut w);
    }
    parallel::apply(s, real, pad.padded, &mut w);
    w
}

/// The per-rank dimensions of the prefill path.
struct Dims {
    heads: f64,
    /// Query/key width per head: nope + rope.
    qk: f64,
    v: f64,
    latent: f64,
}

/// The MLA prefill path of a mixed step's chunks (module doc), after the KV-cache write.
pub(super) fn prefill_attention(b: &mut Builder, s: &StepShape, mla: &MlaDims, kv_b: &str) {
    let heads = (s.model.num_heads / s.tp) as u64;
    let (nope, rope, v) = (
        mla.qk_nope_head_dim as u64,
        mla.qk_rope_head_dim as u64,
        mla.v_head_dim as u64,
    );
    let d = Dims {
        heads: heads as f64,
        qk: (nope + rope) as f64,
        v: v as f64,
        latent: (mla.kv_lora_rank + mla.qk_rope_head_dim) as f64,
    };
    let kv_b_format = s.model.weight_format(kv_b);
    let t: u64 = s.prefill.iter().map(|c| c.tokens).sum();
    b.gemm(
        OpRole::PrefillKvUp,
        "prefill_kv_b_proj",
        "gemm (cuBLAS) kv_b_proj (prefill)",
        Category::Gemm,
        t,
        heads * (nope + v),
        mla.kv_lora_rank as u64,
        kv_b_format,
    );
    // Causal attention of each chunk over its own tokens: query i sees i + 1 keys.
    let pairs: f64 = s
        .prefill
        .iter()
        .map(|c| c.tokens as f64 * (c.tokens as f64 + 1.0) / 2.0)
        .sum();
    let longest = s.prefill.iter().map(|c| c.tokens).max().unwrap_or(0);
    flash_attention(b, &d, "prefill_attention", t, t, longest, pairs);

    cached_prefix(b, s, mla, &d, kv_b_format);
}

/// The cached prefixes of the chunks that have one, in rounds of vLLM's context workspace:
/// each round gathers its share of the prefix, up-projects it and attends over it, and merges
/// the partial outputs.
fn cached_prefix(
    b: &mut Builder,
    s: &StepShape,
    mla: &MlaDims,
    d: &Dims,
    kv_b_format: WeightFormat,
) {
    let cached: Vec<&PrefillChunk> = s.prefill.iter().filter(|c| c.prefix > 0).collect();
    if cached.is_empty() {
        return;
    }
    // vLLM splits the prefix into rounds of the workspace shared by the chunks that have one.
    let per_round = (CONTEXT_WORKSPACE_TOKENS / cached.len() as u64).max(1);
    let longest_prefix = cached.iter().map(|c| c.prefix).max().unwrap_or(1);
    let rounds = longest_prefix.div_ceil(per_round).max(1);
    let q_tokens: u64 = cached.iter().map(|c| c.tokens).sum();
    let prefix: u64 = cached.iter().map(|c| c.prefix).sum();
    let ctx_pairs: f64 = cached
        .iter()
        .map(|c| c.tokens as f64 * c.prefix as f64)
        .sum();
    let round = PrefixRound {
        tokens: prefix.div_ceil(rounds),
        queries: q_tokens,
        longest_prefix,
        pairs: ctx_pairs / rounds as f64,
    };
    for _ in 0..rounds {
        prefix_round(b, s, mla, d, kv_b_format, &round);
    }
}

/// One round of the cached prefix: `tokens` of it gathered for `queries` query tokens.
struct PrefixRound {
    tokens: u64,
    queries: u64,
    longest_prefix: u64,
    /// (query, key) products of the round.
    pairs: f64,
}

fn prefix_round(
    b: &mut Builder,
    s: &StepShape,
    mla: &MlaDims,
    d: &Dims,
    kv_b_format: WeightFormat,
    r: &PrefixRound,
) {
    let heads = (s.model.num_heads / s.tp) as u64;
    let (nope, rope, v) = (
        mla.qk_nope_head_dim as u64,
        mla.qk_rope_head_dim as u64,
        mla.v_head_dim as u64,
    );
    let p = r.tokens;
    let pf = p as f64;
    b.push(
        OpRole::PrefillAttention,
        "prefill_gather_cache",
        "vllm::gather_and_maybe_dequant_cache",
        CostFamily::Elementwise,
        Category::Attention,
        Shape {
            m: p,
            n: d.latent as u64,
            k: 0,
            batch: 1,
        },
        "-",
        0.0,
        pf * d.latent * (s.kv_bytes + ACT_BYTES),
    );
    b.gemm(
        OpRole::PrefillKvUp,
        "prefill_ctx_kv_b_proj",
        "gemm (cuBLAS) kv_b_proj (prefill context)",
        Category::Gemm,
        p,
        heads * (nope + v),
        mla.kv_lora_rank as u64,
        kv_b_format,
    );
    // K = [k_nope, k_pe broadcast over the heads]: written once for the attention.
    let k_elems = pf * d.heads * d.qk;
    b.push(
        OpRole::PrefillAttention,
        "prefill_ctx_k_concat",
        "at::native::CatArrayBatchedCopy (k_nope, k_pe)",
        CostFamily::Elementwise,
        Category::Attention,
        Shape {
            m: p,
            n: (heads * (nope + rope)),
            k: 0,
            batch: 1,
        },
        "-",
        0.0,
        (pf * d.heads * nope as f64 + pf * rope as f64 + k_elems) * ACT_BYTES,
    );
    attend_and_merge(b, d, heads * v, r);
}

/// The round's attention over its share of the prefix and the merge of the partial outputs
/// (`hv`: the output's width per rank).
fn attend_and_merge(b: &mut Builder, d: &Dims, hv: u64, r: &PrefixRound) {
    let p = r.tokens;
    flash_attention(
        b,
        d,
        "prefill_ctx_attention",
        r.queries,
        p,
        r.longest_prefix,
        r.pairs,
    );
    // Two partial outputs and their log-sum-exps in, one out.
    let out = r.queries as f64 * d.heads * (d.v * ACT_BYTES + 4.0);
    b.push(
        OpRole::PrefillAttention,
        "prefill_merge_attn_states",
        "vllm::merge_attn_states_kernel",
        CostFamily::Elementwise,
        Category::Attention,
        Shape {
            m: r.queries,
            n: hv,
            k: 0,
            batch: 1,
        },
        "-",
        r.queries as f64 * d.heads * d.v * 4.0,
        3.0 * out,
    );
}

/// A flash-attention call of `queries` query tokens over `keys` key/value tokens with `pairs`
/// (query, key) products: 2 × pairs × heads × (qk + v) FLOPs; Q, K, V and O read or written
/// once (BF16) and the log-sum-exp (fp32). Priced by the `gemm_bf16` law (a batched product
/// over the heads: `batch` = heads keeps it out of the dense-GEMM table).
fn flash_attention(
    b: &mut Builder,
    d: &Dims,
    name: &str,
    queries: u64,
    keys: u64,
    longest: u64,
    pairs: f64,
) {
    let (q, k) = (queries as f64, keys as f64);
    let bytes =
        (q * d.heads * (d.qk + d.v) + k * d.heads * (d.qk + d.v)) * ACT_BYTES + q * d.heads * 4.0;
    b.push(
        OpRole::PrefillAttention,
        name,
        "flash_attn_varlen_fwd (FLASH_ATTN prefill)",
        CostFamily::GemmBf16,
        Category::Attention,
        Shape {
            m: queries,
            n: longest,
            k: d.qk as u64,
            batch: d.heads as u64,
        },
        "bf16",
        2.0 * pairs * d.heads * (d.qk + d.v),
        bytes,
    );
}
