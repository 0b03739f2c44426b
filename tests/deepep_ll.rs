//! DeepEP's low-latency all-to-all inside one node (`--ep-comm rdma-ll`): priced by the
//! profile's law fitted to measured kernel times, not by NCCL's all-gather law.

mod common;
use common::decodesim_bin;
use decodesim::cost::deepep::{DeepEpLl, Phase};
use decodesim::measurements::read_deepep_ll_csv;
use std::path::Path;

const TABLE: &str = "data/calibration/aiconfigurator/h200_sxm/deepep_ll.csv";

fn rel(a: f64, b: f64) -> f64 {
    (a / b - 1.0).abs()
}

/// `simulate --format json` of DeepSeek-V3 at TP 1 under DP `dp` with DeepEP's low-latency
/// all-to-all on `system`, with `extra` flags.
fn simulate_dp(system: &str, dp: u32, batch: u32, extra: &[&str]) -> serde_json::Value {
    let (dp, batch) = (dp.to_string(), batch.to_string());
    let args = [
        &[
            "simulate",
            "--model",
            "deepseek-v3",
            "--system",
            system,
            "--tp",
            "1",
            "--dp",
            &dp,
            "--ep-comm",
            "rdma-ll",
            "--batch",
            &batch,
            "--draws",
            "0",
            "--format",
            "json",
        ][..],
        extra,
    ]
    .concat();
    let (ok, out, err) = decodesim_bin(&args);
    assert!(ok, "{err}");
    serde_json::from_str(&out).unwrap()
}

/// The bundled H200 profile's `[deepep_ll]` is the fit of the committed table, as
/// `DeepEpLl::fit` computes it: its numbers have a provenance that can be re-run.
#[test]
fn the_h200_profile_s_law_is_the_fit_of_the_committed_table() {
    let rows = read_deepep_ll_csv(Path::new(TABLE)).unwrap();
    assert_eq!(rows.len(), 352);
    let fit = DeepEpLl::fit(&rows, Path::new(TABLE), String::new()).unwrap();
    let p = decodesim::cost::CalibrationProfile::from_file(Path::new(
        "data/calibration/h200/profile.toml",
    ))
    .unwrap();
    let d = p.deepep_ll.as_ref().expect("h200 profile has [deepep_ll]");
    for phase in [Phase::Dispatch, Phase::Combine] {
        let (a, b) = (fit.law(phase), d.law(phase));
        assert!(
            rel(a.latency_us, b.latency_us) < 1e-6,
            "{phase:?}: {a:?} vs {b:?}"
        );
        assert!(
            rel(a.bw_gbps, b.bw_gbps) < 1e-6,
            "{phase:?}: {a:?} vs {b:?}"
        );
        assert_eq!(a.measured_ranks, b.measured_ranks);
        assert_eq!(a.rows, b.rows);
        assert!(rel(a.median_rel_err, b.median_rel_err) < 1e-6);
        // The law holds its own rows: the median error is small, and so it prices what was
        // measured, not NCCL's ring.
        assert!(a.median_rel_err < 0.10, "{phase:?}: {a:?}");
    }
}

