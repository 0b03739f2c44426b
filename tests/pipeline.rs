//! Pipeline parallelism (`--pp`): vLLM's layer split, the step at batch 1 as the stages plus
//! the send (computed from separately simulated stage workloads and a hand-priced send), the
//! steady state with micro-batches in flight, memory per GPU, the refusals through the binary,
//! and the Perfetto timeline with tp × pp ranks.

mod common;

use decodesim::capacity::memory::{account, MemoryOptions};
use decodesim::scenario::Scenario;
use decodesim::sim::pipeline;
use decodesim::sim::{simulate_loaded, simulate_workload, ScenarioRequest};
use decodesim::workload::stage::{self, build_stage, layer_split};

fn request(system: &str, tp: u32, pp: Option<u32>, batch: u32) -> ScenarioRequest {
    let mut r = ScenarioRequest {
        system: system.into(),
        tp: Some(tp),
        batch,
        context: 4096,
        ..Default::default()
    };
    r.pp = pp;
    r
}

use common::decodesim_exit as run;

#[test]
fn layer_split_is_vllms_get_pp_indices() {
    assert_eq!(layer_split(61, 2), vec![0..31, 31..61]);
    // 15 each, the one left over to the stage before the last.
    assert_eq!(layer_split(61, 4), vec![0..15, 15..30, 30..46, 46..61]);
    // Remainders go to the stages before the last, from the second-to-last backwards.
    assert_eq!(layer_split(7, 4), vec![0..2, 2..4, 4..6, 6..7]);
    assert_eq!(layer_split(61, 1), vec![0..61]);
    assert_eq!(pipeline::micro_batches(1, 2), vec![1]);
    assert_eq!(pipeline::micro_batches(7, 2), vec![4, 3]);
    assert_eq!(pipeline::micro_batches(3, 4), vec![1, 1, 1]);
}

/// Each stage of `s` at `batch` played on its own: its span (first kernel to last end).
fn stage_spans(s: &Scenario, p: &decodesim::CalibrationProfile, batch: u32) -> Vec<f64> {
    let mb = pipeline::micro_scenario(s, batch);
    stage::stages(&mb)
        .iter()
        .map(|st| {
            let w = build_stage(&mb, st);
            simulate_workload(mb.clone(), p.clone(), w)
                .unwrap()
                .timeline
                .span_us()
        })
        .collect()
}

#[test]
fn pp2_step_at_batch_1_is_the_two_stages_plus_the_send() {
    let (s, p) = request("rtx-pro-6000-8x-pcie", 4, Some(2), 1)
        .load()
        .unwrap();
    let spans = stage_spans(&s, &p, 1);
    let (_, send_us, _) = pipeline::send(&s, &p, 0, 1);
    // By hand: each of the 4 ranks sends its quarter of hidden_states + residual for 1 token
    // (2 × 1 × 7168 × 2 B / 4 = 7,168 B, under NCCL's 16 KiB LL threshold) from GPU i (socket 0)
    // to GPU 4 + i (socket 1): NCCL's LL base 6.6 µs + PCIe hop 1.0 µs, the bytes at half the
    // cross-socket P2P 45 GB/s; the profile's collective factors on the two parts.
    let ic = &s.system.interconnect;
    assert_eq!(ic.p2p_gbps_cross_socket, 45.0);
    let f = &p.factors;
    let hand = (6.6 + 1.0) * f.collective_latency_scale
        + 7168.0 / (45.0 * 0.5 * 1e3) / f.collective_bw_scale;
    assert!((send_us - hand).abs() < 1e-9, "{send_us} vs {hand}");
    assert_eq!(pipeline::token_return_us(&s), 0.0);

    let sim = simulate_loaded(s, p).unwrap();
    let expected = spans[0] + send_us + spans[1];
    let got = sim.step_time_us();
    assert!(
        (got - expected).abs() < 1e-6 * expected,
        "step {got} vs stages {spans:?} + send {send_us}"
    );
    assert!((sim.tokens_per_s() - 1e6 / expected).abs() < 1e-6);
    assert_eq!(sim.timeline.ranks, 8);
}

