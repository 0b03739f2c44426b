//! Calibration from the files users already have: nccl-tests output as the machine's collective
//! table, `vllm bench serve --save-result` JSON as throughput points, the fit choosing the
//! factors a few points identify, and a fit over a mixture of plain and speculative points.
//! Fixtures: tests/data/nccl-tests/ (8 GPUs, all_reduce_perf and all_gather_perf) and
//! tests/data/bench-serve/ (concurrency 1, 4, 16, 64).

use decodesim::calibrate::bench_serve::{BenchMetric, BenchOptions};
use decodesim::calibrate::from_throughput::{
    fit_throughput, read_inputs, Factor, Measured, MeasuredAcceptance, ThroughputFit,
    ThroughputRequest,
};
use decodesim::calibrate::nccl_tests::{self, Column, NcclTestsRequest};
use decodesim::cost::aic::comm_price;
use decodesim::sim::ScenarioRequest;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("decodesim-cf-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn nccl_files() -> Vec<PathBuf> {
    vec![
        root().join("tests/data/nccl-tests/all_reduce_perf_8gpu.txt"),
        root().join("tests/data/nccl-tests/all_gather_perf_8gpu.txt"),
    ]
}

fn bench_files() -> Vec<PathBuf> {
    [1, 4, 16, 64]
        .iter()
        .map(|c| root().join(format!("tests/data/bench-serve/kimi-tp8-c{c}.json")))
        .collect()
}

fn nccl_request(out: &Path, column: Column) -> NcclTestsRequest {
    let (s, base) = ScenarioRequest::default().load().unwrap();
    NcclTestsRequest {
        files: nccl_files(),
        column,
        base,
        system: s.system.clone(),
        out: out.to_path_buf(),
        name: None,
        channels: None,
    }
}

#[test]
fn nccl_tests_output_is_read_as_written() {
    let f = nccl_tests::read(&nccl_files()[0]).unwrap();
    assert_eq!(f.op, "all_reduce");
    assert_eq!(f.nranks, 8);
    assert_eq!(f.rows.len(), 24, "8 B to 64 MiB by factors of 2");
    assert_eq!(
        f.gpus,
        vec!["NVIDIA RTX PRO 6000 Blackwell Server Edition".to_string()]
    );
    assert!(f.versions[0].starts_with("nccl-tests version 2.17.6"));
    assert!(f.threads_line.starts_with("nThread 1 nGpus 8"));
    let r = &f.rows[11]; // 16 KiB
    assert_eq!(
        (r.bytes, r.count, r.dtype.as_str()),
        (16384, 4096, "float32")
    );
    assert_eq!(r.us(Column::OutOfPlace), 24.10);
    assert_eq!(r.us(Column::InPlace), 24.39);
    assert_eq!(r.us(Column::Min), 24.10);
    let g = nccl_tests::read(&nccl_files()[1]).unwrap();
    assert_eq!((g.op.as_str(), g.nranks), ("all_gather", 8));
}

