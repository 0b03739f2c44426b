//! Routing models: the closed form against the sampler, the files a user can log, the default,
//! and the power-law exponents equivalent to AIConfigurator's MoE table distributions.

use decodesim::scenario::routing::{Routing, DEFAULT_ROUTING};
use decodesim::sim::{simulate, ScenarioRequest};
use decodesim::workload::routing::{
    expected_distinct_experts, resolve, sample, AIC_EQUIVALENT_ALPHA,
};
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-rt-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn kimi(routing: Option<Routing>, batch: u32) -> decodesim::sim::Simulation {
    simulate(&ScenarioRequest {
        batch,
        routing,
        ..ScenarioRequest::default()
    })
    .unwrap()
}

fn mean_touched(w: &decodesim::workload::Workload) -> f64 {
    let moe: Vec<f64> = w
        .experts_touched
        .iter()
        .filter(|&&e| e > 0)
        .map(|&e| e as f64)
        .collect();
    moe.iter().sum::<f64>() / moe.len() as f64
}

#[test]
fn closed_form_matches_the_mean_of_a_simulated_kimi_step() {
    for r in [
        Routing::Uniform,
        Routing::parse(DEFAULT_ROUTING).unwrap(),
        Routing::PowerLaw { alpha: 1.5 },
    ] {
        for batch in [4u32, 32, 128] {
            let sim = kimi(Some(r.clone()), batch);
            let sampled = mean_touched(&sim.workload);
            let exact = expected_distinct_experts(&r, batch as u64, 384, 8);
            // 60 MoE layers: the sample mean's own spread is ~1%.
            assert!(
                (sampled / exact - 1.0).abs() < 0.03,
                "{r} batch {batch}: sampled {sampled:.1} vs closed form {exact:.1}"
            );
        }
    }
}

#[test]
fn default_routing_is_the_aiconfigurator_default_equivalent_and_uniform_is_unchanged() {
    let default = Routing::parse(DEFAULT_ROUTING).unwrap();
    let (_, pl101) = AIC_EQUIVALENT_ALPHA
        .iter()
        .find(|(n, _)| *n == "power_law_1.01")
        .unwrap();
    assert_eq!(default, Routing::PowerLaw { alpha: *pl101 });
    let (s, _) = ScenarioRequest::default().load().unwrap();
    assert_eq!(s.routing, default);
    // The reference runtime routes random tokens through random weights: uniform.
    let (s, _) = ScenarioRequest {
        runtime: decodesim::scenario::Runtime::Reference,
        ..ScenarioRequest::default()
    }
    .load()
    .unwrap();
    assert_eq!(s.routing, Routing::Uniform);
    // Uniform reproduces the pre-routing draws: at batch 32 about 188 of 384 experts per layer.
    let u = mean_touched(&kimi(Some(Routing::Uniform), 32).workload);
    assert!((u - 188.4).abs() < 4.0, "{u}");
    // Concentration reads fewer experts and never slows the step.
    let d = kimi(None, 32);
    assert!(mean_touched(&d.workload) < u - 20.0);
    assert!(d.step_time_us() < kimi(Some(Routing::Uniform), 32).step_time_us());
    // Same seed, same routing.
    assert_eq!(kimi(None, 32).workload.routing, d.workload.routing);
}

/// AIConfigurator's MoE table at moe_tp = 8 (data/calibration/aiconfigurator/...): latency is
/// a line in the experts touched (balanced touches min(8T, 384)); the power-law exponent whose
/// closed form reproduces each power-law table's ratio to balanced, by least squares in log
/// ratio over 16..512 tokens, is the one `AIC_EQUIVALENT_ALPHA` states.
#[test]
fn aic_equivalents_reproduce_the_table_ratios() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(
        root.join("data/calibration/aiconfigurator/rtx_pro_6000_server/moe.csv"),
    )
    .unwrap();
    let mut rows: Vec<(String, u64, f64)> = Vec::new();
    for l in text.lines().skip(1) {
        let f: Vec<&str> = l.split(',').collect();
        // Kimi-K2.5's rows (the table holds other models' routed experts too).
        if f[1] == "int4_wo" && f[6] == "8" && f[7] == "1" {
            rows.push((
                f[0].to_string(),
                f[8].parse().unwrap(),
                f[9].parse().unwrap(),
            ));
        }
    }
    let lat = |dist: &str, t: u64| {
        rows.iter()
            .find(|(d, n, _)| d == dist && *n == t)
            .map(|r| r.2)
            .unwrap()
    };
    let tokens: Vec<u64> = vec![8, 16, 32, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512];
    // Balanced: latency = a + b·min(8T, 384) + c·T, least squares.
    let x: Vec<Vec<f64>> = tokens
        .iter()
        .map(|&t| vec![1.0, (8 * t).min(384) as f64, t as f64])
        .collect();
    let y: Vec<f64> = tokens.iter().map(|&t| lat("balanced", t)).collect();
    let fit = decodesim::calibrate::regression::weighted_least_squares(&x, &y, &vec![1.0; y.len()])
        .unwrap();
    let (a, b, c) = (fit.coef[0], fit.coef[1], fit.coef[2]);
    assert!((1.8..2.3).contains(&b), "us per expert {b}");
    let fitted: Vec<u64> = tokens.iter().copied().filter(|&t| t >= 16).collect();
    let err = |dist: &str, alpha: f64| -> f64 {
        let r = Routing::power_law(alpha).unwrap();
        fitted
            .iter()
            .map(|&t| {
                let bal = a + b * (8 * t).min(384) as f64 + c * t as f64;
                let model = (a + b * expected_distinct_experts(&r, t, 384, 8) + c * t as f64) / bal;
                let table = lat(dist, t) / lat("balanced", t);
                (model / table).ln().powi(2)
            })
            .sum::<f64>()
    };
    for (dist, alpha) in AIC_EQUIVALENT_ALPHA.iter().skip(1) {
        let best = (0..=200)
            .map(|i| i as f64 * 0.01)
            .min_by(|x, y| err(dist, *x).total_cmp(&err(dist, *y)))
            .unwrap();
        assert!(
            (best - alpha).abs() <= 0.011,
            "{dist}: the table is best reproduced by power-law:{best}, the constant says {alpha}"
        );
        let rms = (err(dist, *alpha) / fitted.len() as f64).sqrt();
        assert!(rms < 0.12, "{dist}: rms log error {rms}");
        // And better than uniform routing explains it.
        assert!(err(dist, *alpha) < err(dist, 0.0));
    }
}

