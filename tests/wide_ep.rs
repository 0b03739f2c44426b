//! Data-parallel attention with wide expert parallelism (`--dp`, `--ep` = DP × TP,
//! `--ep-comm all-to-all|rdma-ll`, `--redundant-experts`): the batch split over DP ranks, the
//! all-to-all bytes per rank, its price across nodes (cost::internode called directly), the
//! memory per GPU, and the refusals (library and binary).

mod common;

use decodesim::cost::internode::{AllToAllBytes, AllToAllMode, Hierarchy};
use decodesim::cost::CollectiveAlgo;
use decodesim::scenario::deployment::EpComm;
use decodesim::scenario::CommPath;
use decodesim::sim::ScenarioRequest;
use decodesim::whatif::acceptance::Acceptance;
use decodesim::whatif::draft::{Draft, Method};
use decodesim::whatif::spec_decode::{self, SpecDecodeRequest};
use decodesim::workload::memory::weight_bytes_layout;
use decodesim::workload::CostFamily;

/// DeepSeek-V3 on two HGX H200 nodes, attention in data parallel over `dp` ranks at TP 1.
fn wide(dp: u32, batch: u32, comm: EpComm) -> ScenarioRequest {
    let mut r = ScenarioRequest {
        model: "deepseek-v3".into(),
        system: "h200-hgx-2node-ib".into(),
        tp: Some(1),
        batch,
        context: 2048,
        // Unpadded, so that each DP rank's tokens are its share of the batch.
        cuda_graphs: false,
        ..Default::default()
    };
    r.dp = Some(dp);
    r.comm.ep_comm = comm;
    r
}

fn op<'a>(sim: &'a decodesim::Simulation, name: &str) -> &'a decodesim::workload::Op {
    sim.workload
        .ops
        .iter()
        .find(|o| o.name == name)
        .unwrap_or_else(|| panic!("no op {name}"))
}

#[test]
fn the_batch_splits_over_dp_ranks_first_ranks_take_the_remainder() {
    let (s, _) = wide(4, 10, EpComm::AllToAll).load().unwrap();
    assert_eq!(s.dp_batches(), vec![3, 3, 2, 2]);
    assert_eq!(s.ranks(), 4);
    assert_eq!(s.layout.ep_size(), 4, "--ep defaults to DP x TP");
    let (s, _) = wide(16, 256, EpComm::AllToAll).load().unwrap();
    assert!(s.dp_batches().iter().all(|&b| b == 16));

    // Attention and the KV write follow each DP rank's own sequences: 3,3,2,2 of the
    // largest rank's 3; the GEMMs run the padded rows on every rank alike.
    let sim = decodesim::simulate(&wide(4, 10, EpComm::AllToAll)).unwrap();
    let third = 2.0 / 3.0;
    assert_eq!(
        op(&sim, "L3.mla_decode").rank_scale,
        vec![1.0, 1.0, third, third]
    );
    assert_eq!(
        op(&sim, "L3.kv_cache_write").rank_scale,
        vec![1.0, 1.0, third, third]
    );
    assert!(op(&sim, "L3.q_b_proj").rank_scale.is_empty());
    assert_eq!(sim.timeline.ranks, 4);
    // The step's tokens per second count the global batch.
    assert!((sim.tokens_per_s() - 10.0 / sim.step_time_us() * 1e6).abs() < 1e-9);
}

#[test]
fn a_dp_rank_without_sequences_still_runs_the_dummy_step() {
    let sim = decodesim::simulate(&wide(4, 2, EpComm::AllToAll)).unwrap();
    assert_eq!(sim.scenario.dp_batches(), vec![1, 1, 0, 0]);
    let attn = sim
        .workload
        .ops
        .iter()
        .position(|o| o.name == "L3.mla_decode")
        .unwrap() as u32;
    let gemm = sim
        .workload
        .ops
        .iter()
        .position(|o| o.name == "L3.q_b_proj")
        .unwrap() as u32;
    let dur = |op: u32, rank: u16| {
        let r = sim
            .timeline
            .records
            .iter()
            .find(|r| r.op == op && r.rank == rank)
            .unwrap();
        r.end_us - r.start_us
    };
    assert!(dur(attn, 0) > 0.0);
    assert_eq!(dur(attn, 3), 0.0, "no sequences: no attention");
    assert!(dur(gemm, 3) > 0.0, "the dummy step's GEMMs still run");
    // Every rank reaches every all-to-all.
    let a2a = sim
        .workload
        .ops
        .iter()
        .filter(|o| o.family == CostFamily::AllToAll)
        .count();
    let recs = sim
        .timeline
        .records
        .iter()
        .filter(|r| sim.workload.ops[r.op as usize].family == CostFamily::AllToAll)
        .count();
    assert_eq!(recs, a2a * 4);
}

