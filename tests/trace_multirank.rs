//! Multi-rank accounting on a synthetic vLLM-like decode trace whose answer is known.

mod common;

use decodesim::accounting::align::AlignMethod;
use decodesim::accounting::{summarize, SummaryOptions};
use decodesim::category::Category;
use decodesim::trace::classify::Classifier;
use decodesim::trace::rank::{RankPolicy, RankSource};
use decodesim::trace::steps::{StepKind, StepSource, WindowSource};

fn opts(c: &Classifier) -> SummaryOptions<'_> {
    SummaryOptions {
        classifier: c,
        step_marker: None,
        top_unclassified: 10,
        ranks: RankPolicy::default(),
    }
}

fn partial(c: &Classifier) -> SummaryOptions<'_> {
    SummaryOptions {
        ranks: RankPolicy {
            allow_partial: true,
            allow_mixed_runs: false,
        },
        ..opts(c)
    }
}

#[test]
fn two_ranks_wait_and_transfer_split_by_alignment() {
    let skews = [0.0, 25.0];
    let dir = common::scratch("two_ranks");
    common::write_ranks(&dir, &skews, 3, false);
    let c = Classifier::builtin();
    let s = summarize(&[dir], &opts(&c)).unwrap();

    assert_eq!(s.ranks.len(), 2);
    assert_eq!(s.alignment.method, AlignMethod::PerStep);
    assert_eq!((s.alignment.aligned, s.alignment.unmatched), (3, 0));
    for (r, rank) in s.ranks.iter().enumerate() {
        assert_eq!(rank.rank as usize, r);
        assert_eq!(rank.rank_source, RankSource::FileName);
        assert_eq!(rank.step_source, StepSource::VllmExecute);
        assert_eq!(rank.steps.len(), 4, "1 prefill + 3 decode");
        assert_eq!(rank.steps[0].kind, StepKind::Prefill);
        assert!(!rank.steps[0].selected);
        assert_eq!(rank.step_time.n, 3);
        assert_eq!(rank.selection, "decode");
        assert_eq!(
            rank.events.skipped_early, 9,
            "python_function, flow and metadata events"
        );
        let [step, gemm, norm, comm, idle, attn, moe, wait] = common::expected(r, &skews);
        for st in rank.selected_steps() {
            assert_eq!(st.window, WindowSource::Correlation);
            assert_eq!((st.linked_ops, st.graph_ops), (5, 5));
            let b = &st.breakdown;
            let near = |a: f64, e: f64| (a - e).abs() < 1e-6;
            assert!(
                near(b.step_time_us, step),
                "rank {r}: step {} vs {step}",
                b.step_time_us
            );
            assert!(near(b.time(Category::Gemm), gemm));
            assert!(near(b.time(Category::Norm), norm));
            assert!(near(b.time(Category::Communication), comm));
            assert!(near(b.time(Category::Idle), idle));
            assert!(near(b.time(Category::Attention), attn));
            assert!(near(b.time(Category::Moe), moe));
            assert!(near(b.busy_us[Category::Attention.index()], 50.0));
            assert!(
                near(b.comm_wait_us, wait),
                "rank {r} wait {}",
                b.comm_wait_us
            );
            assert!(near(b.comm_transfer_us, common::TRANSFER));
            // Invariants: exclusive times sum to the step; wait + transfer is the comm time.
            assert!(near(b.exclusive_us.iter().sum::<f64>(), b.step_time_us));
            assert!(near(
                b.comm_wait_us + b.comm_transfer_us,
                b.busy_us[Category::Communication.index()]
            ));
        }
    }
    // Across ranks: one transfer time; the early rank waits, the late one does not.
    let (r0, r1) = (&s.ranks[0].breakdown, &s.ranks[1].breakdown);
    assert!((r0.comm_transfer_us - r1.comm_transfer_us).abs() < 1e-9);
    assert!((r0.comm_wait_us - 25.0).abs() < 1e-9 && r1.comm_wait_us.abs() < 1e-9);
    assert_eq!(s.unclassified_us, 0.0);
}

