//! Pipeline parallelism on the sweep's fast path: random `--pp` scenarios (models, systems of
//! one and two nodes, pp 2 and 4, batches 1..=256, contexts, NCCL protocols, CUDA graphs) priced
//! by `FastScenario` against the mean over seeds of the full timeline (`sim::pipeline`, jitter
//! on) within 0.5%; with jitter off, equal to it; and `decodesim sweep --pp 1,2,4` rows equal to
//! the fast path's price of each scenario alone.

mod common;

use decodesim::cost::CalibrationProfile;
use decodesim::rng::Generator;
use decodesim::scenario::{Proto, Scenario};
use decodesim::sim::fast::{Collectives, FastScenario, Launch};
use decodesim::sim::{simulate_loaded, ScenarioRequest};
use rand::Rng;

const MODELS: [&str; 5] = [
    "kimi-k2.5",
    "deepseek-v3",
    "llama-3.1-70b",
    "minimax-m2.5",
    "qwen3-235b-a22b",
];
/// (system, GPUs): two nodes (stages on either side of the network) and one.
const SYSTEMS: [(&str, u32); 4] = [
    ("rtx-pro-6000-2node-roce", 16),
    ("h200-hgx-2node-ib", 16),
    ("rtx-pro-6000-8x-pcie", 8),
    ("h200-8x-nvlink", 8),
];
const CONTEXTS: [u64; 5] = [512, 2048, 8192, 32768, 65536];
/// Decoder layers per stage simulated (plus one on some stages: the layer split's remainder).
/// A few keep the debug build quick; the frame (embedding, lm_head, sampler) and the sends weigh
/// more here than in a full model. Not fewer: the timeline draws the experts each MoE layer
/// touches per seed, so a stage of one or two MoE layers varies by ~2% from seed to seed, and
/// the pipeline's step, set by its busiest stage, averages above the busiest stage's mean (the
/// mean of a maximum), where the fast path takes the maximum of the expectations; at 4 layers a
/// stage that gap is within ~0.3%, and it shrinks with the layers of a full model.
const LAYERS_PER_STAGE: [usize; 3] = [4, 6, 8];
/// Seeds per scenario, drawn in rounds until the standard error of the mean is at most
/// `TARGET_SE` of it (or `MAX_SEEDS` are drawn). The step's spread over seeds is mostly the
/// experts each MoE layer touches (drawn per seed: ~1.5% of the step at these layer counts),
/// then the slowest rank's skew at each collective and the collectives' transfer jitter
/// (~0.3%): a dense scenario stops after one round, an MoE one takes a few.
const SEEDS_PER_ROUND: u64 = 16;
const MAX_SEEDS: u64 = 160;
const TARGET_SE: f64 = 0.0012;

/// The mean over seeds of the timeline's step, and the seeds drawn.
fn mean_over_seeds(s: &Scenario, p: &CalibrationProfile) -> (f64, u64) {
    let mut v = Vec::new();
    loop {
        for _ in 0..SEEDS_PER_ROUND {
            let mut s = s.clone();
            s.seed = v.len() as u64 * 7919 + 1;
            let sim = simulate_loaded(s, p.clone()).expect("pipeline simulates");
            v.push(sim.timeline.step_time_us());
        }
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        if (var / n).sqrt() <= TARGET_SE * mean || v.len() as u64 >= MAX_SEEDS {
            return (mean, v.len() as u64);
        }
    }
}

