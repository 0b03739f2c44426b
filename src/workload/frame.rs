//! What surrounds the decoder layers: the vocab-parallel embedding, the final norm, lm_head,
//! the logits all-gather and sampling (docs/sources.md §3.1, collectives list).

use super::builder::{Builder, ACT_BYTES};
use super::op::{CostFamily, MeasureKey, Shape};
use super::role::OpRole;
use super::StepShape;
use crate::category::Category;
use crate::scenario::Runtime;

pub(crate) fn embedding(b: &mut Builder, s: &StepShape) {
    let t = s.tokens;
    let h = s.model.hidden as u64;
    b.push(
        OpRole::Embedding,
        "embed_tokens",
        "at::native::indexSelectLargeIndex (vocab-parallel embedding)",
        CostFamily::Embedding,
        Category::Elementwise,
        Shape {
            m: t,
            n: h,
            k: 0,
            batch: 1,
        },
        "bf16",
        0.0,
        2.0 * (t * h) as f64 * ACT_BYTES + t as f64 * 8.0,
    );
    let table_rows = (s.model.vocab as u64).div_ceil(s.tp as u64);
    b.measured(MeasureKey::new("embedding", t, h, table_rows));
    // VocabParallelEmbedding reduces its masked partial lookups across ranks; with one rank
    // vLLM's all-reduce returns its input and launches nothing.
    if s.tp > 1 {
        b.collective(
            OpRole::Collective,
            "embedding_all_reduce",
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
            CostFamily::AllReduce,
            s.hidden_message_bytes(),
        );
    }
}

pub(crate) fn head(b: &mut Builder, s: &StepShape) {
    let m = s.model;
    let h = m.hidden as u64;
    let vocab_shard = (m.vocab as u64).div_ceil(s.tp as u64);
    // The final norm is the model's last kernel (padded rows); logits are computed outside the
    // graph for the real rows only.
    b.norm(
        "final_norm",
        "vllm::fused_add_rms_norm_kernel",
        s.tokens,
        h,
        true,
    );
    let t = s.logit_rows;
    b.gemm(
        OpRole::LmHead,
        "lm_head",
        "gemm (cuBLAS) lm_head",
        Category::Gemm,
        t,
        vocab_shard,
        h,
        m.weight_format("lm_head"),
    );
    if s.tp > 1 {
        b.collective(
            OpRole::Collective,
            "logits_all_gather",
            "ncclDevKernel_AllGather_RING_LL",
            CostFamily::AllGather,
            t * vocab_shard * s.tp as u64 * ACT_BYTES as u64,
        );
    }
    let logits = t * vocab_shard * s.tp as u64;
    if s.runtime == Runtime::Reference {
        return reference_sampling(b, t, logits);
    }
    sampling(
        b,
        t,
        logits,
        "logits_to_fp32",
        "at::native::vectorized_elementwise_kernel (copy to float)",
        ACT_BYTES + 4.0,
    );
    sampling(
        b,
        t,
        logits,
        "argmax",
        "at::native::reduce_kernel<ArgMaxOps<float>>",
        4.0,
    );
}

/// The reference step's sampling: gathered logits are [tp, B, V/tp]; the reference reorders
/// them, zero-fills argmax's output, takes the argmax in BF16 and copies the token ids out.
fn reference_sampling(b: &mut Builder, t: u64, logits: u64) {
    b.elementwise(
        OpRole::Sampling,
        "logits_permute",
        "at::native::elementwise_kernel (copy)",
        Category::Elementwise,
        logits,
        logits,
    );
    copy(b, t, "argmax_memset", "Memset (Device)", t as f64 * 8.0);
    sampling(
        b,
        t,
        logits,
        "argmax",
        "at::native::reduce_kernel<ArgMaxOps>",
        ACT_BYTES,
    );
    b.measured(MeasureKey::new("sampling", t, logits / t.max(1), 0));
    copy(
        b,
        t,
        "token_copy",
        "Memcpy DtoD (Device -> Device)",
        t as f64 * 16.0,
    );
}

/// One sampling kernel over all `logits` of `t` rows: `bytes_per_logit` read (and written, for
/// a cast).
fn sampling(
    b: &mut Builder,
    t: u64,
    logits: u64,
    name: &str,
    kernel: &'static str,
    bytes_per_logit: f64,
) {
    b.push(
        OpRole::Sampling,
        name,
        kernel,
        CostFamily::Sampling,
        Category::Sampling,
        Shape {
            m: t,
            n: logits / t.max(1),
            k: 0,
            batch: 1,
        },
        "-",
        logits as f64,
        logits as f64 * bytes_per_logit + t as f64 * 8.0,
    );
}

/// A copy of `bytes` for `t` rows done by the copy engine or a memset, not by a kernel.
fn copy(b: &mut Builder, t: u64, name: &str, kernel: &'static str, bytes: f64) {
    let shape = Shape {
        m: t,
        n: 1,
        k: 0,
        batch: 1,
    };
    b.push(
        OpRole::Sampling,
        name,
        kernel,
        CostFamily::Elementwise,
        Category::Memcpy,
        shape,
        "-",
        0.0,
        bytes,
    );
}
