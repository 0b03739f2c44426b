//! `sweep --max-work` counts what each layout's path really costs: loading and fitting each
//! layout, every row's replay (per pipeline stage, two micro-batches under two-batch overlap,
//! draft and verify passes for speculative rows) and, under expert parallelism, every rank's
//! expert loads drawn again at each distinct batch. A DP128 sweep over every batch is refused
//! at its real cost; the ignored release test holds the estimate against the measured CPU time
//! of every layout kind.

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

/// The estimate a refusal names ("raise --max-work to at least N").
fn estimate(args: &[&str]) -> u64 {
    let mut a = args.to_vec();
    a.extend(["--max-work", "1"]);
    let (code, out, err) = decodesim(&a);
    assert_eq!(code, Some(1), "{a:?}: {err}");
    assert!(out.is_empty(), "{a:?} wrote before refusing");
    let tail = err
        .split("raise --max-work to at least ")
        .nth(1)
        .unwrap_or_else(|| panic!("{a:?}: no estimate in {err:?}"));
    tail.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{a:?}: {err:?}"))
}

const DP128: [&str; 12] = [
    "sweep",
    "--model",
    "deepseek-v3",
    "--system",
    "h200-hgx-18node-ib",
    "--dp",
    "128",
    "--tp",
    "1",
    "--ep-comm",
    "rdma-ll",
    "--format",
];

#[test]
fn a_dp128_sweep_over_every_batch_is_refused_at_its_real_cost() {
    let mut args = DP128.to_vec();
    args.extend(["csv", "--batch", "1..=16384", "--context", "2048"]);
    let (code, out, err) = decodesim(&args);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.is_empty());
    assert!(!err.contains("panicked"), "{err}");
    for needle in [
        "16,384 scenarios",
        "up to 128 ranks",
        "16,384 distinct batches",
        "above --max-work 10000000",
    ] {
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
    // Each batch of DP128 costs 10 to 50 ms (every rank's expert loads drawn again): minutes
    // of CPU, not the 16 ms that one unit per row would say.
    let units = estimate(&args);
    assert!(
        (200_000_000..2_000_000_000).contains(&units),
        "DP128 over 16,384 batches estimated at {units} units"
    );
}

#[test]
fn the_estimate_follows_each_layout_path() {
    let grid = [
        "--batch",
        "16..=79",
        "--context",
        "1024,2048",
        "--format",
        "csv",
    ];
    let with = |extra: &[&str]| {
        let mut a = vec!["sweep"];
        a.extend(grid);
        a.extend(extra);
        estimate(&a)
    };
    let plain = with(&[]);
    // One layout loaded and 128 rows: about 0.1 s.
    assert!((100_000..110_000).contains(&plain), "{plain}");
    let pp2 = with(&[
        "--system",
        "rtx-pro-6000-2node-roce",
        "--tp",
        "8",
        "--pp",
        "2",
    ]);
    assert_eq!(pp2 - plain, 128, "a pipeline row plays each stage");
    let dp16 = with(&[
        "--system",
        "rtx-pro-6000-2node-roce",
        "--dp",
        "16",
        "--tp",
        "1",
        "--ep-comm",
        "all-to-all",
    ]);
    // 16 ranks fitted (20 ms each) and 64 distinct batches drawn at 16 ranks.
    assert!(dp16 > plain + 16 * 20_000 + 64 * 16 * 80, "{dp16}");
    let spec = with(&["--draft-tokens", "0,2", "--acceptance-rate", "0.6"]);
    assert_eq!(
        spec - plain,
        128 * 4,
        "a speculative row plays its draft and verify"
    );
}

