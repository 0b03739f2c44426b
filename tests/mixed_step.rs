//! One mixed step (decode sequences and a prefill chunk with a cached prefix) computed by hand:
//! which ops run at which token counts, the prefill path's FLOPs and bytes from Kimi-K2.5's
//! shape, the law's price of its attention, and the CUDA-graph mode vLLM gives the step.

use decodesim::cost;
use decodesim::sim::ScenarioRequest;
use decodesim::workload::mixed::{self, GraphMode, MixedStep, PrefillChunk};
use decodesim::workload::{CostFamily, Op, Workload};

/// Kimi-K2.5 with two layers (a dense first layer, one MoE layer) on the default system, TP8.
fn setup() -> (decodesim::Scenario, decodesim::CalibrationProfile) {
    ScenarioRequest {
        layers: Some(2),
        ..ScenarioRequest::default()
    }
    .load()
    .unwrap()
}

/// Four decode sequences at KV 1,000 and one chunk of 100 prompt tokens whose first 300 are
/// cached.
fn step() -> MixedStep {
    MixedStep {
        decode: 4,
        context: 1000,
        chunks: vec![PrefillChunk {
            tokens: 100,
            prefix: 300,
        }],
    }
}

fn op<'a>(w: &'a Workload, name: &str) -> (usize, &'a Op) {
    w.ops
        .iter()
        .enumerate()
        .find(|(_, o)| o.name == name)
        .unwrap_or_else(|| panic!("no op {name}"))
}

#[test]
fn mixed_step_ops_by_hand() {
    let (s, _) = setup();
    let w = mixed::build(&s, &step());
    // 104 tokens: CUDA graphs pad them to the captured size 104 (a multiple of 8).
    assert_eq!(op(&w, "L1.o_proj").1.shape.m, 104);
    assert_eq!(op(&w, "L1.fused_qkv_a_proj").1.shape.m, 104);
    assert_eq!(op(&w, "L1.kv_cache_write").1.shape.m, 104);
    // All-reduce of 104 tokens x 7168 x 2 bytes.
    assert_eq!(op(&w, "L1.attn_all_reduce").1.message_bytes, 104 * 7168 * 2);
    // The absorbed decode path at the 4 decode rows; the decode kernel over 4 sequences.
    assert_eq!(op(&w, "L1.W_UK_T").1.shape.m, 4);
    assert_eq!(op(&w, "L1.W_UV").1.shape.m, 4);
    assert_eq!(op(&w, "L1.mla_decode").1.shape.m, 4);
    // Logits for each scheduled request: 4 decode + 1 chunk.
    assert_eq!(op(&w, "lm_head").1.shape.m, 5);
    // kv_b_proj up-projects the 100 new tokens: 512 -> 8 heads x (128 nope + 128 v).
    let kvb = op(&w, "L1.prefill_kv_b_proj").1;
    assert_eq!((kvb.shape.m, kvb.shape.k), (100, 512));
    assert_eq!(kvb.flops, 2.0 * 100.0 * 2048.0 * 512.0);
    // Causal attention over the chunk: 100 x 101 / 2 = 5,050 (query, key) pairs, 8 heads,
    // (192 + 128) per pair, 2 FLOPs each.
    let causal = op(&w, "L1.prefill_attention").1;
    assert_eq!(causal.family, CostFamily::GemmBf16);
    assert_eq!(causal.flops, 2.0 * 5050.0 * 8.0 * 320.0);
    // Q, K, V, O of 100 tokens (8 heads x (192 + 128) BF16 for Q+O and for K+V) + fp32 LSE.
    assert_eq!(
        causal.bytes,
        2.0 * 100.0 * 8.0 * 320.0 * 2.0 + 100.0 * 8.0 * 4.0
    );
    // The cached prefix: 300 latent rows of 576 gathered (BF16 read and written) ...
    assert_eq!(
        op(&w, "L1.prefill_gather_cache").1.bytes,
        300.0 * 576.0 * 4.0
    );
    let ctx_kvb = op(&w, "L1.prefill_ctx_kv_b_proj").1;
    assert_eq!(ctx_kvb.shape.m, 300);
    assert_eq!(ctx_kvb.flops, 2.0 * 300.0 * 2048.0 * 512.0);
    // ... attended without a mask: 100 x 300 pairs.
    let ctx = op(&w, "L1.prefill_ctx_attention").1;
    assert_eq!(ctx.flops, 2.0 * 30_000.0 * 8.0 * 320.0);
    assert_eq!(
        ctx.bytes,
        (100.0 + 300.0) * 8.0 * 320.0 * 2.0 + 100.0 * 8.0 * 4.0
    );
    // Twelve ops of each layer run inside the attention custom op (eager under piecewise
    // graphs): the KV write, the eight of the prefill path, the decode path's four.
    let eager: Vec<&str> = w
        .ops
        .iter()
        .filter(|o| o.layer == 1 && mixed::runs_eager(o))
        .map(|o| o.name.as_str())
        .collect();
    assert_eq!(
        eager,
        [
            "L1.kv_cache_write",
            "L1.prefill_kv_b_proj",
            "L1.prefill_attention",
            "L1.prefill_gather_cache",
            "L1.prefill_ctx_kv_b_proj",
            "L1.prefill_ctx_k_concat",
            "L1.prefill_ctx_attention",
            "L1.prefill_merge_attn_states",
            "L1.W_UK_T",
            "L1.mla_decode",
            "L1.mla_decode_reduce",
            "L1.W_UV"
        ]
    );
}