#[test]
fn pp2_across_two_nodes_sends_through_the_nics_and_returns_the_tokens() {
    let (s, p) = request("rtx-pro-6000-2node-roce", 8, Some(2), 1)
        .load()
        .unwrap();
    let spans = stage_spans(&s, &p, 1);
    let (op, send_us, _) = pipeline::send(&s, &p, 0, 1);
    assert_eq!(op.message_bytes, 2 * 7168 * 2 / 8);
    // By hand: 8 ranks of node 0 share its two 200 Gb/s NICs (25 GB/s each, under the PCIe 5
    // x16 path), LL halves it; latency NCCL's LL base 6.6 + NET hop 2.7 µs + the fabric's
    // one-way latency + host staging (no GPUDirect).
    let net = s.system.network.as_ref().unwrap();
    assert_eq!((net.nics, net.nic_gbit, net.gpudirect), (2, 200.0, false));
    let lat = 6.6 + 2.7 + net.latency_us + s.system.interconnect.host_latency_us;
    let bw = 2.0 * 25.0 / 8.0 * 0.5;
    let f = &p.factors;
    let hand = lat * f.collective_latency_scale + 3584.0 / (bw * 1e3) / f.collective_bw_scale;
    assert!((send_us - hand).abs() < 1e-9, "{send_us} vs {hand}");
    let ret = pipeline::token_return_us(&s);
    assert_eq!(ret, net.latency_us);

    let sim = simulate_loaded(s, p).unwrap();
    let expected = spans[0] + send_us + spans[1] + ret;
    let got = sim.step_time_us();
    assert!(
        (got - expected).abs() < 1e-6 * expected,
        "step {got} vs {expected}"
    );
    assert_eq!(sim.timeline.ranks, 16);
}

#[test]
fn micro_batches_in_flight_reach_the_busiest_stage_bound() {
    // Batch 8 over 2 stages: two micro-batches of 4. Each stage holds one at a time and its
    // stream also carries the send (or receive) of each, so the period is the larger of one
    // micro-batch's loop and twice the busiest stage's share.
    let (s, p) = request("rtx-pro-6000-8x-pcie", 4, Some(2), 8)
        .load()
        .unwrap();
    let spans = stage_spans(&s, &p, 4);
    let (_, x, _) = pipeline::send(&s, &p, 0, 4);
    let lap = spans[0] + x + spans[1];
    let busiest = 2.0 * (x + spans[0].max(spans[1]));
    let expected = lap.max(busiest);
    let sim = simulate_loaded(s, p).unwrap();
    let got = sim.step_time_us();
    assert!(
        (got - expected).abs() < 1e-6 * expected,
        "step {got} vs lap {lap}, busiest {busiest}"
    );
    assert!((sim.tokens_per_s() - 8.0e6 / got).abs() < 1e-6);
    // No two kernels overlap on one (rank, stream), and every record lies in its rank's window.
    let mut by_lane: std::collections::HashMap<
        (u16, decodesim::workload::Stream),
        Vec<(f64, f64)>,
    > = Default::default();
    for r in &sim.timeline.records {
        by_lane
            .entry((r.rank, r.stream))
            .or_default()
            .push((r.start_us, r.end_us));
        let start = sim.timeline.rank_start_us[r.rank as usize];
        let end = start + sim.timeline.rank_window_us(r.rank as usize);
        assert!(
            r.start_us >= start - 1e-6 && r.end_us <= end + 1e-6,
            "{r:?}"
        );
        assert!(r.wait_us >= 0.0 && r.wait_us <= r.end_us - r.start_us + 1e-9);
    }
    for (lane, mut v) in by_lane {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in v.windows(2) {
            assert!(w[1].0 >= w[0].1 - 1e-6, "{lane:?}: {w:?}");
        }
    }
    // Every rank's window is the period; the breakdowns sum to it.
    for (r, b) in sim.per_rank.iter().enumerate() {
        assert!((sim.timeline.rank_window_us(r) - got).abs() < 1e-6 * got);
        let sum: f64 = b.exclusive_us.iter().sum();
        assert!((b.step_time_us - got).abs() < 1e-6 * got);
        assert!((sum - got).abs() < 1e-6 * got, "rank {r}: {sum} vs {got}");
    }
}

