//! `whatif spec-decode` and `capacity` count their `--max-work` from what each step costs on
//! the path it takes (`sim::work`, the estimate `sweep` and `whatif --vary` count with): a full
//! timeline over every rank of the layout with every token's experts drawn, the intervals'
//! fast-path fit (every EP rank's expert loads) or timeline, and each draw's replays. A job
//! above the limit is refused before any step is simulated; the ignored release test holds the
//! estimate within 3x of the CPU every layout kind takes (plain TP, PP, DP attention, wide EP,
//! two-batch overlap, DCP).

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

/// The estimate a refusal names ("raise --max-work to at least N"), and the refusal.
fn estimate(args: &[&str]) -> (u64, String) {
    let mut a = args.to_vec();
    a.extend(["--max-work", "1"]);
    let (code, out, err) = decodesim(&a);
    assert_eq!(code, Some(1), "{a:?}: {err}");
    assert!(out.is_empty(), "{a:?} wrote before refusing: {out}");
    assert!(!err.contains("panicked"), "{err}");
    let tail = err
        .split("raise --max-work to at least ")
        .nth(1)
        .unwrap_or_else(|| panic!("{a:?}: no estimate in {err:?}"));
    let units = tail
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{a:?}: {err:?}"));
    (units, err)
}

const DP128: [&str; 10] = [
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
];

const SPEC: [&str; 12] = [
    "whatif",
    "spec-decode",
    "--acceptance-rate",
    "0.6",
    "--draft-tokens",
    "1..3",
    "--batch",
    "8",
    "--mc-users",
    "100",
    "--output-tokens",
    "100",
];

/// A timeline over `ranks` ranks of `tokens` tokens: 2,500 + 80 per rank + 3 per token.
fn timeline(ranks: u64, tokens: u64) -> u64 {
    2_500 + 80 * ranks + 3 * tokens
}

#[test]
fn spec_decode_counts_each_timeline_at_its_ranks_and_tokens() {
    let mut args = SPEC.to_vec();
    args.extend(["--crossover-batches", "none", "--draws", "0"]);
    let (units, err) = estimate(&args);
    // TP8 at batch 8: the plain step, then per k = 1..3 a verify pass of 8 × (k + 1) tokens
    // and a draft side (a layer: built and played, 2,500); 3 × 100 × 100 Monte Carlo tokens
    // at 0.01.
    let by_hand = timeline(8, 8)
        + (1..=3)
            .map(|k| timeline(8, 8 * (k + 1)) + 2_500)
            .sum::<u64>()
        + 300;
    assert_eq!(units, by_hand, "{err}");
    assert!(err.contains("7 full timelines over 8 ranks"), "{err}");

    // 200 interval draws: the fast path fitted once (0.1 s) and each draw replays the plain
    // step and every k's verify and draft windows (1 + 2 + 3 + 4 plays at 54 µs on one rank).
    let mut args = SPEC.to_vec();
    args.extend(["--crossover-batches", "none", "--draws", "200"]);
    let (with_draws, err) = estimate(&args);
    assert_eq!(with_draws, by_hand + 100_000 + 200 * 10 * 54, "{err}");
    assert!(err.contains("intervals of 200 draws"), "{err}");
}

#[test]
fn spec_decode_on_dp128_counts_every_rank_and_the_ep_fit() {
    let mut args = SPEC.to_vec();
    args.extend(DP128);
    args.extend(["--method", "mtp", "--crossover-batches", "1024,16384"]);
    args.extend(["--draws", "0"]);
    let (no_draws, err) = estimate(&args);
    assert!(err.contains("over 128 ranks"), "{err}");
    // Each batch of DP128 costs 10 ms of ranks and 3 µs per token: at 16,384 sequences with
    // three draft-token counts, more than half a second (a flat 2,500 per timeline said 55 ms).
    assert!(no_draws > 500_000, "{no_draws}: {err}");
    args.pop();
    args.push("200");
    let (with_draws, _) = estimate(&args);
    // The fast path fitted over 128 EP ranks (20 ms each) and each replay over 128 ranks.
    let fit = 100_000 + 128 * 20_000;
    let replays = 200 * 10 * (50 + 4 * 128);
    assert_eq!(with_draws - no_draws, fit + replays);
}

#[test]
fn capacity_counts_its_curve_at_the_layouts_ranks_and_concurrencies() {
    let (tp8, err) = estimate(&["capacity", "--draws", "0"]);
    assert!(
        err.contains("concurrencies up to 46 over 8 ranks"),
        "the curve is counted up to what memory holds: {err}"
    );
    let mut args = vec!["capacity", "--draws", "0"];
    args.extend(DP128);
    let (dp128, err) = estimate(&args);
    assert!(
        err.contains("concurrencies up to 47,744 over 128 ranks"),
        "{err}"
    );
    // The DP128 curve runs to 47,744 sequences: seconds of draws, not 39 timelines of 2.5 ms.
    assert!(dp128 > 10 * tp8, "DP128 {dp128} against TP8 {tp8}");
    assert!(dp128 > 1_000_000, "{dp128}");
    // Its interval fits the fast path over 128 EP ranks: 2.66 s more.
    let mut args = vec!["capacity", "--draws", "200"];
    args.extend(DP128);
    let (drawn, _) = estimate(&args);
    assert_eq!(drawn - dp128, 100_000 + 128 * 20_000 + 200 * (50 + 4 * 128));
}

