//! All-reduce on NVLink boxes: vLLM's custom all-reduce priced from AIConfigurator's H200 rows
//! under `--allreduce auto` (below the 256 KiB cap of sm_90 at 8 GPUs), the all-reduce +
//! RMSNorm fusion (`--fuse-allreduce-rms`), and no silent transfer of one GPU's prices to another
//! (a profile of another GPU refused; the bundled B200 profile transferred by physics, and said).

use decodesim::cost::{CollectiveAlgo, CollectiveChoice};
use decodesim::scenario::deployment::CommKnobs;
use decodesim::sim::{simulate, ScenarioRequest, Simulation};
use decodesim::workload::CostFamily;
use std::process::Command;

fn h200(batch: u32, fuse: bool) -> ScenarioRequest {
    ScenarioRequest {
        system: "h200-8x-nvlink".into(),
        batch,
        comm: CommKnobs {
            fuse_allreduce_rms: fuse,
            ..Default::default()
        },
        ..ScenarioRequest::default()
    }
}

fn all_reduces(sim: &Simulation) -> Vec<&CollectiveChoice> {
    sim.pricing
        .collectives
        .iter()
        .filter(|c| c.op == "all_reduce")
        .collect()
}

/// Log-log interpolation between two rows, as the tables are read (cost::table::interp).
fn log_lerp(x0: f64, y0: f64, x1: f64, y1: f64, x: f64) -> f64 {
    let t = (x / x0).ln() / (x1 / x0).ln();
    (y0.ln() + t * (y1 / y0).ln()).exp()
}

#[test]
fn h200_runs_vllms_custom_all_reduce_at_the_tables_price() {
    let sim = simulate(&h200(8, false)).unwrap();
    let ars = all_reduces(&sim);
    assert_eq!(ars.len(), 1, "{ars:?}");
    let c = ars[0];
    // Batch 8: 8 x 7168 BF16 = 114,688 B, between the 8-GPU graph rows of
    // data/calibration/aiconfigurator/h200_sxm/custom_allreduce.csv at 65,536 B (6.561 us) and
    // 131,072 B (7.943 us): 7.6558 us.
    let want = log_lerp(65_536.0, 6.561, 131_072.0, 7.943, 114_688.0);
    assert!((want - 7.6558).abs() < 1e-3, "{want}");
    assert_eq!((c.bytes, c.count), (114_688, 123));
    assert_eq!(
        (c.algo.to_string().as_str(), c.proto.as_str()),
        ("vllm_custom", "1stage")
    );
    assert!((c.time_us - want).abs() < 1e-9, "{} vs {want}", c.time_us);
    assert!(c.source.contains("custom_allreduce.csv"), "{}", c.source);
    assert!(
        !sim.warnings.iter().any(|w| w.contains("cannot price it")),
        "{:?}",
        sim.warnings
    );
}

#[test]
fn above_the_256_kib_cap_the_all_reduce_is_priced_as_nccl_and_said() {
    // Batch 64: 917,504 B, not below sm_90's 256 KiB cap at 8 GPUs (data/vllm/allreduce.toml).
    let sim = simulate(&h200(64, false)).unwrap();
    let c = all_reduces(&sim)[0];
    assert_eq!(c.bytes, 917_504);
    assert_ne!(c.algo.base, CollectiveAlgo::VllmCustom);
    assert!(
        sim.warnings
            .iter()
            .any(|w| w.contains("torch symmetric memory") && w.contains("priced as NCCL")),
        "{:?}",
        sim.warnings
    );
    // Batch 16 (229,376 B) is still below it.
    let sim = simulate(&h200(16, false)).unwrap();
    assert_eq!(all_reduces(&sim)[0].algo.base, CollectiveAlgo::VllmCustom);
}

