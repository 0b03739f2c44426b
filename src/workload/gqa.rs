//! Grouped-query attention (Llama, Qwen3, MiniMax-M2) as vLLM runs it in decode.

use super::builder::{Builder, ACT_BYTES};
use super::op::{CostFamily, Shape};
use super::role::OpRole;
use super::StepShape;
use crate::category::Category;

pub(crate) fn attention_block(b: &mut Builder, s: &StepShape, layer: usize) {
    let m = s.model;
    let tokens = s.tokens;
    let hidden = m.hidden as u64;
    let hd = m.head_dim as u64;
    let heads = (m.num_heads / s.tp) as u64;
    // vLLM replicates KV heads when there are fewer of them than ranks.
    let kv_heads = (m.num_kv_heads as u64).div_ceil(s.tp as u64).max(1);
    let attn = |p: &str| format!("model.layers.{layer}.self_attn.{p}");

    b.gemm(
        OpRole::QkvProj,
        "qkv_proj",
        "gemm (cuBLAS) qkv_proj",
        Category::Gemm,
        tokens,
        (heads + 2 * kv_heads) * hd,
        hidden,
        m.weight_format(&attn("q_proj")),
    );
    if m.qk_norm {
        b.norm(
            "qk_norm",
            "vllm::rms_norm_kernel",
            tokens * (heads + kv_heads),
            hd,
            false,
        );
    }
    b.elementwise(
        OpRole::Rope,
        "rotary_emb",
        "vllm::rotary_embedding_kernel",
        Category::Elementwise,
        tokens * (heads + kv_heads) * hd,
        tokens * (heads + kv_heads) * hd,
    );
    kv_write_and_attention(b, s, heads, kv_heads);
    b.gemm(
        OpRole::OProj,
        "o_proj",
        "gemm (cuBLAS) o_proj",
        Category::Gemm,
        tokens,
        hidden,
        heads * hd,
        m.weight_format(&attn("o_proj")),
    );
}

/// The new tokens' K and V written to the cache, and the decode kernel over it (`heads` query
/// and `kv_heads` KV heads per rank).
fn kv_write_and_attention(b: &mut Builder, s: &StepShape, heads: u64, kv_heads: u64) {
    let hd = s.model.head_dim as u64;
    // Padded rows have no KV slot (slot -1): the write covers the real tokens.
    let real = s.real_tokens;
    let kv_elems = real * 2 * kv_heads * hd;
    b.push(
        OpRole::KvWrite,
        "kv_cache_write",
        "vllm::reshape_and_cache_flash_kernel",
        CostFamily::KvWrite,
        Category::Attention,
        Shape {
            m: real,
            n: 2 * kv_heads * hd,
            k: 0,
            batch: 1,
        },
        "-",
        0.0,
        2.0 * kv_elems as f64 * ACT_BYTES,
    );
    let ctx = s.context as f64;
    let seqs = s.batch as f64;
    // k+1 queries per sequence (speculative verify) read the cache once per sequence.
    let q = s.queries as f64;
    let kv_bytes = seqs * ctx * (2 * kv_heads * hd) as f64 * s.kv_bytes;
    b.push(
        OpRole::AttentionDecode,
        "attention_decode",
        "flash_fwd_splitkv_kernel",
        CostFamily::AttentionGqaDecode,
        Category::Attention,
        Shape {
            m: s.batch as u64 * s.queries,
            n: hd,
            k: kv_heads,
            batch: heads,
        },
        "-",
        4.0 * seqs * q * heads as f64 * ctx * hd as f64,
        kv_bytes + 2.0 * seqs * q * (heads * hd) as f64 * ACT_BYTES,
    );
}