#[test]
fn all_to_all_bytes_per_rank_are_tokens_times_top_k_times_hidden() {
    // 256 sequences over DP 16: 16 tokens per rank, top-8 of 256 experts, hidden 7168.
    let sim = decodesim::simulate(&wide(16, 256, EpComm::AllToAll)).unwrap();
    let dispatch = op(&sim, "L3.moe_dispatch");
    let combine = op(&sim, "L3.moe_combine");
    let hand = 16 * 8 * 7168 * 2;
    assert_eq!(hand, 1_835_008);
    assert_eq!(dispatch.message_bytes, hand);
    assert_eq!(combine.message_bytes, hand);
    assert_eq!(dispatch.group, 16);
    assert_eq!(
        AllToAllBytes::moe(16, 8, 7168, 2.0, 16, 8).buffer,
        hand as f64
    );
    // 58 MoE layers (3 dense first), a dispatch and a combine each.
    let n = sim
        .workload
        .ops
        .iter()
        .filter(|o| o.family == CostFamily::AllToAll)
        .count();
    assert_eq!(n, 2 * 58);
    // The low-latency mode dispatches FP8 with one FP32 scale per 128 elements and combines
    // BF16.
    let sim = decodesim::simulate(&wide(16, 256, EpComm::RdmaLl)).unwrap();
    assert_eq!(
        op(&sim, "L3.moe_dispatch").message_bytes,
        16 * 8 * (7168 + 7168 / 128 * 4)
    );
    assert_eq!(op(&sim, "L3.moe_combine").message_bytes, hand);
}

#[test]
fn the_wide_ep_all_to_all_is_priced_by_the_internode_law() {
    let sim = decodesim::simulate(&wide(16, 256, EpComm::AllToAll)).unwrap();
    let h = Hierarchy::of(&sim.scenario.system, 16, CommPath::Nvlink).unwrap();
    assert_eq!((h.nodes, h.ranks_per_node), (2, 8));
    let c = sim
        .pricing
        .collectives
        .iter()
        .find(|c| c.op == "all_to_all")
        .unwrap();
    let law = h.alltoall(AllToAllMode::Nccl, 1_835_008).unwrap();
    assert_eq!(c.bytes, 1_835_008);
    assert!(
        (c.time_us - law.time_us).abs() < 1e-9,
        "{} vs {}",
        c.time_us,
        law.time_us
    );
    assert_eq!(c.path, "nvlink+net");
    assert!(c.source.contains("2 nodes x 8 ranks"), "{}", c.source);

    let sim = decodesim::simulate(&wide(16, 256, EpComm::RdmaLl)).unwrap();
    let bytes = 16 * 8 * (7168 + 7168 / 128 * 4);
    let c = sim
        .pricing
        .collectives
        .iter()
        .find(|c| c.op == "all_to_all" && c.bytes == bytes)
        .unwrap();
    let law = h.alltoall(AllToAllMode::RdmaLowLatency, bytes).unwrap();
    // The RDMA law, plus the DeepEP dispatch kernels' own fixed cost measured inside a node
    // (the H200 profile's [deepep_ll]): two nodes never price below one.
    let p = decodesim::cost::CalibrationProfile::from_file(std::path::Path::new(
        "data/calibration/h200/profile.toml",
    ))
    .unwrap();
    let fixed = p.deepep_ll.unwrap().dispatch.latency_us;
    assert!(
        (c.time_us - (law.time_us + fixed)).abs() < 1e-9,
        "{} vs {} + {fixed}",
        c.time_us,
        law.time_us
    );
    assert_eq!(c.algo.base, CollectiveAlgo::RdmaLl);
    assert!(c.source.contains("no SMs held"), "{}", c.source);
    assert!(
        c.source.contains("DeepEP low-latency dispatch"),
        "{}",
        c.source
    );
}

#[test]
fn redundant_experts_lower_the_hottest_rank_load() {
    let base = {
        let mut r = wide(16, 256, EpComm::AllToAll);
        r.routing = Some(decodesim::scenario::routing::Routing::PowerLaw { alpha: 1.0 });
        r
    };
    let max_scale = |r: &ScenarioRequest| {
        let sim = decodesim::simulate(r).unwrap();
        sim.workload
            .ops
            .iter()
            .filter(|o| o.name.ends_with("experts_w13"))
            .map(|o| o.rank_scale.iter().copied().fold(0.0, f64::max))
            .sum::<f64>()
    };
    let mut eplb = base.clone();
    // 256 + 32 = 288 = 18 per rank.
    eplb.redundant_experts = Some(32);
    let (plain, balanced) = (max_scale(&base), max_scale(&eplb));
    assert!(balanced < plain, "{balanced} vs {plain}");
    // The replicas cost memory: 2 more experts per GPU per MoE layer.
    let (s, _) = eplb.load().unwrap();
    let (s0, _) = base.load().unwrap();
    let m = &s.model;
    let extra = weight_bytes_layout(m, 1, 16, 32) - weight_bytes_layout(m, 1, 16, 0);
    let one = weight_bytes_layout(m, 1, 16, 16) - weight_bytes_layout(m, 1, 16, 0);
    assert!((extra - 2.0 * one).abs() < 1.0);
    let w = |s| decodesim::workload::memory::footprint_of(s).weights_bytes;
    assert!((w(&s) - w(&s0) - extra).abs() < 1.0);
}

