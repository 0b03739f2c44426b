//! Answers that are right for every layout: one memory model for `simulate`, `capacity` and
//! `sweep` under DCP, PP and DP; the CUDA-graph warning at the tokens one rank runs; the limit
//! that binds `capacity`, and the batch cap per data-parallel rank; knobs that do not reach a
//! collective across nodes say so; DeepEP tables in the wrong unit and `vllm bench serve`
//! results of another server are refused by file and field.

use decodesim::capacity::memory::{account, MemoryOptions};
use decodesim::scenario::deployment::EpComm;
use decodesim::sim::{simulate, simulate_loaded, MemoryFit, ScenarioRequest};
use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-lm-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn decodesim(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// DCP 8 on an H200 node at 128k context, PP 2 over two RTX boxes, DP 16 over them.
fn layouts() -> Vec<(&'static str, ScenarioRequest)> {
    let mut dcp = ScenarioRequest {
        system: "h200-8x-nvlink".into(),
        context: 131_072,
        ..Default::default()
    };
    dcp.dcp = Some(8);
    let mut pp = ScenarioRequest {
        system: "rtx-pro-6000-2node-roce".into(),
        tp: Some(8),
        ..Default::default()
    };
    pp.pp = Some(2);
    let mut dp = ScenarioRequest {
        system: "rtx-pro-6000-2node-roce".into(),
        tp: Some(1),
        ..Default::default()
    };
    dp.dp = Some(16);
    dp.comm.ep_comm = EpComm::AllToAll;
    vec![("dcp8", dcp), ("pp2", pp), ("dp16", dp)]
}

#[test]
fn simulate_and_capacity_hold_the_same_memory_for_dcp_pp_and_dp() {
    for (name, req) in layouts() {
        let (s, p) = req.load().unwrap();
        let o = MemoryOptions::of_scenario(&s);
        let a = account(&s, &p, &o).unwrap();
        // capacity's limit over every DP rank at the scenario's context.
        let limit = a.kv_limit(s.context as f64);
        let dp = s.layout.dp_size() as u64;
        assert!(limit >= dp, "{name}: {limit}");
        let at = |batch: u64| {
            let mut s = s.clone();
            s.batch = batch as u32;
            MemoryFit::of(&s, &p).1
        };
        assert!(
            at(limit).fits(),
            "{name}: capacity holds {limit}, simulate must fit it"
        );
        // One more sequence on the largest DP rank does not fit.
        assert!(
            !at(limit + dp).fits(),
            "{name}: {} must not fit",
            limit + dp
        );
        assert_eq!(at(limit).blocks_available, a.num_blocks, "{name}");
    }
}

#[test]
fn simulate_dcp8_shards_the_kv_cache_as_capacity_does() {
    let (_, mut req) = layouts().remove(0);
    req.batch = 48;
    // capacity --dcp 8 at 128k context holds 48 sequences on an H200 node.
    let (s, p) = req.load().unwrap();
    let a = account(&s, &p, &MemoryOptions::of_scenario(&s)).unwrap();
    assert_eq!(a.kv_limit(131_072.0), 48);
    let quick = req.clone();
    let sim = simulate(&quick).unwrap();
    assert!(sim.memory_fit.fits(), "{:?}", sim.warnings.first());
    let sharded = sim.memory.kv_cache_bytes;
    // Without DCP the same batch needs 8 times the KV cache and does not fit.
    let mut plain = quick.clone();
    plain.dcp = None;
    let sim1 = simulate(&plain).unwrap();
    assert!(!sim1.memory_fit.fits());
    assert!((sim1.memory.kv_cache_bytes / sharded - 8.0).abs() < 1e-9);
    assert!(
        sim1.warnings[0].starts_with("does not fit"),
        "{:?}",
        sim1.warnings
    );
}

#[test]
fn sweep_fits_column_agrees_with_capacity_under_pp() {
    let (_, req) = layouts().remove(1);
    let (s, p) = req.load().unwrap();
    let limit = account(&s, &p, &MemoryOptions::of_scenario(&s))
        .unwrap()
        .kv_limit(s.context as f64);
    let batches = format!("{limit},{}", limit + 1);
    let (code, out, err) = decodesim(&[
        "sweep",
        "--system",
        "rtx-pro-6000-2node-roce",
        "--tp",
        "8",
        "--pp",
        "2",
        "--batch",
        &batches,
        "--context",
        "4096",
        "--format",
        "csv",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let fits: Vec<&str> = out
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(13).unwrap_or(""))
        .collect();
    assert_eq!(fits, ["true", "false"], "{out}");
}

#[test]
fn the_cuda_graph_warning_counts_one_dp_rank_s_tokens() {
    let wide = |batch: u32| {
        let mut r = ScenarioRequest {
            model: "deepseek-v3".into(),
            system: "h200-hgx-2node-ib".into(),
            tp: Some(1),
            batch,
            context: 2048,
            layers: Some(4),
            ..Default::default()
        };
        r.dp = Some(16);
        r.comm.ep_comm = EpComm::RdmaLl;
        r
    };
    // 1,024 sequences over 16 DP ranks: 64 each, inside the captured sizes.
    let sim = simulate(&wide(1024)).unwrap();
    assert!(
        !sim.warnings
            .iter()
            .any(|w| w.contains("largest captured size")),
        "{:?}",
        sim.warnings
    );
    // 9,000 over 16: 563 on the largest rank, above the largest captured size 512.
    let sim = simulate(&wide(9000)).unwrap();
    assert!(
        sim.warnings
            .iter()
            .any(|w| w.contains("563 tokens are above the largest captured size 512")),
        "{:?}",
        sim.warnings
    );
}

#[test]
fn the_batch_limit_is_per_data_parallel_rank() {
    let mut r = ScenarioRequest {
        model: "deepseek-v3".into(),
        system: "h200-hgx-18node-ib".into(),
        tp: Some(1),
        batch: 20_000,
        context: 2048,
        ..Default::default()
    };
    r.dp = Some(72);
    r.comm.ep_comm = EpComm::RdmaLl;
    r.redundant_experts = Some(32);
    let (s, p) = r.load().expect("a DP72 pool takes 20,000 sequences");
    // Its KV cache holds far more than one engine's 16,384.
    let a = account(&s, &p, &MemoryOptions::of_scenario(&s)).unwrap();
    assert!(
        a.max_concurrency(2048.0) > 20_000,
        "{}",
        a.max_concurrency(2048.0)
    );
    // One engine does not.
    let one = ScenarioRequest {
        batch: 20_000,
        ..Default::default()
    };
    let e = one.load().unwrap_err().to_string();
    assert!(
        e.contains("--batch 20000") && e.contains("1 to 16384"),
        "{e}"
    );
}

#[test]
fn capacity_names_max_num_seqs_per_dp_rank_when_it_binds() {
    let (code, out, err) = decodesim(&[
        "capacity",
        "--system",
        "rtx-pro-6000-2node-roce",
        "--dp",
        "16",
        "--tp",
        "1",
        "--ep-comm",
        "all-to-all",
        "--layers",
        "4",
        "--max-num-seqs",
        "2",
        "--points",
        "3",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(
            "max concurrency: 32 over 16 data-parallel ranks, each with its own KV cache: 2 each (max_num_seqs 2 binds before the KV cache (per data-parallel rank))"
        ),
        "{out}"
    );
    let (code, out, err) = decodesim(&["capacity", "--points", "3"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("(the KV cache binds:"), "{out}");
}

#[test]
fn intra_node_knobs_do_not_reprice_a_cross_node_deepep_all_to_all() {
    let req = |f: &dyn Fn(&mut ScenarioRequest)| {
        let mut r = ScenarioRequest {
            model: "deepseek-v3".into(),
            system: "h200-hgx-2node-ib".into(),
            tp: Some(1),
            batch: 256,
            context: 2048,
            layers: Some(4),
            ..Default::default()
        };
        r.dp = Some(16);
        r.comm.ep_comm = EpComm::RdmaLl;
        f(&mut r);
        r
    };
    let a2a = |sim: &decodesim::Simulation| -> Vec<f64> {
        sim.pricing
            .collectives
            .iter()
            .filter(|c| c.op == "all_to_all")
            .map(|c| c.time_us)
            .collect()
    };
    let base = simulate(&req(&|_| {})).unwrap();
    assert!(!a2a(&base).is_empty());
    // A table of cases reads best with its columns spelled out where it is written.
    #[allow(clippy::type_complexity)]
    let cases: [(&dyn Fn(&mut ScenarioRequest), &str); 4] = [
        (
            &|r| r.comm.link_gbps = Some(10.0),
            "--link-gbps / --link-latency-us set the link inside a node; the all_to_all across 2 nodes (16 ranks) is priced over the network (DeepEP's low-latency mode sends every peer through the NIC) and keeps its price",
        ),
        (
            &|r| r.p2p = false,
            "--p2p off (NCCL_P2P_DISABLE) does not reach DeepEP's low-latency all_to_all across nodes",
        ),
        (
            &|r| r.comm.nccl_max_nchannels = Some(2),
            "--nccl-max-nchannels / --nccl-buffsize do not change the all_to_all across 2 nodes (16 ranks): DeepEP's low-latency kernels do not use NCCL",
        ),
        (
            &|r| r.comm.nccl_buffsize = Some(1 << 20),
            "--nccl-max-nchannels / --nccl-buffsize do not change the all_to_all",
        ),
    ];
    for (set, warning) in cases {
        let sim = simulate(&req(set)).unwrap();
        assert_eq!(a2a(&sim), a2a(&base), "{warning}");
        assert!(
            sim.warnings.iter().any(|w| w.contains(warning)),
            "{warning:?} not in {:?}",
            sim.warnings
        );
    }
}

#[test]
fn nccl_knobs_across_nodes_are_said_to_change_nothing() {
    let mut r = ScenarioRequest {
        model: "llama-3.1-70b".into(),
        system: "h200-hgx-2node-ib".into(),
        tp: Some(16),
        batch: 16,
        context: 2048,
        layers: Some(4),
        ..Default::default()
    };
    let base = simulate(&r).unwrap();
    r.comm.nccl_max_nchannels = Some(1);
    let sim = simulate(&r).unwrap();
    assert_eq!(sim.step_time_us(), base.step_time_us());
    assert!(
        sim.warnings.iter().any(|w| w.contains(
            "NCCL's hierarchical law across nodes has no channel count or buffer size; its price is unchanged"
        )),
        "{:?}",
        sim.warnings
    );
}

#[test]
fn a_deepep_table_in_kib_is_refused_by_line() {
    let d = tmp("deepep");
    let good = std::fs::read_to_string(
        root().join("data/calibration/aiconfigurator/h200_sxm/deepep_ll.csv"),
    )
    .unwrap();
    // Every bytes column divided by 1024 (KiB, rounded).
    let mut lines = good.lines();
    let mut kib = format!("{}\n", lines.next().unwrap());
    for l in lines {
        let mut f: Vec<String> = l.split(',').map(str::to_string).collect();
        let b: f64 = f[6].parse().unwrap();
        f[6] = ((b / 1024.0).round().max(1.0) as u64).to_string();
        kib.push_str(&f.join(","));
        kib.push('\n');
    }
    let table = d.join("deepep_ll.csv");
    std::fs::write(&table, kib).unwrap();
    let out = d.join("profile.toml");
    let (code, stdout, err) = decodesim(&[
        "calibrate",
        "--from-deepep-ll",
        table.to_str().unwrap(),
        "--profile",
        "h200-estimate",
        "--system",
        "h200-8x-nvlink",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(1), "{stdout}{err}");
    for needle in [
        "deepep_ll.csv",
        "row 2 column 'bytes'",
        "num_tokens × topk × hidden = 16,384 elements",
        "KiB",
    ] {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
    assert!(!out.exists(), "nothing is written");
    let _ = std::fs::remove_dir_all(&d);
}

const GOOD: &str = r#"{"date": "20260601-101500", "backend": "vllm", "model_id": "moonshotai/Kimi-K2.5", "num_prompts": 64, "request_rate": "inf", "max_concurrency": 4, "completed": 64, "failed": 0, "total_input_tokens": 128000, "total_output_tokens": 64000, "output_throughput": 120.5, "median_tpot_ms": 30.1, "mean_tpot_ms": 30.5, "tensor_parallel_size": "8"}"#;

#[test]
fn fewer_prompts_than_max_concurrency_run_at_the_smaller() {
    use decodesim::calibrate::bench_serve::BenchOptions;
    use decodesim::calibrate::from_throughput::read_inputs;
    let d = tmp("prompts");
    let f = d.join("r.json");
    std::fs::write(
        &f,
        GOOD.replace(r#""num_prompts": 64"#, r#""num_prompts": 3"#)
            .replace(r#""completed": 64"#, r#""completed": 3"#),
    )
    .unwrap();
    let p = read_inputs(std::slice::from_ref(&f), &BenchOptions::default()).unwrap();
    assert_eq!(p[0].concurrency, 3);
    std::fs::write(&f, GOOD).unwrap();
    let p = read_inputs(&[f], &BenchOptions::default()).unwrap();
    assert_eq!(p[0].concurrency, 4);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_bench_result_of_another_server_is_refused() {
    let d = tmp("server");
    let out = d.join("fit.toml");
    for (json, needles) in [
        (
            GOOD.replace(
                r#""tensor_parallel_size": "8""#,
                r#""tensor_parallel_size": "4""#,
            ),
            vec!["tensor_parallel_size is 4", "--tp 8", "give --tp 4"],
        ),
        (
            GOOD.replace("moonshotai/Kimi-K2.5", "meta-llama/Llama-3.1-70B-Instruct"),
            vec![
                "model_id 'meta-llama/Llama-3.1-70B-Instruct'",
                "'kimi-k2.5'",
                "--model",
            ],
        ),
        (
            GOOD.replace(
                r#""tensor_parallel_size": "8""#,
                r#""tensor_parallel_size": "eight""#,
            ),
            vec!["tensor_parallel_size", "'eight'", "1..4096"],
        ),
    ] {
        let f = d.join("r.json");
        std::fs::write(&f, &json).unwrap();
        let (code, stdout, err) = decodesim(&[
            "calibrate",
            "--from-throughput",
            f.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, Some(1), "{stdout}{err}");
        assert!(!err.contains("panicked"), "{err}");
        for n in needles.iter().chain(&["r.json"]) {
            assert!(err.contains(n), "{n:?} not in {err}");
        }
        assert!(!out.exists());
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn simulate_under_pp_reports_the_binding_stage() {
    let (_, req) = layouts().remove(1);
    let (s, p) = req.load().unwrap();
    let sim = simulate_loaded(s.clone(), p.clone()).unwrap();
    let (mem, fit) = MemoryFit::of(&s, &p);
    assert_eq!(sim.memory, mem);
    assert!(fit.fits());
    // Weights, activations and buffers, KV: all counted.
    assert!(sim.memory.other_bytes > 0.0);
    assert!(sim.memory.total() > sim.memory.weights_bytes + sim.memory.kv_cache_bytes);
}
