//! Every real trace in ../shared/traces/public (CI has it beside the checkout; elsewhere these
//! tests skip with a message): all parse, the steps found are exactly the step annotations, and
//! the LLM-inference traces leave under 1% of kernel time unclassified.

use decodesim::accounting::summary::summarize_parsed;
use decodesim::accounting::{SummaryOptions, TraceSummary};
use decodesim::category::Category;
use decodesim::trace::classify::Classifier;
use decodesim::trace::model::Side;
use decodesim::trace::parse::{parse_file, ParseOptions};
use decodesim::trace::steps::{StepKind, StepSource};
use regex::Regex;
use std::path::{Path, PathBuf};

/// The LLM-inference traces listed in SOURCES.txt.
const LLM: [&str; 5] = [
    "sglang_Qwen3-8B_decode.json.gz",
    "sglang_Qwen3-8B_prefilldecode.json.gz",
    "graph_execution.json.gz",
    "vllm_prefilldecode_piecewise/graph_execution.json.gz",
    "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
];

fn public_dir() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/traces/public");
    if d.is_dir() {
        Some(d)
    } else {
        println!(
            "skipping: {} is absent (it exists only beside the project's checkouts and in CI)",
            d.display()
        );
        None
    }
}

fn all_traces(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(".json.gz") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn summarize_one(path: &Path) -> (decodesim::trace::ParsedTrace, TraceSummary) {
    let t = parse_file(path, &ParseOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let c = Classifier::builtin();
    let opts = SummaryOptions {
        classifier: &c,
        step_marker: None,
        top_unclassified: 5,
    };
    let s = summarize_parsed(vec![t.clone()], &opts)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (t, s)
}

#[test]
fn every_public_trace_parses_and_its_steps_match_its_annotations() {
    let Some(dir) = public_dir() else { return };
    let files = all_traces(&dir);
    assert!(
        files.len() >= 19,
        "expected the 19 public traces, found {}",
        files.len()
    );
    let families = [
        (
            StepSource::VllmExecute,
            r"^execute_(?:\d+_)?context_\d+\([^)]*\)_generation_\d+\(",
        ),
        (
            StepSource::SglangStep,
            r"^step\[(?i:(EXTEND|DECODE|MIXED|PREFILL|IDLE))\b",
        ),
        (StepSource::ProfilerStep, r"^ProfilerStep#\d+$"),
    ];
    for f in &files {
        let (t, s) = summarize_one(f);
        let r = &s.ranks[0];
        assert!(!r.steps.is_empty(), "{}: no steps", f.display());
        // The steps are the trace's own markers, one step per marker that launched GPU work.
        match families.iter().find(|(src, _)| *src == r.step_source) {
            Some((_, pat)) => {
                let re = Regex::new(pat).unwrap();
                let marks = t
                    .annotations
                    .iter()
                    .filter(|a| a.side == Side::Cpu && re.is_match(&a.name))
                    .count();
                assert_eq!(r.steps.len() + r.empty_markers, marks, "{}", f.display());
            }
            None => assert_eq!(r.step_source, StepSource::WholeTrace, "{}", f.display()),
        }
        for st in &r.steps {
            let b = &st.breakdown;
            let sum: f64 = b.exclusive_us.iter().sum();
            assert!(
                (sum - b.step_time_us).abs() <= 1e-6 * b.step_time_us.max(1.0),
                "{}: exclusive sum {sum} vs step {}",
                f.display(),
                b.step_time_us
            );
            assert!(st.end_us >= st.start_us);
        }
    }
}

#[test]
fn llm_inference_traces_leave_under_one_percent_unclassified() {
    let Some(dir) = public_dir() else { return };
    for name in LLM {
        let (_, s) = summarize_one(&dir.join(name));
        let share = s.unclassified_share();
        println!(
            "{name}: unclassified {:.3}% of {:.1} µs kernel time",
            share * 100.0,
            s.kernel_time_us
        );
        assert!(s.kernel_time_us > 0.0, "{name}");
        assert!(
            share < 0.01,
            "{name}: {:.2}% unclassified: {:?}",
            share * 100.0,
            s.unclassified
        );
    }
}

#[test]
fn known_answers_on_real_traces() {
    let Some(dir) = public_dir() else { return };
    // SGLang decode with HIP-graph replay: one decode step whose 544 kernels share one launch;
    // the 463 ms stall before the forward pass is cut, leaving the ~10 ms step.
    let (_, s) = summarize_one(&dir.join("sglang_Qwen3-8B_decode.json.gz"));
    let r = &s.ranks[0];
    assert_eq!((r.steps.len(), r.steps[0].kind), (1, StepKind::Decode));
    assert!(r.steps[0].graph_ops >= 544, "{}", r.steps[0].graph_ops);
    assert!(
        (9_000.0..12_000.0).contains(&r.step_time.median),
        "{}",
        r.step_time.median
    );
    assert!(r.steps[0].stall_us > 400_000.0);

    // HF eager on H100: TraceLens's gpu_timeline for this file says 34.89 ms total with
    // 2.99 ms idle (TraceLens tests/traces/h100/..._perf_report_csvs/gpu_timeline.csv).
    let (_, s) = summarize_one(&dir.join("Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"));
    let b = &s.breakdown;
    assert!(
        (b.step_time_us - 34_890.0).abs() < 10.0,
        "{}",
        b.step_time_us
    );
    assert!(
        (b.time(Category::Idle) - 2_990.0).abs() < 10.0,
        "{}",
        b.time(Category::Idle)
    );

    // vLLM piecewise mixed step: found, but not a decode step.
    let (_, s) = summarize_one(&dir.join("vllm_prefilldecode_piecewise/graph_execution.json.gz"));
    assert_eq!(s.ranks[0].steps[0].kind, StepKind::Mixed);

    // Old schema: "Kernel" category, lowercase "external id", rank from distributedInfo.
    let (t, s) = summarize_one(&dir.join("inference_rank_1.json.gz"));
    assert_eq!(t.gpu_ops.len(), 4);
    assert_eq!(s.ranks[0].rank, 1);

    // NCCL training trace: 3 ProfilerSteps with all-reduce kernels classified as communication.
    let (_, s) = summarize_one(&dir.join("nccl_data.json.gz"));
    assert_eq!(s.ranks[0].steps.len(), 3);
    assert!(s.breakdown.busy_us[Category::Communication.index()] > 0.0);
}

#[test]
fn the_public_rank_pair_aligns() {
    let Some(dir) = public_dir() else { return };
    let c = Classifier::builtin();
    let opts = SummaryOptions {
        classifier: &c,
        step_marker: None,
        top_unclassified: 5,
    };
    let paths = [
        dir.join("sampled_rank-0.json.gz"),
        dir.join("sampled_rank-1.json.gz"),
    ];
    let s = decodesim::accounting::summarize(&paths, &opts).unwrap();
    assert_eq!(s.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), [0, 1]);
    assert!(s.alignment.aligned > 0);
    for r in &s.ranks {
        for st in r.selected_steps() {
            let b = &st.breakdown;
            let comm = st.breakdown.busy_us[Category::Communication.index()];
            assert!(b.comm_wait_us >= 0.0 && b.comm_transfer_us >= 0.0);
            // Wait + transfer is the rank's collective kernel time (summed; it is at least the union).
            assert!(
                b.comm_wait_us + b.comm_transfer_us + 1e-6 >= comm,
                "{} < {comm}",
                b.comm_wait_us + b.comm_transfer_us
            );
        }
    }
}
