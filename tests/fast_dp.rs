//! The sweep's fast path on data-parallel attention with wide expert parallelism (`--dp`, EP =
//! DP × TP, NCCL all-to-all or the low-latency RDMA all-to-all, redundant experts) against the
//! mean of the full timeline over seeds, jitter on (the profiles' own `[variability]`). The
//! ranks do not play the same step: each rank's experts get their own tokens per layer (seeded
//! routing) and each DP rank attends over its own sequences, and every rank waits for the
//! slowest at the all-to-alls; the fast path plays the expected slowest rank, so its step must
//! lie within 0.5% of the timeline's mean over seeds. A sweep through the binary takes `--dp`
//! lists.

mod common;

use decodesim::cost::CalibrationProfile;
use decodesim::rng::Generator;
use decodesim::scenario::deployment::EpComm;
use decodesim::scenario::Scenario;
use decodesim::sim::fast::{Collectives, FastScenario, Launch};
use decodesim::sim::ScenarioRequest;
use rand::Rng;

const MODELS: [&str; 2] = ["deepseek-v3", "kimi-k2.5"];
const SYSTEMS: [&str; 3] = [
    "h200-hgx-2node-ib",
    "h200-hgx-4node-ib",
    "rtx-pro-6000-2node-roce",
];
const CONTEXTS: [u64; 5] = [512, 1024, 4096, 16384, 65536];
/// Seeds per scenario: the timeline's mean over them stands for its expectation (the spread of
/// one seed is the routing's per-layer draws of the slowest rank and the ranks' speed skew).
/// At a small batch each rank's experts get a handful of tokens, the slowest rank's load
/// spreads widely from layer to layer (its standard deviation up to ~30% of the experts' time),
/// so those take more seeds for the mean to settle within about 0.15%. A large batch's mean
/// moved 0.16% from 24 seeds to 96 (DeepSeek-V3, DP 8, batch 985), so it takes 192.
fn seeds(batch: u32) -> u64 {
    if batch <= 128 {
        96
    } else {
        192
    }
}
/// Decoder layers simulated (DeepSeek-V3 and Kimi K2.5 have 3 and 1 dense layers first, the
/// rest MoE): enough MoE layers that the seeds' mean of the slowest rank settles.
const LAYERS: usize = 10;

fn timeline_mean(s: &Scenario, p: &CalibrationProfile) -> f64 {
    common::timeline_mean(s, p, seeds(s.batch))
}

fn draw(rng: &mut Generator) -> ScenarioRequest {
    let model = MODELS[rng.random_range(0..MODELS.len())];
    let system = SYSTEMS[rng.random_range(0..SYSTEMS.len())];
    let gpus = if system.contains("4node") { 32 } else { 16 };
    let tp = [1u32, 2, 4, 8][rng.random_range(0..4)];
    let dps: Vec<u32> = (2..=16).filter(|&d| d * tp <= gpus).collect();
    let dp = dps[rng.random_range(0..dps.len())];
    let ep = dp * tp;
    let experts = if model == "deepseek-v3" { 256 } else { 384 };
    // Replicas that fill the ranks evenly (EPLB's rule), sometimes.
    let redundant = if rng.random_bool(0.3) {
        (1..=experts)
            .filter(|r| (experts + r) % ep == 0)
            .take(2)
            .nth(rng.random_range(0..2))
    } else {
        None
    };
    let mut req = ScenarioRequest {
        model: model.into(),
        system: system.into(),
        tp: Some(tp),
        batch: if rng.random_bool(0.5) {
            rng.random_range(1..=64)
        } else {
            rng.random_range(1..=2048)
        },
        context: CONTEXTS[rng.random_range(0..CONTEXTS.len())],
        cuda_graphs: rng.random_bool(0.7),
        layers: Some(LAYERS),
        ..ScenarioRequest::default()
    };
    req.dp = Some(dp);
    req.comm.ep_comm = if rng.random_bool(0.5) {
        EpComm::RdmaLl
    } else {
        EpComm::AllToAll
    };
    req.redundant_experts = redundant;
    req
}

