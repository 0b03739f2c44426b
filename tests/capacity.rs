//! `decodesim capacity`: vLLM's memory arithmetic against hand computations, the request mix,
//! the planner on hand-made curves, and bad input.

use decodesim::capacity::curve::{parse_mix, CurvePoint, Demand, MixRow};
use decodesim::capacity::memory::{self, activation_peak_bytes, MemoryOptions};
use decodesim::capacity::plan::{self, Candidate, Limit, Target};
use decodesim::capacity::{capacity, CapacityRequest, DemandSpec, Prices};
use decodesim::scenario::ModelSpec;
use decodesim::sim::ScenarioRequest;
use decodesim::workload::memory::{kv_bytes_per_token_per_rank, weight_bytes_per_rank};
use std::path::{Path, PathBuf};

fn kimi() -> ModelSpec {
    ModelSpec::from_file(&PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/models/kimi-k2.5.json"
    )))
    .unwrap()
}

fn request() -> CapacityRequest {
    CapacityRequest {
        scenario: ScenarioRequest::default(),
        memory: MemoryOptions::default(),
        demand: DemandSpec::Context(4096),
        points: 8,
        max_tpot_ms: None,
        target_tokens_per_s: None,
        users: None,
        systems: Vec::new(),
        layouts: Vec::new(),
        compare_layouts: false,
        max_systems: 1,
        prices: Prices::None,
        disaggregated: false,
    }
}

#[test]
fn kimi_weights_at_tp8_are_about_76_gb_per_gpu() {
    let w = weight_bytes_per_rank(&kimi(), 8);
    // docs/sources.md §1.1: about 76 GB per GPU at TP8 (derived).
    assert!((75.5e9..76.5e9).contains(&w), "{w}");
}

#[test]
fn kimi_mla_latent_is_70272_bytes_per_token_in_bf16_on_every_rank() {
    let m = kimi();
    // (512 + 64) × 2 B × 61 layers (docs/sources.md §1.1), replicated: the same at every TP.
    for tp in [1, 2, 8] {
        assert_eq!(kv_bytes_per_token_per_rank(&m, tp, 2.0), 70_272.0);
        assert_eq!(kv_bytes_per_token_per_rank(&m, tp, 1.0), 35_136.0);
    }
}

#[test]
fn activation_peak_of_kimi_profile_run_by_hand() {
    let m = kimi();
    // T = 8192 tokens, TP = 8: residual 2·T·7168·2; MoE: router T·384·4, top-k T·8·8, w13
    // T·8·512·2, act T·8·256·2, w2 T·8·7168·2, shared T·768·2.
    let t = 8192.0;
    let residual = 2.0 * t * 7168.0 * 2.0;
    let moe = t * 384.0 * 4.0
        + t * 8.0 * 8.0
        + t * 8.0 * 512.0 * 2.0
        + t * 8.0 * 256.0 * 2.0
        + t * 8.0 * 7168.0 * 2.0
        + t * 768.0 * 2.0;
    assert_eq!(activation_peak_bytes(&m, 8, t, 0.0), residual + moe);
    assert_eq!(residual + moe, 1_300_758_528.0);
    // With 1024 sampler rows the FP32 logits and probabilities are larger.
    let sampler = 1024.0 * 163_840.0 / 8.0 * 2.0 + 2.0 * 1024.0 * 163_840.0 * 4.0;
    assert_eq!(activation_peak_bytes(&m, 8, t, 1024.0), sampler);
}

