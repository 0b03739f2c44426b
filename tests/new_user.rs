//! What a new user meets first: answers marked when their batch does not fit, a per-user speed
//! target, each collective's share of the step, where CUDA-graph padding shapes the capacity
//! knee, progress only on a terminal, and an install line pinned to the tested crate versions.

mod common;

use common::decodesim_exit;
use serde_json::Value;

fn json(args: &[&str]) -> Value {
    let (code, out, err) = decodesim_exit(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

const SPEC: [&str; 8] = [
    "whatif",
    "spec-decode",
    "--acceptance-rate",
    "0.7",
    "--draft-tokens",
    "1..3",
    "--crossover-batches",
    "8,16,32,48,64,128",
];

#[test]
fn spec_decode_marks_an_answer_whose_batch_does_not_fit_and_ends_the_crossover_at_what_fits() {
    let mut args = SPEC.to_vec();
    args.extend(["--batch", "64"]);
    let (code, out, err) = decodesim_exit(&args);
    assert_eq!(code, 0, "{err}");
    let best = out.lines().find(|l| l.starts_with("best:")).unwrap();
    assert!(
        best.contains("DOES NOT FIT: batch 64") && best.contains("fit)"),
        "{best}"
    );
    let crossover = out.lines().find(|l| l.starts_with("crossover:")).unwrap();
    assert!(
        crossover.contains("that fits") && crossover.contains("do not fit in memory"),
        "{crossover}"
    );
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("128 ") && l.ends_with("x  does not fit")),
        "{out}"
    );
    assert!(
        out.contains("speedup intervals at batch 64 (DOES NOT FIT in memory)"),
        "{out}"
    );
    // No progress bar when standard error is not a terminal.
    assert!(!err.contains("batches ("), "{err}");

    args.extend(["--format", "json"]);
    let v = json(&args);
    assert_eq!(v["fits"], false);
    assert_eq!(v["best"]["fits"], false);
    assert!(v["variants"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["fits"] == false));
    let most = v["max_fitting_batch"].as_u64().unwrap();
    assert!((1..64).contains(&most), "{most}");
    let c = &v["crossover"];
    assert_eq!(c["max_fitting_batch"].as_u64().unwrap(), most);
    for g in c["grid"].as_array().unwrap() {
        assert_eq!(
            g["fits"].as_bool().unwrap(),
            g["batch"].as_u64().unwrap() <= most,
            "{g}"
        );
    }
    // The paying range ends at a batch that fits.
    assert!(c["last_paying_batch"].as_u64().unwrap() <= most, "{c}");

    // A batch that fits: the answer line carries no mark, JSON says it fits.
    let mut args = SPEC[..6].to_vec();
    args.extend([
        "--batch",
        "8",
        "--crossover-batches",
        "none",
        "--format",
        "json",
    ]);
    let v = json(&args);
    assert_eq!(v["fits"], true);
    assert_eq!(v["best"]["fits"], true);
}