#[test]
fn experts_per_gpu_fall_with_ep_and_kv_follows_the_dp_rank() {
    let (s8, _) = wide(8, 128, EpComm::AllToAll).load().unwrap();
    let (s16, _) = wide(16, 128, EpComm::AllToAll).load().unwrap();
    let m = &s8.model;
    // Routed experts /EP, the rest whole at TP 1: the weights are linear in 1/EP.
    let (w8, w16, w32) = (
        weight_bytes_layout(m, 1, 8, 0),
        weight_bytes_layout(m, 1, 16, 0),
        weight_bytes_layout(m, 1, 32, 0),
    );
    assert!(w16 < w8);
    assert!(((w8 - w16) - 2.0 * (w16 - w32)).abs() < 1e3);
    // At EP = TP it is the tensor-parallel layout's figure.
    let tp8 = decodesim::workload::memory::weight_bytes_per_rank(m, 8);
    assert!((weight_bytes_layout(m, 8, 8, 0) - tp8).abs() / tp8 < 1e-12);
    let f8 = decodesim::workload::memory::footprint_of(&s8);
    let f16 = decodesim::workload::memory::footprint_of(&s16);
    assert_eq!(f8.weights_bytes, w8);
    assert_eq!(f16.weights_bytes, w16);
    // KV per GPU: the DP rank's own sequences (128 / 16 = 8 at DP 16, 16 at DP 8).
    let per_seq = m.kv_bytes_per_token_per_layer(1, 2.0) * m.num_layers as f64 * 2048.0;
    assert!((f16.total() - f16.weights_bytes - 8.0 * per_seq).abs() < 1.0);
    assert!((f8.total() - f8.weights_bytes - 16.0 * per_seq).abs() < 1.0);
    // The simulation reports the same footprint.
    let sim = decodesim::simulate(&wide(16, 128, EpComm::AllToAll)).unwrap();
    assert_eq!(sim.memory.weights_bytes, w16);
}

/// A capacity request of `scenario` for `demand`, four points, no target: what these tests
/// share.
fn capacity_request(
    scenario: ScenarioRequest,
    demand: decodesim::capacity::DemandSpec,
    max_tpot_ms: Option<f64>,
    disaggregated: bool,
) -> decodesim::capacity::CapacityRequest {
    decodesim::capacity::CapacityRequest {
        scenario,
        memory: decodesim::capacity::memory::MemoryOptions::default(),
        demand,
        points: 4,
        max_tpot_ms,
        target_tokens_per_s: None,
        users: None,
        systems: Vec::new(),
        layouts: Vec::new(),
        compare_layouts: false,
        max_systems: 1,
        prices: decodesim::capacity::Prices::None,
        disaggregated,
    }
}

fn fails(args: &[&str], needles: &[&str]) {
    let (ok, _out, err) = common::decodesim_bin(args);
    assert!(!ok, "{args:?} succeeded");
    for n in needles {
        assert!(err.contains(n), "{args:?}: missing '{n}' in: {err}");
    }
}

#[test]
fn the_binary_refuses_bad_layouts_by_flag_value_and_expectation() {
    let base = [
        "simulate",
        "--model",
        "deepseek-v3",
        "--system",
        "h200-hgx-2node-ib",
        "--batch",
        "64",
    ];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    fails(
        &with(&["--dp", "4", "--tp", "8", "--ep-comm", "all-to-all"]),
        &["--dp 4 × --tp 8 needs 32 GPUs", "has 16", "at most 16"],
    );
    fails(
        &with(&[
            "--dp",
            "16",
            "--tp",
            "1",
            "--ep",
            "8",
            "--ep-comm",
            "all-to-all",
        ]),
        &["--ep 8", "--ep must be 16"],
    );
    fails(
        &with(&["--dp", "16", "--tp", "1"]),
        &["--ep-comm allreduce", "expected all-to-all or rdma-ll"],
    );
    fails(
        &with(&["--dp", "0"]),
        &["--dp 0", "expected 1 (off) or more data-parallel ranks"],
    );
    // Without --tp the GPUs are shared out over DP ranks and stages only where they divide.
    fails(
        &with(&["--dp", "6", "--ep-comm", "all-to-all"]),
        &[
            "--tp not given",
            "--dp 6 × --pp 1 = 6 does not divide the 16 GPUs",
            "give --tp N",
        ],
    );
    fails(
        &with(&["--pp", "3"]),
        &[
            "--tp not given",
            "--dp 1 × --pp 3 = 3 does not divide the 16 GPUs",
        ],
    );
    fails(
        &with(&[
            "--dp",
            "16",
            "--tp",
            "1",
            "--ep-comm",
            "all-to-all",
            "--redundant-experts",
            "5",
        ]),
        &["--redundant-experts 5", "multiple of 16"],
    );
    fails(
        &with(&[
            "--dp",
            "16",
            "--tp",
            "1",
            "--ep-comm",
            "all-to-all",
            "--tbo",
            "on",
        ]),
        &["--tbo", "expected --ep-comm rdma-ll"],
    );
    fails(
        &[
            "simulate",
            "--model",
            "llama-3.1-70b",
            "--system",
            "h200-hgx-2node-ib",
            "--dp",
            "2",
            "--tp",
            "8",
            "--ep-comm",
            "all-to-all",
        ],
        &["--dp 2", "no routed experts"],
    );
    fails(
        &[
            "simulate",
            "--model",
            "deepseek-v3",
            "--system",
            "rtx-pro-6000-2node-tcp",
            "--dp",
            "16",
            "--tp",
            "1",
            "--ep-comm",
            "rdma-ll",
            "--batch",
            "64",
        ],
        &[
            "--ep-comm rdma-ll",
            "GPUDirect",
            "transport tcp",
            "expected all-to-all",
        ],
    );
    // A valid layout runs and says so in its headline.
    let (ok, out, err) = common::decodesim_bin(&with(&[
        "--dp",
        "16",
        "--tp",
        "1",
        "--ep-comm",
        "rdma-ll",
        "--draws",
        "0",
    ]));
    assert!(ok, "{err}");
    assert!(out.contains("TP=1, DP=16 EP=16 (rdma-ll)"), "{out}");
}

