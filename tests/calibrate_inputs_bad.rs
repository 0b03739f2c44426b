//! Bad calibration inputs are refused with a message naming the file and the line (nccl-tests,
//! CSV) or the key (bench JSON), and a non-zero exit: malformed nccl-tests output, malformed
//! `vllm bench serve` results, points that identify nothing, contradictory points and the same
//! measurement repeated.

use std::path::{Path, PathBuf};
use std::process::Command;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-cib-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&str], files: &[&Path], out: &Path) -> (i32, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .arg("calibrate")
        .args(args)
        .args(files)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const HEADER: &str = "# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 8 minBytes 8 maxBytes 64 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
";
const ROW8: &str =
    "           8             2     float     sum      -1    20.00    0.00    0.00      0    20.24    0.00    0.00      0\n";

/// nccl-tests text that is not a usable measurement: (case, file text, what the message says).
fn nccl_cases() -> Vec<(&'static str, String, Vec<&'static str>)> {
    vec![
        (
            "no-table",
            HEADER.to_string(),
            vec!["'table'", "no data rows"],
        ),
        (
            "columns",
            format!("{HEADER}{ROW8}          16             4     float     sum      -1    20.00    0.00    0.00      0    20.24\n"),
            vec!["line 6", "10 columns, expected 13"],
        ),
        (
            "non-numeric",
            format!("{HEADER}          16             4     float     sum      -1    fast    0.00    0.00      0    20.24    0.00    0.00      0\n"),
            vec!["line 5", "out-of-place time", "'fast'"],
        ),
        (
            "no-ngpus",
            format!("# nccl-tests version 2.17.6\n# Collective test starting: all_reduce_perf\n{ROW8}"),
            vec!["'header'", "nGpus"],
        ),
        (
            "wrong",
            format!("{HEADER}{ROW8}          16             4     float     sum      -1    20.00    0.00    0.00      3    20.24    0.00    0.00      0\n"),
            vec!["line 6", "3 wrong result(s)"],
        ),
    ]
}

#[test]
fn malformed_nccl_tests_output_is_refused_naming_file_and_line() {
    let d = tmp("nccl");
    for (case, text, wants) in nccl_cases() {
        let f = d.join(format!("all_reduce_{case}.txt"));
        std::fs::write(&f, text).unwrap();
        let (code, err) = run(&["--from-nccl-tests"], &[&f], &d.join("o/profile.toml"));
        assert_eq!(code, 1, "{case}: {err}");
        assert!(
            err.contains(&format!("all_reduce_{case}.txt")),
            "{case}: {err}"
        );
        for w in wants {
            assert!(err.contains(w), "{case}: {w:?} not in {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            !d.join("o/profile.toml").exists(),
            "{case}: a profile was written"
        );
    }
}

const GOOD: &str = r#"{"date": "20260601-101500", "backend": "vllm", "model_id": "moonshotai/Kimi-K2.5", "num_prompts": 64, "request_rate": "inf", "max_concurrency": 4, "completed": 64, "failed": 0, "total_input_tokens": 128000, "total_output_tokens": 64000, "output_throughput": 120.5, "median_tpot_ms": 30.1, "mean_tpot_ms": 30.5}"#;

#[test]
fn malformed_bench_results_are_refused_naming_file_and_key() {
    let d = tmp("bench");
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "missing",
            GOOD.replace(r#""output_throughput": 120.5, "#, ""),
            vec!["field 'output_throughput'", "missing"],
        ),
        (
            "type",
            GOOD.replace("120.5", r#""fast""#),
            vec!["field 'output_throughput'", "\"fast\"", "expected a positive number"],
        ),
        (
            "zero",
            GOOD.replace("120.5", "0"),
            vec!["field 'output_throughput'", "found 0"],
        ),
        (
            "negative",
            GOOD.replace("120.5", "-3.5"),
            vec!["field 'output_throughput'", "found -3.5"],
        ),
        (
            "null-concurrency",
            GOOD.replace(r#""max_concurrency": 4"#, r#""max_concurrency": null"#),
            vec!["field 'max_concurrency'", "--max-concurrency"],
        ),
        (
            "concurrency-type",
            GOOD.replace(r#""max_concurrency": 4"#, r#""max_concurrency": [4]"#),
            vec!["field 'max_concurrency'", "[4]"],
        ),
        (
            "completed",
            GOOD.replace(r#""completed": 64"#, r#""completed": 0"#),
            vec!["field 'completed'", "found 0"],
        ),
        (
            "acceptance",
            GOOD.replace(
                r#""failed": 0"#,
                r#""failed": 0, "spec_method": "eagle3", "draft_tokens": "3", "acceptance_length": "5.5""#,
            ),
            vec!["field 'acceptance_length'", "impossible at 3 draft tokens"],
        ),
        ("syntax", "{\"max_concurrency\": 4,".to_string(), vec!["not valid JSON", "line 1"]),
    ];
    for (case, text, wants) in cases {
        let f = d.join(format!("bench-{case}.json"));
        std::fs::write(&f, text).unwrap();
        let (code, err) = run(&["--from-throughput"], &[&f], &d.join("o.toml"));
        assert_eq!(code, 1, "{case}: {err}");
        assert!(err.contains(&format!("bench-{case}.json")), "{case}: {err}");
        for w in wants {
            assert!(err.contains(w), "{case}: {w:?} not in {err}");
        }
        assert!(!d.join("o.toml").exists(), "{case}: a profile was written");
    }
    // --append-result files: the message names the line of the bad object.
    let f = d.join("appended.jsonl");
    std::fs::write(&f, format!("{GOOD}\n{}\n", GOOD.replace("120.5", "-1"))).unwrap();
    let (code, err) = run(&["--from-throughput"], &[&f], &d.join("o.toml"));
    assert_eq!(code, 1);
    assert!(
        err.contains("appended.jsonl") && err.contains("field 'line 2, key output_throughput'"),
        "{err}"
    );
}

fn csv(d: &Path, name: &str, text: &str) -> PathBuf {
    let f = d.join(name);
    std::fs::write(&f, text).unwrap();
    f
}

#[test]
fn contradictory_and_repeated_points_are_refused() {
    let d = tmp("points");
    let f = csv(
        &d,
        "contra.csv",
        "concurrency,context,tokens_per_s\n8,4096,100\n16,4096,150\n8,4096,200\n",
    );
    let (code, err) = run(&["--from-throughput"], &[&f], &d.join("o.toml"));
    assert_eq!(code, 1);
    assert!(
        err.contains("contra.csv")
            && err.contains("lines 2 and 4")
            && err.contains("contradictory"),
        "{err}"
    );
    let f = csv(
        &d,
        "twice.csv",
        "concurrency,context,tokens_per_s\n8,4096,100\n16,4096,150\n8,4096,100\n",
    );
    let (code, err) = run(&["--from-throughput"], &[&f], &d.join("o.toml"));
    assert_eq!(code, 1);
    assert!(
        err.contains("twice.csv")
            && err.contains("lines 2 and 4")
            && err.contains("the same measurement repeated"),
        "{err}"
    );
    // Across files: both named, each with its line.
    let a = csv(
        &d,
        "a.csv",
        "concurrency,context,tokens_per_s\n8,4096,100\n",
    );
    let b = csv(
        &d,
        "b.csv",
        "concurrency,context,tokens_per_s\n16,4096,150\n8,4096,100\n",
    );
    let (code, err) = run(&["--from-throughput"], &[&a, &b], &d.join("o.toml"));
    assert_eq!(code, 1);
    assert!(
        err.contains("a.csv line 2") && err.contains("b.csv line 3"),
        "{err}"
    );
    assert!(!d.join("o.toml").exists());
}

#[test]
fn points_that_identify_nothing_are_refused() {
    let d = tmp("nothing");
    let f = csv(
        &d,
        "two.csv",
        "concurrency,context,tokens_per_s\n8,4096,100\n16,4096,150\n",
    );
    // --routing fixes the only factor asked for.
    let (code, err) = run(
        &[
            "--routing",
            "uniform",
            "--factors",
            "routing_alpha",
            "--from-throughput",
        ],
        &[&f],
        &d.join("o.toml"),
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("no factor can be identified") && err.contains("two.csv"),
        "{err}"
    );
    assert!(
        err.contains("routing_alpha: not fitted: --routing fixes the routing"),
        "{err}"
    );
    // One point identifies no factor with an interval.
    let f = csv(
        &d,
        "one.csv",
        "concurrency,context,tokens_per_s\n8,4096,100\n",
    );
    let (code, err) = run(&["--from-throughput"], &[&f], &d.join("o.toml"));
    assert_eq!(code, 1);
    assert!(
        err.contains("one.csv") && err.contains("at least 2 points"),
        "{err}"
    );
    assert!(!d.join("o.toml").exists());
}

#[test]
fn a_fit_with_a_zero_width_interval_is_refused() {
    use decodesim::calibrate::from_throughput::{
        fit_throughput, predict, Factor, Point, ThroughputRequest,
    };
    use decodesim::sim::ScenarioRequest;
    let base = ScenarioRequest {
        layers: Some(4),
        ..ScenarioRequest::default()
    };
    let src = PathBuf::from("exact.csv");
    let mut points: Vec<Point> = [4u32, 32]
        .iter()
        .enumerate()
        .map(|(i, &c)| Point {
            line: i + 2,
            concurrency: c,
            context: 4096,
            tokens_per_s: 1.0,
            ..Default::default()
        })
        .collect();
    // Measurements equal to the profile's own predictions: one factor fits them exactly, and
    // the interval would have zero width.
    for r in predict(&base, &points, &src).unwrap() {
        points[r.point.line - 2].tokens_per_s = r.predicted;
    }
    let d = tmp("exact");
    let e = fit_throughput(&ThroughputRequest {
        base,
        points,
        source: src,
        factors: vec![Factor::MoeEfficiency],
        out: d.join("o.toml"),
        name: None,
    })
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("zero-width 95% interval") && e.contains("exact.csv"),
        "{e}"
    );
    assert!(!d.join("o.toml").exists());
}