#[test]
fn fast_path_matches_the_timeline_mean_on_dp_layouts() {
    let mut rng = decodesim::rng::seeded(2026);
    let mut agreement = common::Agreement::default();
    let mut refused = 0;
    let cases = std::env::var("FAST_DP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    while agreement.errs.len() < cases {
        let req = draw(&mut rng);
        // Settings the scenario rules refuse (rdma-ll without GPUDirect RDMA, a layout that
        // does not fit, ...) are redrawn; the refusals are tested elsewhere.
        let Ok((s, p)) = req.load() else {
            refused += 1;
            assert!(refused < 200, "the draw is off: {refused} refused");
            continue;
        };
        let fast = FastScenario::new(&s, &p, None).expect("the fast path fits a DP layout");
        let launch = Launch::new(&p, s.cuda_graphs);
        let coll = Collectives::new(&s, &p).expect("collectives");
        let quick = fast.step_us(s.batch, s.context, &launch, &coll);
        let mean = timeline_mean(&s, &p);
        let label = format!(
            "{} on {} tp {} dp {} {:?} redundant {} batch {} context {} graphs {}",
            s.model.name,
            s.system.name,
            s.layout.tp,
            s.layout.dp_size(),
            s.comm.ep_comm,
            s.layout.redundant(),
            s.batch,
            s.context,
            s.cuda_graphs
        );
        agreement.record(&label, quick, mean, "FAST_DP_VERBOSE");
    }
    agreement.assert_all_within_half_percent("fast path vs timeline mean on DP layouts");
}

use common::decodesim_exit as run;

/// `sweep --dp 2,4,16` writes one row per (dp, batch, context), its dp in the `dp` column and
/// its step the fast path's price of that scenario alone (memo cleared): each DP size is its
/// own layout (EP = DP × TP), with `--ep-comm` and `--redundant-experts` applied to every one.
#[test]
fn sweep_rows_over_dp_equal_each_scenario_priced_alone() {
    for (comm, redundant, dps) in [
        ("all-to-all", None, [2u32, 4, 16]),
        ("rdma-ll", Some("16"), [16, 4, 2]),
    ] {
        let mut args = vec![
            "sweep",
            "--model",
            "deepseek-v3",
            "--system",
            "h200-hgx-2node-ib",
            "--tp",
            "1",
            "--ep-comm",
            comm,
            "--batch",
            "1,9,250",
            "--context",
            "1024,8192",
            "--format",
            "csv",
        ];
        let list = dps.map(|d| d.to_string()).join(",");
        args.extend(["--dp", &list]);
        if let Some(r) = redundant {
            // 256 + 16 experts fill 16, 4 and 2 ranks evenly.
            args.extend(["--redundant-experts", r]);
        }
        let (code, out, err) = run(&args);
        assert_eq!(code, 0, "{err}");
        let mut lines = out.lines();
        let header: Vec<&str> = lines.next().expect("header").split(',').collect();
        assert!(header.ends_with(&["pp", "dp"]), "{header:?}");
        let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
        let (dp_c, b_c, c_c, st_c) = (col("dp"), col("batch"), col("context"), col("step_time_us"));
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(rows.len(), 3 * 3 * 2);
        // In the order the list gives.
        assert_eq!(rows[0][dp_c], dps[0].to_string());
        assert_eq!(rows[17][dp_c], dps[2].to_string());
        let mut steps = std::collections::HashMap::new();
        for dp in dps {
            let mut req = ScenarioRequest {
                model: "deepseek-v3".into(),
                system: "h200-hgx-2node-ib".into(),
                tp: Some(1),
                ..ScenarioRequest::default()
            };
            req.dp = Some(dp);
            req.comm.ep_comm = if comm == "rdma-ll" {
                EpComm::RdmaLl
            } else {
                EpComm::AllToAll
            };
            req.redundant_experts = redundant.map(|r| r.parse().unwrap());
            let (s, p) = req.load().expect("loads");
            let fast = FastScenario::new(&s, &p, None).expect("fitted");
            let (launch, coll) = (
                Launch::new(&p, s.cuda_graphs),
                Collectives::new(&s, &p).expect("collectives"),
            );
            let mine: Vec<_> = rows.iter().filter(|r| r[dp_c] == dp.to_string()).collect();
            assert_eq!(mine.len(), 6, "dp {dp}");
            for r in mine {
                let (b, c): (u32, u64) = (r[b_c].parse().unwrap(), r[c_c].parse().unwrap());
                fast.clear_memo();
                let alone = fast.step_us(b, c, &launch, &coll);
                let row: f64 = r[st_c].parse().unwrap();
                assert!(
                    (row - alone).abs() <= 0.0005 + 1e-12 * alone,
                    "{comm} dp {dp} batch {b} context {c}: row {row} vs alone {alone}"
                );
                steps.insert((dp, b, c), row);
            }
        }
        // More DP ranks split the 250 sequences' attention further: a shorter step.
        assert!(
            steps[&(16, 250, 8192)] < steps[&(2, 250, 8192)],
            "{comm}: {steps:?}"
        );
    }
}