#[test]
fn logged_files_drive_the_routing() {
    let d = tmp("files");
    // One popularity vector for every layer: 16 experts take almost every token.
    let mut pop = String::from("# per-expert token counts logged from vLLM\nexpert,tokens\n");
    for e in 0..384 {
        pop.push_str(&format!("{e},{}\n", if e < 16 { 10_000 } else { 1 }));
    }
    let path = write(&d, "popularity.csv", &pop);
    let r = Routing::parse(path.to_str().unwrap()).unwrap();
    let touched = mean_touched(&kimi(Some(r.clone()), 32).workload);
    assert!(touched < 40.0, "{touched}");
    let exact = expected_distinct_experts(&r, 32, 384, 8);
    assert!((touched / exact - 1.0).abs() < 0.1, "{touched} vs {exact}");
    // The hot experts are the ones named: their rank (experts 0..47 on rank 0 of 8) is loaded.
    let sim = kimi(Some(r), 32);
    let loads = sim.workload.routing.rank_loads(1, 8);
    assert_eq!(loads.iter().sum::<u64>(), 32 * 8);
    assert!(loads[0] > 32 * 8 / 2, "{loads:?}");

    // Per-layer vectors: layer 1 concentrated, layer 2 flat; other layers take their mean.
    let mut per = String::from("layer,expert,tokens\n");
    for e in 0..384 {
        per.push_str(&format!("1,{e},{}\n", if e < 8 { 1000 } else { 0 }));
        per.push_str(&format!("2,{e},5\n"));
    }
    let r = Routing::parse(write(&d, "layers.csv", &per).to_str().unwrap()).unwrap();
    let w = kimi(Some(r), 64).workload;
    assert!(
        w.experts_touched[1] < w.experts_touched[2],
        "{:?}",
        &w.experts_touched[..4]
    );

    // A histogram of experts touched per step: fitted to the power law with that mean.
    let target = Routing::PowerLaw { alpha: 1.1 };
    let mut hist = String::from("tokens,experts_touched,steps\n");
    for t in [16u64, 64, 256] {
        let e = expected_distinct_experts(&target, t, 384, 8);
        hist.push_str(&format!("{t},{:.2},10\n", e));
    }
    let r = Routing::parse(write(&d, "hist.csv", &hist).to_str().unwrap()).unwrap();
    let alpha = decodesim::workload::routing::histogram_alpha(&r, 384, 8).unwrap();
    assert!((alpha - 1.1).abs() < 0.02, "{alpha}");
    // The sampler and the closed form take the fitted law.
    let res = resolve(&r, 384, 8, 2);
    let s = sample(&res, &[false, true], 384, 8, 64, 1);
    assert_eq!(s.experts_touched[0], 0);
    assert!(s.experts_touched[1] > 0);
}

#[test]
fn bad_routing_input_gives_clear_errors() {
    let d = tmp("bad");
    let load = |r: Routing| {
        ScenarioRequest {
            routing: Some(r),
            ..ScenarioRequest::default()
        }
        .load()
        .unwrap_err()
        .to_string()
    };
    let e = Routing::parse(write(&d, "hdr.csv", "a,b\n1,2\n").to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("hdr.csv") && e.contains("expert,tokens"), "{e}");
    let e = Routing::parse(
        write(&d, "neg.csv", "expert,tokens\n3,-1\n")
            .to_str()
            .unwrap(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("line 2, column tokens") && e.contains("-1"),
        "{e}"
    );
    let r = Routing::parse(
        write(&d, "big.csv", "expert,tokens\n400,5\n")
            .to_str()
            .unwrap(),
    )
    .unwrap();
    let e = load(r);
    assert!(e.contains("400") && e.contains("384 routed experts"), "{e}");
    let r = Routing::parse(
        write(&d, "layer.csv", "layer,expert,tokens\n99,1,5\n")
            .to_str()
            .unwrap(),
    )
    .unwrap();
    let e = load(r);
    assert!(e.contains("layer") && e.contains("99"), "{e}");
    let r = Routing::parse(
        write(&d, "hist.csv", "tokens,experts_touched,steps\n4,100,3\n")
            .to_str()
            .unwrap(),
    )
    .unwrap();
    let e = load(r);
    assert!(e.contains("impossible for top-8 of 384"), "{e}");
    let e = Routing::parse(write(&d, "zero.csv", "expert,tokens\n").to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no expert rows"), "{e}");
}
