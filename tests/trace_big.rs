//! Streaming: a 1 GB trace parses in bounded memory. The two 1 GB tests are ignored by default
//! (each writes 1 GB to the temp folder); run them with
//!     cargo test --release --test trace_big -- --ignored --nocapture
//! They print the file size, the time and the peak resident memory (VmHWM). What a trace keeps
//! per event is checked on every run (`only_linked_work_is_kept`).

mod common;

use common::kineto_like;
use decodesim::accounting::summary::summarize_parsed;
use decodesim::accounting::{summarize, SummaryOptions};
use decodesim::trace::classify::Classifier;
use decodesim::trace::model::GpuOp;
use decodesim::trace::parse::{parse_bytes, ParseOptions};
use std::io::Write;

const STEPS: usize = 2000;
const PYTHON_EVENTS_PER_STEP: usize = 2600;

fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

#[test]
#[ignore = "writes a 1 GB trace; run with --ignored (see the file header)"]
fn a_one_gigabyte_trace_parses_in_bounded_memory() {
    let path = std::env::temp_dir().join(format!("decodesim-1gb-{}.json", std::process::id()));
    {
        let mut w = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        write!(w, "{{\"schemaVersion\":1,\"traceEvents\":[").unwrap();
        let mut first = true;
        let mut put = |w: &mut std::io::BufWriter<std::fs::File>, s: String| {
            if !first {
                w.write_all(b",\n").unwrap();
            }
            first = false;
            w.write_all(s.as_bytes()).unwrap();
        };
        for k in 0..STEPS {
            let base = k as f64 * 10_000.0;
            let corr = 10_000 + k;
            put(
                &mut w,
                format!(
                    r#"{{"ph":"X","cat":"user_annotation","name":"execute_context_0(0)_generation_8(8)","pid":1,"tid":1,"ts":{base},"dur":500}}"#
                ),
            );
            for i in 0..PYTHON_EVENTS_PER_STEP {
                put(
                    &mut w,
                    format!(
                        r#"{{"ph":"X","cat":"python_function","name":"vllm/model_executor/models/deepseek_v2.py(1234): forward_{i}","pid":1,"tid":1,"ts":{},"dur":0.2,"args":{{"Python id":{i},"Python parent id":{}}}}}"#,
                        base + 1.0,
                        i / 2
                    ),
                );
            }
            put(
                &mut w,
                format!(
                    r#"{{"ph":"X","cat":"cuda_runtime","name":"cudaGraphLaunch","pid":1,"tid":1,"ts":{},"dur":10,"args":{{"correlation":{corr}}}}}"#,
                    base + 400.0
                ),
            );
            for j in 0..20 {
                let name = if j % 5 == 4 {
                    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
                } else {
                    "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT"
                };
                put(
                    &mut w,
                    format!(
                        r#"{{"ph":"X","cat":"kernel","name":"{name}","pid":0,"tid":7,"ts":{},"dur":20,"args":{{"correlation":{corr},"stream":7,"device":0}}}}"#,
                        base + 1000.0 + 25.0 * j as f64
                    ),
                );
            }
        }
        write!(w, "]}}").unwrap();
    }
    let bytes = std::fs::metadata(&path).unwrap().len();
    assert!(bytes > 1_000_000_000, "{bytes}");
    let before = peak_rss_mb();
    let classifier = Classifier::builtin();
    let t = std::time::Instant::now();
    let s = summarize(
        std::slice::from_ref(&path),
        &SummaryOptions {
            classifier: &classifier,
            step_marker: None,
            top_unclassified: 5,
            ranks: Default::default(),
        },
    )
    .unwrap();
    let secs = t.elapsed().as_secs_f64();
    let peak = peak_rss_mb();
    std::fs::remove_file(&path).ok();
    println!(
        "1 GB trace: {:.2} GB of JSON, {} steps, {:.2} s, peak RSS {:.0} MB (before parsing {:.0} MB)",
        bytes as f64 / 1e9,
        s.selected_steps(),
        secs,
        peak,
        before
    );
    assert_eq!(s.selected_steps(), STEPS);
    // The 4 million python_function events are never kept: memory stays a small fraction of the file.
    assert!(peak < 300.0, "peak RSS {peak} MB");
}