fn draw(rng: &mut Generator) -> ScenarioRequest {
    let model = MODELS[rng.random_range(0..MODELS.len())];
    let (system, gpus) = SYSTEMS[rng.random_range(0..SYSTEMS.len())];
    let pp = if rng.random_bool(0.5) { 2 } else { 4 };
    let tps: Vec<u32> = [1u32, 2, 4, 8]
        .into_iter()
        .filter(|&t| t * pp <= gpus)
        .collect();
    // Mostly the widest TP the system allows (where the straggler wait lives).
    let tp = if rng.random_bool(0.6) {
        *tps.last().expect("tp 1 fits")
    } else {
        tps[rng.random_range(0..tps.len())]
    };
    let proto = if rng.random_bool(0.5) {
        Proto::Ll
    } else {
        Proto::Simple
    };
    let mut req = ScenarioRequest {
        model: model.into(),
        system: system.into(),
        tp: Some(tp),
        batch: rng.random_range(1..=256),
        context: CONTEXTS[rng.random_range(0..CONTEXTS.len())],
        cuda_graphs: rng.random_bool(0.6),
        proto,
        layers: Some(
            pp as usize * LAYERS_PER_STAGE[rng.random_range(0..LAYERS_PER_STAGE.len())]
                + rng.random_range(0..pp as usize),
        ),
        ..ScenarioRequest::default()
    };
    req.pp = Some(pp);
    req
}

fn label(s: &Scenario, p: &CalibrationProfile) -> String {
    format!(
        "{} on {} ({}) tp {} pp {} layers {} batch {} context {} graphs {} proto {}",
        s.model.name,
        s.system.name,
        p.profile.name,
        s.layout.tp,
        s.layout.pp_size(),
        s.model.num_layers,
        s.batch,
        s.context,
        s.cuda_graphs,
        s.nccl.proto
    )
}

