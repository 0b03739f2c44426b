//! Calibration acts on the price a step really uses and writes what it measured: a burst sets
//! the price the simulated step then charges for that allreduce (the measured table's, not a
//! law's; the cross-node price across nodes), a trace whose sampler is 100x the profile's
//! writes a profile that loads, and `--from-throughput` fits robustly, chooses only factors its
//! points vary, and honours `--max-median-error`.

mod common;

use common::{decodesim_bin, scratch};
use std::path::Path;

/// `simulate --format json`'s price of each all_reduce of `bytes` (µs, no wait).
fn step_allreduce_us(args: &[&str], bytes: u64) -> f64 {
    let mut a = vec!["simulate", "--format", "json", "--draws", "0"];
    a.extend_from_slice(args);
    let (ok, out, err) = decodesim_bin(&a);
    assert!(ok, "{a:?}: {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["op"] == "all_reduce" && c["bytes"].as_u64() == Some(bytes))
        .unwrap_or_else(|| panic!("no all_reduce of {bytes} B in {out}"))["time_us"]
        .as_f64()
        .unwrap()
}

#[test]
fn the_seed_burst_sets_the_price_a_step_charges_for_that_allreduce() {
    let d = scratch("price-in-use-burst");
    let out = d.join("burst.toml");
    let out_s = out.to_str().unwrap();
    let (ok, text, err) = decodesim_bin(&[
        "calibrate",
        "--from-burst",
        "122,14336,6810",
        "--allreduce",
        "nccl",
        "--out",
        out_s,
    ]);
    assert!(ok, "{err}");
    // Fitted against the measured table the step prices from, and it says so.
    assert!(text.contains("[measured: AIConfigurator nccl_collectives.csv]"), "{text}");
    let each = 6810.0 / 122.0; // 55.82 µs
    for (batch, context) in [("1", "1024"), ("1", "8192")] {
        let args = [
            "--batch",
            batch,
            "--context",
            context,
            "--allreduce",
            "nccl",
            "--calibration",
            out_s,
        ];
        let us = step_allreduce_us(&args, 14_336);
        assert!((us / each - 1.0).abs() < 0.05, "{us} µs vs the burst's {each}");
    }
    // Uncalibrated, the table prices it at about half the burst's figure; the sizes around it
    // (batch 2: 28 KiB, latency-bound too) move by about the same ratio.
    let before = step_allreduce_us(&["--batch", "1", "--allreduce", "nccl"], 14_336);
    assert!(before < 0.6 * each, "{before}");
    let near = ["--batch", "2", "--allreduce", "nccl"];
    let (b2, a2) = (
        step_allreduce_us(&near, 28_672),
        step_allreduce_us(&[&near[..], &["--calibration", out_s]].concat(), 28_672),
    );
    assert!(a2 / b2 > 1.7 && a2 / b2 < each / before, "{b2} -> {a2}");
    // Across nodes the fit is against the cross-node price, which a step then charges.
    let out2 = d.join("two-nodes.toml");
    let (ok, text, err) = decodesim_bin(&[
        "calibrate",
        "--from-burst",
        "122,14336,12000",
        "--system",
        "h200-hgx-2node-ib",
        "--out",
        out2.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(text.contains("nvlink+net") && text.contains("at 16 ranks"), "{text}");
    let us = step_allreduce_us(
        &[
            "--batch",
            "1",
            "--system",
            "h200-hgx-2node-ib",
            "--calibration",
            out2.to_str().unwrap(),
        ],
        14_336,
    );
    assert!((us / (12000.0 / 122.0) - 1.0).abs() < 0.05, "{us}");
}

#[test]
fn bursts_of_several_sizes_move_the_latency_and_the_bandwidth_of_the_step_price() {
    let d = scratch("price-in-use-bursts");
    // A machine 1.8x slower than the table at small messages and 1.4x at large ones.
    let sizes = [14_336u64, 458_752];
    let mut csv = String::from("count,bytes,total_us\n");
    let mut want = Vec::new();
    for (b, batch) in sizes.iter().zip(["1", "32"]) {
        let us = step_allreduce_us(&["--batch", batch, "--allreduce", "nccl"], *b);
        let t = if *b < 100_000 { 1.8 * us } else { 1.4 * us };
        csv.push_str(&format!("100,{b},{}\n", 100.0 * t));
        want.push((*b, batch, t));
    }
    let path = d.join("bursts.csv");
    std::fs::write(&path, csv).unwrap();
    let out = d.join("two.toml");
    let (ok, text, err) = decodesim_bin(&[
        "calibrate",
        "--from-burst",
        path.to_str().unwrap(),
        "--allreduce",
        "nccl",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(
        !text.contains("not identifiable"),
        "two sizes fit both scales: {text}"
    );
    for (b, batch, t) in want {
        let us = step_allreduce_us(
            &[
                "--batch",
                batch,
                "--allreduce",
                "nccl",
                "--calibration",
                out.to_str().unwrap(),
            ],
            b,
        );
        assert!((us / t - 1.0).abs() < 0.05, "{b} B: {us} vs {t}");
    }
    assert!(Path::new(&out).exists());
}
