//! CUDA-graph batch padding (data/vllm/cudagraph.toml): under full graphs a pass runs at the
//! next captured size; padded rows are dummy tokens (GEMMs, collectives, router/MoE rows use
//! the padded count; attention, the KV write and the logits use the real tokens).

use decodesim::scenario::Scenario;
use decodesim::sim::ScenarioRequest;
use decodesim::whatif::spec_decode;
use decodesim::workload::{self, CostFamily, Workload};

fn scenario(batch: u32, graphs: bool) -> Scenario {
    let (mut s, _) = ScenarioRequest {
        layers: Some(4),
        cuda_graphs: graphs,
        ..ScenarioRequest::default()
    }
    .load()
    .unwrap();
    s.batch = batch;
    s
}

/// M of every plain BF16 GEMM inside the model (lm_head runs on the real rows, outside it).
fn gemm_ms(w: &Workload) -> Vec<u64> {
    w.ops
        .iter()
        .filter(|o| o.family == CostFamily::GemmBf16 && o.shape.batch == 1)
        .filter(|o| !o.name.ends_with("lm_head"))
        .map(|o| o.shape.m)
        .collect()
}

fn allreduce_bytes(w: &Workload) -> Vec<u64> {
    w.ops
        .iter()
        .filter(|o| o.family == CostFamily::AllReduce)
        .map(|o| o.message_bytes)
        .collect()
}

fn op<'a>(w: &'a Workload, suffix: &str) -> &'a decodesim::workload::Op {
    w.ops.iter().find(|o| o.name.ends_with(suffix)).unwrap()
}

#[test]
fn batch_33_pads_to_40_with_graphs_only() {
    for (graphs, rows) in [(true, 40u64), (false, 33)] {
        let s = scenario(33, graphs);
        let w = workload::build(&s);
        let ms = gemm_ms(&w);
        assert!(!ms.is_empty());
        assert!(ms.iter().all(|&m| m == rows), "graphs {graphs}: {ms:?}");
        let hidden = s.model.hidden as u64;
        let ars = allreduce_bytes(&w);
        assert!(
            ars.iter().all(|&b| b == rows * hidden * 2),
            "graphs {graphs}: {ars:?}"
        );
        // Routed rows: padded tokens × top-k.
        let top_k = s.model.moe.as_ref().unwrap().top_k as u64;
        assert_eq!(op(&w, "experts_w13").shape.m, rows * top_k);
        // Attention, the KV write and the logits cover the 33 real tokens.
        assert_eq!(op(&w, "mla_decode").shape.m, 33);
        assert_eq!(op(&w, "kv_cache_write").shape.m, 33);
        assert_eq!(op(&w, "lm_head").shape.m, 33);
        assert_eq!(
            s.padding(1, decodesim::scenario::cudagraph::PadRule::Decode)
                .padded,
            rows
        );
    }
    // The padded rows share one top-k set: at most top_k more experts in the first MoE layer
    // (same draws up to the dummy token there), and every row is routed.
    let (on, off) = (
        workload::build(&scenario(33, true)),
        workload::build(&scenario(33, false)),
    );
    let s = scenario(33, true);
    let l = (0..s.model.num_layers)
        .find(|&l| s.model.is_layer_moe(l))
        .unwrap();
    let top_k = s.model.moe.as_ref().unwrap().top_k as u32;
    let extra = on.experts_touched[l] - off.experts_touched[l];
    assert!(extra <= top_k, "{extra}");
    let rows: u32 = on.routing.expert_tokens[l].iter().sum();
    assert_eq!(rows, 40 * top_k);
}

#[test]
fn capture_sizes_are_unchanged() {
    for b in [1u32, 2, 4, 8, 16, 32, 64, 256, 512] {
        let (on, off) = (
            workload::build(&scenario(b, true)),
            workload::build(&scenario(b, false)),
        );
        assert_eq!(on.ops, off.ops, "batch {b}");
    }
}

#[test]
fn above_the_largest_capture_size_is_not_padded() {
    let w = workload::build(&scenario(600, true));
    assert!(gemm_ms(&w).iter().all(|&m| m == 600));
    let sim = decodesim::sim::simulate_loaded(
        scenario(600, true),
        ScenarioRequest::default().load().unwrap().1,
    )
    .unwrap();
    assert!(
        sim.warnings
            .iter()
            .any(|w| w.contains("above the largest captured size 512")),
        "{:?}",
        sim.warnings
    );
}

/// The verify pass pads batch × (k+1) to the capture sizes rounded up to multiples of k+1
/// (`verify_rule = "round_up"`): 9 tokens (batch 3, k 2) are a captured size (8 → 9), 15
/// (batch 5, k 2) pad to 18 (16 → 18), 12 (batch 3, k 3) pad to 16, 66 (batch 33, k 1) to 72.
#[test]
fn verify_pass_pads_to_multiples_of_k_plus_one() {
    for (batch, k, rows) in [(3u32, 2u32, 9u64), (5, 2, 18), (3, 3, 16), (33, 1, 72)] {
        let s = scenario(batch, true);
        let w = spec_decode::verify_workload(&s, k);
        assert!(
            gemm_ms(&w).iter().all(|&m| m == rows),
            "batch {batch} k {k}: {:?}",
            gemm_ms(&w)
        );
        assert_eq!(rows % (k as u64 + 1), 0);
        let real = batch as u64 * (k as u64 + 1);
        assert_eq!(op(&w, "rejection_greedy_sample").shape.m, real);
        let off = spec_decode::verify_workload(&scenario(batch, false), k);
        assert!(gemm_ms(&off).iter().all(|&m| m == real));
    }
}

#[test]
fn simulate_reports_the_padding() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_decodesim"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let table = run(&["simulate", "--layers", "4", "--batch", "33"]);
    assert!(table.contains("CUDA graph pads 33 tokens to 40"), "{table}");
    let table = run(&["simulate", "--layers", "4", "--batch", "32"]);
    assert!(!table.contains("CUDA graph pads"));
    let json = run(&[
        "simulate", "--layers", "4", "--batch", "33", "--format", "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["scenario"]["padded_tokens"], 40);
}