#[test]
fn fusion_takes_the_norm_into_the_all_reduce() {
    let plain = simulate(&h200(8, false)).unwrap();
    let fused = simulate(&h200(8, true)).unwrap();
    let norms = |s: &Simulation| {
        s.workload
            .ops
            .iter()
            .filter(|o| o.family == CostFamily::Norm)
            .count()
    };
    // Every one of the 123 all-reduces is followed by a norm (the layers' two, the embedding's
    // and the last layer's into the final norm); the q/kv norms stay.
    assert_eq!(norms(&plain) - norms(&fused), 123);
    let ops = &fused.workload.ops;
    for (i, op) in ops.iter().enumerate() {
        if op.family == CostFamily::AllReduce {
            assert!(op.fused_norm.is_some(), "{}", op.name);
            assert!(ops.get(i + 1).is_none_or(|n| n.family != CostFamily::Norm));
        }
    }
    // The fused price: the all-reduce's 7.6558 us plus the norm's bytes at 4800 GB/s
    // (dram_efficiency 1.0 in the H200 profile). A post-attention norm adds the residual:
    // 4 x 8 x 7168 x 2 + 7168 x 2 = 473,088 B -> 0.098560 us.
    let ar = log_lerp(65_536.0, 6.561, 131_072.0, 7.943, 114_688.0);
    let i = ops
        .iter()
        .position(|o| o.name == "L3.attn_all_reduce_rms")
        .expect("fused op");
    assert_eq!(ops[i].bytes, 473_088.0);
    let want = ar + 473_088.0 / 4.8e6;
    assert!(
        (fused.pricing.base_us[i] - want).abs() < 1e-9,
        "{} vs {want}",
        fused.pricing.base_us[i]
    );
    // The embedding's all-reduce takes layer 0's plain RMSNorm: 2 x 8 x 7168 x 2 + 14,336 B.
    let e = ops
        .iter()
        .position(|o| o.name == "embedding_all_reduce_rms")
        .expect("fused embedding all-reduce");
    let want = ar + 243_712.0 / 4.8e6;
    assert!((fused.pricing.base_us[e] - want).abs() < 1e-9);
    assert!(fused.timeline.step_time_us() < plain.timeline.step_time_us());
}

fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(args)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn fusion_is_refused_where_vllm_cannot_fuse() {
    let (code, err) = run(&["simulate", "--fuse-allreduce-rms", "on", "--layers", "2"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--fuse-allreduce-rms on")
            && err.contains("compute capability 12.0")
            && err.contains("cannot fuse"),
        "{err}"
    );
    let (code, err) = run(&[
        "simulate",
        "--system",
        "h200-8x-nvlink",
        "--tp",
        "1",
        "--fuse-allreduce-rms",
        "on",
        "--layers",
        "2",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no tensor-parallel all-reduce"), "{err}");
    let (code, err) = run(&["simulate", "--fuse-allreduce-rms", "maybe"]);
    assert_ne!(code, 0);
    assert!(err.contains("on or off"), "{err}");
}

#[test]
fn another_gpus_profile_is_refused_by_name() {
    let (code, err) = run(&[
        "simulate",
        "--system",
        "b200-8x-nvlink",
        "--calibration",
        "h200",
        "--layers",
        "2",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("'h200-sxm'") && err.contains("'b200'") && err.contains("--transfer-profile"),
        "{err}"
    );
}

#[test]
fn b200_is_priced_by_the_transferred_h200_profile_and_says_so() {
    let b = ScenarioRequest {
        system: "b200-8x-nvlink".into(),
        ..h200(8, false)
    };
    let (b200, h) = (simulate(&b).unwrap(), simulate(&h200(8, false)).unwrap());
    assert_eq!(b200.profile.profile.name, "b200-transfer");
    assert!(
        b200.warnings
            .iter()
            .any(|w| w.contains("is transferred") && w.contains("h200-sxm") && w.contains("b200")),
        "{:?}",
        b200.warnings
    );
    let (tb, th) = (b200.timeline.step_time_us(), h.timeline.step_time_us());
    assert!(tb < th, "{tb} vs {th}");
    // The routed experts at batch 8 read their weights from DRAM: faster by nearly the bandwidth
    // ratio 7.7 / 4.8 = 1.604 (each kernel's fixed cost is kept, so a little less).
    let moe = |s: &Simulation| s.mean.time(decodesim::category::Category::Moe);
    let r = moe(&h) / moe(&b200);
    assert!(r > 1.35 && r <= 7.7 / 4.8 + 1e-9, "{r}");
}