/// With DP attention each DP rank is its own engine: a sweep row fits when the largest DP
/// rank's sequences fit its KV cache and `max_num_seqs`, as `simulate` and `capacity` count
/// memory. 256 sequences of 4,096 tokens over 16 DP ranks (16 each) fit an H200 that one rank
/// holding all 256 would not; 16 × 257 sequences are above vLLM's 256 per engine.
#[test]
fn sweep_fits_counts_each_dp_rank_as_its_own_engine() {
    let (code, out, err) = run(&[
        "sweep",
        "--model",
        "deepseek-v3",
        "--system",
        "h200-hgx-2node-ib",
        "--tp",
        "1",
        "--dp",
        "1,16",
        "--ep-comm",
        "rdma-ll",
        "--batch",
        "256,4112",
        "--context",
        "4096",
        "--include-infeasible",
        "--format",
        "csv",
    ]);
    assert_eq!(code, 0, "{err}");
    let fits: Vec<(String, String, String)> = out
        .lines()
        .skip(1)
        .map(|l| {
            let c: Vec<&str> = l.split(',').collect();
            (
                c[c.len() - 1].to_string(),
                c[3].to_string(),
                c[13].to_string(),
            )
        })
        .collect();
    let at = |dp: &str, batch: &str| {
        fits.iter()
            .find(|(d, b, _)| d == dp && b == batch)
            .map(|x| x.2.clone())
            .unwrap_or_else(|| panic!("no row dp {dp} batch {batch}: {out}"))
    };
    assert_eq!(at("16", "256"), "true");
    assert_eq!(at("16", "4112"), "false");
    assert_eq!(at("1", "256"), "false");
    // simulate's memory account says the same of the DP16 row.
    let (code, out, err) = run(&[
        "simulate",
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
        "256",
        "--context",
        "4096",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("memory per GPU") && !out.contains("DOES NOT FIT"),
        "{out}"
    );
}

/// Expert parallelism wider than top-k × DP (TP 16 × EP 16 on two nodes, EP 32 and 64, DP ×
/// TP 16 across the 18-node system): the mean rows per EP rank, which the expert kernels' m
/// rounds, is a fraction of a row at some counts (8 × 7 rows over 16 ranks: 3.5). The fast
/// path used to refuse these layouts at fit ("the m of op L1.experts_w13 is not linear in the
/// basis"); it now prices them within 0.5% of the timeline's mean over seeds, at row counts
/// whose mean rounds (CUDA graphs off, or no capture size) in both regimes and at ones whose
/// mean is whole.
#[test]
fn fast_path_prices_expert_parallelism_wider_than_top_k() {
    use EpComm::{AllReduce, AllToAll, RdmaLl};
    // (model, system, dp, tp, ep-comm, redundant experts, batch, context, CUDA graphs)
    type Case = (
        &'static str,
        &'static str,
        u32,
        u32,
        EpComm,
        u32,
        u32,
        u64,
        bool,
    );
    let cases: [Case; 12] = [
        (
            "kimi-k2.5",
            "h200-hgx-2node-ib",
            1,
            16,
            AllReduce,
            0,
            1,
            4096,
            true,
        ),
        (
            "kimi-k2.5",
            "h200-hgx-2node-ib",
            1,
            16,
            AllToAll,
            0,
            33,
            4096,
            false,
        ),
        (
            "kimi-k2.5",
            "h200-hgx-2node-ib",
            1,
            16,
            RdmaLl,
            0,
            301,
            16384,
            false,
        ),
        (
            "kimi-k2.5",
            "h200-hgx-2node-ib",
            1,
            16,
            AllToAll,
            0,
            1001,
            1024,
            true,
        ),
        (
            "deepseek-v3",
            "h200-hgx-2node-ib",
            1,
            16,
            AllReduce,
            0,
            3,
            8192,
            false,
        ),
        (
            "deepseek-v3",
            "h100-hgx-2node-ib",
            1,
            16,
            RdmaLl,
            0,
            33,
            4096,
            false,
        ),
        (
            "deepseek-v3",
            "rtx-pro-6000-2node-roce",
            1,
            16,
            AllToAll,
            0,
            64,
            2048,
            true,
        ),
        (
            "qwen3-235b-a22b",
            "h200-hgx-2node-ib",
            1,
            16,
            RdmaLl,
            0,
            33,
            4096,
            false,
        ),
        (
            "kimi-k2.5",
            "h200-hgx-18node-ib",
            1,
            32,
            AllToAll,
            0,
            66,
            4096,
            false,
        ),
        (
            "kimi-k2.5",
            "h200-hgx-18node-ib",
            1,
            64,
            AllToAll,
            0,
            301,
            4096,
            false,
        ),
        (
            "kimi-k2.5",
            "h200-hgx-18node-ib",
            2,
            16,
            RdmaLl,
            0,
            66,
            4096,
            false,
        ),
        (
            "deepseek-v3",
            "h200-hgx-18node-ib",
            9,
            16,
            RdmaLl,
            32,
            333,
            4096,
            false,
        ),
    ];
    let mut agreement = common::Agreement::default();
    for (model, system, dp, tp, comm, redundant, batch, context, graphs) in cases {
        let mut req = ScenarioRequest {
            model: model.into(),
            system: system.into(),
            tp: Some(tp),
            batch,
            context,
            cuda_graphs: graphs,
            layers: Some(LAYERS),
            ..ScenarioRequest::default()
        };
        if dp > 1 {
            req.dp = Some(dp);
        } else {
            req.ep = Some(tp);
        }
        req.comm.ep_comm = comm;
        req.redundant_experts = (redundant > 0).then_some(redundant);
        let label = format!(
            "{model} on {system} dp {dp} tp {tp} {comm:?} redundant {redundant} batch {batch} context {context} graphs {graphs}"
        );
        let (quick, s, p) = common::fast_step(&req, &label);
        agreement.record(&label, quick, timeline_mean(&s, &p), "FAST_DP_VERBOSE");
    }
    agreement
        .assert_all_within_half_percent("fast path vs timeline mean, EP wider than top-k x DP");
}

/// `sweep --tp 16 --ep 16` on a two-node system: one row per batch (it used to fail at fit),
/// each the fast path's price of that scenario alone, and within 1% of `simulate`'s one seed.
#[test]
fn sweep_runs_tp16_ep16_on_two_nodes() {
    let base = [
        "--model",
        "kimi-k2.5",
        "--system",
        "h200-hgx-2node-ib",
        "--tp",
        "16",
        "--ep",
        "16",
        "--context",
        "4096",
    ];
    let mut args = vec!["sweep"];
    args.extend(base);
    args.extend(["--batch", "8,63", "--format", "csv"]);
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2, "{out}");
    for (r, batch) in rows.iter().zip(["8", "63"]) {
        assert_eq!(r[col("batch")], batch);
        let row: f64 = r[col("step_time_us")].parse().unwrap();
        let mut sim = vec!["simulate"];
        sim.extend(base);
        sim.extend(["--batch", batch, "--format", "json"]);
        let (code, json, err) = run(&sim);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&json).expect("json");
        let one_seed = v["step_time_us"].as_f64().expect("step_time_us");
        assert!(
            (row - one_seed).abs() <= 0.01 * one_seed,
            "batch {batch}: sweep {row} vs simulate {one_seed}"
        );
    }
}

