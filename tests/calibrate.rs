//! `calibrate` recovers known parameters from synthetic measurements and refuses a poor fit.

use decodesim::calibrate::{calibrate, FitOptions};
use decodesim::cost::CalibrationProfile;
use decodesim::measurements::Measurements;
use decodesim::scenario::{CommPath, GpuSpec, Proto};
use decodesim::workload::CostFamily;
use std::fmt::Write;
use std::path::PathBuf;

fn h200() -> GpuSpec {
    GpuSpec::from_file(&PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/systems/gpus/h200-sxm.toml"
    )))
    .unwrap()
}

fn strict() -> FitOptions {
    FitOptions {
        max_median_err: 0.15,
        min_r2: 0.9,
        table: None,
        table_shown: None,
        keep_fallback_for_poor: false,
        allow_poor_fit: false,
    }
}

fn fallback() -> CalibrationProfile {
    CalibrationProfile::from_file(&PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/calibration/h200/profile.toml"
    )))
    .unwrap()
}

/// Writes CSVs whose times follow a known law (optionally scrambled) into a fresh folder.
fn synthetic(tag: &str, scramble: bool) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("decodesim-cal-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gpu = h200();
    let (bw, peak) = (gpu.memory_bandwidth_gbps * 1e3, gpu.bf16_tflops * 1e6);
    let mut k = String::from("family,dtype,m,n,k,experts,group_size,batch,context,flops,bytes,median_us,p10_us,p90_us,reps\n");
    for (i, m) in [1u64, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
        .iter()
        .enumerate()
    {
        for (n, kk) in [(7168u64, 2048u64), (2112, 7168), (4096, 4096)] {
            let flops = 2.0 * (m * n * kk) as f64;
            let bytes = ((n * kk + m * kk + m * n) * 2) as f64;
            let mut t = 3.0 + (bytes / (bw * 0.8)).max(flops / (peak * 0.6));
            if scramble {
                t *= if i % 2 == 0 { 3.0 } else { 0.3 };
            }
            writeln!(
                k,
                "gemm_bf16,bf16,{m},{n},{kk},0,0,0,0,{flops},{bytes},{t},{},{},50",
                t * 0.98,
                t * 1.02
            )
            .unwrap();
        }
    }
    std::fs::write(dir.join("kernels.csv"), k).unwrap();
    let mut c = String::from("op,nranks,bytes,proto,algo,p2p,mode,median_us,p10_us,p90_us,reps\n");
    for e in 11..=26 {
        let bytes = (1u64 << e) as f64;
        // LL at 2 ranks: base 6.6 (NCCL) + 2 steps × 1.5 us + bytes / (busbw 40 GB/s × 2/2).
        let t = 6.6 + 2.0 * 1.5 + bytes / (40.0 * 1e3);
        writeln!(c, "all_reduce,2,{bytes},LL,Ring,on,graph,{t},{t},{t},20").unwrap();
    }
    std::fs::write(dir.join("collectives.csv"), c).unwrap();
    std::fs::write(
        dir.join("launch.csv"),
        "mode,kernels,total_us,per_kernel_us\ngraph,1,17,17\ngraph,1001,2517,2.515\neager,10,60,6.0\neager,1000,6000,6.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("MANIFEST.txt"),
        "date: 2026-11-30\nsynthetic test data\n",
    )
    .unwrap();
    dir
}

#[test]
fn recovers_known_parameters_with_intervals() {
    let dir = synthetic("good", false);
    let m = Measurements::read_dir(&dir).unwrap();
    let r = calibrate(&m, &h200(), "synthetic", &fallback(), &strict()).unwrap();
    let g = &r.profile.kernels[&CostFamily::GemmBf16];
    assert!((g.fixed_us - 3.0).abs() < 1e-6, "{g:?}");
    assert!((g.mem_efficiency - 0.8).abs() < 1e-6);
    assert!((g.compute_efficiency - 0.6).abs() < 1e-6);
    assert_eq!(g.measured_m, Some([1.0, 4096.0]));
    let ll = r
        .profile
        .collectives
        .iter()
        .find(|c| c.path == CommPath::Nvlink && c.proto == Proto::Ll)
        .unwrap();
    assert!(
        (ll.hop_us - 1.5).abs() < 1e-6 && (ll.bus_bw_gbps - 40.0).abs() < 1e-6,
        "{ll:?}"
    );
    assert_eq!(ll.measured_nranks, vec![2]);
    // Sections without measurements keep the fallback's and the provenance says so.
    assert!(r
        .profile
        .profile
        .provenance
        .contains("from fallback 'h200'"));
    assert!(r.quality.iter().all(|q| q.r2 > 0.999));
    // Launch: 17 = L + 1·g and 2515 = L + 1000·g give L = 14.5, g = 2.5 per kernel.
    assert!(
        (r.profile.launch.graph_launch_us - 14.5).abs() < 1e-6,
        "{:?}",
        r.profile.launch
    );
    assert!((r.profile.launch.eager_launch_us - 6.0).abs() < 1e-6);
    // The written profile reads back and passes validation.
    let text = toml::to_string_pretty(&r.profile).unwrap();
    let path = dir.join("profile.toml");
    std::fs::write(&path, text).unwrap();
    let back = CalibrationProfile::from_file(&path).unwrap();
    assert_eq!(back.kernels[&CostFamily::GemmBf16], *g);
    // `created` is when the profile was made; the MANIFEST's date stays in the provenance.
    assert_eq!(back.profile.created, decodesim::calibrate::output::today());
    assert!(
        back.profile
            .provenance
            .contains("measurements dated 2026-11-30"),
        "{}",
        back.profile.provenance
    );
}

#[test]
fn refuses_a_poor_fit_and_says_why() {
    let dir = synthetic("poor", true);
    let m = Measurements::read_dir(&dir).unwrap();
    let err = calibrate(
        &m,
        &h200(),
        "bad",
        &fallback(),
        &FitOptions {
            max_median_err: 0.15,
            min_r2: 0.9,
            table: None,
            table_shown: None,
            keep_fallback_for_poor: false,
            allow_poor_fit: false,
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("calibration refused") && err.contains("kernels.gemm_bf16"),
        "{err}"
    );
    assert!(err.contains("median |rel err|"), "{err}");
}

#[test]
fn bad_csv_names_file_row_and_column() {
    let dir = synthetic("badcsv", false);
    std::fs::write(
        dir.join("kernels.csv"),
        "family,m,flops,bytes,median_us,p10_us,p90_us\ngemm_bf16,1,2,3,fast,1,1\n",
    )
    .unwrap();
    let err = Measurements::read_dir(&dir).unwrap_err().to_string();
    assert!(
        err.contains("kernels.csv")
            && err.contains("row 2 column 'median_us'")
            && err.contains("'fast'"),
        "{err}"
    );
    std::fs::write(dir.join("kernels.csv"), "family,m\ngemm_bf16,1\n").unwrap();
    let err = Measurements::read_dir(&dir).unwrap_err().to_string();
    assert!(
        err.contains("flops") && err.contains("required column"),
        "{err}"
    );
    let err = Measurements::read_dir(&dir.join("nope"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("nope"), "{err}");
}