/// Resets the peak resident memory (VmHWM) to the current resident memory (Linux's
/// `clear_refs` 5), so that writing the trace does not count in the reader's peak. False where
/// it cannot be reset: the peak then includes the writer's, an upper bound.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Memory grows with what a trace keeps, not with its events: of a real inference profile's
/// events only the GPU ops (48 bytes each), the step annotations and the runtime calls that
/// launched a GPU op stay; python_function, cpu_op, flow events and runtime queries do not.
#[test]
fn only_linked_work_is_kept() {
    assert!(
        std::mem::size_of::<GpuOp>() <= 48,
        "a GPU op takes {} bytes",
        std::mem::size_of::<GpuOp>()
    );
    let steps = 3;
    let json = kineto_like::trace_bytes(steps);
    let t = parse_bytes(
        &json,
        std::path::Path::new("g.json"),
        &ParseOptions::default(),
    )
    .unwrap();
    let kernels = steps * kineto_like::KERNELS_PER_STEP;
    // Per kernel: 17 python_function, a cpu_op, 2 or 3 runtime queries, a launch, 2 flow events
    // and the kernel.
    assert_eq!(t.counts.total as usize, steps + kernels * 24 + kernels / 2);
    assert_eq!(t.gpu_ops.len(), kernels);
    assert_eq!(t.annotations.len(), steps);
    // The queries' correlation ids link no GPU op: only the launches stay.
    assert_eq!(t.launches.len(), kernels);
    let classifier = Classifier::builtin();
    let s = summarize_parsed(
        vec![t],
        &SummaryOptions {
            classifier: &classifier,
            step_marker: None,
            top_unclassified: 5,
            ranks: Default::default(),
        },
    )
    .unwrap();
    assert_eq!(s.selected_steps(), steps);
    assert_eq!(
        s.ranks[0].steps[0].linked_ops,
        kineto_like::KERNELS_PER_STEP
    );
}

/// The figure docs/performance.md cites: a 1 GB trace of real-looking events (the public MI300X profile's
/// proportions, `tests/common/kineto_like.rs`) summarized within 64 MiB.
#[test]
#[ignore = "writes a 1 GB trace; run with --ignored (see the file header)"]
fn a_one_gigabyte_trace_of_real_events_stays_within_64_mib() {
    const STEPS: usize = 2_800;
    let path = std::env::temp_dir().join(format!("decodesim-1gb-real-{}.json", std::process::id()));
    let bytes = {
        let mut w = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        kineto_like::write_trace(&mut w, STEPS).unwrap()
    };
    assert!(bytes > 1_000_000_000, "{bytes}");
    let reset = reset_peak_rss();
    let classifier = Classifier::builtin();
    let cpu = std::time::Instant::now();
    let s = summarize(
        std::slice::from_ref(&path),
        &SummaryOptions {
            classifier: &classifier,
            step_marker: None,
            top_unclassified: 5,
            ranks: Default::default(),
        },
    );
    let secs = cpu.elapsed().as_secs_f64();
    let peak = peak_rss_mb();
    std::fs::remove_file(&path).ok();
    let s = s.unwrap();
    println!(
        "1 GB trace of real-looking events: {:.2} GB of JSON, {} steps, {:.2} s wall ({:.0} MB/s), peak RSS {:.1} MiB{}",
        bytes as f64 / 1e9,
        s.selected_steps(),
        secs,
        bytes as f64 / 1e6 / secs,
        peak,
        if reset { "" } else { " (peak not reset: includes the writer)" }
    );
    assert_eq!(s.selected_steps(), STEPS);
    // `peak_rss_mb` reads VmHWM in KiB / 1024: MiB.
    assert!(peak <= 64.0, "peak RSS {peak} MiB");
}