/// Expert parallelism so wide that a tiny batch leaves fewer than one routed row per EP rank
/// (DeepSeek-V3 top-8 over 32 ranks at batch 1: a quarter row each). The timeline prices the
/// expert kernels at one row of one expert and scales each rank's work from it, so the step
/// grows with the batch as at any other width, not to seconds (a table read at zero rows
/// extrapolates to milliseconds per kernel); the sweep refuses such a batch by name and says
/// from which batch it prices.
#[test]
fn expert_parallelism_wider_than_the_batch_rows() {
    let base: Vec<&str> = "--model deepseek-v3 --system h200-hgx-18node-ib --tp 32 --ep 32"
        .split(' ')
        .collect();
    let step = |batch: &str| -> (f64, f64) {
        let mut sim = vec!["simulate"];
        sim.extend(base.iter().copied());
        sim.extend(["--batch", batch, "--format", "json"]);
        let (code, json, err) = run(&sim);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&json).expect("json");
        let moe = v["breakdown"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["category"] == "moe"))
            .and_then(|c| c["busy_us"].as_f64())
            .unwrap_or_else(|| panic!("moe busy in {json}"));
        (v["step_time_us"].as_f64().expect("step_time_us"), moe)
    };
    let (one, moe_one) = step("1");
    let (four, moe_four) = step("4");
    assert!(
        one < four && one > 0.7 * four,
        "batch 1 {one} µs vs batch 4 {four} µs"
    );
    assert!(
        moe_one > 0.0 && moe_one < moe_four,
        "moe busy: batch 1 {moe_one} µs vs batch 4 {moe_four} µs"
    );
    let mut sweep = vec!["sweep"];
    sweep.extend(base.iter().copied());
    sweep.extend(["--batch", "1..=8", "--format", "csv"]);
    let (code, _, err) = run(&sweep);
    assert_eq!(code, 1, "{err}");
    for want in [
        "--batch 1",
        "0.25 routed rows per expert-parallel rank",
        "from 3 up",
        "decodesim simulate",
    ] {
        assert!(err.contains(want), "{want:?} not in: {err}");
    }
    sweep.truncate(sweep.len() - 4);
    sweep.extend(["--batch", "3..=8", "--format", "csv"]);
    let (code, out, err) = run(&sweep);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 7, "{out}");
    // With two-batch overlap each micro-batch is a step: batch 3's smaller one has 1 sequence.
    sweep.truncate(sweep.len() - 4);
    sweep.extend([
        "--ep-comm",
        "rdma-ll",
        "--tbo",
        "on",
        "--batch",
        "3",
        "--format",
        "csv",
    ]);
    let (code, _, err) = run(&sweep);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--batch 3: 0.25 routed rows per expert-parallel rank on average in the smaller micro-batch"),
        "{err}"
    );
}

