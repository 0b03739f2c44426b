//! Kimi-K2.5 at TP=8: kernel counts, FLOPs and bytes checked against hand arithmetic.
//! Shapes per rank (docs/sources.md §1.1, §3.1): hidden 7168, 64/8 = 8 heads, q_lora 1536,
//! kv_lora 512, rope 64, nope 128, v 128, experts 384 top-8 of width 2048/8 = 256,
//! shared expert 2048/8 = 256, dense layer-0 MLP 18432/8 = 2304, vocab 163840/8 = 20480.

use decodesim::category::Category;
use decodesim::sim::ScenarioRequest;
use decodesim::workload::{self, CostFamily};

fn scenario(batch: u32) -> decodesim::scenario::Scenario {
    let req = ScenarioRequest {
        batch,
        ..ScenarioRequest::default()
    };
    req.load().expect("default scenario loads").0
}

/// Per-token multiply-accumulates of every GEMM one rank runs (N × K summed).
fn gemm_macs_per_token() -> f64 {
    let attn = 2112.0 * 7168.0   // fused_qkv_a (1536 + 512 + 64 outputs), replicated
        + 1536.0 * 1536.0        // q_b: 8 heads × 192
        + 8.0 * 512.0 * 128.0    // W_UK_T bmm
        + 8.0 * 128.0 * 512.0    // W_UV bmm
        + 7168.0 * 1024.0; // o_proj
    assert_eq!(attn, 25_886_720.0);
    let dense = 4608.0 * 7168.0 + 7168.0 * 2304.0;
    assert_eq!(dense, 49_545_216.0);
    let router = 384.0 * 7168.0;
    let shared = 512.0 * 7168.0 + 7168.0 * 256.0;
    let routed = 8.0 * (512.0 * 7168.0 + 7168.0 * 256.0);
    let lm_head = 20480.0 * 7168.0;
    61.0 * attn + dense + 60.0 * (router + shared + routed) + lm_head
}

#[test]
fn kernel_counts_and_collectives() {
    for batch in [1u32, 64] {
        let w = workload::build(&scenario(batch));
        let kernels = w.ops.iter().filter(|o| o.is_kernel()).count();
        // embedding + its allreduce = 2; dense layer 0 = 17; each of 60 MoE layers = 25
        // (13 attention-side kernels incl. its allreduce and post norm, router 2, align 1,
        // shared expert 3, routed 4, add 1, allreduce 1); head = norm, lm_head, all_gather,
        // cast, argmax = 5.
        assert_eq!(kernels, 2 + 17 + 60 * 25 + 5, "batch {batch}");
        let colls = workload::collectives(&w);
        assert_eq!(
            colls,
            vec![
                (CostFamily::AllReduce, batch as u64 * 14_336, 123),
                (CostFamily::AllGather, batch as u64 * 20_480 * 8 * 2, 1),
            ]
        );
    }
}

#[test]
fn gemm_flops_match_hand_arithmetic() {
    assert_eq!(gemm_macs_per_token(), 4_913_299_456.0);
    for batch in [1u32, 64] {
        let w = workload::build(&scenario(batch));
        let flops: f64 = w
            .ops
            .iter()
            .filter(|o| {
                matches!(
                    o.category,
                    Category::Gemm | Category::Moe | Category::Router
                )
            })
            .filter(|o| {
                o.family != CostFamily::RouterTopk
                    && o.family != CostFamily::MoeAlign
                    && o.family != CostFamily::MoeSum
            })
            .map(|o| o.flops)
            .sum();
        assert_eq!(
            flops,
            2.0 * batch as f64 * gemm_macs_per_token(),
            "batch {batch}"
        );
    }
}