#[test]
fn a_refused_study_simulates_nothing() {
    // Refused in about the time it takes to load the scenario, not the study's seconds.
    let start = std::time::Instant::now();
    let mut args = vec!["capacity"];
    args.extend(DP128);
    args.extend(["--max-work", "100000"]);
    let (code, out, err) = decodesim(&args);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.starts_with("error: capacity: ") && err.contains("above --max-work 100000"),
        "{err}"
    );
    let mut args = SPEC.to_vec();
    args.extend(DP128);
    args.extend(["--method", "mtp", "--crossover-batches", "16384"]);
    args.extend(["--max-work", "100000"]);
    let (code, out, err) = decodesim(&args);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.starts_with("error: whatif spec-decode: ") && err.contains("above --max-work 100000"),
        "{err}"
    );
    // Both refusals together well under what either study takes in a release build (seconds),
    // with room for a debug build on a loaded machine.
    assert!(
        start.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

/// CPU seconds of this process's waited-for children (Linux: `/proc/self/stat`, fields
/// cutime and cstime in clock ticks of 1/100 s).
#[cfg(target_os = "linux")]
fn children_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let after = &stat[stat.rfind(')').expect("comm field") + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f[i - 3].parse::<f64>().expect("ticks");
    (ticks(16) + ticks(17)) / 100.0
}

/// The estimate of every layout kind against the CPU it takes. Run with the release build:
/// `cargo test --release --test work_estimates -- --ignored` (a debug binary is 10-30x slower
/// than the units, which are release microseconds). Figures: docs/internals/fast-path.md.
#[test]
#[ignore = "measures CPU time: run with --release -- --ignored"]
#[cfg(target_os = "linux")]
fn the_estimate_is_within_3x_of_the_cpu_each_layout_kind_takes() {
    if cfg!(debug_assertions) {
        return;
    }
    let layouts: [(&str, Vec<&str>); 6] = [
        ("tp8", vec![]),
        (
            "pp2",
            vec![
                "--system",
                "rtx-pro-6000-2node-roce",
                "--tp",
                "8",
                "--pp",
                "2",
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
            ],
        ),
        ("dp128", DP128.to_vec()),
        (
            "dcp8",
            vec![
                "--model",
                "deepseek-v3",
                "--system",
                "h200-8x-nvlink",
                "--tp",
                "8",
                "--dcp",
                "8",
            ],
        ),
    ];
    let mut jobs: Vec<(String, Vec<&str>)> = Vec::new();
    for (name, flags) in &layouts {
        for draws in ["0", "200"] {
            let mut a = vec!["capacity", "--draws", draws];
            a.extend(flags.iter().copied());
            jobs.push((format!("capacity {name} draws {draws}"), a));
        }
        // Speculative decoding plays neither pipelines nor two-batch overlap.
        if matches!(*name, "pp2" | "dp16-tbo") {
            continue;
        }
        let deepseek = flags.contains(&"deepseek-v3");
        for draws in ["0", "200"] {
            let mut a = vec![
                "whatif",
                "spec-decode",
                "--acceptance-rate",
                "0.6",
                "--draft-tokens",
                "1..2",
                "--draws",
                draws,
            ];
            if deepseek {
                a.extend(["--method", "mtp"]);
            }
            a.extend(if name.starts_with("dp") {
                ["--batch", "1024", "--crossover-batches", "256,4096"]
            } else {
                ["--batch", "8", "--crossover-batches", "1,2,4,8,16,32"]
            });
            a.extend(flags.iter().copied());
            jobs.push((format!("spec-decode {name} draws {draws}"), a));
        }
    }
    let mut off = Vec::new();
    let mut seen = Vec::new();
    for (name, args) in jobs {
        let est = estimate(&args).0 as f64 / 1e6;
        let mut args = args.clone();
        args.extend(["--max-work", "100000000000"]);
        let before = children_cpu_s();
        let (code, _, err) = decodesim(&args);
        let cpu = children_cpu_s() - before;
        assert_eq!(code, Some(0), "{name}: {err}");
        let ratio = est / cpu.max(0.01);
        seen.push(format!("{name}: estimate {est:.2} s, CPU {cpu:.2} s"));
        if !(1.0 / 3.0..=3.0).contains(&ratio) {
            off.push(format!("{name}: estimate {est:.2} s, CPU {cpu:.2} s"));
        }
    }
    eprintln!("{}", seen.join("\n"));
    assert!(off.is_empty(), "estimates off by more than 3x: {off:?}");
}

/// `whatif --vary` counts each variant at 2,500 per timeline before loading anything, then,
/// once the variants are loaded (and before any is simulated), at each one's own ranks and
/// batch: DP128 variants at 8,192 and 16,384 sequences draw 128 ranks' expert loads.
#[test]
fn vary_counts_each_loaded_variant_at_its_ranks_and_batch() {
    let mut args = vec!["whatif", "--vary", "batch=8192,16384", "--batch", "1024"];
    args.extend(DP128);
    args.extend(["--draws", "0"]);
    // Before loading: 3 timelines (the base and two variants), each loaded (20 ms) and played
    // (2,500).
    let (first, _) = estimate(&args);
    assert_eq!(first, 3 * 22_500);
    // Loaded: 80 per rank and 3 per sequence more for each.
    args.extend(["--max-work", "100000"]);
    let (code, out, err) = decodesim(&args);
    assert_eq!(code, Some(1), "{err}");
    assert!(out.is_empty(), "{out}");
    let by_hand = 3 * 22_500 + 3 * 80 * 128 + 3 * (1_024 + 8_192 + 16_384);
    assert!(
        err.contains("each timeline at its own ranks and batch")
            && err.contains(&format!("raise --max-work to at least {by_hand} ")),
        "{by_hand}: {err}"
    );
}