/// A sweep says where its fast path is known to read above `simulate`: two-batch overlap at
/// full depth. DP batches that do not split evenly and one or two routed experts per rank are
/// priced within 1% (`fast_path_prices_one_or_two_experts_per_rank`, and the DP layouts above)
/// and say nothing.
#[test]
fn sweep_warns_where_the_fast_path_reads_high() {
    let base: Vec<&str> =
        "sweep --model deepseek-v3 --system h200-hgx-2node-ib --tp 1 --dp 4 --ep-comm rdma-ll --format csv"
            .split(' ')
            .collect();
    let with = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend(extra);
        let (code, out, err) = run(&a);
        assert_eq!(code, 0, "{err}");
        assert!(out.lines().count() > 1, "{out}");
        err
    };
    let err = with(&["--batch", "4,8,9,13,14,15"]);
    assert!(!err.contains("warning"), "{err}");
    let err = with(&["--batch", "8", "--tbo", "on"]);
    assert!(err.contains("warning: --tbo on:"), "{err}");
    assert!(
        !err.contains("split evenly") && !err.contains("expert(s) per rank"),
        "{err}"
    );
    // One routed expert per rank (128 experts and 16 replicas over 144 ranks), uneven batches.
    let qwen = "sweep --model qwen3-235b-a22b --system h200-hgx-18node-ib --tp 1 --dp 144 --redundant-experts 16 --ep-comm rdma-ll --batch 1,2,144 --format csv";
    let (code, out, err) = run(&qwen.split(' ').collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 4, "{out}");
    assert!(!err.contains("warning"), "{err}");
}