#[test]
fn prefill_attention_priced_by_the_gemm_law_by_hand() {
    let (s, p) = setup();
    let w = mixed::build(&s, &step());
    let pricing = cost::price(&w, &s, &p).unwrap();
    let k = p.kernel(CostFamily::GemmBf16).unwrap();
    let gpu = &s.system.gpu;
    for name in ["L1.prefill_attention", "L1.prefill_ctx_attention"] {
        let (i, o) = op(&w, name);
        let compute = o.flops / (gpu.bf16_tflops * 1e6 * k.compute_efficiency);
        let memory = o.bytes / (gpu.memory_bandwidth_gbps * 1e3 * k.mem_efficiency);
        let law = k.fixed_us + compute.max(memory);
        let floor =
            (o.bytes / (gpu.memory_bandwidth_gbps * 1e3)).max(o.flops / (gpu.bf16_tflops * 1e6));
        let want = law.max(floor);
        assert!(
            (pricing.base_us[i] - want).abs() < 1e-9 * want,
            "{name}: {} vs {want}",
            pricing.base_us[i]
        );
    }
}

#[test]
fn graph_modes_follow_full_and_piecewise() {
    let (s, _) = setup();
    assert_eq!(mixed::graph_mode(&s, &step()), GraphMode::Piecewise);
    let decode = MixedStep {
        chunks: Vec::new(),
        ..step()
    };
    assert_eq!(mixed::graph_mode(&s, &decode), GraphMode::Full);
    // 4 + 600 tokens: above the largest capture size (512), no graph.
    let big = MixedStep {
        chunks: vec![PrefillChunk {
            tokens: 600,
            prefix: 0,
        }],
        ..step()
    };
    assert_eq!(mixed::graph_mode(&s, &big), GraphMode::None);
    // A step without prefill is the decode step of `workload::build`.
    let mut d = s.clone();
    d.batch = 4;
    d.context = 1000;
    assert_eq!(
        mixed::build(&s, &decode).ops,
        decodesim::workload::build(&d).ops
    );
    // A chunk without a cached prefix has no prefix path; a step of prefill alone no decode.
    let fresh = MixedStep {
        decode: 0,
        context: 0,
        chunks: vec![PrefillChunk {
            tokens: 64,
            prefix: 0,
        }],
    };
    let w = mixed::build(&s, &fresh);
    assert!(w.ops.iter().all(|o| !o.name.contains("prefill_ctx")));
    assert!(w
        .ops
        .iter()
        .all(|o| o.family != CostFamily::AttentionMlaDecode));
    assert_eq!(op(&w, "lm_head").1.shape.m, 1);
}