#[test]
fn paths_that_bypass_the_timeline_refuse_wide_ep_by_name() {
    // The sweep's fast path plays DP attention, the RDMA all-to-all and redundant experts
    // (tests/fast_dp.rs), and two-batch overlap (tests/fast_tbo.rs): a finite step, not the
    // step without overlap.
    let step = |tbo: bool| {
        let mut r = wide(16, 256, EpComm::RdmaLl);
        r.tbo = tbo;
        let (s, p) = r.load().unwrap();
        let fast = decodesim::sim::fast::FastScenario::new(&s, &p, None).expect("fitted");
        let launch = decodesim::sim::fast::Launch::new(&p, s.cuda_graphs);
        let coll = decodesim::sim::fast::Collectives::new(&s, &p).unwrap();
        fast.step_us(s.batch, s.context, &launch, &coll)
    };
    let (off, on) = (step(false), step(true));
    assert!(
        on.is_finite() && on > 0.0 && (on - off).abs() > 1e-3 * off,
        "{on} vs {off}"
    );
    // Speculative decoding with DP attention too: a row per draft-token count, each its own
    // step (tests/fast_dp.rs holds them to the timeline's mean).
    let (code, out, err) = common::decodesim_exit(&[
        "sweep",
        "--model",
        "deepseek-v3",
        "--system",
        "h200-hgx-2node-ib",
        "--tp",
        "1",
        "--dp",
        "16",
        "--ep-comm",
        "all-to-all",
        "--batch",
        "64,128",
        "--method",
        "mtp",
        "--draft-tokens",
        "0,1",
        "--acceptance-rate",
        "0.6",
        "--format",
        "csv",
    ]);
    assert_eq!(code, 0, "{err}");
    let steps: Vec<f64> = out
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(10).unwrap().parse().unwrap())
        .collect();
    assert_eq!(steps.len(), 4, "{out}");
    assert!(steps[1] > steps[0] && steps[3] > steps[2], "{steps:?}");
    // Speculative decoding's study.
    fails(
        &[
            "whatif",
            "spec-decode",
            "--model",
            "deepseek-v3",
            "--system",
            "h200-hgx-2node-ib",
            "--tp",
            "1",
            "--dp",
            "16",
            "--ep-comm",
            "rdma-ll",
            "--acceptance-rate",
            "0.6",
            "--draft-tokens",
            "1",
            "--crossover-batches",
            "none",
            "--tbo",
            "on",
            "--draws",
            "0",
        ],
        &[
            "--tbo on",
            "whatif spec-decode does not model two-batch overlap",
            "simulate",
        ],
    );
    // Capacity planning: the chunked-prefill share is not modelled with DP attention.
    fails(
        &[
            "capacity",
            "--model",
            "deepseek-v3",
            "--system",
            "h200-hgx-2node-ib",
            "--tp",
            "1",
            "--dp",
            "16",
            "--ep-comm",
            "all-to-all",
            "--input-len",
            "1000",
            "--output-len",
            "100",
        ],
        &[
            "--dp 16",
            "chunked-prefill share",
            "--context",
            "--disaggregate",
        ],
    );
}

/// Capacity with two-batch overlap: one user cannot be split in two, so that step runs as one
/// micro-batch; from two users on each step is the overlapped one.
#[test]
fn capacity_plays_two_batch_overlap_from_two_users() {
    use decodesim::capacity::{capacity, DemandSpec};
    let mut scenario = ScenarioRequest {
        model: "deepseek-v3".into(),
        system: "h200-hgx-2node-ib".into(),
        tp: Some(1),
        layers: Some(8),
        ..Default::default()
    };
    scenario.dp = Some(16);
    scenario.comm.ep_comm = EpComm::RdmaLl;
    scenario.tbo = true;
    let req = capacity_request(scenario.clone(), DemandSpec::Context(4096), None, false);
    let c = capacity(&req).unwrap();
    let step = |batch: u32, tbo: bool| {
        let mut r = scenario.clone();
        r.batch = batch;
        r.context = 4096;
        r.tbo = tbo;
        decodesim::sim::simulate(&r).unwrap().step_time_us()
    };
    let at = |n: u32| c.curve.points.iter().find(|p| p.concurrency == n).unwrap();
    assert_eq!(at(1).step_time_us, step(1, false));
    assert_eq!(at(2).step_time_us, step(2, true));
}