/// DeepSeek-V3 on one 8x H200 node, DP8 × EP8 with DeepEP's low-latency kernels: the dispatch
/// and combine of 128 and 8 tokens per rank against the measured rows at that shape
/// (hidden 7168, top-8, 256 experts, 8 ranks), read off the committed table by hand:
/// 128 tokens: dispatch 35.119 µs, combine 67.745 µs; 8 tokens: 12.317 and 15.031 µs.
#[test]
fn dispatch_and_combine_inside_one_node_are_priced_from_deepep_measurements() {
    for (batch, dispatch, combine) in [(1024, 35.119, 67.745), (64, 12.317, 15.031)] {
        let v = simulate_dp("h200-8x-nvlink", 8, batch, &[]);
        let a2a: Vec<&serde_json::Value> = v["collectives"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["op"] == "all_to_all")
            .collect();
        assert_eq!(a2a.len(), 2, "{v}");
        for c in &a2a {
            assert_eq!(c["algo"], "deepep_ll", "{c}");
            assert!(c["source"].as_str().unwrap().contains("DeepEP"), "{c}");
        }
        // Dispatch moves FP8 rows (7,392 B per token copy), combine BF16 (14,336 B).
        let tokens = batch as f64 / 8.0;
        let (d, c) = if a2a[0]["bytes"].as_f64() < a2a[1]["bytes"].as_f64() {
            (a2a[0], a2a[1])
        } else {
            (a2a[1], a2a[0])
        };
        assert_eq!(d["bytes"].as_f64().unwrap(), tokens * 8.0 * 7392.0);
        assert_eq!(c["bytes"].as_f64().unwrap(), tokens * 8.0 * 14336.0);
        let (td, tc) = (
            d["time_us"].as_f64().unwrap(),
            c["time_us"].as_f64().unwrap(),
        );
        assert!(
            rel(td, dispatch) < 0.15,
            "batch {batch}: dispatch {td} vs {dispatch}"
        );
        assert!(
            rel(tc, combine) < 0.15,
            "batch {batch}: combine {tc} vs {combine}"
        );
    }
    // Across nodes the RDMA law prices it, as before.
    let v = simulate_dp("h200-hgx-2node-ib", 16, 1024, &[]);
    for c in v["collectives"].as_array().unwrap() {
        if c["op"] == "all_to_all" {
            assert_eq!(c["algo"], "rdma_ll", "{c}");
        }
    }
}

/// Bad tables and bad profile sections are errors that name the file and the field.
#[test]
fn bad_deepep_tables_and_laws_are_refused_by_name() {
    let dir = tempfile_dir("deepep_bad");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let head = "phase,hidden,topk,experts,ranks,num_tokens,bytes,latency_us\n";
    let p = write(
        "phase.csv",
        &format!("{head}gather,7168,8,256,8,1,59264,11.9\n"),
    );
    let e = read_deepep_ll_csv(&p).unwrap_err().to_string();
    assert!(
        e.contains("phase.csv") && e.contains("phase") && e.contains("dispatch"),
        "{e}"
    );
    let p = write(
        "nan.csv",
        &format!("{head}dispatch,7168,8,256,8,1,59264,NaN\n"),
    );
    let e = read_deepep_ll_csv(&p).unwrap_err().to_string();
    assert!(e.contains("nan.csv") && e.contains("latency_us"), "{e}");
    // Times that fall as the payload grows fit no bandwidth.
    let p = write(
        "flat.csv",
        &format!(
            "{head}dispatch,7168,8,256,8,1,59264,20\ndispatch,7168,8,256,8,128,7585792,10\ncombine,7168,8,256,8,1,114688,12\ncombine,7168,8,256,8,128,14680064,60\n"
        ),
    );
    let rows = read_deepep_ll_csv(&p).unwrap();
    let e = DeepEpLl::fit(&rows, &p, String::new())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("flat.csv") && e.contains("dispatch") && e.contains("bandwidth"),
        "{e}"
    );
    // One row cannot tell latency from bandwidth.
    let p = write(
        "one.csv",
        &format!("{head}dispatch,7168,8,256,8,1,59264,11.9\n"),
    );
    let rows = read_deepep_ll_csv(&p).unwrap();
    let e = DeepEpLl::fit(&rows, &p, String::new())
        .unwrap_err()
        .to_string();
    assert!(e.contains("one.csv") && e.contains("two sizes"), "{e}");
    // A profile whose law has no bandwidth.
    let text = std::fs::read_to_string("data/calibration/h200/profile.toml").unwrap();
    let bad = text.replacen(
        "[deepep_ll.dispatch]\nlatency_us",
        "[deepep_ll.dispatch]\nbw_gbps_x = 0\nlatency_us",
        1,
    );
    assert_ne!(bad, text, "the profile has a [deepep_ll.dispatch] table");
    let p = write("unknown.toml", &bad);
    let e = decodesim::cost::CalibrationProfile::from_file(&p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown.toml") && e.contains("bw_gbps_x"), "{e}");
    let i = text.find("[deepep_ll.dispatch]").unwrap();
    let j = i + text[i..].find("bw_gbps = ").unwrap();
    let k = j + text[j..].find('\n').unwrap();
    let bad = format!("{}bw_gbps = 0.0{}", &text[..j], &text[k..]);
    let p = write("zero.toml", &bad);
    let e = decodesim::cost::CalibrationProfile::from_file(&p)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("zero.toml") && e.contains("deepep_ll.dispatch.bw_gbps"),
        "{e}"
    );
}

fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-test-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `calibrate --from-deepep-ll` puts the fitted laws on a base profile that has none; the
/// written profile prices the one-node all-to-all with them. A table the law does not hold is
/// refused unless `--allow-poor-fit`, which marks it.
#[test]
fn calibrate_from_deepep_ll_writes_the_laws_on_a_base_profile() {
    let dir = tempfile_dir("deepep_calibrate");
    let out = dir.join("h200-deepep.toml");
    let (ok, stdout, err) = decodesim_bin(&[
        "calibrate",
        "--from-deepep-ll",
        TABLE,
        "--profile",
        "h200-estimate",
        "--system",
        "h200-8x-nvlink",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(
        stdout.contains("dispatch") && stdout.contains("combine"),
        "{stdout}"
    );
    let p = decodesim::cost::CalibrationProfile::from_file(&out).unwrap();
    let bundled = decodesim::cost::CalibrationProfile::from_file(Path::new(
        "data/calibration/h200/profile.toml",
    ))
    .unwrap();
    let (a, b) = (p.deepep_ll.unwrap(), bundled.deepep_ll.unwrap());
    assert!(rel(a.dispatch.bw_gbps, b.dispatch.bw_gbps) < 1e-9, "{a:?}");
    assert!(
        rel(a.combine.latency_us, b.combine.latency_us) < 1e-9,
        "{a:?}"
    );
    let v = simulate_dp(
        "h200-8x-nvlink",
        8,
        64,
        &["--calibration", out.to_str().unwrap()],
    );
    assert!(
        v["collectives"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["algo"] == "deepep_ll"),
        "{v}"
    );
    // Times that grow with the square of the payload: no latency + bandwidth law holds them.
    let mut csv = String::from("phase,hidden,topk,experts,ranks,num_tokens,bytes,latency_us\n");
    for phase in ["dispatch", "combine"] {
        for t in [1u64, 4, 16, 64, 256, 1024] {
            let bytes = t * 8 * 14336;
            let us = 10.0 + (t as f64).powi(2) * 0.5;
            csv.push_str(&format!("{phase},7168,8,256,8,{t},{bytes},{us}\n"));
        }
    }
    let bad = dir.join("quadratic.csv");
    std::fs::write(&bad, csv).unwrap();
    let out2 = dir.join("poor.toml");
    let args = [
        "calibrate",
        "--from-deepep-ll",
        bad.to_str().unwrap(),
        "--profile",
        "h200-estimate",
        "--system",
        "h200-8x-nvlink",
        "--out",
        out2.to_str().unwrap(),
    ];
    let (ok, _, err) = decodesim_bin(&args);
    assert!(!ok, "a poor fit was written");
    assert!(
        err.contains("quadratic.csv") && err.contains("--allow-poor-fit"),
        "{err}"
    );
    assert!(!out2.exists());
    let (ok, stdout, err) = decodesim_bin(&[&args[..], &["--allow-poor-fit"]].concat());
    assert!(ok, "{err}");
    assert!(stdout.contains("warning"), "{stdout}");
    let p = decodesim::cost::CalibrationProfile::from_file(&out2).unwrap();
    assert!(
        p.profile
            .poor_fit
            .iter()
            .any(|m| m.starts_with("deepep_ll")),
        "{:?}",
        p.profile.poor_fit
    );
}
