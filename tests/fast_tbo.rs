//! The sweep's fast path on two-batch overlap (`--tbo on`) against the mean of the full
//! timeline over seeds, jitter on (the profiles' own `[variability]`). The timeline plays the
//! step as two micro-batches (⌈B/2⌉ and ⌊B/2⌋ sequences) cut at their all-to-alls and
//! interleaved, each all-to-all asynchronous on every rank's communication stream; the fast
//! path plays the same interleaving on one rank's recursion with the expected slowest rank
//! and straggler waits (`sim::fast::tbo`), on the data-parallel attention layouts overlap is
//! meant for and on expert-parallel TP layouts, odd and even batches. It does not meet the 0.5%
//! of the other layouts everywhere yet: the test holds the measured agreement (mean |error|
//! under 0.35%, worst under 1.5%, at most a third of the draws beyond 0.5%), so that a change
//! that makes it worse fails. A sweep through the binary takes `--tbo off,on`.

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
/// Decoder layers simulated (DeepSeek-V3 and Kimi K2.5 have 3 and 1 dense layers first, the
/// rest MoE): enough MoE layers, each cut in three per micro-batch, that the seeds' mean of
/// the slowest rank settles.
const LAYERS: usize = 8;

/// Seeds per scenario: at a small batch each rank's experts get a handful of tokens and the
/// slowest rank's load spreads widely from layer to layer; at a large one the fast path's own
/// routing draws are few per token. 16 seeds left the timeline's mean 0.9% off its settled value
/// at batch 935, so every batch takes 64.
const SEEDS: u64 = 64;

fn timeline_mean(s: &Scenario, p: &CalibrationProfile) -> f64 {
    common::timeline_mean(s, p, SEEDS)
}

/// A TBO scenario: data-parallel attention (EP = DP × TP) or expert parallelism over a TP
/// group (EP = TP), the low-latency RDMA all-to-all (what `--tbo on` needs), a batch of 2 or
/// more, odd or even by the draw.
fn draw(rng: &mut Generator) -> ScenarioRequest {
    let model = MODELS[rng.random_range(0..MODELS.len())];
    let system = SYSTEMS[rng.random_range(0..SYSTEMS.len())];
    let gpus = if system.contains("4node") { 32 } else { 16 };
    let (tp, dp) = if rng.random_bool(0.75) {
        let tp = [1u32, 2, 4, 8][rng.random_range(0..4)];
        let dps: Vec<u32> = (2..=16).filter(|&d| d * tp <= gpus).collect();
        (tp, Some(dps[rng.random_range(0..dps.len())]))
    } else {
        (8, None)
    };
    let mut req = ScenarioRequest {
        model: model.into(),
        system: system.into(),
        tp: Some(tp),
        batch: if rng.random_bool(0.5) {
            rng.random_range(2..=64)
        } else if dp.is_some() {
            rng.random_range(2..=1024)
        } else {
            rng.random_range(2..=512)
        },
        context: CONTEXTS[rng.random_range(0..CONTEXTS.len())],
        cuda_graphs: rng.random_bool(0.7),
        layers: Some(LAYERS),
        ..ScenarioRequest::default()
    };
    req.dp = dp;
    if dp.is_none() {
        req.ep = Some(tp);
    }
    req.comm.ep_comm = EpComm::RdmaLl;
    req.tbo = true;
    req
}

