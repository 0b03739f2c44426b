//! `decodesim trace summarize` end to end, and the compare report and plot.

mod common;

use decodesim::accounting::Breakdown;
use decodesim::category::Category;
use decodesim::cli::trace::{run_compare, CompareTraceArgs, Format, TraceReadArgs};
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
        read,
    };
    let mut out = Vec::new();
    let c = run_compare(
        &predicted(),
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
    run_compare(&predicted(), &args, "synthetic", &mut Vec::new()).unwrap();
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<svg") && s.contains("measured") && s.contains("communication"));

    args.plot = None;
    args.fail_above = Some(0.5);
    let err = run_compare(&predicted(), &args, "t", &mut Vec::new()).unwrap_err();
    assert!(matches!(err, CliError::AboveTolerance { .. }), "{err}");
    args.plot = Some(dir.join("cmp.gif"));
    args.fail_above = None;
    assert!(matches!(
        run_compare(&predicted(), &args, "t", &mut Vec::new()),
        Err(CliError::Plot(_))
    ));
}

#[test]
fn compare_command_end_to_end() {
    let dir = common::scratch("cli_compare_cmd");
    common::write_ranks(&dir, &[0.0, 25.0], 3, false);
    let d = dir.to_str().unwrap();
    let svg = dir.join("c.svg");
    let (ok, out, err) = decodesim(&[
        "compare",
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
    let (ok, out, err) = decodesim(&["compare", "--trace", d, "--fail-above", "1"]);
    assert!(!ok && err.contains("--fail-above"), "{err}");
    assert!(
        out.contains("predicted µs"),
        "the report is printed before failing: {out}"
    );
}
