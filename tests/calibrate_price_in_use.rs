//! Calibration acts on the price a step really uses and writes what it measured: a burst sets
//! the price the simulated step then charges for that allreduce (the measured table's, not a
//! law's; the cross-node price across nodes), a trace whose sampler is 100x the profile's
//! writes a profile that loads, and `--from-throughput` fits robustly, chooses only factors its
//! points vary, and honours `--max-median-error`.

mod common;

use common::{decodesim_bin, scratch};
use std::path::Path;

/// `simulate --format json`'s price of each all_reduce of `bytes` (µs, no wait).
fn step_allreduce_us(args: &[&str], bytes: u64) -> f64 {
    let mut a = vec!["simulate", "--format", "json", "--draws", "0"];
    a.extend_from_slice(args);
    let (ok, out, err) = decodesim_bin(&a);
    assert!(ok, "{a:?}: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["op"] == "all_reduce" && c["bytes"].as_u64() == Some(bytes))
        .unwrap_or_else(|| panic!("no all_reduce of {bytes} B in {out}"))["time_us"]
        .as_f64()
        .unwrap()
}

#[test]
fn the_seed_burst_sets_the_price_a_step_charges_for_that_allreduce() {
    let d = scratch("price-in-use-burst");
    let out = d.join("burst.toml");
    let out_s = out.to_str().unwrap();
    let (ok, text, err) = decodesim_bin(&[
        "calibrate",
        "--from-burst",
        "122,14336,6810",
        "--allreduce",
        "nccl",
        "--out",
        out_s,
    ]);
    assert!(ok, "{err}");
    // Fitted against the measured table the step prices from, and it says so.
    assert!(
        text.contains("[measured: AIConfigurator nccl_collectives.csv]"),
        "{text}"
    );
    let each = 6810.0 / 122.0; // 55.82 µs
    for (batch, context) in [("1", "1024"), ("1", "8192")] {
        let args = [
            "--batch",
            batch,
            "--context",
            context,
            "--allreduce",
            "nccl",
            "--calibration",
            out_s,
        ];
        let us = step_allreduce_us(&args, 14_336);
        assert!(
            (us / each - 1.0).abs() < 0.05,
            "{us} µs vs the burst's {each}"
        );
    }
    // Uncalibrated, the table prices it at about half the burst's figure; the sizes around it
    // (batch 2: 28 KiB, latency-bound too) move by about the same ratio.
    let before = step_allreduce_us(&["--batch", "1", "--allreduce", "nccl"], 14_336);
    assert!(before < 0.6 * each, "{before}");
    let near = ["--batch", "2", "--allreduce", "nccl"];
    let (b2, a2) = (
        step_allreduce_us(&near, 28_672),
        step_allreduce_us(&[&near[..], &["--calibration", out_s]].concat(), 28_672),
    );
    assert!(a2 / b2 > 1.7 && a2 / b2 < each / before, "{b2} -> {a2}");
    // Across nodes the fit is against the cross-node price, which a step then charges.
    let out2 = d.join("two-nodes.toml");
    let (ok, text, err) = decodesim_bin(&[
        "calibrate",
        "--from-burst",
        "122,14336,12000",
        "--system",
        "h200-hgx-2node-ib",
        "--out",
        out2.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(
        text.contains("nvlink+net") && text.contains("at 16 ranks"),
        "{text}"
    );
    let us = step_allreduce_us(
        &[
            "--batch",
            "1",
            "--system",
            "h200-hgx-2node-ib",
            "--calibration",
            out2.to_str().unwrap(),
        ],
        14_336,
    );
    assert!((us / (12000.0 / 122.0) - 1.0).abs() < 0.05, "{us}");
}

#[test]
fn bursts_of_several_sizes_move_the_latency_and_the_bandwidth_of_the_step_price() {
    let d = scratch("price-in-use-bursts");
    // A machine 1.8x slower than the table at small messages and 1.4x at large ones.
    let sizes = [14_336u64, 458_752];
    let mut csv = String::from("count,bytes,total_us\n");
    let mut want = Vec::new();
    for (b, batch) in sizes.iter().zip(["1", "32"]) {
        let us = step_allreduce_us(&["--batch", batch, "--allreduce", "nccl"], *b);
        let t = if *b < 100_000 { 1.8 * us } else { 1.4 * us };
        csv.push_str(&format!("100,{b},{}\n", 100.0 * t));
        want.push((*b, batch, t));
    }
    let path = d.join("bursts.csv");
    std::fs::write(&path, csv).unwrap();
    let out = d.join("two.toml");
    let (ok, text, err) = decodesim_bin(&[
        "calibrate",
        "--from-burst",
        path.to_str().unwrap(),
        "--allreduce",
        "nccl",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(
        !text.contains("not identifiable"),
        "two sizes fit both scales: {text}"
    );
    for (b, batch, t) in want {
        let us = step_allreduce_us(
            &[
                "--batch",
                batch,
                "--allreduce",
                "nccl",
                "--calibration",
                out.to_str().unwrap(),
            ],
            b,
        );
        assert!((us / t - 1.0).abs() < 0.05, "{b} B: {us} vs {t}");
    }
    assert!(Path::new(&out).exists());
}

/// A copy of the bundled H200 reference trace (batch 16, context 8192) whose sampler kernels
/// (the argmax over the logits) take `factor` times as long, every later event of the rank
/// shifted by the time added, written to `dir`.
fn slow_sampler_trace(dir: &Path, factor: f64) -> Vec<String> {
    use std::io::{Read, Write};
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/traces/h200");
    let mut names: Vec<_> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("refstep_b16_c8192_default_rank"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 2);
    let sampler = regex::Regex::new("(?i)argmax").unwrap();
    names
        .iter()
        .map(|n| {
            let mut text = String::new();
            flate2::read::GzDecoder::new(std::fs::File::open(src.join(n)).unwrap())
                .read_to_string(&mut text)
                .unwrap();
            let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
            let ev = v["traceEvents"].as_array_mut().unwrap();
            let mut added = Vec::new();
            for e in ev.iter_mut() {
                let kernel =
                    e["cat"] == "kernel" && e["name"].as_str().is_some_and(|s| sampler.is_match(s));
                if kernel {
                    let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
                    added.push((ts + dur, dur * (factor - 1.0)));
                    e["dur"] = (dur * factor).into();
                }
            }
            assert!(!added.is_empty(), "no sampler kernel in {n}");
            for e in ev.iter_mut() {
                if let Some(ts) = e.get("ts").and_then(|t| t.as_f64()) {
                    let shift: f64 = added.iter().filter(|a| ts >= a.0).map(|a| a.1).sum();
                    e["ts"] = (ts + shift).into();
                }
            }
            let out = dir.join(n);
            let mut gz = flate2::write::GzEncoder::new(
                std::fs::File::create(&out).unwrap(),
                flate2::Compression::fast(),
            );
            gz.write_all(v.to_string().as_bytes()).unwrap();
            gz.finish().unwrap();
            out.to_str().unwrap().to_string()
        })
        .collect()
}

const H200_REFSTEP: [&str; 12] = [
    "--model",
    "kimi-k2.5-bf16",
    "--layers",
    "4",
    "--system",
    "h200-2x-nvlink",
    "--runtime",
    "reference",
    "--nccl-proto",
    "auto",
    "--nccl-algo",
    "auto",
];

#[test]
fn a_trace_whose_sampler_is_100x_the_table_writes_a_profile_that_loads_and_prices_it() {
    let d = scratch("price-in-use-trace");
    let traces = slow_sampler_trace(&d, 100.0);
    let out = d.join("anchored/profile.toml");
    let out_s = out.to_str().unwrap();
    let mut args = vec!["calibrate", "--from-trace"];
    args.extend(traces.iter().map(String::as_str));
    args.extend([
        "--out",
        out_s,
        "--calibration",
        "h200",
        "--batch",
        "16",
        "--context",
        "8192",
    ]);
    args.extend(H200_REFSTEP);
    let (ok, text, err) = decodesim_bin(&args);
    assert!(ok, "{err}");
    // The sampler's time is written as measured, with a warning that says why it may be so.
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("sampling "))
        .unwrap_or_else(|| panic!("{text}"));
    let f: f64 = line.split('x').next_back().unwrap().trim().parse().unwrap();
    assert!(f > 50.0 && f < 200.0, "{line}");
    assert!(
        text.contains("warning: sampling: the trace's time is")
            && text.contains("written as measured")
            && text.contains("top-k/top-p"),
        "{text}"
    );
    // The profile loads, and a step priced with it charges the sampler what the trace took.
    let mut sim = vec![
        "simulate",
        "--format",
        "json",
        "--draws",
        "0",
        "--calibration",
        out_s,
        "--batch",
        "16",
        "--context",
        "8192",
    ];
    sim.extend(H200_REFSTEP);
    let (ok, json, err) = decodesim_bin(&sim);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let sampling = v["breakdown"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["category"] == "sampling")
        .unwrap_or_else(|| panic!("{}", v["breakdown"]))["time_us"]
        .as_f64()
        .unwrap();
    // The trace: 11.1 µs x 100 = 1,109 µs of sampling per step.
    assert!((sampling / 1109.0 - 1.0).abs() < 0.1, "{sampling}");
}

use decodesim::calibrate::from_throughput::{
    fit_throughput, fit_throughput_with, Factor, Point, ThroughputLimits, ThroughputRequest,
};
use decodesim::cost::profile::Factors;
use decodesim::sim::{simulate_loaded, ScenarioRequest};

/// The default scenario cut to 4 layers (fast).
fn four_layers() -> ScenarioRequest {
    ScenarioRequest {
        layers: Some(4),
        ..ScenarioRequest::default()
    }
}

/// Tokens/s of the 4-layer default scenario under `truth` at these concurrencies and context,
/// with a deterministic ±0.4% of noise.
fn points_under(truth: &Factors, batches: &[u32], context: u64) -> Vec<Point> {
    batches
        .iter()
        .enumerate()
        .map(|(i, &batch)| {
            let (s, mut p) = ScenarioRequest {
                batch,
                context,
                ..four_layers()
            }
            .load()
            .unwrap();
            p.factors = truth.clone();
            let tps = simulate_loaded(s, p).unwrap().tokens_per_s();
            Point {
                line: i + 2,
                concurrency: batch,
                context,
                tokens_per_s: tps * (1.0 + 0.004 * ((i % 3) as f64 - 1.0)),
                ..Default::default()
            }
        })
        .collect()
}

fn request(points: Vec<Point>, factors: &[Factor], out: &Path) -> ThroughputRequest {
    ThroughputRequest {
        base: four_layers(),
        points,
        source: "synthetic.csv".into(),
        factors: factors.to_vec(),
        out: out.to_path_buf(),
        name: None,
    }
}

#[test]
fn one_low_point_of_several_does_not_pull_the_fit_and_is_flagged() {
    let d = scratch("robust-fit");
    let truth = Factors {
        moe_efficiency: 0.85,
        collective_latency_scale: 1.3,
        ..Factors::default()
    };
    let mut points = points_under(&truth, &[1, 2, 4, 8, 16, 32], 4096);
    // The concurrency-8 point measured 20% low (a slow run), the others on the curve.
    points[3].tokens_per_s *= 0.8;
    let named = [Factor::MoeEfficiency, Factor::CollectiveLatency];
    let r = fit_throughput(&request(points, &named, &d.join("fit.toml"))).unwrap();
    let value = |f: Factor| r.fitted.iter().find(|x| x.factor == f).unwrap().value;
    assert!(
        (value(Factor::MoeEfficiency) / 0.85 - 1.0).abs() < 0.03,
        "{:?}",
        r.fitted
    );
    assert!(
        (value(Factor::CollectiveLatency) / 1.3 - 1.0).abs() < 0.06,
        "{:?}",
        r.fitted
    );
    for (i, x) in r.residuals.iter().enumerate() {
        if i == 3 {
            // Down-weighted, about 25% above its measurement, and flagged from its
            // leave-one-out error.
            assert!(x.weight < 0.5, "{x:?}");
            assert!(x.rel_err > 0.18, "{x:?}");
            assert!(x.loo_rel_err.unwrap() > 0.18, "{x:?}");
            assert!(
                x.far_off.as_deref().unwrap().contains("fitted without it"),
                "{x:?}"
            );
        } else {
            // The others stay on their curve: the low point did not drag them.
            assert!(x.rel_err.abs() < 0.02, "point {i}: {x:?}");
            assert_eq!(x.weight, 1.0, "point {i}: {x:?}");
            assert!(x.far_off.is_none(), "point {i}: {x:?}");
        }
    }
}

#[test]
fn a_factor_is_fitted_only_where_the_points_vary_what_it_scales() {
    let d = scratch("unvaried");
    let truth = Factors {
        moe_efficiency: 0.9,
        ..Factors::default()
    };
    // Every point at one context: attention's growth with the context cannot be told apart.
    let points = points_under(&truth, &[1, 4, 16], 2500);
    let named = [
        Factor::MoeEfficiency,
        "attention_growth_scale".parse().unwrap(),
    ];
    let r = fit_throughput(&request(points.clone(), &named, &d.join("a.toml"))).unwrap();
    let (f, why) = r
        .refused
        .iter()
        .find(|(f, _)| f.name() == "attention_growth_scale")
        .expect("attention_growth_scale refused");
    assert!(
        why.contains("every point is at context 2500") && why.contains("two values"),
        "{f}: {why}"
    );
    assert_eq!(r.fitted.len(), 1);
    assert!(
        (r.fitted[0].value / 0.9 - 1.0).abs() < 0.03,
        "{:?}",
        r.fitted
    );
    // A hand-chosen pair the points identify is fitted, not refused.
    let pair = [Factor::MoeEfficiency, Factor::CollectiveLatency];
    let r = fit_throughput(&request(points, &pair, &d.join("b.toml"))).unwrap();
    assert_eq!(r.fitted.len(), 2, "{:?}", r.refused);
}

#[test]
fn a_scale_that_runs_to_its_bound_is_not_fitted() {
    let d = scratch("bound");
    // Three times faster than the model at every concurrency: no collective bandwidth explains
    // that (the collectives are a fraction of the step), so the scale would run to x100.
    let mut points = points_under(&Factors::default(), &[1, 4, 16, 64], 4096);
    for p in &mut points {
        p.tokens_per_s *= 3.0;
    }
    let e = fit_throughput(&request(points, &[Factor::CollectiveBw], &d.join("c.toml")))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("collective_bw_scale") && e.contains("ran to its bound"),
        "{e}"
    );
    assert!(!d.join("c.toml").exists());
}

#[test]
fn max_median_error_is_honoured_by_from_throughput() {
    let d = scratch("max-median");
    let truth = Factors::default();
    let mut points = points_under(&truth, &[1, 4, 16], 4096);
    // A flat curve no MoE factor explains.
    let flat = points[1].tokens_per_s;
    for p in &mut points {
        p.tokens_per_s = flat;
    }
    let limits = |pct: f64, allow: bool| ThroughputLimits {
        max_median_error_pct: Some(pct),
        allow_poor_fit: allow,
    };
    let out = d.join("never.toml");
    let e = fit_throughput_with(
        &request(points.clone(), &[Factor::MoeEfficiency], &out),
        &limits(15.0, false),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("calibration refused")
            && e.contains("--max-median-error")
            && e.contains("limit 15%")
            && e.contains("--allow-poor-fit"),
        "{e}"
    );
    assert!(!out.exists());
    let out = d.join("marked.toml");
    let r = fit_throughput_with(
        &request(points.clone(), &[Factor::MoeEfficiency], &out),
        &limits(15.0, true),
    )
    .unwrap();
    assert!(
        r.profile.profile.poor_fit[0].contains("--max-median-error"),
        "{:?}",
        r.profile.profile.poor_fit
    );
    let back = decodesim::cost::CalibrationProfile::from_file(&out).unwrap();
    assert!(back
        .poor_fit_marks()
        .iter()
        .any(|m| m.contains("from-throughput")));
    // Through the command line: the flag and its default both apply.
    let csv = d.join("flat.csv");
    std::fs::write(
        &csv,
        format!("concurrency,context,tokens_per_s\n1,4096,{flat}\n4,4096,{flat}\n16,4096,{flat}\n"),
    )
    .unwrap();
    let out = d.join("cli.toml");
    let (ok, _, err) = decodesim_bin(&[
        "calibrate",
        "--from-throughput",
        csv.to_str().unwrap(),
        "--layers",
        "4",
        "--factors",
        "moe_efficiency",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        !ok && err.contains("limit 15%") && !err.contains("panicked"),
        "{err}"
    );
    assert!(!out.exists());
    let (ok, _, err) = decodesim_bin(&[
        "calibrate",
        "--from-throughput",
        csv.to_str().unwrap(),
        "--layers",
        "4",
        "--factors",
        "moe_efficiency",
        "--max-median-error",
        "90",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
}

/// The development set's no-speculation points (tests/data/dev-set): calibrating from
/// concurrency 1, 4, 16 and 64 with the automatic choice prints a residual, a weight and a
/// leave-one-out error per point, and the concurrency-16 point (below the smooth curve through
/// its neighbours) is not taken for the curve: it is not flagged, and the fit is robust.
#[test]
fn the_development_set_calibrates_robustly_from_four_points() {
    let d = scratch("dev-set");
    let all = decodesim::calibrate::from_throughput::read_points(&common::fixture(
        "dev-set/rtx-pro-6000-kimi-no-spec.csv",
    ))
    .unwrap();
    let four: Vec<Point> = all
        .iter()
        .filter(|p| [1, 4, 16, 64].contains(&p.concurrency))
        .cloned()
        .collect();
    assert_eq!(four.len(), 4);
    let req = ThroughputRequest {
        base: ScenarioRequest::default(),
        points: four,
        source: common::fixture("dev-set/rtx-pro-6000-kimi-no-spec.csv"),
        factors: Vec::new(),
        out: d.join("dev.toml"),
        name: None,
    };
    let r = fit_throughput(&req).unwrap();
    assert!(
        !r.fitted
            .iter()
            .any(|f| f.factor.name() == "attention_growth_scale"),
        "one context cannot identify attention's growth: {:?}",
        r.fitted
    );
    for x in &r.residuals {
        assert!(
            x.rel_err.is_finite() && x.weight > 0.0 && x.weight <= 1.0,
            "{x:?}"
        );
    }
    let c16 = r
        .residuals
        .iter()
        .find(|x| x.point.concurrency == 16)
        .unwrap();
    assert!(c16.far_off.is_none(), "{c16:?}");
    assert!(c16.loo_rel_err.is_some(), "{c16:?}");
}
