//! AIConfigurator tables: profiles written from the committed tables, lookups against table
//! rows, interpolation, vLLM's all-reduce dispatch, NCCL knobs, and bad tables.

use decodesim::calibrate::aiconfigurator::{from_aiconfigurator, AicRequest};
use decodesim::cost::aic::{comm_price, AicTables, MoeKey};
use decodesim::cost::CollectiveAlgo;
use decodesim::scenario::deployment::{AllreduceImpl, CommKnobs};
use decodesim::scenario::routing::Routing;
use decodesim::scenario::Proto;
use decodesim::sim::{simulate, ScenarioRequest};
use std::path::{Path, PathBuf};

const RTX: &str = "data/calibration/aiconfigurator/rtx_pro_6000_server";
const H200: &str = "data/calibration/aiconfigurator/h200_sxm";

fn tables(dir: &str) -> AicTables {
    AicTables::read(Path::new(dir)).expect("committed tables read")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-aic-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

fn moe_key(dist: &str, tp: u32) -> MoeKey {
    (dist.into(), "int4_wo".into(), 384, 7168, 2048, 8, tp, 1)
}

/// DeepSeek-V3's FP8-block balanced rows at (moe_tp, moe_ep).
fn deepseek_key(tp: u32, ep: u32) -> MoeKey {
    (
        "balanced".into(),
        "fp8_block".into(),
        256,
        7168,
        2048,
        8,
        tp,
        ep,
    )
}

/// Kimi's balanced rows with whole experts over `ep` ranks (moe_tp 1).
fn kimi_ep_key(ep: u32) -> MoeKey {
    let mut k = moe_key("balanced", 1);
    k.7 = ep;
    k
}

#[test]
fn lookups_equal_the_table_rows_at_grid_points() {
    let t = tables(RTX);
    // moe.csv: balanced,int4_wo,384,7168,2048,8,8,1,32,517.221
    let p = t.moe(&moe_key("balanced", 8), 32.0).unwrap();
    assert!(close(p.us, 517.221) && !p.extrapolated, "{p:?}");
    // gemm.csv: bfloat16,32,2048,7168,22.173, in a line whose 20 rows m = 1..=48 are flat
    // with noise (23.987 at m = 1, 22.200 at m = 7, ...): the isotonic fit pools them to their
    // mean, 22.74335 (cost::isotonic).
    let p = t.gemm("bfloat16", 32, 2048, 7168).unwrap();
    assert!(close(p.us, 22.74335) && !p.extrapolated, "{p:?}");
    // mla_generation.csv: TRITON_MLA,bfloat16,bfloat16,8,8,32,1,4096,260.600
    let p = t.mla_module("bfloat16", 8, 32.0, 4096.0).unwrap();
    assert!(close(p.us, 260.6) && !p.extrapolated, "{p:?}");
    // nccl_collectives.csv: all_reduce,nccl,unspecified,half,8,262144,524288,156.110
    let c = t.nccl_curve("all_reduce", 8).unwrap();
    let p = comm_price(c.regime(Proto::Auto).unwrap(), 524_288.0).unwrap();
    assert!(close(p.us, 156.11), "{p:?}");
    // custom_allreduce.csv: all_reduce,vllm_custom,graph,bfloat16,2,...: the 2-GPU graph rows.
    assert!(t.custom_curve("graph", 2).is_some());
}

#[test]
fn interpolates_between_rows() {
    let t = tables(RTX);
    // Tokens: log-log between 32 (517.221) and 48 (824.176).
    let p = t.moe(&moe_key("balanced", 8), 40.0).unwrap();
    let w = (40f64.ln() - 32f64.ln()) / (48f64.ln() - 32f64.ln());
    let want = (517.221f64.ln() + w * (824.176f64.ln() - 517.221f64.ln())).exp();
    assert!(close(p.us, want) && !p.extrapolated, "{} vs {want}", p.us);
    // n = 2112 (fused_qkv_a) lies between the grid's 2048 and 2560: linear in n at m = 32.
    let (a, b) = (
        t.gemm("bfloat16", 32, 2048, 7168).unwrap().us,
        t.gemm("bfloat16", 32, 2560, 7168).unwrap().us,
    );
    let p = t.gemm("bfloat16", 32, 2112, 7168).unwrap();
    assert!(close(p.us, a + (b - a) * 64.0 / 512.0), "{p:?}");
    // lm_head at TP=1 (n = 163,840) is beyond the grid's 65,536: flagged.
    assert!(t.gemm("bfloat16", 1, 163_840, 7168).unwrap().extrapolated);
    // MLA module between batch 16 and 32 lies between their rows.
    let (lo, hi) = (
        t.mla_module("bfloat16", 8, 16.0, 4096.0).unwrap().us,
        t.mla_module("bfloat16", 8, 32.0, 4096.0).unwrap().us,
    );
    let mid = t.mla_module("bfloat16", 8, 24.0, 4096.0).unwrap().us;
    assert!(lo < mid && mid < hi, "{lo} {mid} {hi}");
    // The attention share is the growth over the KV-2 row: 260.6 - 96.9 at batch 32.
    let g = t.mla_attention_growth("bfloat16", 8, 32.0, 4096.0).unwrap();
    assert!(close(g.us, 260.6 - 96.9), "{g:?}");
    // NCCL on 8 PCIe GPUs switches LL -> Simple between 512 KiB and 1 MiB.
    let c = t.nccl_curve("all_reduce", 8).unwrap();
    assert_eq!(c.switch_bytes(), Some((524_288.0, 1_048_576.0)));
}

fn write_profile(dir: &str, system: &str, name: &str) -> PathBuf {
    let out = tmp(name).join("profile.toml");
    from_aiconfigurator(&AicRequest {
        dir: dir.into(),
        system: system.into(),
        base: None,
        out: out.clone(),
        name: None,
    })
    .expect("profile written");
    out
}

#[test]
fn profile_from_the_rtx_tables_prices_the_default_scenario_from_measurements() {
    let out = write_profile(RTX, "rtx-pro-6000-8x-pcie", "rtx");
    let sim = simulate(&ScenarioRequest {
        calibration: Some(out.display().to_string()),
        ..Default::default()
    })
    .unwrap();
    let estimated: Vec<&str> = sim
        .pricing
        .families
        .iter()
        .filter(|(_, src)| src.starts_with("estimate"))
        .map(|(f, _)| f.as_str())
        .collect();
    // Norms and small elementwise kernels have no AIConfigurator table.
    assert!(
        estimated
            .iter()
            .all(|f| ["norm", "elementwise"].contains(f)),
        "{estimated:?}"
    );
    for fam in [
        "moe_gemm_int4",
        "moe_align",
        "moe_sum",
        "attention_mla_decode",
        "gemm_bf16",
    ] {
        assert!(
            sim.pricing
                .families
                .iter()
                .any(|(f, s)| f == fam && s.starts_with("measured: AIConfigurator")),
            "{fam}: {:?}",
            sim.pricing.families
        );
    }
    assert!(sim
        .profile
        .profile
        .provenance
        .contains("rtx_pro_6000_server"));
    assert!(sim.profile.profile.method.contains("0.12.0"));
    // 8 PCIe GPUs: vLLM's dispatch sends every all-reduce to NCCL.
    assert!(sim
        .pricing
        .collectives
        .iter()
        .all(|c| c.algo.base != CollectiveAlgo::VllmCustom
            && c.source.contains("nccl_collectives.csv")));
}

#[test]
fn the_shipped_rtx_profile_is_the_table_profile() {
    let sim = simulate(&ScenarioRequest::default()).unwrap();
    assert!(sim.profile.aiconfigurator.is_some());
    assert!(sim
        .pricing
        .families
        .iter()
        .any(|(f, s)| f == "moe_gemm_int4" && s.contains("moe.csv")));
}

#[test]
fn another_aiconfigurator_gpu_gets_a_profile_with_one_command() {
    let out = write_profile(H200, "h200-8x-nvlink", "h200");
    // Batch 8: 114,688 B per all-reduce, below sm_90's 256 KiB cap at 8 GPUs (batch 32's
    // 458,752 B goes past it, to torch symmetric memory, priced as NCCL).
    let req = ScenarioRequest {
        system: "h200-8x-nvlink".into(),
        calibration: Some(out.display().to_string()),
        batch: 8,
        ..Default::default()
    };
    let sim = simulate(&req).unwrap();
    assert_eq!(sim.profile.profile.gpu, "h200-sxm");
    // NVLink: vLLM runs its custom all-reduce, priced from the H200 table.
    let ar = sim
        .pricing
        .collectives
        .iter()
        .find(|c| c.op == "all_reduce")
        .unwrap();
    assert_eq!(ar.algo.base, CollectiveAlgo::VllmCustom);
    assert!(ar.source.contains("custom_allreduce.csv"), "{}", ar.source);
    let nccl = simulate(&ScenarioRequest {
        comm: CommKnobs {
            allreduce: AllreduceImpl::Nccl,
            ..Default::default()
        },
        ..req
    })
    .unwrap();
    assert!(nccl
        .pricing
        .collectives
        .iter()
        .all(|c| c.algo.base != CollectiveAlgo::VllmCustom));
}

#[test]
fn allreduce_dispatch_follows_vllm() {
    let custom = CommKnobs {
        allreduce: AllreduceImpl::Custom,
        ..Default::default()
    };
    // 8 PCIe GPUs: mainline vLLM refuses; without a patched build's law in the profile
    // ([custom_allreduce_pcie], tests/custom_allreduce_pcie.rs) the error names vLLM's rule.
    let (s, mut p) = ScenarioRequest {
        comm: custom,
        ..Default::default()
    }
    .load()
    .unwrap();
    p.custom_allreduce_pcie = None;
    let e = decodesim::sim::simulate_loaded(s, p)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not fully NVLink-connected") && e.contains("--allreduce"),
        "{e}"
    );
    // 2 PCIe GPUs: allowed (one-stage kernel), priced from the 2-GPU table rows.
    let two = simulate(&ScenarioRequest {
        model: "deepseek-v3".into(),
        tp: Some(2),
        comm: custom,
        ..Default::default()
    })
    .unwrap();
    let ar = two
        .pricing
        .collectives
        .iter()
        .find(|c| c.op == "all_reduce")
        .unwrap();
    assert_eq!(
        (ar.algo.to_string().as_str(), ar.proto.as_str()),
        ("vllm_custom", "1stage")
    );
    // vLLM's custom kernel beats NCCL at 2 GPUs (AIC: 17.6 vs 31.3 us at 512 KiB).
    let nccl = simulate(&ScenarioRequest {
        model: "deepseek-v3".into(),
        tp: Some(2),
        comm: CommKnobs {
            allreduce: AllreduceImpl::Nccl,
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    let n = nccl
        .pricing
        .collectives
        .iter()
        .find(|c| c.op == "all_reduce")
        .unwrap();
    assert!(ar.time_us < n.time_us, "{} vs {}", ar.time_us, n.time_us);
    // The reference runtime reduces with torch.distributed: custom is refused there.
    let e = simulate(&ScenarioRequest {
        runtime: decodesim::scenario::Runtime::Reference,
        comm: custom,
        ..Default::default()
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("reference runtime"), "{e}");
}

#[test]
fn the_custom_law_is_near_the_published_pcie_one_shot_figures() {
    // docs/sources.md §3.5: a one-shot P2P all-reduce on 4x RTX PRO 6000 (R6K) measures 6.1, 9.2, 17.6
    // and 28.7 us at 1, 32, 128 and 256 KB. The law fitted to AIConfigurator's 2-GPU rows
    // extrapolated to 4 ranks stays within 35% of them (it knows no per-rank latency).
    let out = write_profile(RTX, "rtx-pro-6000-8x-pcie", "oneshot");
    let p = decodesim::cost::CalibrationProfile::from_file(&out).unwrap();
    let law = &p.custom_allreduce.as_ref().unwrap().graph;
    for (kb, us) in [(1u64, 6.1), (32, 9.2), (128, 17.6), (256, 28.7)] {
        let (t, _) = decodesim::cost::allreduce::custom_law_us(law, 4, kb * 1024);
        assert!(
            (t / us - 1.0).abs() < 0.35,
            "{kb} KB: law {t:.1} vs published {us}"
        );
    }
}

#[test]
fn nccl_knobs_change_cost_only_where_they_bind() {
    let base = simulate(&ScenarioRequest {
        batch: 128,
        proto: Proto::Auto,
        ..Default::default()
    })
    .unwrap();
    let comm = |s: &decodesim::sim::Simulation| -> f64 {
        s.pricing
            .collectives
            .iter()
            .map(|c| c.time_us * c.count as f64)
            .sum()
    };
    let one_channel = simulate(&ScenarioRequest {
        batch: 128,
        proto: Proto::Auto,
        comm: CommKnobs {
            nccl_max_nchannels: Some(1),
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    assert!(comm(&one_channel) > comm(&base) * 1.2);
    let many = simulate(&ScenarioRequest {
        batch: 128,
        proto: Proto::Auto,
        comm: CommKnobs {
            nccl_max_nchannels: Some(64),
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    assert_eq!(comm(&many), comm(&base));
    assert!(many
        .warnings
        .iter()
        .any(|w| w.contains("the NCCL channel settings change nothing here")));
    // A small NCCL_BUFFSIZE adds ring loops to the Simple all-reduces of 1.8 MB.
    let small = simulate(&ScenarioRequest {
        batch: 128,
        proto: Proto::Auto,
        comm: CommKnobs {
            nccl_buffsize: Some(64 << 10),
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    assert!(comm(&small) > comm(&base));
    // Under LL it changes nothing, and says so.
    let ll = simulate(&ScenarioRequest {
        comm: CommKnobs {
            nccl_buffsize: Some(64 << 10),
            ..Default::default()
        },
        ..Default::default()
    })
    .unwrap();
    let ll_base = simulate(&ScenarioRequest::default()).unwrap();
    assert_eq!(comm(&ll), comm(&ll_base));
    assert!(ll
        .warnings
        .iter()
        .any(|w| w.contains("NCCL_BUFFSIZE changes nothing")));
}

#[test]
fn moe_follows_the_routing_distribution() {
    let dist = |r: Routing| decodesim::cost::aic::moe_table_distribution(&r);
    assert_eq!(dist(Routing::Uniform), "balanced");
    let uniform = simulate(&ScenarioRequest {
        routing: Some(Routing::Uniform),
        ..Default::default()
    })
    .unwrap();
    let skewed = simulate(&ScenarioRequest {
        routing: Some(Routing::PowerLaw { alpha: 1.5 }),
        ..Default::default()
    })
    .unwrap();
    let moe = |s: &decodesim::sim::Simulation| {
        s.mean.exclusive_us[decodesim::category::Category::Moe.index()]
    };
    // Concentrated routing touches fewer experts: less weight traffic.
    assert!(moe(&skewed) < moe(&uniform));
}

// ----- bad tables -----

fn copy_tables(name: &str) -> PathBuf {
    let d = tmp(name);
    for f in std::fs::read_dir(RTX).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, d.join(f.file_name().unwrap())).unwrap();
    }
    d
}

fn edit(path: &Path, f: impl Fn(&str) -> String) {
    let s = std::fs::read_to_string(path).unwrap();
    std::fs::write(path, f(&s)).unwrap();
}

fn read_err(dir: &Path) -> String {
    AicTables::read(dir).unwrap_err().to_string()
}

#[test]
fn a_missing_column_names_the_file_and_column() {
    let d = copy_tables("missing-col");
    edit(&d.join("moe.csv"), |s| s.replacen(",latency_us", ",lat", 1));
    let e = read_err(&d);
    assert!(e.contains("moe.csv") && e.contains("latency_us"), "{e}");
}

#[test]
fn an_unknown_dtype_names_the_row_and_column() {
    let d = copy_tables("bad-dtype");
    edit(&d.join("gemm.csv"), |s| {
        s.replacen("\nbfloat16,", "\nint3,", 1)
    });
    let e = read_err(&d);
    assert!(
        e.contains("gemm.csv") && e.contains("row 2") && e.contains("dtype") && e.contains("int3"),
        "{e}"
    );
    let d = copy_tables("bad-quant");
    edit(&d.join("moe.csv"), |s| s.replacen(",int4_wo,", ",int5,", 1));
    let e = read_err(&d);
    assert!(
        e.contains("moe.csv") && e.contains("quant") && e.contains("int4_wo"),
        "{e}"
    );
}

#[test]
fn bytes_that_are_not_elements_times_size_are_refused() {
    let d = copy_tables("bad-bytes");
    // First data row: all_gather,nccl,unspecified,half,2,256,512,... -> 256 elements, 513 bytes.
    edit(&d.join("nccl_collectives.csv"), |s| {
        s.replacen(",2,256,512,", ",2,256,513,", 1)
    });
    let e = read_err(&d);
    assert!(
        e.contains("nccl_collectives.csv") && e.contains("bytes") && e.contains("row 2"),
        "{e}"
    );
}

#[test]
fn other_bad_values_are_refused_by_row() {
    let d = copy_tables("bad-dist");
    edit(&d.join("moe.csv"), |s| {
        s.replacen("\nbalanced,", "\nzipf,", 1)
    });
    assert!(read_err(&d).contains("distribution"));
    let d = copy_tables("bad-latency");
    edit(&d.join("mla_generation.csv"), |s| {
        s.replacen(",161.700", ",-1", 1)
    });
    let e = read_err(&d);
    assert!(
        e.contains("mla_generation.csv") && e.contains("latency_us"),
        "{e}"
    );
    let d = copy_tables("empty");
    edit(&d.join("gemm.csv"), |s| {
        s.lines().next().unwrap().to_string() + "\n"
    });
    assert!(read_err(&d).contains("no data row"));
    let d = tmp("none");
    assert!(read_err(&d).contains("no AIConfigurator table"));
}

#[test]
fn calibrate_refuses_a_bad_table_without_writing() {
    let d = copy_tables("no-write");
    edit(&d.join("moe.csv"), |s| {
        s.replacen(",num_tokens,", ",tokens,", 1)
    });
    let out = tmp("no-write-out").join("profile.toml");
    let e = from_aiconfigurator(&AicRequest {
        dir: d,
        system: "rtx-pro-6000-8x-pcie".into(),
        base: None,
        out: out.clone(),
        name: None,
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("num_tokens"), "{e}");
    assert!(!out.exists());
}

#[test]
fn tables_of_another_gpu_are_refused_for_this_system() {
    let e = from_aiconfigurator(&AicRequest {
        dir: H200.into(),
        system: "rtx-pro-6000-8x-pcie".into(),
        base: None,
        out: tmp("wrong-gpu").join("profile.toml"),
        name: None,
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("NVIDIA H200") && e.contains("--system"), "{e}");
}

// ----- expert parallelism -----

/// One MoE layer's routed-expert call as `req`'s profile prices it (the module's ops summed),
/// the row of `key` (EP size `ep`, `local` experts per rank) it should read: the rank's routed
/// rows over top-k, or its touched experts over top-k where it touches fewer than it holds;
/// and the pricing's warnings.
/// The summed price of the ops `module` picks (one routed-expert call), and its experts'
/// first GEMM.
fn call_of<'a>(
    w: &'a decodesim::workload::Workload,
    base_us: &[f64],
    module: impl Fn(&decodesim::workload::Op) -> bool,
) -> (f64, &'a decodesim::workload::Op) {
    let call = w
        .ops
        .iter()
        .zip(base_us)
        .filter(|(o, _)| module(o))
        .map(|(_, us)| us)
        .sum();
    let gemm = w
        .ops
        .iter()
        .filter(|o| module(o))
        .find(|o| o.name.ends_with("experts_w13"))
        .expect("the call's first expert GEMM");
    (call, gemm)
}

/// A scenario's step, its workload and prices, and its first MoE layer.
fn priced_step(
    req: &ScenarioRequest,
) -> (
    decodesim::scenario::Scenario,
    decodesim::workload::Workload,
    decodesim::cost::Pricing,
    i32,
) {
    let (s, p) = req.load().expect("loads");
    let w = decodesim::workload::build(&s);
    let priced = decodesim::cost::price(&w, &s, &p).expect("priced");
    let layer = w
        .ops
        .iter()
        .find(|o| decodesim::cost::aic::is_moe_module_op(o))
        .expect("a MoE layer")
        .layer;
    (s, w, priced, layer)
}

fn ep_call(req: &ScenarioRequest, dir: &str, key: MoeKey, local: f64) -> (f64, f64, Vec<String>) {
    use decodesim::cost::aic::is_moe_module_op;
    let (_, w, priced, layer) = priced_step(req);
    let (call, gemm) = call_of(&w, &priced.base_us, |o| {
        o.layer == layer && is_moe_module_op(o)
    });
    let (rows, touched) = (gemm.shape.m as f64, gemm.shape.batch as f64);
    let topk = key.5 as f64;
    let x = if touched < local {
        (touched / topk).max(1.0)
    } else {
        (rows / topk).round().max(1.0)
    };
    let row = tables(dir).moe(&key, x).expect("a row").us;
    (call, row, priced.warnings.clone())
}

fn kimi_ep(tp: u32, dp: u32, batch: u32) -> ScenarioRequest {
    let mut req = ScenarioRequest {
        tp: Some(tp),
        batch,
        context: 1000,
        routing: Some(Routing::Uniform),
        ..Default::default()
    };
    req.ep = Some(8);
    if dp > 1 {
        req.dp = Some(dp);
        req.comm.ep_comm = decodesim::scenario::deployment::EpComm::AllToAll;
    }
    req
}

#[test]
fn expert_parallel_ranks_read_the_table_at_their_own_rows() {
    // AIConfigurator's num_tokens gives every rank num_tokens × top-k routed rows: a rank of
    // EP 8 at batch 512 runs about 512 × 8 / 8 = 512 rows, the row at 64 tokens, not at 512.
    let key = kimi_ep_key(8);
    let (call, row, warnings) = ep_call(&kimi_ep(8, 1, 512), RTX, key.clone(), 48.0);
    assert!(
        close(call, row),
        "TP8 x EP8: the call {call} us, the row {row} us"
    );
    assert!(
        !warnings.iter().any(|w| w.starts_with("moe:")),
        "{warnings:?}"
    );
    let at_batch = tables(RTX).moe(&key, 512.0).unwrap().us;
    assert!(at_batch > 1.15 * call, "{at_batch} vs {call}");
    // Data-parallel attention: the experts span the DP x TP ranks (moe_tp 1, not 1/8), and
    // each rank's rows are its share of every DP rank's tokens.
    let (call, row, warnings) = ep_call(&kimi_ep(1, 8, 512), RTX, key, 48.0);
    assert!(
        close(call, row),
        "DP8 x EP8: the call {call} us, the row {row} us"
    );
    assert!(
        !warnings.iter().any(|w| w.starts_with("moe:")),
        "{warnings:?}"
    );
}

#[test]
fn an_unmeasured_ep_size_reads_the_rows_of_as_many_experts_per_rank() {
    let t = tables(H200);
    let key = |ep: u32| -> MoeKey {
        (
            "balanced".into(),
            "fp8_block".into(),
            256,
            7168,
            2048,
            8,
            1,
            ep,
        )
    };
    assert!(t.moe_rows(&key(144)).is_none());
    // A size between two measured ones is interpolated log-log in the EP size.
    let (lo, hi) = (
        t.moe(&key(128), 64.0).unwrap().us,
        t.moe(&key(256), 64.0).unwrap().us,
    );
    let mid = t.moe(&key(181), 64.0).unwrap().us;
    assert!(mid < lo.max(hi) && mid > lo.min(hi), "{lo} {mid} {hi}");
    let geo = (lo.ln() + (hi / lo).ln() * (181f64 / 128.0).ln() / 2f64.ln()).exp();
    assert!(close(mid, geo), "{mid} vs {geo}");
    assert!(
        t.moe(&key(512), 64.0).is_none(),
        "beyond the largest measured EP: none"
    );
    // DeepSeek-V3 over 144 ranks with 32 redundant experts holds two per rank, as EP 128
    // does: a profile of the H200 tables prices it from those rows, and says so.
    let out = write_profile(H200, "h200-hgx-18node-ib", "ep144");
    let mut req = ScenarioRequest {
        model: "deepseek-v3".into(),
        system: "h200-hgx-18node-ib".into(),
        tp: Some(1),
        batch: 144 * 8,
        context: 1000,
        routing: Some(Routing::Uniform),
        calibration: Some(out.display().to_string()),
        ..Default::default()
    };
    req.dp = Some(144);
    req.redundant_experts = Some(32);
    req.comm.ep_comm = decodesim::scenario::deployment::EpComm::RdmaLl;
    let (call, row, warnings) = ep_call(&req, H200, key(128), 2.0);
    assert!(
        close(call, row),
        "EP144: the call {call} us, the EP 128 row {row} us"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("expert parallelism 144") && w.contains("read at EP 128")),
        "{warnings:?}"
    );
}

#[test]
fn each_pass_of_a_step_is_its_own_routed_expert_call() {
    use decodesim::cost::aic::is_moe_module_op;
    // Two-batch overlap repeats every layer number in its two micro-batches: each is one call
    // of the table at its own rows, not one call shared by both.
    let mut req = kimi_ep(1, 8, 512);
    req.tbo = true;
    req.comm.ep_comm = decodesim::scenario::deployment::EpComm::RdmaLl;
    let (s, w, priced, layer) = priced_step(&req);
    let t = tables(RTX);
    for mb in ["mb0.", "mb1."] {
        let module = |o: &decodesim::workload::Op| {
            o.layer == layer && is_moe_module_op(o) && o.name.starts_with(mb)
        };
        let (call, gemm) = call_of(&w, &priced.base_us, module);
        let key = kimi_ep_key(8);
        let (rows, touched) = (gemm.shape.m as f64, gemm.shape.batch as f64);
        let x = if touched < 48.0 {
            (touched / 8.0).max(1.0)
        } else {
            (rows / 8.0).round()
        };
        // No table price beats reading the call's bytes from DRAM (`cost::aic`).
        let bytes: f64 = w.ops.iter().filter(|o| module(o)).map(|o| o.bytes).sum();
        let floor = bytes / (s.system.gpu.memory_bandwidth_gbps * 1e3);
        let row = t.moe(&key, x).unwrap().us.max(floor);
        assert!(
            close(call, row),
            "{mb}: the call {call} us, its row {row} us"
        );
    }
}

#[test]
fn the_h200_profile_prices_the_measured_models_routed_experts_from_the_tables() {
    // DeepSeek-V3 at TP 8, batch 1: one FP8-block fused-MoE call of 1 token per layer, the
    // table's row (moe.csv: balanced,fp8_block,256,7168,2048,8,8,1,1,55.243), not the law.
    let req = ScenarioRequest {
        model: "deepseek-v3".into(),
        system: "h200-8x-nvlink".into(),
        tp: Some(8),
        batch: 1,
        context: 1000,
        routing: Some(Routing::Uniform),
        ..Default::default()
    };
    let key = deepseek_key(8, 1);
    let (call, row, _) = ep_call(&req, H200, key, 256.0);
    assert!(close(row, 55.243), "{row}");
    assert!(close(call, row), "the call {call} us, its row {row} us");
    // Only the MoE table: the GEMMs, attention and collectives keep the profile's laws.
    let (_, p) = req.load().expect("loads");
    let t = p
        .aic
        .as_ref()
        .expect("the h200 profile reads its MoE table");
    assert!(t.has("moe.csv"));
    for other in ["gemm.csv", "mla_generation.csv", "nccl_collectives.csv"] {
        assert!(!t.has(other), "{other} is not the h200 profile's");
    }
}

#[test]
fn a_bad_only_list_names_the_profile_field_and_the_file() {
    // The profile beside copies of the files it names; its tables where they are.
    let d = tmp("only");
    for f in std::fs::read_dir("data/calibration/h200").unwrap() {
        let f = f.unwrap().path();
        if f.is_file() {
            std::fs::copy(&f, d.join(f.file_name().unwrap())).unwrap();
        }
    }
    let tables = std::fs::canonicalize(H200).unwrap();
    let profile = std::fs::read_to_string("data/calibration/h200/profile.toml").unwrap();
    let profile = profile.replace(
        "tables = \"../aiconfigurator/h200_sxm\"",
        &format!("tables = {:?}", tables.to_str().unwrap()),
    );
    for (only, says) in [
        ("[\"moe.json\"]", "'moe.json' is none of them"),
        (
            "[\"custom_allreduce.csv\", \"nccl_multinode.csv\"]",
            "is not there",
        ),
        ("[]", "at least one table name"),
    ] {
        let path = d.join("profile.toml");
        let text = profile.replace(
            "only = [\"moe.csv\", \"custom_allreduce.csv\"]",
            &format!("only = {only}"),
        );
        std::fs::write(&path, text).unwrap();
        let e = decodesim::cost::CalibrationProfile::from_file(&path)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("profile.toml") && e.contains("aiconfigurator.only") && e.contains(says),
            "{e}"
        );
    }
}

#[test]
fn a_call_on_fewer_experts_than_the_first_row_is_that_row_less_their_reads() {
    // DeepSeek-V3 at DP 32, EP 32, batch 1: 8 routed rows (and the padding rows) over 32 ranks
    // of 8 experts each, under one expert with tokens on the mean rank, priced at one. The
    // table's first row (1 token: 8 rows on the rank's 8 experts) is 90.981 µs; a call on one
    // expert is that less 7 experts' weight reads at H200's 4.8 TB/s.
    let mut req = ScenarioRequest {
        model: "deepseek-v3".into(),
        system: "h200-hgx-4node-ib".into(),
        tp: Some(1),
        batch: 1,
        context: 2048,
        routing: Some(Routing::Uniform),
        ..Default::default()
    };
    req.dp = Some(32);
    req.comm.ep_comm = decodesim::scenario::deployment::EpComm::RdmaLl;
    let key = deepseek_key(1, 32);
    let (call, row, warnings) = ep_call(&req, H200, key, 8.0);
    assert!(close(row, 90.981), "{row}");
    let (s, _) = req.load().expect("loads");
    assert_eq!(s.system.gpu.memory_bandwidth_gbps, 4800.0);
    // gate, up and down: 3 × 7168 × 2048 FP8 weights with a 4-byte scale per 128 × 128 tile.
    let expert_us = 3.0 * 7168.0 * 2048.0 * (1.0 + 4.0 / 16384.0) / 4.8e6;
    let want = 90.981 - 7.0 * expert_us;
    assert!(close(call, want), "the call {call} us, want {want} us");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("fewer experts per rank") && w.contains("on 8 experts")),
        "{warnings:?}"
    );
    // Batch 1 no longer costs more than batch 32 by a third (20 ms against 15 when a
    // one-expert call was priced as the eight-expert row): within the ranks' jitter of it.
    let step = |b: u32| {
        let mut r = req.clone();
        r.batch = b;
        simulate(&r).expect("simulates").step_time_us()
    };
    let (b1, b32) = (step(1), step(32));
    assert!(b1 < b32 * 1.05, "batch 1: {b1} us, batch 32: {b32} us");
}