#[test]
fn capacity_takes_a_tokens_per_second_per_user_target() {
    let per_user = json(&[
        "capacity",
        "--min-tokens-per-s-per-user",
        "30",
        "--format",
        "json",
    ]);
    let tpot = json(&[
        "capacity",
        "--max-tpot-ms",
        &(1000.0f64 / 30.0).to_string(),
        "--format",
        "json",
    ]);
    assert_eq!(per_user["min_tokens_per_s_per_user"], 30.0);
    assert!((per_user["max_tpot_ms"].as_f64().unwrap() - 1000.0 / 30.0).abs() < 1e-9);
    let users = per_user["max_concurrency_at_tpot"].as_u64().unwrap();
    assert_eq!(users, tpot["max_concurrency_at_tpot"].as_u64().unwrap());
    // Every user at that concurrency gets at least the target.
    let at = per_user["curve"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["concurrency"].as_u64() == Some(users))
        .unwrap();
    assert!(
        at["tokens_per_s_per_user"].as_f64().unwrap() >= 30.0,
        "{at}"
    );

    let (code, out, err) = decodesim_exit(&["capacity", "--min-tokens-per-s-per-user", "30"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "--min-tokens-per-s-per-user 30 (TPOT at most 33.33 ms): at most {users} concurrent users"
        )),
        "{out}"
    );

    // Both given: the stricter holds, and the report names the flag that set it.
    let both = json(&[
        "capacity",
        "--min-tokens-per-s-per-user",
        "30",
        "--max-tpot-ms",
        "20",
        "--format",
        "json",
    ]);
    assert_eq!(both["max_tpot_ms"], 20.0);
    assert_eq!(both["min_tokens_per_s_per_user"], Value::Null);

    for bad in ["0", "NaN", "1e9", "-3"] {
        let (code, out, err) =
            decodesim_exit(&["capacity", &format!("--min-tokens-per-s-per-user={bad}")]);
        assert_eq!(code, 1, "{bad}: {out}");
        assert!(out.is_empty());
        assert!(
            err.contains("--min-tokens-per-s-per-user") && err.contains("tokens/s per user"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn simulate_prints_each_collectives_share_of_the_step() {
    let (code, out, err) = decodesim_exit(&["simulate"]);
    assert_eq!(code, 0, "{err}");
    let header = out
        .lines()
        .find(|l| l.starts_with("op ") && l.contains("bytes each"))
        .unwrap();
    assert!(header.ends_with("share of step"), "{header}");
    let ar = out.lines().find(|l| l.starts_with("all_reduce")).unwrap();
    assert!(ar.ends_with('%'), "{ar}");

    let v = json(&["simulate", "--format", "json"]);
    let step = v["step_time_us"].as_f64().unwrap();
    let mut total = 0.0;
    for c in v["collectives"].as_array().unwrap() {
        let count = c["count"].as_f64().unwrap();
        let each = c["time_us"].as_f64().unwrap();
        let share = c["share_of_step"].as_f64().unwrap();
        assert!((c["total_us"].as_f64().unwrap() - count * each).abs() < 1e-6);
        assert!((share - count * each / step).abs() < 1e-12, "{c}");
        total += share;
    }
    assert!(total > 0.0 && total < 1.0, "{total}");
    // The table's figure is the JSON's, as a percentage.
    let ar_json = &v["collectives"][0];
    assert_eq!(ar_json["op"], "all_reduce");
    let pct = format!("{:.1}%", ar_json["share_of_step"].as_f64().unwrap() * 100.0);
    assert!(ar.ends_with(&pct), "{ar} vs {pct}");
}

#[test]
fn the_capacity_knee_says_where_cuda_graph_padding_shapes_it() {
    let (code, out, err) = decodesim_exit(&["capacity"]);
    assert_eq!(code, 0, "{err}");
    let v = json(&["capacity", "--format", "json"]);
    let knee = v["knee_concurrency"].as_u64().unwrap();
    let pad = &v["knee_padding"];
    assert_eq!(pad["knee"].as_u64().unwrap(), knee);
    let next = pad["next_concurrency"].as_u64().unwrap();
    let padded = pad["padded_to"].as_u64().unwrap();
    assert!(padded > next, "{pad}");
    assert!(
        out.contains(&format!(
            "CUDA-graph padding shapes the curve at the knee: vLLM runs concurrency {next} as a batch of {padded}"
        )),
        "{out}"
    );
    // Without CUDA graphs nothing is padded and nothing is said.
    let v = json(&["capacity", "--cuda-graphs", "off", "--format", "json"]);
    assert_eq!(v["knee_padding"], Value::Null);
}

#[test]
fn the_readme_installs_the_tested_crate_versions() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    for line in readme.lines().filter(|l| l.contains("cargo install")) {
        assert!(line.contains("--locked"), "{line}");
    }
    assert!(readme.contains("cargo install --locked --path ."));
}