#[test]
fn fast_path_matches_the_timeline_mean_with_two_batch_overlap() {
    let mut rng = decodesim::rng::seeded(2027);
    let mut agreement = common::Agreement::default();
    let mut refused = 0;
    let (mut odd, mut dp_layouts, mut tp_layouts) = (0, 0, 0);
    let cases = std::env::var("FAST_TBO_CASES")
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
        assert!(s.layout.tbo);
        let fast = FastScenario::new(&s, &p, None).unwrap_or_else(|e| {
            panic!(
                "the fast path fits {} on {} tp {} dp {} batch {}: {e}",
                s.model.name,
                s.system.name,
                s.layout.tp,
                s.layout.dp_size(),
                s.batch
            )
        });
        let launch = Launch::new(&p, s.cuda_graphs);
        let coll = Collectives::new(&s, &p).expect("collectives");
        let quick = fast.step_us(s.batch, s.context, &launch, &coll);
        let mean = timeline_mean(&s, &p);
        odd += s.batch % 2;
        if s.layout.dp_size() > 1 {
            dp_layouts += 1;
        } else {
            tp_layouts += 1;
        }
        let label = format!(
            "{} on {} tp {} dp {} ep {} batch {} context {} graphs {}",
            s.model.name,
            s.system.name,
            s.layout.tp,
            s.layout.dp_size(),
            s.layout.ep_size(),
            s.batch,
            s.context,
            s.cuda_graphs
        );
        agreement.record(&label, quick, mean, "FAST_TBO_VERBOSE");
    }
    eprintln!(
        "fast path vs timeline mean with two-batch overlap ({odd} odd batches, {dp_layouts} DP, {tp_layouts} TP layouts), {}",
        agreement.summary()
    );
    // The draw covers what it claims to.
    let (errs, beyond) = (&agreement.errs, &agreement.beyond);
    assert!(odd > 0 && (odd as usize) < errs.len(), "odd batches: {odd}");
    assert!(dp_layouts > 0 && tp_layouts > 0);
    // Measured (40 draws): mean |error| 0.21%, worst 1.1%, about one in five beyond 0.5% (DP
    // layouts at small batches: `sim::fast::tbo`'s left-out partial waits). The bounds hold
    // that, not the 0.5% the other layouts meet.
    let (mean_abs, worst) = (agreement.mean_abs(), agreement.worst());
    if !beyond.is_empty() {
        eprintln!("beyond 0.5%:\n{}", beyond.join("\n"));
    }
    assert!(mean_abs < 0.0035, "mean |error| {:.3}%", mean_abs * 100.0);
    assert!(
        worst < 0.015 && beyond.len() * 3 <= errs.len(),
        "worst {:.3}%, {} of {} beyond 0.5%:\n{}",
        worst * 100.0,
        beyond.len(),
        errs.len(),
        beyond.join("\n")
    );
}

/// At full depth (every layer, jitter on) over the layouts overlap is meant for: the ranks'
/// compute streams never meet at an all-to-all that runs beside them, so the jitter's path
/// grows layer after layer until a wait for a transfer holds the ranks at its end; a fast path
/// that kept that path past the wait read up to 2.5% high here (DeepSeek-V3 DP16 at batch
/// 32), where the timeline's own jitter costs under 1%. Measured now (16 seeds): within 1.3%
/// each, mean |error| 0.6%; the bounds hold that.
#[test]
fn fast_path_follows_the_timeline_with_two_batch_overlap_at_full_depth() {
    let cases = [
        ("deepseek-v3", "h200-hgx-2node-ib", 1, 16, 32, 4096),
        ("deepseek-v3", "h200-hgx-2node-ib", 1, 16, 256, 2048),
        ("kimi-k2.5", "h200-hgx-4node-ib", 1, 32, 64, 8192),
        ("kimi-k2.5", "h200-hgx-2node-ib", 1, 16, 27, 65536),
    ];
    let mut agreement = common::Agreement::default();
    for (model, system, tp, dp, batch, context) in cases {
        let mut req = ScenarioRequest {
            model: model.into(),
            system: system.into(),
            tp: Some(tp),
            batch,
            context,
            cuda_graphs: true,
            ..ScenarioRequest::default()
        };
        req.dp = Some(dp);
        req.comm.ep_comm = EpComm::RdmaLl;
        req.tbo = true;
        let label = format!("{model} on {system} tp {tp} dp {dp} batch {batch} context {context}");
        let (quick, s, p) = common::fast_step(&req, &label);
        let mean = common::timeline_mean(&s, &p, 16);
        agreement.record(&label, quick, mean, "FAST_TBO_VERBOSE");
    }
    eprintln!(
        "fast path vs timeline mean with two-batch overlap at full depth, {}",
        agreement.summary()
    );
    let (mean_abs, worst) = (agreement.mean_abs(), agreement.worst());
    assert!(
        mean_abs < 0.009 && worst < 0.018,
        "mean |error| {:.3}%, worst {:.3}%:\n{}",
        mean_abs * 100.0,
        worst * 100.0,
        agreement.beyond.join("\n")
    );
}

use common::decodesim_exit as run;

