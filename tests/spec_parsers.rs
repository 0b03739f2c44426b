//! The spec parsers read the values a user relies on from the bundled configs: Kimi-K2.5's
//! `text_config` nesting and compressed-tensors INT4 with its `ignore` list, DeepSeek-V3's FP8
//! blocks, a GQA dense model, and the system and GPU files.

use decodesim::scenario::model::Scoring;
use decodesim::scenario::{Family, ModelSpec, SystemSpec, WeightFormat};
use std::path::{Path, PathBuf};

fn root(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn model(name: &str) -> ModelSpec {
    ModelSpec::from_file(&root(&format!("models/{name}.json"))).expect("bundled config parses")
}

#[test]
fn kimi_k25_reads_text_config_and_int4_with_its_ignore_list() {
    let m = model("kimi-k2.5");
    assert_eq!(m.name, "kimi-k2.5");
    assert_eq!(m.family, Family::MlaMoe);
    assert_eq!(
        (m.num_layers, m.hidden, m.vocab, m.num_heads),
        (61, 7168, 163_840, 64)
    );
    assert_eq!(m.max_position_embeddings, 262_144);
    let mla = m.mla.as_ref().unwrap();
    assert_eq!(mla.q_lora_rank, Some(1536));
    assert_eq!(
        (
            mla.kv_lora_rank,
            mla.qk_nope_head_dim,
            mla.qk_rope_head_dim,
            mla.v_head_dim
        ),
        (512, 128, 64, 128)
    );
    let moe = m.moe.as_ref().unwrap();
    assert_eq!((moe.n_routed_experts, moe.top_k), (384, 8));
    assert_eq!(
        (moe.moe_intermediate, moe.shared_intermediate),
        (2048, 2048)
    );
    assert_eq!((moe.n_shared_experts, moe.first_k_dense), (1, 1));
    assert_eq!(moe.scoring, Scoring::Sigmoid);
    assert_eq!(m.dense_intermediate, 18_432);
    let q = m.quant.as_ref().unwrap();
    assert_eq!(q.method, "compressed-tensors");
    assert_eq!(q.format, WeightFormat::Int4 { group_size: 32 });
    // 4 bits plus one BF16 scale per 32 weights.
    assert_eq!(q.format.bytes_per_weight(), 0.5 + 2.0 / 32.0);
    // Routed experts are INT4; everything the ignore list names stays BF16.
    let int4 = WeightFormat::Int4 { group_size: 32 };
    assert_eq!(
        m.weight_format("model.layers.5.mlp.experts.17.gate_proj"),
        int4
    );
    assert_eq!(
        m.weight_format("model.layers.5.mlp.experts.17.down_proj"),
        int4
    );
    for bf16 in [
        "lm_head",
        "model.layers.5.self_attn.q_a_proj",
        "model.layers.5.self_attn.kv_b_proj",
        "model.layers.5.mlp.shared_experts.gate_proj",
        "model.layers.0.mlp.gate_proj",
        "model.layers.0.mlp.down_proj",
        "model.layers.5.mlp.gate",
        "model.embed_tokens",
    ] {
        assert_eq!(m.weight_format(bf16), WeightFormat::Bf16, "{bf16}");
    }
    assert!(m.is_layer_moe(1) && !m.is_layer_moe(0));
}

#[test]
fn kimi_k25_bf16_has_no_quantization() {
    let m = model("kimi-k2.5-bf16");
    assert!(m.quant.is_none());
    assert_eq!(
        m.weight_format("model.layers.5.mlp.experts.0.gate_proj"),
        WeightFormat::Bf16
    );
}

#[test]
fn deepseek_v3_reads_fp8_blocks_and_group_routing() {
    let m = model("deepseek-v3");
    assert_eq!(m.family, Family::MlaMoe);
    assert_eq!(
        (m.num_layers, m.hidden, m.num_heads, m.vocab),
        (61, 7168, 128, 129_280)
    );
    let moe = m.moe.as_ref().unwrap();
    assert_eq!(
        (moe.n_routed_experts, moe.top_k, moe.first_k_dense),
        (256, 8, 3)
    );
    assert_eq!((moe.n_group, moe.topk_group), (8, 4));
    let q = m.quant.as_ref().unwrap();
    assert_eq!(q.method, "fp8");
    let fp8 = WeightFormat::Fp8Block { block: [128, 128] };
    assert_eq!(q.format, fp8);
    // One FP32 scale per 128 × 128 tile.
    assert_eq!(fp8.bytes_per_weight(), 1.0 + 4.0 / 16_384.0);
    assert_eq!(m.weight_format("model.layers.3.self_attn.q_a_proj"), fp8);
    assert_eq!(m.weight_format("model.layers.3.mlp.experts.0.up_proj"), fp8);
    assert_eq!(m.weight_format("lm_head"), WeightFormat::Bf16);
    assert_eq!(
        m.weight_format("model.layers.3.mlp.gate"),
        WeightFormat::Bf16
    );
    assert_eq!(m.max_position_embeddings, 163_840);
}

#[test]
fn llama_is_a_gqa_dense_model() {
    let m = model("llama-3.1-70b");
    assert_eq!(m.family, Family::GqaDense);
    assert!(m.mla.is_none() && m.moe.is_none() && m.quant.is_none());
    assert_eq!((m.num_layers, m.hidden, m.vocab), (80, 8192, 128_256));
    assert_eq!((m.num_heads, m.num_kv_heads, m.head_dim), (64, 8, 128));
    assert_eq!(m.dense_intermediate, 28_672);
    assert!(!m.qk_norm);
    // K and V, 8 KV heads of 128 at TP 1, BF16.
    assert_eq!(
        m.kv_bytes_per_token_per_layer(1, 2.0),
        2.0 * 8.0 * 128.0 * 2.0
    );
    // At TP 16 each rank still holds one KV head.
    assert_eq!(m.kv_bytes_per_token_per_layer(16, 2.0), 2.0 * 128.0 * 2.0);
}

#[test]
fn gqa_moe_models_read_their_own_field_names() {
    let q = model("qwen3-235b-a22b");
    assert_eq!(q.family, Family::GqaMoe);
    assert!(q.qk_norm, "qwen3 normalises q and k per head");
    assert_eq!((q.num_kv_heads, q.head_dim), (4, 128));
    let moe = q.moe.as_ref().unwrap();
    assert_eq!((moe.n_routed_experts, moe.moe_intermediate), (128, 1536));
    assert_eq!(moe.scoring, Scoring::Softmax);

    let mm = model("minimax-m2.5");
    assert_eq!(mm.family, Family::GqaMoe);
    assert!(mm.qk_norm);
    let moe = mm.moe.as_ref().unwrap();
    // MiniMax names the expert width `intermediate_size` and has no shared expert.
    assert_eq!((moe.n_routed_experts, moe.moe_intermediate), (256, 1536));
    assert_eq!((moe.shared_intermediate, moe.n_shared_experts), (0, 0));
    assert_eq!(
        mm.weight_format("model.layers.2.block_sparse_moe.gate"),
        WeightFormat::Bf16
    );
}

#[test]
fn bundled_systems_read_their_topology() {
    let gpus = root("data/systems/gpus");
    let s = SystemSpec::from_file(&root("data/systems/rtx-pro-6000-8x-pcie.toml"), &gpus).unwrap();
    assert_eq!(s.gpu_count, 8);
    assert_eq!(s.gpu.sms, 188);
    assert_eq!(s.gpu.memory_gb, 96.0);
    assert_eq!(
        (s.interconnect.sockets, s.interconnect.gpus_per_socket),
        (2, 4)
    );
    assert!(s.crosses_sockets(8) && !s.crosses_sockets(4));
    assert_eq!(s.default_calibration, "rtx-pro-6000");
    for name in [
        "h200-2x-nvlink",
        "h200-8x-nvlink",
        "rtx-pro-6000-8x-pcie-switch",
    ] {
        SystemSpec::from_file(&root(&format!("data/systems/{name}.toml")), &gpus)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
