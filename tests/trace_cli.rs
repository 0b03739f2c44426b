//! `decodesim trace summarize` end to end, and the compare report and plot.

mod common;

use decodesim::accounting::Breakdown;
use decodesim::category::Category;
use decodesim::cli::trace::{run_compare, CompareTraceArgs, Format, RankArgs, TraceReadArgs};
use decodesim::Error as CliError;
use std::process::Command;

fn decodesim(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn summarize_json_has_the_documented_keys() {
    let dir = common::scratch("cli_json");
    common::write_ranks(&dir, &[0.0, 25.0], 3, false);
    let (ok, out, err) = decodesim(&[
        "trace",
        "summarize",
        dir.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in [
        "ranks",
        "steps",
        "step_time_us",
        "breakdown",
        "unclassified",
        "comm",
        "gaps",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["ranks"].as_array().unwrap().len(), 2);
    assert_eq!(v["steps"].as_array().unwrap().len(), 8);
    let b = v["breakdown"].as_array().unwrap();
    assert_eq!(b.len(), Category::COUNT);
    assert!(b
        .iter()
        .all(|e| e["category"].is_string() && e["time_us"].is_number() && e["share"].is_number()));
    let share: f64 = b.iter().map(|e| e["share"].as_f64().unwrap()).sum();
    assert!((share - 1.0).abs() < 1e-9);
    assert_eq!(v["step_time_us"]["n"], 6);
    assert!((v["comm"]["transfer_us"].as_f64().unwrap() - common::TRANSFER).abs() < 1e-9);
}

#[test]
fn summarize_table_and_csv() {
    let dir = common::scratch("cli_table");
    let paths = common::write_ranks(&dir, &[0.0, 25.0], 3, false);
    let p = paths[0].to_str().unwrap();
    let (ok, out, _) = decodesim(&["trace", "summarize", p]);
    assert!(ok);
    assert!(
        out.contains("vLLM execute_context")
            && out.contains("communication")
            && out.contains("Unclassified"),
        "{out}"
    );
    let (ok, out, _) = decodesim(&["trace", "summarize", p, "--format", "csv"]);
    assert!(ok);
    let mut lines = out.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("rank,step,name,kind,selected,step_time_us,category,time_us"));
    // (overall + rank mean + 4 steps) × categories.
    assert_eq!(lines.count(), 6 * Category::COUNT);
}

#[test]
fn user_rules_and_step_markers() {
    let dir = common::scratch("cli_rules");
    let paths = common::write_ranks(&dir, &[0.0], 2, false);
    let p = paths[0].to_str().unwrap();
    let rules = dir.join("rules.toml");
    std::fs::write(
        &rules,
        "fallback = 'gemm'\n[[rule]]\ncategory = 'attention'\npattern = 'fmha'\n",
    )
    .unwrap();
    let (ok, out, err) = decodesim(&[
        "trace",
        "summarize",
        p,
        "--rules",
        rules.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v["unclassified"].as_array().unwrap().len() >= 3,
        "only fmha has a rule"
    );

    let (ok, out, _) = decodesim(&[
        "trace",
        "summarize",
        p,
        "--step-marker",
        r"generation_0\(",
        "--format",
        "json",
    ]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["steps"].as_array().unwrap().len(),
        1,
        "only the prefill marker matches"
    );

    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[[rule]]\ncategory = 'gemv'\npattern = 'x'\n").unwrap();
    let (ok, _, err) = decodesim(&["trace", "summarize", p, "--rules", bad.to_str().unwrap()]);
    assert!(
        !ok && err.contains("bad.toml") && err.contains("'category'"),
        "{err}"
    );
    let (ok, _, err) = decodesim(&["trace", "summarize", p, "--step-marker", "("]);
    assert!(!ok && err.contains("--step-marker"), "{err}");
    let (ok, _, err) = decodesim(&["trace", "summarize", "/no/such/file.json"]);
    assert!(!ok && err.contains("/no/such/file.json"), "{err}");
}

fn predicted() -> Breakdown {
    let mut b = Breakdown {
        step_time_us: 240.0,
        ..Breakdown::default()
    };
    for (c, t) in [
        (Category::Gemm, 90.0),
        (Category::Norm, 25.0),
        (Category::Communication, 40.0),
        (Category::Attention, 25.0),
        (Category::Moe, 45.0),
        (Category::Idle, 15.0),
    ] {
        b.exclusive_us[c.index()] = t;
        b.busy_us[c.index()] = t;
    }
    b
}

#[test]
fn compare_reports_plots_and_fails_above_tolerance() {
    let dir = common::scratch("cli_compare");
    let paths = common::write_ranks(&dir, &[0.0, 25.0], 3, false);
    let png = dir.join("cmp.png");
    let svg = dir.join("cmp.svg");
    let read = TraceReadArgs {
        rules: None,
        step_marker: None,
        top_unclassified: 5,
    };
    let mut args = CompareTraceArgs {
        traces: paths.clone(),
        plot: Some(png.clone()),
        fail_above: Some(50.0),
        format: Format::Table,
        allow_mismatch: false,
        unprofiled_step_us: None,
        read,
        ranks: RankArgs::default(),
    };
    let mut out = Vec::new();
    let c = run_compare(
        &predicted(),
        None,
        &args,
        "synthetic 2-rank decode step",
        &mut out,
    )
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("step") && text.contains("gemm"), "{text}");
    // Measured mean step: rank 0 255 µs, rank 1 230 µs.
    assert!((c.measured_step_us - 242.5).abs() < 1e-9);
    assert!(std::fs::metadata(&png).unwrap().len() > 5_000);

    args.plot = Some(svg.clone());
    args.format = Format::Json;
    run_compare(&predicted(), None, &args, "synthetic", &mut Vec::new()).unwrap();
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<svg") && s.contains("measured") && s.contains("communication"));

    args.plot = None;
    args.fail_above = Some(0.5);
    let err = run_compare(&predicted(), None, &args, "t", &mut Vec::new()).unwrap_err();
    assert!(matches!(err, CliError::AboveTolerance { .. }), "{err}");
    // NaN would switch the check off: refused, naming the flag.
    args.fail_above = Some(f64::NAN);
    let err = run_compare(&predicted(), None, &args, "t", &mut Vec::new()).unwrap_err();
    assert!(
        matches!(err, CliError::Flag { .. }) && err.to_string().contains("--fail-above NaN"),
        "{err}"
    );
    args.plot = Some(dir.join("cmp.gif"));
    args.fail_above = None;
    assert!(matches!(
        run_compare(&predicted(), None, &args, "t", &mut Vec::new()),
        Err(CliError::Plot(_))
    ));
}

#[test]
fn compare_command_end_to_end() {
    let dir = common::scratch("cli_compare_cmd");
    common::write_ranks(&dir, &[0.0, 25.0], 3, false);
    let d = dir.to_str().unwrap();
    let svg = dir.join("c.svg");
    // The synthetic trace shows 2 ranks and batch 8 (no layer count: one collective per step).
    let (ok, out, err) = decodesim(&[
        "compare",
        "--system",
        "h200-2x-nvlink",
        "--tp",
        "2",
        "--batch",
        "8",
        "--trace",
        d,
        "--format",
        "json",
        "--plot",
        svg.to_str().unwrap(),
        "--fail-above",
        "1e9",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!((v["step_time_us"]["measured"].as_f64().unwrap() - 242.5).abs() < 1e-9);
    assert!(v["step_time_us"]["predicted"].as_f64().unwrap() > 0.0);
    assert_eq!(v["breakdown"].as_array().unwrap().len(), Category::COUNT);
    assert!(svg.is_file());
    assert_eq!(v["inferred"]["ranks"]["value"], 2);
    assert_eq!(v["inferred"]["batch"]["value"], 8);
    let (ok, out, err) = decodesim(&[
        "compare",
        "--system",
        "h200-2x-nvlink",
        "--tp",
        "2",
        "--batch",
        "8",
        "--trace",
        d,
        "--fail-above",
        "1",
    ]);
    assert!(!ok && err.contains("--fail-above"), "{err}");
    assert!(
        out.contains("predicted µs"),
        "the report is printed before failing: {out}"
    );
}

/// The two rank files of one committed H200 capture, copied into a fresh folder.
fn h200_capture(name: &str, scratch: &str) -> std::path::PathBuf {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/traces/h200");
    let dir = common::scratch(scratch);
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        let f = e.file_name().to_string_lossy().into_owned();
        if f.starts_with(&format!("{name}_rank")) {
            std::fs::copy(e.path(), dir.join(&f)).unwrap();
        }
    }
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2, "{name}");
    dir
}

#[test]
fn compare_refuses_a_scenario_that_is_not_the_trace() {
    // The reported case: a 2-rank, 4-layer trace against the default 8-rank, 61-layer scenario
    // printed +360% with no warning.
    let dir = h200_capture("refstep_b16_c8192_default", "cli_mismatch");
    let d = dir.to_str().unwrap();
    let (ok, out, err) = decodesim(&[
        "compare", "--tp", "8", "--batch", "32", "--layers", "61", "--trace", d,
    ]);
    assert!(!ok, "{out}");
    assert!(
        err.contains("does not match the trace")
            && err.contains("ranks: scenario 8 (--tp), trace 2 (distributedInfo.world_size)")
            && err.contains("layers: scenario 61")
            && err.contains("trace 4")
            && err.contains("batch: scenario 32 (--batch), trace 16")
            && err.contains("GPU: scenario NVIDIA RTX PRO 6000")
            && err.contains("trace NVIDIA H200 (deviceProperties)")
            && err.contains("--allow-mismatch"),
        "{err}"
    );
    assert!(out.is_empty(), "no report before the refusal: {out}");

    // The scenario the trace shows: accepted, and the report says what was inferred.
    let matching = [
        "compare",
        "--system",
        "h200-2x-nvlink",
        "--model",
        "kimi-k2.5-bf16",
        "--tp",
        "2",
        "--layers",
        "4",
        "--batch",
        "16",
        "--context",
        "8192",
        "--runtime",
        "reference",
        "--calibration",
        "h200",
        "--trace",
        d,
    ];
    let (ok, out, err) = decodesim(&matching);
    assert!(ok, "{err}");
    assert!(
        out.contains("the trace shows:") && out.contains("layers 4 (10 collectives per step"),
        "{out}"
    );

    // --allow-mismatch: compared, with the mismatch in the report.
    let (ok, out, err) = decodesim(&["compare", "--tp", "8", "--trace", d, "--allow-mismatch"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("MISMATCH (allowed by --allow-mismatch): ranks")
            && out.contains("MISMATCH (allowed by --allow-mismatch): GPU"),
        "{out}"
    );
}

#[test]
fn compare_takes_what_the_trace_shows_for_the_flags_not_given_and_checks_the_gpu() {
    let dir = h200_capture("refstep_b16_c8192_default", "cli_defaults");
    let d = dir.to_str().unwrap();
    // No --tp, --batch or --layers: the trace's 2 ranks, batch 16 and 4 layers are used; the
    // system's GPU is still checked against the trace's.
    let (ok, out, err) = decodesim(&["compare", "--trace", d]);
    assert!(!ok, "{out}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("GPU: scenario NVIDIA RTX PRO 6000 Blackwell Server Edition (rtx-pro-6000-8x-pcie, --system), trace NVIDIA H200 (deviceProperties)")
            && !err.contains("ranks:")
            && !err.contains("batch:")
            && !err.contains("layers:"),
        "{err}"
    );
    let (ok, out, err) = decodesim(&[
        "compare",
        "--system",
        "h200-2x-nvlink",
        "--model",
        "kimi-k2.5-bf16",
        "--trace",
        d,
        "--format",
        "json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let taken = v["checks"][0].as_str().unwrap();
    assert!(
        taken.starts_with("scenario flags not given, taken from the trace: --tp 2")
            && taken.contains("--batch 16")
            && taken.contains("--layers 4"),
        "{taken}"
    );
    assert_eq!(v["inferred"]["gpu"]["value"], "NVIDIA H200");
    // A flag given wins over the trace and is checked against it.
    let (ok, _, err) = decodesim(&[
        "compare",
        "--system",
        "h200-2x-nvlink",
        "--model",
        "kimi-k2.5-bf16",
        "--batch",
        "64",
        "--trace",
        d,
    ]);
    assert!(!ok);
    assert!(
        err.contains("batch: scenario 64 (--batch), trace 16"),
        "{err}"
    );
}

#[test]
fn fail_above_nan_is_refused_before_anything_is_read() {
    let (ok, _, err) = decodesim(&["compare", "--trace", "/no/such", "--fail-above", "NaN"]);
    assert!(
        !ok && err.contains("--fail-above") && err.contains("NaN"),
        "{err}"
    );
    let (ok, _, err) = decodesim(&["compare", "--trace", "/no/such", "--fail-above=-5"]);
    assert!(!ok && err.contains("--fail-above"), "{err}");
}

#[test]
fn validate_writes_csv_and_says_what_the_traces_show() {
    let dir = h200_capture("refstep_b16_c8192_default", "cli_validate_csv");
    let d = dir.to_str().unwrap();
    let (ok, out, err) = decodesim(&["validate", "--traces", d, "--format", "csv"]);
    assert!(ok, "{err}");
    let mut r = csv::Reader::from_reader(out.as_bytes());
    let h = r.headers().unwrap().clone();
    assert_eq!(&h[0], "configuration");
    let rows: Vec<csv::StringRecord> = r.records().map(|x| x.unwrap()).collect();
    assert_eq!(rows.len(), 1);
    assert_eq!(&rows[0][0], "refstep_b16_c8192_default");
    let layers = h.iter().position(|c| c == "layers").unwrap();
    assert_eq!(&rows[0][layers], "4");
    let (ok, out, _) = decodesim(&["validate", "--traces", d]);
    assert!(
        ok && out.contains("the traces show") && out.contains("layers 4"),
        "{out}"
    );
    // --layers that the trace contradicts is refused.
    let (ok, _, err) = decodesim(&["validate", "--traces", d, "--layers", "61"]);
    assert!(
        !ok && err.contains("layers: scenario 61") && err.contains("trace 4"),
        "{err}"
    );
}

#[test]
fn a_simulated_timeline_reads_back_with_the_simulators_categories() {
    // The default scenario (8 ranks, 61 layers): its sampling step, 110.6 µs on the mean, once
    // read back as 45.8 µs because the trace rules called the logits' FP32 copy elementwise and
    // the shared expert's GEMMs MoE. The timeline now declares each kernel's category.
    let sim = decodesim::sim::simulate(&decodesim::sim::ScenarioRequest::default()).unwrap();
    let dir = common::scratch("roundtrip");
    let tl = dir.join("tl.json");
    decodesim::files::write_atomic(&tl, |w| {
        decodesim::report::chrome::write_chrome_trace(&sim, w)
    })
    .unwrap();
    let (ok, out, err) = decodesim(&[
        "trace",
        "summarize",
        tl.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(ok, "{err}");
    let read: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(read["unclassified_us"].as_f64().unwrap(), 0.0);
    // The file holds every rank (one process each); each is read back as its own rank.
    let ranks = read["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), sim.per_rank.len());
    for (r, got) in ranks.iter().enumerate() {
        assert_eq!(got["rank"], r as u64);
        assert_eq!(got["rank_source"], "simulated_timeline");
        assert!(got["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| !w.as_str().unwrap().contains("other devices ignored")));
        for e in got["breakdown"].as_array().unwrap() {
            let c: Category = e["category"].as_str().unwrap().parse().unwrap();
            let (t, p) = (e["time_us"].as_f64().unwrap(), sim.per_rank[r].time(c));
            assert!(
                (t - p).abs() < 1e-3,
                "{c}: simulated {p} µs on rank {r}, read back {t} µs"
            );
        }
    }
    assert!(sim.per_rank[0].time(Category::Sampling) > 100.0);
}
