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

/// A copy of the bundled H200 reference trace (batch 16, context 8192) whose sampler kernels
/// (the argmax over the logits) take `factor` times as long, every later event of the rank
/// shifted by the time added, written to `dir`.
fn slow_sampler_trace(dir: &Path, factor: f64) -> Vec<String> {
    use std::io::{Read, Write};
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/traces/h200");
    let mut names: Vec<_> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("refstep_b16_c8192_default_rank"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 2);
    let sampler = regex::Regex::new("(?i)argmax").unwrap();
    names
        .iter()
        .map(|n| {
            let mut text = String::new();
            flate2::read::GzDecoder::new(std::fs::File::open(src.join(n)).unwrap())
                .read_to_string(&mut text)
                .unwrap();
            let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
            let ev = v["traceEvents"].as_array_mut().unwrap();
            let mut added = Vec::new();
            for e in ev.iter_mut() {
                let kernel = e["cat"] == "kernel"
                    && e["name"].as_str().is_some_and(|s| sampler.is_match(s));
                if kernel {
                    let (ts, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
                    added.push((ts + dur, dur * (factor - 1.0)));
                    e["dur"] = (dur * factor).into();
                }
            }
            assert!(!added.is_empty(), "no sampler kernel in {n}");
            for e in ev.iter_mut() {
                if let Some(ts) = e.get("ts").and_then(|t| t.as_f64()) {
                    let shift: f64 = added.iter().filter(|a| ts >= a.0).map(|a| a.1).sum();
                    e["ts"] = (ts + shift).into();
                }
            }
            let out = dir.join(n);
            let mut gz = flate2::write::GzEncoder::new(
                std::fs::File::create(&out).unwrap(),
                flate2::Compression::fast(),
            );
            gz.write_all(v.to_string().as_bytes()).unwrap();
            gz.finish().unwrap();
            out.to_str().unwrap().to_string()
        })
        .collect()
}

const H200_REFSTEP: [&str; 12] = [
    "--model",
    "kimi-k2.5-bf16",
    "--layers",
    "4",
    "--system",
    "h200-2x-nvlink",
    "--runtime",
    "reference",
    "--nccl-proto",
    "auto",
    "--nccl-algo",
    "auto",
];

#[test]
fn a_trace_whose_sampler_is_100x_the_table_writes_a_profile_that_loads_and_prices_it() {
    let d = scratch("price-in-use-trace");
    let traces = slow_sampler_trace(&d, 100.0);
    let out = d.join("anchored/profile.toml");
    let out_s = out.to_str().unwrap();
    let mut args = vec!["calibrate", "--from-trace"];
    args.extend(traces.iter().map(String::as_str));
    args.extend([
        "--out",
        out_s,
        "--calibration",
        "h200",
        "--batch",
        "16",
        "--context",
        "8192",
    ]);
    args.extend(H200_REFSTEP);
    let (ok, text, err) = decodesim_bin(&args);
    assert!(ok, "{err}");
    // The sampler's time is written as measured, with a warning that says why it may be so.
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("sampling "))
        .unwrap_or_else(|| panic!("{text}"));
    let f: f64 = line.split('x').next_back().unwrap().trim().parse().unwrap();
    assert!(f > 50.0 && f < 200.0, "{line}");
    assert!(
        text.contains("warning: sampling: the trace's time is")
            && text.contains("written as measured")
            && text.contains("top-k/top-p"),
        "{text}"
    );
    // The profile loads, and a step priced with it charges the sampler what the trace took.
    let mut sim = vec![
        "simulate",
        "--format",
        "json",
        "--draws",
        "0",
        "--calibration",
        out_s,
        "--batch",
        "16",
        "--context",
        "8192",
    ];
    sim.extend(H200_REFSTEP);
    let (ok, json, err) = decodesim_bin(&sim);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let sampling = v["breakdown"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["category"] == "sampling")
        .unwrap_or_else(|| panic!("{}", v["breakdown"]))["time_us"]
        .as_f64()
        .unwrap();
    // The trace: 11.1 µs x 100 = 1,109 µs of sampling per step.
    assert!((sampling / 1109.0 - 1.0).abs() < 0.1, "{sampling}");
}
