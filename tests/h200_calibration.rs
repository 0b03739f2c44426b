//! The project's own H200 data (data/calibration/h200, data/traces/h200): the fit, the
//! validation figures the README publishes, and single-anchor prediction.

use decodesim::calibrate::{calibrate, FitOptions};
use decodesim::cost::profile::CollectiveOp;
use decodesim::cost::CalibrationProfile;
use decodesim::measurements::Measurements;
use decodesim::scenario::{Algo, CommPath, GpuSpec, Proto};
use decodesim::trace::classify::Classifier;
use decodesim::validate::{validate, ValidateOptions};
use decodesim::whatif::uncertainty::{ModelError, DEFAULT_DRAWS, DEFAULT_SEED};
use decodesim::workload::CostFamily;
use std::path::PathBuf;

fn root(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(p)
}

#[test]
fn fit_of_the_h200_measurements() {
    let m = Measurements::read_dir(&root("data/calibration/h200")).unwrap();
    assert!(
        m.kernels.len() > 800 && m.collectives.len() > 800,
        "{} {}",
        m.kernels.len(),
        m.collectives.len()
    );
    let gpu = GpuSpec::from_file(&root("data/systems/gpus/h200-sxm.toml")).unwrap();
    let fallback =
        CalibrationProfile::from_file(&root("data/calibration/h200-estimate/profile.toml"))
            .unwrap();
    // Without the measurement table the roofline law must stand alone: the Triton MLA kernel
    // (time grows with heads, not bytes) does not follow it, and the fit is refused.
    let err = calibrate(
        &m,
        &gpu,
        "h200",
        &fallback,
        &FitOptions {
            max_median_err: 0.15,
            min_r2: 0.9,
            table: None,
            table_shown: None,
            keep_fallback_for_poor: false,
            allow_poor_fit: false,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("kernels.attention_mla_decode"), "{err}");
    let r = calibrate(
        &m,
        &gpu,
        "h200",
        &fallback,
        &FitOptions {
            max_median_err: 0.15,
            min_r2: 0.9,
            table: Some("kernels.csv".into()),
            table_shown: None,
            keep_fallback_for_poor: false,
            allow_poor_fit: false,
        },
    )
    .unwrap();
    let gemm = r
        .quality
        .iter()
        .find(|q| q.section == "kernels.gemm_bf16")
        .unwrap();
    assert!(gemm.r2 > 0.98 && gemm.median_abs_rel_err < 0.10, "{gemm:?}");
    let g = &r.profile.kernels[&CostFamily::GemmBf16];
    // Decode GEMMs are memory-bound: cuBLAS reaches most of HBM bandwidth.
    assert!((0.6..1.0).contains(&g.mem_efficiency), "{g:?}");
    let ll = r
        .profile
        .collectives
        .iter()
        .find(|c| {
            c.op == CollectiveOp::AllReduce
                && c.path == CommPath::Nvlink
                && c.proto == Proto::Ll
                && c.algo == Algo::Ring
        })
        .unwrap();
    assert_eq!(ll.measured_nranks, vec![2]);
    assert!(r
        .quality
        .iter()
        .filter(|q| q.section.starts_with("collectives"))
        .all(|q| q.median_abs_rel_err < 0.10));
    // The committed profile is this fit.
    let committed =
        CalibrationProfile::from_file(&root("data/calibration/h200/profile.toml")).unwrap();
    assert_eq!(committed.kernels[&CostFamily::GemmBf16], *g);
    assert!(committed.table.as_ref().is_some_and(|t| t.len() > 700));
}

#[test]
fn validation_against_the_captured_traces() {
    let classifier = Classifier::builtin();
    let v = validate(
        &root("data/traces/h200"),
        &ValidateOptions {
            classifier: &classifier,
            system: "h200-2x-nvlink".into(),
            calibration: "h200".into(),
            layers: None,
            anchor: None,
            draws: DEFAULT_DRAWS,
            seed: DEFAULT_SEED,
            step_times: None,
        },
    )
    .unwrap();
    assert_eq!(v.results.len(), 54);
    assert!(v.results.iter().all(|r| r.ranks == 2 && r.layers == 4));
    // The step_times.csv beside the traces gives every configuration's unprofiled step.
    assert!(v
        .step_times
        .as_deref()
        .is_some_and(|p| p.ends_with("step_times.csv")));
    // The figures docs/validation.md publishes, against the unprofiled steps: median |step
    // error| 0.6% (≤ 5%), worst 2.5% (≤ 10%; refstep_b1_c8192_p2p_off), median share error
    // ≤ 3 pp.
    assert!(v.summary.median_abs_step_error <= 0.01, "{:?}", v.summary);
    assert!(v.summary.worst_abs_step_error <= 0.035, "{:?}", v.summary);
    assert!(v.summary.median_share_error <= 0.03, "{:?}", v.summary);
    // Intervals with the model-form error of the other configurations (leave-one-out): the
    // measured step inside p5–p95 for at least 85% of them (docs: 54 of 54), the median width
    // at most 25% of the answer (docs: 7.3%).
    let iv = v.intervals.as_ref().unwrap();
    assert_eq!(iv.cases.len(), 54);
    assert!(iv.coverage >= 0.85, "coverage {}", iv.coverage);
    assert!(iv.coverage >= 51.0 / 54.0, "coverage {}", iv.coverage);
    assert!(iv.median_width <= 0.25, "width {}", iv.median_width);
    assert!(iv.median_width <= 0.10, "width {}", iv.median_width);
    // The bundled model-form error is this fit (`validate --write-model-error` wrote it).
    let committed = ModelError::from_file(&root("data/calibration/model_error.toml")).unwrap();
    let fit = iv
        .model_error
        .model_error(&root("data/calibration/model_error.toml"), "h200-sxm");
    assert_eq!(committed.sigma.len(), fit.sigma.len());
    assert_eq!(committed.gpu, fit.gpu);
    for (name, sd) in &fit.sigma {
        assert!((committed.sigma[name] - sd).abs() < 1e-4, "{name}: {sd}");
    }
    assert!((committed.idle_sigma_us - fit.idle_sigma_us).abs() < 0.1);
    // From one anchor trace: ≤ 10% median error across a 16x range of batch size.
    let a = v.anchor.as_ref().unwrap();
    assert_eq!(a.anchor, "refstep_b16_c8192_default");
    let band = a.band.as_ref().unwrap();
    assert!(
        band.cases >= 3 && band.median_abs_step_error <= 0.10,
        "{band:?}"
    );
}

fn decodesim(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(args)
        .output()
        .expect("binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The bundled trace files of one captured configuration, one per rank.
fn rank_files(configuration: &str) -> Vec<String> {
    let prefix = format!("{configuration}_rank");
    std::fs::read_dir(root("data/traces/h200"))
        .unwrap()
        .flatten()
        .map(|e| e.path().display().to_string())
        .filter(|p| p.contains(&prefix))
        .collect()
}

#[test]
fn calibrate_from_one_trace_then_predict_from_the_written_profile() {
    let traces = rank_files("refstep_b16_c8192_default");
    assert_eq!(traces.len(), 2);
    let out = std::env::temp_dir().join(format!("decodesim-anchor-{}.toml", std::process::id()));
    let scenario = [
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
    let mut args = vec!["calibrate", "--from-trace"];
    args.extend(traces.iter().map(String::as_str));
    args.extend([
        "--out",
        out.to_str().unwrap(),
        "--calibration",
        "h200",
        "--batch",
        "16",
        "--context",
        "8192",
    ]);
    args.extend(scenario);
    let (ok, text, err) = decodesim(&args);
    assert!(ok, "{err}");
    let line = text
        .lines()
        .find(|l| l.starts_with("step time: measured"))
        .unwrap();
    // "... after 6584.7 us (+0.9%)": the anchored profile reproduces its anchor within 2%.
    let after_pct: f64 = line
        .rsplit('(')
        .next()
        .and_then(|t| t.trim_end_matches("%)").parse().ok())
        .unwrap();
    assert!(after_pct.abs() < 2.0, "{line}");
    // The written profile is usable from anywhere: its table path resolves.
    let mut sim = vec![
        "simulate",
        "--format",
        "json",
        "--calibration",
        out.to_str().unwrap(),
        "--batch",
        "64",
        "--context",
        "8192",
    ];
    sim.extend(scenario);
    let (ok, json, err) = decodesim(&sim);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let predicted = v["step_time_us"].as_f64().unwrap();
    // Measured: 14,979 µs (data/traces/h200, batch 64, context 8192, default NCCL).
    assert!((predicted / 14_979.0 - 1.0).abs() < 0.05, "{predicted}");
    std::fs::remove_file(out).ok();
}

#[test]
fn validate_command_prints_the_table_and_summary() {
    let (ok, text, err) = decodesim(&[
        "validate",
        "--traces",
        root("data/traces/h200").to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(text.contains("refstep_b256_c32768_p2p_off"));
    assert!(text.contains("summary: 54 configurations"));
    assert!(text.contains("single anchor: calibrated from refstep_b16_c8192_default only"));
    assert!(text.contains("coverage: "), "{text}");
    assert!(text.contains("median width (p95 − p5) / p50"), "{text}");
    assert!(
        text.contains("measured: the unprofiled step of ") && text.contains("profiled (µs)"),
        "{text}"
    );
    let (ok, _, err) = decodesim(&["validate", "--traces", "/nonexistent"]);
    assert!(!ok && err.contains("/nonexistent"), "{err}");
}

/// `--step-times` names the file the predictions are held against; configurations it lacks
/// are held against their trace's profiled step, and the report says how many.
#[test]
fn validate_takes_step_times_from_a_file_and_refuses_a_bad_one() {
    let dir = std::env::temp_dir().join(format!("decodesim-step-times-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let one = dir.join("one.csv");
    std::fs::write(
        &one,
        "configuration,step_us\nrefstep_b1_c1024_default,1494.0\n",
    )
    .unwrap();
    let traces = root("data/traces/h200");
    let (ok, out, err) = decodesim(&[
        "validate",
        "--traces",
        traces.to_str().unwrap(),
        "--step-times",
        one.to_str().unwrap(),
        "--draws",
        "0",
        "--format",
        "csv",
    ]);
    assert!(ok, "{err}");
    let mut rdr = csv::Reader::from_reader(out.as_bytes());
    let head = rdr.headers().unwrap().clone();
    let col = |n: &str| head.iter().position(|h| h == n).unwrap();
    let rows: Vec<csv::StringRecord> = rdr.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 54);
    for r in &rows {
        let (measured, profiled): (f64, f64) = (
            r[col("measured_step_us")].parse().unwrap(),
            r[col("profiled_step_us")].parse().unwrap(),
        );
        if &r[0] == "refstep_b1_c1024_default" {
            assert_eq!(&r[col("measured_from")], "replays");
            assert_eq!(measured, 1494.0);
            // The profiler lengthens this 1.5 ms step by about 5% (1,573.8 µs traced).
            assert!(profiled > 1.04 * measured, "{profiled}");
        } else {
            assert_eq!(&r[col("measured_from")], "trace");
            assert_eq!(measured, profiled);
        }
    }
    // A row naming no captured configuration is named back (a misspelt configuration).
    let typo = dir.join("typo.csv");
    std::fs::write(
        &typo,
        "configuration,step_us\nrefstep_b1_c1024_default,1494.0\nrefstep_b1_c1024_defualt,1494.0\n",
    )
    .unwrap();
    let (ok, out, err) = decodesim(&[
        "validate",
        "--traces",
        traces.to_str().unwrap(),
        "--step-times",
        typo.to_str().unwrap(),
        "--draws",
        "0",
    ]);
    assert!(ok, "{err}");
    assert!(
        out.contains("(1 of 54 configurations")
            && out.contains("no traces here (misspelt?): refstep_b1_c1024_defualt"),
        "{out}"
    );
    let bad = dir.join("bad.csv");
    std::fs::write(
        &bad,
        "configuration,step_us\nrefstep_b1_c1024_default,soon\n",
    )
    .unwrap();
    let (ok, _, err) = decodesim(&[
        "validate",
        "--traces",
        traces.to_str().unwrap(),
        "--step-times",
        bad.to_str().unwrap(),
    ]);
    assert!(
        !ok && err.contains("bad.csv")
            && err.contains("line 2, column step_us")
            && err.contains("'soon'"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `calibrate --from-trace --unprofiled-step-us`: the trace is brought to the step timed
/// without the profiler before the fit, so the profile does not learn the profiler's
/// graph-launch stall as a first-collective stall.
#[test]
fn a_trace_brought_to_its_unprofiled_step_before_the_fit() {
    let traces = rank_files("refstep_b1_c8192_default");
    assert_eq!(traces.len(), 2);
    let dir = std::env::temp_dir().join(format!("decodesim-unprofiled-{}", std::process::id()));
    let stall = |extra: &[&str], name: &str| -> (f64, String) {
        let out = dir.join(name).join("profile.toml");
        let mut args = vec!["calibrate", "--from-trace"];
        args.extend(traces.iter().map(String::as_str));
        args.extend([
            "--out",
            out.to_str().unwrap(),
            "--calibration",
            "h200",
            "--batch",
            "1",
            "--context",
            "8192",
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
        ]);
        args.extend(extra);
        let (ok, text, err) = decodesim(&args);
        assert!(ok, "{err}");
        let p: toml::Value = toml::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        (
            p["launch"]["graph_first_collective_us"].as_float().unwrap(),
            text,
        )
    };
    let (traced, _) = stall(&[], "traced");
    // 1,530.7 µs: the median of 30 unprofiled replays (data/traces/h200/step_times.csv).
    let (unprofiled, text) = stall(&["--unprofiled-step-us", "1530.7"], "unprofiled");
    assert!(
        text.contains("brought to the unprofiled 1530.7 µs")
            && text.contains("measured 1,530.7 µs"),
        "{text}"
    );
    // The traced step is 93 µs longer, all of it idle: the stall the profile learns falls by it.
    assert!(
        (traced - unprofiled - 93.2).abs() < 1.0,
        "{traced} vs {unprofiled}"
    );
    let (ok, _, err) = decodesim(&[
        "calibrate",
        "--from-trace",
        &traces[0],
        "--out",
        dir.join("bad/profile.toml").to_str().unwrap(),
        "--unprofiled-step-us",
        "0",
    ]);
    assert!(
        !ok && err.contains("--unprofiled-step-us") && err.contains("positive"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `compare --unprofiled-step-us`: the trace's step brought to the step timed without the
/// profiler, the line saying what came out of idle and waiting; a bad value is refused first.
#[test]
fn compare_holds_the_prediction_against_the_unprofiled_step() {
    let traces = rank_files("refstep_b1_c8192_default");
    let run = |extra: &[&str]| {
        let mut args = vec!["compare", "--trace"];
        args.extend(traces.iter().map(String::as_str));
        args.extend([
            "--model",
            "kimi-k2.5-bf16",
            "--system",
            "h200-2x-nvlink",
            "--runtime",
            "reference",
            "--calibration",
            "h200",
            "--nccl-proto",
            "auto",
            "--nccl-algo",
            "auto",
            "--format",
            "json",
        ]);
        args.extend(extra);
        decodesim(&args)
    };
    let (ok, plain, err) = run(&[]);
    assert!(ok, "{err}");
    let (ok, brought, err) = run(&["--unprofiled-step-us", "1530.7"]);
    assert!(ok, "{err}");
    let step = |text: &str| -> f64 {
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        v["step_time_us"]["measured"].as_f64().unwrap()
    };
    assert!(step(&plain) > 1_600.0, "{plain}");
    assert!((step(&brought) - 1530.7).abs() < 1e-6, "{brought}");
    assert!(
        brought.contains("brought to the unprofiled 1530.7 µs"),
        "{brought}"
    );
    let (ok, _, err) = run(&["--unprofiled-step-us", "nan"]);
    assert!(!ok && err.contains("--unprofiled-step-us"), "{err}");
}