/// Expert parallelism as wide as the routed experts (one or two experts per rank: Qwen3-235B's
/// 128 and 16 replicas over DP 144, DeepSeek-V3's 256 over DP 128, or with 32 replicas over DP
/// 144) at small batches: the padding rows of the idle DP ranks all route to the same experts,
/// so a handful of experts have tokens, the mean rank's rounds to none (the timeline prices the
/// expert kernels at one expert and scales each rank from it), the ranks holding the padding
/// rows' experts run many times the mean rank's rows, and the DP ranks that attend are not
/// those. The fast path read the step up to 2.4 times the timeline's mean here (it priced every
/// expert's weights at the mean rank and scaled them by the draws' ratios to the few touched,
/// and added the loaded ops' maximum to the largest DP rank's attention); hand-picked batches
/// and seeded random ones of the class, within 1% of the timeline's mean over seeds.
#[test]
fn fast_path_prices_one_or_two_experts_per_rank() {
    use EpComm::{AllToAll, RdmaLl};
    // (model, system, dp, ep-comm, redundant experts, batch, context, CUDA graphs)
    type Case = (&'static str, &'static str, u32, EpComm, u32, u32, u64, bool);
    let wide = "h200-hgx-18node-ib";
    let mut cases: Vec<Case> = vec![
        ("qwen3-235b-a22b", wide, 144, RdmaLl, 16, 1, 4096, true),
        ("qwen3-235b-a22b", wide, 144, RdmaLl, 16, 2, 4096, true),
        ("qwen3-235b-a22b", wide, 144, RdmaLl, 16, 8, 4096, true),
        ("qwen3-235b-a22b", wide, 144, AllToAll, 16, 64, 4096, true),
        ("qwen3-235b-a22b", wide, 144, RdmaLl, 16, 144, 4096, true),
        ("deepseek-v3", wide, 144, RdmaLl, 32, 1, 4096, true),
        ("deepseek-v3", wide, 144, RdmaLl, 32, 8, 4096, true),
        ("deepseek-v3", wide, 128, RdmaLl, 0, 1, 4096, true),
        ("deepseek-v3", wide, 128, AllToAll, 0, 8, 4096, true),
        // Uneven DP ranks at two experts per rank and more: the attending DP ranks meet the
        // loaded ones at the all-to-alls.
        (
            "deepseek-v3",
            "h200-hgx-2node-ib",
            16,
            RdmaLl,
            0,
            1,
            4096,
            true,
        ),
        (
            "deepseek-v3",
            "h200-hgx-2node-ib",
            16,
            RdmaLl,
            0,
            17,
            4096,
            true,
        ),
    ];
    // (model, DP, redundant): one or two experts per rank on the 144 GPUs.
    let layouts = [
        ("qwen3-235b-a22b", 144, 16),
        ("qwen3-235b-a22b", 128, 0),
        ("qwen3-235b-a22b", 72, 16),
        ("qwen3-235b-a22b", 64, 0),
        ("deepseek-v3", 144, 32),
        ("deepseek-v3", 128, 0),
    ];
    let mut rng = decodesim::rng::seeded(144);
    for _ in 0..6 {
        let (model, dp, redundant) = layouts[rng.random_range(0..layouts.len())];
        // Contexts the model takes: Qwen3's 40,960 positions leave out 65,536.
        let contexts = CONTEXTS.len() - usize::from(model.starts_with("qwen3"));
        cases.push((
            model,
            wide,
            dp,
            if rng.random_bool(0.5) {
                RdmaLl
            } else {
                AllToAll
            },
            redundant,
            if rng.random_bool(0.7) {
                rng.random_range(1..=dp)
            } else {
                rng.random_range(1..=3 * dp)
            },
            CONTEXTS[rng.random_range(0..contexts)],
            rng.random_bool(0.7),
        ));
    }
    let mut agreement = common::Agreement::default();
    let mut labels = Vec::new();
    for (model, system, dp, comm, redundant, batch, context, graphs) in cases {
        let mut req = ScenarioRequest {
            model: model.into(),
            system: system.into(),
            tp: Some(1),
            batch,
            context,
            cuda_graphs: graphs,
            layers: Some(LAYERS),
            ..ScenarioRequest::default()
        };
        req.dp = Some(dp);
        req.comm.ep_comm = comm;
        req.redundant_experts = (redundant > 0).then_some(redundant);
        let label = format!(
            "{model} on {system} dp {dp} {comm:?} redundant {redundant} batch {batch} context {context} graphs {graphs}"
        );
        let (quick, s, p) = common::fast_step(&req, &label);
        agreement.record(&label, quick, timeline_mean(&s, &p), "FAST_DP_VERBOSE");
        labels.push(label);
    }
    // The slowest of a rank or two of experts spreads widely from layer to layer, and with
    // jitter on the maximum also holds every rank's jitter: within 1% each (about −0.7% at the
    // worst, Qwen3 DP 144 at batch 8), 0.5% on average.
    eprintln!(
        "fast path vs timeline mean, one or two experts per rank: {}",
        agreement.summary()
    );
    let off: Vec<String> = agreement
        .errs
        .iter()
        .zip(&labels)
        .filter(|(e, _)| e.abs() >= 0.01)
        .map(|(e, l)| format!("{l}: {:+.3}%", e * 100.0))
        .collect();
    assert!(off.is_empty(), "off by 1% or more:\n{}", off.join("\n"));
    assert!(agreement.mean_abs() < 0.005, "{}", agreement.summary());
}

