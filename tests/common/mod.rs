//! A small synthetic multi-rank decode trace, vLLM-like: per step a CPU
//! `execute_context_0(0)_generation_8(8)` annotation, one `cudaGraphLaunch` whose correlation id
//! every kernel of the step carries, and on the GPU a GEMM, a norm, an NCCL all-reduce, an idle
//! gap, attention and an overlapping MoE kernel on a second stream. Rank r reaches the
//! all-reduce `skew[r]` µs late; every rank's all-reduce ends at the same time, after a 30 µs
//! transfer. One prefill step precedes the decode steps. The expected numbers are in
//! [`expected`].

#![allow(dead_code)]

pub mod kineto_like;

use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const STEP_PERIOD: f64 = 10_000.0;
pub const TRANSFER: f64 = 30.0;

fn x(cat: &str, name: &str, pid: i64, tid: i64, ts: f64, dur: f64, args: Value) -> Value {
    json!({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args})
}

/// The trace of one rank. `skews` holds every rank's arrival delay at the collective.
pub fn synth_trace(rank: usize, skews: &[f64], decode_steps: usize, dist_info: bool) -> Value {
    let s = skews[rank];
    let big = skews.iter().copied().fold(0.0, f64::max);
    let mut ev =
        vec![json!({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}})];
    // A prefill step first: counted as a step, not used in the decode statistics.
    let steps: Vec<(String, f64)> =
        std::iter::once(("execute_context_1(512)_generation_0(0)".to_string(), 0.0))
            .chain(
                (1..=decode_steps)
                    .map(|k| ("execute_context_0(0)_generation_8(8)".to_string(), k as f64)),
            )
            .collect();
    for (k, (name, _)) in steps.iter().enumerate() {
        let base = STEP_PERIOD * k as f64;
        let corr = 1000 + k as i64;
        ev.push(x(
            "user_annotation",
            name,
            100,
            100,
            base,
            500.0,
            json!({"External id": k}),
        ));
        ev.push(x(
            "python_function",
            "vllm/worker.py(123): execute_model",
            100,
            100,
            base + 1.0,
            400.0,
            json!({"Python id": 5}),
        ));
        ev.push(x(
            "cuda_runtime",
            "cudaGraphLaunch",
            100,
            100,
            base + 400.0,
            20.0,
            json!({"correlation": corr}),
        ));
        ev.push(json!({"ph": "s", "id": corr, "pid": 100, "tid": 100, "ts": base + 400.0, "cat": "ac2g", "name": "ac2g"}));
        let t0 = base + 1000.0;
        let kargs = |stream: i64| json!({"correlation": corr, "stream": stream, "device": 0, "graph id": 1, "graph node id": 7});
        let mut kern = |name: &str, stream: i64, start: f64, end: f64| {
            ev.push(x(
                "kernel",
                name,
                0,
                stream,
                start,
                end - start,
                kargs(stream),
            ));
        };
        kern(
            "nvjet_tst_64x64_64x16_2x1_2cta_v_bz_TNT",
            7,
            t0 + s,
            t0 + s + 100.0,
        );
        kern(
            "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>",
            7,
            t0 + s + 100.0,
            t0 + s + 120.0,
        );
        kern(
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            7,
            t0 + s + 120.0,
            t0 + big + 120.0 + TRANSFER,
        );
        kern(
            "fmhaSm100fKernel_QkvBfloat16OBfloat16H128PagedKvCausalP64ForGen",
            7,
            t0 + big + 160.0,
            t0 + big + 210.0,
        );
        kern(
            "void marlin_moe_wna16::Marlin<256, 1, 8, 8>(int4 const*)",
            8,
            t0 + big + 180.0,
            t0 + big + 230.0,
        );
    }
    let mut doc = json!({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "traceEvents": ev});
    if dist_info {
        doc["distributedInfo"] =
            json!({"backend": "nccl", "rank": rank, "world_size": skews.len()});
    }
    doc
}

/// Per decode step of rank r: (step time, gemm, norm, comm exposed, idle, attention, moe, wait).
pub fn expected(rank: usize, skews: &[f64]) -> [f64; 8] {
    let s = skews[rank];
    let big = skews.iter().copied().fold(0.0, f64::max);
    [
        big - s + 230.0,
        100.0,
        20.0,
        big - s + TRANSFER,
        10.0,
        20.0,
        50.0,
        big - s,
    ]
}

/// Writes gzipped rank files named like vLLM's (no distributedInfo unless asked), returns paths.
pub fn write_ranks(
    dir: &Path,
    skews: &[f64],
    decode_steps: usize,
    dist_info: bool,
) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    (0..skews.len())
        .map(|r| {
            let p = dir.join(format!(
                "refstep_b8_c1024_synthetic_rank{r}.1764523456789012345.pt.trace.json.gz"
            ));
            let text = serde_json::to_vec(&synth_trace(r, skews, decode_steps, dist_info)).unwrap();
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(&text).unwrap();
            std::fs::write(&p, gz.finish().unwrap()).unwrap();
            p
        })
        .collect()
}

/// A fresh scratch directory under the target dir (tests run in parallel: one per test).
pub fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A committed fixture under tests/data; a missing one is a test failure, never a skip.
pub fn fixture(rel: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel);
    assert!(
        p.exists(),
        "missing test fixture {} (committed with the repository; restore it with git)",
        p.display()
    );
    p
}

/// `../shared/<rel>` beside the checkout. Tests that need it are `#[ignore]`d (run them with
/// `--include-ignored`), and fail here with a clear message when it is absent.
pub fn shared(rel: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared")
        .join(rel);
    assert!(
        p.exists(),
        "{} is absent: this test needs the project's shared folder beside the checkout",
        p.display()
    );
    p
}

