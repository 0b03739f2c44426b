//! Jobs bounded before they start: every command whose work grows with its lists estimates it
//! and refuses above `--max-work`, naming the flag, before anything is loaded or simulated.

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

fn refused(args: &[&str], needles: &[&str]) {
    let (code, out, err) = decodesim(args);
    assert_eq!(code, Some(1), "{args:?} should exit 1: {err}");
    assert!(
        out.is_empty(),
        "{args:?} wrote {} bytes before refusing",
        out.len()
    );
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    for n in ["--max-work", "work units"].iter().chain(needles) {
        assert!(err.contains(n), "{args:?}: error {err:?} lacks {n:?}");
    }
}

#[test]
fn a_sweep_of_billions_is_refused_at_once() {
    // 16,384 batches × 262,144 contexts = 4.29e9 scenarios: the product is computed without
    // overflow and refused before the model is loaded.
    refused(
        &[
            "sweep",
            "--batch",
            "1..=16384",
            "--context",
            "1..=262144",
            "--format",
            "csv",
        ],
        &[
            "4,294,967,296 scenarios",
            "16384 batches × 262144 contexts",
            "at least 4295067296",
        ],
    );
    // Six long lists: far beyond u64 scenarios is still a clear refusal.
    refused(
        &[
            "sweep",
            "--batch",
            "1..=16384",
            "--context",
            "1..=1000000",
            "--draft-tokens",
            "0..=64",
            "--nccl-proto",
            "LL,LL128,Simple,auto",
            "--nccl-algo",
            "Ring,Tree,auto",
            "--cuda-graphs",
            "on,off",
        ],
        &["e", "scenarios"],
    );
}

#[test]
fn the_sweep_limit_is_exact_and_raised_by_the_flag() {
    let args = [
        "sweep",
        "--batch",
        "1..=4",
        "--context",
        "1024,2048",
        "--format",
        "csv",
    ];
    // One layout loaded and fitted (100,000 units) and 8 rows of one unit.
    let mut over = args.to_vec();
    over.extend(["--max-work", "100007"]);
    refused(
        &over,
        &["8 scenarios", "--max-work 100007", "at least 100008"],
    );
    let mut at = args.to_vec();
    at.extend(["--max-work", "100008"]);
    let (code, out, err) = decodesim(&at);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.lines().count(), 1 + 8, "header and 8 rows:\n{out}");
}

#[test]
fn vary_counts_its_variants_before_building_them() {
    // 8e9 combinations: counted, not built.
    let list = (1..=2000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let b = format!("batch={list}");
    let c = format!("context={list}");
    let l = format!("link-gbps={list}");
    let args = ["whatif", "--vary", &b, "--vary", &c, "--vary", &l];
    refused(
        &args,
        &["8,000,000,000 variants", "the product of the lists"],
    );
    // One at a time the same lists are 6,000 variants: still above the default of 10^7 units
    // (2,500 per full timeline).
    let mut one = args.to_vec();
    one.push("--one-at-a-time");
    refused(&one, &["6,000 variants", "--one-at-a-time"]);
}

#[test]
fn spec_decode_bounds_its_monte_carlo_and_its_crossover_grid() {
    refused(
        &[
            "whatif",
            "spec-decode",
            "--acceptance-rate",
            "0.3,0.5",
            "--mc-users",
            "1000000",
            "--output-tokens",
            "1000000",
        ],
        &[
            "Monte Carlo draws",
            "--mc-users 1000000",
            "--output-tokens 1000000",
        ],
    );
    refused(
        &[
            "whatif",
            "spec-decode",
            "--acceptance-rate",
            "0.5",
            "--draft-tokens",
            "1..=8",
            "--crossover-batches",
            "1..=4096",
        ],
        &["4096 crossover batches", "full timelines"],
    );
}

#[test]
fn capacity_bounds_its_curves_and_breakdowns() {
    let batches = (1..=5000)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    refused(
        &[
            "capacity",
            "--plot-breakdown",
            "/tmp/never-written.svg",
            "--batches",
            &batches,
        ],
        &["5,001 single steps", "--batches"],
    );
    // The planner's candidates are counted from the list before any system is loaded (these
    // names do not exist: the bound comes first).
    let systems = (0..500)
        .map(|i| format!("no-such-system-{i}"))
        .collect::<Vec<_>>()
        .join(",");
    refused(
        &["capacity", "--users", "100", "--systems", &systems],
        &["curves", "--systems"],
    );
}
