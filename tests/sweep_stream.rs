//! Sweeps stream their rows (CSV row count = scenario count, JSON valid), and decide only among
//! the scenarios whose memory fits unless `--include-infeasible`.

use decodesim::capacity::memory::{account, MemoryOptions};
use decodesim::sim::ScenarioRequest;
use std::process::Command;

fn decodesim(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(args)
        .output()
        .expect("binary runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = decodesim(args);
    assert_eq!(code, Some(0), "{args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}):\n{out}"))
}

/// Batches 1..256 at 8k: batch 256 has the most tokens/s but its KV cache (256 × 8k tokens of
/// Kimi's MLA latent) does not fit on a 96 GB RTX PRO 6000 beside the weights.
const GRID: [&str; 8] = [
    "sweep",
    "--batch",
    "1,4,16,32,64,128,256",
    "--context",
    "8192",
    "--format",
    "json",
    "--cuda-graphs",
];

fn f(r: &serde_json::Value, k: &str) -> f64 {
    r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r}"))
}

#[test]
fn csv_rows_equal_scenarios_and_json_is_valid() {
    let (code, out, err) = decodesim(&[
        "sweep",
        "--batch",
        "1..=37",
        "--context",
        "1000,2000,3000",
        "--cuda-graphs",
        "on,off",
        "--format",
        "csv",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1 + 37 * 3 * 2);
    assert!(lines[0].contains(",fits,"), "{}", lines[0]);
    let cols = lines[0].split(',').count();
    assert!(lines[1..].iter().all(|l| l.split(',').count() == cols));
    // Grid order: batch, then context, then graphs.
    assert!(lines[1].contains(",1,1000,LL,Ring,on,"), "{}", lines[1]);
    assert!(lines[2].contains(",1,1000,LL,Ring,off,"), "{}", lines[2]);
    assert!(
        lines[222].contains(",37,3000,LL,Ring,off,"),
        "{}",
        lines[222]
    );

    let v = json(&[
        "sweep",
        "--batch",
        "1..=37",
        "--context",
        "1000,2000,3000",
        "--cuda-graphs",
        "on,off",
        "--format",
        "json",
    ]);
    assert_eq!(v["rows"].as_array().unwrap().len(), 222);
    assert_eq!(v["scenarios"], 222);
    assert_eq!(v["model"], "kimi-k2.5");
    // The same numbers as the CSV (step time to the CSV's 3 decimals).
    let csv_step: f64 = lines[1].split(',').nth(10).unwrap().parse().unwrap();
    assert!((f(&v["rows"][0], "step_time_us") - csv_step).abs() < 1e-3);
}

#[test]
fn fits_follows_capacity_memory_accounting() {
    let mut args = GRID.to_vec();
    args.push("on");
    let v = json(&args);
    let (mut s, p) = ScenarioRequest::default().load().unwrap();
    s.cuda_graphs = true;
    let m = account(&s, &p, &MemoryOptions::default()).unwrap();
    let max = m.max_concurrency(8192.0);
    assert!(
        max > 1 && max < 256,
        "the grid must straddle the limit: {max}"
    );
    for r in v["rows"].as_array().unwrap() {
        let b = r["batch"].as_u64().unwrap();
        assert_eq!(
            r["fits"].as_bool().unwrap(),
            b <= max,
            "batch {b}, limit {max}"
        );
    }
    assert_eq!(
        v["fitting"].as_u64().unwrap(),
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["fits"] == true)
            .count() as u64
    );
}