/// Runs the decodesim binary; (success, stdout, stderr).
pub fn decodesim_bin(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs the decodesim binary; (exit code, -1 when killed by a signal; stdout, stderr).
pub fn decodesim_exit(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_decodesim"))
        .args(args)
        .output()
        .expect("the decodesim binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One play of `w` on the full timeline (every rank), less the drawn jitter of the collective
/// transfers: one uniform draw for all ranks, mean zero, so subtracting it is a control
/// variate that leaves the mean over seeds unchanged and narrows its spread (the fast path's
/// agreement tests compare against this mean).
pub fn timeline_window(
    w: &decodesim::workload::Workload,
    s: &decodesim::scenario::Scenario,
    p: &decodesim::cost::CalibrationProfile,
    engine: &mut decodesim::sim::Engine,
    tl: &mut decodesim::sim::Timeline,
) -> f64 {
    let pricing = decodesim::cost::price(w, s, p).expect("priced");
    engine.run(
        w,
        &pricing.base_us,
        &decodesim::sim::engine_config(s, p),
        tl,
    );
    let jitter: f64 = tl
        .rank_records(0)
        .filter(|r| w.ops[r.op as usize].family.is_collective())
        .map(|r| (r.end_us - r.start_us - r.wait_us) - pricing.base_us[r.op as usize])
        .sum();
    tl.step_time_us() - jitter
}

/// A fast path's errors against the timeline's mean over seeds, scenario by scenario, and the
/// scenarios off by 0.5% or more (tests/fast_dp.rs, tests/fast_tbo.rs).
#[derive(Default)]
pub struct Agreement {
    pub errs: Vec<f64>,
    pub beyond: Vec<String>,
}

impl Agreement {
    /// Records one scenario's fast price against the mean; prints it when the environment
    /// variable `verbose` is set. Returns the relative error.
    pub fn record(&mut self, label: &str, quick: f64, mean: f64, verbose: &str) -> f64 {
        let err = (quick - mean) / mean;
        if std::env::var_os(verbose).is_some() {
            eprintln!(
                "{:+.3}%  {label}  (fast {quick:.2}, mean {mean:.2})",
                err * 100.0
            );
        }
        if err.abs() >= 0.005 {
            self.beyond.push(format!(
                "{label}: fast {quick:.1} µs vs mean over seeds {mean:.1} µs ({:+.3}%)",
                err * 100.0
            ));
        }
        self.errs.push(err);
        err
    }

    pub fn mean_abs(&self) -> f64 {
        self.errs.iter().map(|e| e.abs()).sum::<f64>() / self.errs.len() as f64
    }

    pub fn worst(&self) -> f64 {
        self.errs.iter().fold(0.0f64, |m, e| m.max(e.abs()))
    }

    /// Prints `what` with the summary, and fails listing every scenario off by 0.5% or more.
    pub fn assert_all_within_half_percent(&self, what: &str) {
        eprintln!("{what}: {}", self.summary());
        assert!(
            self.beyond.is_empty(),
            "{} of {} scenarios off by 0.5% or more:\n{}",
            self.beyond.len(),
            self.errs.len(),
            self.beyond.join("\n")
        );
    }

    /// One line: how many, mean |error|, mean signed error, worst (%).
    pub fn summary(&self) -> String {
        format!(
            "{} scenarios: mean |error| {:.3}%, mean signed {:+.3}%, worst {:.3}%",
            self.errs.len(),
            self.mean_abs() * 100.0,
            self.errs.iter().sum::<f64>() / self.errs.len() as f64 * 100.0,
            self.worst() * 100.0
        )
    }
}

/// The mean over `seeds` seeds of [`timeline_window`] on `s`'s step (the fast path's agreement
/// tests compare against it).
pub fn timeline_mean(
    s: &decodesim::scenario::Scenario,
    p: &decodesim::cost::CalibrationProfile,
    seeds: u64,
) -> f64 {
    let (mut engine, mut tl) = (
        decodesim::sim::Engine::new(),
        decodesim::sim::Timeline::default(),
    );
    let mut sum = 0.0;
    for seed in 0..seeds {
        let mut s = s.clone();
        s.seed = seed * 7919 + 3;
        let w = decodesim::workload::build(&s);
        sum += timeline_window(&w, &s, p, &mut engine, &mut tl);
    }
    sum / seeds as f64
}

/// A request loaded and fitted on the fast path: its step (µs) at the scenario's own batch and
/// context, with the scenario and profile it loaded. A request that does not load or fit fails
/// the test, naming `label`.
pub fn fast_step(
    req: &decodesim::sim::ScenarioRequest,
    label: &str,
) -> (
    f64,
    decodesim::scenario::Scenario,
    decodesim::cost::CalibrationProfile,
) {
    use decodesim::sim::fast::{Collectives, FastScenario, Launch};
    let (s, p) = req.load().unwrap_or_else(|e| panic!("{label}: {e}"));
    let fast = FastScenario::new(&s, &p, None).unwrap_or_else(|e| panic!("{label}: {e}"));
    let launch = Launch::new(&p, s.cuda_graphs);
    let coll = Collectives::new(&s, &p).expect("collectives");
    let quick = fast.step_us(s.batch, s.context, &launch, &coll);
    (quick, s, p)
}

/// Every file under `dir` (hidden ones too), relative path → bytes: what a refused or failed
/// write must leave as it was.
pub fn snapshot(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(
                    p.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    out
}