/// Speculative decoding on expert-parallel layouts, with and without data-parallel attention:
/// DeepSeek-V3's MTP module (an MoE layer that takes the all-to-all) and Kimi-K2.5's dense
/// EAGLE-3 head (under DP attention run on each DP rank alone, at the largest DP rank's
/// share). The fast path's whole speculative step (draft passes, verify pass, host time)
/// against the mean over seeds of `whatif spec-decode`'s timeline step, within 0.5%.
#[test]
fn fast_path_prices_speculative_decoding_on_dp_layouts() {
    use decodesim::whatif::draft::{Draft, Method};
    use decodesim::whatif::spec_decode;
    // (model, drafter, system, tp, dp, batch, context, k, graphs); DP 1 with TP 8: the
    // experts over the TP group (`--ep 8`).
    // A table of cases reads best with its columns spelled out where it is written.
    #[allow(clippy::type_complexity)]
    let cases: [(&str, Method, &str, u32, u32, u32, u64, u32, bool); 10] = [
        (
            "deepseek-v3",
            Method::Mtp,
            "h200-hgx-2node-ib",
            1,
            16,
            16,
            4096,
            1,
            true,
        ),
        (
            "deepseek-v3",
            Method::Mtp,
            "h200-hgx-2node-ib",
            1,
            16,
            250,
            1024,
            2,
            true,
        ),
        (
            "deepseek-v3",
            Method::Mtp,
            "h200-hgx-4node-ib",
            1,
            32,
            1024,
            2048,
            1,
            false,
        ),
        (
            "deepseek-v3",
            Method::Mtp,
            "rtx-pro-6000-2node-roce",
            1,
            8,
            96,
            16384,
            1,
            true,
        ),
        (
            "deepseek-v3",
            Method::Mtp,
            "h200-8x-nvlink",
            8,
            1,
            64,
            4096,
            2,
            true,
        ),
        (
            "kimi-k2.5",
            Method::Eagle3,
            "h200-hgx-2node-ib",
            1,
            16,
            64,
            4096,
            1,
            true,
        ),
        (
            "kimi-k2.5",
            Method::Eagle3,
            "h200-hgx-2node-ib",
            1,
            16,
            37,
            512,
            3,
            true,
        ),
        (
            "kimi-k2.5",
            Method::Eagle3,
            "h200-hgx-4node-ib",
            1,
            32,
            512,
            65536,
            2,
            false,
        ),
        (
            "kimi-k2.5",
            Method::Eagle3,
            "rtx-pro-6000-2node-roce",
            1,
            16,
            200,
            4096,
            1,
            true,
        ),
        (
            "kimi-k2.5",
            Method::Eagle3,
            "rtx-pro-6000-8x-pcie",
            8,
            1,
            32,
            4096,
            3,
            true,
        ),
    ];
    let mut agreement = common::Agreement::default();
    for (model, method, system, tp, dp, batch, context, k, graphs) in cases {
        let mut req = ScenarioRequest {
            model: model.into(),
            system: system.into(),
            tp: Some(tp),
            batch,
            context,
            cuda_graphs: graphs,
            layers: Some(LAYERS),
            ..ScenarioRequest::default()
        };
        req.dp = Some(dp);
        if dp == 1 {
            req.ep = Some(tp);
        }
        // The PCIe boxes' RoCE has no GPUDirect RDMA: NCCL's all-to-all there.
        req.comm.ep_comm = if system.starts_with("rtx") {
            EpComm::AllToAll
        } else {
            EpComm::RdmaLl
        };
        let (s, p) = req.load().expect("loads");
        let draft = Draft::load(method, None, &s.model).expect("draft");
        let fast = FastScenario::new(&s, &p, Some(&*draft)).expect("fits speculation on DP");
        let launch = Launch::new(&p, s.cuda_graphs);
        let coll = Collectives::new(&s, &p).expect("collectives");
        let (_, _, quick) = fast
            .spec_step_us(s.batch, s.context, k, &launch, &coll)
            .expect("a speculative step");
        let (mut engine, mut tl) = (
            decodesim::sim::Engine::new(),
            decodesim::sim::Timeline::default(),
        );
        let n = seeds(batch);
        let mut sum = 0.0;
        for seed in 0..n {
            let mut s = s.clone();
            s.seed = seed * 7919 + 3;
            let c = spec_decode::step_cost(&s, &draft, &p, k, &mut engine, &mut tl)
                .expect("timeline step");
            sum += c.draft_us + c.verify_us + c.host_us;
        }
        let label = format!(
            "{model} {method:?} on {system} tp {tp} dp {dp} batch {batch} context {context} k {k} graphs {graphs}"
        );
        agreement.record(&label, quick, sum / n as f64, "FAST_DP_VERBOSE");
    }
    agreement.assert_all_within_half_percent("fast path vs timeline mean, speculation on DP");
}