#[test]
fn nccl_tests_files_become_the_machines_collective_table() {
    let d = tmp("nccl");
    let out = d.join("mine/profile.toml");
    let r = nccl_tests::from_nccl_tests(&nccl_request(&out, Column::OutOfPlace)).unwrap();
    // The table holds every measured row, at the measured rank count, and the base's measured
    // rows of the collectives and rank counts the files do not measure.
    let csv = std::fs::read_to_string(d.join("mine/tables/nccl_collectives.csv")).unwrap();
    let kept: usize = r.kept.iter().map(|(_, rows)| rows).sum();
    assert_eq!(csv.lines().count(), 1 + 24 + 24 + kept);
    assert!(
        r.kept
            .iter()
            .all(|((op, n), _)| *n != 8 || !["all_reduce", "all_gather"].contains(&op.as_str())),
        "{:?}",
        r.kept
    );
    assert!(
        csv.contains("all_reduce,nccl,unspecified,float32,8,4096,16384,24.100"),
        "{csv}"
    );
    // The base's other tables came along, so MoE, GEMM and MLA still price from them.
    for f in ["moe.csv", "gemm.csv", "mla_generation.csv"] {
        assert!(r.copied.iter().any(|c| c == f), "{:?}", r.copied);
    }
    // Curves: measured ends, the base table's price at the same sizes, the LL -> Simple switch.
    let ar = r.curves.iter().find(|c| c.op == "all_reduce").unwrap();
    assert_eq!((ar.nranks, ar.rows), (8, 24));
    assert_eq!(ar.us[0], 20.0);
    assert!(ar.base_us.is_some());
    assert_eq!(ar.switch_bytes, Some((524288.0, 1048576.0)));
    // The written profile loads and prices an allreduce of Kimi's batch-1 message (7,168 BF16
    // elements) from the measured curve: between the 8 KiB and 16 KiB rows.
    let (_, p) = ScenarioRequest {
        calibration: Some(out.display().to_string()),
        ..Default::default()
    }
    .load()
    .unwrap();
    let curve = p.aic.as_ref().unwrap().nccl_curve("all_reduce", 8).unwrap();
    let us = comm_price(&curve.pts, 14336.0).unwrap().us;
    assert!((22.05..24.10).contains(&us), "{us}");
    // Provenance: files, nccl-tests version, header, GPUs, column, date written.
    let text = std::fs::read_to_string(&out).unwrap();
    for want in [
        "all_reduce_perf_8gpu.txt",
        "nccl-tests version 2.17.6",
        "nThread 1 nGpus 8",
        "8 ranks of NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "out-of-place",
        "[fit.nccl_tests]",
        "written = \"20",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    let manifest = std::fs::read_to_string(d.join("mine/tables/MANIFEST.txt")).unwrap();
    assert!(manifest.contains("all_gather_perf_8gpu.txt"), "{manifest}");
    // The step under the new table differs from the base's (the table is what prices it).
    let base = decodesim::sim::simulate(&ScenarioRequest::default()).unwrap();
    let mine = decodesim::sim::simulate(&ScenarioRequest {
        calibration: Some(out.display().to_string()),
        ..Default::default()
    })
    .unwrap();
    assert!(
        (mine.step_time_us() / base.step_time_us() - 1.0).abs() > 1e-3,
        "{} vs {}",
        mine.step_time_us(),
        base.step_time_us()
    );
}

#[test]
fn the_in_place_column_is_taken_when_asked() {
    let d = tmp("nccl-ip");
    let out = d.join("p/profile.toml");
    let r = nccl_tests::from_nccl_tests(&nccl_request(&out, Column::InPlace)).unwrap();
    let ar = r.curves.iter().find(|c| c.op == "all_reduce").unwrap();
    assert_eq!(ar.us[0], 20.24);
    assert!(std::fs::read_to_string(&out).unwrap().contains("in-place"));
}

#[test]
fn bench_serve_results_are_points() {
    let pts = read_inputs(&bench_files(), &BenchOptions::default()).unwrap();
    assert_eq!(
        pts.iter().map(|p| p.concurrency).collect::<Vec<_>>(),
        vec![1, 4, 16, 64]
    );
    // context = mean input + half the mean output: 2000 + 1000 / 2.
    assert!(pts.iter().all(|p| p.context == 2500), "{pts:?}");
    assert!(
        pts.iter().all(|p| p.kv_bytes == Some(1.0)),
        "fp8 from --metadata"
    );
    assert!(pts.iter().all(|p| p.measured == Measured::TokensPerS));
    assert!(pts.iter().all(|p| p.line == 1));
    // With the median TPOT: tokens/s = concurrency / TPOT.
    let t = read_inputs(
        &bench_files()[..1],
        &BenchOptions {
            metric: BenchMetric::MedianTpot,
            ..Default::default()
        },
    )
    .unwrap();
    match t[0].measured {
        Measured::TpotMs(ms) => assert!((t[0].tokens_per_s - 1e3 / ms).abs() < 1e-9),
        m => panic!("{m:?}"),
    }
}

#[test]
fn four_points_five_factors_the_fit_chooses_what_they_identify() {
    let pts = read_inputs(&bench_files(), &BenchOptions::default()).unwrap();
    let d = tmp("auto");
    let out = d.join("fitted.toml");
    let fit = fit_throughput(&ThroughputRequest {
        base: ScenarioRequest::default(),
        points: pts,
        source: bench_files()[0].clone(),
        factors: Vec::new(),
        out: out.clone(),
        name: None,
    })
    .unwrap();
    println!("{:#?}", fit.choices);
    // Every factor has a row, with a sensitivity and a reason.
    for f in decodesim::calibrate::from_throughput::ALL_FACTORS.iter() {
        let c = fit.choices.iter().find(|c| c.factor == *f).unwrap();
        assert!(
            c.why.starts_with("chosen") || c.why.contains("not"),
            "{c:?}"
        );
    }
    // At most points - 1 chosen, the most sensitive first.
    let chosen: Vec<_> = fit.choices.iter().filter(|c| c.chosen).collect();
    assert!(!chosen.is_empty() && chosen.len() <= 3, "{chosen:?}");
    assert_eq!(fit.choices[0].why, "chosen: the most sensitive");
    // Coarse factors are ranked before the fine splits of their families (curve factors).
    let fine = |c: &&decodesim::calibrate::from_throughput::FactorChoice| {
        decodesim::calibrate::from_throughput::FACTORS
            .iter()
            .find(|f| f.name == c.factor.name())
            .unwrap()
            .fine
    };
    assert!(chosen
        .iter()
        .filter(|c| !fine(c))
        .all(|c| c.sensitivity <= fit.choices[0].sensitivity));
    assert_eq!(fit.fitted.len(), chosen.len());
    // Each factor not chosen says why: no point depends on it, collinear with a chosen one,
    // beyond the points - 1 cap, or its interval spanned everything once fitted.
    for c in fit.choices.iter().filter(|c| !c.chosen) {
        assert!(
            c.why.contains("no point depends on it")
                || c.why.contains("collinear with")
                || c.why.contains("identify at most")
                || c.why.contains("below 1% of the strongest")
                || c.why.contains("spans everything")
                || c.why.contains("ran to its bound")
                || c.why.contains("every point is at")
                || c.why.contains("does not reduce the error"),
            "{c:?}"
        );
    }
    let before = ThroughputFit::rms_rel_err(&fit.before);
    let after = ThroughputFit::rms_rel_err(&fit.residuals);
    assert!(
        after < before && after < 0.05,
        "before {before}, after {after}"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("kimi-tp8-c64.json line 1"), "{text}");
}

#[test]
fn factors_still_override_the_choice() {
    let pts = read_inputs(&bench_files(), &BenchOptions::default()).unwrap();
    let d = tmp("override");
    let fit = fit_throughput(&ThroughputRequest {
        base: ScenarioRequest::default(),
        points: pts,
        source: bench_files()[0].clone(),
        factors: vec![Factor::StepOverhead],
        out: d.join("fitted.toml"),
        name: None,
    })
    .unwrap();
    assert_eq!(fit.fitted.len(), 1);
    assert_eq!(fit.fitted[0].factor, Factor::StepOverhead);
    assert_eq!(fit.choices[0].why, "chosen: named by --factors");
}

#[test]
fn a_mixture_of_plain_and_speculative_points_fits() {
    let d = tmp("mix");
    let csv = d.join("spec.csv");
    // EAGLE-3 k=3 points of the same machine, measured as TPOT with vLLM's mean acceptance
    // length (2.6, as the Kimi drafts report on MT-Bench: docs/sources.md §5).
    std::fs::write(
        &csv,
        "concurrency,context,tpot_ms,kv_cache_dtype,spec_method,draft_tokens,acceptance_length\n\
         1,2500,9.0,fp8,eagle3,3,2.6\n\
         8,2500,14.5,fp8,eagle3,3,2.6\n",
    )
    .unwrap();
    let mut files = bench_files();
    files.push(csv.clone());
    let pts = read_inputs(&files, &BenchOptions::default()).unwrap();
    assert_eq!(pts.len(), 6);
    let sp = pts[4].spec.as_ref().unwrap();
    assert_eq!(sp.draft_tokens, 3);
    assert_eq!(sp.acceptance, MeasuredAcceptance::Length(2.6));
    assert!((pts[5].tokens_per_s - 8.0 / 14.5e-3).abs() < 1e-6);
    let fit = fit_throughput(&ThroughputRequest {
        base: ScenarioRequest::default(),
        points: pts,
        source: csv.clone(),
        factors: Vec::new(),
        out: d.join("fitted.toml"),
        name: None,
    })
    .unwrap();
    // Each point was priced with its own scenario: the speculative ones predict more tokens
    // per step than a plain step at the same batch would give.
    let plain_c1 = fit.before[0].predicted;
    let spec_c1 = fit.before[4].predicted;
    assert!(spec_c1 > plain_c1 * 1.2, "{spec_c1} vs {plain_c1}");
    assert!(!fit.fitted.is_empty());
    let text = std::fs::read_to_string(d.join("fitted.toml")).unwrap();
    assert!(
        text.contains("spec=eagle3 k=3 acceptance length 2.6"),
        "{text}"
    );
}

#[test]
fn the_cli_prints_the_choice_table_and_writes_profiles() {
    let d = tmp("cli");
    let bin = env!("CARGO_BIN_EXE_decodesim");
    let mut cmd = Command::new(bin);
    // Four layers: the command's output is under test here, not the fit (fast).
    cmd.args(["calibrate", "--layers", "4", "--from-throughput"])
        .args(bench_files())
        .args(["--out"])
        .arg(d.join("fit.toml"));
    let o = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout.contains("sensitivity") && stdout.contains("chosen: the most sensitive"),
        "{stdout}"
    );
    assert!(stdout.contains("kimi-tp8-c16.json line 1"), "{stdout}");
    let o = Command::new(bin)
        .args(["calibrate", "--from-nccl-tests"])
        .args(nccl_files())
        .args(["--nccl-tests-column", "min", "--out"])
        .arg(d.join("n/profile.toml"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        stdout.contains("all_reduce") && stdout.contains("between 524288 and 1048576 B"),
        "{stdout}"
    );
    assert!(d.join("n/tables/nccl_collectives.csv").is_file());
}