#[test]
fn pipeline_fast_path_matches_the_mean_over_seeds() {
    let mut rng = decodesim::rng::seeded(18);
    let mut cases = Vec::new();
    let mut refused = 0;
    while cases.len() < 20 {
        let req = draw(&mut rng);
        // Settings the scenario rules refuse (KV heads vs TP, ...) are redrawn.
        match req.load() {
            Ok((s, p)) if Collectives::new(&s, &p).is_ok() => cases.push((s, p)),
            _ => refused += 1,
        }
    }
    assert!(refused < 48, "{refused} draws refused: the draw is off");
    let mut failures = Vec::new();
    let mut worst = 0.0f64;
    let (mut two_node, mut pp4) = (0, 0);
    for (s, p) in &cases {
        let fast = FastScenario::new(s, p, None).expect("fitted");
        assert_eq!(fast.stages(), s.layout.pp_size() as usize);
        let launch = Launch::new(p, s.cuda_graphs);
        let coll = Collectives::new(s, p).expect("collectives");
        let quick = fast.step_us(s.batch, s.context, &launch, &coll);
        let (mean, seeds) = mean_over_seeds(s, p);
        let err = (quick - mean) / mean;
        worst = worst.max(err.abs());
        two_node += s.system.spans_nodes(s.layout.tp * s.layout.pp_size()) as u32;
        pp4 += (s.layout.pp_size() == 4) as u32;
        if std::env::var_os("FAST_VS_SEEDS_VERBOSE").is_some() {
            eprintln!("{:+.3}%  {} ({seeds} seeds)", err * 100.0, label(s, p));
        }
        // A NaN error fails too.
        if err.is_nan() || err.abs() >= 0.005 {
            failures.push(format!(
                "{}: fast {quick:.1} µs vs mean over {seeds} seeds {mean:.1} µs ({:+.3}%)",
                label(s, p),
                err * 100.0
            ));
        }
    }
    eprintln!(
        "pipeline fast path vs mean over seeds, {} scenarios: worst {:.3}%",
        cases.len(),
        worst * 100.0
    );
    assert!(two_node >= 6 && pp4 >= 6, "{two_node} two-node, {pp4} pp 4");
    assert!(
        failures.is_empty(),
        "{} of {} scenarios off by 0.5% or more:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// With jitter off every rank of a stage plays the same, and the fast path is the timeline:
/// same stage times, same sends, the same schedule function. A dense model's is equal to it;
/// an MoE's differs by the experts touched per layer, which the timeline draws (seeded) and the
/// fast path takes at their expectation (see `sim::fast`), within 0.5%.
#[test]
fn without_jitter_the_fast_path_is_the_timeline() {
    for (model, system, tp, pp, batch, layers) in [
        ("deepseek-v3", "h200-hgx-2node-ib", 8, 2, 1, 6),
        ("kimi-k2.5", "rtx-pro-6000-2node-roce", 4, 4, 37, 8),
        ("llama-3.1-70b", "rtx-pro-6000-8x-pcie", 2, 4, 130, 9),
        ("llama-3.1-70b", "rtx-pro-6000-2node-roce", 8, 2, 3, 6),
        ("llama-3.1-70b", "h200-hgx-2node-ib", 4, 4, 256, 8),
        ("qwen3-235b-a22b", "h200-hgx-2node-ib", 4, 2, 256, 5),
        // A deep pipeline: its middle stages play the same (each played once per row) and its
        // schedule repeats within a few cycles (the fast path stops there).
        ("llama-3.1-70b", "h200-hgx-18node-ib", 8, 18, 200, 80),
    ] {
        let mut req = ScenarioRequest {
            model: model.into(),
            system: system.into(),
            tp: Some(tp),
            batch,
            context: 4096,
            layers: Some(layers),
            ..ScenarioRequest::default()
        };
        req.pp = Some(pp);
        let (s, mut p) = req.load().expect("loads");
        p.variability.kernel_cv = 0.0;
        p.variability.rank_skew_cv = 0.0;
        p.variability.collective_cv = 0.0;
        p.variability.launch_skew_us = 0.0;
        let fast = FastScenario::new(&s, &p, None).expect("fitted");
        if pp == 18 {
            // 80 layers over 18 stages: stages of 5 and of 4 layers, the first and last apart.
            assert!(
                fast.distinct_stages() <= 4,
                "{} distinct stages",
                fast.distinct_stages()
            );
        }
        let quick = fast.step_us(
            s.batch,
            s.context,
            &Launch::new(&p, s.cuda_graphs),
            &Collectives::new(&s, &p).expect("collectives"),
        );
        let sim = simulate_loaded(s.clone(), p.clone()).expect("simulates");
        let full = sim.timeline.step_time_us();
        let tol = if s.model.moe.is_some() { 5e-3 } else { 1e-9 };
        assert!(
            (quick - full).abs() <= tol * full,
            "{}: fast {quick} vs timeline {full}",
            label(&s, &p)
        );
    }
}

use common::decodesim_exit as run;

/// A CSV sweep's header and rows, split at commas (no field of a sweep row holds one).
fn csv_table(out: &str) -> (Vec<&str>, Vec<Vec<&str>>) {
    let mut lines = out.lines();
    let header = lines.next().expect("header").split(',').collect();
    (header, lines.map(|l| l.split(',').collect()).collect())
}

/// `sweep --pp 1,2,4` writes one row per (pp, batch, context), each with the fast path's price
/// of that scenario alone (memo cleared), and its pp in the `pp` column.
#[test]
fn sweep_rows_over_pp_equal_each_scenario_priced_alone() {
    let (code, out, err) = run(&[
        "sweep",
        "--model",
        "deepseek-v3",
        "--system",
        "h200-hgx-2node-ib",
        "--tp",
        "4",
        "--pp",
        "1,2,4",
        "--batch",
        "1,9,64",
        "--context",
        "1024,8192",
        "--format",
        "csv",
    ]);
    assert_eq!(code, 0, "{err}");
    let (header, rows) = csv_table(&out);
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let (pp_c, b_c, c_c, st_c) = (col("pp"), col("batch"), col("context"), col("step_time_us"));
    assert_eq!(rows.len(), 3 * 3 * 2);
    let mut checked = 0;
    for pp in [1u32, 2, 4] {
        let mut req = ScenarioRequest {
            model: "deepseek-v3".into(),
            system: "h200-hgx-2node-ib".into(),
            tp: Some(4),
            ..ScenarioRequest::default()
        };
        req.pp = Some(pp);
        let (s, p) = req.load().expect("loads");
        let fast = FastScenario::new(&s, &p, None).expect("fitted");
        let (launch, coll) = (
            Launch::new(&p, s.cuda_graphs),
            Collectives::new(&s, &p).expect("collectives"),
        );
        for r in rows.iter().filter(|r| r[pp_c] == pp.to_string()) {
            let (b, c): (u32, u64) = (r[b_c].parse().unwrap(), r[c_c].parse().unwrap());
            fast.clear_memo();
            let alone = fast.step_us(b, c, &launch, &coll);
            let row: f64 = r[st_c].parse().unwrap();
            assert!(
                (row - alone).abs() <= 0.0005 + 1e-12 * alone,
                "pp {pp} batch {b} context {c}: row {row} vs alone {alone}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 18);
    // Two stages halve the layers a GPU runs: at batch 1 the step is longer (the same layers
    // plus a send), but a pp 2 row is not a pp 1 row.
    let step = |pp: &str, b: &str, c: &str| -> f64 {
        rows.iter()
            .find(|r| r[pp_c] == pp && r[b_c] == b && r[c_c] == c)
            .expect("row")[st_c]
            .parse()
            .unwrap()
    };
    assert!(step("2", "1", "1024") > step("1", "1", "1024"));
}

/// A sweep along its batch axis plays each (stage, micro-batch size, contexts) once and hands it
/// out again at the next batch of the same sizes: every row of a grid whose batches share their
/// micro-batch sizes (pp 4: batches 8..=15 split in micro-batches of 2 to 4), over eight
/// contexts (one row's lanes), two NCCL protocols and CUDA graphs on and off, equals that
/// scenario priced alone with a fresh memo, to the CSV's last digit.
#[test]
fn sweep_rows_sharing_micro_batch_sizes_equal_each_priced_alone() {
    let (code, out, err) = run(&[
        "sweep",
        "--model",
        "deepseek-v3",
        "--system",
        "h200-hgx-2node-ib",
        "--tp",
        "4",
        "--pp",
        "4",
        "--batch",
        "8..=15",
        "--context",
        "1000..=1007",
        "--nccl-proto",
        "LL,Simple",
        "--cuda-graphs",
        "on,off",
        "--format",
        "csv",
    ]);
    assert_eq!(code, 0, "{err}");
    let (header, rows) = csv_table(&out);
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let (b_c, c_c, st_c, pr_c, g_c) = (
        col("batch"),
        col("context"),
        col("step_time_us"),
        col("nccl_proto"),
        col("cuda_graphs"),
    );
    assert_eq!(rows.len(), 8 * 8 * 2 * 2);
    let mut req = ScenarioRequest {
        model: "deepseek-v3".into(),
        system: "h200-hgx-2node-ib".into(),
        tp: Some(4),
        ..ScenarioRequest::default()
    };
    req.pp = Some(4);
    let (s, p) = req.load().expect("loads");
    let fast = FastScenario::new(&s, &p, None).expect("fitted");
    let mut checked = 0;
    for r in &rows {
        let (b, c): (u32, u64) = (r[b_c].parse().unwrap(), r[c_c].parse().unwrap());
        let mut s = s.clone();
        s.nccl.proto = match r[pr_c] {
            "LL" => Proto::Ll,
            "Simple" => Proto::Simple,
            other => panic!("protocol {other}"),
        };
        s.cuda_graphs = r[g_c] == "on";
        fast.clear_memo();
        let alone = fast.step_us(
            b,
            c,
            &Launch::new(&p, s.cuda_graphs),
            &Collectives::new(&s, &p).expect("collectives"),
        );
        let row: f64 = r[st_c].parse().unwrap();
        assert!(
            (row - alone).abs() <= 0.0005 + 1e-12 * alone,
            "batch {b} context {c} {} graphs {}: row {row} vs alone {alone}",
            r[pr_c],
            r[g_c]
        );
        checked += 1;
    }
    assert_eq!(checked, 256);
    // Graphs and protocols move the step: the memo does not hand one setting's play to another.
    let step = |proto: &str, graphs: &str| -> f64 {
        rows.iter()
            .find(|r| r[b_c] == "12" && r[c_c] == "1003" && r[pr_c] == proto && r[g_c] == graphs)
            .expect("row")[st_c]
            .parse()
            .unwrap()
    };
    assert_ne!(step("LL", "on"), step("LL", "off"));
    assert_ne!(step("LL", "on"), step("Simple", "on"));
}

/// A grid file takes `pp` as a list too; a pp the system cannot hold is refused by name.
#[test]
fn grid_files_take_pp_lists_and_refusals_name_the_value() {
    let dir = std::env::temp_dir().join(format!("decodesim-fastpp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let grid = dir.join("grid.toml");
    std::fs::write(
        &grid,
        "model = \"llama-3.1-70b\"\nsystem = \"rtx-pro-6000-8x-pcie\"\ntp = 2\npp = [1, 4]\nbatch = [1, 16]\ncontext = 2048\n",
    )
    .unwrap();
    let (code, out, err) = run(&["sweep", "--grid", grid.to_str().unwrap(), "--format", "csv"]);
    assert_eq!(code, 0, "{err}");
    // The pp column is the last but one (dp follows it).
    let pps: Vec<&str> = out
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').nth(1).unwrap())
        .collect();
    assert_eq!(pps, ["1", "1", "4", "4"]);
    let (code, _, err) = run(&[
        "sweep",
        "--tp",
        "4",
        "--pp",
        "1,4",
        "--batch",
        "1",
        "--context",
        "1024",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("--pp 4 with --tp 4 needs tp x pp = 16 GPUs"),
        "{err}"
    );
    // A pipeline's scenario counts once per stage against --max-work: 200 scenarios at pp 1
    // and 4 are 500 units, and each of the two layouts is loaded and fitted (100,000 each).
    let (code, _, err) = run(&[
        "sweep",
        "--tp",
        "2",
        "--pp",
        "1,4",
        "--batch",
        "1..=100",
        "--context",
        "1024",
        "--max-work",
        "200499",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("the grid of 200 scenarios (2 pipeline sizes × 100 batches")
            && err.contains("about 200,500 work units, above --max-work 200499"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `sweep --intervals` over a pp list: the decisions' tokens/s intervals are drawn on each
/// row's own pipeline size and bracket the row's tokens/s.
#[test]
fn sweep_intervals_run_over_pp() {
    let (code, out, err) = run(&[
        "sweep",
        "--system",
        "rtx-pro-6000-2node-roce",
        "--tp",
        "8",
        "--pp",
        "1,2",
        "--batch",
        "1,32",
        "--context",
        "4096",
        "--format",
        "csv",
        "--pareto",
        "--intervals",
        "--draws",
        "50",
    ]);
    assert_eq!(code, 0, "{err}");
    let (header, rows) = csv_table(&out);
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let (pp_c, t_c, p5_c, p95_c) = (
        col("pp"),
        col("tokens_per_s"),
        col("tokens_per_s_p5"),
        col("tokens_per_s_p95"),
    );
    assert!(rows.iter().any(|r| r[pp_c] == "2"), "{out}");
    for r in &rows {
        let (t, p5, p95): (f64, f64, f64) = (
            r[t_c].parse().unwrap(),
            r[p5_c].parse().unwrap(),
            r[p95_c].parse().unwrap(),
        );
        // The RTX PRO 6000's whole-step error (σ 0.17 of ln) spans about ±28% at p5-p95.
        assert!(p5 < t && t < p95 && p95 - p5 < t, "{r:?}");
    }
}
