//! The spec ranges bound every product the workload forms: a model at the edge of every range,
//! at the largest batch and context, builds, prices and simulates with finite numbers and exact
//! byte counts (debug builds panic on u64 overflow, so a wrap would fail this test).

use decodesim::scenario::model::limits;
use decodesim::sim::{simulate, ScenarioRequest};
use serde_json::json;

#[test]
fn a_model_at_every_limit_simulates_without_overflow() {
    let hidden = *limits::HIDDEN.end();
    let vocab = *limits::VOCAB.end();
    let cfg = json!({
        "model_type": "deepseek_v3",
        "num_hidden_layers": 2,
        "hidden_size": hidden,
        "intermediate_size": *limits::INTERMEDIATE.end(),
        "moe_intermediate_size": *limits::INTERMEDIATE.end(),
        "num_attention_heads": *limits::HEADS.end(),
        "q_lora_rank": *limits::LORA_RANK.end(),
        "kv_lora_rank": *limits::LORA_RANK.end(),
        "qk_nope_head_dim": *limits::HEAD_DIM.end(),
        "qk_rope_head_dim": *limits::HEAD_DIM.end(),
        "v_head_dim": *limits::HEAD_DIM.end(),
        "n_routed_experts": *limits::EXPERTS.end(),
        "num_experts_per_tok": *limits::TOP_K.end(),
        "n_shared_experts": *limits::SHARED_EXPERTS.end(),
        "first_k_dense_replace": 1,
        "vocab_size": vocab,
        "max_position_embeddings": *limits::MAX_POSITIONS.end(),
    });
    let dir = std::env::temp_dir().join(format!("decodesim-bounds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("edge.json");
    std::fs::write(&p, cfg.to_string()).unwrap();
    let batch = decodesim::scenario::deployment::MAX_BATCH;
    let sim = simulate(&ScenarioRequest {
        model: p.display().to_string(),
        system: "h200-2x-nvlink".into(),
        tp: Some(2),
        batch,
        context: decodesim::scenario::deployment::MAX_CONTEXT,
        calibration: Some("h200-estimate".into()),
        ..Default::default()
    })
    .expect("a model inside every range simulates");
    assert!(sim.step_time_us().is_finite() && sim.step_time_us() > 0.0);
    for op in &sim.workload.ops {
        assert!(op.flops.is_finite() && op.bytes.is_finite(), "{}", op.name);
    }
    let ar = sim
        .workload
        .ops
        .iter()
        .find(|o| o.name.ends_with("attn_all_reduce"))
        .unwrap();
    assert_eq!(ar.message_bytes, batch as u64 * hidden * 2);
    assert!(sim.memory.total().is_finite());
    assert!(!sim.memory_fit.fits(), "such a model cannot fit one GPU");
    assert!(
        sim.warnings[0].starts_with("does not fit"),
        "{:?}",
        sim.warnings
    );
    std::fs::remove_dir_all(&dir).ok();
}
