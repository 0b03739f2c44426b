//! The sweep's fast path on data-parallel attention with wide expert parallelism (`--dp`, EP =
//! DP × TP, NCCL all-to-all or the low-latency RDMA all-to-all, redundant experts) against the
//! mean of the full timeline over seeds, jitter on (the profiles' own `[variability]`). The
//! ranks do not play the same step: each rank's experts get their own tokens per layer (seeded
//! routing) and each DP rank attends over its own sequences, and every rank waits for the
//! slowest at the all-to-alls; the fast path plays the expected slowest rank, so its step must
//! lie within 0.5% of the timeline's mean over seeds. A sweep through the binary takes `--dp`
//! lists.

use decodesim::cost::{self, CalibrationProfile};
use decodesim::scenario::deployment::EpComm;
use decodesim::scenario::Scenario;
use decodesim::sim::fast::{Collectives, FastScenario, Launch};
use decodesim::sim::{engine_config, Engine, ScenarioRequest, Timeline};
use decodesim::workload;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

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
/// so those take more seeds for the mean to settle within about 0.15%.
fn seeds(batch: u32) -> u64 {
    if batch <= 128 {
        96
    } else {
        24
    }
}
/// Decoder layers simulated (DeepSeek-V3 and Kimi K2.5 have 3 and 1 dense layers first, the
/// rest MoE): enough MoE layers that the seeds' mean of the slowest rank settles.
const LAYERS: usize = 10;

/// One play on the engine: the step window less the drawn jitter of the collective transfers
/// (one uniform draw for all ranks, mean zero: a control variate, as tests/fast_vs_seeds.rs).
fn play(
    w: &workload::Workload,
    s: &Scenario,
    p: &CalibrationProfile,
    engine: &mut Engine,
    tl: &mut Timeline,
) -> f64 {
    let pricing = cost::price(w, s, p).expect("priced");
    engine.run(w, &pricing.base_us, &engine_config(s, p), tl);
    let jitter: f64 = tl
        .rank_records(0)
        .filter(|r| w.ops[r.op as usize].family.is_collective())
        .map(|r| (r.end_us - r.start_us - r.wait_us) - pricing.base_us[r.op as usize])
        .sum();
    tl.step_time_us() - jitter
}

fn timeline_mean(s: &Scenario, p: &CalibrationProfile) -> f64 {
    let (mut engine, mut tl) = (Engine::new(), Timeline::default());
    let mut sum = 0.0;
    let n = seeds(s.batch);
    for seed in 0..n {
        let mut s = s.clone();
        s.seed = seed * 7919 + 3;
        sum += play(&workload::build(&s), &s, p, &mut engine, &mut tl);
    }
    sum / n as f64
}

fn draw(rng: &mut SmallRng) -> ScenarioRequest {
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
    req.comm.dp = Some(dp);
    req.comm.ep_comm = if rng.random_bool(0.5) {
        EpComm::RdmaLl
    } else {
        EpComm::AllToAll
    };
    req.comm.redundant_experts = redundant;
    req
}

#[test]
fn fast_path_matches_the_timeline_mean_on_dp_layouts() {
    let mut rng = SmallRng::seed_from_u64(2026);
    let mut errs = Vec::new();
    let mut failures = Vec::new();
    let mut refused = 0;
    let cases = std::env::var("FAST_DP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(24);
    while errs.len() < cases {
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
        let err = (quick - mean) / mean;
        let label = format!(
            "{} on {} tp {} dp {} {} redundant {} batch {} context {} graphs {}",
            s.model.name,
            s.system.name,
            s.tp,
            s.comm.dp_size(),
            format!("{:?}", s.comm.ep_comm),
            s.comm.redundant(),
            s.batch,
            s.context,
            s.cuda_graphs
        );
        if std::env::var_os("FAST_DP_VERBOSE").is_some() {
            eprintln!(
                "{:+.3}%  {label}  (fast {quick:.2}, mean {mean:.2})",
                err * 100.0
            );
        }
        if err.abs() >= 0.005 {
            failures.push(format!(
                "{label}: fast {quick:.1} µs vs mean over seeds {mean:.1} µs ({:+.3}%)",
                err * 100.0
            ));
        }
        errs.push(err);
    }
    let n = errs.len() as f64;
    let worst = errs.iter().fold(0.0f64, |m, e| m.max(e.abs()));
    eprintln!(
        "fast path vs timeline mean on DP layouts, {} scenarios: mean |error| {:.3}%, mean signed {:+.3}%, worst {:.3}%",
        errs.len(),
        errs.iter().map(|e| e.abs()).sum::<f64>() / n * 100.0,
        errs.iter().sum::<f64>() / n * 100.0,
        worst * 100.0
    );
    assert!(
        failures.is_empty(),
        "{} of {} scenarios off by 0.5% or more:\n{}",
        failures.len(),
        errs.len(),
        failures.join("\n")
    );
}