/// `whatif --vary`: every variant is loaded (about 20 ms) and played, and each interval draw
/// replays it on every expert-parallel rank.
#[test]
fn vary_counts_loading_and_draws_per_rank() {
    let batches = format!(
        "batch={}",
        (32..64)
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let est = |extra: &[&str]| {
        let mut a = vec!["whatif", "--vary", &batches];
        a.extend(extra);
        estimate(&a)
    };
    // 33 timelines (32 variants and the base): loading and the timeline, 22,500 each.
    assert_eq!(est(&["--draws", "0"]), 33 * 22_500);
    // 200 draws at one expert-parallel rank: 200 × 54 µs more each.
    assert_eq!(est(&["--draws", "200"]), 33 * (22_500 + 200 * 54));
    // At DP128 each draw replays 128 ranks.
    let dp128 = est(&[
        "--model",
        "deepseek-v3",
        "--system",
        "h200-hgx-18node-ib",
        "--dp",
        "128",
        "--tp",
        "1",
        "--ep-comm",
        "rdma-ll",
        "--draws",
        "200",
    ]);
    assert_eq!(dp128, 33 * (22_500 + 200 * (50 + 4 * 128)));
}

/// CPU seconds of this process's waited-for children (Linux: `/proc/self/stat`, fields
/// cutime and cstime in clock ticks of 1/100 s).
#[cfg(target_os = "linux")]
fn children_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let after = &stat[stat.rfind(')').expect("comm field") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    // After the comm: state is field 3, cutime 16 and cstime 17 (1-based).
    let ticks = |i: usize| f[i - 3].parse::<f64>().expect("ticks");
    (ticks(16) + ticks(17)) / 100.0
}

/// The estimate of every layout kind against the CPU it takes. Run with the release build:
/// `cargo test --release --test sweep_work -- --ignored` (a debug binary is 10-30x slower
/// than the units, which are release microseconds). Figures measured on the 2-core
/// development machine (estimate / CPU): plain TP8 0.16 / 0.19 s, PP2 0.13 / 0.10 s, DP16
/// all-to-all 1.49 / 0.99 s, DP16 rdma-ll with two-batch overlap 0.90 / 0.58 s, DP128 rdma-ll
/// 4.04 / 4.21 s (128 batches near one sequence per rank) and 4.89 / 4.05 s (64 batches of
/// 8,192), speculative TP8 0.31 / 0.35 s, speculative DP16 1.75 / 1.74 s; `whatif --vary`
/// over 32 batches with 200 interval draws at TP8 1.10 / 1.00 s and at DP128 4.45 / 4.35 s.
#[test]
#[ignore = "measures CPU time: run with --release -- --ignored"]
#[cfg(target_os = "linux")]
fn the_estimate_is_within_3x_of_the_cpu_each_layout_kind_takes() {
    if cfg!(debug_assertions) {
        return;
    }
    let kinds: [(&str, Vec<&str>); 7] = [
        (
            "tp8",
            vec!["--batch", "1..=1024", "--context", "1024..=1087"],
        ),
        (
            "pp2",
            vec![
                "--system",
                "rtx-pro-6000-2node-roce",
                "--tp",
                "8",
                "--pp",
                "2",
                "--batch",
                "1..=256",
                "--context",
                "1024..=1087",
            ],
        ),
        (
            "dp16",
            vec![
                "--system",
                "rtx-pro-6000-2node-roce",
                "--dp",
                "16",
                "--tp",
                "1",
                "--ep-comm",
                "all-to-all",
                "--batch",
                "16..=527",
                "--context",
                "1024..=1031",
            ],
        ),
        (
            "dp16-tbo",
            vec![
                "--model",
                "deepseek-v3",
                "--system",
                "h200-hgx-2node-ib",
                "--dp",
                "16",
                "--tp",
                "1",
                "--ep-comm",
                "rdma-ll",
                "--tbo",
                "on",
                "--batch",
                "32..=287",
                "--context",
                "1024..=1087",
            ],
        ),
        (
            "dp128",
            vec![
                "--model",
                "deepseek-v3",
                "--system",
                "h200-hgx-18node-ib",
                "--dp",
                "128",
                "--tp",
                "1",
                "--ep-comm",
                "rdma-ll",
                "--batch",
                "8192..=8255",
                "--context",
                "2048",
            ],
        ),
        (
            "spec",
            vec![
                "--batch",
                "1..=256",
                "--context",
                "1024..=1087",
                "--draft-tokens",
                "0..=3",
                "--acceptance-rate",
                "0.6",
            ],
        ),
        (
            "dp16-spec",
            vec![
                "--system",
                "rtx-pro-6000-2node-roce",
                "--dp",
                "16",
                "--tp",
                "1",
                "--ep-comm",
                "all-to-all",
                "--batch",
                "16..=271",
                "--context",
                "1024..=1031",
                "--draft-tokens",
                "0..=2",
                "--acceptance-rate",
                "0.6",
            ],
        ),
    ];
    let mut off = Vec::new();
    let batches = format!(
        "batch={}",
        (32..64)
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let vary: [(&str, Vec<&str>); 2] = [
        ("vary-tp8", vec!["whatif", "--vary", &batches]),
        (
            "vary-dp128",
            vec![
                "whatif",
                "--vary",
                &batches,
                "--model",
                "deepseek-v3",
                "--system",
                "h200-hgx-18node-ib",
                "--dp",
                "128",
                "--tp",
                "1",
                "--ep-comm",
                "rdma-ll",
            ],
        ),
    ];
    for (name, args) in vary {
        let mut args = args.clone();
        let est = estimate(&args) as f64 / 1e6;
        args.extend(["--max-work", "100000000000"]);
        let before = children_cpu_s();
        let (code, _, err) = decodesim(&args);
        let cpu = children_cpu_s() - before;
        assert_eq!(code, Some(0), "{name}: {err}");
        let ratio = est / cpu.max(0.01);
        if !(1.0 / 3.0..=3.0).contains(&ratio) {
            off.push(format!("{name}: estimate {est:.2} s, CPU {cpu:.2} s"));
        }
    }
    for (name, extra) in kinds {
        let mut args = vec!["sweep", "--format", "csv", "--output", "/dev/null"];
        args.extend(extra);
        let est = estimate(&args) as f64 / 1e6;
        args.extend(["--max-work", "100000000000"]);
        let before = children_cpu_s();
        let (code, _, err) = decodesim(&args);
        let cpu = children_cpu_s() - before;
        assert_eq!(code, Some(0), "{name}: {err}");
        let ratio = est / cpu.max(0.01);
        if !(1.0 / 3.0..=3.0).contains(&ratio) {
            off.push(format!("{name}: estimate {est:.2} s, CPU {cpu:.2} s"));
        }
    }
    assert!(off.is_empty(), "estimates off by more than 3x: {off:?}");
}
