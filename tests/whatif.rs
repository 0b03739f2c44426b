//! `whatif`: speculative decoding built from real draft and verify workloads.

use decodesim::scenario::Scenario;
use decodesim::sim::ScenarioRequest;
use decodesim::whatif::acceptance::Acceptance;
use decodesim::whatif::draft::{Draft, Method};
use decodesim::whatif::spec_decode::{self, SpecDecodeRequest};
use decodesim::workload::CostFamily;

fn request(acceptance: Acceptance, ks: Vec<u32>) -> SpecDecodeRequest {
    SpecDecodeRequest {
        base: ScenarioRequest {
            layers: Some(4),
            ..ScenarioRequest::default()
        },
        method: Method::Eagle3,
        draft: None,
        acceptance,
        draft_tokens: ks,
        crossover_batches: vec![],
        mc_users: 200,
        output_tokens: 64,
    }
}

fn scenario(batch: u32) -> Scenario {
    let (mut s, _) = ScenarioRequest {
        layers: Some(4),
        ..ScenarioRequest::default()
    }
    .load()
    .unwrap();
    s.batch = batch;
    s
}

#[test]
fn higher_acceptance_never_lowers_tokens_per_s() {
    let ks = vec![1, 3, 6];
    let mut last: Option<Vec<f64>> = None;
    for r in [0.0, 0.2, 0.35, 0.5, 0.8, 1.0] {
        let study = spec_decode::run(&request(Acceptance::rate(r).unwrap(), ks.clone())).unwrap();
        let tps: Vec<f64> = study.variants.iter().map(|v| v.tokens_per_s).collect();
        if let Some(prev) = &last {
            for (a, b) in prev.iter().zip(&tps) {
                assert!(b >= a, "acceptance {r}: {b} < {a}");
            }
        }
        last = Some(tps);
    }
    // Per-position rates: raising one position never lowers it either.
    let lo = spec_decode::run(&request(
        Acceptance::per_position(vec![0.7, 0.5, 0.3]).unwrap(),
        vec![3],
    ))
    .unwrap();
    let hi = spec_decode::run(&request(
        Acceptance::per_position(vec![0.7, 0.6, 0.3]).unwrap(),
        vec![3],
    ))
    .unwrap();
    assert!(hi.variants[0].tokens_per_s >= lo.variants[0].tokens_per_s);
}

#[test]
fn verify_pass_allreduce_bytes_scale_with_k_plus_one() {
    for batch in [1u32, 32] {
        let s = scenario(batch);
        for k in [1u32, 3, 6] {
            let w = spec_decode::verify_workload(&s, k);
            let expect = batch as u64 * (k as u64 + 1) * s.model.hidden as u64 * 2;
            let ars: Vec<u64> = w
                .ops
                .iter()
                .filter(|o| o.family == CostFamily::AllReduce)
                .map(|o| o.message_bytes)
                .collect();
            assert_eq!(ars.len(), 1 + 2 * s.model.num_layers);
            assert!(
                ars.iter().all(|&b| b == expect),
                "batch {batch} k {k}: {ars:?}"
            );
            // Every GEMM's M is the query-token count.
            for o in w
                .ops
                .iter()
                .filter(|o| o.family == CostFamily::GemmBf16 && o.shape.batch == 1)
            {
                assert_eq!(o.shape.m, batch as u64 * (k as u64 + 1), "{}", o.name);
            }
            assert!(w
                .ops
                .iter()
                .any(|o| o.kernel == "rejection_greedy_sample_kernel"));
        }
    }
}

#[test]
fn draft_passes_are_real_kernel_sequences_with_allreduces() {
    let s = scenario(8);
    let draft = Draft::load(Method::Eagle3, None, &s.model).unwrap();
    let ds = draft.scenario(&s).unwrap();
    let w = spec_decode::draft_workload(&draft, &ds, 3);
    // Per pass: embedding + attention + MLP allreduces.
    let ars = w
        .ops
        .iter()
        .filter(|o| o.family == CostFamily::AllReduce)
        .count();
    assert_eq!(ars, 3 * 3);
    let first_ar = w
        .ops
        .iter()
        .find(|o| o.family == CostFamily::AllReduce)
        .unwrap();
    assert_eq!(
        first_ar.message_bytes,
        8 * 4 * 7168 * 2,
        "the first pass runs over k+1 positions"
    );
    assert!(w.ops.iter().any(|o| o.name.ends_with("eagle3_fc")));
    assert!(w.ops.iter().any(|o| o.name.starts_with("draft2.")));
}

