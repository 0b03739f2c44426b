//! The development set: decode throughput measured on the default machine (8x RTX PRO 6000,
//! Kimi INT4, vLLM TP8, FP8 KV cache, the PCIe custom all-reduce below 56 KiB and NCCL above;
//! `tests/data/dev-set/rtx-pro-6000-kimi.md` with its source) against the bottom-up prediction
//! of the shipped profile. These bounds hold the accuracy reached as a regression guard, not as
//! a target: no constant is fitted to these points, and the figures are reported in
//! docs/trust.md.

mod common;

use common::decodesim_exit;

/// The development set's setup as flags.
const SETUP: [&str; 12] = [
    "--context",
    "1",
    "--kv-cache-dtype",
    "fp8",
    "--allreduce",
    "custom",
    "--nccl-proto",
    "auto",
    "--nccl-algo",
    "auto",
    "--format",
    "json",
];

fn rows(file: &str) -> Vec<Vec<f64>> {
    let text = std::fs::read_to_string(common::fixture(file)).expect("fixture");
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split(',').filter_map(|v| v.parse().ok()).collect())
        .collect()
}

fn json(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = decodesim_exit(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

#[test]
fn bottom_up_throughput_on_the_development_set() {
    let mut errors = Vec::new();
    for r in rows("dev-set/rtx-pro-6000-kimi-no-spec.csv") {
        let batch = (r[0] as u32).to_string();
        let mut args = vec!["simulate", "--batch", &batch];
        args.extend(SETUP);
        let predicted = json(&args)["tokens_per_s"].as_f64().expect("tokens_per_s");
        errors.push((predicted - r[2]) / r[2]);
    }
    let abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    let (med, worst) = (median(abs.clone()), abs.iter().cloned().fold(0.0, f64::max));
    // Reached: median 18.0%, worst 20.3% (docs/trust.md); small batches fast, large slow.
    assert!(med <= 0.19, "median |error| {med:.3}: {errors:?}");
    assert!(worst <= 0.21, "worst |error| {worst:.3}: {errors:?}");
    // The shape: throughput rises with concurrency at every point, as measured.
    assert_eq!(errors.len(), 8);
}

#[test]
fn eagle3_speedups_on_the_development_set() {
    let mut diffs = Vec::new();
    let mut verdicts = Vec::new();
    for r in rows("dev-set/rtx-pro-6000-kimi-eagle3.csv") {
        let batch = (r[0] as u32).to_string();
        let measured = r[3] / r[4];
        // The server-reported acceptance spans 0.316 (concurrency 1) to 0.430 (128): its middle.
        let mut args = vec![
            "whatif",
            "spec-decode",
            "--batch",
            &batch,
            "--acceptance-rate",
            "0.37",
            "--draft-tokens",
            "3",
            "--crossover-batches",
            "none",
        ];
        args.extend(SETUP);
        let out = json(&args);
        let k3 = out["variants"]
            .as_array()
            .expect("variants")
            .iter()
            .find(|v| v["draft_tokens"] == 3)
            .expect("k = 3");
        let predicted = k3["speedup"].as_f64().expect("speedup");
        diffs.push((r[0], predicted - measured));
        let verdict = k3["intervals"]["verdict"]
            .as_str()
            .unwrap_or_else(|| panic!("no verdict at {batch}: {k3}"))
            .to_string();
        verdicts.push((r[0], measured, verdict));
    }
    let worst = diffs.iter().map(|d| d.1.abs()).fold(0.0, f64::max);
    // Reached: within 0.10 at concurrency 1, 2, 4, 32, 64 and 128; 0.33 and 0.42 off at 8 and
    // 16, where the plain step at 32 and 64 tokens is priced 18-19% slow (docs/trust.md).
    assert!(worst <= 0.45, "worst speedup error {worst:.2}: {diffs:?}");
    let within: usize = diffs.iter().filter(|d| d.1.abs() <= 0.10).count();
    assert!(within >= 6, "{within} of 8 within 0.10: {diffs:?}");
    // No wrong verdict: "helps" only where the machine gained, "hurts" only where it lost; the
    // rest "cannot tell" (the interval holds the model's error across step sizes on this GPU).
    for (c, measured, v) in &verdicts {
        let wrong = (v == "helps" && *measured <= 1.0) || (v == "hurts" && *measured >= 1.0);
        assert!(
            !wrong,
            "concurrency {c}: verdict {v}, measured {measured:.2}: {verdicts:?}"
        );
    }
    // Speculation's clearest gain, at one user, is called.
    assert_eq!(verdicts[0].2, "helps", "{verdicts:?}");
}

/// The bundled step error of this GPU is what `calibrate --step-error` computes from these
/// points (no hand edit), and every plain point lies inside its own p5-p95 interval.
#[test]
fn step_error_is_the_development_sets_and_its_intervals_hold_the_points() {
    let dir = common::scratch("devset-step-error");
    let out = dir.join("step.toml");
    let mut args = vec![
        "calibrate",
        "--from-throughput",
        "tests/data/dev-set/rtx-pro-6000-kimi-no-spec.csv",
        "--step-error",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(&SETUP[..10]);
    let (code, text, err) = decodesim_exit(&args);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("8 of 8 point(s) inside the band the others give"),
        "{text}"
    );
    let step = |p: &std::path::Path| {
        let v: toml::Value = toml::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        v["step"].clone()
    };
    let bundled = step(std::path::Path::new(
        "data/calibration/step_error/rtx-pro-6000-server.toml",
    ));
    assert_eq!(
        step(&out),
        bundled,
        "the bundled file is stale: rerun its provenance command"
    );
    let sigma = bundled["sigma"].as_float().unwrap();
    assert!((0.10..0.30).contains(&sigma), "{sigma}");
    let mut inside = 0;
    for r in rows("dev-set/rtx-pro-6000-kimi-no-spec.csv") {
        let batch = (r[0] as u32).to_string();
        let mut args = vec!["simulate", "--batch", &batch];
        args.extend(SETUP);
        let v = json(&args);
        let iv = &v["intervals"]["tokens_per_s"];
        let (lo, hi) = (iv["p5"].as_f64().unwrap(), iv["p95"].as_f64().unwrap());
        inside += (lo..=hi).contains(&r[2]) as usize;
    }
    assert_eq!(inside, 8, "plain points inside their interval");
}

/// Calibrating from four of the points (concurrency 1, 4, 16 and 64) with the two factors the
/// misses point at (the collectives' bytes term for the large batches, a per-step overhead for
/// the small ones) predicts the other four within 10%.
#[test]
fn four_points_calibrate_the_other_four() {
    let dir = common::scratch("devset-four");
    let all = rows("dev-set/rtx-pro-6000-kimi-no-spec.csv");
    let fit_at = [1.0, 4.0, 16.0, 64.0];
    let mut csv = String::from("concurrency,context,tokens_per_s,kv_cache_dtype\n");
    for r in all.iter().filter(|r| fit_at.contains(&r[0])) {
        csv.push_str(&format!("{},1,{},fp8\n", r[0], r[2]));
    }
    let points = dir.join("four.csv");
    std::fs::write(&points, csv).unwrap();
    let profile = dir.join("fit.toml");
    let mut args = vec![
        "calibrate",
        "--from-throughput",
        points.to_str().unwrap(),
        "--out",
        profile.to_str().unwrap(),
        "--factors",
        "collective_bw_scale,step_overhead_us",
    ];
    args.extend(&SETUP[..10]);
    let (code, _, err) = decodesim_exit(&args);
    assert_eq!(code, 0, "{err}");
    let mut errors = Vec::new();
    for r in all.iter().filter(|r| !fit_at.contains(&r[0])) {
        let batch = (r[0] as u32).to_string();
        let mut args = vec![
            "simulate",
            "--batch",
            &batch,
            "--calibration",
            profile.to_str().unwrap(),
        ];
        args.extend(SETUP);
        let predicted = json(&args)["tokens_per_s"].as_f64().expect("tokens_per_s");
        errors.push((r[0], (predicted - r[2]) / r[2]));
    }
    assert_eq!(errors.len(), 4);
    // Reached: +3.8%, +5.3%, -3.7%, -0.5% at 2, 8, 32 and 128 (docs/trust.md).
    assert!(
        errors.iter().all(|e| e.1.abs() <= 0.10),
        "errors at the held-out points: {errors:?}"
    );
}

/// `--step-error` from points at one concurrency cannot measure an error across step sizes:
/// refused by file and field, and nothing is written.
#[test]
fn step_error_from_one_step_size_is_refused() {
    let dir = common::scratch("devset-step-error-one-size");
    let points = dir.join("one.csv");
    std::fs::write(
        &points,
        "concurrency,context,tokens_per_s,kv_cache_dtype\n8,1,350,fp8\n8,1,352,fp8\n8,1,349,fp8\n",
    )
    .unwrap();
    let out = dir.join("step.toml");
    let mut args = vec![
        "calibrate",
        "--from-throughput",
        points.to_str().unwrap(),
        "--step-error",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(&SETUP[..10]);
    let (code, _, err) = decodesim_exit(&args);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("one.csv") && err.contains("points"), "{err}");
    assert!(err.contains("2 or more concurrencies"), "{err}");
    assert!(!out.exists());
}
