//! Intervals on every answer: Monte Carlo draws of the uncertain prices over the fast path.

mod common;

use common::{decodesim_bin, scratch};
use decodesim::scenario::routing::Routing;
use decodesim::scenario::Proto;
use decodesim::sim::{simulate, ScenarioRequest};
use decodesim::whatif::uncertainty::{
    scenario_intervals, scenario_intervals_with, timeline_step_ratios, vary_intervals, Drawn,
    Interval, ModelError, StepError, Target, Uncertainty, Verdict,
};
use decodesim::whatif::vary::{self, VaryRequest};
use std::path::{Path, PathBuf};

const ESTIMATE: &str = "data/calibration/rtx-pro-6000-estimate/profile.toml";

fn root(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The law-priced profile (no AIConfigurator tables, identity factors) under a scenario that
/// states its routing: nothing is uncertain.
fn plain_request() -> ScenarioRequest {
    ScenarioRequest {
        layers: Some(4),
        calibration: Some(root(ESTIMATE).display().to_string()),
        routing: Some(Routing::Uniform),
        ..ScenarioRequest::default()
    }
}

/// The estimate profile with `extra` TOML appended, written under a scratch folder.
fn profile_with(name: &str, extra: &str) -> PathBuf {
    let dir = scratch(name);
    let text = std::fs::read_to_string(root(ESTIMATE)).unwrap();
    let path = dir.join("profile.toml");
    std::fs::write(&path, format!("{text}\n{extra}\n")).unwrap();
    path
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

#[test]
fn without_intervals_tables_or_model_error_the_interval_is_the_point() {
    let sim = simulate(&plain_request()).unwrap();
    let none = ModelError::default();
    let u = Uncertainty::from_profile_with(&sim.profile, &sim.scenario, &none).unwrap();
    assert!(u.is_empty(), "{u:?}");
    let (iv, _) = scenario_intervals_with(
        &sim.scenario,
        &sim.profile,
        sim.step_time_us(),
        sim.tokens_per_s(),
        200,
        1,
        &none,
    )
    .unwrap();
    let iv = iv.unwrap();
    for q in [iv.step_time_us.p5, iv.step_time_us.p50, iv.step_time_us.p95] {
        assert!(
            rel(q, sim.step_time_us()) < 1e-9,
            "{q} vs {}",
            sim.step_time_us()
        );
    }
    for q in [iv.tokens_per_s.p5, iv.tokens_per_s.p50, iv.tokens_per_s.p95] {
        assert!(
            rel(q, sim.tokens_per_s()) < 1e-9,
            "{q} vs {}",
            sim.tokens_per_s()
        );
    }
}

/// The model's own error is drawn for every answer: the bundled file's σ per family (from the
/// H200 validation) reach the families they name, so even a profile with nothing uncertain of
/// its own has an interval around its point. (On the default GPU, which has a whole-step error
/// of its own, that one replaces them: held apart here by leaving the step errors out.)
#[test]
fn the_models_own_error_is_drawn_from_the_bundled_file() {
    let sim = simulate(&plain_request()).unwrap();
    let bundled = ModelError::bundled().unwrap();
    assert!(bundled.path.ends_with("data/calibration/model_error.toml"));
    let mut families_only = bundled.clone();
    families_only.steps.clear();
    let u = Uncertainty::from_profile_with(&sim.profile, &sim.scenario, &families_only).unwrap();
    assert!(!u.is_empty());
    for name in ["moe", "gemm", "attention", "communication"] {
        let src = u
            .sources
            .iter()
            .find(|x| x.name() == format!("model_{name}"))
            .unwrap_or_else(|| panic!("model_{name} in {u:?}"));
        assert_eq!(src.sigma, bundled.sigma[name]);
        assert!(src.provenance().contains("model_error.toml"), "{src:?}");
    }
    let idle = u.sources.iter().find(|x| x.name() == "model_idle").unwrap();
    assert_eq!(idle.target, Target::Idle);
    assert_eq!(idle.sigma, bundled.idle_sigma_us);
    let (iv, _) = scenario_intervals_with(
        &sim.scenario,
        &sim.profile,
        sim.step_time_us(),
        sim.tokens_per_s(),
        200,
        1,
        &families_only,
    )
    .unwrap();
    let s = iv.unwrap().step_time_us;
    let point = sim.step_time_us();
    assert!(s.p5 < point && point < s.p95, "{s:?} vs {point}");
    assert!(rel(s.p50, point) < 0.02, "{s:?} vs {point}");
    // With the bundled step errors, this GPU draws its own whole-step error in their place.
    let u = Uncertainty::from_profile(&sim.profile, &sim.scenario).unwrap();
    let names: Vec<&str> = u.sources.iter().map(|x| x.name()).collect();
    assert!(names.contains(&"model_step"), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("model_") && *n != "model_step"),
        "{names:?}"
    );
    let (iv, _) = scenario_intervals(
        &sim.scenario,
        &sim.profile,
        sim.step_time_us(),
        sim.tokens_per_s(),
        200,
        1,
    )
    .unwrap();
    let s = iv.unwrap().step_time_us;
    assert!(s.p5 < point && point < s.p95, "{s:?} vs {point}");
}

#[test]
fn a_malformed_model_error_file_names_the_file_and_field() {
    let dir = scratch("intervals_bad_model_error");
    std::fs::create_dir_all(&dir).unwrap();
    for (text, field, says) in [
        ("[sigma]\nmoe = -0.1\n", "sigma.moe", "[0, 2]"),
        ("[sigma]\nwarp = 0.1\n", "sigma.warp", "attention"),
        (
            "[sigma]\nmoe = 0.1\n[idle]\nsigma_us = \"x\"\n",
            "idle.sigma_us",
            "µs",
        ),
        ("[idle]\nsigma_us = 1.0\n", "sigma", "[sigma]"),
    ] {
        let p = dir.join("model_error.toml");
        std::fs::write(&p, text).unwrap();
        let e = ModelError::from_file(&p).unwrap_err().to_string();
        assert!(e.contains("model_error.toml"), "{e}");
        assert!(e.contains(field), "{e}");
        assert!(e.contains(says), "{e}");
    }
}

/// Same seed, same interval, across processes too: nothing drawn or summed depends on a hash
/// map's per-process order (the tables' interpolation errors were once summed in it).
#[test]
fn intervals_are_the_same_in_every_process() {
    let run = || {
        let (ok, out, err) = decodesim_bin(&["simulate", "--layers", "4", "--format", "json"]);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["intervals"].to_string()
    };
    let first = run();
    for _ in 0..3 {
        assert_eq!(run(), first);
    }
}

#[test]
fn a_malformed_step_error_file_names_the_file_and_field() {
    let dir = scratch("intervals_bad_step_error");
    std::fs::create_dir_all(&dir).unwrap();
    let good = "gpu = \"g\"\nsigma = 0.1\nrho = 0.5\npoints = 8\ntokens = [1, 128]\n";
    for (text, field, says) in [
        ("[x]\n".to_string(), "step", "[step]"),
        (
            format!("[step]\n{}", good.replace("sigma = 0.1", "sigma = 3.0")),
            "step.sigma",
            "[0, 2]",
        ),
        (
            format!("[step]\n{}", good.replace("rho = 0.5", "rho = 1.0")),
            "step.rho",
            "[0, 1)",
        ),
        (
            format!("[step]\n{}", good.replace("points = 8", "points = 2")),
            "step.points",
            "at least 3",
        ),
        (
            format!("[step]\n{}", good.replace("[1, 128]", "[128, 1]")),
            "step.tokens",
            "low <= high",
        ),
        (
            format!("[step]\n{}", good.replace("gpu = \"g\"", "gpu = \"\"")),
            "step.gpu",
            "GPU name",
        ),
    ] {
        let p = dir.join("bad.toml");
        std::fs::write(&p, text).unwrap();
        let e = StepError::from_file(&p).unwrap_err().to_string();
        assert!(e.contains("bad.toml"), "{e}");
        assert!(e.contains(field), "{e}");
        assert!(e.contains(says), "{e}");
    }
    let p = dir.join("good.toml");
    std::fs::write(&p, format!("[step]\n{good}")).unwrap();
    let e = StepError::from_file(&p).unwrap();
    assert_eq!(
        (e.gpu.as_str(), e.sigma, e.rho, e.points),
        ("g", 0.1, 0.5, 8)
    );
}

/// On the GPU the per-family error was validated on (H200) no whole-step error is drawn; on
/// the development set's GPU its own is; on a GPU with neither (B200) the widest stands in,
/// and says so.
#[test]
fn the_whole_step_error_goes_to_the_gpus_without_a_trace_validation() {
    let bundled = ModelError::bundled().unwrap();
    assert_eq!(bundled.gpu.as_deref(), Some("h200-sxm"));
    assert!(bundled.steps.iter().any(|e| e.gpu == "rtx-pro-6000-server"));
    for (system, expect) in [
        ("h200-8x-nvlink", None),
        ("rtx-pro-6000-8x-pcie", Some("on rtx-pro-6000-server")),
        ("b200-8x-nvlink", Some("standing in for b200")),
    ] {
        let (ok, out, err) = decodesim_bin(&[
            "simulate", "--layers", "4", "--system", system, "--format", "json", "--draws", "50",
        ]);
        assert!(ok, "{system}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let step = v["intervals"]["sources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == "model_step")
            .cloned();
        match expect {
            None => assert!(step.is_none(), "{system}: {step:?}"),
            Some(says) => {
                let p = step.unwrap_or_else(|| panic!("{system}: no model_step"));
                assert!(
                    p["provenance"].as_str().unwrap().contains(says),
                    "{system}: {p}"
                );
            }
        }
    }
}

/// Where the fast path refuses a scenario (decode-context parallelism: its KV-cache write is
/// not linear in the fast path's basis), the draws act on the timeline's prices: the answer
/// has an interval, and a what-if over it a verdict.
#[test]
fn dcp_answers_carry_intervals_drawn_through_the_timeline() {
    let (ok, out, err) = decodesim_bin(&[
        "simulate", "--layers", "4", "--dcp", "2", "--format", "json", "--draws", "50",
    ]);
    assert!(ok, "{err}");
    assert!(!err.contains("no interval"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let s = &v["intervals"]["step_time_us"];
    let (p5, p95) = (s["p5"].as_f64().unwrap(), s["p95"].as_f64().unwrap());
    let point = v["step_time_us"].as_f64().unwrap();
    assert!(p5 < point && point < p95, "{s} vs {point}");
    let (ok, out, err) = decodesim_bin(&[
        "whatif", "--layers", "4", "--vary", "dcp=1,2", "--format", "json", "--draws", "50",
    ]);
    assert!(ok, "{err}");
    assert!(!err.contains("no interval"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["draws"], 50);
    for x in v["variants"].as_array().unwrap() {
        let sp = &x["intervals"]["speedup"];
        assert!(
            sp["p5"].as_f64().unwrap() <= sp["p95"].as_f64().unwrap(),
            "{x}"
        );
        assert!(x["verdict"].is_string(), "{x}");
    }
    // Speculative decoding over DCP: every window on the timeline, paired with the plain step.
    let (ok, out, err) = decodesim_bin(&[
        "whatif",
        "spec-decode",
        "--layers",
        "4",
        "--dcp",
        "2",
        "--draft-tokens",
        "1,2",
        "--acceptance-rate",
        "0.6",
        "--crossover-batches",
        "none",
        "--format",
        "json",
        "--draws",
        "50",
    ]);
    assert!(ok, "{err}");
    assert!(!err.contains("no interval"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["draws"], 50);
    for x in v["variants"].as_array().unwrap() {
        let sp = &x["intervals"]["speedup"];
        let (p5, p50, p95) = (
            sp["p5"].as_f64().unwrap(),
            sp["p50"].as_f64().unwrap(),
            sp["p95"].as_f64().unwrap(),
        );
        assert!(p5 < p50 && p50 < p95, "{x}");
        assert!(x["verdict"].is_string(), "{x}");
    }
}

/// The timeline's draws and the fast path's agree where both price a scenario: the same seeded
/// draws on the default 4-layer step give quantiles within 2% of each other.
#[test]
fn timeline_draws_agree_with_the_fast_paths() {
    let sim = simulate(&ScenarioRequest {
        layers: Some(4),
        ..ScenarioRequest::default()
    })
    .unwrap();
    let (s, p) = (&sim.scenario, &sim.profile);
    let u = Uncertainty::from_profile(p, s).unwrap();
    let fast = Drawn::new(s, p, None, 200, 9)
        .unwrap()
        .step_ratios(s.batch, s.context);
    let timeline = timeline_step_ratios(s, p, &u, 200, 9).unwrap();
    let (f, t) = (Interval::of(&fast), Interval::of(&timeline));
    for (a, b) in [(f.p5, t.p5), (f.p50, t.p50), (f.p95, t.p95)] {
        assert!(rel(a, b) < 0.02, "fast {f:?} timeline {t:?}");
    }
    assert!(t.p95 - t.p5 > 0.05, "{t:?}");
}

#[test]
fn fewer_than_fifty_draws_are_refused_for_an_interval() {
    for args in [
        &["simulate", "--layers", "4", "--draws", "1"][..],
        &["simulate", "--layers", "4", "--draws", "49"][..],
        &["sweep", "--batch", "1,16", "--intervals", "--draws", "0"][..],
        &["sweep", "--batch", "1,16", "--intervals", "--draws", "10"][..],
    ] {
        let (ok, _, err) = decodesim_bin(args);
        assert!(!ok, "{args:?}");
        assert!(err.contains("--draws"), "{args:?}: {err}");
        assert!(err.contains("50"), "{args:?}: {err}");
    }
    // 0 still turns a command's intervals off, and 50 is enough.
    let (ok, _, err) = decodesim_bin(&["simulate", "--layers", "4", "--draws", "50"]);
    assert!(ok, "{err}");
}

/// A PCIe all-reduce-bound step (Simple protocol, batch 256: megabyte messages over PCIe).
fn allreduce_bound(profile: &Path) -> ScenarioRequest {
    ScenarioRequest {
        batch: 256,
        proto: Proto::Simple,
        calibration: Some(profile.display().to_string()),
        ..plain_request()
    }
}

#[test]
fn a_wide_bandwidth_interval_widens_an_allreduce_bound_step_around_its_point() {
    let p = profile_with(
        "intervals_wide_bw",
        "[fit.from_throughput]\ncollective_bw_scale_ci95 = [0.5, 2.0]",
    );
    let sim = simulate(&allreduce_bound(&p)).unwrap();
    // The factor's interval alone (the model's own error is another test's).
    let none = ModelError::default();
    let u = Uncertainty::from_profile_with(&sim.profile, &sim.scenario, &none).unwrap();
    assert_eq!(u.sources.len(), 1, "{u:?}");
    assert_eq!(u.sources[0].target, Target::CollectiveBandwidth);
    // ln 2 / 1.96: the stated interval is the draw's 95% interval.
    assert!((u.sources[0].sigma - 2f64.ln() / 1.959964).abs() < 1e-6);
    let point = sim.step_time_us();
    let (iv, _) = scenario_intervals_with(
        &sim.scenario,
        &sim.profile,
        point,
        sim.tokens_per_s(),
        400,
        3,
        &none,
    )
    .unwrap();
    let iv = iv.unwrap();
    let s = iv.step_time_us;
    assert!(s.p5 < point && point < s.p95, "{s:?} vs {point}");
    assert!((s.p95 - s.p5) / point > 0.15, "{s:?} vs {point}");
    // Tokens/s moves the other way.
    assert!(iv.tokens_per_s.p5 < sim.tokens_per_s() && sim.tokens_per_s() < iv.tokens_per_s.p95);
    // The same interval on a law with no bytes (latency only) would not move it: the draw
    // reaches the bytes term only. A narrow one narrows the step accordingly.
    let narrow = profile_with(
        "intervals_narrow_bw",
        "[fit.from_throughput]\ncollective_bw_scale_ci95 = [0.95, 1.0526]",
    );
    let sim2 = simulate(&allreduce_bound(&narrow)).unwrap();
    let (iv2, _) = scenario_intervals_with(
        &sim2.scenario,
        &sim2.profile,
        sim2.step_time_us(),
        sim2.tokens_per_s(),
        400,
        3,
        &none,
    )
    .unwrap();
    let iv2 = iv2.unwrap();
    let w2 = iv2.step_time_us.p95 - iv2.step_time_us.p5;
    assert!(w2 > 0.0 && w2 < (s.p95 - s.p5) / 5.0, "{w2} vs {s:?}");
}

#[test]
fn paired_draws_give_identical_arms_a_speedup_of_exactly_one() {
    // The default profile: tables, default routing (every source drawn).
    let req = VaryRequest {
        base: ScenarioRequest {
            layers: Some(4),
            ..ScenarioRequest::default()
        },
        axes: vary::parse_axes(&["nccl-proto=LL".into(), "batch=32,128".into()]).unwrap(),
        one_at_a_time: false,
    };
    let study = vary::run(&req).unwrap();
    let (base, arms) = vary_intervals(&req, &study, 200, 11).unwrap();
    assert!(
        base.tokens_per_s.p95 > base.tokens_per_s.p5 * 1.02,
        "{base:?}"
    );
    let mut seen = (false, false);
    for (v, a) in study.variants.iter().zip(&arms) {
        if v.label() == "nccl-proto=LL batch=32" {
            for q in [a.speedup.p5, a.speedup.p50, a.speedup.p95] {
                assert_eq!(q, 1.0, "{a:?}");
            }
            assert_eq!(a.verdict(), Verdict::CannotTell);
            assert_eq!(a.verdict().name(), "cannot tell");
            seen.0 = true;
        } else {
            // 4x the batch (weights read once for 4x the tokens): ~1.32x. The two steps share
            // most of the model's error across step sizes on this GPU (two doublings apart),
            // so the speedup stays above 1 at p5.
            assert!(a.speedup.p5 > 1.0 && a.speedup.p50 > 1.2, "{a:?}");
            assert_eq!(a.verdict().name(), "helps");
            assert!(a.speedup.p5 <= a.speedup.p50 && a.speedup.p50 <= a.speedup.p95);
            seen.1 = true;
        }
    }
    assert!(seen.0 && seen.1);
}

#[test]
fn seeds_make_intervals_reproducible() {
    let sim = simulate(&ScenarioRequest {
        layers: Some(4),
        ..ScenarioRequest::default()
    })
    .unwrap();
    let run = |seed| {
        scenario_intervals(
            &sim.scenario,
            &sim.profile,
            sim.step_time_us(),
            sim.tokens_per_s(),
            100,
            seed,
        )
        .unwrap()
        .0
        .unwrap()
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
}

#[test]
fn a_malformed_interval_names_the_file_and_field() {
    let p = profile_with(
        "intervals_bad_ci",
        "[fit.from_throughput]\nmoe_efficiency_ci95 = [1.2, 0.9]",
    );
    let (ok, _, err) = decodesim_bin(&[
        "simulate",
        "--layers",
        "4",
        "--calibration",
        p.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("profile.toml"), "{err}");
    assert!(
        err.contains("fit.from_throughput.moe_efficiency_ci95"),
        "{err}"
    );
    assert!(err.contains("low <= high"), "{err}");
}

#[test]
fn json_reports_carry_p5_p50_p95_and_verdicts() {
    let (ok, out, err) = decodesim_bin(&["simulate", "--layers", "4", "--format", "json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let iv = &v["intervals"];
    for k in ["step_time_us", "tokens_per_s"] {
        for q in ["p5", "p50", "p95"] {
            assert!(iv[k][q].as_f64().unwrap() > 0.0, "{k}.{q}: {iv}");
        }
    }
    assert_eq!(iv["draws"], 200);
    assert!(iv["sources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["name"] == "routing"));

    let (ok, out, err) = decodesim_bin(&[
        "whatif",
        "--layers",
        "4",
        "--vary",
        "nccl-proto=LL,Simple",
        "--draws",
        "50",
        "--format",
        "json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for x in v["variants"].as_array().unwrap() {
        let verdict = x["verdict"].as_str().unwrap();
        assert!(["helps", "hurts", "cannot tell"].contains(&verdict), "{x}");
        for q in ["p5", "p50", "p95"] {
            assert!(x["intervals"]["speedup"][q].as_f64().unwrap() > 0.0, "{x}");
        }
    }

    let (ok, out, err) = decodesim_bin(&[
        "whatif",
        "spec-decode",
        "--layers",
        "4",
        "--acceptance-rate",
        "0.7",
        "--draft-tokens",
        "1,3",
        "--crossover-batches",
        "none",
        "--draws",
        "50",
        "--format",
        "json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let vs = v["variants"].as_array().unwrap();
    assert_eq!(vs.len(), 2);
    for x in vs {
        let s = &x["intervals"]["speedup"];
        let (p5, p50, p95) = (
            s["p5"].as_f64().unwrap(),
            s["p50"].as_f64().unwrap(),
            s["p95"].as_f64().unwrap(),
        );
        assert!(p5 <= p50 && p50 <= p95, "{x}");
        let want = if p5 > 1.0 {
            "helps"
        } else if p95 < 1.0 {
            "hurts"
        } else {
            "cannot tell"
        };
        assert_eq!(x["verdict"], want, "{x}");
    }

    // --draws 0 turns intervals off; too many draws is refused by name.
    let (ok, out, _) = decodesim_bin(&[
        "simulate", "--layers", "4", "--format", "json", "--draws", "0",
    ]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v.get("intervals").is_none());
    let (ok, _, err) = decodesim_bin(&["simulate", "--layers", "4", "--draws", "1000001"]);
    assert!(!ok);
    assert!(err.contains("--draws 1000001"), "{err}");
}

#[test]
fn sweep_and_capacity_carry_intervals_when_asked() {
    let (ok, out, err) = decodesim_bin(&[
        "sweep",
        "--batch",
        "1,16",
        "--format",
        "csv",
        "--pareto",
        "--intervals",
        "--draws",
        "50",
    ]);
    assert!(ok, "{err}");
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let (p5, p95, tps) = (
        header.iter().position(|h| *h == "tokens_per_s_p5").unwrap(),
        header
            .iter()
            .position(|h| *h == "tokens_per_s_p95")
            .unwrap(),
        header.iter().position(|h| *h == "tokens_per_s").unwrap(),
    );
    let rows: Vec<Vec<f64>> = lines
        .map(|l| {
            l.split(',')
                .map(|x| x.parse().unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 2);
    for r in &rows {
        assert!(r[p5] < r[tps] && r[tps] < r[p95], "{r:?}");
    }
    // The best rows of a JSON sweep carry their interval.
    let (ok, out, err) = decodesim_bin(&[
        "sweep",
        "--batch",
        "1,16",
        "--format",
        "json",
        "--intervals",
        "--draws",
        "50",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let best = &v["best"]["tokens_per_s"];
    let i = &best["tokens_per_s_interval"];
    let tps = best["tokens_per_s"].as_f64().unwrap();
    assert!(
        i["p5"].as_f64().unwrap() < tps && tps < i["p95"].as_f64().unwrap(),
        "{best}"
    );
    // Every row of a CSV would be a Monte Carlo each: refused, naming the flag.
    let (ok, _, err) =
        decodesim_bin(&["sweep", "--batch", "1,16", "--format", "csv", "--intervals"]);
    assert!(
        !ok && err.contains("--intervals") && err.contains("--pareto"),
        "{err}"
    );
    // Without the flag the sweep's columns are as before.
    let (ok, out, _) = decodesim_bin(&["sweep", "--batch", "1", "--format", "csv"]);
    assert!(ok && !out.contains("tokens_per_s_p5"));

    let (ok, out, err) = decodesim_bin(&[
        "capacity", "--layers", "4", "--points", "6", "--draws", "50", "--format", "json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let t = &v["throughput_interval"];
    let q = |k: &str| t["tokens_per_s"][k].as_f64().unwrap();
    assert!(q("p5") < q("p50") && q("p50") < q("p95"), "{t}");
    assert!(t["concurrency"].as_u64().unwrap() >= 1);
}

/// Expert-parallel what-ifs carry intervals (the fast path prices the slowest rank); where the
/// fast path refuses a scenario (expert parallelism inside a pipeline) the what-if still
/// answers, with points and a warning that names the refusal.
#[test]
fn whatif_intervals_on_expert_parallel_layouts_and_points_where_refused() {
    let json = |args: &[&str]| {
        let (ok, out, err) = decodesim_bin(args);
        assert!(ok, "{args:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        (v, err)
    };
    let common = [
        "--model",
        "kimi-k2.5",
        "--layers",
        "4",
        "--batch",
        "64",
        "--vary",
        "nccl-proto=LL,Simple",
        "--draws",
        "50",
        "--format",
        "json",
    ];
    for layout in [
        &["--system", "h200-8x-nvlink", "--tp", "8", "--ep", "8"][..],
        &[
            "--system",
            "h200-hgx-2node-ib",
            "--tp",
            "1",
            "--dp",
            "16",
            "--ep",
            "16",
            "--ep-comm",
            "rdma-ll",
        ][..],
    ] {
        let args = [&["whatif"][..], layout, &common].concat();
        let (v, err) = json(&args);
        assert!(!err.contains("no interval"), "{layout:?}: {err}");
        assert_eq!(v["draws"], 50, "{layout:?}: {v}");
        let s = &v["base"]["intervals"]["step_time_us"];
        let (p5, p95) = (s["p5"].as_f64().unwrap(), s["p95"].as_f64().unwrap());
        // The default power-law routing is uncertain: the interval has a width.
        assert!(p5 < p95, "{layout:?}: {s}");
        for x in v["variants"].as_array().unwrap() {
            assert!(x["intervals"]["speedup"]["p50"].is_number(), "{x}");
        }
    }
    let args = [
        &[
            "whatif",
            "--system",
            "h200-hgx-2node-ib",
            "--tp",
            "8",
            "--pp",
            "2",
            "--ep",
            "8",
        ][..],
        &common,
    ]
    .concat();
    let (v, err) = json(&args);
    assert!(
        err.contains("no interval") && err.contains("--pp") && err.contains("points"),
        "{err}"
    );
    assert!(v.get("draws").is_none(), "{v}");
    assert!(v["base"]["step_time_us"].as_f64().unwrap() > 0.0, "{v}");
}

/// The leave-one-out rms log error of log-log interpolation over the MoE rows of one shape
/// (quant, experts, hidden, inter, top-k), from the CSV: each inner row of a line (one
/// distribution, moe_tp and moe_ep, by tokens) predicted from its neighbours.
fn moe_rows_loo(csv: &str, shape: [&str; 5]) -> f64 {
    let text = std::fs::read_to_string(root(csv)).unwrap();
    let mut lines: std::collections::BTreeMap<String, Vec<(f64, f64)>> = Default::default();
    for row in text.lines().skip(1) {
        let f: Vec<&str> = row.split(',').collect();
        if f[1..6] != shape {
            continue;
        }
        let key = format!("{},{},{}", f[0], f[6], f[7]);
        lines
            .entry(key)
            .or_default()
            .push((f[8].parse().unwrap(), f[9].parse().unwrap()));
    }
    let (mut sum, mut n) = (0.0, 0);
    for pts in lines.values_mut() {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        // As the tables are read: fitted monotone along the tokens (cost::isotonic).
        decodesim::cost::isotonic::fit_rows(pts);
        for w in pts.windows(3) {
            let t = (w[1].0.ln() - w[0].0.ln()) / (w[2].0.ln() - w[0].0.ln());
            let pred = (w[0].1.ln() + t * (w[2].1.ln() - w[0].1.ln())).exp();
            sum += (w[1].1 / pred).ln().powi(2);
            n += 1;
        }
    }
    (sum / n as f64).sqrt()
}

#[test]
fn the_moe_tables_error_is_that_of_the_models_own_rows() {
    let sigma_of = |model: &str, system: &str| {
        let req = ScenarioRequest {
            model: model.into(),
            system: system.into(),
            ..ScenarioRequest::default()
        };
        let (s, p) = req.load().expect("loads");
        let u = Uncertainty::from_profile(&p, &s).unwrap();
        u.sources
            .iter()
            .find(|x| x.name() == "table_moe")
            .map(|x| (x.sigma, x.provenance().to_string()))
    };
    // Kimi-K2.5 on the RTX tables: its INT4 rows only, not the Qwen3 BF16 rows beside them.
    let (sigma, says) = sigma_of("kimi-k2.5", "rtx-pro-6000-8x-pcie").expect("table_moe");
    let rtx = "data/calibration/aiconfigurator/rtx_pro_6000_server/moe.csv";
    let want = moe_rows_loo(rtx, ["int4_wo", "384", "7168", "2048", "8"]);
    assert!(rel(sigma, want) < 1e-12, "{sigma} vs {want}");
    assert!(says.contains("int4_wo 384 experts"), "{says}");
    // DeepSeek-V3 on H200: its FP8-block rows.
    let (sigma, _) = sigma_of("deepseek-v3", "h200-8x-nvlink").expect("table_moe");
    let h200 = "data/calibration/aiconfigurator/h200_sxm/moe.csv";
    let want = moe_rows_loo(h200, ["fp8_block", "256", "7168", "2048", "8"]);
    assert!(rel(sigma, want) < 1e-12, "{sigma} vs {want}");
    // A BF16 Kimi is a shape the tables lack: the law prices its experts, and the table's
    // error is not drawn for them.
    assert_eq!(sigma_of("kimi-k2.5-bf16", "rtx-pro-6000-8x-pcie"), None);
}