#[test]
fn best_and_front_are_chosen_among_what_fits() {
    let mut args = GRID.to_vec();
    args.push("on");
    let v = json(&args);
    let rows = v["rows"].as_array().unwrap();
    let fastest = rows
        .iter()
        .max_by(|a, b| f(a, "tokens_per_s").total_cmp(&f(b, "tokens_per_s")))
        .unwrap();
    assert_eq!(
        fastest["fits"], false,
        "the fastest scenario must not fit: {fastest}"
    );
    let fastest_fit = rows
        .iter()
        .filter(|r| r["fits"] == true)
        .max_by(|a, b| f(a, "tokens_per_s").total_cmp(&f(b, "tokens_per_s")))
        .unwrap();
    assert_eq!(v["best"]["tokens_per_s"], *fastest_fit);
    assert!(v["pareto"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["fits"] == true));
    // The front is every fitting row no other fitting row beats on both rates.
    let fit: Vec<&serde_json::Value> = rows.iter().filter(|r| r["fits"] == true).collect();
    let front: Vec<&serde_json::Value> = fit
        .iter()
        .copied()
        .filter(|r| {
            !fit.iter().any(|o| {
                f(o, "tokens_per_s") >= f(r, "tokens_per_s")
                    && f(o, "tokens_per_s_per_user") >= f(r, "tokens_per_s_per_user")
                    && o != r
            })
        })
        .collect();
    assert_eq!(v["pareto"].as_array().unwrap().len(), front.len());

    args.push("--include-infeasible");
    let v = json(&args);
    assert_eq!(v["best"]["tokens_per_s"], *fastest);
    assert!(v["pareto"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["fits"] == false));

    // The summary says the same, and marks an infeasible pick.
    let (code, out, _) = decodesim(&[
        "sweep",
        "--batch",
        "1,4,16,32,64,128,256",
        "--context",
        "8192",
    ]);
    assert_eq!(code, Some(0));
    let line = out
        .lines()
        .find(|l| l.starts_with("most tokens/s in total"))
        .unwrap();
    assert!(
        line.contains(&format!("batch {} ", fastest_fit["batch"])),
        "{line}"
    );
    assert!(out.contains("scenarios fit"), "{out}");
    let (_, out, _) = decodesim(&[
        "sweep",
        "--batch",
        "1,4,16,32,64,128,256",
        "--context",
        "8192",
        "--include-infeasible",
    ]);
    let line = out
        .lines()
        .find(|l| l.starts_with("most tokens/s in total"))
        .unwrap();
    assert!(
        line.contains("batch 256 ") && line.contains("does NOT fit"),
        "{line}"
    );
}

#[test]
fn pareto_only_writes_the_front() {
    let (code, out, err) = decodesim(&[
        "sweep",
        "--batch",
        "1..=64",
        "--context",
        "1024,65536",
        "--pareto",
        "--format",
        "csv",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let v = json(&[
        "sweep",
        "--batch",
        "1..=64",
        "--context",
        "1024,65536",
        "--format",
        "json",
    ]);
    assert_eq!(
        out.lines().count() - 1,
        v["pareto"].as_array().unwrap().len()
    );
    let v2 = json(&[
        "sweep",
        "--batch",
        "1..=64",
        "--context",
        "1024,65536",
        "--pareto",
        "--format",
        "json",
    ]);
    assert_eq!(v2["rows"], v["pareto"]);
}

#[test]
fn output_file_is_written_whole() {
    let dir = std::env::temp_dir().join(format!("decodesim-sweep-stream-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("rows.csv");
    let (code, out, err) = decodesim(&[
        "sweep",
        "--batch",
        "1..=100",
        "--context",
        "1024,2048",
        "--format",
        "csv",
        "--output",
        p.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.is_empty());
    let text = std::fs::read_to_string(&p).unwrap();
    assert_eq!(text.lines().count(), 201);
    // No temporary file left beside it.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_planner_marks_fit_and_never_names_what_does_not_fit() {
    use decodesim::capacity::curve::{CurvePoint, Demand};
    use decodesim::capacity::plan::{self, Candidate, Target};
    let d = Demand::context(4096);
    let curve = |us_at_1: f64| -> Vec<CurvePoint> {
        [1u32, 8, 32]
            .iter()
            .map(|&c| CurvePoint::new(c, us_at_1 * (1.0 + c as f64 / 64.0), 0.0, &d))
            .collect()
    };
    let cand = |system: &str, tp: u32, max: u64, us: f64| Candidate {
        system: system.into(),
        gpus_per_system: 8,
        layout: decodesim::capacity::layout::Layout::tp(tp),
        max_concurrency: max,
        memory_note: (max == 0).then(|| "weights above the budget".into()),
        curve: curve(us),
        gpu_hour_usd: Some(2.0),
    };
    // TP=4 would be twice as fast for half the GPUs, but its weights do not fit.
    let cands = [cand("s", 8, 32, 10_000.0), cand("s", 4, 0, 5_000.0)];
    let t = Target {
        tokens_per_s: Some(500.0),
        users: None,
        max_tpot_ms: None,
        max_systems: 4,
    };
    let p = plan::plan(&cands, &t);
    let best = p.best.clone().expect("TP=8 fits and meets");
    assert_eq!((best.layout.tp, best.fits), (8, true));
    let tp4 = p.rows.iter().find(|r| r.layout.tp == 4).unwrap();
    assert_eq!((tp4.fits, tp4.meets), (false, false));
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(v["rows"][1]["fits"], false);
}