#[test]
fn memory_terms_sum_to_the_driver_total_and_kv_is_whole_blocks() {
    let (s, p) = ScenarioRequest::default().load().unwrap();
    let o = MemoryOptions::default();
    let a = memory::account(&s, &p, &o).unwrap();
    // RTX PRO 6000: 97,887 MiB as nvidia-smi reports it (docs/sources.md §2 (c)).
    assert_eq!(a.total_bytes, 97_887.0 * 1_048_576.0);
    assert!((a.requested_bytes - 0.9 * a.total_bytes).abs() < 1.0);
    let sum: f64 = a.terms.iter().map(|t| t.bytes).sum();
    assert!(
        (sum - a.total_bytes).abs() < 1.0,
        "{sum} vs {}",
        a.total_bytes
    );
    assert_eq!(a.kv_bytes_per_token, 70_272.0);
    assert_eq!(a.kv_cache_tokens, a.num_blocks * 16);
    assert_eq!(a.term("kv_cache"), a.num_blocks as f64 * 16.0 * 70_272.0);
    assert!(a.term("block_rounding") < 16.0 * 70_272.0);
    // The KV budget: requested minus everything before it.
    let fixed: f64 = memory::fixed_terms(&s, &p, &o)
        .iter()
        .map(|t| t.bytes)
        .sum();
    let blocks = ((a.requested_bytes - fixed) / (16.0 * 70_272.0)).floor() as u64;
    assert_eq!(a.num_blocks, blocks);
    // 4096 tokens per request = 256 blocks; vLLM's figure is the unrounded quotient.
    assert_eq!(a.kv_limit(4096.0), blocks / 256);
    assert!((a.vllm_concurrency(4096.0) - a.kv_cache_tokens as f64 / 4096.0).abs() < 1e-9);
    // Every term says where it comes from.
    assert!(a.terms.iter().all(|t| !t.source.is_empty()));
    // No custom all-reduce on 8 PCIe GPUs (docs/sources.md §3.3).
    assert_eq!(a.term("custom_allreduce"), 0.0);
}

