//! Real public traces. The small ones committed in tests/data/public (NOTICE there) are checked
//! on every run: all parse, the steps found are exactly the step annotations, known answers
//! hold, and the one real rank pair aligns. The whole ../shared/traces/public folder (19 traces,
//! 17 MB; beside the project's checkouts and in CI) is extra coverage in `#[ignore]`d tests: run
//! them with `cargo test --test trace_public -- --include-ignored`; they fail when the folder is
//! absent.

mod common;

use decodesim::accounting::infer::infer_scenario;
use decodesim::accounting::summary::summarize_parsed;
use decodesim::accounting::{SummaryOptions, TraceSummary};
use decodesim::category::Category;
use decodesim::trace::classify::Classifier;
use decodesim::trace::model::Side;
use decodesim::trace::parse::{parse_file, ParseOptions};
use decodesim::trace::rank::RankPolicy;
use decodesim::trace::steps::{StepKind, StepSource};
use decodesim::trace::TraceError;
use regex::Regex;
use std::path::{Path, PathBuf};

/// The fixtures committed in tests/data/public.
const FIXTURES: [&str; 8] = [
    "sglang_Qwen3-8B_decode.json.gz",
    "graph_execution.json.gz",
    "trace.json.gz",
    "sampled_rank-0.json.gz",
    "sampled_rank-1.json.gz",
    "inference_rank_1.json.gz",
    "triton_example.json.gz",
    "mi250_minitoy_train_ROCm6_2_kineto.json.gz",
];

/// The LLM-inference traces of the shared folder (SOURCES.txt there).
const LLM: [&str; 5] = [
    "sglang_Qwen3-8B_decode.json.gz",
    "sglang_Qwen3-8B_prefilldecode.json.gz",
    "graph_execution.json.gz",
    "vllm_prefilldecode_piecewise/graph_execution.json.gz",
    "Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
];

const SHARED: &str = "traces/public";

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

fn opts(c: &Classifier, ranks: RankPolicy) -> SummaryOptions<'_> {
    SummaryOptions {
        classifier: c,
        step_marker: None,
        top_unclassified: 5,
        ranks,
    }
}