/// A disaggregated study whose decode pool runs data-parallel attention with wide EP: the
/// prefill instance is a TP engine over as many GPUs, the KV goes to one DP rank's TP group,
/// each decode instance takes `dp` transfers at once, and the co-located answer is not given.
#[test]
fn disaggregation_takes_a_wide_ep_decode_pool() {
    use decodesim::capacity::disagg::{self, DisaggOptions, Winner};
    use decodesim::capacity::{capacity, DemandSpec};
    use decodesim::cost::kv_transfer::{kv_bytes_per_rank, kv_transfer, KvLink};
    let mut scenario = ScenarioRequest {
        model: "deepseek-v3".into(),
        system: "h200-hgx-2node-ib".into(),
        tp: Some(1),
        ..Default::default()
    };
    scenario.dp = Some(16);
    scenario.comm.ep_comm = EpComm::RdmaLl;
    let lengths = DemandSpec::Lengths {
        input_len: 4000,
        output_len: 500,
    };
    let req = capacity_request(scenario, lengths, Some(60.0), true);
    let o = DisaggOptions::default();
    disagg::precheck(&req, &o).unwrap();
    let cap = capacity(&req).unwrap();
    let d = disagg::disaggregate(&req, &o, &cap).unwrap();
    assert_eq!((d.tp, d.dp), (1, 16));
    assert_eq!(d.prefill.tp, 16);
    let r = d
        .rows
        .iter()
        .find(|r| r.prefill_instances == 1 && r.decode_instances == 1)
        .unwrap();
    assert_eq!((r.gpus, r.link), (32, "net"));
    // One DP rank (TP=1) receives the whole MLA latent of the prompt.
    let s = &cap.reference.scenario;
    let t = d.transfers.iter().find(|t| t.link.class == "net").unwrap();
    let bytes = kv_bytes_per_rank(&s.model, 1, s.kv_bytes, 4000.0);
    assert_eq!(t.bytes_per_rank, bytes);
    assert_eq!(bytes, 4000.0 * 70_272.0);
    // The rates: x prefill instances, y decode instances of 16 receiving TP groups each.
    let sys = &s.system;
    for r in d.rows.iter().filter(|r| r.meets) {
        let (x, y) = (r.prefill_instances as f64, r.decode_instances as f64);
        let l = KvLink::net_shared(sys, (16, 8), sys, (1, 8)).unwrap();
        let k = kv_transfer(&s.model, 16, 1, s.kv_bytes, 4000.0, &l);
        let send = x * (1e6 / k.send_us).min(d.prefill.compute_requests_per_s);
        let recv = y * 16.0 * 1e6 / k.recv_us;
        assert!(r.requests_per_s <= send.min(recv) * (1.0 + 1e-9), "{r:?}");
        assert!(r.tpot_ms <= 60.0);
    }
    assert!(!d.colocated.modelled && !d.colocated.meets);
    assert!(d.colocated.note.contains("--dp 16"), "{}", d.colocated.note);
    assert!(
        matches!(d.winner, Winner::Disaggregated { .. }),
        "{}",
        d.verdict
    );
    assert!(
        d.verdict.contains("co-located is not compared"),
        "{}",
        d.verdict
    );
    // The command: the decode instance by its layout, the curve said to be the decode pool's.
    let (ok, out, err) = common::decodesim_bin(&[
        "capacity",
        "--model",
        "deepseek-v3",
        "--system",
        "h200-hgx-2node-ib",
        "--tp",
        "1",
        "--dp",
        "16",
        "--ep-comm",
        "rdma-ll",
        "--disaggregate",
        "--input-len",
        "4000",
        "--output-len",
        "500",
        "--max-tpot-ms",
        "60",
        "--points",
        "4",
        "--draws",
        "0",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("decode instance: h200-hgx-2node-ib TP=1 × DP=16 without prefill"),
        "{out}"
    );
    assert!(
        out.contains("--dp 16 with --disaggregate: the capacity curve is the decode pool's"),
        "{out}"
    );
}

#[test]
fn capacity_counts_every_data_parallel_ranks_kv_cache() {
    use decodesim::capacity::{capacity, DemandSpec};
    let req = |dp: Option<u32>, tp: u32| {
        let mut scenario = ScenarioRequest {
            model: "deepseek-v3".into(),
            system: "h200-hgx-2node-ib".into(),
            tp: Some(tp),
            ..Default::default()
        };
        scenario.dp = dp;
        scenario.comm.ep_comm = EpComm::AllToAll;
        capacity_request(scenario, DemandSpec::Context(4096), None, false)
    };
    let c = capacity(&req(Some(16), 1)).unwrap();
    // Each of the 16 DP ranks holds its own KV cache: the concurrency is 16 × one rank's, each
    // capped by max_num_seqs, and one rank's is its blocks over the blocks of a request.
    let m = &c.memory;
    // vLLM's default block of 16 tokens.
    let blocks_per_request = 4096 / 16;
    let per_rank = (m.num_blocks / blocks_per_request).min(1024);
    assert_eq!(c.max_concurrency, 16 * per_rank);
    assert!(c.max_concurrency > 1000, "{}", c.max_concurrency);
    // At TP 8 × 2 nodes (no DP) the same GPUs hold fewer users: the latent is replicated on
    // every TP rank, while DP ranks each hold only their own sequences.
    let tp16 = capacity(&req(None, 16)).unwrap();
    assert!(
        c.max_concurrency > 4 * tp16.max_concurrency,
        "{} vs {}",
        c.max_concurrency,
        tp16.max_concurrency
    );
    // The curve is simulated at the global batch, split over the DP ranks.
    let last = c.curve.points.last().unwrap();
    assert_eq!(last.concurrency as u64, c.max_concurrency.min(16_384));
}

#[test]
fn tp_collectives_sync_their_dp_rank_only_the_all_to_all_syncs_all() {
    let mut r = wide(2, 32, EpComm::AllToAll);
    r.tp = Some(8);
    r.comm.ep_comm = EpComm::AllToAll;
    let sim = decodesim::simulate(&r).unwrap();
    assert_eq!(sim.timeline.ranks, 16);
    assert_eq!(sim.scenario.layout.ep_size(), 16);
    let end_of = |name: &str, rank: u16| {
        let i = sim
            .workload
            .ops
            .iter()
            .position(|o| o.name == name)
            .unwrap() as u32;
        sim.timeline
            .records
            .iter()
            .find(|x| x.op == i && x.rank == rank)
            .unwrap()
            .end_us
    };
    // A TP all-reduce ends together inside each DP rank's TP group...
    let ar = "L3.attn_all_reduce";
    assert!((0..8).all(|k| end_of(ar, k) == end_of(ar, 0)));
    assert!((8..16).all(|k| end_of(ar, k) == end_of(ar, 8)));
    assert_ne!(
        end_of(ar, 0),
        end_of(ar, 8),
        "the two DP ranks' TP groups run apart"
    );
    // ... and the all-to-all across all 16.
    let a2a = "L3.moe_dispatch";
    assert!((0..16).all(|k| end_of(a2a, k) == end_of(a2a, 0)));
}

/// Per rank: (window, compute-stream busy time, communication transfer time).
fn rank_loads(sim: &decodesim::Simulation) -> Vec<(f64, f64, f64)> {
    use decodesim::workload::Stream;
    (0..sim.timeline.ranks)
        .map(|r| {
            let (mut compute, mut comm) = (0.0, 0.0);
            for x in sim.timeline.rank_records(r) {
                match x.stream {
                    Stream::Compute => compute += x.end_us - x.start_us,
                    Stream::Comm => comm += x.end_us - x.start_us - x.wait_us,
                    Stream::Aux => {}
                }
            }
            (sim.timeline.rank_window_us(r), compute, comm)
        })
        .collect()
}

#[test]
fn two_batch_overlap_hides_the_all_to_all_within_its_bounds() {
    let run = |tbo: bool| {
        // 4096 sequences over DP 16 at context 1024: the all-to-all takes about as long as
        // the compute, the case two-batch overlap is for.
        let mut r = wide(16, 4096, EpComm::RdmaLl);
        r.context = 1024;
        r.layers = Some(8);
        r.tbo = tbo;
        decodesim::simulate(&r).unwrap()
    };
    let (off, on) = (run(false), run(true));
    assert!(
        on.step_time_us() < 0.9 * off.step_time_us(),
        "{} vs {}",
        on.step_time_us(),
        off.step_time_us()
    );
    for sim in [&off, &on] {
        let loads = rank_loads(sim);
        let mut bound = 0.0;
        for &(window, compute, comm) in &loads {
            // Never shorter than the compute stream's work or the communication's transfers.
            assert!(window >= compute - 1e-6, "{window} < compute {compute}");
            assert!(window >= comm - 1e-6, "{window} < comm {comm}");
            bound += compute.max(comm) / loads.len() as f64;
        }
        assert!(sim.step_time_us() >= bound - 1e-6);
    }
    // Comm and compute are comparable here (each within 3x of the other, without overlap).
    let (_, c, m) = rank_loads(&off)[0];
    assert!(c < 3.0 * m && m < 3.0 * c, "compute {c} comm {m}");

    // The two micro-batches, by name, and each wait names an all-to-all.
    let ops = &on.workload.ops;
    assert!(ops.iter().any(|o| o.name == "mb0.L3.moe_dispatch"));
    assert!(ops.iter().any(|o| o.name == "mb1.L3.moe_dispatch"));
    let waits: Vec<_> = ops
        .iter()
        .filter(|o| o.family == CostFamily::Wait)
        .collect();
    assert_eq!(
        waits.len(),
        2 * 2 * 5,
        "a wait per all-to-all of 5 MoE layers, per micro-batch"
    );
    for w in &waits {
        let t = &ops[w.waits_for.unwrap() as usize];
        assert_eq!(t.family, CostFamily::AllToAll);
        assert_eq!(t.name.split('.').next(), w.name.split('.').next());
    }
    // On rank 0, mb0's dispatch of layer 3 flies while mb1 computes.
    let idx = |name: &str| ops.iter().position(|o| o.name == name).unwrap() as u32;
    let rec = |i: u32| -> &decodesim::sim::KernelRecord {
        on.timeline
            .records
            .iter()
            .find(|x| x.op == i && x.rank == 0)
            .unwrap()
    };
    let d = rec(idx("mb0.L4.moe_dispatch"));
    let flying = (d.start_us + d.wait_us, d.end_us);
    let overlapping: Vec<&str> = on
        .timeline
        .rank_records(0)
        .filter(|x| x.stream == decodesim::workload::Stream::Compute)
        .filter(|x| x.start_us < flying.1 && x.end_us > flying.0)
        .map(|x| ops[x.op as usize].name.as_str())
        .collect();
    assert!(!overlapping.is_empty());
    assert!(
        overlapping.iter().all(|n| n.starts_with("mb1.")),
        "{overlapping:?}"
    );
    assert!(
        overlapping.contains(&"mb1.L4.mla_decode"),
        "{overlapping:?}"
    );
    // The overlap shows in the breakdown.
    use decodesim::category::Category;
    let overlapped = |b: &decodesim::Breakdown| {
        let c = Category::Communication.index();
        b.busy_us[c] - b.exclusive_us[c]
    };
    assert!(
        overlapped(&on.mean) > 0.5 * on.mean.comm_transfer_us,
        "{:?}",
        on.mean
    );
    assert!(overlapped(&off.mean) < 1e-6);
    // Perfetto shows both micro-batches.
    let mut trace = Vec::new();
    decodesim::report::chrome::write_chrome_trace(&on, &mut trace).unwrap();
    let text = String::from_utf8(trace).unwrap();
    assert!(text.contains("mb0.L3.moe_dispatch") && text.contains("mb1.L3.moe_combine"));
}

#[test]
fn with_overlap_no_two_kernels_share_a_rank_stream_at_once() {
    let mut r = wide(16, 512, EpComm::RdmaLl);
    r.layers = Some(6);
    r.tbo = true;
    let sim = decodesim::simulate(&r).unwrap();
    for rank in 0..sim.timeline.ranks {
        for stream in decodesim::workload::Stream::ALL {
            let mut v: Vec<(f64, f64)> = sim
                .timeline
                .rank_records(rank)
                .filter(|x| x.stream == stream)
                .map(|x| (x.start_us, x.end_us))
                .collect();
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            for p in v.windows(2) {
                assert!(p[1].0 >= p[0].1 - 1e-9, "rank {rank} {stream:?}: {p:?}");
            }
        }
    }
}

#[test]
fn timeline_ranks_choose_what_the_perfetto_file_shows() {
    let dir = common::scratch("wide-ep-timeline");
    let file = dir.join("t.json");
    let f = file.to_str().unwrap();
    let args = |extra: &[&'static str]| -> Vec<String> {
        [
            "simulate",
            "--model",
            "deepseek-v3",
            "--system",
            "h200-hgx-18node-ib",
            "--tp",
            "1",
            "--dp",
            "144",
            "--ep-comm",
            "rdma-ll",
            "--redundant-experts",
            "32",
            "--batch",
            "1440",
            "--layers",
            "5",
            "--draws",
            "0",
            "--timeline",
            f,
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(extra.iter().map(|s| s.to_string()))
        .collect()
    };
    let pids = |path: &std::path::Path| -> Vec<u64> {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(v["otherData"]["ranks"], 144);
        let mut p: Vec<u64> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "process_name")
            .map(|e| e["pid"].as_u64().unwrap())
            .collect();
        p.sort_unstable();
        p
    };
    // Default above 64 ranks: node 0 and the first rank of each other node, with a note.
    let a = args(&[]);
    let (ok, _, err) = common::decodesim_bin(&a.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    assert!(ok, "{err}");
    assert!(err.contains("the timeline shows 25 of 144 ranks"), "{err}");
    let want: Vec<u64> = (0..8).chain((8..144).step_by(8)).collect();
    assert_eq!(pids(&file), want);
    // A chosen subset.
    let a = args(&["--timeline-ranks", "0-7,64"]);
    let (ok, _, err) = common::decodesim_bin(&a.iter().map(|s| s.as_str()).collect::<Vec<_>>());
    assert!(ok, "{err}");
    assert!(!err.contains("the timeline shows"), "{err}");
    assert_eq!(pids(&file), vec![0, 1, 2, 3, 4, 5, 6, 7, 64]);
    // Out of range or malformed: refused, naming the flag and what it takes.
    for bad in ["0-144", "7-3", "x"] {
        let a = args(&["--timeline-ranks", bad]);
        let (ok, _, err) = common::decodesim_bin(&a.iter().map(|s| s.as_str()).collect::<Vec<_>>());
        assert!(!ok);
        assert!(
            err.contains(&format!("--timeline-ranks {bad}")) && err.contains("from 0 to 143"),
            "{err}"
        );
    }
}

/// A model without a shared expert (Qwen3-235B: 94 MoE layers, none shared) still sends its
/// routed rows back: a dispatch and a combine per MoE layer, the combine right after the sum of
/// each token's top-k rows, with the dispatch's bytes (16 tokens per rank × top-8 × hidden
/// 4096 × 2 B), in both all-to-all modes.
#[test]
fn models_without_a_shared_expert_combine_every_moe_layer() {
    for comm in [EpComm::AllToAll, EpComm::RdmaLl] {
        let mut r = wide(16, 256, comm);
        r.model = "qwen3-235b-a22b".into();
        let sim = decodesim::simulate(&r).unwrap();
        let count = |suffix: &str| {
            sim.workload
                .ops
                .iter()
                .filter(|o| o.name.ends_with(suffix))
                .count()
        };
        assert_eq!(count(".moe_dispatch"), 94, "{comm:?}");
        assert_eq!(count(".moe_combine"), 94, "{comm:?}");
        let at = |name: &str| {
            sim.workload
                .ops
                .iter()
                .position(|o| o.name == name)
                .unwrap()
        };
        assert_eq!(at("L0.moe_combine"), at("L0.moe_sum") + 1, "{comm:?}");
        if comm == EpComm::AllToAll {
            assert_eq!(op(&sim, "L0.moe_combine").message_bytes, 16 * 8 * 4096 * 2);
        }
    }
}

/// Speculative decoding with data-parallel attention: each DP rank speculates for its own
/// sequences, so a rank's verify pass runs its share × (k + 1) tokens through the all-to-all,
/// and its sampler, proposer and MTP projection see that share, not the whole batch.
#[test]
fn speculative_decoding_runs_each_dp_ranks_own_sequences() {
    // 64 sequences over DP 16: 4 per rank; k = 1 verifies 2 tokens per sequence.
    let (s, _) = wide(16, 64, EpComm::RdmaLl).load().expect("loads");
    let verify = spec_decode::verify_workload(&s, 1);
    let plain = decodesim::workload::build(&s);
    let bytes = |w: &decodesim::workload::Workload, name: &str| {
        w.ops
            .iter()
            .find(|o| o.name == name)
            .unwrap_or_else(|| panic!("no op {name}"))
            .message_bytes
    };
    // FP8 dispatch (hidden bytes plus one FP32 scale per 128) of top-8 copies per token.
    let per_token = 8 * (7168 + 7168 / 128 * 4);
    assert_eq!(bytes(&plain, "L3.moe_dispatch"), 4 * per_token);
    assert_eq!(bytes(&verify, "L3.moe_dispatch"), 8 * per_token);
    assert_eq!(bytes(&verify, "L3.moe_combine"), 8 * 8 * 7168 * 2);
    let rows = |w: &decodesim::workload::Workload, name: &str| {
        w.ops
            .iter()
            .find(|o| o.name.ends_with(name))
            .unwrap_or_else(|| panic!("no op {name}"))
            .shape
            .m
    };
    assert_eq!(rows(&verify, "rejection_greedy_sample"), 8);
    let draft = Draft::load(Method::Mtp, None, &s.model).expect("MTP draft");
    let ds = draft.scenario(&s).expect("draft scenario");
    let drafts = spec_decode::draft_workload(&draft, &ds, 1);
    assert_eq!(rows(&drafts, "mtp_eh_proj"), 8);
    assert_eq!(rows(&drafts, "prepare_next_token_inputs"), 8);
    // A dense drafter (Kimi-K2.5's EAGLE-3 head) runs on each DP rank alone: its own four
    // sequences, no data parallelism of its own.
    let mut kimi = wide(16, 64, EpComm::RdmaLl);
    kimi.model = "kimi-k2.5".into();
    let (ks, _) = kimi.load().expect("loads");
    let eagle = Draft::load(Method::Eagle3, None, &ks.model).expect("EAGLE-3 draft");
    let es = eagle.scenario(&ks).expect("a dense draft under --dp");
    assert_eq!((es.batch, es.layout.dp_size()), (4, 1));
    let drafts = spec_decode::draft_workload(&eagle, &es, 1);
    assert_eq!(rows(&drafts, "eagle3_fc"), 8);
    assert!(drafts.ops.iter().all(|o| o.family != CostFamily::AllToAll));
    // The study itself: the verify pass moves twice the tokens through every layer, yet
    // decode is bound by weights, so it costs well under twice the plain step.
    let req = SpecDecodeRequest {
        base: wide(16, 64, EpComm::RdmaLl),
        method: Method::Mtp,
        draft: None,
        acceptance: Acceptance::Rate(0.8),
        draft_tokens: vec![1],
        crossover_batches: Vec::new(),
        mc_users: 20,
        output_tokens: 50,
    };
    let study = spec_decode::run(&req).expect("spec-decode runs with --dp");
    let plain_us = decodesim::simulate(&req.base).unwrap().step_time_us();
    let v = &study.variants[0];
    assert!(
        v.verify_time_us > plain_us && v.verify_time_us < 1.5 * plain_us,
        "verify {} vs plain {plain_us}",
        v.verify_time_us
    );
    assert!(v.draft_time_us > 0.0 && v.draft_time_us < 0.2 * plain_us);
    // The binary answers with intervals.
    let (code, out, err) = common::decodesim_exit(&[
        "whatif",
        "spec-decode",
        "--model",
        "deepseek-v3",
        "--system",
        "h200-hgx-2node-ib",
        "--tp",
        "1",
        "--dp",
        "16",
        "--ep-comm",
        "rdma-ll",
        "--batch",
        "64",
        "--method",
        "mtp",
        "--acceptance-rate",
        "0.8",
        "--draft-tokens",
        "1",
        "--crossover-batches",
        "none",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("method mtp"), "{out}");
    // The Monte Carlo draws run on the fast path, which plays it too.
    assert!(out.contains("speedup intervals at batch 64"), "{out}");
}

/// Under data-parallel attention each rank attends over its own DP rank's sequences: priced
/// from the AIConfigurator MLA tables (the RTX PRO 6000 profile), a rank's attention at 13
/// sequences per DP rank is the same whether the batch is 13 on one DP rank or 208 over
/// sixteen (it was priced at the whole batch, 15× too high at DP16).
#[test]
fn attention_is_priced_at_the_dp_ranks_share_of_the_batch() {
    let attention = |dp: u32, batch: u32| {
        let mut r = ScenarioRequest {
            model: "kimi-k2.5".into(),
            system: "rtx-pro-6000-2node-roce".into(),
            tp: Some(1),
            batch,
            context: 4096,
            ..Default::default()
        };
        r.dp = Some(dp);
        r.comm.ep_comm = EpComm::AllToAll;
        let sim = decodesim::simulate(&r).unwrap();
        let mla = sim
            .workload
            .ops
            .iter()
            .position(|o| o.name == "L1.mla_decode")
            .expect("MLA decode");
        (sim.pricing.base_us[mla], sim.workload.ops[mla].shape.batch)
    };
    let (one, rows) = attention(1, 13);
    for (dp, batch) in [(4, 52), (16, 208)] {
        let (us, r) = attention(dp, batch);
        assert_eq!(r, rows, "dp {dp}: the op's own sequences");
        assert!(
            (us - one).abs() <= 1e-9 * one,
            "dp {dp} batch {batch}: {us} µs vs {one} µs at dp 1 batch 13"
        );
    }
}
