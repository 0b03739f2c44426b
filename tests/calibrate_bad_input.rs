//! One test per class of bad calibration input: each is refused with an error naming the file,
//! the field and the value, in a few lines; nothing is read unbounded, nothing panics.

use decodesim::calibrate::from_trace::{calibrate_to_step, TraceFitOptions};
use decodesim::calibrate::{calibrate, calibrate_dir, DirRequest, FitOptions};
use decodesim::category::Category;
use decodesim::cost::CalibrationProfile;
use decodesim::measurements::Measurements;
use decodesim::scenario::GpuSpec;
use decodesim::sim::{simulate_loaded, ScenarioRequest};
use decodesim::workload::CostFamily;
use std::fmt::Write;
use std::path::{Path, PathBuf};

fn root(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn h200() -> GpuSpec {
    GpuSpec::from_file(&root("data/systems/gpus/h200-sxm.toml")).unwrap()
}

fn fallback() -> CalibrationProfile {
    CalibrationProfile::from_file(&root("data/calibration/h200-estimate/profile.toml")).unwrap()
}

/// A fresh folder under the temp dir, unique to this test and process.
fn fresh(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("decodesim-badcal-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const KHEAD: &str =
    "family,dtype,m,n,k,experts,group_size,batch,context,flops,bytes,median_us,p10_us,p90_us,reps\n";
const CHEAD: &str = "op,nranks,bytes,proto,algo,p2p,mode,median_us,p10_us,p90_us,reps\n";

/// A folder with one good kernels.csv row set and the given collectives rows.
fn with_csv(tag: &str, kernels: &str, collectives: Option<&str>) -> PathBuf {
    let dir = fresh(tag);
    std::fs::write(dir.join("kernels.csv"), format!("{KHEAD}{kernels}")).unwrap();
    if let Some(c) = collectives {
        std::fs::write(dir.join("collectives.csv"), format!("{CHEAD}{c}")).unwrap();
    }
    dir
}

const GOOD_ROW: &str = "gemm_bf16,bf16,1,7168,2048,0,0,0,0,29360128,29388800,10.5,10.4,10.6,40\n";

fn read_err(dir: &Path) -> String {
    let e = Measurements::read_dir(dir).unwrap_err().to_string();
    assert!(e.len() < 600, "error too long ({} bytes): {e}", e.len());
    e
}

#[test]
fn profile_values_outside_physics_are_refused() {
    let good = std::fs::read_to_string(root("data/calibration/rtx-pro-6000/profile.toml")).unwrap();
    let dir = fresh("profile");
    let path = dir.join("profile.toml");
    let cases: [(&str, &str, &str, &str); 5] = [
        // The shipped RTX PRO 6000 profile once carried this: a memory efficiency above 1.
        (
            "[kernels.embedding]\nfixed_us = 1.3638526280454342\nmem_efficiency = 1.0",
            "[kernels.embedding]\nfixed_us = 1.3638526280454342\nmem_efficiency = 1.51",
            "kernels.embedding.mem_efficiency",
            "1.51",
        ),
        (
            "bus_bw_gbps = 6.947",
            "bus_bw_gbps = nan",
            "bus_bw_gbps",
            "NaN",
        ),
        (
            "bus_bw_gbps = 6.947",
            "bus_bw_gbps = 9000.0",
            "bus_bw_gbps",
            "1597",
        ),
        ("base_us = 6.6", "base_us = -3.0", "base_us", "-3"),
        ("proto = \"LL\"", "proto = \"LL256\"", "LL256", "LL128"),
    ];
    for (from, to, field, value) in cases {
        assert!(good.contains(from), "fixture changed: {from}");
        std::fs::write(&path, good.replacen(from, to, 1)).unwrap();
        let e = CalibrationProfile::from_file(&path)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("profile.toml") && e.contains(field) && e.contains(value),
            "{to}: {e}"
        );
    }
}

#[test]
fn csv_rows_out_of_range_name_the_row() {
    let cases = [
        // Negative and zero rank counts were dropped without a word.
        (
            "all_reduce,-2,2048,LL,Ring,on,graph,10,10,10,20\n",
            "row 2 column 'nranks'",
            "'-2'",
        ),
        (
            "all_reduce,0,2048,LL,Ring,on,graph,10,10,10,20\n",
            "row 2 column 'nranks'",
            "'0'",
        ),
        // 1e308 µs once fitted a profile whose step was inf.
        (
            "all_reduce,2,2048,LL,Ring,on,graph,1e308,10,10,20\n",
            "row 2 column 'median_us'",
            "second",
        ),
        (
            "all_reduce,2,2048,LL9,Ring,on,graph,10,10,10,20\n",
            "row 2 column 'proto'",
            "LL128",
        ),
        (
            "norm,2,2048,LL,Ring,on,graph,10,10,10,20\n",
            "row 2 column 'op'",
            "all_gather",
        ),
        (
            "all_reduce,2,2048,LL,Ring,on,replay,10,10,10,20\n",
            "row 2 column 'mode'",
            "burst",
        ),
        (
            "all_reduce,2,NaN,LL,Ring,on,graph,10,10,10,20\n",
            "row 2 column 'bytes'",
            "'NaN'",
        ),
    ];
    for (i, (row, field, value)) in cases.iter().enumerate() {
        let dir = with_csv(&format!("coll{i}"), GOOD_ROW, Some(row));
        let e = read_err(&dir);
        assert!(
            e.contains("collectives.csv") && e.contains(field) && e.contains(value),
            "{row}: {e}"
        );
    }
    let kcases = [
        (
            "norm_rsm,bf16,1,7168,0,0,0,0,0,1,1,2,2,2,40\n",
            "column 'family'",
            "norm_fused_add_rms",
        ),
        (
            "gemm_bf16,bf16,1,7168,2048,0,0,0,0,1,1,1e308,1,1e308,40\n",
            "column 'median_us'",
            "1e308",
        ),
        (
            "gemm_bf16,bf16,1,-5,2048,0,0,0,0,1,1,2,2,2,40\n",
            "column 'n'",
            "'-5'",
        ),
        (
            "gemm_bf16,bf16,1,7168,2048,0,0,0,0,1,1,2,3,2.5,40\n",
            "row 3",
            "percentiles",
        ),
    ];
    for (i, (row, field, value)) in kcases.iter().enumerate() {
        let dir = with_csv(&format!("kern{i}"), &format!("{GOOD_ROW}{row}"), None);
        let e = read_err(&dir);
        assert!(
            e.contains("kernels.csv") && e.contains(field) && e.contains(value),
            "{row}: {e}"
        );
    }
}

#[test]
fn quoted_fields_holding_commas_read_as_one_field() {
    const ROW2: &str = "gemm_bf16,bf16,2,7168,2048,0,0,0,0,58720256,29417472,10.6,10.5,10.7,40\n";
    let plain = with_csv("plain", &format!("{GOOD_ROW}{ROW2}"), None);
    // A note column the reader does not use, quoted around commas and a line break, before
    // the columns it reads; values quoted as a spreadsheet writes them.
    let quoted = fresh("quoted");
    let note_row = |note: &str, row: &str| format!("\"{note}\",{row}");
    let text = format!(
        "note,{KHEAD}{}{}",
        note_row("bf16 GEMM, graph mode, \"\"warm\"\"", GOOD_ROW),
        note_row(
            "two lines,\nthe second, too",
            &ROW2.replacen("gemm_bf16,bf16", "\"gemm_bf16\",\"bf16\"", 1)
        ),
    );
    std::fs::write(quoted.join("kernels.csv"), &text).unwrap();
    let a = Measurements::read_dir(&plain).unwrap();
    let b = Measurements::read_dir(&quoted).unwrap();
    assert_eq!(a.kernels.len(), 2);
    assert_eq!(a.kernels, b.kernels);
    // A bad row after the record of two lines is named by the line it starts on.
    let bad = "\"n, negative\",gemm_bf16,bf16,1,-5,2048,0,0,0,0,1,1,2,2,2,40\n";
    std::fs::write(quoted.join("kernels.csv"), format!("{text}{bad}")).unwrap();
    let e = read_err(&quoted);
    assert!(e.contains("row 5 column 'n'") && e.contains("'-5'"), "{e}");
    // A long record cannot hide behind line breaks inside quotes.
    let long = format!("\"{}\",{GOOD_ROW}", "xxxxxxx\n".repeat(1000));
    std::fs::write(quoted.join("kernels.csv"), format!("note,{KHEAD}{long}")).unwrap();
    let e = read_err(&quoted);
    assert!(
        e.contains("kernels.csv") && e.contains("longer than"),
        "{e}"
    );
}

#[cfg(unix)]
#[test]
fn dev_zero_as_a_csv_is_refused_before_reading() {
    let dir = fresh("devzero");
    std::os::unix::fs::symlink("/dev/zero", dir.join("kernels.csv")).unwrap();
    let e = read_err(&dir);
    assert!(
        e.contains("kernels.csv") && e.contains("not a regular file"),
        "{e}"
    );
}

#[test]
fn one_huge_line_is_refused_without_echoing_it() {
    let dir = fresh("hugeline");
    // 1 MB on one line: under the size limit, so the line limit must catch it.
    let mut line = String::from("family,");
    line.push_str(&"x".repeat(1 << 20));
    std::fs::write(dir.join("kernels.csv"), line).unwrap();
    let e = read_err(&dir);
    assert!(
        e.contains("kernels.csv") && e.contains("longer than"),
        "{e}"
    );
    // 200 MB: refused by its size before a byte is read.
    let f = std::fs::File::create(dir.join("kernels.csv")).unwrap();
    f.set_len(200 * 1024 * 1024).unwrap();
    let e = read_err(&dir);
    assert!(
        e.contains("kernels.csv") && e.contains("larger than"),
        "{e}"
    );
}

/// 50 identical rows: once R² of -1e28 or an efficiency of 0.02 ± 261,237, written anyway.
#[test]
fn identical_rows_do_not_make_a_profile() {
    let mut k = String::new();
    for i in 0..50 {
        // Identical shapes; times identical, then with a last-digit wobble.
        let t = if i % 2 == 0 { 10.5 } else { 10.500001 };
        writeln!(
            k,
            "gemm_bf16,bf16,1,7168,2048,0,0,0,0,29360128,29388800,{t},{t},{t},40"
        )
        .unwrap();
    }
    let mut c = String::new();
    for _ in 0..50 {
        c.push_str("all_reduce,2,2048,LL,Ring,on,graph,10.6,10.6,10.6,20\n");
    }
    let dir = with_csv("identical", &k, Some(&c));
    let m = Measurements::read_dir(&dir).unwrap();
    let e = calibrate(&m, &h200(), "same", &fallback(), &FitOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("calibration refused")
            && e.contains("kernels.gemm_bf16")
            && e.contains("1 distinct (bytes, flops) pair")
            && e.contains("collectives all_reduce/nvlink/ring/LL")
            && e.contains("1 distinct message size"),
        "{e}"
    );
}

/// Synthetic GEMM rows off the law by a factor of 3 either way.
fn scrambled() -> Measurements {
    let gpu = h200();
    let (bw, peak) = (gpu.memory_bandwidth_gbps * 1e3, gpu.bf16_tflops * 1e6);
    let mut k = String::new();
    for (i, m) in [1u64, 2, 4, 8, 16, 32, 64, 128, 256, 512]
        .iter()
        .enumerate()
    {
        for (n, kk) in [(7168u64, 2048u64), (2112, 7168), (4096, 4096)] {
            let flops = 2.0 * (m * n * kk) as f64;
            let bytes = ((n * kk + m * kk + m * n) * 2) as f64;
            let t = (3.0 + (bytes / (bw * 0.8)).max(flops / (peak * 0.6)))
                * if i % 2 == 0 { 3.0 } else { 0.3 };
            writeln!(
                k,
                "gemm_bf16,bf16,{m},{n},{kk},0,0,0,0,{flops},{bytes},{t},{t},{t},40"
            )
            .unwrap();
        }
    }
    Measurements::read_dir(&with_csv("scrambled", &k, None)).unwrap()
}

#[test]
fn allow_poor_fit_writes_a_marked_profile_that_reports_see() {
    let m = scrambled();
    let o = FitOptions {
        allow_poor_fit: true,
        ..FitOptions::default()
    };
    let r = calibrate(&m, &h200(), "poor", &fallback(), &o).unwrap();
    let marks = &r.profile.profile.poor_fit;
    assert!(
        marks.len() == 1 && marks[0].starts_with("kernels.gemm_bf16: median |rel err|"),
        "{marks:?}"
    );
    let path = fresh("poorfit").join("a/b/profile.toml");
    decodesim::calibrate::output::write_profile(&path, "# test", &r.profile).unwrap();
    let back = CalibrationProfile::from_file(&path).unwrap();
    assert_eq!(back.poor_fit_marks(), &marks[..]);
    assert!(back.kernels[&CostFamily::GemmBf16].mem_efficiency <= 1.0);
}

#[test]
fn nan_and_out_of_range_limits_are_refused() {
    for (o, needle) in [
        (
            FitOptions {
                max_median_err: f64::NAN,
                ..FitOptions::default()
            },
            "--max-median-error NaN",
        ),
        (
            FitOptions {
                max_median_err: -0.1,
                ..FitOptions::default()
            },
            "--max-median-error -10",
        ),
        (
            FitOptions {
                min_r2: 1.5,
                ..FitOptions::default()
            },
            "--min-r2 1.5",
        ),
        (
            FitOptions {
                min_r2: f64::NAN,
                ..FitOptions::default()
            },
            "--min-r2 NaN",
        ),
    ] {
        let e = o.check().unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
    }
    let dir = fresh("nanflag");
    let out = dir.join("p.toml");
    let out_s = out.to_str().unwrap();
    let run = std::process::Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args([
            "calibrate",
            "--measurements",
            root("data/calibration/h200").to_str().unwrap(),
            "--out",
            out_s,
            "--max-median-error",
            "NaN",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        !run.status.success() && err.contains("--max-median-error NaN"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn from_trace_refuses_a_fit_that_still_misses_the_step() {
    let (scenario, profile) = ScenarioRequest {
        batch: 4,
        ..Default::default()
    }
    .load()
    .unwrap();
    // A "trace" whose step is mostly device copies, which this scenario never issues: no
    // adjustment of kernel, collective or launch costs can reproduce it.
    let mut measured = simulate_loaded(scenario.clone(), profile.clone())
        .unwrap()
        .mean;
    let extra = 20.0 * measured.step_time_us;
    measured.exclusive_us[Category::Memcpy.index()] += extra;
    measured.busy_us[Category::Memcpy.index()] += extra;
    measured.step_time_us += extra;
    let dir = fresh("fromtrace");
    let out = dir.join("anchored/profile.toml");
    let e = calibrate_to_step(
        &scenario,
        &profile,
        &measured,
        "slow",
        &out,
        &TraceFitOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("calibration refused")
            && e.contains("--max-step-error")
            && e.contains("limit ±10%"),
        "{e}"
    );
    assert!(!out.exists(), "a refused profile must not be written");
    let nan = TraceFitOptions {
        max_step_error_pct: f64::NAN,
        ..Default::default()
    };
    let e = calibrate_to_step(&scenario, &profile, &measured, "slow", &out, &nan)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--max-step-error NaN"), "{e}");
    let allow = TraceFitOptions {
        allow_poor_fit: true,
        ..Default::default()
    };
    let r = calibrate_to_step(&scenario, &profile, &measured, "slow", &out, &allow).unwrap();
    assert!(r.poor.is_some());
    let back = CalibrationProfile::from_file(&out).unwrap();
    assert!(
        back.poor_fit_marks()[0].starts_with("from-trace slow: after the fit"),
        "{:?}",
        back.poor_fit_marks()
    );
}

#[test]
fn calibrate_dir_creates_the_output_folder() {
    let out = fresh("outdir").join("new/deeper/profile.toml");
    let r = calibrate_dir(&DirRequest {
        measurements: root("data/calibration/h200"),
        gpu: "h200-sxm".into(),
        fallback: "h200-estimate".into(),
        out: out.clone(),
        name: None,
        no_table: false,
        transfer_to: None,
        max_median_error_pct: 15.0,
        min_r2: 0.9,
        allow_poor_fit: false,
    })
    .unwrap();
    assert_eq!(r.profile.profile.name, "deeper");
    let back = CalibrationProfile::from_file(&out).unwrap();
    assert!(back.table.is_some());
    assert!(back
        .kernels
        .values()
        .all(|k| k.mem_efficiency <= 1.0 && k.compute_efficiency <= 1.0));
}