/// One file alone: single files of multi-rank jobs are analysed with --allow-partial-ranks.
fn summarize_one(path: &Path) -> (decodesim::trace::ParsedTrace, TraceSummary) {
    let t = parse_file(path, &ParseOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    let c = Classifier::builtin();
    let policy = RankPolicy {
        allow_partial: true,
        allow_mixed_runs: false,
    };
    let s = summarize_parsed(vec![t.clone()], &opts(&c, policy))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (t, s)
}

/// Every file parses, its steps are its own markers, and exclusive times sum to the step.
fn check_steps_match_annotations(files: &[PathBuf]) {
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
    for f in files {
        let (t, s) = summarize_one(f);
        let r = &s.ranks[0];
        assert!(!r.steps.is_empty(), "{}: no steps", f.display());
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

fn check_unclassified_under_one_percent(path: &Path) {
    let (_, s) = summarize_one(path);
    let share = s.unclassified_share();
    assert!(s.kernel_time_us > 0.0, "{}", path.display());
    assert!(
        share < 0.01,
        "{}: {:.2}% unclassified: {:?}",
        path.display(),
        share * 100.0,
        s.unclassified
    );
}

#[test]
fn every_fixture_parses_and_its_steps_match_its_annotations() {
    let files: Vec<PathBuf> = FIXTURES
        .iter()
        .map(|f| common::fixture(&format!("public/{f}")))
        .collect();
    common::fixture("public/NOTICE");
    check_steps_match_annotations(&files);
}

#[test]
fn fixture_llm_traces_leave_under_one_percent_unclassified() {
    for name in ["sglang_Qwen3-8B_decode.json.gz", "graph_execution.json.gz"] {
        check_unclassified_under_one_percent(&common::fixture(&format!("public/{name}")));
    }
}

#[test]
fn known_answers_on_the_fixtures() {
    // SGLang decode with HIP-graph replay: one decode step whose 544 kernels share one launch;
    // the 463 ms stall before the forward pass is cut, leaving the ~10 ms step.
    let (_, s) = summarize_one(&common::fixture("public/sglang_Qwen3-8B_decode.json.gz"));
    let r = &s.ranks[0];
    assert_eq!((r.steps.len(), r.steps[0].kind), (1, StepKind::Decode));
    assert!(r.steps[0].graph_ops >= 544, "{}", r.steps[0].graph_ops);
    assert!(
        (9_000.0..12_000.0).contains(&r.step_time.median),
        "{}",
        r.step_time.median
    );
    assert!(r.steps[0].stall_us > 400_000.0);
    // What the trace shows of its scenario: one rank, batch 32, KV length 32785 over 32
    // sequences = context 1023.5 (the new token excluded).
    let inf = infer_scenario(&s);
    assert_eq!(inf.ranks.as_ref().unwrap().value, 1);
    assert_eq!(inf.batch.as_ref().unwrap().value, 32);
    assert!((inf.context.as_ref().unwrap().value - 1023.53).abs() < 0.01);
    assert!(inf.layers.is_none());

    // vLLM FULL-graph decode: batch 32 from execute_32_..._generation_32(...).
    let (_, s) = summarize_one(&common::fixture("public/graph_execution.json.gz"));
    assert_eq!(s.ranks[0].steps[0].kind, StepKind::Decode);
    assert_eq!(infer_scenario(&s).batch.unwrap().value, 32);

    // Old schema: "Kernel" category, lowercase "external id", rank from distributedInfo.
    let (t, s) = summarize_one(&common::fixture("public/inference_rank_1.json.gz"));
    assert_eq!(t.gpu_ops.len(), 4);
    assert_eq!(s.ranks[0].rank, 1);

    // One Inductor pointwise kernel on an A100.
    let (t, s) = summarize_one(&common::fixture("public/triton_example.json.gz"));
    assert_eq!(t.gpu_ops.len(), 1);
    assert_eq!(s.ranks[0].step_source, StepSource::ProfilerStep);
}

fn pair() -> [PathBuf; 2] {
    [
        common::fixture("public/sampled_rank-0.json.gz"),
        common::fixture("public/sampled_rank-1.json.gz"),
    ]
}

#[test]
fn the_public_rank_pair_aligns_when_partial_ranks_are_allowed() {
    let c = Classifier::builtin();
    let policy = RankPolicy {
        allow_partial: true,
        allow_mixed_runs: false,
    };
    let s = decodesim::accounting::summarize(&pair(), &opts(&c, policy)).unwrap();
    assert_eq!(s.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), [0, 1]);
    assert!(s.alignment.aligned > 0);
    for r in &s.ranks {
        for st in r.selected_steps() {
            let b = &st.breakdown;
            let comm = st.breakdown.busy_us[Category::Communication.index()];
            assert!(b.comm_wait_us >= 0.0 && b.comm_transfer_us >= 0.0);
            // Wait + transfer is the rank's collective kernel time (summed; at least the union).
            assert!(
                b.comm_wait_us + b.comm_transfer_us + 1e-6 >= comm,
                "{} < {comm}",
                b.comm_wait_us + b.comm_transfer_us
            );
        }
    }
    assert_eq!(infer_scenario(&s).ranks.unwrap().value, 128);
}

#[test]
fn two_ranks_of_a_128_rank_job_are_refused_by_default() {
    let c = Classifier::builtin();
    let err =
        decodesim::accounting::summarize(&pair(), &opts(&c, RankPolicy::default())).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, TraceError::PartialRanks { .. }), "{msg}");
    assert!(
        msg.contains("world_size is 128")
            && msg.contains("2 rank file(s)")
            && msg.contains("--allow-partial-ranks"),
        "{msg}"
    );
}

// ---- the whole shared folder: extra coverage, run with --include-ignored ----

#[test]
#[ignore = "needs ../shared/traces/public beside the checkout; run with --include-ignored"]
fn every_shared_trace_parses_and_its_steps_match_its_annotations() {
    let files = all_traces(&common::shared(SHARED));
    assert!(
        files.len() >= 19,
        "expected the 19 public traces, found {}",
        files.len()
    );
    check_steps_match_annotations(&files);
}

#[test]
#[ignore = "needs ../shared/traces/public beside the checkout; run with --include-ignored"]
fn shared_llm_inference_traces_leave_under_one_percent_unclassified() {
    let dir = common::shared(SHARED);
    for name in LLM {
        check_unclassified_under_one_percent(&dir.join(name));
    }
}

#[test]
#[ignore = "needs ../shared/traces/public beside the checkout; run with --include-ignored"]
fn known_answers_on_shared_traces() {
    let dir = common::shared(SHARED);
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

    // NCCL training trace: 3 ProfilerSteps with all-reduce kernels classified as communication.
    let (_, s) = summarize_one(&dir.join("nccl_data.json.gz"));
    assert_eq!(s.ranks[0].steps.len(), 3);
    assert!(s.breakdown.busy_us[Category::Communication.index()] > 0.0);
}
