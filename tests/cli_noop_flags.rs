//! Flags that do nothing say so: a warning on standard error for a harmless no-op (the command
//! still succeeds), an error for a contradiction (the command fails before any work).

mod common;

/// (exit code, stdout, stderr).
fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn warns(args: &[&str], needle: &str) -> String {
    let (code, out, err) = run(args);
    assert_eq!(code, Some(0), "{args:?}: {err}");
    assert!(
        err.contains(&format!("warning: {needle}")),
        "{args:?}: {err}"
    );
    out
}

fn refuses(args: &[&str], needles: &[&str]) {
    let (code, _, err) = run(args);
    assert_eq!(code, Some(1), "{args:?} must fail: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: {err:?} lacks {n:?}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn ep_comm_without_ep_warns() {
    warns(
        &["simulate", "--ep-comm", "all-to-all", "--format", "csv"],
        "--ep-comm all-to-all does nothing without --ep N",
    );
    // With --ep it is used: no warning.
    let (code, _, err) = run(&[
        "simulate",
        "--ep",
        "8",
        "--ep-comm",
        "all-to-all",
        "--format",
        "csv",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("--ep-comm"), "{err}");
}

#[test]
fn timeline_k_without_timeline_warns() {
    warns(
        &[
            "whatif",
            "spec-decode",
            "--acceptance-rate",
            "0.6",
            "--draft-tokens",
            "1,2",
            "--crossover-batches",
            "none",
            "--mc-users",
            "20",
            "--timeline-k",
            "2",
        ],
        "--timeline-k 2 does nothing without --timeline",
    );
}

#[test]
fn gpu_hour_usd_without_a_plan_warns() {
    warns(
        &["capacity", "--points", "3", "--gpu-hour-usd", "2.5"],
        "--gpu-hour-usd prices the planner's deployments, and no plan is made without --target-tokens-per-s, --users, --layouts, --plot-pareto or --disaggregate",
    );
}

#[test]
fn planner_flags_without_a_plan_warn() {
    warns(
        &["capacity", "--points", "3", "--systems", "h200-8x-nvlink"],
        "--systems names the systems the planner compares (or the curves of --plot-throughput, --plot-tpot and --plot-memory), and no plan is made without",
    );
    warns(
        &["capacity", "--points", "3", "--max-systems", "4"],
        "--max-systems bounds the planner's deployments, and no plan is made without",
    );
}

#[test]
fn a_price_for_a_system_not_planned_is_an_error() {
    refuses(
        &[
            "capacity",
            "--users",
            "8",
            "--gpu-hour-usd",
            "rtx-pro-6000-8x-pcei=1.8",
        ],
        &[
            "--gpu-hour-usd rtx-pro-6000-8x-pcei",
            "not planned",
            "rtx-pro-6000-8x-pcie",
        ],
    );
    refuses(
        &[
            "capacity",
            "--users",
            "8",
            "--systems",
            "rtx-pro-6000-8x-pcie",
            "--gpu-hour-usd",
            "rtx-pro-6000-8x-pcie=1.8,h200-8x-nvlink=3.5",
        ],
        &["--gpu-hour-usd h200-8x-nvlink", "not planned"],
    );
}

#[test]
fn a_system_priced_twice_is_an_error() {
    refuses(
        &[
            "capacity",
            "--users",
            "8",
            "--gpu-hour-usd",
            "rtx-pro-6000-8x-pcie=1.8,rtx-pro-6000-8x-pcie=2.0",
        ],
        &["--gpu-hour-usd rtx-pro-6000-8x-pcie", "priced twice"],
    );
}

#[test]
fn both_spellings_of_a_grid_key_are_an_error() {
    let dir = common::scratch("noop_grid");
    let grid = dir.join("grid.toml");
    std::fs::write(
        &grid,
        "batch = 8\nnccl-proto = \"LL\"\nnccl_proto = \"Simple\"\n",
    )
    .unwrap();
    refuses(
        &["sweep", "--grid", grid.to_str().unwrap()],
        &[
            "grid.toml",
            "'nccl-proto' and 'nccl_proto' are the same key",
        ],
    );
}

#[test]
fn repeated_sweep_values_are_swept_once_with_a_warning() {
    let out = warns(
        &["sweep", "--batch", "8,8,16", "--format", "csv"],
        "--batch lists 8 more than once; each value is swept once",
    );
    let batches: Vec<&str> = out
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(3).unwrap())
        .collect();
    assert_eq!(batches, ["8", "16"]);
    // The same from a grid file, and for names that differ only in case.
    let dir = common::scratch("noop_dup_values");
    let grid = dir.join("grid.toml");
    std::fs::write(
        &grid,
        "batch = \"1..=3,2\"\nnccl-proto = [\"LL\", \"ll\"]\n",
    )
    .unwrap();
    let (code, out, err) = run(&["sweep", "--grid", grid.to_str().unwrap(), "--format", "csv"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("warning: --batch lists 2 more than once"),
        "{err}"
    );
    assert!(
        err.contains("warning: --nccl-proto lists LL more than once"),
        "{err}"
    );
    assert_eq!(out.lines().count(), 1 + 3, "{out}");
}

#[test]
fn ll128_without_nvlink_warns_where_the_report_would_not_say_it() {
    let msg = "--nccl-proto LL128 is not eligible on rtx-pro-6000-8x-pcie (the pcie_p2p path): NCCL enables LL128 only over NVLink";
    warns(&["sweep", "--batch", "8", "--nccl-proto", "LL,LL128"], msg);
    warns(
        &["whatif", "--vary", "nccl-proto=LL,LL128", "--batch", "8"],
        msg,
    );
    // Over NVLink LL128 is NCCL's own: nothing to say.
    let (code, _, err) = run(&[
        "sweep",
        "--system",
        "h200-8x-nvlink",
        "--batch",
        "8",
        "--nccl-proto",
        "LL128",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("LL128"), "{err}");
    // simulate lists it among its report's warnings.
    let (code, out, _) = run(&["simulate", "--nccl-proto", "LL128"]);
    assert_eq!(code, Some(0));
    assert!(
        out.contains("NCCL_PROTO=LL128 is not eligible on the pcie_p2p path"),
        "{out}"
    );
}

#[test]
fn sweep_ep_comm_without_expert_parallelism_warns() {
    warns(
        &[
            "sweep",
            "--ep-comm",
            "rdma-ll",
            "--batch",
            "8",
            "--format",
            "csv",
        ],
        "--ep-comm rdma-ll does nothing without --ep N (expert parallelism, N > 1) or --dp N",
    );
}