#[test]
fn pp2_halves_the_weights_per_gpu_and_grows_the_kv_room() {
    let (s1, p1) = request("rtx-pro-6000-8x-pcie", 8, None, 32).load().unwrap();
    let seed = simulate_loaded(s1, p1).unwrap();
    let gib = (1u64 << 30) as f64;
    let w1 = seed.memory.weights_bytes;
    assert!((65.0 * gib..75.0 * gib).contains(&w1), "{}", w1 / gib);
    let (s2, p2) = request("rtx-pro-6000-2node-roce", 8, Some(2), 32)
        .load()
        .unwrap();
    let two = simulate_loaded(s2.clone(), p2.clone()).unwrap();
    let ratio = two.memory.weights_bytes / w1;
    assert!((0.45..0.55).contains(&ratio), "weights ratio {ratio}");
    // The KV of the most loaded stage: 31 of 61 layers.
    let kv_ratio = two.memory.kv_cache_bytes / seed.memory.kv_cache_bytes;
    assert!((kv_ratio - 31.0 / 61.0).abs() < 1e-9, "{kv_ratio}");

    // capacity's account: the KV cache holds far more tokens.
    let (s1, p1) = request("rtx-pro-6000-8x-pcie", 8, None, 1).load().unwrap();
    let o = MemoryOptions::default();
    let a1 = account(&s1, &p1, &o).unwrap();
    let a2 = account(&s2, &p2, &o).unwrap();
    assert!(
        a2.kv_cache_tokens > 4 * a1.kv_cache_tokens,
        "{} vs {}",
        a2.kv_cache_tokens,
        a1.kv_cache_tokens
    );
    assert!((a2.term("weights") / a1.term("weights") - ratio).abs() < 1e-9);
}