#[test]
fn attention_reads_the_replicated_latent() {
    let s = scenario(64);
    let w = workload::build(&s);
    let att: Vec<_> = w
        .ops
        .iter()
        .filter(|o| o.family == CostFamily::AttentionMlaDecode)
        .collect();
    assert_eq!(att.len(), 61);
    // Every rank reads all 64 sequences × 4096 tokens × 576 latent values × 2 bytes, plus
    // q (576) and output (512) for 8 heads per sequence.
    let kv = 64.0 * 4096.0 * 576.0 * 2.0;
    let q_out = 64.0 * 8.0 * (576.0 + 512.0) * 2.0;
    assert_eq!(att[0].bytes, kv + q_out);
    // FLOPs: QK over 576 and PV over 512 for 8 heads: 2 × 64 × 8 × 4096 × 1088.
    assert_eq!(att[0].flops, 2.0 * 64.0 * 8.0 * 4096.0 * 1088.0);
}

#[test]
fn gemm_bytes_match_hand_arithmetic() {
    let int4 = 0.5 + 2.0 / 32.0; // 4-bit weights + one BF16 scale per 32
    let expert_params = 512.0 * 7168.0 + 7168.0 * 256.0; // one expert's w13 + w2 per rank
    for batch in [1u32, 64] {
        let w = workload::build(&scenario(batch));
        let b = batch as f64;
        // BF16 weights read once: attention 61 layers, dense MLP, router, shared, lm_head.
        let bf16_weights = (61.0 * 25_886_720.0
            + 49_545_216.0
            + 60.0 * (384.0 * 7168.0 + 512.0 * 7168.0 + 7168.0 * 256.0)
            + 20480.0 * 7168.0)
            * 2.0;
        let touched: f64 = w.experts_touched.iter().map(|&e| e as f64).sum();
        let expert_weights = touched * expert_params * int4;
        // Activations read and written once per GEMM, in BF16 (elements per token):
        // attention 9280 + 3072 + 8·640 + 8·640 + 8192 = 30,784; dense 11,776 + 9,472 = 21,248;
        // router 7,552; shared 7,680 + 7,424 = 15,104; routed 8 × 15,104; lm_head 27,648.
        let act_elems =
            61.0 * 30_784.0 + 21_248.0 + 60.0 * (7_552.0 + 15_104.0 + 8.0 * 15_104.0) + 27_648.0;
        let expected = bf16_weights + expert_weights + b * act_elems * 2.0;
        let got: f64 = w
            .ops
            .iter()
            .filter(|o| matches!(o.family, CostFamily::GemmBf16 | CostFamily::MoeGemmInt4))
            .map(|o| o.bytes)
            .sum();
        assert!(
            (got - expected).abs() < 1.0,
            "batch {batch}: {got} vs {expected}"
        );
        if batch == 1 {
            // One token touches exactly its 8 experts in each of the 60 MoE layers, so a
            // rank reads about 6.0 GB of weights per step (docs/sources.md §1.1).
            assert_eq!(touched, 480.0);
            let weights = bf16_weights + expert_weights;
            assert_eq!(weights, 6_028_132_352.0);
        } else {
            // 64 tokens × top-8 of 384 under the default routing (a power law; uniform would
            // touch 384·(1 − (376/384)^64) ≈ 284): the closed form's count, within 5%.
            let mean = touched / 60.0;
            let expected = decodesim::workload::expected_distinct_experts(
                &decodesim::scenario::routing::Routing::default(),
                64,
                384,
                8,
            );
            assert!(
                (mean / expected - 1.0).abs() < 0.05 && mean < 270.0,
                "mean touched experts {mean} vs {expected:.1}"
            );
        }
    }
}

#[test]
fn weights_per_gpu_at_tp8_are_about_76_gb() {
    let s = scenario(1);
    let bytes = decodesim::workload::memory::weight_bytes_per_rank(&s.model, 8);
    // docs/sources.md §1.1: routed experts 60 × 384 × 44,040,192 params × 4.5 bits / 8 ranks
    // = 71.35 GB; replicated qkv_a 1.84 GB; gate 0.33 GB; the rest of the BF16 weights / 8.
    let experts: f64 = 60.0 * 384.0 * 44_040_192.0 * (0.5 + 2.0 / 32.0) / 8.0;
    assert!((experts / 1e9 - 71.35).abs() < 0.01);
    assert!((75.5e9..77.0e9).contains(&bytes), "{bytes}");
}
