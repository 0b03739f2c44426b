//! Streaming: a 1 GB trace parses in bounded memory. Ignored by default (it writes 1 GB to the
//! temp folder); run it with
//!     cargo test --release --test trace_big -- --ignored --nocapture
//! It prints the file size, the time and the peak resident memory (VmHWM).

use decodesim::accounting::{summarize, SummaryOptions};
use decodesim::trace::classify::Classifier;
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