#[test]
fn pipeline_stages_share_the_gpus_when_tp_is_not_given() {
    let (code, out, err) = run(&[
        "simulate",
        "--system",
        "rtx-pro-6000-2node-roce",
        "--pp",
        "2",
        "--draws",
        "0",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("TP=8 x PP=2"), "{out}");
}

#[test]
fn refusals_name_the_flag_the_value_and_what_is_expected() {
    let (code, _, err) = run(&["simulate", "--tp", "8", "--pp", "2", "--draws", "0"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--pp 2 with --tp 8 needs tp x pp = 16 GPUs")
            && err.contains("'rtx-pro-6000-8x-pcie' has 8"),
        "{err}"
    );
    let (code, _, err) = run(&["simulate", "--tp", "4", "--pp", "0", "--draws", "0"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--pp") && err.contains("0") && err.contains("expected 1 (off) or more"),
        "{err}"
    );
    let (code, _, err) = run(&[
        "simulate", "--tp", "2", "--pp", "4", "--layers", "3", "--draws", "0",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--pp 4 is more stages than the 3 decoder layers"),
        "{err}"
    );
    // Speculative decoding is not composed with the pipeline: refused, saying where the
    // pipeline runs (a sweep of pp without drafts is tests/fast_pipeline.rs's).
    let (code, _, err) = run(&[
        "sweep",
        "--tp",
        "4",
        "--pp",
        "2",
        "--batch",
        "1,8",
        "--method",
        "eagle3",
        "--draft-tokens",
        "0,1",
        "--acceptance-rate",
        "0.7",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--pp 2") && err.contains("decodesim simulate --pp 2"),
        "{err}"
    );
    let (code, _, err) = run(&[
        "whatif",
        "spec-decode",
        "--tp",
        "4",
        "--pp",
        "2",
        "--method",
        "mtp",
        "--draft-tokens",
        "1",
        "--acceptance-rate",
        "0.7",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--pp 2") && err.contains("whatif --vary"),
        "{err}"
    );
    // The simulate report's interval is drawn over the pipeline (every stage, the sends),
    // on the fast path: its median is the step's. On this GPU the whole step's error is drawn
    // with sigma near 0.17, so the median of 200 draws wanders by about 1.5% (1.25 sigma /
    // sqrt(n)); 4000 draws hold it within about 0.35%.
    let (code, out, err) = run(&[
        "simulate", "--tp", "4", "--pp", "2", "--batch", "2", "--draws", "4000",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("TP=4 x PP=2 (layers 31+30)"), "{out}");
    let step: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("step time"))
        .and_then(|l| {
            l.trim()
                .trim_end_matches(" µs")
                .replace(',', "")
                .parse()
                .ok()
        })
        .expect("step time line");
    let p50: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("interval (p5 / p50 / p95 over 4000 draws): step "))
        .and_then(|l| l.split(" / ").nth(1))
        .and_then(|x| x.replace(',', "").parse().ok())
        .expect("interval line");
    assert!(
        (p50 - step).abs() < 0.01 * step,
        "{step} vs p50 {p50}\n{out}"
    );
}

#[test]
fn perfetto_timeline_has_every_rank_of_every_stage_with_the_sends() {
    let dir = std::env::temp_dir().join(format!("decodesim-pp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("pp.json");
    let (code, _, err) = run(&[
        "simulate",
        "--tp",
        "4",
        "--pp",
        "2",
        "--batch",
        "4",
        "--draws",
        "0",
        "--timeline",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let ranks: std::collections::BTreeSet<i64> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["pid"].as_i64().unwrap())
        .collect();
    assert_eq!(ranks, (0..8).collect());
    assert!(events.iter().any(|e| e["name"] == "process_name"
        && e["pid"] == 5
        && e["args"]["name"] == "rank 5 (simulated, stage 1)"));
    // Two micro-batches: each sends once from stage 0 to stage 1, seen on all 8 ranks.
    let sends: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["args"]["op"] == "pp_send_recv_s0_to_s1")
        .collect();
    assert_eq!(sends.len(), 2 * 8);
    // Every rank runs kernels of its own stage: stage 1's ranks run lm_head, stage 0's do not.
    let runs = |op: &str, pid: i64| {
        events
            .iter()
            .filter(|e| e["args"]["op"] == op && e["pid"] == pid)
            .count()
    };
    assert_eq!(runs("lm_head", 0), 0);
    assert_eq!(runs("lm_head", 4), 2);
    assert_eq!(runs("embed_tokens", 0), 2);
    assert_eq!(runs("embed_tokens", 7), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stage_whose_tp_group_would_straddle_two_nodes_is_refused() {
    // Nodes of 6 GPUs: at TP 4 stage 1 would hold ranks 4..7, two on each node.
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("data/systems/rtx-pro-6000-2node-roce.toml"))
        .unwrap()
        .replace("gpu_count = 8 ", "gpu_count = 6 ")
        .replace("gpus_per_socket = 4", "gpus_per_socket = 3")
        .replace(
            "name = \"rtx-pro-6000-2node-roce\"",
            "name = \"six-per-node\"",
        );
    let dir = std::env::temp_dir().join(format!("decodesim-pp6-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("six.toml");
    std::fs::write(&path, text).unwrap();
    let gpus = root.join("data/systems/gpus");
    let sys = decodesim::scenario::SystemSpec::from_file(&path, &gpus).unwrap();
    assert_eq!((sys.gpus_per_node, sys.gpu_count), (6, 12));
    let (code, _, err) = run(&[
        "simulate",
        "--system",
        path.to_str().unwrap(),
        "--tp",
        "4",
        "--pp",
        "2",
        "--draws",
        "0",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "--pp 2 with --tp 4 on nodes of 6 GPUs would put a stage's TP group across two nodes"
        ) && err.contains("expected --tp a divisor of 6 or a multiple of it"),
        "{err}"
    );
    // TP 2 divides the node: every stage stays inside one.
    let (code, out, err) = run(&[
        "simulate",
        "--system",
        path.to_str().unwrap(),
        "--tp",
        "2",
        "--pp",
        "6",
        "--batch",
        "1",
        "--draws",
        "0",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("TP=2 x PP=6 (layers 10+10+10+10+11+10)"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