#[test]
fn distributed_info_wins_over_file_names_and_single_rank_is_not_split() {
    let skews = [10.0, 0.0];
    let dir = common::scratch("dist_info");
    let paths = common::write_ranks(&dir, &skews, 2, true);
    let c = Classifier::builtin();
    let s = summarize(&paths, &opts(&c)).unwrap();
    assert!(s
        .ranks
        .iter()
        .all(|r| r.rank_source == RankSource::DistributedInfo));
    assert!((s.ranks[1].breakdown.comm_wait_us - 10.0).abs() < 1e-9);

    let one = summarize(&paths[..1], &partial(&c)).unwrap();
    assert_eq!(one.alignment.method, AlignMethod::SingleRank);
    let b = &one.breakdown;
    assert_eq!(b.comm_wait_us, 0.0);
    assert!((b.comm_transfer_us - b.busy_us[Category::Communication.index()]).abs() < 1e-9);
}

#[test]
fn different_step_counts_align_over_the_whole_trace() {
    let skews = [0.0, 5.0];
    let dir = common::scratch("uneven");
    let a = common::write_ranks(&dir.join("a"), &skews, 3, true);
    let b = common::write_ranks(&dir.join("b"), &skews, 2, true);
    let c = Classifier::builtin();
    let s = summarize(&[a[0].clone(), b[1].clone()], &opts(&c)).unwrap();
    assert_eq!(s.alignment.method, AlignMethod::WholeTrace);
    assert_eq!((s.alignment.aligned, s.alignment.unmatched), (2, 1));
}

#[test]
fn one_rank_of_two_is_refused_unless_allowed() {
    let dir = common::scratch("missing_rank");
    let paths = common::write_ranks(&dir, &[0.0, 5.0], 2, true);
    std::fs::remove_file(&paths[1]).unwrap();
    let c = Classifier::builtin();
    // The folder now holds rank 0 of a 2-rank run only.
    let err = summarize(std::slice::from_ref(&dir), &opts(&c))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rank0")
            && err.contains("world_size is 2")
            && err.contains("missing rank(s) 1")
            && err.contains("--allow-partial-ranks"),
        "{err}"
    );
    assert!(summarize(&[dir], &partial(&c)).is_ok());
}

#[test]
fn ranks_of_different_runs_are_refused_unless_allowed() {
    let c = Classifier::builtin();
    // Different world sizes: rank 0 of a 2-rank run, rank 1 of a 4-rank run.
    let dir = common::scratch("mixed_world");
    let two = common::write_ranks(&dir.join("two"), &[0.0, 0.0], 1, true);
    let four = common::write_ranks(&dir.join("four"), &[0.0, 0.0, 0.0, 0.0], 1, true);
    let err = summarize(&[two[0].clone(), four[1].clone()], &opts(&c))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("different runs")
            && err.contains("world_size")
            && err.contains("--allow-mixed-runs"),
        "{err}"
    );
    // Profilers started an hour apart (baseTimeNanoseconds).
    let dir = common::scratch("mixed_time");
    let mut paths = Vec::new();
    for (r, base) in [(0usize, 1.7e18), (1, 1.7e18 + 3.6e12)] {
        let mut doc = common::synth_trace(r, &[0.0, 0.0], 1, true);
        doc["baseTimeNanoseconds"] = serde_json::json!(base);
        let p = dir.join(format!("run_rank{r}.json"));
        std::fs::write(&p, serde_json::to_vec(&doc).unwrap()).unwrap();
        paths.push(p);
    }
    let err = summarize(&paths, &opts(&c)).unwrap_err().to_string();
    assert!(
        err.contains("run_rank0.json")
            && err.contains("run_rank1.json")
            && err.contains("3600 s apart"),
        "{err}"
    );
    let allow = SummaryOptions {
        ranks: RankPolicy {
            allow_partial: false,
            allow_mixed_runs: true,
        },
        ..opts(&c)
    };
    assert!(summarize(&paths, &allow).is_ok());
}

#[test]
fn one_file_passed_twice_is_refused() {
    let dir = common::scratch("twice");
    let paths = common::write_ranks(&dir, &[0.0, 0.0], 1, false);
    let c = Classifier::builtin();
    // The same path twice, and the same path through another spelling.
    let again = dir.join(".").join(paths[0].file_name().unwrap());
    for second in [paths[0].clone(), again] {
        let err = summarize(&[paths[0].clone(), second], &opts(&c))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("same trace") && err.contains("passed twice"),
            "{err}"
        );
    }
    // A copy under another name: identical contents.
    let copy = dir.join("copy_rank1.json.gz");
    std::fs::copy(&paths[0], &copy).unwrap();
    let err = summarize(&[paths[0].clone(), copy], &opts(&c))
        .unwrap_err()
        .to_string();
    assert!(err.contains("identical contents"), "{err}");
}