#[test]
fn bad_input_is_refused_by_name() {
    let err = |r: SpecDecodeRequest| spec_decode::run(&r).unwrap_err().to_string();
    let e = err(request(Acceptance::rate(0.3).unwrap(), vec![9]));
    assert!(e.contains("--draft-tokens 9") && e.contains("1..=8"), "{e}");
    assert!(Acceptance::rate(1.5)
        .unwrap_err()
        .to_string()
        .contains("[0, 1]"));
    assert!(Acceptance::rate(-0.1).is_err());
    let e = err(request(
        Acceptance::per_position(vec![0.8, 0.5]).unwrap(),
        vec![3],
    ));
    assert!(e.contains("--acceptance-per-position"), "{e}");
    // Kimi-K2.5 has no MTP head.
    let mut r = request(Acceptance::rate(0.3).unwrap(), vec![1]);
    r.method = Method::Mtp;
    let e = err(r);
    assert!(e.contains("num_nextn_predict_layers"), "{e}");

    let dir = std::env::temp_dir().join(format!("decodesim-whatif-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("models/drafts/kimi-k2.5-eagle3-mla.json"),
    )
    .unwrap();
    for (field, from, to) in [
        (
            "hidden_size",
            "\"hidden_size\": 7168",
            "\"hidden_size\": 4096",
        ),
        (
            "vocab_size",
            "\"vocab_size\": 163840",
            "\"vocab_size\": 32000",
        ),
        (
            "draft_vocab_size",
            "\"draft_vocab_size\": 32000",
            "\"draft_vocab_size\": 200000",
        ),
    ] {
        let path = dir.join(format!("{field}.json"));
        std::fs::write(&path, base.replace(from, to)).unwrap();
        let mut r = request(Acceptance::rate(0.3).unwrap(), vec![1]);
        r.draft = Some(path.display().to_string());
        let e = err(r);
        assert!(e.contains(field), "{field}: {e}");
    }
    // A draft model with another vocabulary cannot pair with the target.
    let mut r = request(Acceptance::rate(0.3).unwrap(), vec![1]);
    r.method = Method::DraftModel;
    r.draft = Some("llama-3.1-70b".into());
    let e = err(r);
    assert!(e.contains("vocab_size"), "{e}");
}

#[test]
fn mtp_runs_for_deepseek_and_crossover_is_found() {
    let mut r = request(Acceptance::rate(0.8).unwrap(), vec![1, 2]);
    r.method = Method::Mtp;
    r.base.model = "deepseek-v3".into();
    r.crossover_batches = vec![1, 64];
    let study = spec_decode::run(&r).unwrap();
    assert_eq!(study.variants.len(), 2);
    let c = study.crossover.as_ref().unwrap();
    assert_eq!(c.grid.len(), 2);
    for v in &study.variants {
        assert!(v.draft_time_us > 0.0 && v.verify_time_us > study.baseline_step_us() * 0.9);
        assert!(v.tpot_ms[0] <= v.tpot_ms[1] && v.tpot_ms[1] <= v.tpot_ms[2]);
    }
}

/// The fast path against the full timeline, jitter off in both: 200 random scenarios.
#[test]
fn fast_path_matches_the_timeline() {
    use decodesim::sim::fast::{Collectives, FastScenario, Launch};
    use decodesim::sim::{simulate_loaded, Engine, Timeline};
    use rand::Rng;
    let (base, mut profile) = ScenarioRequest::default().load().unwrap();
    profile.variability.kernel_cv = 0.0;
    profile.variability.rank_skew_cv = 0.0;
    profile.variability.collective_cv = 0.0;
    profile.variability.launch_skew_us = 0.0;
    let draft = Draft::load(Method::Eagle3, None, &base.model).unwrap();
    let fast = FastScenario::new(&base, &profile, Some(&draft.drafter)).unwrap();
    let mut rng = decodesim::rng::seeded(9);
    let contexts = [1024u64, 2048, 4096, 8192, 16384, 32768, 65536, 131072];
    let (mut engine, mut tl) = (Engine::new(), Timeline::default());
    let mut worst = 0.0f64;
    for i in 0..200 {
        let mut s = base.clone();
        s.batch = rng.random_range(1..=256);
        s.context = contexts[rng.random_range(0..contexts.len())];
        s.cuda_graphs = rng.random_bool(0.5);
        s.nccl.proto = if rng.random_bool(0.5) {
            decodesim::scenario::Proto::Ll
        } else {
            decodesim::scenario::Proto::Simple
        };
        s.seed = i;
        // One in three is a speculative step.
        let k = if i % 3 == 0 {
            rng.random_range(1..=5)
        } else {
            0
        };
        let launch = Launch::new(&profile, s.cuda_graphs);
        let coll = Collectives::new(&s, &profile).unwrap();
        let (full, quick) = if k == 0 {
            let sim = simulate_loaded(s.clone(), profile.clone()).unwrap();
            (
                sim.step_time_us(),
                fast.step_us(s.batch, s.context, &launch, &coll),
            )
        } else {
            let c = spec_decode::step_cost(&s, &draft, &profile, k, &mut engine, &mut tl).unwrap();
            let q = fast
                .spec_step_us(s.batch, s.context, k, &launch, &coll)
                .unwrap();
            (c.draft_us + c.verify_us + c.host_us, q.2)
        };
        let err = (quick - full).abs() / full;
        worst = worst.max(err);
        assert!(
            err < 0.005,
            "scenario {i}: batch {} context {} graphs {} proto {} k {k}: fast {quick:.1} vs timeline {full:.1} ({:.3}%)",
            s.batch, s.context, s.cuda_graphs, s.nccl.proto, err * 100.0
        );
    }
    eprintln!(
        "fast path: worst error {:.3}% over 200 scenarios",
        worst * 100.0
    );
}

/// `whatif spec-decode --plot/--plot-heatmap` with a list of acceptance rates, end to end; bad
/// names refused before any simulation.
#[test]
fn spec_decode_plots_from_the_command_line() {
    let d = std::env::temp_dir().join(format!("decodesim-sd-plot-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "whatif",
            "spec-decode",
            "--layers",
            "4",
            "--draft-tokens",
            "1..3",
            "--crossover-batches",
            "1,4,32",
            "--mc-users",
            "50",
        ];
        args.extend_from_slice(extra);
        std::process::Command::new(env!("CARGO_BIN_EXE_decodesim"))
            .args(&args)
            .output()
            .unwrap()
    };
    let (lines, heat) = (d.join("s.png"), d.join("h.svg"));
    let out = run(&[
        "--acceptance-rate",
        "0.3,0.6",
        "--plot",
        lines.to_str().unwrap(),
        "--plot-heatmap",
        heat.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One study per rate, each with every k's speedup at every crossover batch.
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let studies = v.as_array().unwrap();
    assert_eq!(studies.len(), 2);
    for s in studies {
        let grid = s["crossover"]["grid"].as_array().unwrap();
        assert_eq!(grid.len(), 3);
        assert_eq!(
            grid[0]["speedup_by_draft_tokens"].as_array().unwrap().len(),
            3
        );
    }
    // A higher acceptance never lowers the speedup of any k at any batch.
    let speedups = |s: &serde_json::Value| -> Vec<f64> {
        s["crossover"]["grid"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["speedup_by_draft_tokens"].as_array().unwrap().clone())
            .map(|x| x["speedup"].as_f64().unwrap())
            .collect()
    };
    let (lo, hi) = (speedups(&studies[0]), speedups(&studies[1]));
    assert_eq!(lo.len(), 9);
    assert!(lo.iter().zip(&hi).all(|(l, h)| h >= l), "{lo:?} {hi:?}");
    let png = std::fs::read(&lines).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 5_000);
    let svg = std::fs::read_to_string(&heat).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("acceptance rate 0.6"));

    for (args, want) in [
        (
            vec!["--acceptance-rate", "0.3", "--plot", "x.jpg"],
            "svg or .png",
        ),
        (
            vec![
                "--acceptance-rate",
                "0.3",
                "--plot",
                "x.png",
                "--crossover-batches",
                "none",
            ],
            "crossover-batches",
        ),
        (
            vec!["--plot-heatmap", "x.png", "--acceptance-rate", "0.3,1.2"],
            "[0, 1]",
        ),
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(want),
            "{args:?}: {err}"
        );
    }
    assert!(!std::path::Path::new("x.png").exists());
}