/// `sweep --tbo off,on` writes one row per (tbo, batch, context), the setting in a `tbo`
/// column after dp, each row's step the fast path's price of that scenario alone (memo
/// cleared); overlap moves every step. A sweep that lists no `--tbo` keeps its columns.
#[test]
fn sweep_rows_over_tbo_equal_each_scenario_priced_alone() {
    let base = [
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
        "rdma-ll",
        "--batch",
        "32,33,250",
        "--context",
        "1000,4096",
        "--format",
        "csv",
    ];
    let mut args = base.to_vec();
    args.extend(["--tbo", "off,on"]);
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    assert!(header.ends_with(&["pp", "dp", "tbo"]), "{header:?}");
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let (t_c, b_c, c_c, st_c) = (
        col("tbo"),
        col("batch"),
        col("context"),
        col("step_time_us"),
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2 * 3 * 2);
    assert!(rows[..6].iter().all(|r| r[t_c] == "off"));
    assert!(rows[6..].iter().all(|r| r[t_c] == "on"));
    let mut steps = std::collections::HashMap::new();
    for tbo in [false, true] {
        let mut req = ScenarioRequest {
            model: "deepseek-v3".into(),
            system: "h200-hgx-2node-ib".into(),
            tp: Some(1),
            ..ScenarioRequest::default()
        };
        req.dp = Some(16);
        req.comm.ep_comm = EpComm::RdmaLl;
        req.tbo = tbo;
        let (s, p) = req.load().expect("loads");
        let fast = FastScenario::new(&s, &p, None).expect("fitted");
        let (launch, coll) = (
            Launch::new(&p, s.cuda_graphs),
            Collectives::new(&s, &p).expect("collectives"),
        );
        let name = if tbo { "on" } else { "off" };
        for r in rows.iter().filter(|r| r[t_c] == name) {
            let (b, c): (u32, u64) = (r[b_c].parse().unwrap(), r[c_c].parse().unwrap());
            fast.clear_memo();
            let alone = fast.step_us(b, c, &launch, &coll);
            let row: f64 = r[st_c].parse().unwrap();
            assert!(
                (row - alone).abs() <= 0.0005 + 1e-12 * alone,
                "tbo {name} batch {b} context {c}: row {row} vs alone {alone}"
            );
            steps.insert((tbo, b, c), row);
        }
    }
    for b in [32, 33, 250] {
        for c in [1000, 4096] {
            let (off, on) = (steps[&(false, b, c)], steps[&(true, b, c)]);
            assert!(
                (on - off).abs() > 1e-3 * off,
                "batch {b} context {c}: {on} vs {off}"
            );
        }
    }
    // No --tbo list: the columns as before.
    let (code, out, err) = run(&base);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().next().unwrap().ends_with(",pp,dp"), "{out}");
    // Overlap needs the low-latency all-to-all: refused by name, before any row.
    let mut args = base.to_vec();
    args[10] = "all-to-all";
    args.extend(["--tbo", "on"]);
    let (code, out, err) = run(&args);
    assert_ne!(code, 0);
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("--tbo") && err.contains("rdma-ll"), "{err}");
}

/// The sweep prices eight contexts of one batch side by side (`step_us_busy_lanes`). Each lane
/// must be exactly the scenario priced alone: the same step and busy times, bit for bit,
/// whichever contexts share its lanes. Contexts far apart settle into their repeating layers
/// at different layers, so a lane that settles first is moved on and put aside while the
/// others play on: layouts with and without data-parallel attention, graphs on and off.
#[test]
fn overlap_lanes_equal_each_context_priced_alone() {
    const SPREAD: [u64; 8] = [16, 700, 3000, 9000, 17000, 32000, 60000, 128000];
    // A table of cases reads best with its columns spelled out where it is written.
    #[allow(clippy::type_complexity)]
    let layouts: [(&str, &str, u32, Option<u32>, Option<u32>); 3] = [
        ("deepseek-v3", "h200-hgx-2node-ib", 1, Some(16), None),
        ("minimax-m2.5", "h200-hgx-2node-ib", 2, Some(8), None),
        ("kimi-k2.5", "h200-hgx-2node-ib", 8, None, Some(8)),
    ];
    let mut compared = 0;
    for (model, system, tp, dp, ep) in layouts {
        for graphs in [true, false] {
            let mut req = ScenarioRequest {
                model: model.into(),
                system: system.into(),
                tp: Some(tp),
                cuda_graphs: graphs,
                ..ScenarioRequest::default()
            };
            req.dp = dp;
            req.ep = ep;
            req.comm.ep_comm = EpComm::RdmaLl;
            req.tbo = true;
            let (s, p) = req.load().expect("loads");
            let fast = FastScenario::new(&s, &p, None).expect("fitted");
            let (launch, coll) = (
                Launch::new(&p, s.cuda_graphs),
                Collectives::new(&s, &p).expect("collectives"),
            );
            for batch in [2, 3, 17, 64, 97, 250] {
                let lanes = fast.step_us_busy_lanes(batch, SPREAD, &launch, &coll);
                for (&c, (us, busy)) in SPREAD.iter().zip(lanes) {
                    fast.clear_memo();
                    let (alone, alone_busy) = fast.step_us_busy(batch, c, &launch, &coll);
                    assert!(
                        us.to_bits() == alone.to_bits()
                            && busy
                                .iter()
                                .zip(&alone_busy)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{model} tp {tp} dp {dp:?} ep {ep:?} graphs {graphs} batch {batch} \
                         context {c}: lane {us} vs alone {alone}"
                    );
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 3 * 2 * 6 * 8);
}