#[test]
fn dcp_shards_and_fp8_halves_the_kv_cache() {
    let (s, p) = ScenarioRequest::default().load().unwrap();
    let base = memory::account(&s, &p, &MemoryOptions::default()).unwrap();
    let dcp = memory::account(
        &s,
        &p,
        &MemoryOptions {
            dcp: 8,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(dcp.num_blocks, base.num_blocks);
    assert_eq!(dcp.kv_cache_tokens, 8 * base.kv_cache_tokens);
    assert_eq!(dcp.kv_bytes_per_token, 70_272.0 / 8.0);
    let mut fp8 = s.clone();
    fp8.kv_bytes = 1.0;
    let f = memory::account(&fp8, &p, &MemoryOptions::default()).unwrap();
    assert!(f.num_blocks.abs_diff(2 * base.num_blocks) <= 1);
    // DCP must divide TP; GQA models have no replicated latent to shard.
    let bad = memory::account(
        &s,
        &p,
        &MemoryOptions {
            dcp: 3,
            ..Default::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(bad.contains("--dcp 3"), "{bad}");
}

#[test]
fn gpu_memory_utilization_outside_0_1_is_refused() {
    let (s, p) = ScenarioRequest::default().load().unwrap();
    for u in [0.0, -0.5, 1.01, f64::NAN] {
        let e = memory::account(
            &s,
            &p,
            &MemoryOptions {
                gpu_memory_utilization: u,
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--gpu-memory-utilization"), "{e}");
    }
    // 1.0 is allowed (vLLM accepts it).
    assert!(memory::account(
        &s,
        &p,
        &MemoryOptions {
            gpu_memory_utilization: 1.0,
            ..Default::default()
        }
    )
    .is_ok());
}

#[test]
fn a_model_that_does_not_fit_names_memory() {
    let mut r = request();
    r.scenario.tp = Some(4);
    let e = capacity(&r).unwrap_err().to_string();
    assert!(e.contains("does not fit") && e.contains("TP=4"), "{e}");
}

#[test]
fn context_beyond_the_model_maximum_is_refused() {
    let mut r = request();
    r.demand = DemandSpec::Context(300_000);
    let e = capacity(&r).unwrap_err().to_string();
    assert!(e.contains("max_position_embeddings = 262144"), "{e}");
    r.demand = DemandSpec::Lengths {
        input_len: 262_000,
        output_len: 1_000,
    };
    let e = capacity(&r).unwrap_err().to_string();
    assert!(e.contains("263000 tokens"), "{e}");
}

#[test]
fn request_mix_means_by_hand() {
    let d = Demand::mix(&[
        MixRow {
            input_len: 1000,
            output_len: 200,
            weight: 1.0,
        },
        MixRow {
            input_len: 3000,
            output_len: 600,
            weight: 3.0,
        },
    ]);
    // mean input 2500, mean output 500: 5 prompt tokens per output token.
    assert_eq!(d.prefill_per_output, 5.0);
    assert_eq!(d.tokens_per_request, (1200.0 + 3.0 * 3600.0) / 4.0);
    assert_eq!(d.decode_context, (1100 + 3 * 3300) / 4);
    assert_eq!(d.longest, 3600);
}

#[test]
fn request_mix_bad_rows_are_named() {
    let p = Path::new("mix.csv");
    let ok = parse_mix(
        "input_len,output_len,weight\n100,20,1\n# comment\n200,40,0.5\n",
        p,
    )
    .unwrap();
    assert_eq!(ok.len(), 2);
    for (text, needle) in [
        ("", "empty file"),
        ("in,out,w\n1,2,3\n", "expected input_len,output_len,weight"),
        ("input_len,output_len,weight\n", "no rows"),
        ("input_len,output_len,weight\n100,20\n", "found 2 fields"),
        ("input_len,output_len,weight\n100,x,1\n", "output_len 'x'"),
        ("input_len,output_len,weight\n0,20,1\n", "input_len '0'"),
        ("input_len,output_len,weight\n10,20,0\n", "weight '0'"),
        ("input_len,output_len,weight\n10,20,nan\n", "weight 'nan'"),
    ] {
        let e = parse_mix(text, p).unwrap_err().to_string();
        assert!(e.contains("mix.csv") && e.contains(needle), "{text:?}: {e}");
    }
}

#[test]
fn curve_points_add_prefill_by_hand() {
    let d = Demand::lengths(2000, 500);
    // 4 prompt tokens per output token at 10 µs each: 8 users add 320 µs to a 20 ms step.
    let p = CurvePoint::new(8, 20_000.0, 10.0, &d);
    assert_eq!(p.prefill_us, 320.0);
    assert!((p.tpot_ms - 20.32).abs() < 1e-9);
    assert!((p.tokens_per_s - 8.0 / 20_320e-6).abs() < 1e-6);
    assert!((p.tokens_per_s_per_user * 8.0 - p.tokens_per_s).abs() < 1e-9);
}

#[test]
fn knee_and_plateau_on_a_hand_made_curve() {
    let d = Demand::context(1000);
    // Step time flat to 4 users (weight-bound), then linear: tokens/s 100, 200, 400, 400·8/5..
    let pts: Vec<CurvePoint> = [
        (1, 10_000.0),
        (2, 10_000.0),
        (4, 10_000.0),
        (8, 20_000.0),
        (16, 40_000.0),
    ]
    .iter()
    .map(|&(c, us)| CurvePoint::new(c, us, 0.0, &d))
    .collect();
    let (knee, plateau, climbing) = decodesim::capacity::curve::knee_and_plateau(&pts);
    // Marginal: 100, 100, 0 per user past 4 → knee at 4; 400 tokens/s from 4 on → plateau 4.
    assert_eq!(knee, Some(4));
    assert_eq!(plateau, Some(4));
    assert!(!climbing);
    assert_eq!(
        decodesim::capacity::curve::best_under_tpot(&pts, 25.0),
        Some(8)
    );
    assert_eq!(decodesim::capacity::curve::best_under_tpot(&pts, 5.0), None);
}

fn pt(c: u32, tps: f64, tpot: f64) -> CurvePoint {
    CurvePoint {
        concurrency: c,
        step_time_us: tpot * 1e3,
        prefill_us: 0.0,
        tpot_ms: tpot,
        tokens_per_s: tps,
        tokens_per_s_per_user: tps / c as f64,
    }
}

fn cand(system: &str, tp: u32, max: u64, curve: Vec<CurvePoint>, usd: f64) -> Candidate {
    Candidate {
        system: system.into(),
        gpus_per_system: 8,
        layout: decodesim::capacity::layout::Layout::tp(tp),
        max_concurrency: max,
        memory_note: None,
        curve,
        gpu_hour_usd: Some(usd),
    }
}

fn two() -> Vec<Candidate> {
    vec![
        cand(
            "a",
            8,
            20,
            vec![pt(1, 100.0, 10.0), pt(10, 500.0, 20.0), pt(20, 800.0, 25.0)],
            2.0,
        ),
        cand(
            "b",
            4,
            10,
            vec![pt(1, 60.0, 12.0), pt(10, 250.0, 40.0)],
            3.0,
        ),
    ]
}

fn target(tps: Option<f64>, users: Option<u32>, tpot: Option<f64>, systems: u32) -> Target {
    Target {
        tokens_per_s: tps,
        users,
        max_tpot_ms: tpot,
        max_systems: systems,
    }
}

#[test]
fn planner_picks_the_cheapest_by_hand() {
    let p = plan::plan(&two(), &target(Some(1000.0), None, None, 4));
    let b = p.best.expect("a plan");
    // a: 800 tokens/s per replica → 2 replicas; 2 × 500 ≥ 1000 at 10 users each.
    assert_eq!(
        (b.system.as_str(), b.replicas, b.gpus, b.systems),
        ("a", 2, 16, 2)
    );
    assert_eq!(b.concurrency_per_replica, 10);
    assert_eq!(b.tokens_per_s, 1000.0);
    assert_eq!(b.usd_per_hour, Some(32.0));
    let usd_m = 32.0 / (1000.0 * 3600.0) * 1e6;
    assert!((b.usd_per_million_tokens.unwrap() - usd_m).abs() < 1e-9);
    // b: 4 replicas of TP=4 (16 GPUs) at 3 USD: 48 USD/h, dearer.
    let rb = p.rows.iter().find(|r| r.system == "b").unwrap();
    assert_eq!((rb.replicas, rb.gpus, rb.usd_per_hour), (4, 16, Some(48.0)));
    assert!(p.binding.is_none());
}

#[test]
fn planner_users_under_a_tpot_limit_by_hand() {
    let p = plan::plan(&two(), &target(None, Some(35), Some(22.0), 4));
    let b = p.best.unwrap();
    // a under 22 ms: at most 10 users per replica → 4 replicas of 10 (32 GPUs, 64 USD/h);
    // b under 22 ms: 1 user per replica → 35 replicas = 140 GPUs = 18 systems: too many.
    assert_eq!(
        (b.system.as_str(), b.replicas, b.concurrency_per_replica),
        ("a", 4, 10)
    );
    let rb = p.rows.iter().find(|r| r.system == "b").unwrap();
    assert_eq!(rb.limit, Some(Limit::Throughput));
}

#[test]
fn planner_names_the_binding_limit() {
    // TPOT: nobody meets 5 ms.
    let p = plan::plan(&two(), &target(Some(100.0), None, Some(5.0), 4));
    assert!(p.best.is_none());
    assert_eq!(p.binding, Some(Limit::Tpot));
    assert!(p.message.contains("TPOT binds"), "{}", p.message);
    // Throughput: 100,000 tokens/s needs more than 4 systems.
    let p = plan::plan(&two(), &target(Some(100_000.0), None, None, 4));
    assert_eq!(p.binding, Some(Limit::Throughput));
    assert!(p.message.contains("throughput binds"), "{}", p.message);
    // Memory: no candidate holds one request.
    let mut none = two();
    for c in &mut none {
        c.max_concurrency = 0;
    }
    let p = plan::plan(&none, &target(Some(10.0), None, None, 4));
    assert_eq!(p.binding, Some(Limit::Memory));
    assert!(p.message.contains("memory binds"), "{}", p.message);
}

#[test]
fn planner_without_prices_minimises_gpus() {
    let mut c = two();
    for x in &mut c {
        x.gpu_hour_usd = None;
    }
    // 200 tokens/s: a needs 1 replica (8 GPUs), b 1 replica of TP=4 (4 GPUs) at 10 users.
    let p = plan::plan(&c, &target(Some(200.0), None, None, 1));
    let b = p.best.unwrap();
    assert_eq!((b.system.as_str(), b.gpus), ("b", 4));
    assert_eq!(b.usd_per_million_tokens, None);
}

#[test]
fn capacity_end_to_end_default_scenario() {
    let mut r = request();
    r.max_tpot_ms = Some(40.0);
    let c = capacity(&r).unwrap();
    assert!(c.max_concurrency >= 1);
    assert_eq!(c.curve.points.first().unwrap().concurrency, 1);
    assert_eq!(
        c.curve.points.last().unwrap().concurrency as u64,
        c.max_concurrency
    );
    let at = c.curve.max_concurrency_at_tpot.unwrap();
    let p = c.curve.points.iter().find(|p| p.concurrency == at).unwrap();
    assert!(p.tpot_ms <= 40.0);
    if let Some(next) = c.curve.points.iter().find(|p| p.concurrency == at + 1) {
        assert!(next.tpot_ms > 40.0);
    }
    let j = decodesim::report::capacity::to_json(&c);
    for key in [
        "kv_cache_tokens",
        "max_concurrency",
        "memory",
        "curve",
        "scenario",
        "calibration",
    ] {
        assert!(j.get(key).is_some(), "{key}");
    }
    let mem = j["memory"].as_array().unwrap();
    assert!(mem
        .iter()
        .all(|m| m["component"].is_string() && m["bytes"].is_number()));
    let pt = &j["curve"][0];
    for key in [
        "concurrency",
        "step_time_us",
        "tpot_ms",
        "tokens_per_s",
        "tokens_per_s_per_user",
    ] {
        assert!(pt.get(key).is_some(), "{key}");
    }
    let text = decodesim::report::capacity::render_table(&c);
    assert!(text.contains("GPU KV cache size: "), "{text}");
    assert!(text.contains("Maximum concurrency for 4,096 tokens per request: "));
}

#[test]
fn capacity_plan_that_cannot_be_met_says_which_limit_binds() {
    let mut r = request();
    r.target_tokens_per_s = Some(1e6);
    r.prices = Prices::All(2.0);
    let c = capacity(&r).unwrap();
    let plan = c.plan.unwrap();
    assert!(plan.best.is_none());
    assert_eq!(plan.binding, Some(Limit::Throughput));
    let j = decodesim::report::capacity::to_json(&capacity(&request()).unwrap());
    assert!(j["plan"].is_null());
}

fn cli(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_bad_input_gives_clear_messages() {
    let dir = std::env::temp_dir().join(format!("decodesim-capcli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mix = dir.join("mix.csv");
    std::fs::write(&mix, "input_len,output_len,weight\n100,-3,1\n").unwrap();
    let mix = mix.to_str().unwrap();
    for (args, needle) in [
        (
            vec!["capacity", "--gpu-memory-utilization", "1.5"],
            "--gpu-memory-utilization 1.5",
        ),
        (
            vec!["capacity", "--gpu-memory-utilization", "0"],
            "above 0 and at most 1",
        ),
        (
            vec!["capacity", "--context", "300000"],
            "max_position_embeddings",
        ),
        (vec!["capacity", "--request-mix", mix], "line 2"),
        (
            vec!["capacity", "--gpu-hour-usd", "cheap"],
            "--gpu-hour-usd",
        ),
        (vec!["capacity", "--max-tpot-ms=0"], "--max-tpot-ms"),
        (vec!["capacity", "--tp", "4"], "does not fit"),
        (vec!["capacity", "--dcp", "3"], "--dcp 3"),
    ] {
        let (ok, _, err) = cli(&args);
        assert!(!ok, "{args:?} should fail");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn cli_json_and_csv() {
    let (ok, out, err) = cli(&["capacity", "--points", "4", "--format", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["kv_cache_tokens"].as_u64().unwrap() > 0);
    assert_eq!(v["scenario"]["model"], "kimi-k2.5");
    let (ok, out, err) = cli(&["capacity", "--points", "4", "--format", "csv"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("concurrency,step_time_us,prefill_us,tpot_ms,tokens_per_s"));
}

#[test]
fn layouts_compared_without_a_target_fill_one_system_by_hand() {
    // a: TP8 on an 8-GPU system, one replica; b: TP4, two replicas fill the system.
    let p = plan::plan(&two(), &target(None, None, Some(30.0), 1));
    let a = p.rows.iter().find(|r| r.system == "a").unwrap();
    let b = p.rows.iter().find(|r| r.system == "b").unwrap();
    // a's best within 30 ms: 800 tokens/s at 20 users (25 ms); b's: 60 tokens/s at 1 user (12 ms;
    // 40 ms is over the limit), times two replicas.
    assert_eq!((a.replicas, a.gpus, a.concurrency_per_replica), (1, 8, 20));
    assert!((a.tokens_per_s - 800.0).abs() < 1e-9);
    assert_eq!((b.replicas, b.gpus, b.concurrency_per_replica), (2, 8, 1));
    assert!((b.tokens_per_s - 120.0).abs() < 1e-9);
    // Priced: the lowest USD per million tokens wins; a: 2.0 × 8 / (800 × 3600) × 1e6.
    let best = p.best.expect("a best layout");
    assert_eq!(best.system, "a");
    let usd = best.usd_per_million_tokens.unwrap();
    assert!((usd - 16.0 / (800.0 * 3600.0) * 1e6).abs() < 1e-9, "{usd}");
    assert!(p.message.starts_with("best: "), "{}", p.message);
}

#[test]
fn layouts_flag_compares_pipeline_and_tensor_parallel_on_two_nodes() {
    let (ok, out, err) = cli(&[
        "capacity",
        "--system",
        "rtx-pro-6000-2node-roce",
        "--layouts",
        "tp8,tp8-pp2",
        "--points",
        "4",
        "--draws",
        "0",
        "--format",
        "json",
    ]);
    assert!(ok, "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = j["plan"]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    let tp8 = &rows[0];
    let pp2 = &rows[1];
    assert_eq!((tp8["tp"].as_u64(), tp8["pp"].as_u64()), (Some(8), Some(1)));
    assert_eq!((pp2["tp"].as_u64(), pp2["pp"].as_u64()), (Some(8), Some(2)));
    // Two TP8 replicas fill the 16 GPUs; TP8×PP2 is one replica of 16.
    assert_eq!(
        (tp8["replicas"].as_u64(), tp8["gpus"].as_u64()),
        (Some(2), Some(16))
    );
    assert_eq!(
        (pp2["replicas"].as_u64(), pp2["gpus"].as_u64()),
        (Some(1), Some(16))
    );
    // Half the weights per GPU: many more users fit in a pipeline replica than in a TP8 one.
    let fit = |r: &serde_json::Value| r["max_concurrency"].as_u64().unwrap();
    assert!(fit(pp2) > 4 * fit(tp8), "{} vs {}", fit(pp2), fit(tp8));
}

#[test]
fn bad_layouts_are_refused_by_name() {
    for (arg, needle) in [
        ("tp8,tp8", "TP8 is listed twice"),
        ("tp0", "whole number 1..4096"),
        ("xp2", "'xp2' names no size"),
        ("", "no layout given"),
    ] {
        let (ok, _, err) = cli(&["capacity", "--layouts", arg, "--draws", "0"]);
        assert!(!ok, "{arg}");
        assert!(
            err.contains("--layouts") && err.contains(needle),
            "{arg}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    // A layout larger than the system is skipped with its reason, not simulated.
    let (ok, out, err) = cli(&[
        "capacity",
        "--layouts",
        "tp8,tp8-pp2",
        "--points",
        "3",
        "--draws",
        "0",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("TP8×PP2: needs 16 GPUs, the system has 8"),
        "{out}"
    );
    let (ok, _, err) = cli(&["capacity", "--plot-pareto", "/nonexistent-dir/x.txt"]);
    assert!(
        !ok && err.contains("x.txt") && err.contains("ending in .svg or .png"),
        "{err}"
    );
}
